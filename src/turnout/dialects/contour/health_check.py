"""Contour's active HTTP health check and its defaults (`internal/envoy/healthcheck.go`,
unchanged since v0.6), for HTTPProxy's `healthCheckPolicy` and IngressRoute's `healthCheck`.

A number left at 0 takes Contour's default: interval 10 s, timeout 2 s, 3 failures, 2 passes;
`host` defaults to `contour-envoy-healthcheck`. (The Route kind follows its seed's defaults,
not these.)
"""

from __future__ import annotations

from turnout.graph.model import HTTPHealthCheck

DEFAULT_HOST = "contour-envoy-healthcheck"
DEFAULT_INTERVAL_S = 10
DEFAULT_TIMEOUT_S = 2
DEFAULT_UNHEALTHY = 3
DEFAULT_HEALTHY = 2


def contour_http_health_check(
    path: str,
    host: str = "",
    interval_seconds: int = 0,
    timeout_seconds: int = 0,
    unhealthy_threshold: int = 0,
    healthy_threshold: int = 0,
    expected_statuses: tuple[tuple[int, int], ...] = (),
) -> HTTPHealthCheck:
    """Contour's HTTP health check, with its defaults for what is left empty or at 0."""
    return HTTPHealthCheck(
        path=path,
        host=host or DEFAULT_HOST,
        interval_s=float(interval_seconds or DEFAULT_INTERVAL_S),
        timeout_s=float(timeout_seconds or DEFAULT_TIMEOUT_S),
        unhealthy_threshold=unhealthy_threshold or DEFAULT_UNHEALTHY,
        healthy_threshold=healthy_threshold or DEFAULT_HEALTHY,
        expected_statuses=expected_statuses,
    )

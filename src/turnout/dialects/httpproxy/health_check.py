"""HTTPProxy active HTTP health checks: `routes[].healthCheckPolicy` and `services[].healthPort`.

- `healthCheckPolicy{path, host, intervalSeconds, timeoutSeconds, unhealthyThresholdCount,
  healthyThresholdCount, expectedStatuses[{start, end}]}` is one `HTTPHealthCheck` on every
  service of the route (mirrors included, as in Contour), so on each of their clusters. A number
  left at 0 takes Contour's default (`dialects.contour.health_check`, shared with IngressRoute's
  `healthCheck`).
- `expectedStatuses` are half-open ranges checked as Contour's `httpHealthCheckPolicy` does, with
  its `RouteError`/`HealthCheckPolicyInvalid` messages; an invalid range drops the proxy's routes.
- `healthPort` sends the checks to another port of the Service (`UpstreamSettings.health_port`):
  the resolver finds that port's target on each endpoint (from the same EndpointSlice) and Envoy
  checks there (`Endpoint.health_check_config.port_value`), while traffic keeps going to `port`.
  A health port the Service does not have is `ServiceUnresolvedReference`, as in Contour. Without
  a `healthCheckPolicy` the field has no effect (Contour ignores it too) and gets an
  `IgnoredField` warning; the same holds for tcpproxy services and their TCP check.

Schema checks (types, required `path`, non-negative numbers, Envoy's upper bounds) are made while
reading and reported as `SpecError`/`FieldNotValid`, like the rest of `spec.py`'s reader.

`spec.py` imports this module, so nothing here imports `spec.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.contour.health_check import contour_http_health_check
from turnout.dialects.fields import MAX_DURATION_SECONDS, MAX_UINT32
from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD, ROUTE_ERROR, SPEC_ERROR
from turnout.dialects.httpproxy.upstream import Reader, WarningReader
from turnout.graph.model import HTTPHealthCheck, UpstreamSettings

ROUTE_FIELDS = frozenset({"healthCheckPolicy"})
SERVICE_FIELDS = frozenset({"healthPort"})
_POLICY_FIELDS = frozenset(
    {
        "path",
        "host",
        "intervalSeconds",
        "timeoutSeconds",
        "unhealthyThresholdCount",
        "healthyThresholdCount",
        "expectedStatuses",
    }
)
_STATUS_FIELDS = frozenset({"start", "end"})

HEALTH_CHECK_POLICY_INVALID = "HealthCheckPolicyInvalid"


@dataclass(frozen=True, slots=True)
class HealthCheckPolicySpec:
    """`routes[].healthCheckPolicy` as written; 0 means "Contour's default" for every number."""

    path: str
    host: str = ""
    interval_seconds: int = 0
    timeout_seconds: int = 0
    unhealthy_threshold: int = 0
    healthy_threshold: int = 0
    expected_statuses: tuple[tuple[int, int], ...] = ()
    field: str = ""


# --- reading ---------------------------------------------------------------------------------


def read_health_port(r: Reader, m: Mapping[str, Any], path: str) -> int:
    """`services[].healthPort` (0 when unset); the CRD allows 1-65535."""
    port = r.integer(m, "healthPort", path)
    if port and not 1 <= port <= 65535:
        r.error(f"{path}.healthPort: must be in the range 1-65535, got {port}")
        return 0
    return port


def read_route_health_check(
    r: WarningReader, m: Mapping[str, Any], path: str, services: Iterable[Any]
) -> HealthCheckPolicySpec | None:
    """The route's `healthCheckPolicy`, and what the route's services' `healthPort` asks for.
    `services` are `spec.ServiceSpec`s (their `health_port`, `port` and `field`)."""
    policy: HealthCheckPolicySpec | None = None
    if m.get("healthCheckPolicy") is not None:
        policy = _policy(r, m["healthCheckPolicy"], f"{path}.healthCheckPolicy")
    for svc in services:
        if not svc.health_port:
            continue
        if m.get("healthCheckPolicy") is None:
            _warn(
                r,
                f'ignoring field "{svc.field}.healthPort"; it only applies with the route\'s '
                "healthCheckPolicy",
            )
    return policy


def warn_tcp_health_ports(r: WarningReader, services: Iterable[Any], checked: bool) -> None:
    """tcpproxy services: `healthPort` only matters with the tcpproxy's `healthCheckPolicy`."""
    if checked:
        return
    for svc in services:
        if svc.health_port:
            _warn(
                r,
                f'ignoring field "{svc.field}.healthPort"; it only applies with the tcpproxy\'s '
                "healthCheckPolicy",
            )


def health_port(spec_port: int, health: int, checked: bool) -> int | None:
    """The Service port that receives a service's health checks when it is not its traffic
    port (`UpstreamSettings.health_port`); None otherwise."""
    return health if checked and health and health != spec_port else None


def _warn(r: WarningReader, message: str) -> None:
    r.problems.append(Problem(SPEC_ERROR, IGNORED_FIELD, message, warning=True))


def _policy(r: Reader, value: Any, path: str) -> HealthCheckPolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _POLICY_FIELDS)
    statuses: list[tuple[int, int]] = []
    for where, item in r.items(m, "expectedStatuses", path):
        sm = r.mapping(item, where)
        if sm is None:
            continue
        r.check_fields(sm, where, _STATUS_FIELDS)
        # Ranges are checked while compiling, with Contour's messages.
        statuses.append(
            (
                r.integer(sm, "start", where, required=True),
                r.integer(sm, "end", where, required=True),
            )
        )
    return HealthCheckPolicySpec(
        # Envoy refuses a health check without a path.
        path=r.string(m, "path", path, required=True),
        host=r.string(m, "host", path),
        interval_seconds=_bounded(r, m, "intervalSeconds", path, MAX_DURATION_SECONDS),
        timeout_seconds=_bounded(r, m, "timeoutSeconds", path, MAX_DURATION_SECONDS),
        unhealthy_threshold=_bounded(r, m, "unhealthyThresholdCount", path, MAX_UINT32),
        healthy_threshold=_bounded(r, m, "healthyThresholdCount", path, MAX_UINT32),
        expected_statuses=tuple(statuses),
        field=path,
    )


def _bounded(r: Reader, m: Mapping[str, Any], key: str, path: str, maximum: int) -> int:
    # Contour passes a negative number on (Envoy then refuses the cluster) and wraps a threshold
    # above uint32; both are refused here instead.
    value = r.integer(m, key, path)
    if not 0 <= value <= maximum:
        r.error(f"{path}.{key}: must be in the range 0-{maximum}, got {value}")
        return 0
    return value


# --- compiling -----------------------------------------------------------------------------------


def expected_statuses_error(ranges: Iterable[tuple[int, int]]) -> str | None:
    """Contour's `httpHealthCheckPolicy` checks of `expectedStatuses`, first failure wins."""
    for start, end in ranges:
        if not 100 <= start <= 599:
            return "invalid expected status range: start must be in the range [100, 599]"
        if not 101 <= end <= 600:
            return "invalid expected status range: end must be in the range [101, 600]"
        if start >= end:
            # Envoy refuses an empty range, and with it the whole cluster update.
            return "invalid expected status range: start must be less than end"
    return None


def compile_health_check(spec: HealthCheckPolicySpec | None) -> HTTPHealthCheck | str | None:
    """The route's check; the `HealthCheckPolicyInvalid` message when it is invalid."""
    if spec is None:
        return None
    error = expected_statuses_error(spec.expected_statuses)
    if error is not None:
        return error
    return contour_http_health_check(
        spec.path,
        spec.host,
        spec.interval_seconds,
        spec.timeout_seconds,
        spec.unhealthy_threshold,
        spec.healthy_threshold,
        spec.expected_statuses,
    )


def route_health_check_error(spec: HealthCheckPolicySpec | None) -> tuple[str, str, str] | None:
    """The route's `RouteError`/`HealthCheckPolicyInvalid`, or None."""
    compiled = compile_health_check(spec)
    if isinstance(compiled, str):
        return (ROUTE_ERROR, HEALTH_CHECK_POLICY_INVALID, compiled)
    return None


def with_health_check(
    settings: UpstreamSettings,
    spec: HealthCheckPolicySpec | None,
    port: int = 0,
    health: int = 0,
) -> UpstreamSettings:
    """`settings` with the route's check (already validated by `route_health_check_error`),
    sent to the service's `healthPort` `health` when it is not its `port`."""
    compiled = compile_health_check(spec)
    if not isinstance(compiled, HTTPHealthCheck):
        return settings
    return dataclasses.replace(
        settings, health_check=compiled, health_port=health_port(port, health, True)
    )

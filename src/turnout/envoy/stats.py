"""Which Envoy statistics exist: every cluster costs Envoy a few hundred counters, gauges and
histograms, and at thousands of clusters they are most of its memory. Trimmed (the default),
Envoy keeps everything that is not per-cluster and, per cluster, the statistics that say how its
traffic and endpoints are doing (docs/observability.md lists them)."""

from __future__ import annotations

import enum
from typing import Any


class EnvoyStats(enum.StrEnum):
    TRIMMED = "trimmed"
    ALL = "all"


# Every statistic whose name does not start with "cluster." (listeners, HTTP connection managers,
# the server, xDS, cluster_manager). A regular expression, because a prefix list would silently
# drop a statistic family a future Envoy adds; RE2 has no negative lookahead, hence the spelling.
NOT_PER_CLUSTER = r"(?:[^c]|c[^l]|cl[^u]|clu[^s]|clus[^t]|clust[^e]|cluste[^r]|cluster[^.]).*"

# The per-cluster statistics kept: requests and their outcome classes, latency, connections,
# endpoint health and the xDS update counters.
KEPT_PER_CLUSTER: tuple[str, ...] = (
    "upstream_rq_total",
    "upstream_rq_1xx",
    "upstream_rq_2xx",
    "upstream_rq_3xx",
    "upstream_rq_4xx",
    "upstream_rq_5xx",
    "upstream_rq_time",
    "upstream_rq_timeout",
    "upstream_rq_retry",
    "upstream_rq_active",
    "upstream_rq_pending_active",
    "upstream_rq_pending_overflow",
    "upstream_cx_total",
    "upstream_cx_active",
    "upstream_cx_connect_fail",
    "upstream_cx_none_healthy",
    "membership_total",
    "membership_healthy",
    "membership_degraded",
    "health_check.healthy",
    "health_check.failure",
    "health_check.network_failure",
    "outlier_detection.ejections_active",
    "lb_healthy_panic",
    "update_success",
    "update_rejected",
)


CONTROL_PLANE_CLUSTER = "turnout_xds"


def stats_config(stats: EnvoyStats) -> dict[str, Any] | None:
    """The bootstrap's `stats_config`, or None to keep Envoy's default (every statistic)."""
    if stats is EnvoyStats.ALL:
        return None
    patterns: list[dict[str, Any]] = [
        {"safe_regex": {"regex": NOT_PER_CLUSTER}},
        # The connection to turnout itself is one cluster, and the one to look at when Envoy
        # gets no configuration (TLS handshakes, connection failures): all of it is kept.
        {"prefix": f"cluster.{CONTROL_PLANE_CLUSTER}."},
    ]
    patterns.extend({"suffix": f".{name}"} for name in KEPT_PER_CLUSTER)
    return {"stats_matcher": {"inclusion_list": {"patterns": patterns}}}

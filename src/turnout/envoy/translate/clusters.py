"""Graph clusters -> EDS Clusters and their ClusterLoadAssignments.

Upstream protocols handled here: HTTP (HTTP/1.1, Envoy's default, so no options) and H2C (HTTP/2
in clear text, via `HttpProtocolOptions.explicit_http_config`). TLS upstreams (TLS, H2) gain their
`UpstreamTlsContext` with the policies issue; until then TLS is sent as plain HTTP/1.1 and H2 as
h2c, which keeps the cluster shape stable so that issue only adds a transport socket. TCP clusters
need no HTTP options.

Load balancing uses the `lb_policy` enum, which is not deprecated and is what Contour sends
(`internal/envoy/v3/cluster.go`): RoundRobin -> ROUND_ROBIN, WeightedLeastRequest ->
LEAST_REQUEST, Random -> RANDOM, and both RequestHash and Cookie -> RING_HASH. The hash itself is
a route's `hash_policy` (the route side of the policies issue); without one, Envoy's ring hash
picks a random host, so a cluster is always usable on its own.

Active health checks are Contour's `httpHealthCheck`: one `HealthCheck` with an HTTP checker. A
check answered with a status outside `expected_statuses` (default: 200 only) marks the host
unhealthy at once, without waiting for `unhealthy_threshold` failures, unless the status is in
`retriable_statuses`; turnout never sets that field, so a 503 takes a host out at the next check,
as seed 002 asks. As in Contour, a cluster with health checks has the panic threshold off (when
every host fails, requests get 503 instead of being spread over failing hosts) and drops a host
removed from its endpoints at once instead of keeping it while it still passes checks. Unlike
Contour, `no_traffic_interval` is the interval too (see `translate_health_check`).
"""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.v3 import http_pb2

from turnout.envoy.translate.common import ads_config_source, duration, pack
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.model import Cluster, HTTPHealthCheck, LoadBalancerStrategy, UpstreamProtocol

HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

_HTTP2_PROTOCOLS = frozenset({UpstreamProtocol.H2C, UpstreamProtocol.H2})

LB_POLICIES: dict[LoadBalancerStrategy, int] = {
    LoadBalancerStrategy.ROUND_ROBIN: cluster_pb2.Cluster.ROUND_ROBIN,
    LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST: cluster_pb2.Cluster.LEAST_REQUEST,
    LoadBalancerStrategy.RANDOM: cluster_pb2.Cluster.RANDOM,
    LoadBalancerStrategy.REQUEST_HASH: cluster_pb2.Cluster.RING_HASH,
    LoadBalancerStrategy.COOKIE: cluster_pb2.Cluster.RING_HASH,
}

# Envoy's own bounds (`health_check.proto`, `HttpHealthCheck::expected_statuses`): status ranges
# must lie within [100, 600), and thresholds are uint32. The graph comes from several dialects and
# one out-of-range value would make Envoy reject the whole cluster update, so values are kept
# inside these bounds here as well.
_MIN_STATUS, _MAX_STATUS = 100, 600
_MAX_UINT32 = 2**32 - 1
_MIN_SECONDS = 0.001


def translate_cluster(cluster: Cluster, options: TranslateOptions) -> Any:
    """An EDS cluster named like the graph cluster; its endpoints come as a separate resource."""
    out = cluster_pb2.Cluster(
        name=cluster.name,
        type=cluster_pb2.Cluster.EDS,
        connect_timeout=duration(options.connect_timeout_s),
        lb_policy=LB_POLICIES[cluster.lb_strategy],
    )
    out.eds_cluster_config.eds_config.CopyFrom(ads_config_source())
    out.eds_cluster_config.service_name = cluster.name
    if cluster.protocol in _HTTP2_PROTOCOLS:
        out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(
            pack(_http2_protocol_options())
        )
    if cluster.health_check is not None:
        out.health_checks.append(translate_health_check(cluster.health_check, cluster.protocol))
        # A Percent of 0 is only sent when the message is present; SetInParent makes it so.
        out.common_lb_config.healthy_panic_threshold.SetInParent()
        out.common_lb_config.healthy_panic_threshold.value = 0.0
        out.ignore_health_on_host_removal = True
    return out


def translate_health_check(hc: HTTPHealthCheck, protocol: UpstreamProtocol) -> Any:
    """One active HTTP health check. No `name`: a cluster has at most one check here, and
    xds-protos 1.85 does not know the field Envoy 1.40 added for several."""
    interval = duration(max(hc.interval_s, _MIN_SECONDS))
    out = health_check_pb2.HealthCheck(
        timeout=duration(max(hc.timeout_s, _MIN_SECONDS)),
        interval=interval,
        # Envoy checks a cluster that has not carried traffic yet only every 60 s, and keeps a
        # check scheduled that way after traffic starts: for the first minute of a new cluster a
        # backend that fails would keep its share of requests. The interval the user wrote is the
        # interval (seed 002); the cost is checks on clusters no request has used yet.
        no_traffic_interval=interval,
    )
    out.unhealthy_threshold.value = min(max(hc.unhealthy_threshold, 1), _MAX_UINT32)
    out.healthy_threshold.value = min(max(hc.healthy_threshold, 1), _MAX_UINT32)
    http = out.http_health_check
    http.path = hc.path or "/"
    if hc.host:
        http.host = hc.host  # empty: Envoy sends the cluster name
    if protocol in _HTTP2_PROTOCOLS:
        # The check must speak the protocol the endpoints speak; HTTP/1.1 is Envoy's default.
        http.codec_client_type = http_pb2.HTTP2
    for start, end in hc.expected_statuses:
        lo, hi = max(start, _MIN_STATUS), min(end, _MAX_STATUS)
        if lo < hi:
            http.expected_statuses.add(start=lo, end=hi)
    return out


def _http2_protocol_options() -> Any:
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    opts.explicit_http_config.http2_protocol_options.SetInParent()
    return opts


def translate_load_assignment(cluster: Cluster) -> Any:
    """The endpoints of `cluster` in one (unnamed) locality, sorted.

    No endpoints gives a CLA without localities: Envoy then answers 503 "no healthy upstream",
    which is what a Service without ready endpoints should do.
    """
    cla = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster.name)
    if not cluster.endpoints:
        return cla
    locality = cla.endpoints.add()
    for ep in sorted(set(cluster.endpoints)):
        lb = endpoint_components_pb2.LbEndpoint()
        lb.endpoint.address.socket_address.address = ep.address
        lb.endpoint.address.socket_address.port_value = ep.port
        locality.lb_endpoints.append(lb)
    return cla

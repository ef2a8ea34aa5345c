"""Graph clusters -> Envoy Clusters and, for EDS clusters, their ClusterLoadAssignments.

**Discovery.** A Service port is an EDS cluster whose endpoints come as a separate resource. An
ExternalName Service (`Cluster.dns_name`) is resolved by Envoy itself: the DNS cluster extension
(`envoy.cluster.dns`, which replaces `STRICT_DNS` plus the deprecated `Cluster.dns_*` fields) with
every address a host, and the name and Service port in the cluster's inline `load_assignment`.

**Protocols.** HTTP is HTTP/1.1, Envoy's default, so no options. H2C and H2 set HTTP/2 explicitly
(`HttpProtocolOptions.explicit_http_config`). TLS and H2 add an `UpstreamTlsContext` transport
socket: ALPN `h2` for H2 (none for TLS, so the server picks HTTP/1.1), TLS 1.2 to 1.3, and an SNI
(see `upstream_sni`). TCP clusters need no HTTP options.

**Upstream validation.** With `Cluster.validation` the context verifies the server's chain against
the CA bundle, inline (`trusted_ca`, so a cluster is complete on its own and needs no SDS round
trip before it warms) or, for the system trust store, the installation's file
(`TranslateOptions.system_ca_file`), and requires one of the subject names as a DNS SAN
(`match_typed_subject_alt_names`, not the deprecated `match_subject_alt_names`) or one of the URI
subject names as a URI SAN (exact). Without validation, TLS is encrypted but unauthenticated, as
in Contour.

**Load balancing** uses the `lb_policy` enum, which is not deprecated and is what Contour sends
(`internal/envoy/v3/cluster.go`): RoundRobin -> ROUND_ROBIN, WeightedLeastRequest ->
LEAST_REQUEST, Random -> RANDOM, and both RequestHash and Cookie -> RING_HASH. The hash itself is
a route's `hash_policy` (the route side of the policies issue); without one, Envoy's ring hash
picks a random host, so a cluster is always usable on its own. Slow start goes into the matching
`round_robin_lb_config` / `least_request_lb_config`; other policies have none in Envoy.

**Active health checks** are Contour's `httpHealthCheck`: one `HealthCheck` with an HTTP checker. A
check answered with a status outside `expected_statuses` (default: 200 only) marks the host
unhealthy at once, without waiting for `unhealthy_threshold` failures, unless the status is in
`retriable_statuses`; turnout never sets that field, so a 503 takes a host out at the next check,
as seed 002 asks. As in Contour, a cluster with health checks has the panic threshold off (when
every host fails, requests get 503 instead of being spread over failing hosts) and drops a host
removed from its endpoints at once instead of keeping it while it still passes checks. Unlike
Contour, `no_traffic_interval` is the interval too (see `translate_health_check`).

**Passive health checks** (`outlier_detection`) eject a host after consecutive 5xx answers (and,
when set, consecutive gateway errors); Envoy's success-rate ejection, on by default, is turned
off so that nothing but the counts the user wrote ejects a host.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Mapping
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.clusters.common.dns.v3 import dns_pb2
from envoy.extensions.clusters.dns.v3 import dns_cluster_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.v3 import http_pb2

from turnout.compile_inputs import DEFAULT_SYSTEM_CA_FILE, RateLimitService
from turnout.envoy.translate.common import ads_config_source, duration, pack
from turnout.envoy.translate.http_filters import JwksCluster, jwks_cluster_name
from turnout.envoy.translate.options import Tracing, TranslateOptions
from turnout.envoy.translate.rate_limit import rate_limit_cluster_name
from turnout.envoy.translate.route_policies import apply_idle_connection_timeout
from turnout.envoy.translate.secrets import transport_socket
from turnout.envoy.translate.tcp import add_tcp_health_check
from turnout.envoy.translate.telemetry import tracing_cluster_name
from turnout.graph.model import (
    CABundle,
    Cluster,
    DnsLookupFamily,
    HTTPHealthCheck,
    LoadBalancerStrategy,
    OutlierDetection,
    SlowStart,
    UpstreamProtocol,
)

HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
DNS_CLUSTER = "envoy.cluster.dns"

_HTTP2_PROTOCOLS = frozenset({UpstreamProtocol.H2C, UpstreamProtocol.H2})
TLS_PROTOCOLS = frozenset({UpstreamProtocol.TLS, UpstreamProtocol.H2})

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
# SNI is a hostname on the wire (RFC 6066): at most 255 bytes, no wildcard.
_MAX_SNI = 255

# Pins a certificate no server can present. Used only when a cluster names a CA bundle the graph
# does not carry (a graph bug): every handshake then fails, where dropping the validation would
# silently accept any server.
_NO_SUCH_SPKI = base64.b64encode(hashlib.sha256(b"turnout: CA bundle missing").digest()).decode()


def translate_cluster(
    cluster: Cluster,
    options: TranslateOptions,
    ca_bundles: Mapping[str, CABundle] | None = None,
) -> Any:
    """The Envoy cluster for `cluster`; `ca_bundles` (by name) holds the bundles that upstream
    validation names (`RoutingGraph.ca_bundles`)."""
    connect_timeout = cluster.connect_timeout_s
    out = cluster_pb2.Cluster(
        name=cluster.name,
        connect_timeout=duration(
            connect_timeout
            if connect_timeout and connect_timeout > 0
            else options.connect_timeout_s
        ),
        lb_policy=LB_POLICIES[cluster.lb_strategy],
    )
    if cluster.source_address is not None:
        bind = out.upstream_bind_config.source_address
        bind.address, bind.port_value = cluster.source_address, 0
    if cluster.dns_name is not None:
        _dns_discovery(out, cluster)
    else:
        out.type = cluster_pb2.Cluster.EDS
        out.eds_cluster_config.eds_config.CopyFrom(ads_config_source())
        out.eds_cluster_config.service_name = cluster.name
    if cluster.protocol in _HTTP2_PROTOCOLS:
        out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(
            pack(_http2_protocol_options())
        )
    if cluster.protocol in TLS_PROTOCOLS:
        out.transport_socket.CopyFrom(
            upstream_tls_transport_socket(
                cluster, ca_bundles or {}, system_ca_file=options.system_ca_file
            )
        )
    if cluster.health_check is not None:
        out.health_checks.append(translate_health_check(cluster.health_check, cluster.protocol))
        # A Percent of 0 is only sent when the message is present; SetInParent makes it so.
        out.common_lb_config.healthy_panic_threshold.SetInParent()
        out.common_lb_config.healthy_panic_threshold.value = 0.0
        out.ignore_health_on_host_removal = True
    if cluster.tcp_health_check is not None:
        add_tcp_health_check(out, cluster.tcp_health_check)
    if cluster.outlier_detection is not None:
        out.outlier_detection.CopyFrom(translate_outlier_detection(cluster.outlier_detection))
    if cluster.slow_start is not None:
        _slow_start(out, cluster.slow_start)
    if cluster.hash_balance_factor is not None:
        # Bounded loads only mean something to the hashing balancers (ring hash, Maglev).
        config = out.common_lb_config.consistent_hashing_lb_config
        config.hash_balance_factor.value = min(max(cluster.hash_balance_factor, 100), 2**32 - 1)
    apply_idle_connection_timeout(out, cluster)  # route_policies.py: timeoutPolicy.idleConnection
    return out


def _dns_discovery(out: Any, cluster: Cluster, family: int = dns_pb2.V4_PREFERRED) -> None:
    dns = dns_cluster_pb2.DnsCluster(
        # "localhost"-like names often resolve to ::1 first while servers bind IPv4 only.
        dns_lookup_family=family,
        # Every resolved address is a host, as STRICT_DNS (Contour's choice) does.
        all_addresses_in_single_endpoint=False,
    )
    out.cluster_type.name = DNS_CLUSTER
    out.cluster_type.typed_config.CopyFrom(pack(dns))
    out.load_assignment.cluster_name = cluster.name
    lb = out.load_assignment.endpoints.add().lb_endpoints.add()
    lb.endpoint.address.socket_address.address = cluster.dns_name
    lb.endpoint.address.socket_address.port_value = cluster.port
    if cluster.health_port and cluster.health_port != cluster.port:
        # Active health checks go to the health port of the name, as they go to the health
        # target of each EDS endpoint (`translate_load_assignment`).
        lb.endpoint.health_check_config.port_value = cluster.health_port


def upstream_sni(cluster: Cluster) -> str | None:
    """The server name sent to a TLS upstream: the validation's explicit SNI, else the
    ExternalName, else the first subject name to be validated, else the Service's DNS name
    (`service.namespace.svc`, which resolves in any cluster whatever its domain). None when no
    candidate is a hostname (a wildcard or an IP address cannot be a server name)."""
    candidates: list[str | None] = []
    if cluster.validation is not None:
        candidates.append(cluster.validation.sni)
    candidates.append(cluster.dns_name)
    if cluster.validation is not None:
        candidates.extend(cluster.validation.subject_names[:1])
    if cluster.service and cluster.namespace:
        candidates.append(f"{cluster.service}.{cluster.namespace}.svc")
    for name in candidates:
        if name and "*" not in name and len(name.encode()) <= _MAX_SNI and not _is_ip(name):
            return name
    return None


def _is_ip(name: str) -> bool:
    # RFC 6066: a server name is a hostname; IP literals are not sent.
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def upstream_tls_context(
    cluster: Cluster,
    ca_bundles: Mapping[str, CABundle],
    *,
    system_ca_file: str = DEFAULT_SYSTEM_CA_FILE,
) -> Any:
    """The TLS context towards `cluster`'s endpoints; a validation against the system trust
    store reads `system_ca_file` (`TranslateOptions.system_ca_file`) where Envoy runs."""
    ctx = tls_pb2.UpstreamTlsContext()
    sni = upstream_sni(cluster)
    if sni is not None:
        ctx.sni = sni
    common = ctx.common_tls_context
    # Envoy's client defaults stop at TLS 1.2; 1.3 is what most servers prefer today.
    common.tls_params.tls_minimum_protocol_version = common_pb2.TlsParameters.TLSv1_2
    common.tls_params.tls_maximum_protocol_version = common_pb2.TlsParameters.TLSv1_3
    if cluster.protocol is UpstreamProtocol.H2:
        common.alpn_protocols.append("h2")
    validation = cluster.validation
    if validation is not None:
        vc = common.validation_context
        bundle = ca_bundles.get(validation.ca_secret)
        if validation.system_trust_store:
            # A file, not `system_root_certs` (added to the API for gRPC's xDS clients, not
            # something Envoy is known to honour): the installation says which CAs are "the
            # system's", the same file as https JWKS servers are checked against.
            vc.trusted_ca.filename = system_ca_file
        elif bundle is None or not bundle.ca_certificates:
            # Envoy refuses SAN matching without a CA, so the pin stands alone.
            vc.verify_certificate_spki.append(_NO_SUCH_SPKI)
            return ctx
        else:
            vc.trusted_ca.inline_string = bundle.ca_certificates
        for name in validation.subject_names:
            san = vc.match_typed_subject_alt_names.add(
                san_type=common_pb2.SubjectAltNameMatcher.DNS
            )
            san.matcher.exact = name
        for uri in validation.subject_uris:
            san = vc.match_typed_subject_alt_names.add(
                san_type=common_pb2.SubjectAltNameMatcher.URI
            )
            san.matcher.exact = uri
    return ctx


def upstream_tls_transport_socket(
    cluster: Cluster,
    ca_bundles: Mapping[str, CABundle],
    *,
    system_ca_file: str = DEFAULT_SYSTEM_CA_FILE,
) -> Any:
    context = upstream_tls_context(cluster, ca_bundles, system_ca_file=system_ca_file)
    return transport_socket(context)


def translate_outlier_detection(od: OutlierDetection) -> Any:
    out = outlier_detection_pb2.OutlierDetection()
    out.consecutive_5xx.value = min(max(od.consecutive_5xx, 1), _MAX_UINT32)
    out.enforcing_consecutive_5xx.value = 100
    if od.consecutive_gateway_errors is not None:
        out.consecutive_gateway_failure.value = min(
            max(od.consecutive_gateway_errors, 1), _MAX_UINT32
        )
        # Envoy counts gateway errors by default but enforces none of them (0%).
        out.enforcing_consecutive_gateway_failure.value = 100
    # Success-rate ejection is on by default (100%); only the consecutive counts should eject.
    out.enforcing_success_rate.value = 0
    out.interval.CopyFrom(duration(max(od.interval_s, _MIN_SECONDS)))
    out.base_ejection_time.CopyFrom(duration(max(od.base_ejection_time_s, _MIN_SECONDS)))
    out.max_ejection_percent.value = min(max(od.max_ejection_percent, 0), 100)
    return out


def _slow_start(out: Any, slow_start: SlowStart) -> None:
    if out.lb_policy == cluster_pb2.Cluster.ROUND_ROBIN:
        config = out.round_robin_lb_config.slow_start_config
    elif out.lb_policy == cluster_pb2.Cluster.LEAST_REQUEST:
        config = out.least_request_lb_config.slow_start_config
    else:
        return  # Envoy has slow start for these two policies only; dialects refuse the others.
    config.slow_start_window.CopyFrom(duration(max(slow_start.window_s, _MIN_SECONDS)))
    # Envoy requires a runtime key; this one is turnout's and never set, so the value is the
    # default. Aggression must be positive (Envoy divides by it).
    config.aggression.default_value = slow_start.aggression if slow_start.aggression > 0 else 1.0
    config.aggression.runtime_key = "turnout.slow_start.aggression"
    config.min_weight_percent.value = float(min(max(slow_start.min_weight_percent, 0), 100))


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


def has_load_assignment(cluster: Cluster) -> bool:
    """Whether `cluster` takes its endpoints over EDS (DNS clusters carry their own)."""
    return cluster.dns_name is None


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
        if ep.health_port and ep.health_port != ep.port:
            # Active health checks (HTTP or TCP) go to this port instead (Contour's healthPort).
            lb.endpoint.health_check_config.port_value = ep.health_port
        locality.lb_endpoints.append(lb)
    return cla


# Contour's `dnsLookupFamily` values as Envoy's (Contour's own mapping, envoy/v3/cluster.go).
_DNS_FAMILIES = {
    DnsLookupFamily.DEFAULT: dns_pb2.V4_PREFERRED,
    DnsLookupFamily.AUTO: dns_pb2.AUTO,
    DnsLookupFamily.V4: dns_pb2.V4_ONLY,
    DnsLookupFamily.V6: dns_pb2.V6_ONLY,
    DnsLookupFamily.ALL: dns_pb2.ALL,
}


def jwks_cluster(
    key: JwksCluster, options: TranslateOptions, ca_bundles: Mapping[str, CABundle] | None = None
) -> Any:
    """The cluster Envoy's JWT filter fetches a key set from (`http_filters.jwks_cluster_name`):
    static for an IP address, DNS otherwise. Over https the server's certificate must chain to
    the validation's CA bundle and carry one of its subject names (Contour's `validation`), or
    else to `options.system_ca_file` and name the host (a DNS SAN, or an IP SAN for an address):
    a key set from an unauthenticated server would let whoever answers in its place mint valid
    tokens."""
    host, port = key.host, key.port
    family = _DNS_FAMILIES[key.dns_lookup_family]
    out = _host_port_cluster(jwks_cluster_name(key), host, port, options, family)
    if key.tls:
        ctx = tls_pb2.UpstreamTlsContext()
        common = ctx.common_tls_context
        common.tls_params.tls_minimum_protocol_version = common_pb2.TlsParameters.TLSv1_2
        common.tls_params.tls_maximum_protocol_version = common_pb2.TlsParameters.TLSv1_3
        vc = common.validation_context
        if key.validation is not None:
            bundle = (ca_bundles or {}).get(key.validation.ca_secret)
            if bundle is None or not bundle.ca_certificates:
                vc.verify_certificate_spki.append(_NO_SUCH_SPKI)  # fail closed
            else:
                vc.trusted_ca.inline_string = bundle.ca_certificates
                for name in key.validation.subject_names:
                    san = vc.match_typed_subject_alt_names.add(
                        san_type=common_pb2.SubjectAltNameMatcher.DNS
                    )
                    san.matcher.exact = name
            if not _is_ip(host):
                ctx.sni = host
        else:
            vc.trusted_ca.filename = options.system_ca_file
            if _is_ip(host):
                san_type = common_pb2.SubjectAltNameMatcher.IP_ADDRESS
            else:
                ctx.sni = host
                san_type = common_pb2.SubjectAltNameMatcher.DNS
            vc.match_typed_subject_alt_names.add(san_type=san_type).matcher.exact = host
        out.transport_socket.CopyFrom(transport_socket(ctx))
    return out


def tracing_cluster(tracing: Tracing, options: TranslateOptions) -> Any:
    """The cluster Envoy's OpenTelemetry tracer exports spans through: OTLP/gRPC, so HTTP/2
    (in clear text, as collectors listen on 4317 by default)."""
    name = tracing_cluster_name(tracing)
    out = _host_port_cluster(name, tracing.collector_host, tracing.collector_port, options)
    out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(
        pack(_http2_protocol_options())
    )
    return out


def rate_limit_cluster(service: RateLimitService, options: TranslateOptions) -> Any:
    """The cluster Envoy's ratelimit filter asks the rate limit service through: gRPC, so
    HTTP/2 in clear text (h2c, as Contour's `protocol: h2c` extension services)."""
    name = rate_limit_cluster_name(service)
    out = _host_port_cluster(name, service.host, service.port, options)
    out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(
        pack(_http2_protocol_options())
    )
    return out


def _host_port_cluster(
    name: str, host: str, port: int, options: TranslateOptions, family: int = dns_pb2.V4_PREFERRED
) -> Any:
    """A cluster of one `host`:`port` that turnout's settings name: static for an IP address,
    DNS otherwise."""
    out = cluster_pb2.Cluster(name=name, connect_timeout=duration(options.connect_timeout_s))
    if _is_ip(host):
        out.type = cluster_pb2.Cluster.STATIC
        out.load_assignment.cluster_name = name
        lb = out.load_assignment.endpoints.add().lb_endpoints.add()
        lb.endpoint.address.socket_address.address = host
        lb.endpoint.address.socket_address.port_value = port
    else:
        _dns_discovery(out, Cluster(name, "", "", port, dns_name=host), family)
    return out

"""Graph TCP proxies -> filter chains with Envoy's `tcp_proxy` network filter.

A TCP proxy on a TLS listener is chosen by SNI (`filter_chain_match.server_names`, read by the
listener's `tls_inspector`), like a TLS virtual host:
- TLS passthrough (`TCPProxy.tls` None): no transport socket; the client's TLS bytes go to the
  upstream untouched, so the client sees (and verifies) the backend's own certificate;
- TLS termination: the chain decrypts with the host's certificate (and checks client certificates
  when asked), then streams the plain bytes to the upstream. No ALPN is offered: the stream is not
  HTTP.

The upstream is one cluster, or several split by weight per connection. As Contour does, an idle
connection is closed after 9001 s (Envoy's default is one hour; long-lived connections such as
database sessions are what TCP proxying is for).
"""

from __future__ import annotations

from typing import Any

from envoy.config.core.v3 import health_check_pb2
from envoy.config.listener.v3 import listener_components_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2

from turnout.envoy.translate.client_validation import downstream_context
from turnout.envoy.translate.common import duration, pack
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.secrets import transport_socket
from turnout.envoy.translate.telemetry import access_logs
from turnout.graph.model import TCPHealthCheck, TCPProxy

TCP_PROXY_FILTER = "envoy.filters.network.tcp_proxy"
TCP_IDLE_TIMEOUT_S = 9001.0
_MAX_UINT32 = 2**32 - 1
_MIN_SECONDS = 0.001


def tcp_chain_name(hostname: str) -> str:
    return f"tcp/{hostname.lower()}"


def tcp_proxy_filter(proxy: TCPProxy, stat_prefix: str, options: TranslateOptions) -> Any | None:
    """The `tcp_proxy` filter for `proxy`; None when no cluster can take a connection.

    Weight 0 means no connections (Envoy refuses a zero weight, so such clusters are left out).
    """
    clusters = [wc for wc in proxy.clusters if wc.weight > 0]
    if not clusters:
        return None
    config = tcp_proxy_pb2.TcpProxy(stat_prefix=stat_prefix)
    if len(clusters) == 1:
        config.cluster = clusters[0].cluster
    else:
        for wc in clusters:
            config.weighted_clusters.clusters.add(
                name=wc.cluster, weight=min(wc.weight, _MAX_UINT32)
            )
    config.idle_timeout.CopyFrom(duration(TCP_IDLE_TIMEOUT_S))
    config.access_log.extend(access_logs(options.access_log))
    return listener_components_pb2.Filter(name=TCP_PROXY_FILTER, typed_config=pack(config))


def tcp_filter_chain(proxy: TCPProxy, *, stat_prefix: str, options: TranslateOptions) -> Any | None:
    """The filter chain serving `proxy` on a TLS listener, or None when it cannot be served
    (no name to match, or no cluster that takes connections)."""
    hostname = proxy.hostname.lower()
    if not hostname or hostname == "*":
        return None  # SNI routing needs a name
    tcp = tcp_proxy_filter(proxy, stat_prefix, options)
    if tcp is None:
        return None
    chain = listener_components_pb2.FilterChain(name=tcp_chain_name(hostname), filters=[tcp])
    chain.filter_chain_match.server_names.append(hostname)
    if proxy.tls is not None:
        context = downstream_context(proxy.tls, alpn=False)
        chain.transport_socket.CopyFrom(transport_socket(context))
    return chain


def add_tcp_health_check(cluster: Any, hc: TCPHealthCheck) -> None:
    """A TCP connect check on `cluster` (Contour's `tcpHealthCheck`: an empty payload, so a host
    that accepts the connection is healthy), with the panic threshold off and removed hosts
    dropped at once, as for HTTP checks."""
    check = health_check_pb2.HealthCheck(
        timeout=duration(max(hc.timeout_s, _MIN_SECONDS)),
        interval=duration(max(hc.interval_s, _MIN_SECONDS)),
        # Without it Envoy checks a cluster that has carried no connection yet only every 60 s.
        no_traffic_interval=duration(max(hc.interval_s, _MIN_SECONDS)),
    )
    check.unhealthy_threshold.value = min(max(hc.unhealthy_threshold, 1), _MAX_UINT32)
    check.healthy_threshold.value = min(max(hc.healthy_threshold, 1), _MAX_UINT32)
    check.tcp_health_check.SetInParent()
    cluster.health_checks.append(check)
    cluster.common_lb_config.healthy_panic_threshold.SetInParent()
    cluster.common_lb_config.healthy_panic_threshold.value = 0.0
    cluster.ignore_health_on_host_removal = True

"""Graph listeners -> Envoy Listeners (and the RouteConfigurations they load over RDS).

Each listener protocol has one builder in `_BUILDERS`:
- HTTP: one HTTP connection manager, one RouteConfiguration named like the listener holding every
  virtual host;
- HTTPS (Contour's layout): a `tls_inspector`, then one filter chain per TLS virtual host, chosen
  by SNI (`server_names`), terminating TLS with the host's certificate from SDS, with its own HTTP
  connection manager and its own RouteConfiguration `https/<hostname>`.
TLS passthrough and TCP are added by later issues as further builders; until then listeners of
those protocols are skipped and produce no resources.

Misdirected requests (421). A client may reuse a TLS connection for another host (HTTP/2
connection coalescing, or a plain mistake); the Host then disagrees with the SNI that chose the
filter chain, and the request must not be served by the other host's routes under this host's
certificate and policies. Contour adds a Lua filter to every chain that compares `:authority`
with the SNI. turnout needs no script: each chain's RouteConfiguration holds its own virtual host
plus a catch-all virtual host (`*`) whose only route answers 421, so any Host other than the
chain's own lands there. For a wildcard chain (`*.example.com`), Envoy would pick that wildcard
for `www.example.com` even when `www.example.com` has its own chain; such more specific hostnames
of the same listener are listed on the 421 virtual host too, and Envoy's domain precedence (exact,
then the longest wildcard) sends them to it. Unlike Contour, a wildcard chain serves every host
its virtual host matches, not only the SNI itself: that is the same virtual host with the same
certificate and policies, so nothing is crossed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import address_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.envoy.translate.common import ads_config_source, pack
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import translate_route_configuration
from turnout.envoy.translate.secrets import tls_transport_socket
from turnout.graph.model import Listener, ListenerProtocol, VirtualHost

HCM_FILTER = "envoy.filters.network.http_connection_manager"
ROUTER_FILTER = "envoy.filters.http.router"
STDOUT_ACCESS_LOG = "envoy.access_loggers.stdout"
TLS_INSPECTOR = "envoy.filters.listener.tls_inspector"

MISDIRECTED_STATUS = 421
# Virtual host and route names contain "/" so they can never be mistaken for a hostname.
MISDIRECTED_VHOST = "turnout/misdirected"
MISDIRECTED_ROUTE = "turnout/misdirected-request"


@dataclass(frozen=True, slots=True)
class ListenerResources:
    """What one graph listener becomes: the Envoy Listener and the route tables it refers to."""

    listener: Any  # envoy.config.listener.v3.Listener
    route_configurations: tuple[Any, ...] = ()  # envoy.config.route.v3.RouteConfiguration


def translate_listener(listener: Listener, options: TranslateOptions) -> ListenerResources | None:
    """The resources for one graph listener, or None when its protocol is not translated yet."""
    builder = _BUILDERS.get(listener.protocol)
    return builder(listener, options) if builder is not None else None


def _http_listener(listener: Listener, options: TranslateOptions) -> ListenerResources:
    # Contour's layout: one RouteConfiguration per plain-HTTP listener, named like the listener,
    # holding every virtual host of that listener.
    route_config_name = listener.name
    hcm = http_connection_manager(
        stat_prefix=options.stat_prefix + listener.name,
        route_config_name=route_config_name,
        options=options,
    )
    out = listener_pb2.Listener(name=listener.name, address=socket_address(listener))
    out.filter_chains.append(
        listener_components_pb2.FilterChain(
            filters=[listener_components_pb2.Filter(name=HCM_FILTER, typed_config=pack(hcm))]
        )
    )
    routes = translate_route_configuration(route_config_name, listener.virtual_hosts)
    return ListenerResources(listener=out, route_configurations=(routes,))


def https_route_name(hostname: str) -> str:
    """The RouteConfiguration of one TLS virtual host, named as Contour names it."""
    return f"https/{hostname.lower()}"


def _https_listener(listener: Listener, options: TranslateOptions) -> ListenerResources | None:
    vhosts = _tls_virtual_hosts(listener)
    if not vhosts:
        # A listener without filter chains is rejected by Envoy; with no TLS host there is
        # nothing to serve, so the port stays closed.
        return None
    out = listener_pb2.Listener(name=listener.name, address=socket_address(listener))
    out.listener_filters.append(
        listener_components_pb2.ListenerFilter(
            name=TLS_INSPECTOR, typed_config=pack(tls_inspector_pb2.TlsInspector())
        )
    )
    shadowing = _more_specific_hostnames([vh.hostname.lower() for vh in vhosts])
    route_configs = []
    for vh in vhosts:
        assert vh.tls is not None
        hostname = vh.hostname.lower()
        name = https_route_name(hostname)
        hcm = http_connection_manager(
            stat_prefix=options.stat_prefix + listener.name,
            route_config_name=name,
            options=options,
        )
        chain = listener_components_pb2.FilterChain(
            name=name,
            filters=[listener_components_pb2.Filter(name=HCM_FILTER, typed_config=pack(hcm))],
            transport_socket=tls_transport_socket(vh.tls),
        )
        chain.filter_chain_match.server_names.append(hostname)
        out.filter_chains.append(chain)
        config = translate_route_configuration(name, (vh,))
        config.virtual_hosts.append(misdirected_virtual_host(shadowing.get(hostname, ())))
        route_configs.append(config)
    return ListenerResources(listener=out, route_configurations=tuple(route_configs))


def _tls_virtual_hosts(listener: Listener) -> list[VirtualHost]:
    """The virtual hosts that can have a filter chain, in the graph's order.

    A host without TLS has no certificate to present, and `*` is no SNI name; both are dropped
    (the graph builder never puts them here). A repeated hostname would make Envoy reject the
    listener for two chains with one match; like a repeated domain in a route table, the first
    one stays.
    """
    seen: set[str] = set()
    out = []
    for vh in listener.virtual_hosts:
        hostname = vh.hostname.lower()
        if vh.tls is None or hostname == "*" or hostname in seen:
            continue
        seen.add(hostname)
        out.append(vh)
    return out


def _more_specific_hostnames(hostnames: list[str]) -> dict[str, tuple[str, ...]]:
    """For each wildcard `*.suffix`, the other hostnames that Envoy would match against a more
    specific domain (exact, or a longer wildcard) than it: they belong to other chains.

    Indexed by suffix, so the cost grows with the number of labels, not hosts times wildcards.
    """
    under: dict[str, list[str]] = {}
    for hostname in hostnames:
        labels = hostname.split(".")
        for i in range(1, len(labels)):
            under.setdefault(".".join(labels[i:]), []).append(hostname)
    out: dict[str, tuple[str, ...]] = {}
    for hostname in hostnames:
        if not hostname.startswith("*."):
            continue
        others = tuple(sorted(h for h in under.get(hostname[2:], ()) if h != hostname))
        if others:
            out[hostname] = others
    return out


def misdirected_virtual_host(domains: tuple[str, ...] = ()) -> Any:
    """A virtual host answering 421 for every Host it is chosen for: `*` plus `domains`."""
    route = rc.Route(name=MISDIRECTED_ROUTE)
    route.match.prefix = "/"
    route.direct_response.status = MISDIRECTED_STATUS
    route.direct_response.body.inline_string = "Misdirected Request"
    return rc.VirtualHost(name=MISDIRECTED_VHOST, domains=["*", *domains], routes=[route])


_BUILDERS: dict[
    ListenerProtocol, Callable[[Listener, TranslateOptions], ListenerResources | None]
] = {
    ListenerProtocol.HTTP: _http_listener,
    ListenerProtocol.HTTPS: _https_listener,
}


def http_connection_manager(
    *, stat_prefix: str, route_config_name: str, options: TranslateOptions
) -> Any:
    """An HCM that loads `route_config_name` over ADS and ends in the router filter.

    `normalize_path` makes `/a/../b` match routes for `/b` as the evaluator assumes;
    `use_remote_address` because Envoy is the edge: it sets X-Forwarded-For and decides
    internal/external from the peer address rather than from client-supplied headers.
    """
    hcm = hcm_pb2.HttpConnectionManager(stat_prefix=stat_prefix)
    hcm.rds.config_source.CopyFrom(ads_config_source())
    hcm.rds.route_config_name = route_config_name
    hcm.normalize_path.value = True
    hcm.use_remote_address.value = True
    hcm.http_filters.append(
        hcm_pb2.HttpFilter(name=ROUTER_FILTER, typed_config=pack(router_pb2.Router()))
    )
    if options.access_log:
        hcm.access_log.append(
            accesslog_pb2.AccessLog(
                name=STDOUT_ACCESS_LOG, typed_config=pack(stream_pb2.StdoutAccessLog())
            )
        )
    return hcm


def socket_address(listener: Listener) -> Any:
    address = address_pb2.Address()
    address.socket_address.address = listener.address
    address.socket_address.port_value = listener.port
    return address

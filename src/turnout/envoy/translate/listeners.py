"""Graph listeners -> Envoy Listeners (and the RouteConfigurations they load over RDS).

Each listener protocol has one builder in `_BUILDERS`:
- HTTP: one HTTP connection manager, one RouteConfiguration named like the listener holding every
  virtual host;
- HTTPS (Contour's layout): a `tls_inspector`, then one filter chain per TLS virtual host, chosen
  by SNI (`server_names`), terminating TLS with the host's certificate from SDS (and checking
  client certificates when the host asks, `client_validation`), with its own HTTP connection
  manager and its own RouteConfiguration `https/<hostname>`; one chain per TCP proxy, also by
  SNI, passing the TLS stream through or terminating it (`tcp`); and, when hosts enable the
  fallback certificate, a chain for every other TLS client (`_fallback_chain`).
- TLS (Gateway API TLS listeners, any port): the HTTPS layout; in practice its chains are the TCP
  proxies of its TLSRoutes, by SNI, passed through or terminated;
- TCP (Gateway API TCP listeners, any port): one chain, the `tcp_proxy` of the listener's TCP
  proxy (the one whose hostname is ""), with no TLS inspection.

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
certificate and policies, so nothing is crossed. A Gateway listener's chain follows the Gateway
API's `Listener.hostname` rules instead: 421 only for a Host another listener of the port matches,
the listener's own answer (404) for a Host none does. Which domains get 421 is decided in
`graph.sni` (`misdirected_domains`, `fallback_table`), which the evaluator reads too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envoy.config.core.v3 import address_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.compile_inputs import ListenerProtocol
from turnout.envoy.translate.client_validation import downstream_context
from turnout.envoy.translate.common import ads_config_source, pack
from turnout.envoy.translate.http_filters import policy_http_filters
from turnout.envoy.translate.memo import TLSGroupPart, TranslateMemo
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.route_policies import lua_http_filter
from turnout.envoy.translate.routes import translate_route_configuration
from turnout.envoy.translate.secrets import transport_socket
from turnout.envoy.translate.tcp import tcp_filter_chain, tcp_proxy_filter
from turnout.envoy.translate.telemetry import access_logs, hcm_tracing
from turnout.graph.model import ExternalAuthorization, Listener, TLSTermination, VirtualHost
from turnout.graph.sni import (
    MISDIRECTED_STATUS,
    fallback_table,
    misdirected_domains,
    more_specific_hostnames,
    tls_virtual_hosts,
)

HCM_FILTER = "envoy.filters.network.http_connection_manager"
ESCAPED_SLASHES_ACTION = hcm_pb2.HttpConnectionManager.PathWithEscapedSlashesAction
ROUTER_FILTER = "envoy.filters.http.router"
TLS_INSPECTOR = "envoy.filters.listener.tls_inspector"

# Contour's names for the chain and the route table serving clients without SNI.
FALLBACK_CHAIN = "fallback-certificate"
FALLBACK_ROUTE_CONFIG = "ingress_fallbackcert"

# Virtual host and route names contain "/" so they can never be mistaken for a hostname.
MISDIRECTED_VHOST = "turnout/misdirected"
MISDIRECTED_ROUTE = "turnout/misdirected-request"


@dataclass(frozen=True, slots=True)
class ListenerResources:
    """What one graph listener becomes: the Envoy Listener and the route tables it refers to."""

    listener: Any  # envoy.config.listener.v3.Listener
    route_configurations: tuple[Any, ...] = ()  # envoy.config.route.v3.RouteConfiguration
    scoped_routes: tuple[Any, ...] = ()  # envoy.config.route.v3.ScopedRouteConfiguration


def translate_listener(
    listener: Listener, options: TranslateOptions, memo: TranslateMemo | None = None
) -> ListenerResources | None:
    """The resources for one graph listener, or None when its protocol is not translated yet.
    `memo` keeps each virtual host's translation for the next call (`TranslateMemo`)."""
    builder = _BUILDERS.get(listener.protocol)
    return builder(listener, options, memo) if builder is not None else None


def _http_listener(
    listener: Listener, options: TranslateOptions, memo: TranslateMemo | None = None
) -> ListenerResources:
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
    routes = translate_route_configuration(
        route_config_name, listener.virtual_hosts, options.matcher_tree_min_routes, memo
    )
    return ListenerResources(listener=out, route_configurations=(routes,))


def https_route_name(hostname: str, listener: str = "ingress_https") -> str:
    """The RouteConfiguration of one TLS virtual host, named as Contour names it on the shared
    HTTPS listener; on another listener (a Gateway API port) prefixed with the listener's name,
    since one hostname may be served on several ports."""
    if listener == "ingress_https":
        return f"https/{hostname.lower()}"
    return f"{listener}/https/{hostname.lower()}"


def _https_listener(
    listener: Listener, options: TranslateOptions, memo: TranslateMemo | None = None
) -> ListenerResources | None:
    """The TLS listener: one filter chain per SNI name (a TLS virtual host, or a TCP proxy with
    or without termination), and the fallback-certificate chain when some host enables it."""
    vhosts = tls_virtual_hosts(listener)
    # One chain per server name: each TLS host (Contour), or each Gateway listener's hosts.
    groups: dict[str, list[VirtualHost]] = {}
    for vh in vhosts:
        groups.setdefault((vh.sni or vh.hostname).lower(), []).append(vh)
    taken = set(groups)
    stat_prefix = options.stat_prefix + listener.name
    tcp_chains = []
    for proxy in listener.tcp_proxies:
        hostname = proxy.hostname.lower()
        if hostname in taken:
            continue  # two chains with one match would make Envoy reject the listener
        chain = tcp_filter_chain(proxy, stat_prefix=stat_prefix, options=options)
        if chain is not None:
            taken.add(hostname)
            tcp_chains.append(chain)
    if not vhosts and not tcp_chains:
        # A listener without filter chains is rejected by Envoy; with no TLS host there is
        # nothing to serve, so the port stays closed.
        return None
    out = listener_pb2.Listener(name=listener.name, address=socket_address(listener))
    out.listener_filters.append(
        listener_components_pb2.ListenerFilter(
            name=TLS_INSPECTOR, typed_config=pack(tls_inspector_pb2.TlsInspector())
        )
    )
    # TCP hosts have chains of their own too: a wildcard chain's Host check must send them to 421.
    shadowing = more_specific_hostnames(sorted(taken))
    served_names = taken | {vh.hostname.lower() for vh in vhosts}
    route_configs = []
    fallback = _fallback_chain(vhosts, shadowing, stat_prefix, options, memo)
    default_chain = None
    for sni, members in groups.items():
        if sni == "*" and fallback is not None:
            continue  # both would be the chain without server names
        misdirected = misdirected_domains(sni, members, shadowing, served_names)
        chain, config = _tls_group(
            sni,
            members,
            https_route_name(sni, listener.name),
            stat_prefix,
            misdirected,
            options,
            memo,
        )
        if sni == "*":
            default_chain = chain
        else:
            out.filter_chains.append(chain)
        route_configs.append(config)
    out.filter_chains.extend(tcp_chains)
    if default_chain is not None:
        out.filter_chains.append(default_chain)
    if fallback is not None:
        out.filter_chains.append(fallback[0])
        route_configs.append(fallback[1])
    return ListenerResources(listener=out, route_configurations=tuple(route_configs))


def _tls_group(
    sni: str,
    members: Sequence[VirtualHost],
    name: str,
    stat_prefix: str,
    misdirected: tuple[str, ...],
    options: TranslateOptions,
    memo: TranslateMemo | None,
) -> tuple[Any, Any]:
    """The filter chain and the RouteConfiguration of one server name's hosts; a lone host that
    is the very same object as in `memo`'s last translation, in the same place, keeps both."""
    key = members[0] if memo is not None and len(members) == 1 else None
    if key is not None and memo is not None:
        known = memo.tls_groups.get(key)
        if known is not None and (known.name, known.stat_prefix, known.misdirected) == (
            name,
            stat_prefix,
            misdirected,
        ):
            return known.chain, known.config
    tls = members[0].tls
    assert tls is not None
    chain = _http_tls_chain(name, tls, stat_prefix, options, _authorization(members))
    extra = (misdirected_virtual_host(misdirected),) if misdirected else ()
    config = translate_route_configuration(
        name, tuple(members), options.matcher_tree_min_routes, memo, extra
    )
    if sni == "*":
        # A Gateway HTTPS listener without hostname: the chain for every SNI (or none) that
        # no other chain names.
        chain.filter_chain_match.transport_protocol = "tls"
    else:
        chain.filter_chain_match.server_names.append(sni)
    if key is not None and memo is not None:
        memo.tls_groups.put(key, TLSGroupPart(name, stat_prefix, misdirected, chain, config))
    return chain, config


def _authorization(hosts: Sequence[VirtualHost]) -> ExternalAuthorization | None:
    """The external authorization of a chain: its (first) host's that has one. A chain shared
    by hosts without one checks them too (closed rather than open); only the fallback chain and
    a Gateway listener's chain are shared, and no Gateway API route sets authorization."""
    return next(
        (vh.policies.authorization for vh in hosts if vh.policies.authorization is not None), None
    )


def _http_tls_chain(
    route_config_name: str,
    tls: TLSTermination,
    stat_prefix: str,
    options: TranslateOptions,
    authorization: ExternalAuthorization | None = None,
) -> Any:
    """A chain terminating TLS (with client validation when asked) into an HTTP connection
    manager that loads `route_config_name`; the caller sets its match."""
    hcm = http_connection_manager(
        stat_prefix=stat_prefix,
        route_config_name=route_config_name,
        options=options,
        authorization=authorization,
    )
    return listener_components_pb2.FilterChain(
        name=route_config_name,
        filters=[listener_components_pb2.Filter(name=HCM_FILTER, typed_config=pack(hcm))],
        transport_socket=transport_socket(downstream_context(tls)),
    )


def _fallback_chain(
    vhosts: list[VirtualHost],
    shadowing: dict[str, tuple[str, ...]],
    stat_prefix: str,
    options: TranslateOptions,
    memo: TranslateMemo | None = None,
) -> tuple[Any, Any] | None:
    """Contour's fallback-certificate chain: it matches every TLS connection whose SNI no other
    chain names (or that has none), presents the fallback certificate, and serves the hosts that
    enabled it from the RouteConfiguration `ingress_fallbackcert`. Any other Host gets 421, so
    a client retries with SNI on a connection of its own.

    The installation has one fallback certificate; should hosts name several (a graph built by
    hand), the first host's wins and the hosts naming another are left out of the chain.
    """
    table = fallback_table(vhosts, shadowing)
    if table is None:
        return None
    first = table.hosts[0].tls
    assert first is not None and first.fallback_secret is not None
    chain = _http_tls_chain(
        FALLBACK_ROUTE_CONFIG,
        TLSTermination(secret=first.fallback_secret),
        stat_prefix,
        options,
        _authorization(table.hosts),
    )
    chain.name = FALLBACK_CHAIN
    chain.filter_chain_match.transport_protocol = "tls"
    config = translate_route_configuration(
        FALLBACK_ROUTE_CONFIG,
        table.hosts,
        options.matcher_tree_min_routes,
        memo,
        (misdirected_virtual_host(table.misdirected),),
    )
    return chain, config


def misdirected_virtual_host(domains: tuple[str, ...] = ("*",)) -> Any:
    """A virtual host answering 421 for every Host it is chosen for (`domains`)."""
    route = rc.Route(name=MISDIRECTED_ROUTE)
    route.match.prefix = "/"
    route.direct_response.status = MISDIRECTED_STATUS
    route.direct_response.body.inline_string = "Misdirected Request"
    return rc.VirtualHost(name=MISDIRECTED_VHOST, domains=list(domains), routes=[route])


def _tcp_listener(
    listener: Listener, options: TranslateOptions, memo: TranslateMemo | None = None
) -> ListenerResources | None:
    """A plain TCP listener: every connection goes to its TCP proxy (the first one without a
    hostname; SNI means nothing here). Without one, or when it has no backend that takes
    connections, the port stays closed: connections are refused, which is how the Gateway API
    wants a TCP listener without valid backends to reject them."""
    proxy = next((p for p in listener.tcp_proxies if not p.hostname), None)
    if proxy is None:
        return None
    tcp = tcp_proxy_filter(proxy, options.stat_prefix + listener.name, options)
    if tcp is None:
        return None
    out = listener_pb2.Listener(name=listener.name, address=socket_address(listener))
    out.filter_chains.append(listener_components_pb2.FilterChain(name="tcp", filters=[tcp]))
    return ListenerResources(listener=out)


_BUILDERS: dict[
    ListenerProtocol,
    Callable[[Listener, TranslateOptions, TranslateMemo | None], ListenerResources | None],
] = {
    ListenerProtocol.HTTP: _http_listener,
    ListenerProtocol.HTTPS: _https_listener,
    ListenerProtocol.TLS_PASSTHROUGH: _https_listener,
    ListenerProtocol.TCP: _tcp_listener,
}


def http_connection_manager(
    *,
    stat_prefix: str,
    route_config_name: str,
    options: TranslateOptions,
    authorization: ExternalAuthorization | None = None,
) -> Any:
    """An HCM that loads `route_config_name` over ADS and ends in the router filter.

    `normalize_path` makes `/a/../b` match routes for `/b`, `merge_slashes` `//b` too, and
    `path_with_escaped_slashes_action` decides `/%2Fb` (redirected to `/b` by default), so that no
    spelling of a path reaches a backend through a route other than the one the path names
    (docs/policies.md, "Path normalisation"; the evaluator follows the same `options.paths`);
    `use_remote_address` because Envoy is the edge: it sets X-Forwarded-For and decides
    internal/external from the peer address rather than from client-supplied headers, unless
    `num_trusted_hops` proxies in front of it are trusted to report the client's. The policy
    filters (`http_filters`) run before the router, idle until a route table configures them.
    """
    hcm = hcm_pb2.HttpConnectionManager(stat_prefix=stat_prefix)
    hcm.rds.config_source.CopyFrom(ads_config_source())
    hcm.rds.route_config_name = route_config_name
    hcm.normalize_path.value = True
    hcm.merge_slashes = options.paths.merge_slashes
    hcm.path_with_escaped_slashes_action = ESCAPED_SLASHES_ACTION.Value(
        options.paths.escaped_slashes.name
    )
    # `Host: a.example.com.` is the same name as `a.example.com`: without this it would miss the
    # owner's virtual host and fall to another namespace's `*` one (the evaluator strips it too).
    hcm.strip_trailing_host_dot = True
    hcm.use_remote_address.value = True
    hcm.xff_num_trusted_hops = options.num_trusted_hops
    hcm.http_filters.extend(
        policy_http_filters(options.jwt_providers, options.rate_limit_service, authorization)
    )
    # Idle too until a route names a cookie-rewriting script (`route_policies.py`).
    hcm.http_filters.append(lua_http_filter())
    hcm.http_filters.append(
        hcm_pb2.HttpFilter(name=ROUTER_FILTER, typed_config=pack(router_pb2.Router()))
    )
    hcm.access_log.extend(access_logs(options.access_log))
    if options.tracing is not None:
        hcm.tracing.CopyFrom(hcm_tracing(options.tracing))
    return hcm


def socket_address(listener: Listener) -> Any:
    address = address_pb2.Address()
    address.socket_address.address = listener.address
    address.socket_address.port_value = listener.port
    return address

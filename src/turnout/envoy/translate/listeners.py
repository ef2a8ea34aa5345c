"""Graph listeners -> Envoy Listeners (and the RouteConfigurations they load over RDS).

Each listener protocol has one builder in `_BUILDERS`. Only plain HTTP is translated so far:
HTTPS (one filter chain per SNI name with its own RouteConfiguration, Contour's layout), TLS
passthrough and TCP are added by later issues as further builders; until then listeners of those
protocols are skipped and produce no resources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import address_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.envoy.translate.common import ads_config_source, pack
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import translate_route_configuration
from turnout.graph.model import Listener, ListenerProtocol

HCM_FILTER = "envoy.filters.network.http_connection_manager"
ROUTER_FILTER = "envoy.filters.http.router"
STDOUT_ACCESS_LOG = "envoy.access_loggers.stdout"


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


_BUILDERS: dict[ListenerProtocol, Callable[[Listener, TranslateOptions], ListenerResources]] = {
    ListenerProtocol.HTTP: _http_listener,
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

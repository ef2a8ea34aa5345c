"""A large plain-HTTP listener -> scoped RDS: one RouteConfiguration per virtual host.

With one RouteConfiguration holding every virtual host of a listener, a change to one host makes
Envoy rebuild every host's routes (about 0.4-2 s at 10,000 hosts x 5 routes). Scoped RDS gives
each host a `ScopedRouteConfiguration` (the scope, keyed by the host name) naming a
RouteConfiguration of its own; the HTTP connection manager picks the scope from a request header
(`scope_key_builder`) and routes within that scope's table only. A one-host change then sends and
rebuilds that host's RouteConfiguration alone (docs/benchmarks.md, "Envoy's apply time for a
one-host change").

It is used only where it answers every request as the single RouteConfiguration would:

- A scope key is compared exactly, while Envoy's virtual-host lookup lower-cases the Host and
  ignores its port (`ignore_port_in_host_matching`). So the key is not `:authority` itself but
  `SCOPE_KEY_HEADER`, which the first HTTP filter (`SCOPE_KEY_FILTER`, a few lines of Lua) sets on
  every request to the Host lower-cased with the port removed, exactly as Envoy removes it
  (everything after the last `:` unless a `]` follows: `[::1]:80` is `[::1]`). The HCM's
  `strip_trailing_host_dot` has already run. The filter clears the route cache so the scope is
  chosen again from the header, and every scoped RouteConfiguration removes the header before
  the request goes upstream. A client's own header of that name is overwritten.
- Only exact domains can be keys: a listener with a wildcard (`*.example.com`) or catch-all (`*`)
  virtual host keeps the single RouteConfiguration, since a scope cannot fall back to another.
- A Host no scope has answers 404 with no body, as a Host no virtual host has does.
- A listener where anything (a header match, a header policy) names `SCOPE_KEY_HEADER` keeps the
  single RouteConfiguration too.

Hosts whose names differ only in case are one key; the first keeps it, as
`translate_route_configuration` keeps the first of such duplicates.

A host with at least `split_host_min_routes` routes is split further by path (`path_scopes`,
`split_host`): its own scope is then an index whose routes name, in their metadata, the scope of
the request's path directory; the filter reads that metadata after choosing the host's scope and,
when there is some, selects that scope instead. A listener is scoped for such a host even with
fewer than `scoped_routes_min_hosts` hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.compile_inputs import ListenerProtocol
from turnout.envoy.translate.common import ads_config_source, pack
from turnout.envoy.translate.listeners import (
    HCM_FILTER,
    ListenerResources,
    http_connection_manager,
    socket_address,
)
from turnout.envoy.translate.memo import TranslateMemo
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import translate_route_configuration
from turnout.envoy.translate.scope_keys import (
    SCOPE_KEY_FILTER,
    SCOPE_KEY_HEADER,
    SCOPE_METADATA_KEY,
    scope_message,
    scoped_route_name,
)
from turnout.envoy.translate.split_host import split_host_scopes
from turnout.graph.model import Listener, VirtualHost

__all__ = [
    "SCOPE_KEY_FILTER",
    "SCOPE_KEY_HEADER",
    "host_scopes",
    "hosts_by_key",
    "scope_key",
    "scoped_http_listener",
    "scoped_listener_message",
    "scoped_route_name",
    "splits_hosts",
    "uses_scoped_routes",
]

# `scope_key` in Lua. `h:headers():get` returns nil without a Host; "" then matches no scope.
# Then the route's metadata (which makes Envoy find the route in the Host's scope): a split
# host's index names the scope of the path's directory (`split_host`); other tables name none.
_SCOPE_KEY_LUA = f"""function envoy_on_request(h)
  local headers = h:headers()
  local host = headers:get(":authority") or ""
  local colon = host:match("^.*():")
  if colon ~= nil and host:find("]", colon, true) == nil then
    host = host:sub(1, colon - 1)
  end
  headers:replace("{SCOPE_KEY_HEADER}", host:lower())
  h:clearRouteCache()
  local scope = h:metadata():get("{SCOPE_METADATA_KEY}")
  if scope ~= nil then
    headers:replace("{SCOPE_KEY_HEADER}", scope)
    h:clearRouteCache()
  end
end
"""


def scope_key(host: str) -> str:
    """The scope a request's Host selects: lower-cased, without a port (after the last `:`
    unless a `]` follows it, as Envoy's `HeaderUtility::getPortStart` finds it). The Lua filter
    computes the same; `graph.evaluate` selects virtual hosts with the same rule."""
    colon = host.rfind(":")
    if colon >= 0 and host.find("]", colon) < 0:
        host = host[:colon]
    return host.lower()


def uses_scoped_routes(listener: Listener, options: TranslateOptions) -> bool:
    """Whether `listener` is translated to scoped RDS: a plain HTTP listener, none of whose
    virtual hosts is a wildcard, with at least `scoped_routes_min_hosts` of them (0: never) or
    a host to split (`splits_hosts`)."""
    if listener.protocol is not ListenerProtocol.HTTP or any(
        "*" in vh.hostname for vh in listener.virtual_hosts
    ):
        return False
    minimum = options.scoped_routes_min_hosts
    return 0 < minimum <= len(listener.virtual_hosts) or splits_hosts(listener, options)


def splits_hosts(listener: Listener, options: TranslateOptions) -> bool:
    """Whether a virtual host of `listener` has at least `split_host_min_routes` routes (0:
    never), so that it is split into path scopes when the listener is scoped."""
    minimum = options.split_host_min_routes
    return minimum > 0 and any(len(vh.routes) >= minimum for vh in listener.virtual_hosts)


def scoped_http_listener(
    listener: Listener, options: TranslateOptions, memo: TranslateMemo | None = None
) -> ListenerResources | None:
    """The listener with one scope and one RouteConfiguration per virtual host, or None when
    something in its route tables names `SCOPE_KEY_HEADER` (then the caller translates it as a
    single RouteConfiguration). With `memo`, a host that is the very same object as in the
    translation before keeps its messages, so only the changed hosts' tables are new."""
    scopes: list[Any] = []
    configs: list[Any] = []
    for key, vh in hosts_by_key(listener.virtual_hosts):
        pairs = host_scopes(listener.name, key, vh, options, memo)
        if pairs is None:
            return None
        configs.extend(p[0] for p in pairs)
        scopes.extend(p[1] for p in pairs)
    return ListenerResources(
        listener=scoped_listener_message(listener, options),
        route_configurations=tuple(configs),
        scoped_routes=tuple(scopes),
    )


def scoped_listener_message(listener: Listener, options: TranslateOptions) -> Any:
    """The Listener of a scoped listener: a function of its name, address and the options only
    (the hosts are in the scopes), so a patch keeps it while those are unchanged."""
    hcm = scoped_connection_manager(listener.name, options)
    out = listener_pb2.Listener(name=listener.name, address=socket_address(listener))
    out.filter_chains.append(
        listener_components_pb2.FilterChain(
            filters=[listener_components_pb2.Filter(name=HCM_FILTER, typed_config=pack(hcm))]
        )
    )
    return out


def host_scopes(
    listener_name: str,
    key: str,
    vh: VirtualHost,
    options: TranslateOptions,
    memo: TranslateMemo | None = None,
) -> tuple[tuple[Any, Any], ...] | None:
    """The RouteConfigurations and scopes of the host `vh` holding scope `key`: one pair, or a
    split host's index and path scopes (`split_host`); kept in `memo` while `vh` is the very
    same object (and its name the same); None when its table names the key header (see
    `scoped_http_listener`)."""
    name = scoped_route_name(listener_name, key)
    known = memo.scoped_hosts.get(vh) if memo is not None else None
    if memo is not None and known is not None and known[0] == name and len(known[1] or ()) > 1:
        memo.kept_split((listener_name, key))  # a split host's book lives on with it
    if known is None or known[0] != name:
        pairs = split_host_scopes(listener_name, key, vh, options, memo)
        if pairs is None:
            pair = _host_scope(name, key, vh, options)
            pairs = None if pair is None else (pair,)
        known = (name, pairs)
        if memo is not None:
            memo.scoped_hosts.put(vh, known)
    return known[1]


def _host_scope(
    name: str, key: str, vh: VirtualHost, options: TranslateOptions
) -> tuple[Any, Any] | None:
    """The RouteConfiguration and the scope of one host; None when its table names the key
    header (see `scoped_http_listener`)."""
    config = translate_route_configuration(name, (vh,), options.matcher_tree_min_routes)
    if SCOPE_KEY_HEADER.encode() in config.SerializeToString():
        return None
    config.request_headers_to_remove.append(SCOPE_KEY_HEADER)
    return config, scope_message(name, key)


def scoped_connection_manager(listener_name: str, options: TranslateOptions) -> Any:
    """The listener's usual HCM (`http_connection_manager`) choosing its route table by scope:
    scopes named `listener_name` over ADS, keyed by `SCOPE_KEY_HEADER`, which the first filter
    sets (see the module docstring)."""
    hcm = http_connection_manager(
        stat_prefix=options.stat_prefix + listener_name,
        route_config_name=listener_name,
        options=options,
    )
    hcm.ClearField("rds")
    scoped = hcm.scoped_routes
    scoped.name = listener_name
    extractor = scoped.scope_key_builder.fragments.add().header_value_extractor
    extractor.name = SCOPE_KEY_HEADER
    extractor.index = 0  # the whole value: the filter sets exactly one
    scoped.rds_config_source.CopyFrom(ads_config_source())
    scoped.scoped_rds.scoped_rds_config_source.CopyFrom(ads_config_source())
    lua = lua_pb2.Lua()
    lua.default_source_code.inline_string = _SCOPE_KEY_LUA
    key_filter = hcm_pb2.HttpFilter(name=SCOPE_KEY_FILTER, typed_config=pack(lua))
    # First: the filters after it ask for the route (per-route configuration), which must come
    # from the scope the header selects.
    hcm.http_filters.insert(0, key_filter)
    return hcm


def hosts_by_key(virtual_hosts: Sequence[VirtualHost]) -> list[tuple[str, VirtualHost]]:
    """Each virtual host with its scope key, sorted by key; of hosts with one key (names that
    differ in case), the first."""
    out: dict[str, VirtualHost] = {}
    for vh in virtual_hosts:
        out.setdefault(vh.hostname.lower(), vh)
    return sorted(out.items())

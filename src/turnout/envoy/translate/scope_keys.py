"""The names scoped RDS is made of (`scoped_routes`, `split_host`): the request header that
selects a scope, the Lua filter that sets it, and how scopes and their tables are named."""

from __future__ import annotations

from typing import Any

from envoy.config.route.v3 import scoped_route_pb2

__all__ = [
    "SCOPE_KEY_FILTER",
    "SCOPE_KEY_HEADER",
    "SCOPE_METADATA_KEY",
    "scope_message",
    "scoped_route_name",
]

SCOPE_KEY_HEADER = "x-turnout-scope-key"
SCOPE_KEY_FILTER = "turnout.scope_key"
# A split host's index routes name the scope to go on to here, under
# `metadata.filter_metadata[SCOPE_KEY_FILTER]`, where the Lua filter reads route metadata.
SCOPE_METADATA_KEY = "key"


def scoped_route_name(listener: str, hostname: str, path: str = "") -> str:
    """The scope and the RouteConfiguration of one host of a scoped listener (two xDS types,
    one name), or of the path scope `path` of a split host (`split_host`; paths are compared
    case-sensitively, so `path` keeps its case). "/" never occurs in a hostname, so no other
    route configuration is named so."""
    return f"{listener}/{hostname.lower()}{path}"


def scope_message(name: str, key: str) -> Any:
    """The `ScopedRouteConfiguration` `name` selected by the key `key`, naming the
    RouteConfiguration `name`."""
    scope = scoped_route_pb2.ScopedRouteConfiguration(name=name, route_configuration_name=name)
    scope.key.fragments.add().string_key = key
    return scope

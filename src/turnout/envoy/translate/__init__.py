"""The Envoy translator: a pure function from the routing graph to Envoy resources.

`translate(graph)` never looks at a dialect object and never reads the clock or the environment:
the same graph and options give byte-identical resources (`SerializeToString(deterministic=True)`),
each resource type sorted by name.

What is translated today:
- every HTTP listener -> a Listener with one HTTP connection manager using RDS over ADS, and a
  RouteConfiguration named like the listener (see `listeners`);
- every HTTPS listener -> a Listener with one TLS filter chain per SNI name, each with its own
  RouteConfiguration `https/<hostname>` (see `listeners`); TLS passthrough and TCP listeners are
  skipped until their issues land;
- every TLS secret -> an SDS Secret named like it (see `secrets`);
- every cluster -> an EDS Cluster and its ClusterLoadAssignment (see `clusters`).
"""

from __future__ import annotations

from typing import Any

from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate.clusters import translate_cluster, translate_load_assignment
from turnout.envoy.translate.listeners import (
    ListenerResources,
    https_route_name,
    misdirected_virtual_host,
    translate_listener,
)
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import (
    route_name,
    translate_route,
    translate_route_configuration,
    translate_virtual_host,
    wildcard_authority_regex,
)
from turnout.envoy.translate.secrets import downstream_tls_context, translate_secret
from turnout.graph.model import RoutingGraph

__all__ = [
    "ListenerResources",
    "TranslateOptions",
    "downstream_tls_context",
    "https_route_name",
    "misdirected_virtual_host",
    "route_name",
    "translate",
    "translate_cluster",
    "translate_listener",
    "translate_load_assignment",
    "translate_route",
    "translate_route_configuration",
    "translate_secret",
    "translate_virtual_host",
    "wildcard_authority_regex",
]


def translate(graph: RoutingGraph, options: TranslateOptions | None = None) -> EnvoyResources:
    """Translates the whole graph. Pure and deterministic; see the module docstring."""
    opts = options if options is not None else TranslateOptions()
    listeners: list[Any] = []
    routes: list[Any] = []
    for lst in graph.listeners:
        out = translate_listener(lst, opts)
        if out is not None:
            listeners.append(out.listener)
            routes.extend(out.route_configurations)
    clusters = sorted(graph.clusters, key=lambda c: c.name)
    return EnvoyResources(
        clusters=tuple(translate_cluster(c, opts) for c in clusters),
        endpoints=tuple(translate_load_assignment(c) for c in clusters),
        listeners=_by_name(listeners),
        routes=_by_name(routes),
        secrets=tuple(translate_secret(s) for s in sorted(graph.secrets, key=lambda s: s.name)),
    )


def _by_name(messages: list[Any]) -> tuple[Any, ...]:
    # sorted() is stable, so equal names (a graph bug) still come out in the graph's order.
    return tuple(sorted(messages, key=lambda m: str(m.name)))

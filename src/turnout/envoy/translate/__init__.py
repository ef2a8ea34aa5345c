"""The Envoy translator: a pure function from the routing graph to Envoy resources.

`translate(graph)` never looks at a dialect object and never reads the clock or the environment:
the same graph and options give byte-identical resources (`SerializeToString(deterministic=True)`),
each resource type sorted by name.

What is translated today:
- every HTTP listener -> a Listener with one HTTP connection manager using RDS over ADS, and a
  RouteConfiguration named like the listener (see `listeners`); from `scoped_routes_min_hosts`
  virtual hosts, none a wildcard, scoped RDS instead: a scope and a RouteConfiguration per host
  (see `scoped_routes`), and a host with `split_host_min_routes` routes split into scopes by a
  leading path directory (see `path_scopes`, `split_host`), its listener scoped for it;
- every HTTPS listener -> a Listener with one TLS filter chain per SNI name, each with its own
  RouteConfiguration `https/<hostname>`, one chain per SNI-routed TCP proxy (see `tcp`) and the
  fallback-certificate chain (see `listeners`); every TLS listener (Gateway API) the same way,
  and every TCP listener -> a Listener with one `tcp_proxy` chain;
- every TLS secret -> an SDS Secret named like it (see `secrets`), and every client validation
  -> an SDS Secret holding its validation context (see `client_validation`);
- every cluster -> an EDS Cluster and its ClusterLoadAssignment, or a DNS cluster for an
  ExternalName Service (see `clusters`);
- every (issuer, JWKS URI) that routes validate tokens with -> a provider of the JWT filter on
  every HTTP connection manager and a cluster for the JWKS host (see `http_filters`);
- the access log and OpenTelemetry tracing options -> a logger on every HTTP connection manager
  and TCP proxy, the tracer on every HTTP connection manager and a cluster for the collector
  (see `telemetry`);
- the rate limit service option -> the global ratelimit filter on every HTTP connection manager
  and a cluster for the service; virtual hosts' and routes' global rate limits -> their rate
  limit actions (see `rate_limit`).

`translate` never raises. `graph.validate.enforce_envoy_limits` keeps values Envoy would reject out
of the graph, and each piece is translated under a guard in case one still makes protobuf raise:
a route then answers 500 and a virtual host is left out (see `routes`), a listener loses the
virtual hosts whose filter chains cannot be built (or is left out when it fails on its own), a
cluster falls back to a bare cluster without endpoints (or is left out), and a secret is left
out. Each failure is logged once at ERROR; everything else is translated as usual, so one bad
object never costs the others their configuration.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from turnout.envoy.resources import CLUSTER_TYPE, ENDPOINT_TYPE, EnvoyResources
from turnout.envoy.translate.client_validation import (
    client_validation_secrets,
    without_unvalidatable,
)
from turnout.envoy.translate.clusters import (
    jwks_cluster,
    rate_limit_cluster,
    tracing_cluster,
    translate_cluster,
    translate_load_assignment,
)
from turnout.envoy.translate.http_filters import (
    host_jwts,
    jwks_cluster_key,
    jwks_cluster_name,
    sorted_providers,
)
from turnout.envoy.translate.listeners import (
    ListenerResources,
    https_route_name,
    misdirected_virtual_host,
    translate_listener,
)
from turnout.envoy.translate.memo import TranslateMemo
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.patch import patch_translation, record_translation
from turnout.envoy.translate.pieces import cluster_resources, secret_message
from turnout.envoy.translate.routes import (
    log_translation_failure,
    route_name,
    translate_route,
    translate_route_configuration,
    translate_virtual_host,
    wildcard_authority_regex,
)
from turnout.envoy.translate.scoped_routes import scoped_http_listener, uses_scoped_routes
from turnout.envoy.translate.secrets import downstream_tls_context, translate_secret
from turnout.graph.model import (
    CABundle,
    Cluster,
    JwtValidation,
    Listener,
    RoutingGraph,
)

__all__ = [
    "ListenerResources",
    "TranslateMemo",
    "TranslateOptions",
    "cluster_resources",
    "downstream_tls_context",
    "https_route_name",
    "misdirected_virtual_host",
    "retranslate_clusters",
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


def translate(
    graph: RoutingGraph, options: TranslateOptions | None = None, memo: TranslateMemo | None = None
) -> EnvoyResources:
    """Translates the whole graph. Pure, deterministic and total; see the module docstring.

    `memo` (kept by the caller across translations) makes a translation cost what changed since
    the one before: every piece that is the very same object as then keeps its messages
    (`TranslateMemo`), and the common change (hosts of a scoped listener, clusters, Secrets) is
    patched into the last result (`patch`), with the names it changed per type for the xDS
    server (`EnvoyResources.changes`); the resources are byte-identical to a translation
    without it."""
    opts = options if options is not None else TranslateOptions()
    memo = memo if memo is not None else TranslateMemo()
    patched = patch_translation(graph, opts, memo)
    if patched is not None:
        return patched
    given = graph
    graph = without_unvalidatable(graph)  # client validation fails closed
    opts = dataclasses.replace(opts, jwt_providers=_jwt_providers(graph, memo))
    memo.begin(opts)
    listeners: list[Any] = []
    routes: list[Any] = []
    scoped: list[Any] = []
    outputs: dict[str, ListenerResources | None] = {}
    for lst in graph.listeners:
        out = outputs[lst.name] = _listener(lst, opts, memo)
        if out is not None:
            listeners.append(out.listener)
            routes.extend(out.route_configurations)
            scoped.extend(out.scoped_routes)
    ca_bundles = {b.name: b for b in graph.ca_bundles}
    clusters, endpoints = _clusters(graph, opts, ca_bundles, memo)
    clusters.extend(_extra_clusters(opts, ca_bundles))
    by_name = sorted(graph.secrets, key=lambda s: str(s.name))
    secrets = [m for m in (secret_message(s, memo) for s in by_name) if m is not None]
    secrets.extend(client_validation_secrets(graph.listeners, ca_bundles))
    sorted_routes = _by_name(routes)
    resources = EnvoyResources(
        clusters=_by_name(clusters),
        endpoints=tuple(endpoints),
        listeners=_by_name(listeners),
        routes=sorted_routes,
        secrets=_by_name(secrets),
        scoped_routes=_by_name(scoped),
        encoded=memo.encoded_of(sorted_routes),
    )
    if graph is given:  # a graph without hosts dropped here: the patch need not drop them
        record_translation(graph, resources, outputs, memo)
    return resources


def _listener(
    lst: Listener, opts: TranslateOptions, memo: TranslateMemo
) -> ListenerResources | None:
    known = memo.listeners.get(lst)
    if known is None:
        known = memo.listeners.put(lst, (_listener_guarded(lst, opts, memo),))
    out: ListenerResources | None = known[0]
    return out


def _jwt_providers(graph: RoutingGraph, memo: TranslateMemo) -> tuple[JwtValidation, ...]:
    """`jwt_providers(graph)`, each host's share kept by identity."""
    memo.jwts.age()
    found: set[JwtValidation] = set()
    for lst in graph.listeners:
        for vh in lst.virtual_hosts:
            jwts = memo.jwts.get(vh)
            if jwts is None:
                jwts = memo.jwts.put(vh, host_jwts(vh))
            if jwts:
                found |= jwts
    return sorted_providers(found)


def _clusters(
    graph: RoutingGraph,
    opts: TranslateOptions,
    ca_bundles: Mapping[str, CABundle],
    memo: TranslateMemo,
) -> tuple[list[Any], list[Any]]:
    """Every graph cluster's Envoy cluster, and the load assignments of the EDS ones."""
    clusters: list[Any] = []
    endpoints: list[Any] = []
    for cluster in sorted(graph.clusters, key=lambda c: str(c.name)):
        known = memo.clusters.get(cluster)
        if known is None:
            known = memo.clusters.put(cluster, (cluster_resources(cluster, opts, ca_bundles),))
        pair = known[0]
        if pair is not None:
            clusters.append(pair[0])
            if pair[1] is not None:  # DNS clusters carry their endpoints themselves
                endpoints.append(pair[1])
    return clusters, endpoints


def _extra_clusters(opts: TranslateOptions, ca_bundles: Mapping[str, CABundle]) -> list[Any]:
    """The clusters of the JWKS hosts, the tracing collector and the rate limit service."""
    clusters: list[Any] = []
    jwks_keys = {k for k in (jwks_cluster_key(j) for j in opts.jwt_providers) if k is not None}
    for key in sorted(jwks_keys, key=jwks_cluster_name):
        try:
            clusters.append(jwks_cluster(key, opts, ca_bundles))
        except Exception as err:
            log_translation_failure(f"JWKS cluster for {key.host}:{key.port}", err)
    if opts.tracing is not None:
        try:
            clusters.append(tracing_cluster(opts.tracing, opts))
        except Exception as err:
            log_translation_failure("tracing collector cluster", err)
    if opts.rate_limit_service is not None:
        try:
            clusters.append(rate_limit_cluster(opts.rate_limit_service, opts))
        except Exception as err:
            log_translation_failure("rate limit service cluster", err)
    return clusters


def _listener_guarded(
    lst: Listener, opts: TranslateOptions, memo: TranslateMemo | None = None
) -> ListenerResources | None:
    if uses_scoped_routes(lst, opts):
        try:
            scoped = scoped_http_listener(lst, opts, memo)
        except Exception as err:
            # Virtual hosts and routes are guarded inside; the single route table is the
            # fallback for the rest.
            log_translation_failure(f"scoped routes of listener {lst.name!r}", err)
            scoped = None
        if scoped is not None:
            return scoped
    try:
        return translate_listener(lst, opts, memo)
    except Exception as err:
        first_error = err
    # Routes and virtual hosts are guarded inside; what is left is per-host listener state (a
    # filter chain's TLS context) or the listener itself. Find the hosts that fail alone and
    # translate the listener without them.
    kept = []
    for vh in lst.virtual_hosts:
        try:
            translate_listener(dataclasses.replace(lst, virtual_hosts=(vh,)), opts, memo)
        except Exception as err:
            log_translation_failure(f"virtual host {vh.name!r} of {vh.owner}", err)
            continue
        kept.append(vh)
    if len(kept) < len(lst.virtual_hosts):
        try:
            return translate_listener(
                dataclasses.replace(lst, virtual_hosts=tuple(kept)), opts, memo
            )
        except Exception as err:
            first_error = err
    log_translation_failure(f"listener {lst.name!r}", first_error)
    return None


def retranslate_clusters(
    resources: EnvoyResources,
    graph: RoutingGraph,
    clusters: Sequence[Cluster],
    options: TranslateOptions | None = None,
    memo: TranslateMemo | None = None,
) -> EnvoyResources:
    """`resources` (the translation of a graph that differs from `graph` only in the endpoints
    of `clusters`, which are `graph`'s) with those clusters and their load assignments
    translated anew: what `translate(graph)` gives, without translating the rest (the
    endpoints fast path). `memo`, the one `resources` were translated with, learns the new
    clusters' translations."""
    if not clusters:
        return resources
    opts = options if options is not None else TranslateOptions()
    if memo is not None and not _same_options(memo.options, opts):
        memo = None  # made under other options: neither read nor fed
    if memo is not None and memo.options is not None:
        opts = memo.options  # the same, with the JWT providers `translate` found
    ca_bundles = {b.name: b for b in graph.ca_bundles}
    fresh = {str(c.name): cluster_resources(c, opts, ca_bundles) for c in clusters}
    if memo is not None:
        # The next `translate` of a graph with these very Cluster objects reuses them.
        for cluster in clusters:
            memo.clusters.put(cluster, (fresh[str(cluster.name)],))
    out = _replaced(resources.clusters, fresh, lambda m: str(m.name), 0)
    endpoints = _replaced(resources.endpoints, fresh, lambda m: str(m.cluster_name), 1)
    # `_replaced` placed every one by name: the xDS server looks at these names only.
    changes = {
        CLUSTER_TYPE: (resources.clusters, {k: p[0] for k, p in fresh.items() if p is not None}),
        ENDPOINT_TYPE: (
            resources.endpoints,
            {k: p[1] for k, p in fresh.items() if p is not None},
        ),
    }
    return dataclasses.replace(resources, clusters=out, endpoints=endpoints, changes=changes)


def _same_options(memo: TranslateOptions | None, options: TranslateOptions) -> bool:
    """Whether a memo made under `memo` (JWT providers included) fits `options` (whose
    providers `translate` works out from the graph)."""
    return memo is not None and memo == dataclasses.replace(
        options, jwt_providers=memo.jwt_providers
    )


def _replaced(
    messages: tuple[Any, ...],
    fresh: Mapping[str, tuple[Any, Any] | None],
    name: Callable[[Any], str],
    part: int,
) -> tuple[Any, ...]:
    """`messages` (sorted by `name`, as `translate` emits them) with each one named in `fresh`
    replaced by its new translation, found by bisection; a cluster translated to nothing now,
    or one without a message, cannot be placed: ValueError."""
    out = list(messages)
    for key, pair in fresh.items():
        i = bisect.bisect_left(out, key, key=name)
        if i == len(out) or name(out[i]) != key:
            raise ValueError(f"cluster {key!r} had no resource")
        if pair is None or pair[part] is None:
            raise ValueError(f"cluster {key!r} no longer translates")
        out[i] = pair[part]
    return tuple(out)


def _by_name(messages: list[Any]) -> tuple[Any, ...]:
    # sorted() is stable, so equal names (a graph bug) still come out in the graph's order.
    return tuple(sorted(messages, key=lambda m: str(m.name)))

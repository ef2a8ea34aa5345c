"""The Envoy translator: a pure function from the routing graph to Envoy resources.

`translate(graph)` never looks at a dialect object and never reads the clock or the environment:
the same graph and options give byte-identical resources (`SerializeToString(deterministic=True)`),
each resource type sorted by name.

What is translated today:
- every HTTP listener -> a Listener with one HTTP connection manager using RDS over ADS, and a
  RouteConfiguration named like the listener (see `listeners`); from `scoped_routes_min_hosts`
  virtual hosts, none a wildcard, scoped RDS instead: a scope and a RouteConfiguration per host
  (see `scoped_routes`);
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

from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate.client_validation import (
    client_validation_secrets,
    without_unvalidatable,
)
from turnout.envoy.translate.clusters import (
    has_load_assignment,
    jwks_cluster,
    rate_limit_cluster,
    tracing_cluster,
    translate_cluster,
    translate_load_assignment,
)
from turnout.envoy.translate.http_filters import jwks_cluster_key, jwks_cluster_name, jwt_providers
from turnout.envoy.translate.listeners import (
    ListenerResources,
    https_route_name,
    misdirected_virtual_host,
    translate_listener,
)
from turnout.envoy.translate.options import TranslateOptions
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
from turnout.graph.model import CABundle, Cluster, Listener, RoutingGraph

__all__ = [
    "ListenerResources",
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


def translate(graph: RoutingGraph, options: TranslateOptions | None = None) -> EnvoyResources:
    """Translates the whole graph. Pure, deterministic and total; see the module docstring."""
    opts = options if options is not None else TranslateOptions()
    graph = without_unvalidatable(graph)  # client validation fails closed
    providers = jwt_providers(graph)
    opts = dataclasses.replace(opts, jwt_providers=providers)
    listeners: list[Any] = []
    routes: list[Any] = []
    scoped: list[Any] = []
    for lst in graph.listeners:
        out = _listener_guarded(lst, opts)
        if out is not None:
            listeners.append(out.listener)
            routes.extend(out.route_configurations)
            scoped.extend(out.scoped_routes)
    clusters: list[Any] = []
    endpoints: list[Any] = []
    ca_bundles = {b.name: b for b in graph.ca_bundles}
    for cluster in sorted(graph.clusters, key=lambda c: str(c.name)):
        pair = cluster_resources(cluster, opts, ca_bundles)
        if pair is not None:
            clusters.append(pair[0])
            if pair[1] is not None:  # DNS clusters carry their endpoints themselves
                endpoints.append(pair[1])
    jwks_keys = {k for k in (jwks_cluster_key(j) for j in providers) if k is not None}
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
    secrets: list[Any] = []
    for secret in sorted(graph.secrets, key=lambda s: str(s.name)):
        try:
            secrets.append(translate_secret(secret))
        except Exception as err:
            # Only the exception type: the message could quote key material.
            log_translation_failure(f"secret {secret.name!r}", TypeError(type(err).__name__))
    secrets.extend(client_validation_secrets(graph.listeners, ca_bundles))
    return EnvoyResources(
        clusters=_by_name(clusters),
        endpoints=tuple(endpoints),
        listeners=_by_name(listeners),
        routes=_by_name(routes),
        secrets=_by_name(secrets),
        scoped_routes=_by_name(scoped),
    )


def _listener_guarded(lst: Listener, opts: TranslateOptions) -> ListenerResources | None:
    if uses_scoped_routes(lst, opts):
        try:
            scoped = scoped_http_listener(lst, opts)
        except Exception as err:
            # Virtual hosts and routes are guarded inside; the single route table is the
            # fallback for the rest.
            log_translation_failure(f"scoped routes of listener {lst.name!r}", err)
            scoped = None
        if scoped is not None:
            return scoped
    try:
        return translate_listener(lst, opts)
    except Exception as err:
        first_error = err
    # Routes and virtual hosts are guarded inside; what is left is per-host listener state (a
    # filter chain's TLS context) or the listener itself. Find the hosts that fail alone and
    # translate the listener without them.
    kept = []
    for vh in lst.virtual_hosts:
        try:
            translate_listener(dataclasses.replace(lst, virtual_hosts=(vh,)), opts)
        except Exception as err:
            log_translation_failure(f"virtual host {vh.name!r} of {vh.owner}", err)
            continue
        kept.append(vh)
    if len(kept) < len(lst.virtual_hosts):
        try:
            return translate_listener(dataclasses.replace(lst, virtual_hosts=tuple(kept)), opts)
        except Exception as err:
            first_error = err
    log_translation_failure(f"listener {lst.name!r}", first_error)
    return None


def cluster_resources(
    cluster: Cluster, opts: TranslateOptions, ca_bundles: Mapping[str, CABundle]
) -> tuple[Any, Any] | None:
    """The Envoy cluster and (EDS) load assignment of one graph cluster, as `translate` emits
    them; None when even a bare cluster fails."""
    try:
        cla = translate_load_assignment(cluster) if has_load_assignment(cluster) else None
        return translate_cluster(cluster, opts, ca_bundles), cla
    except Exception as err:
        log_translation_failure(f"cluster {cluster.name!r}", err)
    # Routes may still name the cluster: a bare cluster without endpoints answers 503 for them
    # instead of leaving Envoy with a reference to nothing.
    try:
        bare = Cluster(cluster.name, cluster.namespace, cluster.service, cluster.port)
        return translate_cluster(bare, opts), translate_load_assignment(bare)
    except Exception:
        return None


def retranslate_clusters(
    resources: EnvoyResources,
    graph: RoutingGraph,
    clusters: Sequence[Cluster],
    options: TranslateOptions | None = None,
) -> EnvoyResources:
    """`resources` (the translation of a graph that differs from `graph` only in the endpoints
    of `clusters`, which are `graph`'s) with those clusters and their load assignments
    translated anew: what `translate(graph)` gives, without translating the rest (the
    endpoints fast path)."""
    if not clusters:
        return resources
    opts = options if options is not None else TranslateOptions()
    ca_bundles = {b.name: b for b in graph.ca_bundles}
    fresh = {str(c.name): cluster_resources(c, opts, ca_bundles) for c in clusters}
    out = _replaced(resources.clusters, fresh, lambda m: str(m.name), 0)
    endpoints = _replaced(resources.endpoints, fresh, lambda m: str(m.cluster_name), 1)
    return dataclasses.replace(resources, clusters=out, endpoints=endpoints)


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

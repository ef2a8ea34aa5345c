"""Routes to virtual hosts: one virtual host per Route on the HTTP listener.

Each Route is compiled alone; nothing in one Route can change another's routes. Upstreams carry
their load-balancing strategy (route over spec, RoundRobin by default) and their active health
check (upstream over spec) into the cluster settings, so one Service port used with different
settings becomes different clusters.
"""

from __future__ import annotations

from collections.abc import Mapping

from turnout.compile_inputs import HTTP_LISTENER, CompileOptions
from turnout.dialects.contour.order import contour_route_order
from turnout.dialects.contour_route.spec import (
    GROUP,
    KIND,
    ParsedRoute,
    RouteSpec,
    UpstreamSpec,
    parse_route,
    percentages,
)
from turnout.dialects.contour_route.status import RouteStatus
from turnout.graph.dialect import CompileContext, DialectOutput
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Forward,
    LoadBalancerStrategy,
    PathMatch,
    Route,
    RouteAction,
    RouteMatch,
    RouteSource,
    UpstreamSettings,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.services import Unresolved, external_name_phrase
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot


def parse_all(snapshot: Snapshot) -> dict[tuple[str, str], ParsedRoute]:
    return {(o.namespace, o.name): parse_route(o) for o in snapshot.kind(GROUP, KIND)}


def host_allowed(namespace: str, options: CompileOptions) -> bool:
    # Every Route defines a host, so it is a root in the sense of --root-namespaces: a Route must
    # not be a way around the namespaces an operator allows hosts in.
    return not options.root_namespaces or namespace in options.root_namespaces


def claimed_host(route: ParsedRoute, options: CompileOptions) -> str | None:
    """The host a Route claims: a valid one in an allowed namespace, even when other fields are
    invalid, so that a broken edit does not hand the host to a newer object (as for HTTPProxy)."""
    host = route.spec.host
    if host is None or not host_allowed(route.obj.namespace, options):
        return None
    return host


def compile_routes(
    snapshot: Snapshot,
    ctx: CompileContext,
    parsed: Mapping[tuple[str, str], ParsedRoute] | None = None,
) -> DialectOutput:
    routes = parse_all(snapshot) if parsed is None else parsed
    vhosts: list[tuple[str, VirtualHost]] = []
    statuses: list[ObjectStatus] = []
    for key in sorted(routes):
        route = routes[key]
        st = RouteStatus(route.obj, invalid=not route.valid)
        for error in route.errors:
            st.add(error)
        vhost = _virtual_host(snapshot, ctx, route, st)
        if vhost is not None:
            vhosts.append((HTTP_LISTENER, vhost))
        statuses.append(st.build())
    return DialectOutput(virtual_hosts=tuple(vhosts), statuses=tuple(statuses))


def _virtual_host(
    snapshot: Snapshot, ctx: CompileContext, route: ParsedRoute, st: RouteStatus
) -> VirtualHost | None:
    obj = route.obj
    host = route.spec.host
    if host is None:
        return None  # missing or invalid: already reported
    if not host_allowed(obj.namespace, ctx.options):
        st.add(
            f'metadata.namespace: Routes may not define hosts in namespace "{obj.namespace}" '
            f"(allowed: {', '.join(ctx.options.root_namespaces)})"
        )
        return None
    owner = ctx.ownership.owner(HTTP_LISTENER, host)
    if owner is not None and owner.ref != obj.ref:
        # turnout's ownership rule across dialects: the oldest object keeps the host.
        st.add(
            f'spec.host: "{host}" is already owned by {owner.kind} {owner.namespace}/{owner.name}'
        )
        return None
    if not route.valid:
        return None
    spec = route.spec
    compiled = [
        Route(
            RouteMatch(path=PathMatch.prefix(r.path_prefix)),
            _action(snapshot, ctx, route, r, st),
            RouteSource(obj.ref, r.field),
        )
        for r in spec.routes
    ]
    return VirtualHost(
        name=host,
        hostname=host,
        # Longest prefix first: a Route lists `/` before `/ticker` (the seed's example) and
        # means both to be reachable, as Contour's route sorter made them.
        routes=contour_route_order(compiled),
        owner=obj.ref,
    )


def _action(
    snapshot: Snapshot,
    ctx: CompileContext,
    parsed: ParsedRoute,
    route: RouteSpec,
    st: RouteStatus,
) -> RouteAction:
    """The weighted split of the route's upstreams. An upstream that cannot be resolved is
    reported and left out, the others keep their relative weights; with nothing left that has a
    weight, the route answers 503."""
    strategy = route.strategy or parsed.spec.strategy or LoadBalancerStrategy.ROUND_ROBIN
    weighted: list[WeightedCluster] = []
    for upstream, weight in zip(route.upstreams, percentages(route.upstreams), strict=True):
        cluster = _cluster(snapshot, ctx, parsed, upstream, strategy, st)
        if cluster is not None:
            weighted.append(WeightedCluster(cluster.name, weight))
    if not any(w.weight > 0 for w in weighted):
        st.add(f"{route.field}: no upstream that takes traffic could be resolved; it answers 503")
        return DirectResponse(503)
    return Forward(tuple(weighted))


def _cluster(
    snapshot: Snapshot,
    ctx: CompileContext,
    parsed: ParsedRoute,
    upstream: UpstreamSpec,
    strategy: LoadBalancerStrategy,
    st: RouteStatus,
) -> Cluster | None:
    namespace = parsed.obj.namespace
    name = upstream.service_name
    service = snapshot.get("", "Service", namespace, name)
    # ExternalName Services can point Envoy anywhere, its admin port included
    # (GHSA-5ph6-qq5x-7jwc): the resolver refuses them unless the installation allows them.
    refused = ctx.backends.refusal(service) if service is not None else None
    if refused is not None:
        st.add(
            f'{upstream.field}.serviceName: service "{namespace}/{name}" '
            + external_name_phrase(refused)
        )
        return None
    settings = UpstreamSettings(
        lb_strategy=strategy,
        health_check=upstream.health_check or parsed.spec.health_check,
    )
    result = ctx.backends.service(namespace, name, upstream.service_port, settings=settings)
    if isinstance(result, Unresolved):
        if result.reason == "ServicePortNotFound":
            st.add(
                f'{upstream.field}.servicePort: service "{namespace}/{name}" has no port '
                f"{upstream.service_port}"
            )
        else:
            st.add(f'{upstream.field}.serviceName: service "{namespace}/{name}" not found')
        return None
    return result

"""The Gateway API dialect (`gateway.networking.k8s.io`): GatewayClass, Gateway, HTTPRoute,
GRPCRoute, TLSRoute, TCPRoute, ReferenceGrant and BackendTLSPolicy. See
docs/dialects/gateway-api.md.

A compile:
1. turnout's GatewayClasses (controllerName = `--gateway-controller-name`) and their Gateways;
   every other Gateway (and any route attached only to it) is another implementation's: no status;
2. each Gateway's listeners, read and checked, then checked against the listeners of every
   other Gateway on the same port (`listeners.py`);
3. each route, through each of its parentRefs, attaches to listeners (`attachment.py`); its rules
   are compiled for every listener it attached to (`httproute.py`, `grpcroute.py`, `streams.py`);
4. one Envoy listener per port: HTTP routes merged into one virtual host per hostname (their
   rules ordered by the spec's precedence across routes, `order_routes`), TLS and TCP routes into
   TCP proxies;
5. status for every GatewayClass, Gateway and route of turnout's (`status.py`).

Gateway listeners have ports of their own and take no part in the hostname ownership the other
dialects share on `--http-port`/`--https-port` (`claims()` is empty).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from turnout.compile_inputs import CompileOptions, ListenerDecl, ListenerProtocol
from turnout.dialects.gatewayapi.attachment import (
    Attachment,
    ParentRef,
    attach,
    parent_refs,
    route_hostname_list,
    route_hostnames_problem,
)
from turnout.dialects.gatewayapi.classes import (
    GatewayClassInfo,
    gateway_class_status,
    our_classes,
)
from turnout.dialects.gatewayapi.conditions import ACCEPTED, RouteProblem
from turnout.dialects.gatewayapi.foreign import foreign_message, foreign_owner
from turnout.dialects.gatewayapi.grpcroute import compile_grpcroute
from turnout.dialects.gatewayapi.hostnames import (
    ServedKinds,
    covers,
    specificity,
    wider_patterns,
)
from turnout.dialects.gatewayapi.httproute import (
    CompiledRoute,
    ListenerInfo,
    ReadHTTPRoute,
    read_httproute,
)
from turnout.dialects.gatewayapi.ignored import ignored_objects
from turnout.dialects.gatewayapi.kinds import (
    GATEWAY,
    GROUP,
    GRPC_ROUTE,
    HTTP_ROUTE,
    KINDS,
    TCP_ROUTE,
    TLS_ROUTE,
    gateway_listener_name,
    mapping,
    sequence,
    text,
)
from turnout.dialects.gatewayapi.listeners import (
    GatewayListener,
    read_listeners,
    resolve_conflicts,
)
from turnout.dialects.gatewayapi.precedence import RankedRoute, order_routes
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.dialects.gatewayapi.status import (
    CLUSTER_SCOPED,
    ParentOutcome,
    gateway_listener_names,
    gateway_status,
    programmed_statuses,
    route_status,
)
from turnout.dialects.gatewayapi.streams import (
    CompiledStream,
    compile_tcproute,
    compile_tlsroute,
)
from turnout.graph.dialect import (
    CompileContext,
    Dialect,
    DialectOutput,
    EnvoyView,
    HostClaim,
    Ownership,
)
from turnout.graph.memo import CompileMemo
from turnout.graph.model import (
    HostnameMatch,
    Route,
    RoutingGraph,
    TCPProxy,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import IgnoredObject, ObjectStatus
from turnout.store import Snapshot

__all__ = ["GatewayAPIDialect", "gateway_listener_name"]


_ListenerKey = tuple[ObjectRef, int]  # (Gateway, listener index)


@dataclass(slots=True)
class _Served:
    """What attached routes bring to the listeners, collected over all routes."""

    # listener -> hostname -> ranked routes (HTTP and gRPC)
    http: dict[_ListenerKey, dict[str, list[RankedRoute]]] = field(default_factory=dict)
    # listener -> hostname -> (route, clusters), oldest route first (TLS and TCP)
    streams: dict[_ListenerKey, dict[str, list[tuple[KubeObject, tuple[WeightedCluster, ...]]]]] = (
        field(default_factory=dict)
    )
    attached: dict[_ListenerKey, int] = field(default_factory=dict)
    # route -> the Gateways it is attached to (BackendTLSPolicy ancestors), but for TLSRoutes
    # through passthrough listeners only (where a policy cannot apply): those are here
    gateways_by_route: dict[ObjectRef, set[ObjectRef]] = field(default_factory=dict)
    passthrough_gateways_by_route: dict[ObjectRef, set[ObjectRef]] = field(default_factory=dict)
    # listener -> the hostnames of the HTTPRoutes and GRPCRoutes it serves
    http_kinds: dict[_ListenerKey, ServedKinds[KubeObject]] = field(default_factory=dict)


def _key(listener: GatewayListener) -> _ListenerKey:
    return (listener.gateway.ref, listener.index)


class GatewayAPIDialect(Dialect):
    name = "gatewayapi"
    kinds = KINDS
    cluster_scoped = CLUSTER_SCOPED

    def settle(
        self, statuses: Sequence[ObjectStatus], envoy: EnvoyView | None
    ) -> tuple[ObjectStatus, ...]:
        """Gateways' `Programmed` from what Envoy has of each port's Envoy listener."""
        if envoy is None:
            return programmed_statuses(statuses)
        return programmed_statuses(statuses, envoy.probe, envoy.objects)

    def reported_listeners(self, graph: RoutingGraph) -> frozenset[str]:
        return gateway_listener_names(graph)

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        return []

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
        """Another implementation's GatewayClasses, Gateways and routes (they get no status)."""
        return ignored_objects(snapshot, options.gateway_controller_name)

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        options = ctx.options
        grants = ReferenceGrants.from_snapshot(snapshot)
        classes = our_classes(snapshot, options.gateway_controller_name)
        statuses: list[ObjectStatus] = [gateway_class_status(c) for c in classes.values()]
        gateways, refused = _our_gateways(snapshot, classes, options)
        read = _settled_listeners(gateways, refused, grants, ctx)
        by_gateway: dict[tuple[str, str], tuple[KubeObject, list[GatewayListener]]] = {
            (g.namespace, g.name): (g, read[i]) for i, g in enumerate(gateways)
        }
        served = _Served()
        statuses.extend(self._routes(snapshot, by_gateway, refused, served, ctx, grants))
        statuses.extend(
            grants.backend_tls.statuses(
                served.gateways_by_route,
                options.gateway_controller_name,
                ctx,
                served.passthrough_gateways_by_route,
            )
        )
        ready = [
            lst
            for i, g in enumerate(gateways)
            if g.ref not in refused
            for lst in read[i]
            if lst.ready and lst.port > 0
        ]
        decls, vhosts, proxies = _assemble(ready, served)
        busy = {name for name, _ in vhosts} | {name for name, _ in proxies}
        idle_ports = {d.port for d in decls if d.name not in busy}
        for g, listeners in zip(gateways, read, strict=True):
            statuses.append(
                gateway_status(
                    g,
                    listeners,
                    {idx: n for (ref, idx), n in served.attached.items() if ref == g.ref},
                    addresses=options.load_balancer_addresses,
                    refused=refused.get(g.ref),
                    idle_ports=idle_ports,
                )
            )
        return DialectOutput(
            virtual_hosts=tuple(vhosts),
            statuses=tuple(statuses),
            tcp_proxies=tuple(proxies),
            listeners=tuple(decls),
        )

    def _routes(
        self,
        snapshot: Snapshot,
        by_gateway: Mapping[tuple[str, str], tuple[KubeObject, list[GatewayListener]]],
        refused: Mapping[ObjectRef, tuple[str, str]],
        served: _Served,
        ctx: CompileContext,
        grants: ReferenceGrants,
    ) -> list[ObjectStatus]:
        """Every route's status, attaching what it serves to `served`."""
        namespace_labels = {
            ns.name: {str(k): str(v) for k, v in ns.labels.items()}
            for ns in snapshot.kind("", "Namespace")
        }
        statuses: list[ObjectStatus] = []
        # HTTPRoutes and GRPCRoutes oldest first, together: of two that would share a hostname
        # on a listener, the older one is accepted.
        http_like = [*snapshot.kind(GROUP, HTTP_ROUTE), *snapshot.kind(GROUP, GRPC_ROUTE)]
        streams = [*snapshot.kind(GROUP, TLS_ROUTE), *snapshot.kind(GROUP, TCP_ROUTE)]
        for group in (http_like, streams):
            for route in sorted(group, key=lambda r: (r.age_key, r.kind)):
                status = self._route(
                    route, by_gateway, refused, namespace_labels, served, ctx, grants
                )
                if status is not None:
                    statuses.append(status)
        return statuses

    def _route(
        self,
        route: KubeObject,
        by_gateway: Mapping[tuple[str, str], tuple[KubeObject, list[GatewayListener]]],
        refused: Mapping[ObjectRef, tuple[str, str]],
        namespace_labels: Mapping[str, Mapping[str, str]],
        served: _Served,
        ctx: CompileContext,
        grants: ReferenceGrants,
    ) -> ObjectStatus | None:
        outcomes: list[ParentOutcome] = []
        done = _RouteCompiled()
        invalid_hostnames = route_hostnames_problem(route)
        for parent in parent_refs(route):
            if parent.group != GROUP or parent.kind != GATEWAY:
                continue
            entry = by_gateway.get((parent.namespace, parent.name))
            if entry is None:
                continue
            gateway, listeners = entry
            if invalid_hostnames is not None:
                outcomes.append(ParentOutcome(Attachment(parent, gateway, (), invalid_hostnames)))
                continue
            why_refused = refused.get(gateway.ref)
            if why_refused is not None:
                outcomes.append(_refused_gateway(parent, gateway, why_refused))
                continue
            attachment = attach(route, parent, gateway, listeners, namespace_labels)
            outcomes.append(_serve_attachment(route, attachment, served, done, ctx, grants))
        return route_status(route, outcomes, ctx.options.gateway_controller_name)


@dataclass(slots=True)
class _RouteCompiled:
    """What one route's compile keeps across its parentRefs."""

    compiled: dict[ListenerInfo, CompiledRoute] = field(default_factory=dict)
    # the route read once, for every port
    read: list[ReadHTTPRoute | CompiledRoute] = field(default_factory=list)
    # by whether the listener terminates TLS (a TLSRoute's BackendTLSPolicies apply)
    streams: dict[bool, CompiledStream] = field(default_factory=dict)
    contributed: set[_ListenerKey] = field(default_factory=set)
    counted: set[_ListenerKey] = field(default_factory=set)


def _refused_gateway(
    parent: ParentRef, gateway: KubeObject, why_refused: tuple[str, str]
) -> ParentOutcome:
    """A Gateway that is not accepted serves nothing: nothing attaches to it."""
    problem = RouteProblem(
        ACCEPTED,
        "NoMatchingParent",
        f"{parent.field}: Gateway {gateway.namespace}/{gateway.name} is not accepted "
        f"({why_refused[0]}: {why_refused[1]})",
    )
    return ParentOutcome(Attachment(parent, gateway, (), problem))


def _serve_attachment(
    route: KubeObject,
    attachment: Attachment,
    served: _Served,
    done: _RouteCompiled,
    ctx: CompileContext,
    grants: ReferenceGrants,
) -> ParentOutcome:
    """The outcome of `route` through one parentRef's `attachment`; what it serves there goes
    into `served`."""
    foreign_notes: tuple[str, ...] = ()
    if attachment.problem is None:
        attachment, foreign_notes = _without_foreign_hostnames(route, attachment, ctx.ownership)
    if attachment.problem is not None:
        return ParentOutcome(attachment)
    problems: dict[RouteProblem, None] = {}  # an ordered set: linear
    notes: list[str] = list(foreign_notes)
    streamed = route.kind in (TLS_ROUTE, TCP_ROUTE)
    clash = None if streamed else _kind_clash(route, attachment, served)
    if clash is not None:
        return ParentOutcome(replace(attachment, problem=clash))
    if streamed:
        rejected = _serve_streams(route, attachment, served, done, ctx, grants, problems, notes)
    else:
        rejected = _serve_http(route, attachment, served, done, ctx, grants, problems)
    idle = [lst for lst, _ in attachment.listeners if not lst.ready]
    if idle and len(idle) == len(attachment.listeners):
        notes.append(_not_ready(attachment.gateway, idle))
    outcome = ParentOutcome(attachment, tuple(problems), rejected, tuple(notes))
    if outcome.accepted:
        _count_accepted(route, attachment, served, done.counted)
    return outcome


def _serve_streams(
    route: KubeObject,
    attachment: Attachment,
    served: _Served,
    done: _RouteCompiled,
    ctx: CompileContext,
    grants: ReferenceGrants,
    problems: dict[RouteProblem, None],
    notes: list[str],
) -> bool:
    """A TLSRoute or TCPRoute into `served.streams` on the attachment's listeners, its problems
    into `problems` and a note for each name an older route holds into `notes`; whether it is
    rejected."""

    def compiled(listener: GatewayListener) -> CompiledStream:
        terminate = listener.tls_mode == "Terminate"
        if terminate not in done.streams:
            done.streams[terminate] = _compile_stream(route, ctx, grants, terminate)
        return done.streams[terminate]

    def serve(lst: GatewayListener, hostnames: tuple[str, ...], stream: CompiledStream) -> None:
        by_host = served.streams.setdefault(_key(lst), {})
        for hostname in hostnames if route.kind == TLS_ROUTE else ("",):
            holders = by_host.setdefault(hostname, [])
            if holders:
                notes.append(_not_served(lst, hostname, holders[0][0]))
            holders.append((route, stream.clusters))

    return _serve_listeners(attachment, done, problems, compiled, serve)


def _serve_http(
    route: KubeObject,
    attachment: Attachment,
    served: _Served,
    done: _RouteCompiled,
    ctx: CompileContext,
    grants: ReferenceGrants,
    problems: dict[RouteProblem, None],
) -> bool:
    """An HTTPRoute or GRPCRoute into `served.http` on the attachment's listeners, its problems
    into `problems`; whether it is rejected."""

    def compiled(listener: GatewayListener) -> CompiledRoute:
        info = ListenerInfo(port=listener.port, scheme=listener.scheme)
        if info not in done.compiled:
            done.compiled[info] = _compile_http(route, info, ctx, grants, done.read)
        return done.compiled[info]

    def serve(listener: GatewayListener, hostnames: tuple[str, ...], result: CompiledRoute) -> None:
        by_host_http = served.http.setdefault(_key(listener), {})
        kinds = served.http_kinds.setdefault(_key(listener), ServedKinds[KubeObject]())
        for hostname in hostnames:
            by_host_http.setdefault(hostname, []).extend(result.routes)
            kinds.add(route.kind, hostname, route)

    return _serve_listeners(attachment, done, problems, compiled, serve)


_C = TypeVar("_C", CompiledStream, CompiledRoute)


def _serve_listeners(
    attachment: Attachment,
    done: _RouteCompiled,
    problems: dict[RouteProblem, None],
    compiled: Callable[[GatewayListener], _C],
    serve: Callable[[GatewayListener, tuple[str, ...], _C], None],
) -> bool:
    """Per listener of the attachment: the route as `compiled` for it, its problems into
    `problems`, then `serve`d there once per listener; whether it is rejected. An invalid route
    serves nothing: it must not take a listener (or a name) from a valid route, even an older
    one."""
    rejected = False
    for listener, hostnames in attachment.listeners:
        result = compiled(listener)
        problems.update(dict.fromkeys(result.problems))
        if not result.accepted:
            rejected = True
            continue
        if _key(listener) in done.contributed:
            continue
        done.contributed.add(_key(listener))
        serve(listener, hostnames, result)
    return rejected


def _count_accepted(
    route: KubeObject, attachment: Attachment, served: _Served, counted: set[_ListenerKey]
) -> None:
    """An accepted attachment: the Gateway among the route's (BackendTLSPolicy ancestors), the
    route counted in attachedRoutes of its listeners."""
    passthrough = route.kind == TLS_ROUTE and all(
        lst.tls_mode == "Passthrough" for lst, _ in attachment.listeners
    )
    by_route = served.gateways_by_route
    if passthrough:
        by_route = served.passthrough_gateways_by_route
    by_route.setdefault(route.ref, set()).add(attachment.gateway.ref)
    # attachedRoutes counts routes: several parentRefs of one route to one
    # listener attach it once.
    for listener, _ in attachment.listeners:
        if _key(listener) in counted:
            continue
        counted.add(_key(listener))
        served.attached[_key(listener)] = served.attached.get(_key(listener), 0) + 1


def _foreign_hostname_conflicts(
    listeners: Sequence[GatewayListener], ownership: Ownership
) -> list[GatewayListener]:
    """The listeners, those whose hostname another namespace's older object serves on the
    shared listeners Conflicted (HostnameConflict): see `foreign`."""
    out: list[GatewayListener] = []
    for lst in listeners:
        owner = None
        if lst.not_accepted is None and lst.conflict is None:
            owner = foreign_owner(ownership, lst.hostname, lst.gateway, (lst.gateway.namespace,))
        if owner is not None and lst.hostname is not None:
            message = f"{lst.field}.hostname: {foreign_message(lst.hostname, owner)}"
            lst = replace(lst, conflict=("HostnameConflict", message))
        out.append(lst)
    return out


def _without_foreign_hostnames(
    route: KubeObject, attachment: Attachment, ownership: Ownership
) -> tuple[Attachment, tuple[str, ...]]:
    """The attachment without the hostnames another namespace's older object serves on the
    shared listeners (see `foreign`), and a note for each one left out; NotAllowedByListeners
    when none is left."""
    own = (route.namespace, attachment.gateway.namespace)
    kept: list[tuple[GatewayListener, tuple[str, ...]]] = []
    notes: dict[str, str] = {}
    for lst, hostnames in attachment.listeners:
        if not lst.ready:
            # It serves nothing (a foreign listener hostname makes it Conflicted); the route
            # is told so by the listener's own note.
            kept.append((lst, hostnames))
            continue
        served: list[str] = []
        for hostname in hostnames:
            owner = foreign_owner(ownership, hostname, route, own)
            if owner is None:
                served.append(hostname)
            else:
                where = (
                    "spec.hostnames"
                    if route_hostname_list(route)
                    else f"the hostname of listener {lst.name!r}"
                )
                notes.setdefault(hostname, f"{where}: {foreign_message(hostname, owner)}")
        if served:
            kept.append((lst, tuple(served)))
    if not notes:
        return attachment, ()
    if not kept:
        gateway = attachment.gateway
        problem = RouteProblem(
            ACCEPTED,
            "NotAllowedByListeners",
            f"{attachment.parent.field}: Gateway {gateway.namespace}/{gateway.name}: "
            + "; ".join(notes[h] for h in sorted(notes)),
        )
        return replace(attachment, listeners=(), problem=problem), ()
    return replace(attachment, listeners=tuple(kept)), tuple(notes[h] for h in sorted(notes))


def gateway_problem(
    gateway: KubeObject, classes: Mapping[str, GatewayClassInfo], options: CompileOptions
) -> tuple[str, str] | None:
    """Why the Gateway as a whole is not accepted (Accepted reason, message), or None."""
    spec = mapping(gateway.spec)
    info = classes[str(spec.get("gatewayClassName"))]
    if not info.accepted:
        return (
            "Invalid",
            f"spec.gatewayClassName: GatewayClass {info.obj.name} is not accepted: {info.message}",
        )
    params = mapping(spec.get("infrastructure")).get("parametersRef")
    if params is not None:
        ref = mapping(params)
        what = f"{ref.get('group', '')}/{ref.get('kind', '')} {ref.get('name', '')}"
        return (
            "InvalidParameters",
            f"spec.infrastructure.parametersRef: turnout supports no Gateway parameters (got "
            f"{what}); remove parametersRef",
        )
    for i, raw in enumerate(sequence(spec.get("addresses"))):
        address = mapping(raw)
        kind = address.get("type", "IPAddress")
        value = address.get("value")
        if kind != "IPAddress" or (value is not None and value != options.address):
            return (
                "UnsupportedAddress",
                f"spec.addresses[{i}]: turnout binds every Gateway on its --address "
                f"{options.address}; {kind} {value or '(any)'} cannot be assigned",
            )
    return None


def _kind_clash(route: KubeObject, attachment: Attachment, served: _Served) -> RouteProblem | None:
    """Why `route` may not attach through `attachment`: an older route of the other kind
    (HTTPRoute or GRPCRoute) already serves an intersecting hostname on one of its listeners.
    The spec: "the implementation MUST accept exactly one of these two routes" and never merge
    them; it names no reason, turnout reports NotAllowedByListeners."""
    for listener, hostnames in attachment.listeners:
        kinds = served.http_kinds.get(_key(listener))
        clash = kinds.first_clash(route.kind, hostnames) if kinds is not None else None
        if clash is not None:
            theirs, other, hostname = clash
            return RouteProblem(
                ACCEPTED,
                "NotAllowedByListeners",
                f"{attachment.parent.field}: listener {listener.name!r} of Gateway "
                f"{listener.gateway.namespace}/{listener.gateway.name} already serves "
                f"{other.kind} {other.namespace}/{other.name} on {theirs}, which "
                f"intersects {hostname}; an HTTPRoute and a GRPCRoute never share a "
                "hostname on a listener, the older one is accepted",
            )
    return None


def _compile_http(
    route: KubeObject,
    info: ListenerInfo,
    ctx: CompileContext,
    grants: ReferenceGrants,
    read: list[ReadHTTPRoute | CompiledRoute],
) -> CompiledRoute:
    """`route` for the listeners of port and scheme `info`. One route reaches up to 32 listener
    ports: `read` keeps what an earlier call read, so the rules are read and their backends
    resolved once (a GRPCRoute's compile does not depend on the listener at all)."""
    if not read:
        if route.kind == GRPC_ROUTE:
            read.append(compile_grpcroute(route, info, ctx, grants))
        else:
            assert route.kind == HTTP_ROUTE
            read.append(read_httproute(route, ctx, grants))
    first = read[0]
    return first if isinstance(first, CompiledRoute) else first.compile(info)


def _compile_stream(
    route: KubeObject, ctx: CompileContext, grants: ReferenceGrants, terminate: bool
) -> CompiledStream:
    if route.kind == TLS_ROUTE:
        return compile_tlsroute(route, ctx, grants, terminate=terminate)
    return compile_tcproute(route, ctx, grants)


def _not_served(listener: GatewayListener, hostname: str, older: KubeObject) -> str:
    """Why an accepted TLS or TCP route gets no connections on `listener`. The spec (and the
    conformance test TCPRouteMultipleRoutesAttachment) keeps such a route Accepted True and
    counted in attachedRoutes; only the oldest route is bound, the message says so."""
    what = f"the connections for SNI {hostname}" if hostname else "its connections"
    return (
        f"listener {listener.name!r} of Gateway {listener.gateway.namespace}/"
        f"{listener.gateway.name}: the older {older.kind} {older.namespace}/{older.name} "
        f"serves {what}; this route receives none of them"
    )


def _not_ready(gateway: KubeObject, listeners: Sequence[GatewayListener]) -> str:
    """Why a route attached only to listeners that are not valid serves nothing there. The
    spec counts such attachments (`attachedRoutes` "MUST be set for Listeners with condition
    Accepted: false"), so the route stays Accepted; its message says it gets no traffic."""
    names = ", ".join(repr(lst.name) for lst in listeners)
    return (
        f"Gateway {gateway.namespace}/{gateway.name}: listener(s) {names} are not valid (see "
        "the Gateway's status) and serve nothing; this route receives no traffic through them"
    )


def _most_specific(listeners: Sequence[GatewayListener], hostname: str) -> GatewayListener | None:
    """The listener a request (or TLS connection) for `hostname` belongs to: the most specific
    listener hostname covering it (listener isolation: never a less specific one as well)."""
    best: GatewayListener | None = None
    for lst in listeners:
        if hostname != "*" and not covers(lst.hostname, hostname):
            continue
        if hostname == "*" and lst.hostname is not None:
            continue
        if best is None or specificity(lst.hostname) > specificity(best.hostname):
            best = lst
    return best


def _port_protocol(listeners: Sequence[GatewayListener]) -> ListenerProtocol:
    protocols = {lst.protocol for lst in listeners}
    if "HTTP" in protocols:
        return ListenerProtocol.HTTP
    if "TCP" in protocols:
        return ListenerProtocol.TCP
    if "HTTPS" in protocols:
        return ListenerProtocol.HTTPS
    return ListenerProtocol.TLS_PASSTHROUGH


def _our_gateways(
    snapshot: Snapshot, classes: Mapping[str, GatewayClassInfo], options: CompileOptions
) -> tuple[list[KubeObject], dict[ObjectRef, tuple[str, str]]]:
    """The Gateways of our classes, oldest first, and those refused with (reason, message)."""
    gateways = sorted(
        (
            g
            for g in snapshot.kind(GROUP, GATEWAY)
            if text(mapping(g.spec).get("gatewayClassName")) in classes
        ),
        key=lambda g: g.age_key,
    )
    refused: dict[ObjectRef, tuple[str, str]] = {}
    for g in gateways:
        problem = gateway_problem(g, classes, options)
        if problem is not None:
            refused[g.ref] = problem
    return gateways, refused


def _settled_listeners(
    gateways: Sequence[KubeObject],
    refused: Mapping[ObjectRef, tuple[str, str]],
    grants: ReferenceGrants,
    ctx: CompileContext,
) -> list[list[GatewayListener]]:
    """Each Gateway's listeners, with hostname and port conflicts between Gateways settled."""
    read = [
        read_listeners(g, options=ctx.options, secrets=ctx.secrets, grants=grants) for g in gateways
    ]
    # A Gateway that is not accepted serves nothing and holds no port.
    serving = [i for i, g in enumerate(gateways) if g.ref not in refused]
    # Before the port conflicts: a listener refused for a foreign hostname binds nothing
    # and so keeps no port from younger Gateways.
    for i in serving:
        read[i] = _foreign_hostname_conflicts(read[i], ctx.ownership)
    settled = resolve_conflicts([read[i] for i in serving])
    for i, listeners in zip(serving, settled, strict=True):
        read[i] = listeners
    return read


def _assemble(
    ready: Sequence[GatewayListener], served: _Served
) -> tuple[list[ListenerDecl], list[tuple[str, VirtualHost]], list[tuple[str, TCPProxy]]]:
    by_port: dict[int, list[GatewayListener]] = {}
    for lst in ready:
        by_port.setdefault(lst.port, []).append(lst)
    decls: list[ListenerDecl] = []
    vhosts: list[tuple[str, VirtualHost]] = []
    proxies: list[tuple[str, TCPProxy]] = []
    for port in sorted(by_port):
        listeners = by_port[port]
        name = gateway_listener_name(port)
        decls.append(ListenerDecl(name=name, port=port, protocol=_port_protocol(listeners)))
        http_listeners = [lst for lst in listeners if lst.protocol in ("HTTP", "HTTPS")]
        stream_listeners = [lst for lst in listeners if lst.protocol in ("TLS", "TCP")]
        hosts_done: set[str] = set()
        for lst in http_listeners:
            buckets = served.http.get(_key(lst), {})
            hostnames = sorted(set(buckets) | {lst.hostname or "*"})
            for hostname in hostnames:
                if _most_specific(http_listeners, hostname) is not lst or hostname in hosts_done:
                    continue
                hosts_done.add(hostname)
                # Rules of routes for wider hostnames of the same listener also match this host:
                # they come after its own, most specific hostname first.
                wider = [h for h in wider_patterns(hostname) if h in buckets]
                routes: list[Route] = list(order_routes(buckets.get(hostname, [])))
                for h in wider:
                    routes.extend(order_routes(buckets[h]))
                vhosts.append(
                    (
                        name,
                        VirtualHost(
                            name=hostname,
                            hostname=hostname,
                            routes=tuple(routes),
                            owner=lst.gateway.ref,
                            hostname_match=HostnameMatch.WILDCARD_ANY_LABELS
                            if hostname.startswith("*.")
                            else HostnameMatch.EXACT,
                            tls=lst.tls if lst.protocol == "HTTPS" else None,
                            sni=(lst.hostname or "*") if lst.protocol == "HTTPS" else None,
                        ),
                    )
                )
        for lst in stream_listeners:
            for hostname, entries in sorted(served.streams.get(_key(lst), {}).items()):
                if lst.protocol == "TLS" and _most_specific(stream_listeners, hostname) is not lst:
                    continue
                # Several routes on one name (or one TCP listener): the oldest serves it.
                route, clusters = entries[0]
                proxies.append(
                    (
                        name,
                        TCPProxy(
                            name=hostname or "tcp",
                            hostname=hostname,
                            clusters=clusters,
                            owner=route.ref,
                            tls=lst.tls if lst.tls_mode == "Terminate" else None,
                        ),
                    )
                )
    return decls, vhosts, proxies

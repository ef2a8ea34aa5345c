"""Builds the routing graph from a store snapshot: ownership across dialects, then each dialect.

A pure function: the same snapshot and options give the same graph and statuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnout.dialects.base import (
    HTTP_LISTENER,
    HTTPS_LISTENER,
    CompileContext,
    CompileOptions,
    Dialect,
    HostClaim,
    ownership_from_claims,
)
from turnout.graph.model import (
    Forward,
    Listener,
    ListenerProtocol,
    RoutingGraph,
    VirtualHost,
)
from turnout.graph.services import BackendResolver
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot, SourceProblem


@dataclass(frozen=True, slots=True)
class CompileResult:
    graph: RoutingGraph
    statuses: tuple[ObjectStatus, ...]
    problems: tuple[SourceProblem, ...]


def default_dialects() -> tuple[Dialect, ...]:
    from turnout.dialects.httpproxy import HTTPProxyDialect

    return (HTTPProxyDialect(),)


def compile_snapshot(
    snapshot: Snapshot,
    options: CompileOptions | None = None,
    dialects: Sequence[Dialect] | None = None,
) -> CompileResult:
    options = options or CompileOptions()
    dialects = default_dialects() if dialects is None else dialects
    claims: list[HostClaim] = []
    for dialect in dialects:
        claims.extend(dialect.claims(snapshot, options))
    ownership = ownership_from_claims(claims)
    backends = BackendResolver(snapshot)
    ctx = CompileContext(options=options, ownership=ownership, backends=backends)

    vhosts: dict[str, dict[str, VirtualHost]] = {HTTP_LISTENER: {}, HTTPS_LISTENER: {}}
    statuses: list[ObjectStatus] = []
    for dialect in dialects:
        out = dialect.compile(snapshot, ctx)
        statuses.extend(out.statuses)
        for listener, vhost in out.virtual_hosts:
            # Ownership guarantees one vhost per (listener, hostname); a dialect that emits a
            # second one has a bug, and the first one stays in force.
            vhosts.setdefault(listener, {}).setdefault(vhost.name, vhost)

    listeners = [
        Listener(
            name=HTTP_LISTENER,
            address=options.address,
            port=options.http_port,
            protocol=ListenerProtocol.HTTP,
            virtual_hosts=tuple(vhosts[HTTP_LISTENER][k] for k in sorted(vhosts[HTTP_LISTENER])),
        )
    ]
    if vhosts[HTTPS_LISTENER]:
        listeners.append(
            Listener(
                name=HTTPS_LISTENER,
                address=options.address,
                port=options.https_port,
                protocol=ListenerProtocol.HTTPS,
                virtual_hosts=tuple(
                    vhosts[HTTPS_LISTENER][k] for k in sorted(vhosts[HTTPS_LISTENER])
                ),
            )
        )

    used = {
        wc.cluster
        for listener in listeners
        for vh in listener.virtual_hosts
        for route in vh.routes
        if isinstance(route.action, Forward)
        for wc in route.action.clusters
    }
    clusters = tuple(c for c in backends.clusters() if c.name in used)
    statuses.sort(key=lambda s: (s.ref.group, s.ref.kind, s.ref.namespace, s.ref.name))
    return CompileResult(
        graph=RoutingGraph(listeners=tuple(listeners), clusters=clusters),
        statuses=tuple(statuses),
        problems=snapshot.problems,
    )

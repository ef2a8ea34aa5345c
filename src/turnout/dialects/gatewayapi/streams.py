"""TCPRoute and TLSRoute rules -> the weighted backends of a TCP proxy.

Both kinds have exactly one rule (`MinItems=1, MaxItems=1`) with 1 to 16 backendRefs
(`apis/v1/{tcp,tls}route_types.go`). The rule's backends become one split, by weight, per
connection. An invalid backend keeps its share and sends it to `INVALID_BACKEND`, whose
connections are closed: the spec's "MUST actively reject connection attempts", with rejections
proportional to weight. A rule whose weights are all 0 ("no traffic") rejects every connection
the same way, which also keeps the route's SNI name from falling through to another route's
wildcard chain (a TCP proxy without a cluster to send to gets no chain).

What the CRD refuses and a file may still hold makes the whole route invalid (`accepted` False,
`Accepted` False `UnsupportedValue` naming the field), as for HTTPRoute and GRPCRoute: no rules,
more than one rule, a rule without backendRefs or with more than 16, a weight that is not an
integer in 0..1,000,000, a Service reference without a port. Such a route serves nothing and so
takes no listener or SNI name from a valid route. The route's hostnames (TLSRoute) and its
attachment are the Gateway dialect's business (`__init__.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from turnout.dialects.gatewayapi.backend_refs import TLS_TERMINATE, resolve_backend_ref
from turnout.dialects.gatewayapi.conditions import ACCEPTED, UNSUPPORTED_VALUE, RouteProblem
from turnout.dialects.gatewayapi.kinds import mapping
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.graph.dialect import CompileContext
from turnout.graph.model import INVALID_BACKEND, WeightedCluster
from turnout.objects import KubeObject

MAX_BACKEND_REFS = 16

_REJECT_ALL = (WeightedCluster(INVALID_BACKEND, 1),)


@dataclass(frozen=True, slots=True)
class CompiledStream:
    clusters: tuple[WeightedCluster, ...]  # the first rule's backends (TCP/TLS routes have one)
    problems: tuple[RouteProblem, ...]
    # False: the spec (the CRD) refuses the route; it must serve nothing, `problems` says why.
    accepted: bool = True


def compile_tcproute(
    route: KubeObject, ctx: CompileContext, grants: ReferenceGrants
) -> CompiledStream:
    return _compile(route, ctx, grants, app="tcp")


def compile_tlsroute(
    route: KubeObject, ctx: CompileContext, grants: ReferenceGrants, *, terminate: bool = False
) -> CompiledStream:
    """`terminate`: for a listener that terminates TLS, where a BackendTLSPolicy of a backend
    applies (the gateway re-encrypts); on a passthrough listener it cannot."""
    return _compile(route, ctx, grants, app=TLS_TERMINATE if terminate else "tls")


def _unsupported(message: str) -> RouteProblem:
    return RouteProblem(ACCEPTED, UNSUPPORTED_VALUE, message)


def _rejected(problems: list[RouteProblem]) -> CompiledStream:
    return CompiledStream(_REJECT_ALL, tuple(problems), accepted=False)


def _compile(
    route: KubeObject, ctx: CompileContext, grants: ReferenceGrants, *, app: str
) -> CompiledStream:
    spec = mapping(route.spec)
    rules = spec.get("rules")
    if not isinstance(rules, Sequence) or isinstance(rules, str) or not rules:
        return _rejected([_unsupported("spec.rules: exactly one rule is required")])
    problems: list[RouteProblem] = []
    if len(rules) > 1:
        problems.append(
            _unsupported(f"spec.rules: {len(rules)} rules; a {route.kind} has exactly one rule")
        )
    rule = rules[0]
    refs = rule.get("backendRefs") if isinstance(rule, Mapping) else None
    if not isinstance(refs, Sequence) or isinstance(refs, str) or not refs:
        problems.append(
            _unsupported("spec.rules[0].backendRefs: at least one backendRef is required")
        )
        return _rejected(problems)
    if len(refs) > MAX_BACKEND_REFS:
        problems.append(
            _unsupported(
                f"spec.rules[0].backendRefs: {len(refs)} entries, more than the "
                f"{MAX_BACKEND_REFS} the API allows"
            )
        )
    clusters: list[WeightedCluster] = []
    for i, ref in enumerate(refs[:MAX_BACKEND_REFS]):
        resolved = resolve_backend_ref(
            route, ref, f"spec.rules[0].backendRefs[{i}]", ctx, grants, app=app
        )
        if resolved.problem is not None:
            problems.append(resolved.problem)
        clusters.append(resolved.weighted_cluster)
    if any(p.condition == ACCEPTED for p in problems):
        return _rejected(problems)
    if all(c.weight == 0 for c in clusters):
        # Weight 0 is "no traffic": every connection is rejected, by the route's own chain.
        return CompiledStream(_REJECT_ALL, tuple(problems))
    return CompiledStream(tuple(clusters), tuple(problems))

"""The Contour Route dialect of seed 002 (`contour.heptio.com/v1alpha1`, kind `Route`): one
virtual host per object, path prefixes, weighted upstreams, load-balancing strategies and active
HTTP health checks, with the seed's status (`currentStatus`, `errors`). See docs/dialects/route.md.
"""

from __future__ import annotations

import weakref

from turnout.compile_inputs import HTTP_LISTENER, CompileOptions
from turnout.dialects.contour_route.processor import claimed_host, compile_routes, parse_all
from turnout.dialects.contour_route.spec import API_VERSION, KIND, ParsedRoute
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.memo import CompileMemo
from turnout.store import Snapshot

__all__ = ["ContourRouteDialect"]


class ContourRouteDialect(Dialect):
    """Every Route with a valid host claims it on the HTTP listener; `compile` builds the virtual
    hosts of the Routes that own theirs and a status for every Route."""

    name = "route"
    kinds = frozenset({(API_VERSION, KIND)})

    def __init__(self) -> None:
        # The objects read by `claims()`, kept for `compile()` of the same snapshot so that a
        # compile reads each object once. A cache of a pure function keyed by the identity of an
        # immutable snapshot (held weakly): it never changes a result.
        self._last: tuple[weakref.ref[Snapshot], dict[tuple[str, str], ParsedRoute]] | None = None

    def _parsed(self, snapshot: Snapshot) -> dict[tuple[str, str], ParsedRoute]:
        last = self._last
        if last is not None and last[0]() is snapshot:
            return last[1]
        parsed = parse_all(snapshot)
        self._last = (weakref.ref(snapshot), parsed)
        return parsed

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        claims: list[HostClaim] = []
        for route in self._parsed(snapshot).values():
            host = claimed_host(route, options)
            if host is not None:
                claims.append(HostClaim(HTTP_LISTENER, host, route.obj))
        return claims

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        parsed = self._parsed(snapshot)
        self._last = None
        return compile_routes(snapshot, ctx, parsed)

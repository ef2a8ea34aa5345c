"""Skipper's RouteGroup (`zalando.org/v1`, seed 003): hosts, named backends (service, lb, network,
shunt), default and per-route backends with weights, routes with Skipper's priority, eskip
predicates and filters, TLS, and a status with conditions and `loadBalancer`. See
docs/dialects/routegroup.md for what is supported and every difference from Skipper.
"""

from __future__ import annotations

import weakref

from turnout.compile_inputs import CompileOptions
from turnout.dialects.routegroup.spec import API_VERSION, KIND, ParsedRouteGroup
from turnout.graph.dialect import (
    CompileContext,
    Dialect,
    DialectOutput,
    ExternalInputs,
    HostClaim,
)
from turnout.graph.memo import CompileMemo
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot

__all__ = ["RouteGroupDialect"]


class RouteGroupDialect(Dialect):
    """The RouteGroups naming a host claim it with the age of the oldest; `compile` orders the
    routes of all of them by Skipper's priority and gives every RouteGroup of turnout's class a
    status. RouteGroups of another class are left alone: no routes, no status."""

    name = "routegroup"
    kinds = frozenset({(API_VERSION, KIND)})

    def __init__(self) -> None:
        # The RouteGroups read by `claims()`, kept for `compile()` of the same snapshot and class.
        # A cache of a pure function keyed by the identity of an immutable snapshot (held
        # weakly): it never changes a result.
        self._last: tuple[weakref.ref[Snapshot], str, list[ParsedRouteGroup]] | None = None

    def _parsed(self, snapshot: Snapshot, options: CompileOptions) -> list[ParsedRouteGroup]:
        from turnout.dialects.routegroup.processor import select_routegroups

        last = self._last
        if last is not None and last[0]() is snapshot and last[1] == options.routegroup_class:
            return last[2]
        parsed = select_routegroups(snapshot, options)
        self._last = (weakref.ref(snapshot), options.routegroup_class, parsed)
        return parsed

    def external_inputs(self, snapshot: Snapshot, options: CompileOptions) -> ExternalInputs:
        """The OpenID issuers of the `jwtValidation` filters of turnout's RouteGroups."""
        from turnout.dialects.routegroup.filters import routegroup_issuers

        return ExternalInputs(
            oidc_issuers=frozenset(routegroup_issuers(snapshot, options.routegroup_class))
        )

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        from turnout.dialects.routegroup.processor import routegroup_claims

        return routegroup_claims(self._parsed(snapshot, options))

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        from turnout.dialects.routegroup.processor import compile_routegroups

        parsed = self._parsed(snapshot, ctx.options)
        self._last = None
        return compile_routegroups(snapshot, ctx, parsed)

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
        """The RouteGroups of another class."""
        from turnout.dialects.routegroup.spec import routegroups_of_other_classes

        others = routegroups_of_other_classes(snapshot, options.routegroup_class)
        return [IgnoredObject.of(obj, why) for obj, why in others]

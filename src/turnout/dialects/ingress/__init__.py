"""The Kubernetes Ingress dialect (`networking.k8s.io/v1`, kinds `Ingress` and `IngressClass`):
class selection, rules merged per host, Contour's path semantics and precedence, TLS, and a status
with the listener address. docs/dialects/ingress.md describes what is supported and every
difference from Contour and ingress-nginx."""

from __future__ import annotations

import weakref

from turnout.compile_inputs import CompileOptions
from turnout.dialects.ingress.processor import (
    compile_ingresses,
    ignored_ingresses,
    ingress_claims,
    select_ingresses,
)
from turnout.dialects.ingress.spec import ParsedIngress
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.memo import CompileMemo
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot

__all__ = ["IngressDialect"]


class IngressDialect(Dialect):
    """The oldest Ingress of each host claims it for the group of Ingresses that name it;
    `compile` merges the paths of every group that owns its host and gives each Ingress of
    turnout's class a status. Ingresses of other classes are left alone: no routes, no status."""

    name = "ingress"
    kinds = frozenset(
        {("networking.k8s.io/v1", "Ingress"), ("networking.k8s.io/v1", "IngressClass")}
    )

    def __init__(self) -> None:
        # The Ingresses read by `claims()`, kept for `compile()` of the same snapshot and class
        # name. A cache of a pure function keyed by the identity of an immutable snapshot (held
        # weakly): it never changes a result.
        self._last: tuple[weakref.ref[Snapshot], tuple[str, bool], list[ParsedIngress]] | None = (
            None
        )

    def _parsed(self, snapshot: Snapshot, options: CompileOptions) -> list[ParsedIngress]:
        last = self._last
        if last is not None and last[0]() is snapshot and last[1] == _class_key(options):
            return last[2]
        parsed = select_ingresses(snapshot, options)
        self._last = (weakref.ref(snapshot), _class_key(options), parsed)
        return parsed

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        return ingress_claims(self._parsed(snapshot, options))

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        parsed = self._parsed(snapshot, ctx.options)
        self._last = None
        return compile_ingresses(snapshot, ctx, parsed)

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
        return ignored_ingresses(snapshot, options)


def _class_key(options: CompileOptions) -> tuple[str, bool]:
    """The options that decide which Ingresses are read at all."""
    return (options.ingress_class_name, options.classless_ingress_is_ours)

"""The IngressRoute dialect (Contour's `contour.heptio.com/v1beta1`, and `v1alpha1` as seed 000
writes it): roots, DNS-style delegation of path prefixes, and status as Contour v1.0 and seed 000
describe them, except where docs/dialects/ingressroute.md says otherwise."""

from __future__ import annotations

import weakref

from turnout.compile_inputs import CompileOptions
from turnout.dialects.ingressroute.processor import (
    Key,
    claimed_hostnames,
    compile_ingressroutes,
    parse_all,
)
from turnout.dialects.ingressroute.spec import V1ALPHA1, V1BETA1, ParsedIngressRoute
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.memo import CompileMemo
from turnout.store import Snapshot

__all__ = ["IngressRouteDialect"]


class IngressRouteDialect(Dialect):
    """Each root claims its fqdn and aliases (on the HTTPS listener too when it has TLS);
    `compile` builds the virtual hosts of the roots that own all of theirs and a status for every
    IngressRoute."""

    name = "ingressroute"
    kinds = frozenset(
        {
            (V1BETA1, "IngressRoute"),
            (V1ALPHA1, "IngressRoute"),
            # Read through the shared SecretResolver for `tls.secretName: namespace/name`; listed
            # here so that it is not reported as a kind turnout ignores.
            (V1BETA1, "TLSCertificateDelegation"),
        }
    )

    def __init__(self) -> None:
        # The objects read by `claims()`, kept for `compile()` of the same snapshot so that a
        # compile reads each object once. A cache of a pure function, keyed by the identity of an
        # immutable snapshot (held weakly): it never changes a result.
        self._last: tuple[weakref.ref[Snapshot], dict[Key, ParsedIngressRoute]] | None = None

    def _parsed(self, snapshot: Snapshot) -> dict[Key, ParsedIngressRoute]:
        last = self._last
        if last is not None and last[0]() is snapshot:
            return last[1]
        parsed = parse_all(snapshot)
        self._last = (weakref.ref(snapshot), parsed)
        return parsed

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        return [
            HostClaim(listener, host, ir.obj)
            for ir in self._parsed(snapshot).values()
            for listener, host in claimed_hostnames(ir, options)
        ]

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        parsed = self._parsed(snapshot)
        self._last = None
        return compile_ingressroutes(snapshot, ctx, parsed)

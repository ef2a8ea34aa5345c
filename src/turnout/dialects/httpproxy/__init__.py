"""The HTTPProxy dialect (`projectcontour.io/v1`, kind `HTTPProxy`): routing, includes and status as
Contour ships them, except where docs/dialects/httpproxy.md says otherwise (hostname ownership
first of all)."""

from __future__ import annotations

import weakref

from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy.classes import why_not_served
from turnout.dialects.httpproxy.processor import (
    claimed_hostname,
    claimed_listeners,
    compile_httpproxies,
    parse_all,
)
from turnout.dialects.httpproxy.spec import GROUP, KIND, ParsedProxy
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.memo import CompileMemo
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot

__all__ = ["HTTPProxyDialect"]


class HTTPProxyDialect(Dialect):
    """Each valid-looking root of turnout's class claims its fqdn on the HTTP listener, and on the
    HTTPS listener too when it terminates TLS; `compile` builds the virtual hosts of the roots that
    own theirs and a status for every HTTPProxy of turnout's class (`classes.py`)."""

    name = "httpproxy"
    # TLSCertificateDelegation grants HTTPProxies in other namespaces the use of a Secret; the
    # shared SecretResolver reads it, and HTTPProxy is its reader among the dialects.
    kinds = frozenset(
        {
            ("projectcontour.io/v1", "HTTPProxy"),
            ("projectcontour.io/v1", "TLSCertificateDelegation"),
            ("projectcontour.io/v1alpha1", "ExtensionService"),
        }
    )

    def __init__(self) -> None:
        # The objects read by `claims()`, kept for `compile()` of the same snapshot so that a
        # compile reads each object once. A cache of a pure function, keyed by the identity of an
        # immutable snapshot (held weakly): it never changes a result.
        # The class name is part of the key: it decides which proxies are read at all.
        self._last: tuple[weakref.ref[Snapshot], str, dict[tuple[str, str], ParsedProxy]] | None = (
            None
        )

    def _parsed(
        self, snapshot: Snapshot, options: CompileOptions
    ) -> dict[tuple[str, str], ParsedProxy]:
        last = self._last
        if last is not None and last[0]() is snapshot and last[1] == options.ingress_class_name:
            return last[2]
        parsed = parse_all(snapshot, options)
        self._last = (weakref.ref(snapshot), options.ingress_class_name, parsed)
        return parsed

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        claims: list[HostClaim] = []
        for proxy in self._parsed(snapshot, options).values():
            host = claimed_hostname(proxy, options)
            if host is not None:
                claims.extend(HostClaim(lst, host, proxy.obj) for lst in claimed_listeners(proxy))
        return claims

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        parsed = self._parsed(snapshot, ctx.options)
        self._last = None
        return compile_httpproxies(snapshot, ctx, parsed)

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
        """The HTTPProxies of another class."""
        return [
            IgnoredObject.of(o, why)
            for o in snapshot.kind(GROUP, KIND)
            if (why := why_not_served(o, options)) is not None
        ]

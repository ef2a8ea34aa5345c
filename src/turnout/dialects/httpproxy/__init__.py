"""The HTTPProxy dialect (`projectcontour.io/v1`, kind `HTTPProxy`): routing, includes and status as
Contour ships them, except where docs/dialects/httpproxy.md says otherwise (hostname ownership
first of all)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy.classes import why_not_served
from turnout.dialects.httpproxy.processor import (
    ParseMemo,
    claimed_hostname,
    claimed_listeners,
    compile_httpproxies,
    parse_all,
)
from turnout.dialects.httpproxy.spec import GROUP, KIND, ParsedProxy
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.memo import CompileMemo, IdentityMemo
from turnout.objects import KubeObject
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot

__all__ = ["HTTPProxyDialect"]


@dataclass
class _Parsed:
    """The proxies read for one snapshot, kept from `claims()` for `compile()` of the same
    snapshot (a stage of the compile memo; the objects themselves are read once each, by
    identity, across compiles)."""

    snapshot: Snapshot | None = None
    proxies: dict[tuple[str, str], ParsedProxy] | None = None


class HTTPProxyDialect(Dialect):
    """Each valid-looking root of turnout's class claims its fqdn on the HTTP listener, and on the
    HTTPS listener too when it terminates TLS; `compile` builds the virtual hosts of the roots that
    own theirs and a status for every HTTPProxy of turnout's class (`classes.py`).

    Incremental: each object is parsed once, and a root is compiled again only when something it
    read changed (`processor.py`, `recording.py`)."""

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
    incremental = True

    def __init__(self) -> None:
        self._served: (
            tuple[weakref.ref[Snapshot], CompileOptions, dict[tuple[str, str], ParsedProxy]] | None
        ) = None

    def _parsed(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo
    ) -> dict[tuple[str, str], ParsedProxy]:
        kept = memo.stage("httpproxy:parsed", _Parsed)
        if kept.snapshot is not snapshot or kept.proxies is None:
            objects: ParseMemo = memo.stage("httpproxy:parse", IdentityMemo)
            kept.snapshot, kept.proxies = snapshot, parse_all(snapshot, options, objects)
            # `ignored` of the same snapshot skips what was read: a cache of a pure function of
            # an immutable snapshot (held weakly) and the options (hence the instance's own).
            self._served = (weakref.ref(snapshot), options, kept.proxies)
        return kept.proxies

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        memo = memo or CompileMemo()
        made: IdentityMemo[ParsedProxy, tuple[HostClaim, ...]]
        made = memo.stage("httpproxy:claims", IdentityMemo)
        claims: list[HostClaim] = []
        for proxy in self._parsed(snapshot, options, memo).values():
            found = made.get(proxy)
            if found is None:
                host = claimed_hostname(proxy, options)
                found = (
                    ()
                    if host is None
                    else tuple(HostClaim(lst, host, proxy.obj) for lst in claimed_listeners(proxy))
                )
                made.put(proxy, found)
            claims.extend(found)
        return claims

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        return compile_httpproxies(snapshot, ctx, self._parsed(snapshot, ctx.options, ctx.memo))

    ignored_per_object = True

    def ignored_object(self, obj: KubeObject, options: CompileOptions) -> IgnoredObject | None:
        if (obj.group, obj.kind) != (GROUP, KIND):
            return None
        why = why_not_served(obj, options)
        return None if why is None else IgnoredObject.of(obj, why)

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
        """The HTTPProxies of another class (those the compile of `snapshot` did not read, when
        it is the last one compiled: asking each object its class again costs a pass over all)."""
        last = self._served
        fits = last is not None and last[0]() is snapshot and last[1] == options
        served = last[2] if last is not None and fits else {}
        out: list[IgnoredObject] = []
        for o in snapshot.kind(GROUP, KIND):
            kept = served.get((o.namespace, o.name))
            if kept is not None and kept.obj is o:
                continue
            why = why_not_served(o, options)
            if why is not None:
                out.append(IgnoredObject.of(o, why))
        return out

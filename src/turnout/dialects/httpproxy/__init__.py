"""The HTTPProxy dialect (`projectcontour.io/v1`, kind `HTTPProxy`): routing, includes and status as
Contour ships them, except where docs/dialects/httpproxy.md says otherwise (hostname ownership
first of all)."""

from __future__ import annotations

import weakref

from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy.classes import why_not_served
from turnout.dialects.httpproxy.parsed import ParsedState
from turnout.dialects.httpproxy.processor import compile_httpproxies
from turnout.dialects.httpproxy.spec import GROUP, KIND
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.memo import CompileMemo
from turnout.objects import KubeObject
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot

__all__ = ["HTTPProxyDialect"]


class HTTPProxyDialect(Dialect):
    """Each valid-looking root of turnout's class claims its fqdn on the HTTP listener, and on the
    HTTPS listener too when it terminates TLS; `compile` builds the virtual hosts of the roots that
    own theirs and a status for every HTTPProxy of turnout's class (`classes.py`).

    Incremental: only the objects that changed are read again (`parsed.py`), and only the roots
    that read something that changed are compiled again (`processor.py`, `recording.py`,
    `root_index.py`)."""

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
        self._served: tuple[weakref.ref[Snapshot], CompileOptions, ParsedState] | None = None

    def _parsed(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo
    ) -> ParsedState:
        """The proxies of `snapshot`, patched from those of the compile before (`parsed.py`)."""
        state = memo.stage("httpproxy:parsed", ParsedState)
        state.refresh(snapshot, options, memo.delta)
        # `ignored` of the same snapshot answers from the state: a cache of a pure function of an
        # immutable snapshot (held weakly) and the options (hence the instance's own).
        self._served = (weakref.ref(snapshot), options, state)
        return state

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> list[HostClaim]:
        return self._parsed(snapshot, options, memo or CompileMemo()).all_claims()

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        parsed = self._parsed(snapshot, ctx.options, ctx.memo)
        return compile_httpproxies(snapshot, ctx, parsed.proxies, patched=parsed.patched)

    ignored_per_object = True

    def ignored_object(self, obj: KubeObject, options: CompileOptions) -> IgnoredObject | None:
        if (obj.group, obj.kind) != (GROUP, KIND):
            return None
        why = why_not_served(obj, options)
        return None if why is None else IgnoredObject.of(obj, why)

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
        """The HTTPProxies of another class: those the last read found, when it read `snapshot`
        (asking each object its class again costs a pass over all)."""
        last = self._served
        fits = last is not None and last[0]() is snapshot and last[1] == options
        if last is not None and fits and last[2].snapshot is snapshot:
            return list(last[2].ignored.values())
        out: list[IgnoredObject] = []
        for o in snapshot.kind(GROUP, KIND):
            why = why_not_served(o, options)
            if why is not None:
                out.append(IgnoredObject.of(o, why))
        return out

"""The HTTPProxies of one snapshot as the dialect reads them, patched from the compile before's
(issue 11: a change costs what it touches).

`ParsedState` holds, in (namespace, name) order: the proxies of turnout's class, read; the host
claims of each root; the proxies of another class with why they are ignored. A compile with a
delta re-reads only the HTTPProxies the delta names (`Delta.of_kind`); everything else is the
very same object as before. Reading an object is a pure function of the object and the options,
and other options drop the whole compile memo, this state included.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy.classes import why_not_served
from turnout.dialects.httpproxy.pieces import Pieces, in_order
from turnout.dialects.httpproxy.processor import claimed_hostname, claimed_listeners
from turnout.dialects.httpproxy.recording import Key
from turnout.dialects.httpproxy.spec import GROUP, KIND, ParsedProxy, RouteMemo, parse_proxy
from turnout.graph.dialect import HostClaim
from turnout.graph.memo import Delta
from turnout.objects import KubeObject
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot


@dataclass
class ParsedState:
    """See the module docstring. `order` is the sorted keys of `proxies`."""

    snapshot: Snapshot | None = None
    order: list[Key] = field(default_factory=list)
    proxies: dict[Key, ParsedProxy] = field(default_factory=dict)
    claims: Pieces[HostClaim] = field(default_factory=Pieces)
    ignored: dict[Key, IgnoredObject] = field(default_factory=dict)
    delta: Delta | None = None  # the one the last refresh applied
    patched: bool = False  # the last refresh read only what changed (else everything)

    def refresh(self, snapshot: Snapshot, options: CompileOptions, delta: Delta) -> None:
        """Brings the state to `snapshot`: `delta` says what changed since the snapshot it holds
        (everything is read again without one, or when the delta is the one already applied:
        the memo did not begin a compile of `snapshot`)."""
        if self.snapshot is snapshot:
            return
        self.patched = not (self.snapshot is None or delta.everything or delta is self.delta)
        if self.patched:
            keys = [(r.namespace, r.name) for r in delta.of_kind(GROUP, KIND)]
            self._patch(snapshot, options, keys)
        else:
            self._read_all(snapshot, options)
        self.snapshot, self.delta = snapshot, delta

    def _read_all(self, snapshot: Snapshot, options: CompileOptions) -> None:
        self.order, self.proxies, self.claims, self.ignored = [], {}, Pieces(), {}
        memo: RouteMemo = {}
        for o in snapshot.kind(GROUP, KIND):  # sorted by namespace/name
            key = (o.namespace, o.name)
            why = why_not_served(o, options)
            if why is not None:
                self.ignored[key] = IgnoredObject.of(o, why)
                continue
            proxy = self.proxies[key] = parse_proxy(o, memo)
            self.order.append(key)
            self.claims.set(key, host_claims(proxy, options))
        self.claims.finish(self.order)

    def _patch(self, snapshot: Snapshot, options: CompileOptions, keys: Iterable[Key]) -> None:
        new_proxy = new_ignored = False  # whether a dict gained a key (and must be reordered)
        for key in keys:
            o = snapshot.get(GROUP, KIND, *key)
            why = None if o is None else why_not_served(o, options)
            if o is not None and why is None:
                self.ignored.pop(key, None)
                new_proxy = self._read(key, o, options) or new_proxy
                continue
            self._forget(key)
            if o is None or why is None:
                self.ignored.pop(key, None)
            else:
                new_ignored = new_ignored or key not in self.ignored
                self.ignored[key] = IgnoredObject.of(o, why)
        if new_proxy:
            self.proxies = in_order(self.order, self.proxies)
        self.claims.finish(self.order)
        if new_ignored:
            self.ignored = dict(sorted(self.ignored.items(), key=_first))

    def _read(self, key: Key, o: KubeObject, options: CompileOptions) -> bool:
        """Reads one served object; whether its key is new."""
        new = key not in self.proxies
        if new:
            bisect.insort(self.order, key)
        proxy = self.proxies[key] = parse_proxy(o)
        self.claims.set(key, host_claims(proxy, options))
        return new

    def _forget(self, key: Key) -> None:
        if self.proxies.pop(key, None) is not None:
            del self.order[bisect.bisect_left(self.order, key)]
        self.claims.set(key, ())

    def all_claims(self) -> list[HostClaim]:
        """Every root's claims, in key order (a copy of the flat list)."""
        return list(self.claims.flat)


def _first(item: tuple[Key, IgnoredObject]) -> Key:
    return item[0]


def host_claims(proxy: ParsedProxy, options: CompileOptions) -> tuple[HostClaim, ...]:
    host = claimed_hostname(proxy, options)
    if host is None:
        return ()
    return tuple(HostClaim(lst, host, proxy.obj) for lst in claimed_listeners(proxy))

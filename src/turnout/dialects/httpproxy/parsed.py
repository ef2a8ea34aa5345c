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
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy.classes import why_not_served
from turnout.dialects.httpproxy.processor import claimed_hostname, claimed_listeners
from turnout.dialects.httpproxy.recording import Key
from turnout.dialects.httpproxy.root_index import in_order
from turnout.dialects.httpproxy.spec import GROUP, KIND, ParsedProxy, parse_proxy
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
    claims: dict[Key, tuple[HostClaim, ...]] = field(default_factory=dict)
    ignored: dict[Key, IgnoredObject] = field(default_factory=dict)

    def refresh(self, snapshot: Snapshot, options: CompileOptions, delta: Delta) -> None:
        """Brings the state to `snapshot`: `delta` says what changed since the snapshot it holds
        (meaningless, and everything is read, when it has none)."""
        if self.snapshot is snapshot:
            return
        if self.snapshot is None or delta.everything:
            self._read_all(snapshot, options)
        else:
            keys = [(r.namespace, r.name) for r in delta.of_kind(GROUP, KIND)]
            self._patch(snapshot, options, keys)
        self.snapshot = snapshot

    def _read_all(self, snapshot: Snapshot, options: CompileOptions) -> None:
        self.order, self.proxies, self.claims, self.ignored = [], {}, {}, {}
        for o in snapshot.kind(GROUP, KIND):  # sorted by namespace/name
            key = (o.namespace, o.name)
            why = why_not_served(o, options)
            if why is not None:
                self.ignored[key] = IgnoredObject.of(o, why)
                continue
            proxy = self.proxies[key] = parse_proxy(o)
            self.order.append(key)
            claims = host_claims(proxy, options)
            if claims:
                self.claims[key] = claims

    def _patch(self, snapshot: Snapshot, options: CompileOptions, keys: Iterable[Key]) -> None:
        added: set[str] = set()  # which dicts gained a key (and must be put back in order)
        for key in keys:
            o = snapshot.get(GROUP, KIND, *key)
            why = None if o is None else why_not_served(o, options)
            if o is None or why is not None:
                self._forget(key)
                if o is not None and why is not None:
                    if key not in self.ignored:
                        added.add("ignored")
                    self.ignored[key] = IgnoredObject.of(o, why)
                else:
                    self.ignored.pop(key, None)
                continue
            self.ignored.pop(key, None)
            added.update(self._read(key, o, options))
        if "proxies" in added:
            self.proxies = in_order(self.order, self.proxies)
        if "claims" in added:
            self.claims = in_order(self.order, self.claims)
        if "ignored" in added:
            self.ignored = dict(sorted(self.ignored.items(), key=_first))

    def _read(self, key: Key, o: KubeObject, options: CompileOptions) -> set[str]:
        """Reads one served object; which dicts gained its key."""
        added: set[str] = set()
        if key not in self.proxies:
            bisect.insort(self.order, key)
            added.add("proxies")
        proxy = self.proxies[key] = parse_proxy(o)
        claims = host_claims(proxy, options)
        if not claims:
            self.claims.pop(key, None)
        else:
            if key not in self.claims:
                added.add("claims")
            self.claims[key] = claims
        return added

    def _forget(self, key: Key) -> None:
        if self.proxies.pop(key, None) is not None:
            del self.order[bisect.bisect_left(self.order, key)]
        self.claims.pop(key, None)

    def all_claims(self) -> list[HostClaim]:
        """Every root's claims, in key order (one C-speed pass)."""
        return list(itertools.chain.from_iterable(self.claims.values()))


def _first(item: tuple[Key, IgnoredObject]) -> Key:
    return item[0]


def host_claims(proxy: ParsedProxy, options: CompileOptions) -> tuple[HostClaim, ...]:
    host = claimed_hostname(proxy, options)
    if host is None:
        return ()
    return tuple(HostClaim(lst, host, proxy.obj) for lst in claimed_listeners(proxy))

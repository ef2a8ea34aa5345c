"""Which roots a change can affect, from what each root's `Trace` read (issue 11: a change costs
the roots it touches, not a check of every root).

`RootIndex` inverts the traces of the compile before: for each HTTPProxy, Service and
(listener, hostname) a root read, the roots that read it; the roots that read Secrets or the
ExtensionServices; and for each proxy, the roots that reported a problem on it or reached it
(its status and the orphan rule come from those roots alone). A root no entry of the delta
reaches is one whose `Trace` the delta does not make stale (`Changed.stale`) and whose hostname
owners are the same: what it did before stands as it is.

A root whose trace holds parts (its top-level subtrees' traces, `recording.py`) is indexed by
counts: per root, how many of its flat traces read each proxy and Service and reached each
proxy. A root compiled again is patched from the traces that are not the very same objects in
its old and new trace, so a root of thousands of included proxies costs the subtrees walked
again.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.recording import Changed, Key, Trace, statuses_of, units
from turnout.objects import KubeObject

Host = tuple[str, str]  # (listener, hostname)
# The roots that read one key: a 1-tuple while one does (most keys: a set costs 216 bytes, four
# indexes of 10,000 roots hold 40,000), a set once two do.
Readers = tuple[Key] | set[Key]


def problems_by_proxy(trace: Trace) -> dict[Key, tuple[Problem, ...]]:
    """The problems `trace` reported, per proxy, in the order it reported them."""
    out: dict[Key, list[Problem]] = {}
    for key, problem in statuses_of(trace):
        out.setdefault(key, []).append(problem)
    return {key: tuple(problems) for key, problems in out.items()}


def moved_statuses(
    old: Mapping[Key, object], new: Mapping[Key, object], reached: set[Key]
) -> set[Key]:
    """The proxies whose status one root's new problems `new` can change against its old: those
    it reports other problems on, and those it reaches or stops reaching (`reached`, what
    `RootIndex.replace` says)."""
    was_problems, now_problems = old, new
    out = set(reached)
    out.update(was_problems.keys() ^ now_problems.keys())
    out.update(k for k, v in now_problems.items() if k in was_problems and was_problems[k] != v)
    return out


def _link(index: dict[Key, Readers], keys: Iterable[Key], root: Key) -> None:
    for key in keys:
        found = index.get(key)
        if found is None:
            index[key] = (root,)
        elif isinstance(found, tuple):
            if found[0] != root:
                index[key] = {found[0], root}
        else:
            found.add(root)


def _unlink(index: dict[Key, Readers], keys: Iterable[Key], root: Key) -> None:
    for key in keys:
        found = index.get(key)
        if found is None:
            continue
        if isinstance(found, tuple):
            if found[0] == root:
                del index[key]
            continue
        found.discard(root)
        if len(found) == 1:
            index[key] = (found.pop(),)
        elif not found:
            del index[key]


@dataclass
class RootIndex:
    """See the module docstring. `seen`: the owner every root reading a hostname found (the
    current owner, after each compile)."""

    proxies: dict[Key, Readers] = field(default_factory=dict)
    services: dict[Key, Readers] = field(default_factory=dict)
    owners: dict[Host, Readers] = field(default_factory=dict)
    seen: dict[Host, KubeObject | None] = field(default_factory=dict)
    secrets: set[Key] = field(default_factory=set)
    extensions: set[Key] = field(default_factory=set)
    problems: dict[Key, Readers] = field(default_factory=dict)
    reached: dict[Key, Readers] = field(default_factory=dict)
    # Per root whose trace has parts: its proxies, Services and reached proxies, counted over
    # its flat traces.
    counts: dict[Key, tuple[Counter[Key], ...]] = field(default_factory=dict)

    def _indexes(self) -> tuple[dict[Key, Readers], ...]:
        return (self.proxies, self.services, self.reached)

    def add(self, root: Key, trace: Trace, problems: Mapping[Key, object]) -> None:
        if trace.parts:
            flat = units(trace)
            counts = self.counts[root] = tuple(
                Counter(itertools.chain.from_iterable(map(read, flat))) for read in _READS
            )
            for index, counted in zip(self._indexes(), counts, strict=True):
                _link(index, counted, root)
        else:
            for index, read in zip(self._indexes(), _READS, strict=True):
                _link(index, read(trace), root)
        self._add_rest(root, trace, problems)

    def _add_rest(self, root: Key, trace: Trace, problems: Mapping[Key, object]) -> None:
        for unit in units(trace):
            _link(self.owners, unit.owners, root)
            self.seen.update(unit.owners)
        if any(unit.secret_reads for unit in units(trace)):
            self.secrets.add(root)
        if any(unit.extension_reads for unit in units(trace)):
            self.extensions.add(root)
        _link(self.problems, problems, root)

    def remove(self, root: Key, trace: Trace, problems: Mapping[Key, object]) -> None:
        self.counts.pop(root, None)
        for index, read in zip(self._indexes(), _READS, strict=True):
            _unlink(index, _flat(trace, read), root)
        for unit in units(trace):
            _unlink(self.owners, unit.owners, root)
            for host in unit.owners:
                if host not in self.owners:
                    self.seen.pop(host, None)
        self.secrets.discard(root)
        self.extensions.discard(root)
        _unlink(self.problems, problems, root)

    def replace(
        self,
        root: Key,
        old: tuple[Trace, Mapping[Key, object]],
        new: tuple[Trace, Mapping[Key, object]],
    ) -> set[Key]:
        """`remove` of the old (trace, problems) and `add` of the new, by their differences (set
        operations at C speed, or counts patched from the parts that are not the very same
        traces: a root that reads thousands of proxies and changed one). The proxies it reached
        then or now, not both."""
        (was, was_problems), (now, now_problems) = old, new
        if bool(was.parts) != bool(now.parts) or (was.parts and root not in self.counts):
            reached = _reached(was) ^ _reached(now)
            self.remove(root, was, was_problems)
            self.add(root, now, now_problems)
            return reached
        if now.parts:
            reached = self._patch_counts(root, units(was), units(now))
        else:
            reached = self._patch_sets(root, was, now)
        self._replace_rest(root, was, now)
        _unlink(self.problems, was_problems.keys() - now_problems.keys(), root)
        _link(self.problems, now_problems.keys() - was_problems.keys(), root)
        return reached

    def _patch_sets(self, root: Key, was: Trace, now: Trace) -> set[Key]:
        for index, read in zip(self._indexes(), _READS, strict=True):
            before, after = read(was), read(now)
            if before != after:  # one pass without a new set, the usual answer
                _unlink(index, before - after, root)
                _link(index, after - before, root)
        return set() if was.reached == now.reached else was.reached ^ now.reached

    def _patch_counts(self, root: Key, was: list[Trace], now: list[Trace]) -> set[Key]:
        """The counts of `root` patched from its flat traces `was` to `now`: the traces of one
        that are not in the other (by identity, counted) are added or taken out."""
        extra = Counter(map(id, now))
        extra.subtract(map(id, was))
        came, gone = [], []
        for t in now:
            if extra[id(t)] > 0:
                came.append(t)
                extra[id(t)] -= 1
        for t in was:
            if extra[id(t)] < 0:
                gone.append(t)
                extra[id(t)] += 1
        reached: set[Key] = set()
        for index, read, counts in zip(self._indexes(), _READS, self.counts[root], strict=True):
            entered, left = _count(counts, came, gone, read)
            _link(index, entered, root)
            _unlink(index, left, root)
            if index is self.reached:
                reached.update(entered, left)
        return reached

    def _replace_rest(self, root: Key, was: Trace, now: Trace) -> None:
        if was.parts or now.parts:
            # Hostname owners, Secrets and ExtensionServices: each a few reads per root.
            self._unlink_owners(root, was)
            self._add_rest(root, now, {})
            if not _secret_reads(now):
                self.secrets.discard(root)
            if not _ext_reads(now):
                self.extensions.discard(root)
            return
        gone = was.owners.keys() - now.owners.keys()
        _unlink(self.owners, gone, root)
        _link(self.owners, now.owners.keys() - was.owners.keys(), root)
        for host in gone:
            if host not in self.owners:
                self.seen.pop(host, None)
        self.seen.update(now.owners)
        for readers, reads in (
            (self.secrets, now.secret_reads),
            (self.extensions, now.extension_reads),
        ):
            if reads:
                readers.add(root)
            else:
                readers.discard(root)

    def _unlink_owners(self, root: Key, trace: Trace) -> None:
        for unit in units(trace):
            _unlink(self.owners, unit.owners, root)
            for host in unit.owners:
                if host not in self.owners:
                    self.seen.pop(host, None)

    def affected(
        self,
        changed: Changed,
        owners: Mapping[Host, KubeObject],
        moved: Collection[Host] | None = None,
    ) -> set[Key]:
        """The roots whose trace `changed` makes stale, or one of whose hostnames has another
        owner in `owners` than the one it found. `moved`: the hostnames whose owner changed since
        the compile before, when the caller knows them (else every hostname read is looked up)."""
        out: set[Key] = set()
        for key in changed.proxies:
            out.update(self.proxies.get(key, ()))
        for key in changed.services:
            out.update(self.services.get(key, ()))
        if changed.secrets:
            out |= self.secrets
        if changed.extensions:
            out |= self.extensions
        for host in self.moved(owners) if moved is None else moved:
            out.update(self.owners.get(host, ()))
        return out

    def moved(self, owners: Mapping[Host, KubeObject]) -> list[Host]:
        """The hostnames read whose owner is not the very same object as the one found: one
        C-speed pass over them (map, identity compare, compress)."""
        hosts = list(self.seen)
        now = map(owners.get, hosts)
        return list(itertools.compress(hosts, map(operator.is_not, now, self.seen.values())))


_READS = (attrgetter("proxies"), attrgetter("services"), attrgetter("reached"))


def _flat(trace: Trace, read: attrgetter[set[Key]]) -> set[Key]:
    """One kind of `trace`'s reads, its parts' too."""
    if not trace.parts:
        return read(trace)
    return set(itertools.chain.from_iterable(map(read, units(trace))))


def _reached(trace: Trace) -> set[Key]:
    return _flat(trace, _READS[2])


def _secret_reads(trace: Trace) -> bool:
    return any(unit.secret_reads for unit in units(trace))


def _ext_reads(trace: Trace) -> bool:
    return any(unit.extension_reads for unit in units(trace))


def _count(
    counts: Counter[Key], came: list[Trace], gone: list[Trace], read: attrgetter[set[Key]]
) -> tuple[list[Key], list[Key]]:
    """`counts` patched: the keys `came` read counted in, those `gone` read counted out; the
    keys that entered and those that left. The usual patch replaces a subtree by one that reads
    mostly the same keys: both sides are counted at C speed, and only the keys counted
    differently are looked at."""
    plus = Counter(itertools.chain.from_iterable(map(read, came)))
    minus = Counter(itertools.chain.from_iterable(map(read, gone)))
    entered: list[Key] = []
    left: list[Key] = []
    for key in {key for key, _ in plus.items() ^ minus.items()}:
        was = counts.get(key, 0)
        now = was + plus.get(key, 0) - minus.get(key, 0)
        if now:
            counts[key] = now
        else:
            del counts[key]
        if not was:
            entered.append(key)
        elif not now:
            left.append(key)
    return entered, left

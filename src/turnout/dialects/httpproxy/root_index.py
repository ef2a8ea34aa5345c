"""Which roots a change can affect, from what each root's `Trace` read (issue 11: a change costs
the roots it touches, not a check of every root).

`RootIndex` inverts the traces of the compile before: for each HTTPProxy, Service and
(listener, hostname) a root read, the roots that read it; the roots that read Secrets or the
ExtensionServices; and for each proxy, the roots that reported a problem on it or reached it
(its status and the orphan rule come from those roots alone). A root no entry of the delta
reaches is one whose `Trace` the delta does not make stale (`Changed.stale`) and whose hostname
owners are the same: what it did before stands as it is.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.recording import Changed, Key, Trace
from turnout.objects import KubeObject

Host = tuple[str, str]  # (listener, hostname)


def problems_by_proxy(trace: Trace) -> dict[Key, tuple[Problem, ...]]:
    """The problems `trace` reported, per proxy, in the order it reported them."""
    out: dict[Key, list[Problem]] = {}
    for key, problem in trace.statuses:
        out.setdefault(key, []).append(problem)
    return {key: tuple(problems) for key, problems in out.items()}


def moved_statuses(
    old: tuple[Trace, Mapping[Key, object]], new: tuple[Trace, Mapping[Key, object]]
) -> set[Key]:
    """The proxies whose status one root's new (trace, problems) can change against its old: those
    it reports other problems on, and those it reaches or stops reaching."""
    (was, was_problems), (now, now_problems) = old, new
    out = set() if was.reached == now.reached else was.reached ^ now.reached
    out.update(was_problems.keys() ^ now_problems.keys())
    out.update(k for k, v in now_problems.items() if k in was_problems and was_problems[k] != v)
    return out


def _link(index: dict[Key, set[Key]], keys: Iterable[Key], root: Key) -> None:
    for key in keys:
        found = index.get(key)
        if found is None:
            index[key] = {root}
        else:
            found.add(root)


def _unlink(index: dict[Key, set[Key]], keys: Iterable[Key], root: Key) -> None:
    for key in keys:
        found = index.get(key)
        if found is not None:
            found.discard(root)
            if not found:
                del index[key]


@dataclass
class RootIndex:
    """See the module docstring. `seen`: the owner every root reading a hostname found (the
    current owner, after each compile)."""

    proxies: dict[Key, set[Key]] = field(default_factory=dict)
    services: dict[Key, set[Key]] = field(default_factory=dict)
    owners: dict[Host, set[Key]] = field(default_factory=dict)
    seen: dict[Host, KubeObject | None] = field(default_factory=dict)
    secrets: set[Key] = field(default_factory=set)
    extensions: set[Key] = field(default_factory=set)
    problems: dict[Key, set[Key]] = field(default_factory=dict)
    reached: dict[Key, set[Key]] = field(default_factory=dict)

    def add(self, root: Key, trace: Trace, problems: Mapping[Key, object]) -> None:
        _link(self.proxies, trace.proxies, root)
        _link(self.services, trace.services, root)
        _link(self.owners, trace.owners, root)
        self.seen.update(trace.owners)
        if trace.secret_reads:
            self.secrets.add(root)
        if trace.extension_reads:
            self.extensions.add(root)
        _link(self.problems, problems, root)
        _link(self.reached, trace.reached, root)

    def remove(self, root: Key, trace: Trace, problems: Mapping[Key, object]) -> None:
        _unlink(self.proxies, trace.proxies, root)
        _unlink(self.services, trace.services, root)
        _unlink(self.owners, trace.owners, root)
        for host in trace.owners:
            if host not in self.owners:
                self.seen.pop(host, None)
        self.secrets.discard(root)
        self.extensions.discard(root)
        _unlink(self.problems, problems, root)
        _unlink(self.reached, trace.reached, root)

    def replace(
        self,
        root: Key,
        old: tuple[Trace, Mapping[Key, object]],
        new: tuple[Trace, Mapping[Key, object]],
    ) -> None:
        """`remove` of the old (trace, problems) and `add` of the new, by their differences (set
        operations at C speed: a root that reads thousands of proxies and changed one)."""
        (was, was_problems), (now, now_problems) = old, new
        for index, before, after in (
            (self.proxies, was.proxies, now.proxies),
            (self.services, was.services, now.services),
            (self.reached, was.reached, now.reached),
        ):
            if before != after:  # one pass without a new set, the usual answer
                _unlink(index, before - after, root)
                _link(index, after - before, root)
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
        _unlink(self.problems, was_problems.keys() - now_problems.keys(), root)
        _link(self.problems, now_problems.keys() - was_problems.keys(), root)

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

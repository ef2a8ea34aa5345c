"""A virtual host's routes taken per route across compiles, so that a big host (one HTTPProxy
root including thousands of children) costs what its replaced routes cost, not its length.

An incremental dialect hands back, for a changed host, a route tuple whose unchanged routes are
the very same `Route` objects as before. A stage that keeps something per route keeps it by the
route's identity, and patches it from the identity diff of the host's route tuples
(`route_diff`: the routes added and removed, found by C-speed dict and set passes). The routes
are kept with their ids (`RouteIds`), so an id reused by a new object never matches.

A dialect that patched a host's route tuple from the one before knows the routes it added and
removed: `IdsMemo.derive` makes the new tuple's ids from the old ones with them and records
that diff, so the stages' `ids_of` and `route_diff` of that host cost the changed routes, not
the host's length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import filterfalse

from turnout.graph.memo import IdentityMemo
from turnout.graph.model import Route

RouteIds = dict[int, Route]  # id(route) -> route: a host's distinct routes


Diff = tuple[list[Route], list[Route]]


class IdsMemo(IdentityMemo[tuple[Route, ...], RouteIds]):
    """`ids_of` each route tuple, and the `route_diff`s made this compile: shared by the stages
    of a compile (`CompileMemo.stage`), which diff the same tuples."""

    __slots__ = ("diffs",)

    def __init__(self) -> None:
        super().__init__()
        self.diffs: dict[tuple[int, int], tuple[RouteIds, RouteIds, Diff]] = {}

    def age(self) -> None:
        super().age()
        self.diffs = {}

    def derive(
        self, base: RouteIds, routes: tuple[Route, ...], added: list[Route], removed: list[Route]
    ) -> RouteIds:
        """`ids_of(routes)`, where `routes` is a tuple whose routes are those of the tuple of
        `base` but `removed` (by identity), and `added`: made from `base` and the diff recorded
        for `route_diff(base, ...)` (the caller vouches for the diff; a route added that `base`
        holds, one removed that it does not, or a count that does not match `routes` falls back
        to `ids_of`)."""
        if not added and not removed and len(base) == len(routes):
            return self.put(routes, base)
        ids = base.copy()
        for route in removed:
            if ids.pop(id(route), None) is not route:
                return ids_of(routes, self)
        for route in added:
            if id(route) in ids:
                return ids_of(routes, self)
            ids[id(route)] = route
        if len(ids) != len(routes):
            return ids_of(routes, self)
        self.diffs[(id(base), id(ids))] = (base, ids, (list(added), list(removed)))
        return self.put(routes, ids)


def ids_of(routes: tuple[Route, ...], memo: IdsMemo | None = None) -> RouteIds:
    """`routes` by id; made once per route tuple when `memo` is given (the stages of one
    compile share it)."""
    if memo is None:
        return dict(zip(map(id, routes), routes, strict=True))
    found = memo.get(routes)
    if found is None:
        found = memo.put(routes, dict(zip(map(id, routes), routes, strict=True)))
    return found


def route_diff(old: RouteIds, new: RouteIds, memo: IdsMemo | None = None) -> Diff:
    """The routes of `new` that `old` does not hold, and those of `old` that `new` does not
    (by identity); made once per pair this compile when `memo` is given."""
    if old is new:
        return [], []
    hit = None if memo is None else memo.diffs.get((id(old), id(new)))
    if hit is not None and hit[0] is old and hit[1] is new:
        return hit[2]
    if old.keys() == new.keys():
        return [], []
    # `filterfalse` over the keys: one C pass each way, cheaper than two set differences.
    added = list(map(new.__getitem__, filterfalse(old.__contains__, new)))
    removed = list(map(old.__getitem__, filterfalse(new.__contains__, old)))
    found = (added, removed)
    if memo is not None:
        memo.diffs[(id(old), id(new))] = (old, new, found)
    return found


class NameCounts:
    """Names counted over a host's routes (each distinct route once), patched from the routes
    added and removed; `names` is the same frozenset while no name entered or left."""

    __slots__ = ("counts", "ids", "names")

    def __init__(self) -> None:
        self.ids: RouteIds = {}
        self.counts: dict[str, int] = {}
        self.names: frozenset[str] = frozenset()

    def patch(
        self,
        ids: RouteIds,
        names_of: Callable[[Route], Iterable[str]],
        memo: IdsMemo | None = None,
    ) -> frozenset[str]:
        """The names of the routes `ids` holds, `names_of` each route."""
        added, removed = route_diff(self.ids, ids, memo)
        self.ids = ids
        flipped = False
        counts = self.counts
        for route in removed:
            for name in names_of(route):
                left = counts[name] - 1
                if left:
                    counts[name] = left
                else:
                    del counts[name]
                    flipped = True
        for route in added:
            for name in names_of(route):
                count = counts.get(name, 0)
                counts[name] = count + 1
                flipped = flipped or not count
        if flipped:
            self.names = frozenset(counts)
        return self.names

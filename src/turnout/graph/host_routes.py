"""A virtual host's routes taken per route across compiles, so that a big host (one HTTPProxy
root including thousands of children) costs what its replaced routes cost, not its length.

An incremental dialect hands back, for a changed host, a route tuple whose unchanged routes are
the very same `Route` objects as before. A stage that keeps something per route keeps it by the
route's identity, and patches it from the identity diff of the host's route tuples
(`route_diff`: the routes added and removed, found by C-speed dict and set passes over the
tuples' ids, `ids_of`). A stage keeps the last tuple it saw (which holds its routes alive, so an
id reused by a new object never matches).

A dialect that patched a host's route tuple from the one before knows the routes it added and
removed: `IdsMemo.derive` records that diff for the two tuples and patches the ids of the tuple
before in place into the new tuple's, so the stages' `route_diff` and `ids_of` of that host cost
the changed routes, not the host's length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import filterfalse

from turnout.graph.memo import IdentityMemo
from turnout.graph.model import Route

RouteIds = dict[int, Route]  # id(route) -> route: a host's distinct routes
# A host of fewer routes is taken whole by the stages that keep something per route: their
# per-route state would cost more memory than it saves time. Its ids are not memoized either.
PER_ROUTE_MIN_ROUTES = 64
Routes = tuple[Route, ...]

Diff = tuple[list[Route], list[Route]]


class IdsMemo(IdentityMemo[Routes, RouteIds]):
    """`ids_of` each route tuple, and the `route_diff`s of route tuples made this compile:
    shared by the stages of a compile (`CompileMemo.stage`), which diff the same tuples."""

    __slots__ = ("diffs",)

    def __init__(self) -> None:
        super().__init__()
        self.diffs: dict[tuple[int, int], tuple[Routes, Routes, Diff]] = {}

    def age(self) -> None:
        super().age()
        self.diffs = {}

    def end(self) -> None:
        """The compile is over: its diffs are not asked for again (they hold the route tuples
        before, and the first compile's hold every route in lists)."""
        self.diffs = {}

    def derive(
        self,
        base: tuple[Routes, RouteIds],
        routes: Routes,
        added: list[Route],
        removed: list[Route],
    ) -> RouteIds:
        """`ids_of(routes)`, where `routes` holds the routes of the tuple `base[0]` but
        `removed` (by identity), and `added`; `base[1]`: that tuple's ids, which only the
        caller holds. The diff is recorded for `route_diff(base[0], routes)` and `base[1]`
        becomes `routes`' ids in place (the tuple before forgets its entry). The caller vouches
        for the diff; one that cannot be (a route added that the tuple before holds, one
        removed that it does not, a count that does not match) falls back to `ids_of`."""
        before, ids = base
        self.discard(before)
        if not added and not removed and len(ids) == len(routes):
            return self.put(routes, ids)
        if not _fits(ids, routes, added, removed):
            return ids_of(routes, self)
        for route in removed:
            del ids[id(route)]
        for route in added:
            ids[id(route)] = route
        self.diffs[(id(before), id(routes))] = (before, routes, (list(added), list(removed)))
        return self.put(routes, ids)


def _fits(ids: RouteIds, routes: Routes, added: list[Route], removed: list[Route]) -> bool:
    """Whether `added` and `removed` can turn the routes of `ids` into those of `routes`."""
    gone, came = set(map(id, removed)), set(map(id, added))
    return (
        len(gone) == len(removed)
        and len(came) == len(added)
        and all(ids.get(id(route)) is route for route in removed)
        and not any(map(ids.__contains__, came))
        and len(ids) - len(gone) + len(came) == len(routes)
    )


def ids_of(routes: Routes, memo: IdsMemo | None = None) -> RouteIds:
    """`routes` by id; made once per route tuple when `memo` is given (the stages of one
    compile share it) and the host is not small (`PER_ROUTE_MIN_ROUTES`)."""
    if memo is None or len(routes) < PER_ROUTE_MIN_ROUTES:
        return dict(zip(map(id, routes), routes, strict=True))
    found = memo.get(routes)
    if found is None:
        found = memo.put(routes, dict(zip(map(id, routes), routes, strict=True)))
    return found


def route_diff(old: Routes, new: Routes, memo: IdsMemo | None = None) -> Diff:
    """The routes of `new` that `old` does not hold, and those of `old` that `new` does not
    (by identity); made once per pair this compile when `memo` is given."""
    if old is new:
        return [], []
    hit = None if memo is None else memo.diffs.get((id(old), id(new)))
    if hit is not None and hit[0] is old and hit[1] is new:
        return hit[2]
    before, after = ids_of(old, memo), ids_of(new, memo)
    found: Diff = ([], [])
    if before is not after and before.keys() != after.keys():
        # `filterfalse` over the keys: one C pass each way, cheaper than two set differences.
        found = (
            list(map(after.__getitem__, filterfalse(before.__contains__, after))),
            list(map(before.__getitem__, filterfalse(after.__contains__, before))),
        )
    if memo is not None:
        memo.diffs[(id(old), id(new))] = (old, new, found)
    return found


class NameCounts:
    """Names counted over a host's routes (each distinct route once), patched from the routes
    added and removed; `names` is the same frozenset while no name entered or left."""

    __slots__ = ("counts", "names", "routes")

    def __init__(self) -> None:
        self.routes: Routes = ()
        self.counts: dict[str, int] = {}
        self.names: frozenset[str] = frozenset()

    def patch(
        self,
        routes: Routes,
        names_of: Callable[[Route], Iterable[str]],
        memo: IdsMemo | None = None,
    ) -> frozenset[str]:
        """The names of `routes` (each distinct route once), `names_of` each route."""
        added, removed = route_diff(self.routes, routes, memo)
        self.routes = routes
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

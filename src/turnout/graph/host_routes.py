"""A virtual host's routes taken per route across compiles, so that a big host (one HTTPProxy
root including thousands of children) costs what its replaced routes cost, not its length.

An incremental dialect hands back, for a changed host, a route tuple whose unchanged routes are
the very same `Route` objects as before. A stage that keeps something per route keeps it by the
route's identity, and patches it from the identity diff of the host's route tuples
(`route_diff`: the routes added and removed, found by C-speed dict and set passes). The routes
are kept with their ids (`RouteIds`), so an id reused by a new object never matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from turnout.graph.memo import IdentityMemo
from turnout.graph.model import Route

RouteIds = dict[int, Route]  # id(route) -> route: a host's distinct routes


class IdsMemo(IdentityMemo[tuple[Route, ...], RouteIds]):
    """`ids_of` each route tuple, shared by the stages of a compile (`CompileMemo.stage`)."""


def ids_of(routes: tuple[Route, ...], memo: IdsMemo | None = None) -> RouteIds:
    """`routes` by id; made once per route tuple when `memo` is given (the stages of one
    compile share it)."""
    if memo is None:
        return dict(zip(map(id, routes), routes, strict=True))
    found = memo.get(routes)
    if found is None:
        found = memo.put(routes, dict(zip(map(id, routes), routes, strict=True)))
    return found


def route_diff(old: RouteIds, new: RouteIds) -> tuple[list[Route], list[Route]]:
    """The routes of `new` that `old` does not hold, and those of `old` that `new` does not
    (by identity)."""
    if old is new or old.keys() == new.keys():
        return [], []
    added = list(map(new.__getitem__, new.keys() - old.keys()))
    removed = list(map(old.__getitem__, old.keys() - new.keys()))
    return added, removed


class NameCounts:
    """Names counted over a host's routes (each distinct route once), patched from the routes
    added and removed; `names` is the same frozenset while no name entered or left."""

    __slots__ = ("counts", "ids", "names")

    def __init__(self) -> None:
        self.ids: RouteIds = {}
        self.counts: dict[str, int] = {}
        self.names: frozenset[str] = frozenset()

    def patch(self, ids: RouteIds, names_of: Callable[[Route], Iterable[str]]) -> frozenset[str]:
        """The names of the routes `ids` holds, `names_of` each route."""
        added, removed = route_diff(self.ids, ids)
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

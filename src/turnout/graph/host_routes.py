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
from collections.abc import Set as AbstractSet
from itertools import compress

from turnout.graph.memo import IdentityMemo
from turnout.graph.model import Route

# The ids of a host's routes: a set of ints, so that making and comparing it never touches the
# route objects themselves (scattered over a large heap, each a cache miss); the route tuple the
# ids were taken from holds the routes, so an id is never reused while it is kept.
RouteIds = frozenset[int]
Diff = tuple[list[Route], list[Route]]


class IdsMemo(IdentityMemo[tuple[Route, ...], RouteIds]):
    """`ids_of` each route tuple, and the `route_diff`s made this compile: shared by the stages
    of a compile (`CompileMemo.stage`), which diff the same tuples."""

    __slots__ = ("diffs",)

    def __init__(self) -> None:
        super().__init__()
        self.diffs: dict[tuple[int, int], tuple[tuple[Route, ...], tuple[Route, ...], Diff]] = {}

    def age(self) -> None:
        super().age()
        self.diffs = {}


def ids_of(routes: tuple[Route, ...], memo: IdsMemo | None = None) -> RouteIds:
    """The ids of `routes`; made once per route tuple when `memo` is given (the stages of one
    compile share it)."""
    if memo is None:
        return frozenset(map(id, routes))
    found = memo.get(routes)
    if found is None:
        found = memo.put(routes, frozenset(map(id, routes)))
    return found


def route_diff(
    old: tuple[tuple[Route, ...], RouteIds],
    new: tuple[tuple[Route, ...], RouteIds],
    memo: IdsMemo | None = None,
) -> Diff:
    """The distinct routes of the `new` (routes, ids) that `old` does not hold, and those of
    `old` that `new` does not (by identity); made once per pair this compile with `memo`."""
    if old[0] is new[0] or old[1] == new[1]:
        return [], []
    key = (id(old[0]), id(new[0]))
    hit = None if memo is None else memo.diffs.get(key)
    if hit is not None and hit[0] is old[0] and hit[1] is new[0]:
        return hit[2]
    found = (_only(new[0], new[1] - old[1]), _only(old[0], old[1] - new[1]))
    if memo is not None:
        memo.diffs[key] = (old[0], new[0], found)
    return found


def _only(routes: tuple[Route, ...], ids: AbstractSet[int]) -> list[Route]:
    """The routes whose ids are `ids`, each once: one C pass over the tuple."""
    if not ids:
        return []
    picked = list(compress(routes, map(ids.__contains__, map(id, routes))))
    return list(dict(zip(map(id, picked), picked, strict=True)).values())


class NameCounts:
    """Names counted over a host's routes (each distinct route once), patched from the routes
    added and removed; `names` is the same frozenset while no name entered or left."""

    __slots__ = ("counts", "ids", "names", "routes")

    def __init__(self) -> None:
        self.routes: tuple[Route, ...] = ()
        self.ids: RouteIds = frozenset()
        self.counts: dict[str, int] = {}
        self.names: frozenset[str] = frozenset()

    def patch(
        self,
        routes: tuple[Route, ...],
        names_of: Callable[[Route], Iterable[str]],
        memo: IdsMemo | None = None,
    ) -> frozenset[str]:
        """The names of `routes`, `names_of` each route."""
        ids = ids_of(routes, memo)
        added, removed = route_diff((self.routes, self.ids), (routes, ids), memo)
        self.routes, self.ids = routes, ids
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

"""A root's routes deduplicated and in Contour's first-match order, patched when only some of its
include subtrees were walked again (issue 11: a change to one child of a root with thousands of
includes costs that child, not the root's every route).

A root's walk gives its routes in parts (`processor._walk`): each top-level include's routes,
then the root's own. A full compile reads them in walk order: a later route with the same match
replaces an earlier one at the earlier one's place (Contour keys a virtual host's routes by their
conditions), and each replacement is reported on the replaced route's proxy; the routes that are
left are then sorted by `contour.order.route_key`, ties keeping that place.

`RouteOrder` keeps that result: the parts, the candidates of each match in walk order, and the
winners in first-match order beside their sort keys. A part that is the very same list as before
is unchanged; in a changed part, the candidates that are the very same objects are kept (a
replayed subtree's), the others removed or added. Only the matches of those are redone: their
group, their winner and its place (bisection on the keys; among equal keys, the place of each
match's first candidate in the walk). A kept winner keeps its `Route`, the very same object.
The patch gives up (and the caller builds the order whole) when the parts are not the same in
number, the root's JWT providers changed, a kept candidate moved against another, an added
candidate names a provider the root does not define, or too many candidates changed.

The routes go out as a tuple (`routes_tuple`): the very same tuple while the patch changed no
route, else a new one whose ids the graph's stages get from the tuple before and the routes the
patch took out and put in (`graph.host_routes.IdsMemo.derive`), so that a host of 50,000 routes
is diffed in what changed.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from turnout.dialects.contour.order import route_key
from turnout.dialects.httpproxy.authorization import AuthPolicySpec
from turnout.dialects.httpproxy.jwt import VhostJwt
from turnout.graph.host_routes import PER_ROUTE_MIN_ROUTES, IdsMemo, RouteIds, ids_of
from turnout.graph.model import Route, RouteMatch

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A route a root's walk found, with what the root decides about it later."""

    route: Route
    proxy: Key  # whose status hears about a replaced duplicate
    permit_insecure: bool = False
    auth_policy: AuthPolicySpec | None = None  # the route's own `authPolicy`
    jwt_provider: str = ""  # the root's provider the route requires (`jwt.py`)


Part = Sequence[Candidate]
# (the replaced candidate, the one replacing it), in the walk order of the one replacing it.
Replacement = tuple[Candidate, Candidate]


@dataclass(slots=True)
class RouteOrder:
    """See the module docstring. `order` and `keys` hold the winners (as walked) in first-match
    order, `routes` their routes with the JWT validation they require; `replacements` is what a
    full compile reports. `undefined`: the first provider (in first-match-of-walk order) a
    winner requires that the root does not define; the order is then not usable."""

    parts: list[Part]
    part_of: dict[int, int]  # id(candidate) -> its part
    winners: dict[RouteMatch, Candidate]
    groups: dict[RouteMatch, list[Candidate]]  # matches of two candidates or more, walk order
    jwt: VhostJwt
    keys: list[tuple[object, ...]] = field(default_factory=list)
    order: list[Candidate] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    replacements: list[Replacement] = field(default_factory=list)
    undefined: str = ""
    # Each part's candidates by identity -> place, made when a duplicate or a tie needs it.
    places: dict[int, tuple[Part, dict[int, int]]] = field(default_factory=dict)
    # `routes` as last handed out (`routes_tuple`) with their ids, and the routes taken out of
    # and put into `routes` since (an entry replaced counts as both).
    made: tuple[Route, ...] | None = None
    ids: RouteIds | None = None
    gone: list[Route] = field(default_factory=list)
    came: list[Route] = field(default_factory=list)
    # Only `parts`, `jwt` and `made` are kept (a small order, `compact`); `patch` makes the rest
    # again first (`_expanded`).
    compact: bool = False

    def place(self, c: Candidate) -> tuple[int, int]:
        """Where `c` is in the walk: (part, index in the part)."""
        p = self.part_of[id(c)]
        cached = self.places.get(p)
        if cached is None or cached[0] is not self.parts[p]:
            part = self.parts[p]
            cached = self.places[p] = (part, dict(zip(map(id, part), itertools.count())))
        return p, cached[1][id(c)]

    def first(self, match: RouteMatch) -> tuple[int, int]:
        """Where the first candidate of `match` is in the walk (the place of its winner)."""
        group = self.groups.get(match)
        return self.place(group[0] if group is not None else self.winners[match])


def with_jwt(c: Candidate, jwt: VhostJwt) -> Route:
    """The route with the JWT validation of the provider it requires (which `jwt` defines)."""
    if not c.jwt_provider:
        return c.route
    policies = dataclasses.replace(c.route.policies, jwt=jwt.providers[c.jwt_provider])
    return dataclasses.replace(c.route, policies=policies)


def _undefined(c: Candidate, jwt: VhostJwt) -> bool:
    return bool(c.jwt_provider) and c.jwt_provider not in jwt.providers


def build(parts: Sequence[Part], jwt: VhostJwt) -> RouteOrder:
    """The order as a full compile makes it."""
    return _built(parts, jwt)


def _built(parts: Sequence[Part], jwt: VhostJwt) -> RouteOrder:
    winners: dict[RouteMatch, Candidate] = {}
    groups: dict[RouteMatch, list[Candidate]] = {}
    replacements: list[Replacement] = []
    for c in itertools.chain.from_iterable(parts):
        match = c.route.match
        prev = winners.get(match)
        if prev is not None:
            replacements.append((prev, c))
            group = groups.get(match)
            if group is None:
                groups[match] = [prev, c]
            else:
                group.append(c)
        winners[match] = c
    part_of = {id(c): p for p, part in enumerate(parts) for c in part}
    out = RouteOrder(list(parts), part_of, winners, groups, jwt, replacements=replacements)
    # The winners in the walk order of their matches' first candidates (a dict keeps the place
    # of a key's first insertion), which a stable sort keeps among equal keys.
    first_seen = list(winners.values())
    for c in first_seen:
        if _undefined(c, jwt):
            out.undefined = c.jwt_provider
            return out
    keys = [route_key(c.route.match) for c in first_seen]
    ranked = sorted(range(len(keys)), key=keys.__getitem__)
    out.keys = [keys[i] for i in ranked]
    out.order = [first_seen[i] for i in ranked]
    out.routes = [with_jwt(c, jwt) for c in out.order]
    return out


@dataclass(slots=True)
class _Changes:
    removed: list[Candidate] = field(default_factory=list)
    added: list[tuple[int, Candidate]] = field(default_factory=list)


def _changes(old: RouteOrder, parts: Sequence[Part], limit: int) -> _Changes | None:
    """The candidates removed and added in the parts that are not the very same lists; None
    when a kept candidate moved against another (or appears twice), or more than `limit`
    changed."""
    out = _Changes()
    for p in itertools.compress(range(len(parts)), map(operator.is_not, old.parts, parts)):
        before, after = old.parts[p], parts[p]
        before_ids, after_ids = set(map(id, before)), set(map(id, after))
        if len(after_ids) != len(after):
            return None
        kept_before = list(filter(after_ids.__contains__, map(id, before)))
        if kept_before != list(filter(before_ids.__contains__, map(id, after))):
            return None
        out.removed += _not_in(before, after_ids)
        out.added += zip(itertools.repeat(p), _not_in(after, before_ids), strict=False)
        if len(out.removed) + len(out.added) > limit:
            return None
    return out


def _not_in(part: Part, ids: set[int]) -> Iterator[Candidate]:
    """The candidates of `part` whose identity is not in `ids` (C-speed passes)."""
    return itertools.compress(part, map(operator.not_, map(ids.__contains__, map(id, part))))


def patch(old: RouteOrder, parts: Sequence[Part], jwt: VhostJwt) -> RouteOrder | None:
    """`old` (a usable order) patched to give what `build(parts, jwt)` gives, or None when it
    cannot (see the module docstring). `old` is changed in place and returned (a compact one
    is made whole first, and that is returned)."""
    if len(parts) != len(old.parts) or old.jwt != jwt or old.undefined:
        return None
    if old.compact:
        old = _expanded(old)
    changes = _changes(old, parts, 64 + len(old.order) // 8)
    if changes is None or any(_undefined(c, jwt) for _, c in changes.added):
        return None
    old.parts = list(parts)
    for c in changes.removed:
        del old.part_of[id(c)]
    for p, c in changes.added:
        old.part_of[id(c)] = p
    before: dict[RouteMatch, Candidate | None] = {}  # each changed match's winner before
    regrouped = False
    for c in changes.removed:
        before.setdefault(c.route.match, old.winners.get(c.route.match))
        regrouped = _remove(old, c) or regrouped
    for _, c in changes.added:
        before.setdefault(c.route.match, old.winners.get(c.route.match))
        regrouped = _add(old, c) or regrouped
    _reorder(old, before)
    if regrouped:
        old.replacements = _replacements(old)
    return old


def _remove(order: RouteOrder, c: Candidate) -> bool:
    """Takes `c` out of its match's candidates; whether a group of two or more changed."""
    match = c.route.match
    group = order.groups.get(match)
    if group is None:
        del order.winners[match]
        return False
    group = [x for x in group if x is not c]
    if len(group) == 1:
        del order.groups[match]
    else:
        order.groups[match] = group
    order.winners[match] = group[-1]
    return True


def _add(order: RouteOrder, c: Candidate) -> bool:
    """Puts `c` among its match's candidates at its walk place; whether it made or changed a
    group of two or more."""
    match = c.route.match
    prev = order.winners.get(match)
    if prev is None:
        order.winners[match] = c
        return False
    group = order.groups.get(match) or [prev]
    places = [order.place(x) for x in group]
    group.insert(bisect.bisect(places, order.place(c)), c)
    order.groups[match] = group
    order.winners[match] = group[-1]
    return True


def _reorder(order: RouteOrder, before: dict[RouteMatch, Candidate | None]) -> None:
    """Puts each changed match's winner at its first-match place (the same place, and the very
    same route when the winner is the same, while the match has no tie)."""
    moved: dict[RouteMatch, Route] = {}  # the routes of winners taken out, to keep if equal
    for match, was in before.items():
        if was is None:
            continue
        key = route_key(match)
        lo = bisect.bisect_left(order.keys, key)
        hi = bisect.bisect_right(order.keys, key, lo)
        i = next(i for i in range(lo, hi) if order.order[i] is was)
        now = order.winners.get(match)
        if now is not None and hi - lo == 1:
            if now is not was:
                order.order[i] = now
                route = _same(with_jwt(now, order.jwt), order.routes[i])
                if route is not order.routes[i]:
                    order.gone.append(order.routes[i])
                    order.came.append(route)
                    order.routes[i] = route
            continue
        moved[match] = order.routes[i]
        order.gone.append(order.routes[i])
        del order.keys[i], order.order[i], order.routes[i]
    for match, was in before.items():
        now = order.winners.get(match)
        if now is None or (was is not None and match not in moved):
            continue
        key = route_key(match)
        lo = bisect.bisect_left(order.keys, key)
        hi = bisect.bisect_right(order.keys, key, lo)
        if lo < hi:  # ties keep the walk order of their matches' first candidates
            first = order.first(match)
            while lo < hi and order.first(order.order[lo].route.match) < first:
                lo += 1
        route = with_jwt(now, order.jwt)
        kept = moved.get(match)
        route = route if kept is None else _same(route, kept)
        order.keys.insert(lo, key)
        order.order.insert(lo, now)
        order.routes.insert(lo, route)
        order.came.append(route)


def routes_tuple(order: RouteOrder, ids: IdsMemo) -> tuple[Route, ...]:
    """`tuple(order.routes)`, the very same tuple as last time while no route was taken out or
    put in; its ids registered in `ids` (with the diff from the tuple before, when the order
    was patched from one). An order of fewer than `COMPACT_BELOW` routes is then made
    `compact`."""
    made = _routes_tuple(order, ids)
    if len(made) < COMPACT_BELOW:
        _compact(order)
    return made


def _routes_tuple(order: RouteOrder, ids: IdsMemo) -> tuple[Route, ...]:
    gone, came = order.gone, order.came
    order.gone, order.came = [], []
    if order.made is None:
        order.made = tuple(order.routes)
        order.ids = ids_of(order.made, ids)
        return order.made
    if order.ids is None:  # a compact order's: the tuple's own (at most `COMPACT_BELOW`)
        order.ids = ids_of(order.made, ids)
    if gone or came:
        # By identity: a route taken out and put back (a tie moved) is neither.
        out, back = set(map(id, gone)), set(map(id, came))
        added = [r for r in came if id(r) not in out]
        removed = [r for r in gone if id(r) not in back]
        made = tuple(order.routes)
        order.ids = ids.derive((order.made, order.ids), made, added, removed)
        order.made = made
    else:
        ids.put(order.made, order.ids)
    return order.made


def _same(route: Route, before: Route) -> Route:
    """`before`, the very same object, when `route` is equal to it."""
    return before if route is before or route == before else route


def _replacements(order: RouteOrder) -> list[Replacement]:
    """The replacements of every group, in the walk order of the replacing candidate."""
    out: list[tuple[tuple[int, int], Replacement]] = []
    for group in order.groups.values():
        for prev, c in itertools.pairwise(group):
            out.append((order.place(c), (prev, c)))
    out.sort(key=lambda item: item[0])
    return [pair for _, pair in out]


# An order of fewer routes keeps only what `patch` cannot make again (`compact`): its keys,
# groups and places cost about 700 bytes a route, kept for every root (10,000 roots of five
# routes: 35 MiB), to save a build of a few dozen candidates when the root is compiled again.
COMPACT_BELOW = PER_ROUTE_MIN_ROUTES
# Stand-ins for a compact order's containers: shared, and any change to them fails loudly.
_NO_LIST: list[Any] = cast(list[Any], ())
_NO_DICT: dict[Any, Any] = cast(dict[Any, Any], MappingProxyType({}))


def _compact(order: RouteOrder) -> None:
    """Drops what `_expanded` makes again from `order.parts`, `order.jwt` and `order.made`."""
    order.part_of = order.winners = order.groups = order.places = _NO_DICT
    order.keys = order.order = order.routes = order.replacements = _NO_LIST
    order.gone = order.came = _NO_LIST
    order.ids = None
    order.compact = True


def _expanded(order: RouteOrder) -> RouteOrder:
    """The whole order `order` was made compact from: built again from its parts (a usable order
    is what `build` makes of them), its routes the very same objects as handed out."""
    assert order.made is not None
    out = _built(order.parts, order.jwt)
    assert len(out.routes) == len(order.made)
    out.routes = list(order.made)
    out.made = order.made
    return out

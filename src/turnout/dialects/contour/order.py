"""Contour's route precedence (`internal/sorter`), as a first-match order for a virtual host.

Contour sends Envoy one linear route list per virtual host, sorted by specificity:

1. path type: exact, then regex, then prefix;
2. exact paths reverse-lexicographic; regexes and prefixes longer first, equal length
   reverse-lexicographic (segment prefixes before string prefixes of the same value);
3. then a route that matches `:method` first, then more header matches, then more query matches;
4. then header matches item by item, then query matches item by item.

Header (and query) matches inside a route are sorted first: by name, then exact, regex, contains,
present, then by value, non-inverted first.

Contour's item-by-item step returns "less" at the first smaller item but does not stop at the
first larger one, which is not a strict weak order; here it is a plain lexicographic comparison,
and anything still tied keeps its input order (the sort is stable), so the result is deterministic.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import cmp_to_key
from typing import Any

from turnout.graph.memo import IdentityCache
from turnout.graph.model import (
    HeaderMatch,
    PathMatchKind,
    QueryMatch,
    Route,
    RouteMatch,
    StringMatchKind,
)

_PATH_RANK = {
    PathMatchKind.EXACT: 0,
    PathMatchKind.REGEX: 1,
    PathMatchKind.SEGMENT_PREFIX: 2,
    PathMatchKind.PREFIX: 2,
}
# Contour knows exact, regex, contains and present for headers; prefix and suffix (used by other
# dialects) are placed between regex and contains, as more specific than a substring.
_STRING_RANK = {
    StringMatchKind.EXACT: 0,
    StringMatchKind.REGEX: 1,
    StringMatchKind.PREFIX: 2,
    StringMatchKind.SUFFIX: 3,
    StringMatchKind.CONTAINS: 4,
    StringMatchKind.PRESENT: 5,
}


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def compare_headers(a: HeaderMatch, b: HeaderMatch) -> int:
    return (
        _cmp(a.name, b.name)
        or _cmp(_STRING_RANK[a.kind], _STRING_RANK[b.kind])
        or _cmp(a.value, b.value)
        or _cmp(a.invert, b.invert)  # the non-inverted match first
        or _cmp(a.ignore_case, b.ignore_case)
        or _cmp(a.treat_missing_as_empty, b.treat_missing_as_empty)
    )


def compare_queries(a: QueryMatch, b: QueryMatch) -> int:
    return (
        _cmp(a.name, b.name)
        or _cmp(_STRING_RANK[a.kind], _STRING_RANK[b.kind])
        or _cmp(a.value, b.value)
        or _cmp(a.ignore_case, b.ignore_case)  # the case-sensitive match first
    )


def sorted_headers(headers: Sequence[HeaderMatch]) -> tuple[HeaderMatch, ...]:
    return tuple(sorted(headers, key=cmp_to_key(compare_headers)))


def sorted_queries(query: Sequence[QueryMatch]) -> tuple[QueryMatch, ...]:
    return tuple(sorted(query, key=cmp_to_key(compare_queries)))


def _compare_paths(a: RouteMatch, b: RouteMatch) -> int:
    pa, pb = a.path, b.path
    by_type = _cmp(_PATH_RANK[pa.kind], _PATH_RANK[pb.kind])
    if by_type:
        return by_type
    if pa.kind is not PathMatchKind.EXACT:
        longer_first = _cmp(len(pb.value), len(pa.value))
        if longer_first:
            return longer_first
    reverse_lexicographic = _cmp(pb.value, pa.value)
    if reverse_lexicographic:
        return reverse_lexicographic
    # Same prefix value: a segment prefix is more specific than a string prefix.
    return _cmp(pa.kind is PathMatchKind.PREFIX, pb.kind is PathMatchKind.PREFIX)


def _compare_conditions(a: RouteMatch, b: RouteMatch) -> int:
    a_method = any(h.name == ":method" for h in a.headers)
    b_method = any(h.name == ":method" for h in b.headers)
    if a_method != b_method:
        return -1 if a_method else 1
    ah = [h for h in a.headers if h.name != ":method"]
    bh = [h for h in b.headers if h.name != ":method"]
    more_first = _cmp(len(bh), len(ah)) or _cmp(len(b.query), len(a.query))
    if more_first:
        return more_first
    for x, y in zip(ah, bh, strict=True):
        c = compare_headers(x, y)
        if c:
            return c
    for qx, qy in zip(a.query, b.query, strict=True):
        c = compare_queries(qx, qy)
        if c:
            return c
    return 0


def compare_routes(a: Route, b: Route) -> int:
    """Negative when `a` must be tried before `b`."""
    return _compare_paths(a.match, b.match) or _compare_conditions(a.match, b.match)


def route_key(match: RouteMatch) -> tuple[Any, ...]:
    """`compare_routes` as a sort key: one match's key is below another's exactly when the
    comparison puts it first, and equal exactly when the comparison ties (so a sorted list of
    keys can be patched by bisection). Each part is one step of the comparison; a reversed
    string order is its code points negated, ended by 1 so that a longer string sorts before
    its own prefix. The last keys are kept by the match's identity: a dialect that builds
    equal matches once (HTTPProxy's equal routes) asks for the same match again and again."""
    return _KEYS(match)


def _route_key(match: RouteMatch) -> tuple[Any, ...]:
    path = match.path
    exact = path.kind is PathMatchKind.EXACT
    headers = tuple(
        (h.name, _STRING_RANK[h.kind], h.value, h.invert, h.ignore_case, h.treat_missing_as_empty)
        for h in match.headers
        if h.name != ":method"
    )
    return (
        _PATH_RANK[path.kind],
        0 if exact else -len(path.value),
        (*map(operator.neg, map(ord, path.value)), 1),
        path.kind is PathMatchKind.PREFIX,
        len(headers) == len(match.headers),  # a route matching `:method` first
        -len(headers),
        -len(match.query),
        headers,
        tuple((q.name, _STRING_RANK[q.kind], q.value, q.ignore_case) for q in match.query),
    )


_KEYS = IdentityCache(_route_key)


def _key(route: Route) -> tuple[Any, ...]:
    return route_key(route.match)


def contour_route_order(routes: Sequence[Route]) -> tuple[Route, ...]:
    """`routes` in Contour's first-match order (a stable sort: ties keep their order); header
    and query matches must already be sorted with `sorted_headers`/`sorted_queries` (the
    dialect builds them that way)."""
    return tuple(sorted(routes, key=_key))

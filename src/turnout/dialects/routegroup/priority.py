"""Skipper's route priority (`routing/matcher.go`, `pathmux`) as one first-match order.

Skipper registers each route on nodes of a path tree: `Path(p)` on the node `p` (a `:name`
segment is a wildcard node, a final `*name` a catch-all below `p`'s last `/`), `PathSubtree(p)`
on three nodes of its base `b` (`p` without a final `/*name` and without a trailing `/`): `b`,
`b/` and the catch-all `b/**` (for the base `/`: `/` and `/**`). A request is looked up depth
first, with backtracking: at each level a static segment beats a `:param` one, which beats a
catch-all (which needs a non-empty rest); at a node the routes ("leaves") are tried by leaf weight,
highest first (one per Method, Host, PathRegexp, Header and any other predicate, plus
`Weight(n)`; Path and PathSubtree count nothing, their priority is the node). Routes without Path
or PathSubtree ("root leaves") are tried only when the tree gave nothing. Equal weights keep the
order the routes came in (RouteGroups sorted by namespace/name, routes as written).

A linear order of (route, node) registrations reproduces that lookup: by node key (at the first
segment that differs: static before param before catch-all), then by weight (highest first), then
by input order; root leaves last. Where a path ends does not change the lookup (a node only takes
the one path that ends there, which no other node at that level takes), so the end of a path sorts
just before its trailing-slash node, which sorts just before its catch-all: a PathSubtree's three
registrations are adjacent unless routes of the very same nodes sit between them by weight, and
the dialect emits one graph route for such a run.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

# Token ranks; _END and _SLASH are terminal: their position among siblings is free.
_STATIC, _PARAM, _END, _SLASH, _CATCH_ALL = 0, 1, 2, 3, 4

Segment = tuple[int, str]

# Skipper's freeWildcardRx: a final "/*name" (its normalised form is "/**").
_FREE_WILDCARD = re.compile(r"/[*][^/]*$")


class Node(enum.Enum):
    """Which tree node a registration of a route is."""

    PATH = "path"  # the one node of a Path(p)
    BASE = "base"  # PathSubtree's b
    SLASH = "slash"  # PathSubtree's b/ (for the base "/": the root)
    CATCH_ALL = "catch-all"  # PathSubtree's b/**


def path_key(path: str) -> tuple[Segment, ...]:
    """The tree node of a Path argument, as a sortable key."""
    parts = (path[1:] if path.startswith("/") else path).split("/")
    key: list[Segment] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part.startswith("*"):
            key.append((_CATCH_ALL, ""))
            return tuple(key)
        if last and part == "":
            key.append((_SLASH, ""))
            return tuple(key)
        key.append((_PARAM, "") if part.startswith(":") else (_STATIC, part))
    key.append((_END, ""))
    return tuple(key)


def subtree_base(path: str) -> str:
    """Skipper's base path of `PathSubtree(path)`: without a final `/*name`, then without one
    trailing `/` ("" for the root)."""
    base = _FREE_WILDCARD.sub("", path)
    return base[:-1] if base.endswith("/") else base


def tree_nodes(path: str, subtree: bool) -> tuple[tuple[Node, tuple[Segment, ...]], ...]:
    """The nodes Skipper registers a Path (`subtree` False) or PathSubtree route on."""
    if not subtree:
        return ((Node.PATH, path_key(path)),)
    base = subtree_base(path)
    if not base:
        return ((Node.SLASH, path_key("/")), (Node.CATCH_ALL, path_key("/**")))
    return (
        (Node.BASE, path_key(base)),
        (Node.SLASH, path_key(base + "/")),
        (Node.CATCH_ALL, path_key(base + "/**")),
    )


@dataclass(frozen=True, slots=True, order=True)
class Priority:
    """Sorts ascending into first-match order."""

    root_leaf: bool  # no Path/PathSubtree: after every tree route
    tree: tuple[Segment, ...]
    negative_weight: int
    # TrafficSegment(min, max)'s min: with one draw per request, segments that tile [0, 1) are
    # first-match thresholds only in the order of their starts (Skipper tests them all alike).
    segment_start: float
    input_order: tuple[int, ...]  # (RouteGroup, route, method) positions


def priority(
    tree: str | tuple[Segment, ...] | None,
    weight: int,
    input_order: tuple[int, ...],
    segment_start: float = 0.0,
) -> Priority:
    """`tree`: a Path argument or a node key from `tree_nodes`; None for a root leaf."""
    if tree is None:
        return Priority(True, (), -weight, segment_start, input_order)
    key = path_key(tree) if isinstance(tree, str) else tree
    return Priority(False, key, -weight, segment_start, input_order)

"""A virtual host's first-match route list as Envoy's matcher tree (`VirtualHost.matcher`).

Envoy walks a virtual host's `routes` one by one for every request; with thousands of routes that
walk dominates the request's cost. A matcher tree finds a short list of candidates with one trie
lookup instead: a `prefix_match_map` on the `:path` header, whose longest key that prefixes the
request's path selects a leaf, and each leaf is a `RouteList` that Envoy walks in order. Envoy
re-checks each route's own full match (path, headers, query, runtime fraction) inside the leaf, so
a leaf may hold more routes than can match; what it must never miss is a route that matches some
request reaching it. Envoy 1.40 does not fall back to a shorter key when no route of a
`RouteList` leaf matches, so every leaf holds, in the host's order, every route that could match a
request reaching it:

- a route whose path match is a string prefix `v` (key `v`): in every leaf whose key starts with
  `v` (a request reaching that key starts with it, hence with `v`);
- an exact path `e` (key `e`; the trie matches raw `:path`, query string included, so an exact
  map would miss `/e?x=1`): in the leaf `e` only, since no key holds `?`;
- a path-segment prefix `s` (key `s`): in the leaves `s` and `s/...` (a key `sX` with another
  character after `s` is reached only by paths outside the segment);
- anything a key cannot stand for (a regex, `/`, a prefix or path holding `?` or `#`): in every
  leaf and in the list for requests no key prefixes (`on_no_match`).

So the first route of a leaf that matches is the first route of the whole list that matches, for
every request. A tree that would copy routes into leaves more than `MAX_COPIES_PER_ROUTE` times
on average (many regex routes next to many prefixes, or deep chains of nested prefixes) is not
built: the host stays a list, as does a host without any route a key can stand for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.matcher.v3 import http_inputs_pb2
from xds.core.v3 import extension_pb2
from xds.type.matcher.v3 import matcher_pb2

from turnout.envoy.translate.common import pack
from turnout.graph.model import PathMatchKind, RouteMatch

__all__ = [
    "MAX_COPIES_PER_ROUTE",
    "Placement",
    "RouteTree",
    "matcher_tree",
    "placement",
    "plan_route_tree",
]

# Leaf entries per route beyond which the tree costs more memory than it saves time.
MAX_COPIES_PER_ROUTE = 4

# Characters a key must not hold: the trie reads the raw `:path`, query and fragment included,
# while route path matches read the path alone.
_NOT_IN_KEYS = ("?", "#")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a route's path match puts it: `key` None means every leaf (and `on_no_match`)."""

    kind: PathMatchKind
    key: str | None

    def fits(self, leaf: str) -> bool:
        """Whether a request reaching the leaf `leaf` may match this route's path."""
        if self.key is None:
            return True
        if self.kind is PathMatchKind.EXACT:
            return leaf == self.key
        if not leaf.startswith(self.key):
            return False
        if self.kind is PathMatchKind.SEGMENT_PREFIX:
            return len(leaf) == len(self.key) or leaf[len(self.key)] == "/"
        return True


@dataclass(frozen=True, slots=True)
class RouteTree:
    """Leaves by key (sorted) with the indices of their routes in the host's order, and the
    routes for a path that no key prefixes."""

    leaves: tuple[tuple[str, tuple[int, ...]], ...]
    no_match: tuple[int, ...]

    @property
    def entries(self) -> int:
        return sum(len(routes) for _, routes in self.leaves) + len(self.no_match)


def placement(match: RouteMatch) -> Placement:
    """The leaf key a route's path match stands for, or everywhere."""
    path = match.path
    key: str | None = path.value
    if path.kind is PathMatchKind.SEGMENT_PREFIX:
        key = path.value.rstrip("/")
    elif path.kind is PathMatchKind.REGEX:
        key = None
    if not key or key == "/" or any(c in key for c in _NOT_IN_KEYS):
        key = None
    return Placement(path.kind, key)


def plan_route_tree(
    matches: Sequence[RouteMatch], max_copies: int = MAX_COPIES_PER_ROUTE
) -> RouteTree | None:
    """The leaves for routes with these matches (in first-match order), or None when the tree
    would hold more than `max_copies` entries per route or has no key at all (a list then
    costs the same, and Envoy refuses a tree without one)."""
    placements = [placement(m) for m in matches]
    everywhere = tuple(i for i, p in enumerate(placements) if p.key is None)
    by_key: dict[str, list[int]] = {}
    for i, p in enumerate(placements):
        if p.key is not None:
            by_key.setdefault(p.key, []).append(i)
    if not by_key:
        return None
    budget = max_copies * len(matches) - len(everywhere) * (len(by_key) + 1)
    if budget < 0:
        return None
    leaves = []
    for key in sorted(by_key):
        keyed = [i for k in _keys_prefixing(key, by_key) for i in by_key[k]]
        fitting = [i for i in keyed if placements[i].fits(key)]
        budget -= len(fitting)
        if budget < 0:
            return None
        leaves.append((key, tuple(sorted((*fitting, *everywhere)))))
    return RouteTree(tuple(leaves), everywhere)


def _keys_prefixing(key: str, keys: dict[str, list[int]]) -> list[str]:
    # One set lookup per prefix length: linear in the key's length, not in the number of keys.
    return [key[:n] for n in range(1, len(key) + 1) if key[:n] in keys]


def matcher_tree(tree: RouteTree, routes: Sequence[Any]) -> Any:
    """The `xds.type.matcher.v3.Matcher` for `tree`, whose indices point into `routes` (the
    host's translated `envoy.config.route.v3.Route` messages)."""
    out = matcher_pb2.Matcher()
    node = out.matcher_tree
    node.input.CopyFrom(
        extension_pb2.TypedExtensionConfig(
            name="request-path",
            typed_config=pack(http_inputs_pb2.HttpRequestHeaderMatchInput(header_name=":path")),
        )
    )
    for key, indices in tree.leaves:
        node.prefix_match_map.map[key].action.CopyFrom(_route_list(indices, routes))
    if tree.no_match:
        out.on_no_match.action.CopyFrom(_route_list(tree.no_match, routes))
    return out


def _route_list(indices: Sequence[int], routes: Sequence[Any]) -> Any:
    return extension_pb2.TypedExtensionConfig(
        name="routes", typed_config=pack(rc.RouteList(routes=[routes[i] for i in indices]))
    )

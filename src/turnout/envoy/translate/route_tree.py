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
- a regex starting with literal text (`/team-a/.*`): placed as a prefix of that text, since
  every path it matches starts with it;
- anything a key cannot stand for (a regex without literal start, `/`, a prefix or path holding
  `?` or `#`): in every leaf and in the list for requests no key prefixes (`on_no_match`).

So the first route of a leaf that matches is the first route of the whole list that matches, for
every request. A tree that would copy routes into leaves more than `MAX_COPIES_PER_ROUTE` times
on average (many regex routes next to many prefixes, or deep chains of nested prefixes) is not
built: the host stays a list, as does a host without any route a key can stand for.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.matcher.v3 import http_inputs_pb2
from xds.type.matcher.v3 import matcher_pb2

from turnout.graph.model import PathMatchKind, RouteMatch

__all__ = [
    "MAX_COPIES_PER_ROUTE",
    "Piece",
    "Placement",
    "RouteTree",
    "TreeBook",
    "common_start",
    "delimited",
    "length_delimited",
    "matcher_tree",
    "patch_tree_book",
    "placement",
    "plan_placed",
    "plan_route_tree",
    "regex_literal_prefix",
    "tree_book",
    "varint",
    "wire_order",
]

# Leaf entries per route beyond which the tree costs more memory than it saves time.
MAX_COPIES_PER_ROUTE = 4


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
        # A regex with a literal prefix (`/team-a/.*`) is placed like a string prefix.
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
        key = regex_literal_prefix(path.value)
    # The trie reads the raw `:path`, query string included, while path matches read the path
    # alone: a key holding `?` or `#` would be reached by requests the route never matches.
    if not key or key == "/" or "?" in key or "#" in key:
        key = None
    return Placement(path.kind, key)


# RE2's metacharacters; `?`, `*` and `{` after a literal make that literal optional.
_REGEX_META = frozenset(".[]{}()*+?|^$\\")
_OPTIONAL = frozenset("?*{")


def regex_literal_prefix(pattern: str) -> str:
    """The literal text every path this (fully matched) regex accepts starts with; "" when
    unsure: an alternation anywhere, a leading group, class or anchor, a non-ASCII character."""
    if "|" in pattern:
        return ""
    n = 0
    while n < len(pattern) and pattern[n] not in _REGEX_META and pattern[n].isascii():
        n += 1
    if n < len(pattern) and pattern[n] in _OPTIONAL:
        n -= 1
    return pattern[: max(n, 0)]


def plan_route_tree(
    matches: Sequence[RouteMatch], max_copies: int = MAX_COPIES_PER_ROUTE
) -> RouteTree | None:
    """The leaves for routes with these matches (in first-match order), or None when the tree
    would hold more than `max_copies` entries per route or has no key at all (a list then
    costs the same, and Envoy refuses a tree without one)."""
    return plan_placed([placement(m) for m in matches], max_copies)


def plan_placed(
    placements: Sequence[Placement], max_copies: int = MAX_COPIES_PER_ROUTE
) -> RouteTree | None:
    """`plan_route_tree` from the routes' placements (kept per route by the caller)."""
    everywhere = tuple(i for i, p in enumerate(placements) if p.key is None)
    by_key: dict[str, list[int]] = {}
    for i, p in enumerate(placements):
        if p.key is not None:
            by_key.setdefault(p.key, []).append(i)
    if not by_key:
        return None
    budget = max_copies * len(placements) - len(everywhere) * (len(by_key) + 1)
    if budget < 0:
        return None
    lengths = sorted({len(k) for k in by_key})
    leaves = []
    for key in sorted(by_key):
        # A key's own routes always fit it; only routes under shorter keys need the check.
        fitting = by_key[key] + [
            i
            for shorter in _shorter_keys(key, by_key, lengths)
            for i in by_key[shorter]
            if placements[i].fits(key)
        ]
        budget -= len(fitting)
        if budget < 0:
            return None
        if len(fitting) > len(by_key[key]) or everywhere:
            fitting = sorted(fitting + list(everywhere))
        leaves.append((key, tuple(fitting)))
    return RouteTree(tuple(leaves), everywhere)


def _shorter_keys(key: str, keys: dict[str, list[int]], lengths: list[int]) -> list[str]:
    # One lookup per length some key has: not a scan of the keys.
    return [key[:n] for n in lengths if n < len(key) and key[:n] in keys]


def matcher_tree(tree: RouteTree, routes: Sequence[Any]) -> Any:
    """The `xds.type.matcher.v3.Matcher` for `tree`, whose indices point into `routes` (the
    host's translated `envoy.config.route.v3.Route` messages)."""
    # Each route is serialized once and the leaves are assembled from those bytes: a route sits
    # in many leaves (a catch-all in all of them), and copying messages per leaf would cost more
    # than the rest of the translation.
    encoded = [_route_list_entry(r.SerializeToString(deterministic=True)) for r in routes]
    out = matcher_pb2.Matcher()
    node = out.matcher_tree
    node.input.name = "request-path"
    node.input.typed_config.Pack(
        http_inputs_pb2.HttpRequestHeaderMatchInput(header_name=":path"), deterministic=True
    )
    for key, indices in tree.leaves:
        _set_route_list(node.prefix_match_map.map[key].action, indices, encoded)
    if tree.no_match:
        _set_route_list(out.on_no_match.action, tree.no_match, encoded)
    return out


def _set_route_list(action: Any, indices: Sequence[int], encoded: Sequence[bytes]) -> None:
    action.name = "routes"
    action.typed_config.type_url = _ROUTE_LIST_URL
    action.typed_config.value = b"".join(encoded[i] for i in indices)


_ROUTE_LIST_URL = "type.googleapis.com/" + rc.RouteList.DESCRIPTOR.full_name
# RouteList.routes is field 1, length-delimited: tag byte (1 << 3) | 2.
_ROUTES_TAG = b"\x0a"


Piece = tuple[Any, ...]  # (serialized Route prefixed with its length, Placement)


@dataclass(slots=True)
class TreeBook:
    """A matcher tree kept for patching (`tree_book`): the pieces it was planned from in
    first-match order, each key's own pieces, the pieces placed everywhere, the keys sorted and
    how many keys have each length, and each leaf's pieces and map entry on the wire. Pieces
    are kept by identity: an unchanged route's piece is the very same tuple. `keys` are in the
    order the map's entries are written (`wire_order`), and `entries` is by those keys."""

    members: list[Piece]
    # Each piece's place in the first-match order (by identity): increasing along `members`,
    # so a piece added between two others gets a number between theirs.
    order: dict[int, float]
    by_key: dict[str, list[Piece]]
    everywhere: list[Piece]
    keys: list[bytes]
    lengths: Counter[int]
    leaves: dict[str, list[Piece]]
    entries: dict[bytes, bytes]
    total: int = 0

    def bytes_of(self, max_copies: int = MAX_COPIES_PER_ROUTE) -> list[bytes] | None:
        """`matcher_tree(plan_route_tree(...), ...)` serialized (deterministically), in parts
        to join (the leaves are copied once), or None when `plan_route_tree` plans no tree."""
        everywhere, keys = self.everywhere, self.keys
        budget = max_copies * len(self.members) - len(everywhere) * (len(keys) + 1)
        # `plan_route_tree` counts the pieces placed everywhere once per leaf in `budget`.
        if not keys or budget - (self.total - len(everywhere) * len(keys)) < 0:
            return None
        leaves = b"".join(map(self.entries.__getitem__, keys))
        out = delimited(_TREE_TAG, [_input_bytes(), *delimited(_PREFIX_MAP_TAG, [leaves])])
        if everywhere:
            out.extend(delimited(_NO_MATCH_TAG, [_on_match(_joined(everywhere))]))
        return out

    def refill(self, key: str) -> None:
        """Plans the leaf `key` again (as `plan_route_tree` does)."""
        order = self.order
        by_key, own = self.by_key, self.by_key[key]
        shorter = [key[:n] for n in self.lengths if n < len(key) and key[:n] in by_key]
        fitting = own + [p for s in shorter for p in by_key[s] if p[1].fits(key)]
        if len(fitting) > len(own) or self.everywhere:
            fitting = sorted(fitting + self.everywhere, key=lambda p: order[id(p)])
        old = self.leaves.get(key)
        self.total += len(fitting) - (len(old) if old is not None else 0)
        self.leaves[key] = fitting
        value = length_delimited(_VALUE_TAG, _on_match(_joined(fitting)))
        self.entries[wire_order(key)] = length_delimited(
            _ENTRY_TAG, length_delimited(_KEY_TAG, key.encode()) + value
        )

    def drop_key(self, key: str) -> None:
        order = wire_order(key)
        del self.by_key[key], self.entries[order]
        self.total -= len(self.leaves.pop(key))
        del self.keys[bisect.bisect_left(self.keys, order)]
        self.lengths[len(key)] -= 1
        if not self.lengths[len(key)]:
            del self.lengths[len(key)]


def _joined(pieces: Sequence[Piece]) -> bytes:
    return _ROUTES_TAG + _ROUTES_TAG.join(p[0] for p in pieces) if pieces else b""


def tree_book(members: list[Piece]) -> TreeBook:
    """The tree of the pieces `members` (in first-match order), planned whole."""
    order = dict(zip(map(id, members), map(float, range(len(members))), strict=True))
    if len(order) != len(members):
        # A piece twice (one route twice): pieces are told apart by identity, so copy it.
        members = _distinct(members)
        order = dict(zip(map(id, members), map(float, range(len(members))), strict=True))
    by_key: dict[str, list[Piece]] = {}
    everywhere = []
    for p in members:
        key = p[1].key
        if key is None:
            everywhere.append(p)
        else:
            by_key.setdefault(key, []).append(p)
    keys = sorted(map(wire_order, by_key))
    book = TreeBook(members, order, by_key, everywhere, keys, Counter(map(len, by_key)), {}, {})
    for key in by_key:
        book.refill(key)
    return book


def _distinct(members: list[Piece]) -> list[Piece]:
    seen: set[int] = set()
    out = []
    for p in members:
        out.append((*p,) if id(p) in seen else p)
        seen.add(id(p))
    return out


def patch_tree_book(book: TreeBook, members: list[Piece]) -> TreeBook:
    """`tree_book(members)`, patched from `book` (which it changes): between the common start
    and end of the old and new members (C-speed identity passes), the pieces only one side
    holds are removed or added; only the leaves under their keys are planned again."""
    old = book.members
    shorter = min(len(old), len(members))
    head = common_start(old, members, shorter)
    tail = min(common_start(reversed(old), reversed(members), shorter), shorter - head)
    old_w = old[head : len(old) - tail]
    new_w = members[head : len(members) - tail]
    old_ids = dict(zip(map(id, old_w), old_w, strict=True))
    new_ids = dict(zip(map(id, new_w), range(head, head + len(new_w)), strict=True))
    if len(old_ids) != len(old_w) or len(new_ids) != len(new_w):
        return tree_book(members)  # a piece twice
    kept_old = list(itertools.compress(old_w, map(new_ids.__contains__, old_ids)))
    kept_new = list(itertools.compress(new_w, map(old_ids.__contains__, new_ids)))
    removed = [old_ids[i] for i in old_ids.keys() - new_ids.keys()]
    added = sorted(new_ids[i] for i in new_ids.keys() - old_ids.keys())
    if (
        kept_old != kept_new
        or any(p[1].key is None for p in removed)
        or not _number(book, removed, members, added)
    ):
        return tree_book(members)
    touched: set[str] = set()
    for p in removed:
        own = book.by_key[p[1].key]
        # By identity: an equal piece of another route may sit before it.
        del own[next(i for i, q in enumerate(own) if q is p)]
        touched.add(p[1].key)
        if not own:
            book.drop_key(p[1].key)
    order = book.order
    for p in map(members.__getitem__, added):
        key = p[1].key
        touched.add(key)
        own = book.by_key.setdefault(key, [])
        if not own:
            bisect.insort(book.keys, wire_order(key))
            book.lengths[len(key)] += 1
        own.append(p)
        own.sort(key=lambda q: order[id(q)])
    book.members = members
    for key in _under(book.keys, touched):
        book.refill(key)
    return book


def _number(book: TreeBook, removed: list[Piece], members: list[Piece], added: list[int]) -> bool:
    """Forgets the numbers of `removed` and numbers the pieces at the positions `added`
    (sorted) between their kept neighbours; False when that cannot be done (a piece added has
    no key or is held twice, a run has no neighbour, or no room is left between two numbers)."""
    order = book.order
    for p in removed:
        del order[id(p)]
    pieces = [members[i] for i in added]
    if any(p[1].key is None or id(p) in order for p in pieces):
        return False
    runs: list[list[int]] = []
    for i in added:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    for run in runs:
        lo = order[id(members[run[0] - 1])] if run[0] else None
        hi = order[id(members[run[-1] + 1])] if run[-1] + 1 < len(members) else None
        if lo is None and hi is None:
            return False
        lo = hi - len(run) - 1 if lo is None else lo  # type: ignore[operator]
        hi = lo + len(run) + 1 if hi is None else hi
        step = (hi - lo) / (len(run) + 1)
        numbers = [lo + step * (k + 1) for k in range(len(run))]
        if not all(map(operator.lt, [lo, *numbers], [*numbers, hi])):
            return False
        order.update(zip((id(members[i]) for i in run), numbers, strict=True))
    return True


def common_start(old: Iterable[Any], new: Iterable[Any], shorter: int) -> int:
    """How many items `old` and `new` (`shorter`: the shorter's length) start with that are
    the very same objects."""
    return next(itertools.compress(itertools.count(), map(operator.is_not, old, new)), shorter)


def _under(keys: list[bytes], prefixes: set[str]) -> set[str]:
    """The keys that start with one of `prefixes` (`keys` in `wire_order`: those are
    contiguous)."""
    out = set()
    for prefix in prefixes:
        start = prefix.encode()
        i = bisect.bisect_left(keys, start)
        while i < len(keys) and keys[i].startswith(start):
            out.add(keys[i][:-1].decode())
            i += 1
    return out


def wire_order(key: str) -> bytes:
    """The sort key of a map key as upb writes a map deterministically: bytewise over the
    common length, then the longer key first (`/ab` before `/a`). No UTF-8 byte is 0xFF."""
    return key.encode() + b"\xff"


# Matcher.matcher_tree (2), .on_no_match (3); MatcherTree.prefix_match_map (3); MatchMap.map (1):
# entries {key (1), value (2)}; OnMatch.action (2); TypedExtensionConfig {name (1), typed_config
# (2)}; Any {type_url (1), value (2)}. All length-delimited.
_TREE_TAG, _NO_MATCH_TAG, _PREFIX_MAP_TAG = b"\x12", b"\x1a", b"\x1a"
_ENTRY_TAG, _KEY_TAG, _VALUE_TAG, _ACTION_TAG = b"\x0a", b"\x0a", b"\x12", b"\x12"
_INPUT: list[bytes] = []


def _input_bytes() -> bytes:
    """`MatcherTree.input` (field 1) on the wire: the same for every tree."""
    if not _INPUT:
        node = matcher_pb2.Matcher.MatcherTree()
        node.input.name = "request-path"
        node.input.typed_config.Pack(
            http_inputs_pb2.HttpRequestHeaderMatchInput(header_name=":path"), deterministic=True
        )
        _INPUT.append(node.SerializeToString(deterministic=True))
    return _INPUT[0]


def _on_match(routes: bytes) -> bytes:
    """The `OnMatch` of a leaf whose `RouteList.routes` are `routes` on the wire: its action, a
    `TypedExtensionConfig` named "routes" holding the `RouteList` in an `Any`."""
    any_ = _ROUTE_LIST_URL_FIELD + length_delimited(b"\x12", routes)
    return length_delimited(_ACTION_TAG, _ROUTES_NAME + length_delimited(b"\x12", any_))


_ROUTES_NAME = b"\x0a\x06routes"


def _route_list_entry(route: bytes) -> bytes:
    """One `RouteList.routes` entry on the wire."""
    return length_delimited(_ROUTES_TAG, route)


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """One length-delimited field on the wire: the tag, the length as a varint, the payload."""
    return tag + varint(len(payload)) + payload


def delimited(tag: bytes, parts: list[bytes]) -> list[bytes]:
    """`length_delimited(tag, b"".join(parts))` as parts to join: nothing copied yet."""
    return [tag, varint(sum(map(len, parts))), *parts]


def varint(n: int) -> bytes:
    """`n` (not negative) as a protobuf varint."""
    if n < _SHORT:
        return _VARINTS[n]
    length = bytearray()
    while n > 0x7F:
        length.append((n & 0x7F) | 0x80)
        n >>= 7
    length.append(n)
    return bytes(length)


# The varints of short lengths, made once: most lengths on the wire are short.
_SHORT = 1 << 14
_VARINTS = [bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(_SHORT)]

# The `Any.type_url` of every leaf, on the wire.
_ROUTE_LIST_URL_FIELD = length_delimited(b"\x0a", _ROUTE_LIST_URL.encode())

"""A big host of a scoped listener -> an index scope and one scope per path directory.

`path_scopes` decides the directories and which routes each scope holds; this module makes the
Envoy resources. A split host `h` with directories `D1..Dn` has:

- its own scope `<listener>/h` (key `h`, as an unsplit host's): the INDEX, a RouteConfiguration
  whose virtual host (`h`'s name and domain) holds one route per directory, deepest first,
  `path_separated_prefix: Di` (a matcher tree from `matcher_tree_min_routes` directories),
  each answering 404 and naming in its metadata (`filter_metadata["turnout.scope_key"]["key"]`)
  the key `h` + `Di`, then a last route matching every path, naming the root scope `h/`;
- per directory, the scope `<listener>/h#G` + `Di` (key `h#G` + `Di`), and the root scope
  `<listener>/h#G/` (key `h#G/`): each a RouteConfiguration with `h`'s virtual host (name,
  domain, every host-level setting) holding the routes of that scope in the host's order. `G`
  is a digest of the directories (`dirs_generation`).

The scope key filter (Lua, `scoped_routes`) sets the key header to the Host, so the index is the
request's route table; it then reads the route's metadata and, when it names a scope, replaces
the header with that key and clears the route cache: the request is routed in the directory's
scope. A new directory therefore changes the index and adds a scope, never the listener.

No request fails while the directories change. Routes move between scopes when they do (a new
directory takes its routes from its parent's scope), so the scopes of one set of directories
are never changed into those of another: each set has its own keys (`G`), and the xDS server
sends the new scopes and their tables first, then the index (one RouteConfiguration, switched
at once), and removes the old scopes only once the index no longer names them (`xds`). While
the directories stay, a change replaces the tables of the scopes holding the changed routes in
place.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import contains, itemgetter
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2

from turnout.envoy.translate.memo import TranslateMemo
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.path_scopes import (
    Dir,
    DirCounts,
    choose_dirs,
    dir_path,
    group,
    held_scopes,
    too_many_copies,
)
from turnout.envoy.translate.route_tree import (
    Placement,
    TreeBook,
    common_start,
    length_delimited,
    patch_tree_book,
    tree_book,
    varint,
)
from turnout.envoy.translate.routes import (
    assemble_host,
    host_frame,
    log_translation_failure,
    route_pieces,
    route_table_bytes,
)
from turnout.envoy.translate.scope_keys import (
    SCOPE_KEY_FILTER,
    SCOPE_KEY_HEADER,
    SCOPE_METADATA_KEY,
    scope_message,
    scoped_route_name,
)
from turnout.graph.model import PathMatchKind, VirtualHost

__all__ = ["INDEX_MISS_STATUS", "SplitBook", "index_routes", "split_host_scopes"]

# What an index route answers should the request not go on to the directory's scope (it does
# whenever the scope key filter runs).
INDEX_MISS_STATUS = 404
# RouteConfiguration.virtual_hosts (2), length-delimited.
_VHOSTS_TAG = b"\x12"

Pair = tuple[Any, Any]  # (RouteConfiguration, ScopedRouteConfiguration)
Piece = tuple[Any, ...]  # `routes.route_pieces`


@dataclass(slots=True)
class SplitBook:
    """A split host as last split: its routes' pieces with the scopes holding each, the
    directory counts and the directories, the host-level parts the tables were made with, the
    index, and per scope (the root first) its pieces and its pair."""

    pieces: list[Piece]
    held: list[tuple[int, ...]]
    counts: DirCounts
    dirs: tuple[Dir, ...]
    frame: tuple[bytes, bytes]
    index: Pair
    members: list[list[Piece]]
    pairs: list[Pair]
    trees: list[TreeBook | None]  # each scope's matcher tree, to patch (None: a list)


@dataclass(frozen=True, slots=True)
class _Plan:
    """A split worked out: the counts, the directories, each piece's scopes, the scopes whose
    routes may differ from the book's (None: every one), and the pieces not in the book."""

    counts: DirCounts
    dirs: tuple[Dir, ...]
    held: list[tuple[int, ...]]
    touched: set[int] | None
    fresh: list[Piece]


def split_host_scopes(
    listener: str, key: str, vh: VirtualHost, options: TranslateOptions, memo: TranslateMemo | None
) -> tuple[Pair, ...] | None:
    """The index and path scopes of `vh` (holding the scope `key`), or None when it is not
    split (too few routes, no directory, too many copies, a table naming the key header, or a
    host-level setting that cannot be expressed: the host is then translated whole). With
    `memo`, the split before is patched: the pieces between the common start and end of the
    old and new routes (C-speed identity passes) change the counts, and only the scopes they
    are held by are made again."""
    if not 0 < options.split_host_min_routes <= len(vh.routes):
        return None
    book = None
    if memo is not None:
        # Taken out until this split is whole: a failure on the way must not leave it half
        # patched.
        book = memo.kept_split((listener, key))
        memo.split_books.pop((listener, key), None)
    every, _ = route_pieces(vh, None, memo)
    if memo is not None:
        # What `http_filters.host_jwts(vh)` gives, from the pieces (one C-speed pass).
        jwts = set(map(itemgetter(4), every))
        jwts.discard(None)
        memo.jwts.put(vh, frozenset(jwts))
    pieces = list(itertools.compress(every, map(itemgetter(0), every)))
    plan = _plan(pieces, book, options)
    if plan is None:
        return None
    try:
        frame = host_frame(vh)
    except Exception as err:
        log_translation_failure(f"virtual host {vh.name!r} of {vh.owner}", err)
        return None
    checked = plan.fresh if book is not None else pieces
    if SCOPE_KEY_HEADER.encode() in b"".join((*frame, *map(itemgetter(0), checked))):
        return None
    out = _scopes(listener, key, vh, plan, pieces, frame, book, options, memo)
    if memo is not None:
        memo.split_books[(listener, key)] = out
    return (out.index, *out.pairs)


def _plan(pieces: list[Piece], book: SplitBook | None, options: TranslateOptions) -> _Plan | None:
    """The split of `pieces` (`path_scopes.plan_split`), patched from `book` (whose counts it
    changes) when there is one."""
    pinned, spots = itemgetter(6), itemgetter(5)
    if book is None:
        counts, old_held, head, tail, fresh = DirCounts.of(map(pinned, pieces)), [], 0, 0, pieces
    else:
        old, old_held, counts = book.pieces, book.held, book.counts
        shorter = min(len(old), len(pieces))
        head = common_start(old, pieces, shorter)
        tail = min(common_start(reversed(old), reversed(pieces), shorter), shorter - head)
        fresh = pieces[head : len(pieces) - tail]
        counts.add(map(pinned, old[head : len(old) - tail]), -1)
        counts.add(map(pinned, fresh), 1)
    dirs = choose_dirs(counts, options.split_scope_max_routes)
    if not dirs:
        return None
    touched: set[int] | None = None
    if book is not None and dirs == book.dirs:
        mid = held_scopes(list(map(spots, fresh)), list(map(pinned, fresh)), dirs)
        gone = old_held[head : len(old_held) - tail]
        held = [*old_held[:head], *mid, *old_held[len(old_held) - tail :]]
        touched = set(itertools.chain(*gone, *mid))
    else:
        held = held_scopes(list(map(spots, pieces)), list(map(pinned, pieces)), dirs)
    if too_many_copies(held, options.split_max_extra_share):
        return None
    return _Plan(counts, dirs, held, touched, fresh)


def _scopes(
    listener: str,
    key: str,
    vh: VirtualHost,
    plan: _Plan,
    pieces: list[Piece],
    frame: tuple[bytes, bytes],
    book: SplitBook | None,
    options: TranslateOptions,
    memo: TranslateMemo | None,
) -> SplitBook:
    """The book of `plan`: each scope `plan` did not touch, or whose routes are the very same
    pieces as in `book`, keeps its pair; the index is kept while the directories are."""
    same_dirs = book is not None and book.dirs == plan.dirs
    # The index holds the host's name and domain (`frame[0]`), not its settings.
    index = book.index if same_dirs and book.frame[0] == frame[0] else None  # type: ignore[union-attr]
    if index is None:
        index = _index(listener, vh, plan.dirs, options.matcher_tree_min_routes)
    kept = book if same_dirs and book.frame == frame else None  # type: ignore[union-attr]
    touched = plan.touched if kept is not None else None
    scopes = len(plan.dirs) + 1
    groups = group(plan.held, scopes) if touched is None or len(touched) > _FEW else None
    generation = dirs_generation(plan.dirs)
    members: list[list[Piece]] = []
    pairs: list[Pair] = []
    trees: list[TreeBook | None] = []
    for scope, d in enumerate(((), *plan.dirs)):
        if kept is not None and touched is not None and scope not in touched:
            members.append(kept.members[scope])
            pairs.append(kept.pairs[scope])
            trees.append(kept.trees[scope])
            continue
        if groups is not None:
            held = list(map(pieces.__getitem__, groups[scope]))
        else:
            held = list(
                itertools.compress(pieces, map(contains, plan.held, itertools.repeat(scope)))
            )
        if kept is not None and kept.members[scope] == held:
            pair, tree = kept.pairs[scope], kept.trees[scope]
        else:
            path = generation + (dir_path(d) if d else "/")
            name = scoped_route_name(listener, vh.hostname, path)
            old = kept.trees[scope] if kept is not None else None
            pair, tree = _scope(name, key + path, frame, held, old, options, memo)
        members.append(held)
        pairs.append(pair)
        trees.append(tree)
    return SplitBook(pieces, plan.held, plan.counts, plan.dirs, frame, index, members, pairs, trees)


# Up to this many scopes to make again are picked out of the pieces one C-speed pass each;
# more are grouped in one pass.
_FEW = 8


def _scope(
    name: str,
    key: str,
    frame: tuple[bytes, bytes],
    held: list[Piece],
    old: TreeBook | None,
    options: TranslateOptions,
    memo: TranslateMemo | None,
) -> tuple[Pair, TreeBook | None]:
    """One path scope: the host's virtual host holding the routes `held` (a matcher tree from
    `matcher_tree_min_routes` of them, as a whole host would be, patched from the scope's tree
    `old` when there is one), and its tree."""
    book, tree = None, None
    if 0 < options.matcher_tree_min_routes <= len(held):
        book = tree_book(held) if old is None else patch_tree_book(old, held)
        tree = book.bytes_of()
    entry = length_delimited(_VHOSTS_TAG, b"".join(assemble_host(*frame, held, tree)))
    data = route_table_bytes(
        name,
        [entry],
        max(map(itemgetter(3), held), default=0),
        any(map(itemgetter(2), held)),
        (SCOPE_KEY_HEADER,),
    )
    config = route_pb2.RouteConfiguration.FromString(data)
    if memo is not None:
        memo.note_encoded(config, data)
    return (config, scope_message(name, key)), book


def _index(listener: str, vh: VirtualHost, dirs: Sequence[Dir], tree_min: int) -> Pair:
    """The host's own scope: its table leads each request to its directory's scope."""
    key = vh.hostname.lower()
    name = scoped_route_name(listener, vh.hostname)
    routes = index_routes(key + dirs_generation(dirs), dirs)
    head = rc.VirtualHost(name=vh.name, domains=[vh.hostname])
    placements = [
        *(Placement(PathMatchKind.SEGMENT_PREFIX, dir_path(d)) for d in dirs_deepest_first(dirs)),
        Placement(PathMatchKind.PREFIX, None),
    ]
    pieces: list[tuple[Any, ...]] = []
    for route, where in zip(routes, placements, strict=True):
        data = route.SerializeToString(deterministic=True)
        pieces.append((varint(len(data)) + data, where))
    tree = tree_book(pieces).bytes_of() if 0 < tree_min <= len(pieces) else None
    entry = length_delimited(
        _VHOSTS_TAG,
        b"".join(assemble_host(head.SerializeToString(deterministic=True), b"", pieces, tree)),
    )
    data = route_table_bytes(name, [entry], 0, False, (SCOPE_KEY_HEADER,))
    return route_pb2.RouteConfiguration.FromString(data), scope_message(name, key)


def dirs_generation(dirs: Sequence[Dir]) -> str:
    """What the keys of a split host's path scopes start with after the host: `#` and a digest
    of its directories, so that scopes of another set of directories have other keys (see the
    module docstring). No directory holds `#`, no hostname either."""
    digest = hashlib.sha256("\n".join(map(dir_path, dirs)).encode()).hexdigest()
    return "#" + digest[:_GENERATION_DIGITS]


_GENERATION_DIGITS = 8


def dirs_deepest_first(dirs: Sequence[Dir]) -> list[Dir]:
    """The order of the index routes: a directory before the directories it is in."""
    return sorted(dirs, key=lambda d: (-len(d), d))


def index_routes(key: str, dirs: Sequence[Dir]) -> list[Any]:
    """The index's routes for a host with scope key `key`: one per directory, deepest first,
    then one for every other path (the root scope)."""
    out = []
    for d in dirs_deepest_first(dirs):
        route = _index_route(dir_path(d), key + dir_path(d))
        route.match.path_separated_prefix = dir_path(d)
        out.append(route)
    last = _index_route("/", key + "/")
    last.match.prefix = ""  # every path, one not starting with "/" too
    out.append(last)
    return out


def _index_route(path: str, scope: str) -> Any:
    route = rc.Route(name=f"turnout/path-scope{path}")
    route.direct_response.status = INDEX_MISS_STATUS
    route.metadata.filter_metadata[SCOPE_KEY_FILTER][SCOPE_METADATA_KEY] = scope
    return route

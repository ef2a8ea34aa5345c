"""Which path scopes a big virtual host is split into, and which routes each scope holds.

A virtual host with tens of thousands of routes is one RouteConfiguration even under scoped RDS
(`scoped_routes`), and Envoy rebuilds all of it on every change to any of its routes (seconds at
50,000 routes). So a host with at least `split_host_min_routes` routes is split by a leading path
"directory": a sequence of whole path segments (`/g5`, `/g5/t1000`). A request belongs to the
LONGEST known directory that is a leading-segment prefix of its path without the query (`/g5/t1`
and `/g5/t1/x` are in `/g5/t1`, `/g5/t10` is not), or to the host's root scope; a path that does
not start with `/` belongs to the root scope. Each scope holds, in the host's first-match order,
every route that can match some path belonging to it, so the first route of the scope that
matches a request is the first route of the whole host that matches it.

A route's path match gives its `Spot` (kept with the route's translated piece):

- exact `/a/b` -> the one scope of the path `/a/b`;
- segment prefix `/a/b` -> the scope of `/a/b` and every directory under `/a/b`;
- string prefix `/a/b` (whole segments `a`, then `b` partial) -> the scope of `/a` and every
  directory under `/a` whose next segment starts with `b` (`/a/` is like the segment prefix
  `/a`); a regex is placed as a string prefix of its literal start (`route_tree`);
- anything else (`/`, "", a regex without literal start, a value holding `?` or `#`, a value not
  starting with `/`) -> every scope.

Header, query and runtime conditions do not matter: they only narrow what a route matches.
Envoy's `prefix` reads the path with its query string: a prefix without `?` prefixes the path
with the query exactly when it prefixes the path without it, so the same rule holds.

Directories are chosen from the routes' pinned segments (the whole segments their spot names):
a directory (first the root) holding more than `max_scope` routes gives its largest child
directories scopes of their own, largest first, until what is left is small enough, and so on
down. A directory segment is plain path text (`_SEGMENT`): a segment Envoy's path normalisation
would rewrite can never be matched, so it never becomes a directory. The host is not split when
no directory is found or when the routes placed in several scopes would add more than a share
of its routes (`TranslateOptions.split_max_extra_share`).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from turnout.envoy.translate.route_tree import regex_literal_prefix
from turnout.graph.model import PathMatch, PathMatchKind

__all__ = [
    "EVERYWHERE",
    "PathSplit",
    "Spot",
    "choose_dirs",
    "dir_path",
    "path_spot",
    "plan_split",
    "request_scope",
    "spot_scopes",
]

Dir = tuple[str, ...]
# (kind, pinned segments, partial segment): kind "e" exact, "s" segment prefix, "p" string
# prefix, "*" every scope.
Spot = tuple[str, Dir, str]

EVERYWHERE: Spot = ("*", (), "")

# Unreserved and sub-delimiter characters, ":" and "@" (RFC 3986 pchar without "%"): text a
# normalised path keeps as it is.
_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@-]+")


def path_spot(path: PathMatch) -> Spot:
    """Where a route with this path match is placed (see the module docstring)."""
    kind, value = path.kind, path.value
    if kind is PathMatchKind.REGEX:
        kind, value = PathMatchKind.PREFIX, regex_literal_prefix(value)
    if not value.startswith("/") or "?" in value or "#" in value:
        return EVERYWHERE
    if kind is PathMatchKind.EXACT:
        return ("e", tuple(value[1:].split("/")), "")
    if kind is PathMatchKind.SEGMENT_PREFIX:
        value = value.rstrip("/")
        return ("s", tuple(value[1:].split("/")), "") if value else EVERYWHERE
    *full, partial = value[1:].split("/")
    return ("p", tuple(full), partial) if full or partial else EVERYWHERE


def dir_path(d: Dir) -> str:
    """The path of a directory: `/a/b`."""
    return "/" + "/".join(d)


def request_scope(path: str, dirs: Iterable[Dir]) -> Dir:
    """The directory a request's `:path` belongs to (`()`: the root scope): the longest of
    `dirs` that is a leading-segment prefix of the path without its query and fragment, as
    Envoy's `path_separated_prefix` reads it."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    if not path.startswith("/"):
        return ()
    known = set(dirs)
    segments = tuple(path[1:].split("/"))
    found = [segments[:n] for n in range(1, len(segments) + 1) if segments[:n] in known]
    return found[-1] if found else ()


def choose_dirs(pinned: Mapping[Dir, int], max_scope: int) -> list[Dir]:
    """The directories, sorted, for routes pinned at these segments (with their counts): see
    the module docstring."""
    out: list[Dir] = []
    stack: list[tuple[Dir, list[tuple[Dir, int]]]] = [((), list(pinned.items()))]
    while stack:
        d, items = stack.pop()
        remaining = sum(n for _, n in items)
        if remaining <= max_scope:
            continue
        depth = len(d)
        children: dict[str, list[tuple[Dir, int]]] = {}
        for segments, n in items:
            if len(segments) > depth and _SEGMENT.fullmatch(segments[depth]):
                children.setdefault(segments[depth], []).append((segments, n))
        sizes = sorted(
            ((sum(n for _, n in v), k) for k, v in children.items()), key=lambda t: (-t[0], t[1])
        )
        for size, segment in sizes:
            if remaining <= max_scope:
                break
            if segment in (".", ".."):
                continue  # normalisation resolves these: no request path holds one
            child = (*d, segment)
            out.append(child)
            remaining -= size
            stack.append((child, children[segment]))
    return sorted(out)


def spot_scopes(spot: Spot, dirs: Sequence[Dir], index: Mapping[Dir, int]) -> tuple[int, ...]:
    """The scopes (0: the root, i + 1: `dirs[i]`; `dirs` sorted, `index` their numbers) holding
    the routes at `spot`, in increasing order."""
    kind, segments, partial = spot
    if kind == "*":
        return tuple(range(len(dirs) + 1))
    found = _longest(segments, index)
    if kind == "e":
        return (found,)
    out = {found}
    depth = len(segments)
    i = bisect.bisect_right(dirs, segments)
    while i < len(dirs) and dirs[i][:depth] == segments:
        if kind == "s" or dirs[i][depth].startswith(partial):
            out.add(i + 1)
        i += 1
    return tuple(sorted(out))


def _longest(segments: Dir, index: Mapping[Dir, int]) -> int:
    for n in range(len(segments), 0, -1):
        found = index.get(segments[:n])
        if found is not None:
            return found
    return 0


@dataclass(frozen=True, slots=True)
class PathSplit:
    """A host's directories (sorted) and, per scope (the root first, then each directory), the
    positions of its routes in the host's first-match order."""

    dirs: tuple[Dir, ...]
    scopes: tuple[tuple[int, ...], ...]


def plan_split(
    spots: Sequence[Spot],
    pinned: Sequence[Dir | None],
    max_scope: int,
    max_extra: float,
) -> PathSplit | None:
    """The split of a host whose routes have these spots and pinned segments (None: placed
    everywhere), or None when it is not split (see the module docstring)."""
    counts = Counter(pinned)
    counts.pop(None, None)
    dirs = tuple(choose_dirs(counts, max_scope))  # type: ignore[arg-type]
    if not dirs:
        return None
    index = {d: i + 1 for i, d in enumerate(dirs)}
    memo: dict[Spot, tuple[int, ...]] = {}
    scopes: list[list[int]] = [[] for _ in range(len(dirs) + 1)]
    entries = 0
    for position, spot in enumerate(spots):
        held = memo.get(spot)
        if held is None:
            held = memo[spot] = spot_scopes(spot, dirs, index)
        entries += len(held)
        for scope in held:
            scopes[scope].append(position)
    if entries - len(spots) > max_extra * len(spots):
        return None
    return PathSplit(dirs, tuple(map(tuple, scopes)))

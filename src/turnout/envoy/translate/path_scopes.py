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

Directories are chosen from the routes' pinned segments (the whole segments their spot names): a
directory (first the root) holding more than `max_scope` routes gives each child directory holding
at least an eighth of `max_scope` a scope of its own, or every child directory when what the small
ones hold together is still more than `max_scope`, and so on down. The directories then change only
when a count crosses one of those lines, not with every route added (a change of directories costs
Envoy the whole host, `split_host`). A directory segment is plain path text (`_SEGMENT`): a segment
Envoy's path normalisation would rewrite can never be matched, so it never becomes a directory. The
host is not split when no directory is found or when the routes placed in several scopes would add
more than a share of its routes (`TranslateOptions.split_max_extra_share`).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from turnout.envoy.translate.route_tree import regex_literal_prefix
from turnout.graph.model import PathMatch, PathMatchKind

__all__ = [
    "EVERYWHERE",
    "Dir",
    "DirCounts",
    "PathSplit",
    "Spot",
    "choose_dirs",
    "dir_path",
    "group",
    "held_scopes",
    "path_spot",
    "plan_split",
    "request_scope",
    "spot_scopes",
    "too_many_copies",
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


@dataclass(slots=True)
class DirCounts:
    """How many routes are pinned at or under each directory a request can reach (`total`),
    and under each such directory per child segment that can be a directory (`children`): what
    `choose_dirs` reads, kept so that a change adds and takes away its routes' counts only."""

    total: Counter[Dir] = field(default_factory=Counter)
    children: dict[Dir, Counter[str]] = field(default_factory=dict)

    @staticmethod
    def of(pinned: Iterable[Dir | None]) -> DirCounts:
        counts = DirCounts()
        counts.add(pinned, 1)
        return counts

    def add(self, pinned: Iterable[Dir | None], sign: int) -> None:
        """Counts the routes pinned at `pinned` (None: not pinned) once more (`sign` 1) or once
        less (-1)."""
        total, children = self.total, self.children
        for segments, n in Counter(pinned).items():
            if segments is None:
                continue
            n *= sign
            for depth in range(len(segments) + 1):
                d = segments[:depth]
                total[d] += n
                if not total[d]:
                    del total[d]
                if depth == len(segments) or not _is_dir_segment(segments[depth]):
                    break
                below = children.setdefault(d, Counter())
                below[segments[depth]] += n
                if not below[segments[depth]]:
                    del below[segments[depth]]
                    if not below:
                        del children[d]


def _is_dir_segment(segment: str) -> bool:
    # Normalisation resolves "." and "..": no request path holds one.
    return segment not in (".", "..") and _SEGMENT.fullmatch(segment) is not None


def choose_dirs(counts: DirCounts, max_scope: int) -> tuple[Dir, ...]:
    """The directories, sorted, for routes with these counts: see the module docstring."""
    big = max(1, max_scope // _BIG_CHILD_SHARE)
    out: list[Dir] = []
    stack: list[Dir] = [()]
    while stack:
        d = stack.pop()
        if counts.total.get(d, 0) <= max_scope:
            continue
        children: Mapping[str, int] = counts.children.get(d, {})
        chosen = [segment for segment, n in children.items() if n >= big]
        if counts.total[d] - sum(children[segment] for segment in chosen) > max_scope:
            chosen = list(children)  # the small ones together are too many as well
        for segment in chosen:
            out.append((*d, segment))
            stack.append((*d, segment))
    return tuple(sorted(out))


# A child directory holding at least this share of the largest scope gets a scope of its own.
_BIG_CHILD_SHARE = 8


def held_scopes(
    spots: Sequence[Spot], pinned: Sequence[Dir | None], dirs: Sequence[Dir]
) -> list[tuple[int, ...]]:
    """The scopes holding each route (`spot_scopes`), for routes with these spots and pinned
    segments. A route pinned where no directory lies below has the one scope its pinned
    segments give, whatever its kind: those are looked up by the pinned segments (C-speed for
    repeated ones); only the others are placed one by one."""
    index = {d: i + 1 for i, d in enumerate(dirs)}
    by_pinned = _ByPinned(dirs, index)
    out: list[tuple[int, ...] | None] = list(map(by_pinned.__getitem__, pinned))
    for i in itertools.compress(range(len(out)), map(operator.not_, out)):
        out[i] = spot_scopes(spots[i], dirs, index)
    return out  # type: ignore[return-value]


class _ByPinned(dict[Dir | None, tuple[int, ...]]):
    """Pinned segments -> their one scope, or () when some directory lies below them (then the
    route's kind decides); None (every scope) -> every scope."""

    def __init__(self, dirs: Sequence[Dir], index: Mapping[Dir, int]) -> None:
        super().__init__()
        self.dirs, self.index = dirs, index

    def __missing__(self, segments: Dir | None) -> tuple[int, ...]:
        if segments is None:
            found = tuple(range(len(self.dirs) + 1))
        else:
            i = bisect.bisect_right(self.dirs, segments)
            below = i < len(self.dirs) and self.dirs[i][: len(segments)] == segments
            found = () if below else (_longest(segments, self.index),)
        self[segments] = found
        return found


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


def too_many_copies(held: Sequence[tuple[int, ...]], max_extra: float) -> bool:
    """Whether the routes placed in several scopes add more than `max_extra` of the routes."""
    return sum(map(len, held)) - len(held) > max_extra * len(held)


def group(held: Sequence[tuple[int, ...]], scopes: int) -> list[list[int]]:
    """Per scope, the positions of the routes it holds (`held`: each route's scopes)."""
    out: list[list[int]] = [[] for _ in range(scopes)]
    for position, where in enumerate(held):
        for scope in where:
            out[scope].append(position)
    return out


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
    dirs = choose_dirs(DirCounts.of(pinned), max_scope)
    if not dirs:
        return None
    held = held_scopes(spots, pinned, dirs)
    if too_many_copies(held, max_extra):
        return None
    return PathSplit(dirs, tuple(map(tuple, group(held, len(dirs) + 1))))

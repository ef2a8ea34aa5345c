"""The files source: YAML/JSON files and directories, loaded once and then watched.

Each file is one store partition (`file:<path>`), so a file that stops parsing keeps its last good
objects in force while every other file goes on changing independently.

Watching works on a rescan model: a batch of filesystem events only says "look again". The rescan
walks the given paths, compares each file's `stat` (following symlinks) and content digest with
what was last loaded, and reloads only what differs. That one rule covers editors that save by
rename, files created inside new directories, and Kubernetes ConfigMap volumes, whose visible
files are symlinks through a `..data` link that the kubelet swaps atomically: the event lands on
`..data`, not on the file, but the file's resolved inode changes.

A file rewritten in place (`open(path, "w")`, then write) is empty, or cut short, for a moment,
and a rescan may land in that moment. So a file that had objects and now yields none (0 bytes,
only whitespace or comments, or cut inside its first object) is *held*: its objects stay in
force for the empty-file grace period, and only if it still yields none after that are they
removed. Content arriving within the grace period simply applies, so nothing was removed in
between. A file that does not parse keeps its last good objects for as long as it does not
parse; a deleted file's objects go at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import inspect
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchfiles import Change, awatch

from turnout.sources.base import PartitionSink, SourceSink
from turnout.sources.parse import ParseResult, parse_text
from turnout.sources.parse_cache import CachedParse, ParseCache
from turnout.store import SourceProblem

log = logging.getLogger(__name__)

SUFFIXES = frozenset({".yaml", ".yml", ".json"})
# The largest file the source reads (`--max-file-bytes`): a larger one is refused unread, so one
# file cannot hold the control plane's memory and parse time (issue 14: a 100 MB file read whole
# took 635 MB). Routing files are kilobytes; 4 MiB holds thousands of objects.
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024
PARTITION_PREFIX = "file:"

# When no event arrives for this long, the watcher rescans anyway: this closes the short gap while
# the OS watches are being re-armed after a directory appears, and catches filesystems that do not
# deliver events (some network and overlay mounts). A rescan is one `stat` per file.
_IDLE_RESCAN_MS = 5_000
# How long the watcher waits for more events before it yields a batch: the controller coalesces
# bursts itself (`Controller._coalesce`), so this only groups one write's events (a temporary
# file and its rename) and bounds the wake-ups of an idle watcher (one per step: about 1% of a
# core at 5 ms). A batch takes 1-2 steps after its last event.
WATCH_STEP_MS = 5
# Pause before re-arming the watcher after it failed (a watched directory vanished mid-setup).
_REARM_DELAY_S = 0.2
# How long a file that had objects may yield none before they are removed (`--empty-file-grace`).
DEFAULT_EMPTY_FILE_GRACE_S = 5.0
# A timer may fire a little before its deadline; waking a bit late avoids a second wake-up.
_HOLD_MARGIN_S = 0.01

# How long the files must be quiet before the parse cache is written (and when the source
# stops): one write per burst, a while after a start, when the first compile is likely through.
# Writing 30,000 files' parses costs about 1 s of CPU, which a change compiling meanwhile shares.
CACHE_SAVE_DELAY_S = 30.0

# The level of a file's "loaded" line: debug during the first load (one summary line instead).
_LOADED_LEVEL = {False: logging.INFO, True: logging.DEBUG}

OnChange = Callable[[], Awaitable[None] | None]


def partition_key(path: Path) -> str:
    return f"{PARTITION_PREFIX}{path}"


def _hidden(name: str) -> bool:
    return name.startswith(".")


def _wanted(name: str) -> bool:
    """Whether a file name's suffix (`Path.suffix`, without making a Path: one per file found)
    is one of `SUFFIXES`."""
    dot = name.rfind(".")
    return 0 < dot < len(name) - 1 and name[dot:].lower() in SUFFIXES


def excluded(relative: str, exclude: Sequence[str]) -> bool:
    """Whether a path (relative to the directory it was found under, with `/`) matches one of the
    `--exclude` globs, whole or by its last name (`fnmatch`: `*` also crosses `/`)."""
    name = relative.rpartition("/")[2]
    return any(fnmatch.fnmatchcase(relative, g) or fnmatch.fnmatchcase(name, g) for g in exclude)


def _walk(root: Path, exclude: Sequence[str] = ()) -> tuple[list[Path], list[Path]]:
    """Wanted files and visible directories under `root` (itself included), following symlinks,
    without those the `exclude` globs match (`excluded`).

    Hidden entries are skipped below the root: editors keep swap and lock files there
    (`.x.yaml.swp`, `.#x.yaml`), and ConfigMap volumes keep their real files in `..<timestamp>`
    directories that would otherwise be read twice.
    """
    files: list[Path] = []
    dirs: list[Path] = []
    for here, prefix, names in _visible_dirs(root, exclude):
        dirs.append(here)
        for name in names:
            if _hidden(name) or not _wanted(name) or excluded(prefix + name, exclude):
                continue
            path = here / name
            # Skips dangling symlinks, FIFOs and sockets: reading a FIFO would block forever.
            if path.is_file():
                files.append(path)
    return files, dirs


def _visible_dirs(root: Path, exclude: Sequence[str]) -> Iterator[tuple[Path, str, list[str]]]:
    """Each directory `_walk` visits under `root` (itself included): its path, its path
    relative to `root` as a prefix (`a/b/`, or empty), and the names of its files."""
    seen: set[str] = set()

    def on_error(err: OSError) -> None:
        log.warning("cannot list %s: %s", err.filename, err.strerror)

    for current, subdirs, names in os.walk(root, onerror=on_error, followlinks=True):
        # A symlink back up the tree would make the walk endless.
        real = os.path.realpath(current)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        here = Path(current)
        base = here.relative_to(root).as_posix()
        prefix = "" if base == "." else f"{base}/"
        subdirs[:] = sorted(
            d for d in subdirs if not _hidden(d) and not excluded(prefix + d, exclude)
        )
        yield here, prefix, names


def discover(paths: Sequence[Path], exclude: Sequence[str] = ()) -> list[Path]:
    """The files to load: wanted files under each directory (recursively, hidden entries and
    `exclude` matches skipped), plus every path given as a file, whatever its name, as `kubectl
    apply -f` does, unless its name matches `exclude`. Missing paths are left out; `FileSource`
    reports them."""
    found: set[Path] = set()
    for root in paths:
        if root.is_dir():
            found.update(_walk(root, exclude)[0])
        elif root.is_file() and not excluded(root.name, exclude):
            found.add(root)
    # The order of `Path`'s own comparison (its parts), compared as tuples in C: sorting 30,000
    # paths with `Path.__lt__` took a quarter of a second.
    return sorted(found, key=_parts)


def _parts(path: Path) -> tuple[str, ...]:
    return path.parts


@dataclass(frozen=True, slots=True)
class _Read:
    data: bytes | None
    problem: SourceProblem | None


def _too_large(path: Path, limit: int) -> _Read:
    reason = f"file is larger than --max-file-bytes ({limit} bytes); not read"
    return _Read(None, SourceProblem(str(path), None, reason, severity="unreadable"))


def _read(path: Path, limit: int = DEFAULT_MAX_FILE_BYTES) -> _Read:
    """The file's bytes, or a problem: unreadable, or over `limit` bytes. The size is checked
    before reading, and the read stops one byte past `limit` (the file may grow meanwhile, or
    `stat` may not know its size), so a huge file is never held in memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                return _too_large(path, limit)
            data = _read_fd(fd, size, limit)
        finally:
            os.close(fd)
    except OSError as err:
        reason = f"cannot read file: {err.strerror or err}"
        return _Read(None, SourceProblem(str(path), None, reason, severity="unreadable"))
    if len(data) > limit:
        return _too_large(path, limit)
    return _Read(data, None)


def _read_fd(fd: int, size: int, limit: int) -> bytes:
    """Up to `limit + 1` bytes of the file. Reads what `fstat` said first (one read of
    `limit + 1` bytes would allocate that much: 4 MiB for every file), then whatever follows (a
    short read, a file grown meanwhile) until its end or past `limit`."""
    data = os.read(fd, size + 1)
    while len(data) <= limit:
        more = os.read(fd, limit + 1 - len(data))
        if not more:
            break
        data += more
    return data


def _parse(data: bytes, source: str, shared: dict[Any, Any] | None = None) -> ParseResult:
    try:
        # utf-8-sig: the YAML spec allows a byte order mark, and Windows editors write one.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        problem = SourceProblem(
            source, line, f"file is not valid UTF-8: {err.reason}", severity="unreadable"
        )
        return ParseResult((), (problem,), failed=True)
    return parse_text(text, source, shared)


def load_file(path: Path, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> ParseResult:
    """Reads and parses one file. Read errors become a failed result, never an exception."""
    read = _read(path, max_file_bytes)
    if read.data is None:
        assert read.problem is not None
        return ParseResult((), (read.problem,), failed=True)
    return _parse(read.data, str(path))


_Signature = tuple[int, int, int, int, int]


def _signature(path: Path) -> _Signature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _signature_of(st)


def _signature_of(st: os.stat_result) -> _Signature:
    # ctime too: a chmod that makes an unreadable file readable changes nothing else.
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# A file as a load found it: its path and stat signature (None: gone meanwhile).
FileStat = tuple[str, _Signature | None]


def file_stats(paths: Sequence[Path], exclude: Sequence[str] = ()) -> tuple[FileStat, ...]:
    """Every file a load of `paths` would read (`discover`), with its signature, sorted;
    nothing is read. A restart compares it with what the last run loaded
    (`FileSource.loaded_stats`). One `stat` per file: half of what `discover` and then
    `_signature` cost (at 30,000 files about 1 s)."""
    found: dict[str, _Signature | None] = {}
    for root in paths:
        if root.is_dir():
            _tree_stats(root, exclude, found)
        elif root.is_file() and not excluded(root.name, exclude):
            found[str(root)] = _signature(root)
    return tuple(sorted(found.items()))


def _tree_stats(root: Path, exclude: Sequence[str], found: dict[str, _Signature | None]) -> None:
    """`_walk`'s files under `root` with their signatures (the same walk: any difference would
    only make a restart take the cold path)."""
    for here, prefix, names in _visible_dirs(root, exclude):
        # str(here / name), without making a Path per file.
        head = "" if str(here) == "." else os.path.join(str(here), "")
        for name in names:
            if _hidden(name) or not _wanted(name) or (exclude and excluded(prefix + name, exclude)):
                continue
            try:
                st = os.stat(head + name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[head + name] = _signature_of(st)


@dataclass(frozen=True, slots=True)
class _Seen:
    signature: _Signature | None
    digest: bytes | None


@dataclass(frozen=True, slots=True)
class _Update:
    """One partition change, computed off the event loop and applied on it."""

    path: Path
    seen: _Seen | None  # None: the file is gone
    result: ParseResult | None  # None: the content did not change, only the signature did
    cached: bool = False  # the result is the parse cache's (the file was not parsed)


@dataclass(frozen=True, slots=True)
class _Scan:
    updates: tuple[_Update, ...]
    missing: tuple[Path, ...]  # given paths that do not exist


class FileSource:
    """Loads the given files and directories into a sink and keeps them in sync: a `Source`
    (`run`), or driven by hand (`load_all`, `watch`) into the sink it was made with."""

    name = "files"

    def __init__(
        self,
        paths: Sequence[Path],
        sink: PartitionSink | None = None,
        *,
        watch: bool = True,
        debounce_ms: int = 100,
        empty_file_grace_s: float = DEFAULT_EMPTY_FILE_GRACE_S,
        exclude: Sequence[str] = (),
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        parse_cache: ParseCache | None = None,
    ) -> None:
        self._roots = tuple(paths)
        self._exclude = tuple(exclude)
        self._max_file_bytes = max_file_bytes
        self._sink = sink
        self._watching = watch
        self._debounce_ms = debounce_ms
        # Only a watcher comes back to end a hold, so without one an empty file applies at once.
        self._grace_s = empty_file_grace_s if watch else 0.0
        self._seen: dict[Path, _Seen] = {}
        # The files in `_seen` by absolute path (what the watcher reports): a change to files
        # already loaded reads just those, not the whole tree (30,000 files: 1.2 s a change).
        self._by_abspath: dict[Path, Path] = {}
        # Partitions with objects in the sink: a file that stops parsing keeps them.
        self._loaded: set[str] = set()
        # Files whose last applied content had objects: only these are held when they empty.
        self._with_objects: set[Path] = set()
        # Held empty files: the `time.monotonic()` at which their emptiness applies. A hold
        # begun by a SIGHUP reload is seen by the watch loop at its next batch (at most
        # `_IDLE_RESCAN_MS` later): it may end late, never early.
        self._held: dict[Path, float] = {}
        # Counts applied scans: a scan computed against an older state (because `load_all` ran
        # while a watcher scan was in its thread) is discarded instead of undoing newer content.
        self._generation = 0
        self._missing: frozenset[Path] = frozenset()
        # The parse cache (`sources/parse_cache.py`): read by the first scan, then dropped; and
        # each loaded file's last good parse, what the cache is written from.
        self._cache = parse_cache
        self._cached: dict[str, CachedParse] | None = None
        self._parsed: dict[Path, CachedParse] = {}
        self._cache_dirty = asyncio.Event()
        self._cache_marks = 0  # how often what the cache would hold changed (`_save_cache_later`)
        # Files that failed to parse and keep objects of an earlier content, and how often a
        # loaded file's signature changed: what `loaded_stats` and its callers look at.
        self._stale: set[Path] = set()
        self.stat_marks = 0

    @property
    def paths(self) -> tuple[Path, ...]:
        return self._roots

    @property
    def exclude(self) -> tuple[str, ...]:
        return self._exclude

    def files(self) -> list[Path]:
        """The files currently loaded (including those whose last read failed)."""
        return sorted(self._seen)

    def load_all(self) -> None:
        """Loads every file synchronously: the initial state before anything serves."""
        self._apply(self._scan(dict(self._seen), self._to_read(frozenset())))

    async def run(self, sink: SourceSink) -> None:
        """The `Source` protocol: loads every file into `sink`, says it is synced, then (unless
        made with `watch=False`) watches until cancelled. The sink hears every change itself,
        so the watcher's own callback has nothing to do."""
        self._sink = sink
        await self._rescan(frozenset())
        sink.synced()
        if not self._watching:  # nothing changes after this load
            await asyncio.to_thread(self.save_cache)
            return
        saver = asyncio.create_task(self._save_cache_later(), name="files-parse-cache")
        try:
            await self.watch(_nothing, debounce_ms=self._debounce_ms)
        finally:
            saver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await saver
            self.save_cache()  # stopping: what changed since the last write

    async def _save_cache_later(self) -> None:
        """Writes the parse cache off the event loop once no change came for
        `CACHE_SAVE_DELAY_S`: a change meanwhile starts the wait again."""
        if self._cache is None:
            return
        while True:
            await self._cache_dirty.wait()
            marks = self._cache_marks
            await asyncio.sleep(CACHE_SAVE_DELAY_S)
            if self._cache_marks != marks:
                continue
            self._cache_dirty.clear()
            await asyncio.to_thread(self._cache.save, self._cache_entries())

    def _mark_cache_dirty(self) -> None:
        self._cache_marks += 1
        self._cache_dirty.set()

    def save_cache(self) -> None:
        """Writes every loaded file's last good parse to the parse cache, if there is one and
        what it holds changed."""
        if self._cache is not None and self._cache_dirty.is_set():
            self._cache_dirty.clear()
            self._cache.save(self._cache_entries())

    def loaded_stats(self) -> tuple[FileStat, ...] | None:
        """The signature of every file loaded, sorted as `file_stats` gives them; None when the
        sink holds what loading those files afresh would not (a held empty file, a file that
        stopped parsing and keeps its last good objects)."""
        if self._held or self._stale:
            return None
        return tuple(sorted((str(path), seen.signature) for path, seen in self._seen.items()))

    def _cache_entries(self) -> dict[str, CachedParse]:
        return {str(path): parsed for path, parsed in self._parsed.items()}

    async def reload(self) -> None:
        """Re-reads what differs from the last load (SIGHUP)."""
        self.load_all()

    async def watch(
        self,
        on_change: OnChange,
        *,
        debounce_ms: int = 100,
        stop_event: asyncio.Event | None = None,
    ) -> None:
        """Reloads on every batch of filesystem changes until `stop_event` is set (or the task is
        cancelled). `on_change` is called once per batch that changed the store."""
        stop = stop_event if stop_event is not None else asyncio.Event()
        step = max(1, min(WATCH_STEP_MS, debounce_ms))
        while not stop.is_set():
            targets = await asyncio.to_thread(self._watch_targets)
            try:
                await self._watch_once(targets, on_change, debounce_ms, step, stop)
            except OSError as err:
                # A directory removed between listing and watching; look again shortly.
                log.debug("re-arming the file watcher after: %s", err)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), _REARM_DELAY_S)

    async def _watch_once(
        self,
        targets: frozenset[Path],
        on_change: OnChange,
        debounce_ms: int,
        step: int,
        stop: asyncio.Event,
    ) -> None:
        """Watches `targets` until the set of directories to watch changes, or `stop`."""
        flag = _StopFlag(stop)
        changes_iter = awatch(
            *sorted(targets),
            watch_filter=_interesting,
            debounce=debounce_ms,
            step=step,
            stop_event=flag,
            rust_timeout=_IDLE_RESCAN_MS,
            yield_on_timeout=True,
            # Watches are per directory (not recursive) so that a file given by name does not
            # make its whole parent tree watched; new directories re-arm the watcher instead.
            recursive=False,
            ignore_permission_denied=True,
        )
        async with contextlib.aclosing(changes_iter):
            pending = asyncio.ensure_future(anext(changes_iter))
            try:
                # One loop turn lets the generator arm its OS watches (synchronously, before its
                # first await); the rescan after that misses nothing that happened before.
                await asyncio.sleep(0)
                if await self._rescan(frozenset()):
                    await _call(on_change)
                while True:
                    if not await self._wait_for_batch(pending):
                        # A hold's grace period is over: the held files are read again.
                        if await self._rescan(frozenset()):
                            await _call(on_change)
                        continue
                    try:
                        changes = pending.result()
                    except StopAsyncIteration:
                        return
                    changed = frozenset(Path(os.path.abspath(p)) for _, p in changes)
                    known = self._known_files(changed)
                    if known is not None:
                        if await self._rescan(changed, only=known):
                            await _call(on_change)
                    else:
                        if await self._rescan(changed):
                            await _call(on_change)
                        if await asyncio.to_thread(self._watch_targets) != targets:
                            return
                    pending = asyncio.ensure_future(anext(changes_iter))
            finally:
                if not pending.done():
                    # The watcher thread only notices the flag, not task cancellation; the
                    # generator must have stopped running before it can be closed.
                    flag.set()
                    pending.cancel()
                    await asyncio.wait([pending])

    async def _wait_for_batch(self, pending: asyncio.Future[set[tuple[Change, str]]]) -> bool:
        """Waits for the watcher's next batch or the end of the earliest hold; True when the
        batch came."""
        timeout = None
        if self._held:
            timeout = max(0.0, min(self._held.values()) - time.monotonic()) + _HOLD_MARGIN_S
        await asyncio.wait((pending,), timeout=timeout)
        return pending.done()

    async def _rescan(self, changed: frozenset[Path], only: frozenset[Path] | None = None) -> bool:
        """Reads what changed and applies it: the whole tree, or with `only` just those files
        (loaded ones: no directory changed, so the set of files did not change otherwise)."""
        while True:
            generation = self._generation
            to_read = self._to_read(changed)
            if only is None:
                scan = await asyncio.to_thread(self._scan, dict(self._seen), to_read)
            else:
                held = frozenset(self._held)
                scan = await asyncio.to_thread(self._scan_files, dict(self._seen), only | held)
            if generation == self._generation:
                return self._apply(scan)

    def _known_files(self, changed: frozenset[Path]) -> frozenset[Path] | None:
        """The loaded files (as `_seen` names them) that `changed` (absolute paths from the
        watcher) names, when that is all it names besides files no scan would read (a writer's
        temporary `x.yaml.tmp`); None when something else changed (a new file, a directory, a
        ConfigMap volume's `..data` swap): then the whole tree is scanned again."""
        known: set[Path] = set()
        roots = {Path(os.path.abspath(root)) for root in self._roots}
        for path in changed:
            if path in roots:  # a path given by name: its absence is reported, see `_apply`
                return None
            loaded = self._by_abspath.get(path)
            if loaded is not None:
                known.add(loaded)
                continue
            name = path.name
            if _hidden(name) or not path.suffix or _wanted(name):
                return None
            if path.is_dir():
                return None
        return frozenset(known)

    def _scan_files(self, seen: dict[Path, _Seen], paths: frozenset[Path]) -> _Scan:
        """`_scan` for loaded files only: each is read again (the watcher reported it), or
        removed when it is no longer a file."""
        updates: list[_Update] = []
        shared: dict[Any, Any] = {}
        for path in sorted(paths):
            if not path.is_file():
                if path in seen:
                    updates.append(_Update(path, None, None))
                continue
            update = self._read_update(path, seen.get(path), True, shared)
            if update is not None:
                updates.append(update)
        return _Scan(tuple(updates), tuple(self._missing))

    def _to_read(self, changed: frozenset[Path]) -> frozenset[Path]:
        """`changed` and the held files: a held file must be read again even when it was
        restored within one timestamp tick, so that its hold ends."""
        return changed | frozenset(Path(os.path.abspath(p)) for p in self._held)

    def _watch_targets(self) -> frozenset[Path]:
        """Directories to watch (non-recursively), plus each file given by name.

        A file given by name is watched through its directory too: replacing the file by rename,
        or a ConfigMap's `..data` swap, is only seen there. Its own watch sees in-place writes to
        the file a symlink points at, when that lives elsewhere.
        """
        targets: set[Path] = set()
        for root in self._roots:
            absolute = Path(os.path.abspath(root))
            if absolute.is_dir():
                targets.update(_walk(absolute, self._exclude)[1])
            elif absolute.exists():
                targets.update((absolute, absolute.parent))
            else:
                # Watch the nearest existing ancestor, so that creating the path is seen.
                ancestor = absolute.parent
                while not ancestor.is_dir() and ancestor != ancestor.parent:
                    ancestor = ancestor.parent
                targets.add(ancestor)
        return frozenset(targets)

    def _scan(self, seen: dict[Path, _Seen], changed: frozenset[Path]) -> _Scan:
        """Reads what differs from `seen`, the state of the last load. Runs in a worker thread, so
        it reads nothing that the event loop mutates."""
        if self._cache is not None and self._generation == 0 and self._cached is None:
            self._cached = self._cache.load()
        files = discover(self._roots, self._exclude)
        updates: list[_Update] = []
        # Equal values parsed from different files are one object (see `parse_text`).
        shared: dict[Any, Any] = {}
        for path in files:
            forced = bool(changed) and Path(os.path.abspath(path)) in changed
            update = self._read_update(path, seen.get(path), forced, shared)
            if update is not None:
                updates.append(update)
        present = set(files)
        updates.extend(_Update(path, None, None) for path in seen if path not in present)
        missing = tuple(root for root in self._roots if not root.exists())
        return _Scan(tuple(updates), missing)

    def _read_update(
        self, path: Path, prev: _Seen | None, forced: bool, shared: dict[Any, Any]
    ) -> _Update | None:
        """One file read again if its signature changed (or `forced`); None: unchanged."""
        signature = _signature(path)
        # Two same-size writes within one kernel timestamp tick share a signature; the event
        # for the path is what tells them apart.
        if prev is not None and prev.signature == signature and not forced:
            return None
        read = _read(path, self._max_file_bytes)
        if read.data is None:
            assert read.problem is not None
            result = ParseResult((), (read.problem,), failed=True)
            return _Update(path, _Seen(signature, None), result)
        digest = hashlib.sha256(read.data).digest()
        seen = _Seen(signature, digest)
        if prev is not None and prev.digest == digest:
            return _Update(path, seen, None)
        cached = self._cached.get(str(path)) if self._cached else None
        if cached is not None and cached.digest == digest:
            return _Update(path, seen, cached.result, cached=True)
        return _Update(path, seen, _parse(read.data, str(path), shared))

    def _apply(self, scan: _Scan) -> bool:
        """Applies a scan to the sink; True when the sink's content changed."""
        sink = self._sink
        if sink is None:
            raise RuntimeError("FileSource has no sink: give one, or use run(sink)")
        # The first load logs one line, not one per file (30,000 lines at 10,000 objects).
        first = self._generation == 0
        self._generation += 1
        changed = False
        for update in scan.updates:
            changed = self._apply_update(sink, update, first) or changed
        if first:
            self._first_loaded(scan)
        missing = frozenset(scan.missing)
        for root in missing - self._missing:
            problem = SourceProblem(
                str(root), None, "no such file or directory", severity="unreadable"
            )
            log.warning("%s", problem)
            changed = sink.replace_partition(partition_key(root), (), (problem,)) or changed
        for root in self._missing - missing:
            # The path exists again; its files (if any) have their own partitions now.
            if root not in self._seen:
                changed = sink.remove_partition(partition_key(root)) or changed
        self._missing = missing
        return changed

    def _first_loaded(self, scan: _Scan) -> None:
        """Logs the first load in one line; the parse cache is not needed any more, and is
        written again unless it held exactly what was loaded."""
        hits = sum(update.cached for update in scan.updates)
        if self._cache is not None:
            log.info("loaded %d file(s), %d from the parse cache", len(scan.updates), hits)
        else:
            log.info("loaded %d file(s)", len(scan.updates))
        if self._cached is None or hits != len(self._cached) or hits != len(self._parsed):
            self._mark_cache_dirty()
        self._cached = None

    def _apply_update(self, sink: PartitionSink, update: _Update, first: bool = False) -> bool:
        key = partition_key(update.path)
        if update.seen is None:
            log.info("%s: removed", update.path)
            self._forget(update.path)
            self._loaded.discard(key)
            return sink.remove_partition(key)
        result = update.result
        if result is not None and self._holding(update.path, result):
            # Its last signature stays, so every rescan reads the file again until it has
            # content or the hold ends.
            return False
        self._held.pop(update.path, None)
        if self._seen.get(update.path) != update.seen:
            self.stat_marks += 1
        self._seen[update.path] = update.seen
        self._by_abspath[Path(os.path.abspath(update.path))] = update.path
        if result is None:
            return False
        for problem in result.problems:
            log.warning("%s", problem)
        self._record_parse(update, result)
        if result.failed:
            if key in self._loaded:
                log.warning("%s: keeping its last good objects", update.path)
                self._stale.add(update.path)
            return sink.set_problems(key, result.problems)
        self._stale.discard(update.path)
        log.log(_LOADED_LEVEL[first], "%s: loaded %d object(s)", update.path, len(result.objects))
        self._loaded.add(key)
        if result.objects:
            self._with_objects.add(update.path)
        else:
            self._with_objects.discard(update.path)
        return sink.replace_partition(key, result.objects, result.problems)

    def _record_parse(self, update: _Update, result: ParseResult) -> None:
        """Keeps a good parse for the parse cache; a failed one is parsed again next time (it
        keeps its last good objects only while turnout runs)."""
        if not update.cached:
            self._mark_cache_dirty()
        assert update.seen is not None
        if result.failed or update.seen.digest is None:
            self._parsed.pop(update.path, None)
        else:
            self._parsed[update.path] = CachedParse(update.seen.digest, result)

    def _forget(self, path: Path) -> None:
        if self._parsed.pop(path, None) is not None:
            self._mark_cache_dirty()
        self.stat_marks += 1
        self._stale.discard(path)
        self._seen.pop(path, None)
        self._by_abspath.pop(Path(os.path.abspath(path)), None)
        self._held.pop(path, None)
        self._with_objects.discard(path)

    def _holding(self, path: Path, result: ParseResult) -> bool:
        """Whether `result`, a file that had objects now yielding none, is held back for now:
        most likely a writer truncated the file and has not written it yet."""
        if result.failed or result.objects or path not in self._with_objects:
            return False
        if self._grace_s <= 0:
            return False
        now = time.monotonic()
        deadline = self._held.get(path)
        if deadline is None:
            log.info(
                "%s: no objects in it; its last objects stay for %gs unless content comes",
                path,
                self._grace_s,
            )
            self._held[path] = now + self._grace_s
            return True
        return now < deadline


class _StopFlag(asyncio.Event):
    """The stop event handed to `awatch`: set by the caller's event or by our own `set()`.

    `awatch` sets its stop event when its task is cancelled; this keeps that from setting the
    caller's event, which would read as "stop watching for good".
    """

    def __init__(self, outer: asyncio.Event) -> None:
        super().__init__()
        self._outer = outer

    def is_set(self) -> bool:
        return super().is_set() or self._outer.is_set()


def _interesting(change: Change, path: str) -> bool:
    """Drops events for editors' hidden swap and lock files, which would only cause idle rescans.
    Names starting with `..` stay: they are the ConfigMap volume's atomic swap."""
    name = os.path.basename(path)
    return not _hidden(name) or name.startswith("..")


def _nothing() -> None:
    return None


async def _call(on_change: OnChange) -> None:
    try:
        result = on_change()
        if inspect.isawaitable(result):
            await result
    except Exception:
        # A failing consumer must not stop the watcher: later changes still need loading.
        log.exception("file change callback failed")


def load_paths(paths: Iterable[Path], sink: PartitionSink) -> FileSource:
    """Convenience for one-shot commands (`check`, `explain`): loads once, no watching."""
    source = FileSource(tuple(paths), sink, watch=False)
    source.load_all()
    return source

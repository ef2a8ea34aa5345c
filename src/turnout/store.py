"""The store: every object turnout knows, as an immutable snapshot per change.

Sources own *partitions* (a file path, or a Kubernetes kind); each update replaces one partition
whole, so a file that stops parsing can keep its last good partition while the others change.
Dialects only ever see a `Snapshot`.
"""

from __future__ import annotations

import itertools
import operator
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.objects import KubeObject, ObjectRef


@dataclass(frozen=True, slots=True)
class SourceProblem:
    """A problem with input that is not tied to one valid object: a file that does not parse, an
    object without a name, an unknown kind. `check` prints these and `/status` lists them."""

    source: str
    line: int | None
    reason: str
    object: str | None = None  # "Kind ns/name" when the problem is about one object
    # "unreadable": a whole file could not be read or parsed (its last good objects stay);
    # "error": an object is rejected; "warning": e.g. a kind turnout does not read, ignored.
    severity: str = "error"

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        what = f"{self.object}: " if self.object else ""
        level = "warning" if self.severity == "warning" else "error"
        return f"{where}: {level}: {what}{self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "line": self.line,
            "severity": self.severity,
            "object": self.object,
            "reason": self.reason,
        }


_Key = tuple[str, str]
_Bucket = Mapping[_Key, KubeObject]
_NO_BUCKET: _Bucket = {}


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of all objects, indexed by (group, kind) and by namespace/name."""

    objects: tuple[KubeObject, ...] = ()
    problems: tuple[SourceProblem, ...] = ()
    _by_kind: Mapping[_Key, _Bucket] = field(default_factory=dict, repr=False, compare=False)
    # Each bucket's keys in order, made on the first `kind` call (a cache: the snapshot does
    # not change); a patched snapshot patches its base's lists for the buckets that changed.
    _order: dict[_Key, list[_Key]] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(objects: Iterable[KubeObject], problems: Iterable[SourceProblem] = ()) -> Snapshot:
        by_kind: dict[_Key, dict[_Key, KubeObject]] = {}
        dupes: list[SourceProblem] = []
        kept: list[KubeObject] = []
        for obj in objects:
            bucket = by_kind.setdefault((obj.group, obj.kind), {})
            key = (obj.namespace, obj.name)
            if key in bucket:
                first = bucket[key]
                dupes.append(
                    SourceProblem(
                        obj.origin.source,
                        obj.origin.line,
                        f"duplicate object; the one from {first.origin.source} is used",
                        str(obj.ref),
                    )
                )
                continue
            bucket[key] = obj
            kept.append(obj)
        return Snapshot(tuple(kept), (*problems, *dupes), by_kind)

    def kind(self, group: str, kind: str) -> Iterator[KubeObject]:
        """Objects of one kind, sorted by namespace/name so compiles are deterministic."""
        bucket = self._by_kind.get((group, kind))
        if not bucket:
            return iter(())
        return map(bucket.__getitem__, self.keys_of(group, kind))

    def keys_of(self, group: str, kind: str) -> Sequence[_Key]:
        """The (namespace, name)s of one kind's objects, sorted (do not modify)."""
        order = self._order.get((group, kind))
        if order is None:
            # Sorted once per snapshot (a race between threads sorts twice, same result).
            order = self._order[(group, kind)] = sorted(self._by_kind.get((group, kind), ()))
        return order

    def get(self, group: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        return self._by_kind.get((group, kind), _NO_BUCKET).get((namespace, name))

    def get_ref(self, ref: ObjectRef) -> KubeObject | None:
        return self._by_kind.get((ref.group, ref.kind), _NO_BUCKET).get((ref.namespace, ref.name))


def _same_objects(a: tuple[KubeObject, ...], b: tuple[KubeObject, ...]) -> bool:
    """Equal objects from the same places: `KubeObject` equality leaves the origin out, but a
    status names the file and line an object came from."""
    if a is b:
        return True
    return len(a) == len(b) and all(
        x is y or (x == y and x.origin == y.origin) for x, y in zip(a, b, strict=True)
    )


def same_content(a: Snapshot, b: Snapshot) -> bool:
    """Whether two snapshots hold the same objects (from the same places) and problems.
    Unchanged partitions share their objects, so this is mostly identity checks."""
    return a is b or (a.problems == b.problems and _same_objects(a.objects, b.objects))


# One object's change between two snapshots: (before, after); None where it is absent.
Change = tuple[KubeObject | None, KubeObject | None]


def changed_objects(old: Snapshot, new: Snapshot) -> tuple[Change, ...]:
    """The objects that differ between two snapshots, by kind and namespace/name. Unchanged
    partitions share their objects, so this is mostly identity checks; an object equal in
    content and origin counts as unchanged."""
    if old is new:
        return ()
    out: list[Change] = []
    for kind in old._by_kind.keys() | new._by_kind.keys():
        before = old._by_kind.get(kind, {})
        after = new._by_kind.get(kind, {})
        if before is after:
            continue
        for key in before.keys() | after.keys():
            change = (before.get(key), after.get(key))
            if not _same_change(change):
                out.append(change)
    return tuple(out)


_Partition = tuple[tuple[KubeObject, ...], tuple[SourceProblem, ...]]

# `Store.pending_kinds` entry for a change of a partition's problems.
PROBLEMS_CHANGED = ("", "")


# How many object changes, and how many of its last snapshots, the store remembers for
# `Store.changes` (the controller asks about the last compiled one and the newest).
LOG_SIZE = 10_000
KEPT_SNAPSHOTS = 4


def _partition_changes(
    old: tuple[KubeObject, ...], new: tuple[KubeObject, ...]
) -> list[Change] | None:
    """The objects added, removed or replaced (if only by an equal one) from `old` to `new`
    (one partition's content); None when either lists one object twice (then only a whole
    rebuild knows which wins)."""
    before = {o.ref: o for o in old}
    if len(before) != len(old):
        return None
    out: list[Change] = []
    seen: set[ObjectRef] = set()
    for obj in new:
        if obj.ref in seen:
            return None
        seen.add(obj.ref)
        was = before.pop(obj.ref, None)
        if was is not obj:
            # An equal object too: the snapshot keeps the partition's very objects.
            out.append((was, obj))
    out.extend((o, None) for o in before.values())
    return out


def _patched(
    base: Snapshot, changes: Iterable[Change], objects: tuple[KubeObject, ...]
) -> Snapshot | None:
    """`base` with `changes` applied, sharing every bucket no change touched (and its sorted
    keys); None when a change does not apply to what `base` shows (an object listed twice
    across partitions: which one wins is for `Snapshot.of` to decide)."""
    by_kind = dict(base._by_kind)
    copied: dict[_Key, dict[_Key, KubeObject]] = {}
    moved: dict[_Key, list[tuple[_Key, bool]]] = {}  # keys added (True) or removed, per kind
    for before, after in changes:
        obj = after if after is not None else before
        assert obj is not None
        kind, key = (obj.group, obj.kind), (obj.namespace, obj.name)
        bucket = copied.get(kind)
        if bucket is None:
            bucket = copied[kind] = dict(by_kind.get(kind, _NO_BUCKET))
            by_kind[kind] = bucket
        if bucket.get(key) is not before:
            return None
        if after is None:
            del bucket[key]
        else:
            bucket[key] = after
        if (before is None) != (after is None):
            moved.setdefault(kind, []).append((key, after is not None))
    # A copy first (one C call): a compile thread may be sorting another of base's buckets.
    order = dict(base._order)
    for kind, keys in moved.items():
        sorted_keys = order.pop(kind, None)
        if sorted_keys is not None and by_kind[kind]:
            order[kind] = _moved_keys(sorted_keys, keys)
    return Snapshot(objects, base.problems, by_kind, order)


def _moved_keys(order: list[_Key], moves: list[tuple[_Key, bool]]) -> list[_Key]:
    """A sorted key list with keys added and removed (in this order), by bisection."""
    out = list(order)
    for key, added in moves:
        if added:
            insort(out, key)
        else:
            del out[bisect_left(out, key)]
    return out


# Partition names per chunk of `_Chunks`: a chunk twice as long is split in two.
CHUNK = 256
_FIRST = operator.itemgetter(0)
_OBJECTS = operator.itemgetter(0)


class _Chunks:
    """The partition names in sorted order, in chunks, each with its partitions' objects
    joined: a partition added, removed or rewritten joins again only its chunk (not the
    30,000 partitions of 10,000 objects in files), and all objects are one C-speed join of
    the chunks' tuples."""

    def __init__(self) -> None:
        self._names: list[list[str]] = []
        self._joined: list[tuple[KubeObject, ...] | None] = []  # None: to join again

    def _chunk(self, name: str) -> int:
        """The chunk that holds `name`, or would: the last one starting at or before it."""
        return max(0, bisect_right(self._names, name, key=_FIRST) - 1)

    def put(self, name: str, *, new: bool) -> None:
        """Notes a partition written: `new`, one not there before."""
        if not self._names:
            self._names.append([name])
            self._joined.append(None)
            return
        c = self._chunk(name)
        self._joined[c] = None
        if not new:
            return
        chunk = self._names[c]
        insort(chunk, name)
        if len(chunk) > 2 * CHUNK:
            self._names[c : c + 1] = [chunk[:CHUNK], chunk[CHUNK:]]
            self._joined[c : c + 1] = [None, None]

    def remove(self, name: str) -> None:
        c = self._chunk(name)
        chunk = self._names[c]
        del chunk[bisect_left(chunk, name)]
        if chunk:
            self._joined[c] = None
        else:
            del self._names[c], self._joined[c]

    def names(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self._names)

    def objects(self, partitions: Mapping[str, _Partition]) -> tuple[KubeObject, ...]:
        joined = self._joined
        for c, objects in enumerate(joined):
            if objects is None:
                # All in C (no Python frame per partition): one file per object is common.
                contents = map(_OBJECTS, map(partitions.__getitem__, self._names[c]))
                joined[c] = tuple(itertools.chain.from_iterable(contents))
        return tuple(itertools.chain.from_iterable(joined))  # type: ignore[arg-type]


class Store:
    """Mutable holder of partitions; `snapshot()` gives the immutable view dialects compile.

    Every update returns whether the content changed: a source that delivers what the store
    already holds (an unchanged file, an informer's periodic resync) changes nothing.

    A change of a few objects among many is cheap: the next snapshot is the last one with
    those objects changed (only the buckets of their kinds are copied), and the store keeps a
    log of the objects changed, so `changes` tells what differs between two of its snapshots
    without comparing every object (the endpoints fast path asks)."""

    def __init__(self) -> None:
        self._partitions: dict[str, _Partition] = {}
        self._chunks = _Chunks()  # the partition names in order, with their objects joined
        self._snapshot: Snapshot | None = None
        self._pending: set[tuple[str, str]] = set()
        # Since the last snapshot built: the object changes, in order; None when only a whole
        # rebuild will do (a partition listing one object twice, or problems changed).
        self._unbuilt: list[Change] | None = []
        self._seq = 0  # object changes logged so far
        self._epoch = 0  # whole rebuilds so far: `changes` bridges no rebuild
        self._log: deque[tuple[int, Change]] = deque(maxlen=LOG_SIZE)
        self._built: dict[int, tuple[Snapshot, int, int]] = {}  # id -> (snapshot, seq, epoch)
        # Per partition written object by object (an informer's): where each ref is in its
        # tuple, so an upsert costs a dict lookup and one tuple copy in C, not a Python scan
        # (an initial list of 10,000 objects of one kind was quadratic).
        self._positions: dict[str, dict[ObjectRef, int]] = {}

    def _put(self, partition: str, content: _Partition) -> bool:
        old = self._partitions.get(partition)
        if old is not None and old[1] == content[1] and _same_objects(old[0], content[0]):
            return False
        self._positions.pop(partition, None)
        before = old or ((), ())
        self._record(_partition_changes(before[0], content[0]), before[1] != content[1])
        self._chunks.put(partition, new=old is None)
        self._partitions[partition] = content
        return True

    def _record(self, changes: list[Change] | None, problems_changed: bool) -> None:
        """Logs one partition's changes for the next snapshot and for `changes`."""
        self._snapshot = None
        if problems_changed:
            self._pending.add(PROBLEMS_CHANGED)
        if changes is None or problems_changed:
            self._unbuilt = None
            self._pending.add(PROBLEMS_CHANGED)
        for change in changes or ():
            obj = change[1] if change[1] is not None else change[0]
            assert obj is not None
            if not _same_change(change):
                self._pending.add((obj.group, obj.kind))
            self._seq += 1
            self._log.append((self._seq, change))
            if self._unbuilt is not None:
                self._unbuilt.append(change)

    def pending_kinds(self) -> frozenset[tuple[str, str]]:
        """The (group, kind)s of the objects changed since `clear_pending` (and
        `PROBLEMS_CHANGED` when a partition's problems changed): a cheap hint of what the next
        compile will see changed (the controller waits less for endpoint-only changes);
        `changes` says it exactly."""
        return frozenset(self._pending)

    def clear_pending(self) -> None:
        self._pending.clear()

    def replace_partition(
        self,
        partition: str,
        objects: Iterable[KubeObject],
        problems: Iterable[SourceProblem] = (),
    ) -> bool:
        return self._put(partition, (tuple(objects), tuple(problems)))

    def set_problems(self, partition: str, problems: Iterable[SourceProblem]) -> bool:
        """Replaces a partition's problems while keeping its last good objects."""
        objects, _ = self._partitions.get(partition, ((), ()))
        return self._put(partition, (objects, tuple(problems)))

    def remove_partition(self, partition: str) -> bool:
        old = self._partitions.pop(partition, None)
        self._positions.pop(partition, None)
        if old is None:
            return False
        self._chunks.remove(partition)
        self._record(_partition_changes(old[0], ()), bool(old[1]))
        return True

    def upsert(self, partition: str, obj: KubeObject) -> bool:
        """Adds `obj` to the partition, replacing the object of the same ref in place."""
        objects, problems = self._partitions.get(partition, ((), ()))
        positions = self._positions_of(partition, objects)
        if positions is None:  # a ref listed twice: the whole-partition path decides
            if any(o.ref == obj.ref for o in objects):
                kept = tuple(obj if o.ref == obj.ref else o for o in objects)
            else:
                kept = (*objects, obj)
            return self._put(partition, (kept, problems))
        at = positions.get(obj.ref)
        if at is None:
            was, kept = None, (*objects, obj)
            positions[obj.ref] = len(objects)
        else:
            was = objects[at]
            if _same_change((was, obj)):
                return False
            kept = (*objects[:at], obj, *objects[at + 1 :])
        self._record([(was, obj)], False)
        self._chunks.put(partition, new=partition not in self._partitions)
        self._partitions[partition] = (kept, problems)
        return True

    def _positions_of(
        self, partition: str, objects: tuple[KubeObject, ...]
    ) -> dict[ObjectRef, int] | None:
        positions = self._positions.get(partition)
        if positions is None:
            positions = {o.ref: i for i, o in enumerate(objects)}
            if len(positions) != len(objects):
                return None
            self._positions[partition] = positions
        return positions

    def delete(self, partition: str, ref: ObjectRef) -> bool:
        objects, problems = self._partitions.get(partition, ((), ()))
        kept = tuple(o for o in objects if o.ref != ref)
        if len(kept) == len(objects):
            return False
        return self._put(partition, (kept, problems))

    def partitions(self) -> list[str]:
        return sorted(self._partitions)

    def partition(self, name: str) -> tuple[tuple[KubeObject, ...], tuple[SourceProblem, ...]]:
        """One partition's objects and problems (empty when there is none of that name)."""
        return self._partitions.get(name, ((), ()))

    def snapshot(self) -> Snapshot:
        if self._snapshot is not None:
            return self._snapshot
        objects = self._objects()
        base = self._last_built()
        built = None
        if base is not None and self._unbuilt is not None:
            # Patching needs a base without duplicates: then its problems are the partitions'.
            built = _patched(base, self._unbuilt, objects)
        if built is None:
            parts = self._partitions
            problems = [p for k in self._chunks.names() for p in parts[k][1]]
            built = Snapshot.of(objects, problems)
            self._epoch += 1
        self._unbuilt = [] if len(built.objects) == len(objects) else None
        self._built = {k: v for k, v in self._built.items() if v[1] >= self._seq - LOG_SIZE} | {
            id(built): (built, self._seq, self._epoch)
        }
        if len(self._built) > KEPT_SNAPSHOTS:
            oldest = min(self._built, key=lambda k: self._built[k][1])
            del self._built[oldest]
        self._snapshot = built
        return built

    def _objects(self) -> tuple[KubeObject, ...]:
        """Every partition's objects, in partition order."""
        return self._chunks.objects(self._partitions)

    def _last_built(self) -> Snapshot | None:
        if not self._built:
            return None
        return max(self._built.values(), key=lambda v: (v[2], v[1]))[0]

    def changes(self, old: Snapshot, new: Snapshot) -> tuple[Change, ...] | None:
        """What differs from `old` to `new`, two snapshots of this store, per object (first
        state, last state), from the log; None when the log cannot tell (a snapshot not of
        this store or too old, a rebuild in between): ask `changed_objects`."""
        a, b = self._built.get(id(old)), self._built.get(id(new))
        if a is None or b is None or a[0] is not old or b[0] is not new or a[2] != b[2]:
            return None
        first = a[1]
        if first > b[1] or (self._log and first + 1 < self._log[0][0] and first < b[1]):
            return None
        # Newest first, stopping at `old`: the work is in the changes, not in the log's size.
        merged: dict[ObjectRef, list[KubeObject | None]] = {}
        for seq, (before, after) in reversed(self._log):
            if seq <= first:
                break
            if seq <= b[1]:
                obj = after if after is not None else before
                assert obj is not None
                merged.setdefault(obj.ref, [before, after])[0] = before
        return tuple((x, y) for x, y in merged.values() if not _same_change((x, y)))


def _same_change(change: Change) -> bool:
    """Whether a change leaves the object as it was (the same content from the same place)."""
    x, y = change
    return x is y or (x is not None and y is not None and _same_objects((x,), (y,)))

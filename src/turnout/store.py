"""The store: every object turnout knows, as an immutable snapshot per change.

Sources own *partitions* (a file path, or a Kubernetes kind); each update replaces one partition
whole, so a file that stops parsing can keep its last good partition while the others change.
Dialects only ever see a `Snapshot`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
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


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of all objects, indexed by (group, kind) and by namespace/name."""

    objects: tuple[KubeObject, ...] = ()
    problems: tuple[SourceProblem, ...] = ()
    _by_kind: Mapping[tuple[str, str], Mapping[tuple[str, str], KubeObject]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @staticmethod
    def of(objects: Iterable[KubeObject], problems: Iterable[SourceProblem] = ()) -> Snapshot:
        by_kind: dict[tuple[str, str], dict[tuple[str, str], KubeObject]] = {}
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
        bucket = self._by_kind.get((group, kind), {})
        for key in sorted(bucket):
            yield bucket[key]

    def get(self, group: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        return self._by_kind.get((group, kind), {}).get((namespace, name))

    def get_ref(self, ref: ObjectRef) -> KubeObject | None:
        return self.get(ref.group, ref.kind, ref.namespace, ref.name)


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
            a, b = before.get(key), after.get(key)
            if a is b or (a is not None and b is not None and _same_objects((a,), (b,))):
                continue
            out.append((a, b))
    return tuple(out)


_Partition = tuple[tuple[KubeObject, ...], tuple[SourceProblem, ...]]

# `Store.pending_kinds` entry for a change of a partition's problems.
PROBLEMS_CHANGED = ("", "")


def _touched_kinds(
    old: tuple[KubeObject, ...], new: tuple[KubeObject, ...]
) -> set[tuple[str, str]]:
    """The (group, kind)s of the objects added, removed or changed from `old` to `new`."""
    before = {o.ref: o for o in old}
    kinds: set[tuple[str, str]] = set()
    for obj in new:
        was = before.pop(obj.ref, None)
        if was is None or not _same_objects((was,), (obj,)):
            kinds.add((obj.group, obj.kind))
    kinds.update((o.group, o.kind) for o in before.values())
    return kinds


class Store:
    """Mutable holder of partitions; `snapshot()` gives the immutable view dialects compile.

    Every update returns whether the content changed: a source that delivers what the store
    already holds (an unchanged file, an informer's periodic resync) changes nothing."""

    def __init__(self) -> None:
        self._partitions: dict[str, _Partition] = {}
        self._snapshot: Snapshot | None = None
        self._pending: set[tuple[str, str]] = set()

    def _put(self, partition: str, content: _Partition) -> bool:
        old = self._partitions.get(partition)
        if old is not None and old[1] == content[1] and _same_objects(old[0], content[0]):
            return False
        before = old or ((), ())
        self._pending |= _touched_kinds(before[0], content[0])
        if before[1] != content[1]:
            self._pending.add(PROBLEMS_CHANGED)
        self._partitions[partition] = content
        self._snapshot = None
        return True

    def pending_kinds(self) -> frozenset[tuple[str, str]]:
        """The (group, kind)s of the objects changed since `clear_pending` (and
        `PROBLEMS_CHANGED` when a partition's problems changed): a cheap hint of what the next
        compile will see changed (the controller waits less for endpoint-only changes);
        `changed_objects` says it exactly."""
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
        if old is None:
            return False
        self._pending |= _touched_kinds(old[0], ())
        if old[1]:
            self._pending.add(PROBLEMS_CHANGED)
        self._snapshot = None
        return True

    def upsert(self, partition: str, obj: KubeObject) -> bool:
        """Adds `obj` to the partition, replacing the object of the same ref in place."""
        objects, problems = self._partitions.get(partition, ((), ()))
        if any(o.ref == obj.ref for o in objects):
            kept = tuple(obj if o.ref == obj.ref else o for o in objects)
        else:
            kept = (*objects, obj)
        return self._put(partition, (kept, problems))

    def delete(self, partition: str, ref: ObjectRef) -> bool:
        objects, problems = self._partitions.get(partition, ((), ()))
        kept = tuple(o for o in objects if o.ref != ref)
        if len(kept) == len(objects):
            return False
        return self._put(partition, (kept, problems))

    def partitions(self) -> list[str]:
        return sorted(self._partitions)

    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            objects: list[KubeObject] = []
            problems: list[SourceProblem] = []
            for key in sorted(self._partitions):
                objs, probs = self._partitions[key]
                objects.extend(objs)
                problems.extend(probs)
            self._snapshot = Snapshot.of(objects, problems)
        return self._snapshot

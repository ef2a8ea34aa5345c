"""What one compile keeps for the next, so that the next costs what its change touches.

The compile stays a pure function of (snapshot, options): a memo only ever holds results of pure
functions of objects that are still the very same objects (`is`), or of keys whose recorded inputs
did not change. A `CompileMemo` that was never used gives a full compile, and the equivalence test
(`tests/unit/test_incremental_equivalence.py`) holds a carried memo to a fresh one on random
change sequences.

- `CompileMemo.begin` is called once per compile with the new snapshot and options: it works out
  the `Delta` (which objects changed since the last compile; everything when the options changed
  or there was none) and ages every stage's `IdentityMemo`.
- `CompileMemo.stage(name, kind)` is a stage's own state across compiles (created empty, dropped
  whenever the delta is everything).
- `IdentityMemo` maps objects, by identity, to what a pure function made of them; an entry not
  used during one compile is forgotten at the next, so the memo never outgrows two compiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, filterfalse, repeat
from operator import is_not
from typing import Any, Generic, TypeVar

from turnout.compile_inputs import CompileOptions
from turnout.objects import KubeObject, ObjectRef
from turnout.store import Change, Snapshot, changed_objects

K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Delta:
    """What changed since the compile before: the objects added, removed or replaced, and their
    (group, kind)s. `everything`: nothing may be reused (first compile, other options)."""

    refs: frozenset[ObjectRef] = frozenset()
    kinds: frozenset[tuple[str, str]] = frozenset()
    everything: bool = True

    @staticmethod
    def of(changes: Iterable[Change]) -> Delta:
        refs: set[ObjectRef] = set()
        for before, after in changes:
            for obj in (before, after):
                if obj is not None:
                    refs.add(obj.ref)
        return Delta(frozenset(refs), frozenset((r.group, r.kind) for r in refs), False)

    def of_kind(self, group: str, kind: str) -> frozenset[ObjectRef]:
        """The changed objects of one (group, kind) (meaningless for everything)."""
        return frozenset(r for r in self.refs if r.group == group and r.kind == kind)

    def touches(self, kinds: Iterable[tuple[str, str]]) -> bool:
        """Whether an object of one of these (group, kind)s changed (always, for everything)."""
        return self.everything or not self.kinds.isdisjoint(kinds)


class IdentityMemo(Generic[K, V]):
    """Values made by a pure function of one key object, looked up by the object's identity.

    Two generations: `age()` (once per compile) forgets what the compile before did not use.
    The key object is kept with its value, so an `id` reused by a new object never matches."""

    __slots__ = ("_current", "_previous")

    def __init__(self) -> None:
        self._current: dict[int, tuple[K, V]] = {}
        self._previous: dict[int, tuple[K, V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._current.get(id(key))
        if entry is None:
            entry = self._previous.pop(id(key), None)
            if entry is None or entry[0] is not key:
                return None
            self._current[id(key)] = entry
        elif entry[0] is not key:
            return None
        return entry[1]

    def put(self, key: K, value: V) -> V:
        self._current[id(key)] = (key, value)
        return value

    def discard(self, key: K) -> None:
        """Forgets `key`'s value: for a stage that patches its last result without `age()`ing,
        so a piece it dropped is not held until the next full pass."""
        for generation in (self._current, self._previous):
            entry = generation.get(id(key))
            if entry is not None and entry[0] is key:
                del generation[id(key)]

    def age(self) -> None:
        self._previous, self._current = self._current, {}

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)


class IdentityCache(Generic[K, V]):
    """`function`, kept by the identity of its one argument across compiles: for a pure
    function of an immutable object that equal inputs share (the files source builds equal
    mappings once, a dialect equal matches once). At most `limit` entries, all forgotten when
    full; the argument is held with its value, so an `id` reused by a new object never matches."""

    __slots__ = ("_entries", "_function", "_limit")

    def __init__(self, function: Callable[[K], V], limit: int = 4096) -> None:
        self._function = function
        self._limit = limit
        self._entries: dict[int, tuple[K, V]] = {}

    def __call__(self, key: K) -> V:
        hit = self._entries.get(id(key))
        if hit is not None and hit[0] is key:
            return hit[1]
        value = self._function(key)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[id(key)] = (key, value)
        return value


class CompileMemo:
    """A compile's memory of the compile before; see the module docstring."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._options: CompileOptions | None = None
        self._stages: dict[str, Any] = {}
        self.delta = Delta()

    def begin(
        self,
        snapshot: Snapshot,
        options: CompileOptions,
        changes: Iterable[Change] | None = None,
    ) -> Delta:
        """Starts a compile of `snapshot` with `options`: `changes` since the last compile's
        snapshot when the caller knows them (the store's log), else they are worked out."""
        old, self._snapshot = self._snapshot, snapshot
        if old is None or self._options != options:
            self.delta = Delta()
            self._stages.clear()
        else:
            self.delta = Delta.of(changed_objects(old, snapshot) if changes is None else changes)
        self._options = options
        for state in self._stages.values():
            if isinstance(state, IdentityMemo):
                state.age()
        return self.delta

    def stage(self, name: str, kind: type[S]) -> S:
        """The state stage `name` keeps across compiles: a `kind()` made on first use."""
        state = self._stages.get(name)
        if state is None:
            state = self._stages[name] = kind()
        assert isinstance(state, kind)
        return state


def same_objects(a: Iterable[KubeObject | None], b: Iterable[KubeObject | None]) -> bool:
    """Whether two sequences hold the very same objects (identity), in the same order."""
    a, b = tuple(a), tuple(b)
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def replaced_keys(old: Mapping[K, object], new: Mapping[K, object]) -> set[K]:
    """The keys whose value is not the very same object in both mappings (added, removed or
    replaced): one dict pass at C speed where both share most values, so that a stage patches
    its last result for these keys instead of walking every piece."""
    if old is new:
        return set()
    if len(old) == len(new) and old.keys() == new.keys():
        # The common case, all in C: the same keys, values compared by identity.
        return set(compress(new.keys(), map(is_not, map(old.__getitem__, new), new.values())))
    # A key added or removed: each mapping's keys looked up once in the other (a tuple key's
    # hash is not cached: no temporary sets of every key).
    looked_up = map(old.get, new, repeat(_MISSING))
    changed = set(compress(new, map(is_not, looked_up, new.values())))
    changed.update(filterfalse(new.__contains__, old))
    return changed


def replaced_places(old: Sequence[object], new: Sequence[object]) -> list[int]:
    """The places where two sequences of one length do not hold the very same object (one
    pass at C speed)."""
    return list(compress(range(len(new)), map(is_not, old, new)))


_MISSING = object()

"""The Source protocol: how objects get from the outside world (files, a Kubernetes API server)
into the store.

A source lists everything once, says so (`SourceSink.synced`), then feeds changes until it is
cancelled. It writes through a `SourceSink`, either a whole partition at a time (the files source:
one partition per file, so a file that stops parsing keeps its last good objects) or one object
at a time (a Kubernetes informer: `upsert` and `delete` per object, in a partition per kind).
Sources know nothing of dialects: they deliver objects, the compile gives them meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from turnout.objects import KubeObject, ObjectRef
from turnout.store import SourceProblem, Store


class PartitionSink(Protocol):
    """Where whole partitions go. Each method returns whether the content changed."""

    def replace_partition(
        self,
        partition: str,
        objects: Iterable[KubeObject],
        problems: Iterable[SourceProblem] = (),
    ) -> bool: ...

    def set_problems(self, partition: str, problems: Iterable[SourceProblem]) -> bool:
        """Replaces a partition's problems while keeping its last good objects."""
        ...

    def remove_partition(self, partition: str) -> bool: ...


class SourceSink(PartitionSink, Protocol):
    """What a running source writes to: partitions, single objects, and `synced`."""

    def upsert(self, partition: str, obj: KubeObject) -> bool: ...

    def delete(self, partition: str, ref: ObjectRef) -> bool: ...

    def synced(self) -> None:
        """The initial list is complete: everything the source had when it started is in."""
        ...


class Source(Protocol):
    """A source of objects. `name` says which one the controller is waiting for."""

    name: str

    async def run(self, sink: SourceSink) -> None:
        """Lists everything into `sink`, calls `sink.synced()`, then writes changes until
        cancelled (or returns, when it does not watch). Run again after a failure, it lists
        everything again and calls `synced()` again."""
        ...

    async def reload(self) -> None:
        """Lists everything again now (SIGHUP): for sources whose change feed can miss changes;
        a no-op for the others."""
        ...


class StoreSink:
    """A `SourceSink` that writes one source's objects into a `Store`, calling `on_change` when
    the store's content changed and `on_synced` when the source finished its initial list."""

    def __init__(
        self, store: Store, on_change: Callable[[], None], on_synced: Callable[[], None]
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._on_synced = on_synced

    def _changed(self, changed: bool) -> bool:
        if changed:
            self._on_change()
        return changed

    def replace_partition(
        self,
        partition: str,
        objects: Iterable[KubeObject],
        problems: Iterable[SourceProblem] = (),
    ) -> bool:
        return self._changed(self._store.replace_partition(partition, objects, problems))

    def set_problems(self, partition: str, problems: Iterable[SourceProblem]) -> bool:
        return self._changed(self._store.set_problems(partition, problems))

    def remove_partition(self, partition: str) -> bool:
        return self._changed(self._store.remove_partition(partition))

    def upsert(self, partition: str, obj: KubeObject) -> bool:
        return self._changed(self._store.upsert(partition, obj))

    def delete(self, partition: str, ref: ObjectRef) -> bool:
        return self._changed(self._store.delete(partition, ref))

    def synced(self) -> None:
        self._on_synced()

"""The Source protocol's plumbing: the store reports real changes only, `StoreSink` passes them
on, and the files source lists, says it is synced, then watches."""

from __future__ import annotations

import asyncio
from pathlib import Path

from turnout.objects import KubeObject, ObjectRef, Origin, freeze
from turnout.sources.base import Source, StoreSink
from turnout.sources.files import FileSource, partition_key
from turnout.store import Store

SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: app, namespace: web}
spec: {ports: [{port: 80}]}
"""


def _service(name: str, port: int = 80, line: int = 1) -> KubeObject:
    raw = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "web"},
        "spec": {"ports": [{"port": port}]},
    }
    return KubeObject("v1", "Service", "web", name, freeze(raw), Origin("test.yaml", line))


def _names(store: Store) -> list[str]:
    return [o.name for o in store.snapshot().objects]


def test_store_updates_say_whether_the_content_changed() -> None:
    store = Store()
    assert store.replace_partition("p", [_service("a")])
    assert not store.replace_partition("p", [_service("a")])  # equal, from the same place
    assert store.replace_partition("p", [_service("a", line=3)])  # moved: its status says where
    assert store.upsert("p", _service("b"))
    assert store.upsert("p", _service("a", port=81, line=3))  # replaced in place
    assert not store.upsert("p", _service("a", port=81, line=3))
    assert _names(store) == ["a", "b"]
    assert store.delete("p", ObjectRef("", "Service", "web", "a"))
    assert not store.delete("p", ObjectRef("", "Service", "web", "a"))
    assert _names(store) == ["b"]
    assert store.remove_partition("p") and not store.remove_partition("p")


def test_store_sink_reports_changes_and_sync_of_its_source() -> None:
    store = Store()
    events: list[str] = []
    sink = StoreSink(store, lambda: events.append("change"), lambda: events.append("synced"))
    sink.replace_partition("p", [_service("a")])
    sink.replace_partition("p", [_service("a")])
    sink.set_problems("p", ())
    sink.synced()
    sink.upsert("p", _service("b"))
    assert events == ["change", "synced", "change"]
    assert _names(store) == ["a", "b"]


async def test_file_source_lists_then_says_synced_and_stops_when_not_watching(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.yaml").write_text(SERVICE)
    store = Store()
    events: list[str] = []

    def synced() -> None:
        events.append(f"synced with {_names(store)}")

    source: Source = FileSource([tmp_path], watch=False)
    await asyncio.wait_for(source.run(StoreSink(store, lambda: events.append("change"), synced)), 5)
    assert events == ["change", "synced with ['app']"]
    assert store.partitions() == [partition_key(tmp_path / "a.yaml")]


async def test_file_source_watches_after_it_is_synced(tmp_path: Path) -> None:
    store = Store()
    synced = asyncio.Event()
    source = FileSource([tmp_path], watch=True, debounce_ms=50)
    task = asyncio.create_task(source.run(StoreSink(store, lambda: None, synced.set)))
    try:
        await asyncio.wait_for(synced.wait(), 5)
        assert _names(store) == []
        await asyncio.sleep(0.2)  # the watcher armed
        (tmp_path / "a.yaml").write_text(SERVICE)
        async with asyncio.timeout(5):
            while _names(store) != ["app"]:
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

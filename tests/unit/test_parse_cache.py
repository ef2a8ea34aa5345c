"""The files source's parse cache: a restart gets the very objects a parse would give, without
parsing unchanged files; a stale, corrupt or foreign cache is ignored with a log line."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from turnout.sources import files, parse_cache
from turnout.sources.base import StoreSink
from turnout.sources.files import FileSource
from turnout.sources.parse_cache import ParseCache, fingerprint
from turnout.store import Store

SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: team-a}
spec:
  ports: [{port: 80, name: http, appProtocol: h2c}]
  externalName: null
  publishNotReadyAddresses: true
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 10800}}
  ratio: 1.5
"""

MIXED = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Service, metadata: {name: listed}, spec: {ports: [{port: 8080}]}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm}, data: {"on": "yes", n: "1"}}
---
just: a mapping
---
apiVersion: v1
kind: Service
metadata: {name: anchored}
spec: &spec {ports: [{port: 1}], selector: {app: x}}
other: *spec
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def tree(root: Path) -> Path:
    objects = root / "objects"
    write(objects / "a.yaml", SERVICE % "a")
    write(objects / "b.yaml", SERVICE % "b")
    write(objects / "mixed.yaml", MIXED)
    write(objects / "c.json", '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c"}}')
    return objects


def state(store: Store) -> list[tuple[Any, ...]]:
    """Everything a load produced, types included (repr tells True from 1 and 1.0 from 1)."""
    snapshot = store.snapshot()
    objs = [(repr(o), o.origin, o.ref) for o in snapshot.objects]
    return [*objs, *((repr(p),) for p in snapshot.problems)]


def load(objects: Path, cache: ParseCache | None) -> tuple[Store, FileSource]:
    store = Store()
    source = FileSource([objects], store, watch=False, parse_cache=cache)
    source.load_all()
    return store, source


def counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parsed: list[str] = []
    real = files._parse

    def counted(data: bytes, source: str, shared: dict[Any, Any] | None = None) -> Any:
        parsed.append(Path(source).name)
        return real(data, source, shared)

    monkeypatch.setattr(files, "_parse", counted)
    return parsed


def test_restart_gets_the_same_objects_without_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = tree(tmp_path)
    cache = ParseCache(tmp_path / "parse-cache")
    fresh, source = load(objects, cache)
    source.save_cache()
    parsed = counting_parses(monkeypatch)
    warm, _ = load(objects, ParseCache(tmp_path / "parse-cache"))
    assert parsed == []
    assert state(warm) == state(fresh)
    assert len(warm.snapshot().objects) == 6
    assert any("not a Kubernetes object" in p.reason for p in warm.snapshot().problems)


def test_a_cache_written_in_chunks_reads_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parse_cache, "_CHUNK_FILES", 2)
    objects = tree(tmp_path)
    for i in range(5):
        write(objects / f"more-{i}.yaml", SERVICE % f"more-{i}")
    fresh, source = load(objects, ParseCache(tmp_path / "parse-cache"))
    source.save_cache()
    parsed = counting_parses(monkeypatch)
    warm, _ = load(objects, ParseCache(tmp_path / "parse-cache"))
    assert parsed == []
    assert state(warm) == state(fresh)


def test_a_changed_file_is_parsed_again_and_the_others_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = tree(tmp_path)
    _, source = load(objects, ParseCache(tmp_path / "parse-cache"))
    source.save_cache()
    write(objects / "b.yaml", (SERVICE % "b").replace("port: 80", "port: 81"))
    (objects / "c.json").unlink()
    parsed = counting_parses(monkeypatch)
    warm, _ = load(objects, ParseCache(tmp_path / "parse-cache"))
    assert parsed == ["b.yaml"]
    monkeypatch.undo()
    assert state(warm) == state(load(objects, None)[0])
    b = [o for o in warm.snapshot().objects if o.name == "b"]
    assert b[0].raw["spec"]["ports"][0]["port"] == 81


def test_a_file_that_fails_to_parse_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = tree(tmp_path)
    write(objects / "bad.yaml", "kind: [unclosed\n")
    _, source = load(objects, ParseCache(tmp_path / "parse-cache"))
    source.save_cache()
    parsed = counting_parses(monkeypatch)
    warm, _ = load(objects, ParseCache(tmp_path / "parse-cache"))
    assert parsed == ["bad.yaml"]
    assert any(p.severity == "unreadable" for p in warm.snapshot().problems)


@pytest.mark.parametrize(
    "damage",
    ["flip", "truncate", "garbage", "empty", "fingerprint", "foreign class"],
)
def test_a_damaged_or_foreign_cache_is_ignored_with_a_log_line(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    objects = tree(tmp_path)
    path = tmp_path / "parse-cache"
    fresh, source = load(objects, ParseCache(path))
    source.save_cache()
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-10] ^= 0x01
    elif damage == "truncate":
        del data[len(data) // 2 :]
    elif damage == "garbage":
        data = bytearray(os.urandom(200))
    elif damage == "empty":
        data = bytearray()
    elif damage == "fingerprint":
        data[30] ^= 0x01  # inside the fingerprint, right after the magic line
    else:  # loading it would call Path.touch: a cache can name no callable
        data = bytearray(forged(data, pickle.dumps(Touch(tmp_path / "touched"), protocol=5)))
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="turnout.sources.parse_cache"):
        warm, _ = load(objects, ParseCache(path))
    assert state(warm) == state(fresh)
    assert "parse cache" in caplog.text and "ignored" in caplog.text
    assert not (tmp_path / "touched").exists()


class Touch:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return Path.touch, (self.path,)


def forged(data: bytearray, payload: bytes) -> bytes:
    """A cache with a valid header and checksum around `payload`."""
    head = len(b"turnout parse cache\n")
    return bytes(data[:head]) + fingerprint() + hashlib.sha256(payload).digest() + payload


def test_a_missing_cache_is_silent_and_an_unwritable_one_is_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    objects = tree(tmp_path)
    with caplog.at_level(logging.WARNING, logger="turnout.sources.parse_cache"):
        _, source = load(objects, ParseCache(tmp_path / "parse-cache"))
    assert "parse cache" not in caplog.text
    unwritable = ParseCache(tmp_path / "no-such-dir" / "parse-cache")
    _, source = load(objects, unwritable)
    with caplog.at_level(logging.WARNING):
        source.save_cache()
    assert "not written" in caplog.text


async def test_serving_writes_the_cache_when_the_source_stops(tmp_path: Path) -> None:
    objects = tree(tmp_path)
    path = tmp_path / "parse-cache"
    store = Store()
    synced = asyncio.Event()
    source = FileSource([objects], watch=True, parse_cache=ParseCache(path))
    task = asyncio.create_task(source.run(StoreSink(store, lambda: None, synced.set)))
    await asyncio.wait_for(synced.wait(), 5)
    assert not path.exists()  # written a while after the load, not in its way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(ParseCache(path).load()) == 4


async def test_a_change_is_written_a_while_later_and_a_static_load_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "CACHE_SAVE_DELAY_S", 0.2)
    objects = tree(tmp_path)
    path = tmp_path / "parse-cache"
    async with watching(objects, path):
        await until(lambda: path.exists())
        write(objects / "d.yaml", SERVICE % "d")
        await until(lambda: "d.yaml" in str(ParseCache(path).load().keys()))
    static = tmp_path / "static-cache"
    source = FileSource([objects], watch=False, parse_cache=ParseCache(static))
    await source.run(StoreSink(Store(), lambda: None, lambda: None))
    assert len(ParseCache(static).load()) == 5


async def test_the_cache_waits_for_the_files_to_be_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing the cache costs CPU a compile would share: while changes keep coming it waits,
    and it is written once they stopped for the delay."""
    monkeypatch.setattr(files, "CACHE_SAVE_DELAY_S", 0.4)
    objects = tree(tmp_path)
    path = tmp_path / "parse-cache"
    async with watching(objects, path):
        await until(lambda: path.exists())
        path.unlink()
        for i in range(8):  # a change every 0.15 s for 1.2 s: never 0.4 s of quiet
            write(objects / f"busy-{i}.yaml", SERVICE % f"busy-{i}")
            await asyncio.sleep(0.15)
            assert not path.exists(), f"written during the burst, after change {i}"
        await until(lambda: path.exists())
        assert "busy-7.yaml" in str(ParseCache(path).load().keys())


@contextlib.asynccontextmanager
async def watching(objects: Path, cache: Path) -> AsyncIterator[None]:
    """A watching files source over `objects` with its parse cache at `cache`, running."""
    source = FileSource([objects], watch=True, parse_cache=ParseCache(cache))
    task = asyncio.create_task(source.run(StoreSink(Store(), lambda: None, lambda: None)))
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from turnout.sources.base import StoreSink
from turnout.sources.files import FileSource, discover, load_file
from turnout.store import Store


def svc(name: str, namespace: str | None = None, port: int = 80) -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return (
        f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}{ns}\n"
        f"spec:\n  ports:\n  - port: {port}\n"
    )


def names(store: Store) -> list[str]:
    return [f"{o.namespace}/{o.name}" for o in store.snapshot().kind("", "Service")]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- discovery ---------------------------------------------------------------------------------


def test_discover_recursive_sorted_only_yaml_and_json(tmp_path: Path) -> None:
    for rel in [
        "b.yaml",
        "a.yml",
        "c.json",
        "sub/d.yaml",
        "sub/deeper/e.YAML",
        "readme.md",
        "f.txt",
    ]:
        write(tmp_path / rel, "")
    found = discover([tmp_path])
    assert found == sorted(found)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "a.yml",
        "b.yaml",
        "c.json",
        "sub/d.yaml",
        "sub/deeper/e.YAML",
    ]


def test_discover_skips_hidden_files_and_directories(tmp_path: Path) -> None:
    write(tmp_path / "keep.yaml", "")
    write(tmp_path / ".keep.yaml.swp", "")  # vim
    write(tmp_path / ".hidden.yaml", "")
    write(tmp_path / ".git/config.yaml", "")
    write(tmp_path / "..2024_01_01_00_00_00.1/routes.yaml", "")  # a ConfigMap volume's data dir
    write(tmp_path / "keep.yaml~", "")  # emacs backup
    assert discover([tmp_path]) == [tmp_path / "keep.yaml"]


def test_discover_reads_files_given_by_name_and_skips_missing_paths(tmp_path: Path) -> None:
    named = write(tmp_path / "routes.conf", "")
    inside = write(tmp_path / "d/x.yaml", "")
    found = discover([named, tmp_path / "d", tmp_path / "missing", inside])
    assert found == sorted({named, inside})


def test_discover_follows_symlinks_without_looping(tmp_path: Path) -> None:
    real = write(tmp_path / "real/a.yaml", "")
    (tmp_path / "root").mkdir()
    (tmp_path / "root/link.yaml").symlink_to(real)
    (tmp_path / "root/linkdir").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "root/loop").symlink_to(tmp_path / "root", target_is_directory=True)
    (tmp_path / "root/dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    found = discover([tmp_path / "root"])
    assert tmp_path / "root/link.yaml" in found
    assert tmp_path / "root/linkdir/a.yaml" in found
    assert all("dangling" not in p.name for p in found)


# --- loading -----------------------------------------------------------------------------------


def test_load_file_multi_document_and_list(tmp_path: Path) -> None:
    path = write(
        tmp_path / "all.yaml",
        svc("one", "team-a")
        + "---\n"
        + svc("two")
        + "---\n"
        + "apiVersion: v1\nkind: List\nitems:\n"
        + "- apiVersion: v1\n  kind: Service\n  metadata: {name: three}\n"
        + "- apiVersion: v1\n  kind: Service\n  metadata: {name: four, namespace: b}\n",
    )
    result = load_file(path)
    assert not result.failed
    assert [(o.namespace, o.name) for o in result.objects] == [
        ("team-a", "one"),
        ("default", "two"),
        ("default", "three"),
        ("b", "four"),
    ]
    assert result.objects[1].origin.source == str(path)


def test_load_file_json(tmp_path: Path) -> None:
    path = write(
        tmp_path / "s.json", '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "j"}}'
    )
    assert [o.name for o in load_file(path).objects] == ["j"]


def test_load_file_invalid_utf8_is_a_problem_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"apiVersion: v1\nkind: Service\nmetadata:\n  name: caf\xe9\n")
    result = load_file(path)
    assert result.failed
    [problem] = result.problems
    assert (problem.source, problem.line) == (str(path), 4)
    assert "UTF-8" in problem.reason


def test_load_file_unreadable_is_a_problem(tmp_path: Path) -> None:
    result = load_file(tmp_path / "gone.yaml")
    assert result.failed
    assert result.problems[0].source == str(tmp_path / "gone.yaml")
    assert "cannot read" in result.problems[0].reason


def test_load_file_permission_denied_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "secret.yaml", svc("s"))
    real_open = os.open

    # Root (as in CI) reads files whatever their mode, so the denial is simulated at the OS call
    # (the source opens the file to bound its read by --max-file-bytes).
    def deny(target: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(target) == path:
            raise PermissionError(13, "Permission denied", str(target))
        return real_open(target, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    result = load_file(path)
    assert result.failed
    assert "ermission" in result.problems[0].reason


def test_load_all_one_partition_per_file_namespace_default(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "sub/b.yaml", svc("b", "team-b"))
    store = Store()
    FileSource([tmp_path], store).load_all()
    assert names(store) == ["default/a", "team-b/b"]
    assert store.partitions() == [f"file:{tmp_path / 'a.yaml'}", f"file:{tmp_path / 'sub/b.yaml'}"]


def test_bad_file_keeps_last_good_objects_and_reports_path_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "other.yaml", svc("other"))
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()

    write(good, svc("a") + "---\nkind: Service\n  bad: [indent\n")
    with caplog.at_level(logging.WARNING, logger="turnout.sources.files"):
        source.load_all()
    snap = store.snapshot()
    assert names(store) == ["default/a", "default/other"]
    [problem] = snap.problems
    assert problem.source == str(good)
    assert problem.line is not None and problem.line >= 8
    assert str(good) in caplog.text

    write(good, svc("a2"))
    source.load_all()
    assert names(store) == ["default/a2", "default/other"]
    assert store.snapshot().problems == ()


def test_file_that_never_parsed_reports_without_objects(tmp_path: Path) -> None:
    write(tmp_path / "bad.yaml", "key: [unclosed\n")
    write(tmp_path / "ok.yaml", svc("ok"))
    store = Store()
    FileSource([tmp_path], store).load_all()
    assert names(store) == ["default/ok"]
    assert [p.source for p in store.snapshot().problems] == [str(tmp_path / "bad.yaml")]


def test_per_document_problems_do_not_hide_the_good_documents(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", svc("ok") + "---\napiVersion: v1\nkind: Service\nmetadata: {}\n")
    store = Store()
    FileSource([tmp_path], store).load_all()
    assert names(store) == ["default/ok"]
    [problem] = store.snapshot().problems
    assert problem.line == 9


def test_deleted_file_removes_its_objects_only(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "b.yaml", svc("b"))
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()
    a.unlink()
    source.load_all()
    assert names(store) == ["default/b"]
    assert store.partitions() == [f"file:{tmp_path / 'b.yaml'}"]


def test_missing_path_is_reported_and_clears_when_created(tmp_path: Path) -> None:
    path = tmp_path / "later.yaml"
    store = Store()
    source = FileSource([path], store)
    source.load_all()
    assert names(store) == []
    assert [(p.source, p.reason) for p in store.snapshot().problems] == [
        (str(path), "no such file or directory")
    ]
    write(path, svc("later"))
    source.load_all()
    assert names(store) == ["default/later"]
    assert store.snapshot().problems == ()


def test_configmap_style_symlink_swap(tmp_path: Path) -> None:
    """A Kubernetes ConfigMap volume: `routes.yaml -> ..data/routes.yaml`, `..data -> ..v1`."""
    mount = tmp_path / "config"
    write(mount / "..v1/routes.yaml", svc("v1"))
    (mount / "..data").symlink_to("..v1")
    (mount / "routes.yaml").symlink_to("..data/routes.yaml")
    store = Store()
    source = FileSource([mount], store)
    source.load_all()
    assert names(store) == ["default/v1"]

    # The kubelet's atomic update: a new data dir, a temporary link renamed over `..data`.
    write(mount / "..v2/routes.yaml", svc("v2"))
    (mount / "..data_tmp").symlink_to("..v2")
    (mount / "..data_tmp").rename(mount / "..data")
    for f in (mount / "..v1").iterdir():
        f.unlink()
    (mount / "..v1").rmdir()
    source.load_all()
    assert names(store) == ["default/v2"]


# --- watching ----------------------------------------------------------------------------------


@asynccontextmanager
async def watching(source: FileSource) -> AsyncIterator[asyncio.Queue[None]]:
    """Runs `source.watch` and yields a queue that gets an item per on_change call."""
    calls: asyncio.Queue[None] = asyncio.Queue()

    async def on_change() -> None:
        calls.put_nowait(None)

    stop = asyncio.Event()
    task = asyncio.create_task(source.watch(on_change, debounce_ms=50, stop_event=stop))
    # Let the watcher arm itself before the test touches files.
    await asyncio.sleep(0.2)
    try:
        yield calls
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)


async def until(condition: Callable[[], bool], calls: asyncio.Queue[None]) -> None:
    async with asyncio.timeout(2):
        while not condition():
            await calls.get()


@pytest.mark.timeout(5)
async def test_watch_picks_up_modification_and_new_file(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()
    async with watching(source) as calls:
        assert calls.empty()  # nothing changed since load_all

        write(a, svc("a-changed"))
        await until(lambda: names(store) == ["default/a-changed"], calls)

        write(tmp_path / "new.yml", svc("new"))
        await until(lambda: names(store) == ["default/a-changed", "default/new"], calls)

        # A new directory with a file in it: the watcher re-arms for the directory.
        write(tmp_path / "sub/deep.yaml", svc("deep"))
        await until(lambda: "default/deep" in names(store), calls)
        write(tmp_path / "sub/deep.yaml", svc("deeper"))
        await until(lambda: "default/deeper" in names(store), calls)


@pytest.mark.timeout(5)
async def test_watch_keeps_last_good_on_error_and_removes_on_delete(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    b = write(tmp_path / "b.yaml", svc("b"))
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()
    async with watching(source) as calls:
        write(a, "apiVersion: v1\nkind: [Service\n")
        await until(lambda: len(store.snapshot().problems) == 1, calls)
        assert names(store) == ["default/a", "default/b"]
        assert store.snapshot().problems[0].source == str(a)

        b.unlink()
        await until(lambda: names(store) == ["default/a"], calls)

        write(a, svc("fixed"))
        await until(lambda: names(store) == ["default/fixed"], calls)
        assert store.snapshot().problems == ()


@pytest.mark.timeout(5)
async def test_watch_calls_on_change_once_per_batch_and_not_for_ignored_files(
    tmp_path: Path,
) -> None:
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()
    async with watching(source) as calls:
        # Several files written together land in one batch (debounce), so one call.
        for i in range(3):
            write(tmp_path / f"f{i}.yaml", svc(f"s{i}"))
        await until(lambda: len(names(store)) == 3, calls)
        await asyncio.sleep(0.3)
        assert calls.empty()
        write(tmp_path / ".f0.yaml.swp", "swap")
        write(tmp_path / "notes.txt", "x")
        await asyncio.sleep(0.4)
        assert calls.empty()
    assert names(store) == ["default/s0", "default/s1", "default/s2"]


@pytest.mark.timeout(5)
async def test_watch_file_given_by_name_replaced_by_rename(tmp_path: Path) -> None:
    path = write(tmp_path / "routes.yaml", svc("one"))
    store = Store()
    source = FileSource([path], store)
    source.load_all()
    async with watching(source) as calls:
        # What many editors do on save: write a temporary file, rename it over the original.
        tmp = write(tmp_path / "routes.yaml.tmp", svc("two"))
        tmp.replace(path)
        await until(lambda: names(store) == ["default/two"], calls)


@pytest.mark.timeout(5)
async def test_watch_configmap_swap(tmp_path: Path) -> None:
    mount = tmp_path / "config"
    write(mount / "..v1/routes.yaml", svc("v1"))
    (mount / "..data").symlink_to("..v1")
    (mount / "routes.yaml").symlink_to("..data/routes.yaml")
    store = Store()
    source = FileSource([mount], store)
    source.load_all()
    async with watching(source) as calls:
        write(mount / "..v2/routes.yaml", svc("v2"))
        (mount / "..data_tmp").symlink_to("..v2")
        (mount / "..data_tmp").rename(mount / "..data")
        await until(lambda: names(store) == ["default/v2"], calls)


@pytest.mark.timeout(5)
async def test_watch_stops_on_cancel_without_setting_the_stop_event(tmp_path: Path) -> None:
    store = Store()
    source = FileSource([tmp_path], store)
    stop = asyncio.Event()
    task = asyncio.create_task(source.watch(lambda: None, stop_event=stop))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    assert not stop.is_set()


@pytest.mark.timeout(5)
async def test_watch_loads_when_started_without_load_all(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", svc("a"))
    store = Store()
    calls: list[None] = []
    stop = asyncio.Event()

    def on_change() -> None:
        calls.append(None)
        stop.set()

    await asyncio.wait_for(FileSource([tmp_path], store).watch(on_change, stop_event=stop), 2)
    assert names(store) == ["default/a"]
    assert calls == [None]


@pytest.mark.timeout(5)
async def test_load_all_during_watch_never_loses_newer_content(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", svc("v0"))
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()
    async with watching(source) as calls:
        for i in range(1, 20):
            write(a, svc(f"v{i}"))
            source.load_all()  # what a SIGHUP reload does while the watcher is busy
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert names(store) == ["default/v19"]
        write(a, svc("after"))
        await until(lambda: names(store) == ["default/after"], calls)


# --- files rewritten in place --------------------------------------------------------------------
# `open(path, "w")` empties a file before the writer writes it; a rescan may land in between.


@pytest.mark.parametrize(
    "empty", ["", "\n  \n", "# being rewritten\n---\n", "apiVersion: v1\nkind: Serv"]
)
def test_emptied_file_keeps_its_objects_for_the_grace_period_then_loses_them(
    tmp_path: Path, empty: str
) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "b.yaml", svc("b"))
    store = Store()
    source = FileSource([tmp_path], store, empty_file_grace_s=0.3)
    source.load_all()
    write(a, empty)
    source.load_all()
    assert names(store) == ["default/a", "default/b"]
    assert store.snapshot().problems == ()
    time.sleep(0.35)
    source.load_all()
    assert names(store) == ["default/b"]
    # The file stays a partition of its own; a file cut inside its first object says why.
    assert f"file:{a}" in store.partitions()
    cut = "kind" in empty
    assert [p.source for p in store.snapshot().problems] == ([str(a)] if cut else [])


def test_emptied_file_refilled_within_the_grace_period_never_loses_its_objects(
    tmp_path: Path,
) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    store = Store()
    source = FileSource([tmp_path], store, empty_file_grace_s=5)
    source.load_all()
    write(a, "")
    source.load_all()
    assert names(store) == ["default/a"]
    write(a, svc("a"))  # the same content again: nothing changes
    source.load_all()
    assert names(store) == ["default/a"]
    # Held no more: emptying it again starts a new grace period.
    write(a, "")
    source.load_all()
    assert names(store) == ["default/a"]
    write(a, svc("a2"))
    source.load_all()
    assert names(store) == ["default/a2"]


def test_emptied_file_is_applied_at_once_without_grace_or_without_a_watcher(
    tmp_path: Path,
) -> None:
    for source_of in (
        lambda store: FileSource([tmp_path], store, empty_file_grace_s=0),
        lambda store: FileSource([tmp_path], store, watch=False),
    ):
        a = write(tmp_path / "a.yaml", svc("a"))
        store = Store()
        source = source_of(store)
        source.load_all()
        write(a, "")
        source.load_all()
        assert names(store) == []


def test_file_that_starts_empty_is_loaded_without_objects(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "")
    store = Store()
    source = FileSource([tmp_path], store, empty_file_grace_s=5)
    source.load_all()
    assert names(store) == [] and store.partitions() == [f"file:{a}"]
    write(a, svc("a"))
    source.load_all()
    assert names(store) == ["default/a"]


def test_truncated_file_that_no_longer_parses_keeps_its_last_good_objects(
    tmp_path: Path,
) -> None:
    text = "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: {app: a}}\n"
    a = write(tmp_path / "a.yaml", text)
    store = Store()
    source = FileSource([tmp_path], store, empty_file_grace_s=0.1)
    source.load_all()
    write(a, text[: text.index("labels") + 10])  # cut inside a flow mapping
    source.load_all()
    time.sleep(0.15)
    source.load_all()  # no grace period for a file that does not parse: it keeps them
    assert names(store) == ["default/a"]
    [problem] = store.snapshot().problems
    assert problem.source == str(a) and problem.severity == "unreadable"


def test_deleted_file_loses_its_objects_at_once_whatever_the_grace(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    store = Store()
    source = FileSource([tmp_path], store, empty_file_grace_s=60)
    source.load_all()
    write(a, "")
    source.load_all()  # held
    a.unlink()
    source.load_all()
    assert names(store) == [] and store.partitions() == []


@asynccontextmanager
async def running(source: FileSource, store: Store) -> AsyncIterator[list[list[str]]]:
    """Runs `source` as serve does and yields the Service names of every store change."""
    seen: list[list[str]] = []
    synced = asyncio.Event()
    sink = StoreSink(store, lambda: seen.append(names(store)), synced.set)
    task = asyncio.create_task(source.run(sink))
    try:
        await asyncio.wait_for(synced.wait(), 2)
        await asyncio.sleep(0.2)  # the watcher armed
        seen.clear()
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def settled(condition: Callable[[], bool], timeout: float = 3) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


@pytest.mark.timeout(10)
async def test_watch_in_place_rewrite_with_a_pause_never_removes_the_objects(
    tmp_path: Path,
) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "b.yaml", svc("b"))
    store = Store()
    source = FileSource([tmp_path], debounce_ms=20, empty_file_grace_s=2)
    async with running(source, store) as seen:
        with a.open("w") as f:
            f.flush()
            # The watcher sees the empty file meanwhile (with no grace the objects would go).
            await asyncio.sleep(0.5)
            f.write(svc("a2"))
        await settled(lambda: names(store) == ["default/a2", "default/b"])
        await asyncio.sleep(0.3)
        assert seen == [["default/a2", "default/b"]]


@pytest.mark.timeout(10)
async def test_watch_file_empty_for_longer_than_the_grace_period_loses_its_objects(
    tmp_path: Path,
) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "b.yaml", svc("b"))
    store = Store()
    source = FileSource([tmp_path], debounce_ms=20, empty_file_grace_s=0.5)
    async with running(source, store) as seen:
        loop = asyncio.get_running_loop()
        emptied = loop.time()
        write(a, "")
        # No further event comes: the end of the grace period alone removes them.
        await settled(lambda: names(store) == ["default/b"])
        assert 0.5 <= loop.time() - emptied < 1.5
        assert seen == [["default/b"]]


@pytest.mark.timeout(10)
async def test_watch_deleted_file_loses_its_objects_at_once(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", svc("a"))
    write(tmp_path / "b.yaml", svc("b"))
    store = Store()
    source = FileSource([tmp_path], debounce_ms=20, empty_file_grace_s=30)
    async with running(source, store) as seen:
        loop = asyncio.get_running_loop()
        deleted = loop.time()
        a.unlink()
        await settled(lambda: names(store) == ["default/b"])
        assert loop.time() - deleted < 1
        assert seen == [["default/b"]]


@pytest.mark.timeout(5)
async def test_watch_reads_only_the_loaded_files_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rewrite of loaded files (in place, or atomically through a temporary name) reads just
    # them: the tree is not listed again, which costs seconds at tens of thousands of files.
    for i in range(20):
        write(tmp_path / f"s{i}.yaml", svc(f"s{i}"))
    store = Store()
    source = FileSource([tmp_path], store)
    source.load_all()
    listed: list[None] = []
    real_discover = discover

    def counting(*args: Any, **kwargs: Any) -> list[Path]:
        listed.append(None)
        return real_discover(*args, **kwargs)

    async with watching(source) as calls:
        monkeypatch.setattr("turnout.sources.files.discover", counting)
        write(tmp_path / "s3.yaml", svc("s3-changed"))
        await until(lambda: "default/s3-changed" in names(store), calls)
        tmp = write(tmp_path / "s4.yaml.tmp", svc("s4-changed"))
        tmp.rename(tmp_path / "s4.yaml")
        await until(lambda: "default/s4-changed" in names(store), calls)
        (tmp_path / "s5.yaml").unlink()
        await until(lambda: "default/s5" not in names(store), calls)
        assert listed == []
        # A new file is found by listing the tree again.
        write(tmp_path / "new.yaml", svc("new"))
        await until(lambda: "default/new" in names(store), calls)
        assert listed
    assert len(names(store)) == 20

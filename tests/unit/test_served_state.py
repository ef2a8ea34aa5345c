"""The served state: a restart with unchanged files, code and flags programs Envoy from what the
last run served before its first compile is through; anything changed, or a damaged file, is the
normal cold start."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pickle
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.xds_client import DeltaClient, DeltaFakeEnvoy, until
from turnout.app import compile_options, default_dialects, default_sources, translate_options
from turnout.config import ServeConfig
from turnout.controller import Controller
from turnout.envoy import served_state
from turnout.envoy.served_state import (
    ServedKey,
    ServedState,
    ServedStateFile,
    canonical,
    environment_key,
    files_key,
)
from turnout.envoy.xds import Serialized
from turnout.sources import files
from turnout.sources.files import file_stats

PROXY = """\
apiVersion: v1
kind: Service
metadata: {name: app-%(i)d}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: app-%(i)d-x, labels: {kubernetes.io/service-name: app-%(i)d}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.0.0.%(i)d]}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: root-%(i)d}
spec:
  virtualhost: {fqdn: host%(i)d.example.com}
  routes: [{services: [{name: app-%(i)d, port: 80}]}]
"""


def write_tree(root: Path, n: int = 3) -> Path:
    objects = root / "objects"
    objects.mkdir()
    for i in range(1, n + 1):
        (objects / f"p{i}.yaml").write_text(PROXY % {"i": i})
    return objects


def touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


# -- the keys ------------------------------------------------------------------------------------


def test_the_files_key_follows_every_file_read_and_nothing_else(tmp_path: Path) -> None:
    objects = write_tree(tmp_path)

    def key() -> bytes:
        return files_key(file_stats((objects,)))

    first = key()
    assert key() == first
    (objects / "notes.txt").write_text("not read by the files source")
    assert key() == first
    touch(objects / "p2.yaml")
    touched = key()
    assert touched != first
    (objects / "p4.yaml").write_text(PROXY % {"i": 4})
    added = key()
    assert added not in (first, touched)
    (objects / "p1.yaml").unlink()
    assert key() not in (first, touched, added)


def test_file_stats_name_the_files_a_load_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = write_tree(tmp_path)
    (objects / "sub" / "deeper").mkdir(parents=True)
    (objects / "sub" / "deeper" / "x.YML").write_text("a: 1")
    (objects / "sub" / "skip.yaml").write_text("a: 1")
    (objects / ".hidden.yaml").write_text("a: 1")
    (objects / "notes.txt").write_text("")
    (objects / "dir.yaml").mkdir()
    (objects / "linked").symlink_to(objects / "sub")
    (objects / "loop").symlink_to(objects)
    single = tmp_path / "single.conf"
    single.write_text("a: 1")
    monkeypatch.chdir(tmp_path)
    for roots in ((objects, single), (Path("objects"), Path("single.conf")), (Path("."),)):
        for exclude in ((), ("skip.yaml",), ("sub/*",)):
            expected = tuple(
                sorted((str(p), files._signature(p)) for p in files.discover(roots, exclude))
            )
            assert file_stats(roots, exclude) == expected, (roots, exclude)
            if not exclude:
                assert any(path.endswith("deeper/x.YML") for path, _ in expected)


def test_the_environment_key_follows_flags_options_and_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ServeConfig(paths=(tmp_path,))

    def key(cfg: ServeConfig) -> bytes:
        return environment_key((cfg, compile_options(cfg), translate_options(cfg)))

    first = key(config)
    assert key(ServeConfig(paths=(tmp_path,))) == first
    assert key(dataclasses.replace(config, num_trusted_hops=1)) != first
    assert key(dataclasses.replace(config, access_log="off")) != first
    monkeypatch.setattr(served_state, "code_digest", lambda: b"another turnout")
    assert key(config) != first


def test_canonical_forms_do_not_depend_on_set_order() -> None:
    assert canonical(frozenset({"b", "a", "c"})) == canonical(frozenset({"c", "a", "b"}))
    assert canonical({"y": 1, "x": {2, 1}}) == "{'x': {1, 2}, 'y': 1}"
    with pytest.raises(TypeError):
        canonical(object())


# -- the file ------------------------------------------------------------------------------------

KEY = ServedKey(b"e" * 32, b"f" * 32)
STATE = ServedState(
    KEY,
    "v1",
    frozenset({"gateway_8081"}),
    tuple(
        Serialized(type_url, f"r{i}", bytes([i % 256]) * 10, (f"c{i}",), ())
        for i, type_url in enumerate(["t.example/A", "t.example/B"] * 3000)
    ),
)


def test_a_saved_state_loads_back_with_the_same_keys_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    saved = ServedStateFile(tmp_path / "served-state")
    assert saved.load(KEY) is None  # none yet: nothing logged
    assert saved.save(STATE)
    assert saved.load(KEY) == STATE
    caplog.set_level(logging.INFO)
    assert saved.load(ServedKey(KEY.environment, b"g" * 32)) is None
    assert "the files changed" in caplog.text
    assert saved.load(ServedKey(b"x" * 32, KEY.files)) is None
    assert "another turnout" in caplog.text


@pytest.mark.parametrize("damage", ["flip", "truncate", "append", "header"])
def test_a_damaged_state_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    path = tmp_path / "served-state"
    assert ServedStateFile(path).save(STATE)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        del data[len(data) // 2 :]
    elif damage == "append":
        data += b"\x00"
    else:
        data[:5] = b"xxxxx"
    path.write_bytes(bytes(data))
    caplog.set_level(logging.INFO)
    assert ServedStateFile(path).load(KEY) is None
    assert "served state" in caplog.text


def test_a_state_naming_a_class_is_refused_even_with_a_good_checksum(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "served-state"
    assert ServedStateFile(path).save(STATE)
    body = pickle.dumps(("v1", (), 1)) + pickle.dumps((Path("/etc"),))
    head = path.read_bytes()[: served_state._HEAD - 32]
    path.write_bytes(head + served_state.hashlib.sha256(body).digest() + body)
    assert ServedStateFile(path).load(KEY) is None
    assert "not allowed" in caplog.text


def test_a_save_gives_way_to_a_compile(tmp_path: Path) -> None:
    path = tmp_path / "served-state"
    calls: list[int] = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 2

    assert not ServedStateFile(path).save(STATE, cancelled)
    assert not path.exists() and not list(tmp_path.iterdir())  # no temporary file left


# -- a restart through the controller -------------------------------------------------------------


def make_controller(objects: Path, state: Path, **flags: Any) -> Controller:
    config = ServeConfig(
        paths=(objects,), run_envoy=False, demo_backends=False, xds_port=0, **flags
    )
    return Controller(
        config,
        sources=default_sources(config),
        dialects=default_dialects(),
        compile_options=compile_options(config),
        translate_options=translate_options(config),
        served_state=ServedStateFile(state / "served-state"),
    )


@pytest.fixture
async def first_run(tmp_path: Path) -> AsyncIterator[tuple[Path, Path, str]]:
    """The files, the state directory and the version a first run served and saved."""
    objects, state = write_tree(tmp_path), tmp_path / "state"
    state.mkdir()
    controller = make_controller(objects, state)
    await controller.start()
    try:
        assert await controller.save_served()
        assert not await controller.save_served()  # nothing new to write
        version = controller.xds.version
        assert version is not None
    finally:
        await controller.stop()
    yield objects, state, version


class Gate:
    """Holds the controller's compiles until opened."""

    def __init__(self, controller: Controller, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        self.started = threading.Event()
        compile_ = controller._compile

        def held(*args: Any) -> Any:
            self.started.set()
            assert self.event.wait(10)
            return compile_(*args)

        monkeypatch.setattr(controller, "_compile", held)


async def start_held(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> tuple[Gate, asyncio.Task[None], DeltaFakeEnvoy]:
    gate = Gate(controller, monkeypatch)
    starting = asyncio.create_task(controller.start())
    await until(lambda: controller.xds_port != 0 and gate.started.is_set(), 5)
    envoy = DeltaFakeEnvoy(DeltaClient(controller.xds_port, "restart")).start()
    return gate, starting, envoy


async def test_a_restart_with_unchanged_files_programs_envoy_before_the_compile(
    first_run: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    objects, state, version = first_run
    controller = make_controller(objects, state)
    gate, starting, envoy = await start_held(controller, monkeypatch)
    try:
        # The first compile is held: what Envoy gets is the last run's configuration.
        await until(lambda: controller.readiness()[0], 5)
        assert controller.applied is None and controller.xds.version == version
        assert "the last run's configuration" in controller.readiness()[1]
        assert {"host1.example.com", "host3.example.com"} <= served_hosts(envoy)
        assert controller.statuses() == ()  # nothing claimed before the compile
        envoy.clear()
        gate.event.set()
        await asyncio.wait_for(starting, 10)
        # The compile gave the very same configuration: nothing more for Envoy.
        assert controller.xds.version == version and controller.applied is not None
        assert controller.readiness()[0]
        await asyncio.sleep(0.2)
        assert envoy.received() == []
        assert len(controller.statuses()) > 0
        # The compile's messages stand behind the resources now: a change reuses the others.
        current = controller.xds._snapshot
        assert current is not None
        assert all(r.message is not None for rs in current.resources.values() for r in rs.values())
    finally:
        gate.event.set()
        await envoy.stop()
        await controller.stop()


def served_hosts(envoy: DeltaFakeEnvoy) -> set[str]:
    routes = envoy.messages.get("type.googleapis.com/envoy.config.route.v3.RouteConfiguration")
    return {d for rc in (routes or {}).values() for vh in rc.virtual_hosts for d in vh.domains}


@pytest.mark.parametrize(
    "change",
    ["touch", "add", "remove", "flag"],
)
async def test_a_restart_after_any_change_does_not_use_the_saved_state(
    first_run: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    objects, state, version = first_run
    flags: dict[str, Any] = {}
    if change == "touch":
        touch(objects / "p2.yaml")
    elif change == "add":
        (objects / "p9.yaml").write_text(PROXY % {"i": 9})
    elif change == "remove":
        (objects / "p3.yaml").unlink()
    else:
        flags["num_trusted_hops"] = 2
    controller = make_controller(objects, state, **flags)
    gate, starting, envoy = await start_held(controller, monkeypatch)
    try:
        await asyncio.sleep(0.3)
        assert controller.xds.version is None
        assert not controller.readiness()[0]
        assert envoy.received() == []
        gate.event.set()
        await asyncio.wait_for(starting, 10)
        await until(lambda: controller.readiness()[0], 5)
        if change != "touch":
            assert controller.xds.version != version
    finally:
        gate.event.set()
        await envoy.stop()
        await controller.stop()


async def test_a_change_during_the_first_compile_is_compiled_after_it(
    first_run: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    objects, state, version = first_run
    controller = make_controller(objects, state, watch=True)
    gate, starting, envoy = await start_held(controller, monkeypatch)
    try:
        await until(lambda: controller.readiness()[0], 5)
        (objects / "p1.yaml").write_text((PROXY % {"i": 1}).replace("host1.", "moved1."))
        await asyncio.sleep(0.3)
        gate.event.set()
        await asyncio.wait_for(starting, 10)
        await until(lambda: "moved1.example.com" in served_hosts(envoy), 10)
        assert controller.xds.version != version
    finally:
        gate.event.set()
        await envoy.stop()
        await controller.stop()


async def test_nothing_is_saved_while_a_file_keeps_objects_of_an_earlier_content(
    tmp_path: Path,
) -> None:
    objects, state = write_tree(tmp_path), tmp_path / "state"
    state.mkdir()
    controller = make_controller(objects, state, watch=True)
    await controller.start()
    try:
        (objects / "p1.yaml").write_text("kind: [unclosed")
        await until(lambda: controller._files is not None and bool(controller._files._stale), 5)
        await until(lambda: not controller._busy(), 5)
        assert not await controller.save_served()
        assert not (state / "served-state").exists()
    finally:
        await controller.stop()


async def test_a_saved_state_with_a_wrong_version_is_not_served(
    first_run: tuple[Path, Path, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    objects, state, _ = first_run
    real_load: Callable[..., Any] = ServedStateFile.load

    def lying(self: ServedStateFile, key: ServedKey) -> ServedState | None:
        loaded = real_load(self, key)
        return None if loaded is None else dataclasses.replace(loaded, version="0" * 16)

    monkeypatch.setattr(ServedStateFile, "load", lying)
    controller = make_controller(objects, state)
    gate, starting, envoy = await start_held(controller, monkeypatch)
    try:
        await asyncio.sleep(0.2)
        assert controller.xds.version is None
        assert "served state not used" in caplog.text
    finally:
        gate.event.set()
        await asyncio.wait_for(starting, 10)
        await envoy.stop()
        await controller.stop()


@pytest.mark.parametrize("library", ["PyYAML", "google-re2", "cryptography", "xds-protos"])
def test_the_code_digest_follows_the_libraries_that_read_input_or_shape_output(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = served_state.metadata.version
    served_state.code_digest.cache_clear()
    try:
        before = served_state.code_digest()
        served_state.code_digest.cache_clear()
        monkeypatch.setattr(
            served_state.metadata,
            "version",
            lambda name: "0.0.0-other" if name == library else real(name),
        )
        assert served_state.code_digest() != before
    finally:
        monkeypatch.undo()
        served_state.code_digest.cache_clear()

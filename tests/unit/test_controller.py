"""The controller: keeps the last good configuration when a compile fails, waits for its sources
to sync, coalesces bursts of changes, skips unchanged input, and settles statuses as Envoy
answers."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.xds_client import AdsClient, FakeEnvoy, until
from turnout.app import build_controller, compile_snapshot
from turnout.compile_inputs import HTTP_LISTENER, CompileOptions
from turnout.config import ServeConfig
from turnout.controller import Controller, identity_diff
from turnout.envoy.translate import translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.dialect import (
    CompileContext,
    Dialect,
    DialectOutput,
    Dialects,
    EnvoyView,
    HostClaim,
)
from turnout.objects import KubeObject, freeze
from turnout.sources.base import SourceSink
from turnout.sources.parse import parse_text
from turnout.status.model import (
    Condition,
    ConditionStatus,
    Finding,
    ObjectStatus,
    State,
    render_plain,
)
from turnout.store import Snapshot

PROXY = """\
apiVersion: v1
kind: Service
metadata: {name: app}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: root}
spec:
  virtualhost: {fqdn: ctl.example.com}
  routes: [{services: [{name: app, port: 80}]}]
"""


async def test_compile_failure_keeps_last_good_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.yaml").write_text(PROXY)
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
        )
    )
    await controller.start()
    try:
        good = controller.applied
        assert good is not None and controller.xds.version == good.version

        def broken(*args: object, **kwargs: object) -> object:
            raise RuntimeError("dialect bug")

        monkeypatch.setattr("turnout.controller.build_graph", broken)
        (tmp_path / "a.yaml").write_text(PROXY.replace("ctl.example.com", "other.example.com"))
        assert await controller.reload() is good
        assert controller.xds.version == good.version
        ready, reason = controller.readiness()
        assert not ready and "dialect bug" in reason
        assert controller.metrics.compile_errors._value.get() == 1

        monkeypatch.undo()
        applied = await controller.reload()
        assert applied is not None and applied.version != good.version
        assert controller.compile_error is None
    finally:
        await controller.stop()


async def test_compiles_carry_their_memos_and_a_failure_leaves_the_next_compile_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.yaml").write_text(PROXY)
    (tmp_path / "b.yaml").write_text(_other_proxy("b.example.com"))
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
        )
    )
    await controller.start()

    def exact() -> None:
        applied = controller.applied
        assert applied is not None and applied.snapshot is not None
        assert applied.resources is not None
        fresh = compile_snapshot(applied.snapshot, controller.compile_options)
        assert applied.result.statuses == fresh.statuses
        assert applied.result.graph == fresh.graph
        assert _wire(applied.resources) == _wire(
            translate(fresh.graph, controller.translate_options)
        )

    try:
        (tmp_path / "a.yaml").write_text(PROXY.replace("ctl.example.com", "c2.example.com"))
        first = await controller.reload()
        exact()

        def broken(*args: object, **kwargs: object) -> object:
            raise RuntimeError("translator bug")

        # The compile ran (and its memo moved on), then the translation failed.
        monkeypatch.setattr("turnout.controller.translate", broken)
        (tmp_path / "a.yaml").write_text(PROXY.replace("ctl.example.com", "c3.example.com"))
        assert await controller.reload() is first
        monkeypatch.undo()
        (tmp_path / "b.yaml").write_text(_other_proxy("b2.example.com"))
        applied = await controller.reload()
        assert applied is not None and applied is not first
        exact()
    finally:
        await controller.stop()


def _other_proxy(fqdn: str) -> str:
    proxy = PROXY.split("---\n")[1]
    return proxy.replace("name: root", "name: other").replace("ctl.example.com", fqdn)


def _wire(resources: Any) -> list[bytes]:
    return [
        m.SerializeToString(deterministic=True)
        for messages in resources.by_type().values()
        for m in messages
    ]


# --- sources, coalescing and skipped compiles -----------------------------------------------------


class ListSource:
    """A source that lists `objects` into its partition, then says it is synced once `gate` is
    set (at once without one), and keeps its sink so a test can write changes through it."""

    def __init__(
        self, name: str, objects: Sequence[KubeObject] = (), gate: asyncio.Event | None = None
    ) -> None:
        self.name = name
        self.objects = tuple(objects)
        self.gate = gate
        self.sink: SourceSink | None = None

    async def run(self, sink: SourceSink) -> None:
        self.sink = sink
        sink.replace_partition(self.name, self.objects)
        if self.gate is not None:
            await self.gate.wait()
        sink.synced()
        await asyncio.Event().wait()

    async def reload(self) -> None:
        return None


def _config(paths: tuple[Path, ...] = (), *, watch: bool = False) -> ServeConfig:
    return ServeConfig(
        paths=paths,
        run_envoy=False,
        watch=watch,
        demo_backends=False,
        xds_port=0,
        debounce_ms=100,
    )


def _objects(text: str) -> tuple[KubeObject, ...]:
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return parsed.objects


def _compiles(controller: Controller) -> float:
    return float(controller.metrics.compiles._value.get())


def _compiled(controller: Controller, text: str) -> bool:
    """Whether the last compile's input has `text` in an object."""
    applied = controller.applied
    snapshot = applied.snapshot if applied is not None else None
    return snapshot is not None and any(text in str(o.raw) for o in snapshot.objects)


async def test_nothing_is_compiled_or_pushed_before_every_source_is_synced() -> None:
    gate = asyncio.Event()
    late = ListSource("late", _objects(PROXY), gate)
    controller = build_controller(_config(), sources=[ListSource("early"), late])
    starting = asyncio.create_task(controller.start())
    fake: FakeEnvoy | None = None
    try:
        await until(lambda: controller.xds_port != 0)
        fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
        await asyncio.sleep(0.3)
        assert not starting.done()
        assert controller.xds.version is None and controller.applied is None
        assert _compiles(controller) == 0 and fake.received() == []
        ready, reason = controller.readiness()
        assert not ready and "waiting for source(s) late " in reason

        gate.set()
        await asyncio.wait_for(starting, 5)
        applied = controller.applied
        assert applied is not None and controller.xds.version == applied.version
        assert _compiles(controller) == 1
        assert [s.ref.name for s in applied.result.statuses] == ["root"]
        assert await controller.xds.wait_acked(applied.version, 5.0)
        assert fake.received() != []
    finally:
        if fake is not None:
            await fake.stop()
        starting.cancel()
        await controller.stop()


async def test_a_burst_of_file_writes_is_one_compile(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(PROXY)
    controller = build_controller(_config((tmp_path,), watch=True))
    await controller.start()
    try:
        assert _compiles(controller) == 1
        await asyncio.sleep(0.3)  # the watcher armed
        # 20 writes within about 50 ms; the event loop (and so the compile loop) waits meanwhile.
        for i in range(20):
            path.write_text(PROXY.replace("ctl.example.com", f"h{i}.example.com"))
            time.sleep(0.0025)

        await until(lambda: _compiled(controller, "h19.example.com"), 5.0)
        await asyncio.sleep(1.2)  # anything still pending would have compiled by now
        assert 2 <= _compiles(controller) <= 3
    finally:
        await controller.stop()


async def test_changes_within_the_debounce_window_join_one_compile_of_bounded_delay() -> None:
    source = ListSource("list", _objects(PROXY))
    controller = build_controller(_config(), sources=[source])
    await controller.start()
    try:
        assert source.sink is not None and _compiles(controller) == 1
        # 20 changes in about 50 ms, the event loop free in between: one compile.
        for i in range(20):
            source.sink.replace_partition("list", _objects(PROXY.replace("ctl", f"a{i}")))
            await asyncio.sleep(0.0025)
        await until(lambda: _compiled(controller, "a19.example.com"), 5.0)
        await asyncio.sleep(0.4)
        assert 2 <= _compiles(controller) <= 3
        # A change every 50 ms never leaves the window quiet: the compile still comes after
        # at most a second (plus the compile itself), not only when the changes stop.
        loop = asyncio.get_running_loop()
        started = loop.time()
        i = 0
        while loop.time() - started < 2.5:
            i += 1
            source.sink.replace_partition("list", _objects(PROXY.replace("ctl", f"b{i}")))
            await asyncio.sleep(0.05)
        assert 4 <= _compiles(controller) <= 8
    finally:
        await controller.stop()


async def test_a_change_after_a_quiet_window_compiles_at_once_and_a_burst_waits() -> None:
    source = ListSource("list", _objects(PROXY))
    config = dataclasses.replace(_config(), debounce_ms=600)
    controller = build_controller(config, sources=[source])
    await controller.start()
    try:
        assert source.sink is not None and _compiles(controller) == 1
        await asyncio.sleep(0.7)  # quiet for longer than the window
        started = time.monotonic()
        source.sink.replace_partition("list", _objects(PROXY.replace("ctl", "a")))
        await until(lambda: _compiled(controller, "a.example.com"), 5.0)
        assert time.monotonic() - started < 0.4  # its leading edge, not after the window
        # A change within the window is part of a burst: it waits for the window's quiet.
        started = time.monotonic()
        source.sink.replace_partition("list", _objects(PROXY.replace("ctl", "b")))
        await until(lambda: _compiled(controller, "b.example.com"), 5.0)
        assert time.monotonic() - started >= 0.6
        assert _compiles(controller) == 3
    finally:
        await controller.stop()


async def test_a_file_rewritten_with_the_same_content_is_not_compiled(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(PROXY)
    controller = build_controller(_config((tmp_path,), watch=True))
    await controller.start()
    try:
        good = controller.applied
        await asyncio.sleep(0.3)  # the watcher armed
        path.write_text(PROXY)
        os.utime(path, (1, 1))  # touched too
        await asyncio.sleep(0.8)
        assert await controller.reload() is good
        assert _compiles(controller) == 1
        # The watcher is alive: a real change compiles.
        path.write_text(PROXY.replace("ctl.example.com", "other.example.com"))
        await until(lambda: _compiles(controller) == 2, 5.0)
    finally:
        await controller.stop()


async def test_a_file_rewritten_in_place_with_a_pause_compiles_no_removal(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(PROXY)
    config = dataclasses.replace(_config((tmp_path,), watch=True), empty_file_grace_s=2.0)
    controller = build_controller(config)
    await controller.start()
    try:
        good = controller.applied
        await asyncio.sleep(0.3)  # the watcher armed
        with path.open("w") as f:
            f.flush()
            await asyncio.sleep(0.5)  # longer than the debounce: the empty file was seen
            f.write(PROXY)
        await asyncio.sleep(0.8)
        assert controller.applied is good and _compiles(controller) == 1
        # Left empty, the file's objects go once the grace period is over.
        path.write_text("")
        await asyncio.sleep(1.0)
        assert _compiles(controller) == 1
        await until(lambda: _compiles(controller) == 2, 5.0)
        assert not _compiled(controller, "ctl.example.com")
    finally:
        await controller.stop()


async def test_a_change_undone_before_the_compile_is_not_compiled() -> None:
    source = ListSource("list", _objects(PROXY))
    controller = build_controller(_config(), sources=[source])
    await controller.start()
    try:
        assert source.sink is not None and _compiles(controller) == 1
        other = _objects(PROXY.replace("ctl.example.com", "other.example.com"))
        assert source.sink.replace_partition("list", other)
        # The same content parsed again (new objects, equal, from the same places).
        assert source.sink.replace_partition("list", _objects(PROXY))
        await asyncio.sleep(0.4)
        assert _compiles(controller) == 1
        assert source.sink.replace_partition("list", other)
        await until(lambda: _compiles(controller) == 2, 5.0)
    finally:
        await controller.stop()


# --- statuses settled when Envoy answers ---------------------------------------------------------

WIDGET = ("example.com/v1", "Widget")


class _PlainShape:
    def render(self, status: ObjectStatus) -> dict[str, Any]:
        return render_plain(status)

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        return status


class WidgetDialect(Dialect):
    """A typed dialect: a Widget is Ready as its spec says, and Programmed once Envoy has
    the HTTP listener's configuration (closed or programmed)."""

    name = "widget"
    kinds = frozenset({WIDGET})

    def claims(self, snapshot: Snapshot, options: CompileOptions) -> Iterable[HostClaim]:
        return ()

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        statuses = []
        for obj in snapshot.kind("example.com", "Widget"):
            ready = bool(obj.spec.get("ready"))
            statuses.append(
                ObjectStatus(
                    ref=obj.ref,
                    api_version=obj.api_version,
                    state=State.VALID,
                    summary=str(obj.spec.get("note")),
                    shape=_PlainShape(),
                    conditions=(
                        Condition("Ready", ConditionStatus.of(ready), "Spec", str(obj.spec)),
                    ),
                )
            )
        return DialectOutput(statuses=tuple(statuses))

    def settle(
        self, statuses: Sequence[ObjectStatus], envoy: EnvoyView | None
    ) -> tuple[ObjectStatus, ...]:
        state = envoy.probe(HTTP_LISTENER)[0] if envoy is not None else "programmed"
        programmed = Condition(
            "Programmed",
            ConditionStatus.TRUE if state in ("programmed", "closed") else ConditionStatus.UNKNOWN,
            state,
            "",
        )
        return tuple(
            dataclasses.replace(s, conditions=(*s.conditions, programmed)) for s in statuses
        )


def _widget(ready: bool, note: str) -> KubeObject:
    raw = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"ready": ready, "note": note},
    }
    return KubeObject("example.com/v1", "Widget", "default", "w", freeze(raw))


def _times(controller: Controller) -> dict[str, tuple[str, str | None]]:
    (status,) = controller.statuses()
    return {c.type: (str(c.status), c.last_transition_time) for c in status.conditions}


async def test_statuses_settle_when_envoy_answers_and_keep_their_transition_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(f"2026-01-01T00:00:{i:02d}Z" for i in range(60))
    monkeypatch.setattr("turnout.controller.now_rfc3339", lambda: next(clock))
    source = ListSource("widgets", [_widget(True, "one")])
    controller = Controller(
        _config(),
        sources=[source],
        dialects=Dialects((WidgetDialect(),)),
        compile_options=CompileOptions(),
        translate_options=TranslateOptions(),
    )
    await controller.start()
    fake: FakeEnvoy | None = None
    try:
        first = "2026-01-01T00:00:00Z"
        assert _times(controller) == {"Ready": ("True", first), "Programmed": ("Unknown", first)}
        fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
        # Nothing reads the statuses meanwhile: they are settled as Envoy answers.
        await until(lambda: controller.statuses()[0].conditions[1].status == "True", 5.0)
        acked = _times(controller)
        assert acked["Ready"] == ("True", first)
        assert acked["Programmed"][0] == "True" and acked["Programmed"][1] != first

        # A recompile that keeps both conditions' statuses keeps their times.
        assert source.sink is not None
        source.sink.replace_partition("widgets", [_widget(True, "two")])
        await until(lambda: controller.statuses()[0].summary == "two", 5.0)
        assert _times(controller) == acked
        # One that flips Ready stamps Ready only.
        source.sink.replace_partition("widgets", [_widget(False, "three")])
        await until(lambda: controller.statuses()[0].summary == "three", 5.0)
        flipped = _times(controller)
        assert flipped["Ready"][0] == "False" and flipped["Ready"][1] not in (first, None)
        assert flipped["Programmed"] == acked["Programmed"]
    finally:
        if fake is not None:
            await fake.stop()
        await controller.stop()


class RecordingSink:
    """A status sink that keeps what it was told, and whether it ran."""

    def __init__(self) -> None:
        self.published: list[tuple[ObjectStatus, ...]] = []
        self.running = False

    def publish(self, statuses: Sequence[ObjectStatus]) -> None:
        self.published.append(tuple(statuses))

    async def run(self) -> None:
        self.running = True
        await asyncio.Event().wait()


async def test_status_sinks_are_told_each_change_of_the_published_statuses() -> None:
    sink = RecordingSink()
    source = ListSource("a", _objects(PROXY))
    controller = build_controller(_config(), sources=[source], status_sinks=[sink])
    await controller.start()
    try:
        await until(lambda: sink.running and bool(sink.published), 5.0)
        assert sink.published[-1] == controller.statuses()
        told = len(sink.published)
        await controller.reload()  # nothing changed: nothing published again
        assert len(sink.published) == told
    finally:
        await controller.stop()


# --- statuses published by identity ---------------------------------------------------------------


def test_identity_diff_tells_the_items_that_came_and_went() -> None:
    a, b, c, d = (object() for _ in range(4))
    first = identity_diff({}, (a, b, c))
    assert set(first.added) == {a, b, c} and first.removed == ()
    same = identity_diff(first.by_id, (a, b, c))
    assert same.added == () and same.removed == ()
    # An equal item that is not the very same object counts as changed.
    second = identity_diff(first.by_id, (a, d, c))
    assert second.added == (d,) and second.removed == (b,)
    assert identity_diff(second.by_id, ()).removed != ()


SERVICE, ROOT = PROXY.split("---\n")


def _proxy(name: str, service: str = "app") -> tuple[KubeObject, ...]:
    text = ROOT.replace("name: root", f"name: {name}").replace("ctl.", f"{name}.")
    return _objects(text.replace("name: app", f"name: {service}"))


def _object_count(controller: Controller, kind: str) -> float:
    sample = controller.metrics.objects.labels(kind=kind, state="valid")
    return float(sample._value.get())


async def test_statuses_published_follow_every_change_including_removals() -> None:
    # Unchanged statuses are kept by identity; a changed, added or removed one must show.
    names = [f"p{i}" for i in range(6)]
    source = ListSource("list", _objects(SERVICE))
    controller = build_controller(_config(), sources=[source])
    await controller.start()
    try:
        assert source.sink is not None
        sink = source.sink

        def refs() -> list[str]:
            return [s.ref.name for s in controller.statuses() if s.ref.kind == "HTTPProxy"]

        for name in names:
            sink.replace_partition(name, _proxy(name))
        await until(lambda: refs() == names, 5.0)
        assert _object_count(controller, "HTTPProxy") == 6
        kept = {s.ref.name: s for s in controller.statuses()}
        # p2 removed, p3 broken (a Service that does not exist), p9 added, in one compile.
        sink.remove_partition("p2")
        sink.replace_partition("p3", _proxy("p3", service="nothing"))
        sink.replace_partition("p9", _proxy("p9"))
        await until(lambda: "p9" in refs(), 5.0)
        assert refs() == ["p0", "p1", "p3", "p4", "p5", "p9"]
        now = {s.ref.name: s for s in controller.statuses()}
        assert now["p3"].state is not State.VALID and kept["p3"].state is State.VALID
        assert all(now[n] is kept[n] for n in ("p0", "p1", "p4", "p5"))
        assert _object_count(controller, "HTTPProxy") == 5
        # p3 fixed again, everything else removed: nothing of it stays published.
        sink.replace_partition("p3", _proxy("p3"))
        for name in ("p0", "p1", "p4", "p5", "p9"):
            sink.remove_partition(name)
        await until(lambda: refs() == ["p3"], 5.0)
        assert controller.statuses()[-1].state is State.VALID
        assert _object_count(controller, "HTTPProxy") == 1
    finally:
        await controller.stop()


async def test_the_heap_is_frozen_after_each_compile_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen: list[float] = []
    monkeypatch.setattr("turnout.controller.freeze_heap", lambda: frozen.append(1))
    source = ListSource("list", _objects(PROXY))
    controller = build_controller(_config(), sources=[source])
    await controller.start()
    try:
        assert source.sink is not None and frozen == []
        controller.freeze_heap = True  # what `turnout serve` of files sets after its cold start
        source.sink.replace_partition("list", _objects(PROXY.replace("ctl", "a")))
        await until(lambda: _compiles(controller) == 2, 5.0)
        await until(lambda: len(frozen) == 1, 5.0)
        controller.freeze_heap = False
        source.sink.replace_partition("list", _objects(PROXY.replace("ctl", "b")))
        await until(lambda: _compiles(controller) == 3, 5.0)
        await asyncio.sleep(0.3)
        assert len(frozen) == 1
    finally:
        await controller.stop()

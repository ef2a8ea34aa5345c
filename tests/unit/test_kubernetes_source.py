"""The Kubernetes source against the fake API server: list, watch, bookmarks, 410 relists with the
deletes they imply, drops, backoff, CRDs appearing later, the namespaces filter, and what is kept
of Secrets."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_apiserver import FakeApiServer, Resource
from turnout.app import default_dialects
from turnout.graph.build import CORE_KINDS
from turnout.objects import KubeObject, thaw
from turnout.sources.base import StoreSink
from turnout.sources.kubernetes.api import load_config
from turnout.sources.kubernetes.discovery import discover, wanted
from turnout.sources.kubernetes.reflector import Backoff, WatchSettings
from turnout.sources.kubernetes.source import KubernetesSource
from turnout.store import Store

READABLE = default_dialects().kinds | CORE_KINDS
FAST = WatchSettings(backoff=Backoff(initial_s=0.05, max_s=0.2), timeout_s=(30, 30))
HTTPPROXY = Resource("projectcontour.io", "v1", "HTTPProxy", "httpproxies")


def proxy(name: str, namespace: str = "default", fqdn: str = "a.example.com") -> dict[str, Any]:
    return {
        "apiVersion": "projectcontour.io/v1",
        "kind": "HTTPProxy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"virtualhost": {"fqdn": fqdn}},
    }


class Recorder:
    """A store behind the source's sink, counting the changes it saw."""

    def __init__(self) -> None:
        self.store = Store()
        self.changes = 0
        self.synced = asyncio.Event()
        self.sink = StoreSink(self.store, self._changed, self.synced.set)

    def _changed(self) -> None:
        self.changes += 1

    def objects(self, kind: str) -> dict[str, KubeObject]:
        return {
            f"{o.namespace}/{o.name}": o for o in self.store.snapshot().objects if o.kind == kind
        }


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


@contextlib.asynccontextmanager
async def running(
    fake: FakeApiServer, tmp_path: Path, **kw: Any
) -> AsyncIterator[tuple[KubernetesSource, Recorder]]:
    config = load_config(fake.kubeconfig(tmp_path / "kubeconfig"), None)
    source = KubernetesSource(config, kw.pop("readable", READABLE), settings=FAST, **kw)
    rec = Recorder()
    task = asyncio.create_task(source.run(rec.sink))
    try:
        await asyncio.wait_for(rec.synced.wait(), 10)
        yield source, rec
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_lists_then_watches_changes(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.create(proxy("before"))
    async with running(fake, tmp_path) as (_, rec):
        assert set(rec.objects("HTTPProxy")) == {"default/before"}
        fake.create(proxy("after"))
        await eventually(lambda: "default/after" in rec.objects("HTTPProxy"))
        fake.apply(proxy("before", fqdn="b.example.com"))
        await eventually(
            lambda: (
                rec.objects("HTTPProxy")["default/before"].spec["virtualhost"]["fqdn"]
                == "b.example.com"
            )
        )
        fake.delete("projectcontour.io/v1", "HTTPProxy", "after", "default")
        await eventually(lambda: set(rec.objects("HTTPProxy")) == {"default/before"})


async def test_objects_lose_status_and_volatile_metadata(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    fake.create({**proxy("p"), "status": {"currentStatus": "valid"}})
    async with running(fake, tmp_path) as (_, rec):
        obj = rec.objects("HTTPProxy")["default/p"]
        assert "status" not in obj.raw
        assert "resourceVersion" not in obj.metadata
        assert obj.origin.source == "k8s://HTTPProxy/default/p"
        assert obj.origin.line is None
        # A status write is not a change; the next real change is exactly one.
        before = rec.changes
        fake.set_status(proxy("p"), {"currentStatus": "invalid"})
        fake.create(proxy("q"))
        await eventually(lambda: "default/q" in rec.objects("HTTPProxy"))
        assert rec.changes == before + 1


async def test_synced_waits_for_every_offered_kind(fake: FakeApiServer, tmp_path: Path) -> None:
    async with running(fake, tmp_path) as (source, _):
        kinds = {r.resource.kind for r in source.reflectors}
        assert {"HTTPProxy", "Ingress", "Secret", "HTTPRoute", "RouteGroup"} <= kinds
        assert all(r.listed.is_set() and r.lists == 1 for r in source.reflectors)


async def test_bookmarks_advance_the_resource_version(fake: FakeApiServer, tmp_path: Path) -> None:
    async with running(fake, tmp_path) as (source, _):
        [reflector] = [r for r in source.reflectors if r.resource.kind == "HTTPProxy"]
        start = int(reflector.rv or 0)
        fake.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
        # No HTTPProxy changed, yet its watch resumes from after the ConfigMap's version.
        await eventually(lambda: int(reflector.rv or 0) > start)


async def test_dropped_watches_resume_without_relisting(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    async with running(fake, tmp_path) as (source, rec):
        [reflector] = [r for r in source.reflectors if r.resource.kind == "HTTPProxy"]
        for abort in (False, True):
            assert fake.drop_watches(abort=abort) > 0
            name = f"after-drop-{abort}"
            fake.create(proxy(name))
            await eventually(lambda name=name: f"default/{name}" in rec.objects("HTTPProxy"))
        assert reflector.lists == 1


async def test_410_relists_and_removes_what_vanished(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.create(proxy("stays"))
    fake.create(proxy("goes"))
    async with running(fake, tmp_path) as (source, rec):
        [reflector] = [r for r in source.reflectors if r.resource.kind == "HTTPProxy"]
        fake.set_available(False)  # the watch is cut; what happens now it never sees
        fake.delete("projectcontour.io/v1", "HTTPProxy", "goes", "default")
        fake.create(proxy("new"))
        fake.compact()
        fake.set_available(True)
        await eventually(lambda: set(rec.objects("HTTPProxy")) == {"default/stays", "default/new"})
        assert reflector.lists == 2


async def test_errors_back_off_and_recover(fake: FakeApiServer, tmp_path: Path) -> None:
    async with running(fake, tmp_path) as (_, rec):
        fake.set_available(False)
        failures = len(fake.requests)
        await asyncio.sleep(0.5)
        retried = len(fake.requests) - failures
        # Backed off: a few retries per reflector in 0.5 s, not a busy loop.
        assert 0 < retried < 30 * 15
        fake.create(proxy("while-down"))
        fake.set_available(True)
        await eventually(lambda: "default/while-down" in rec.objects("HTTPProxy"))


def test_backoff_is_capped_exponential_with_jitter() -> None:
    backoff = Backoff(initial_s=1.0, max_s=8.0)
    for failures, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 8.0)):
        delays = [backoff.delay(failures) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


async def test_a_crd_installed_later_is_picked_up(
    fake: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.withdraw(HTTPPROXY)
    caplog.set_level(logging.WARNING, "turnout.sources.kubernetes")
    async with running(fake, tmp_path, rediscover_s=0.1) as (_, rec):
        await asyncio.sleep(0.5)  # several rediscoveries
        warnings = [r for r in caplog.records if "HTTPProxy" in r.getMessage()]
        assert len(warnings) == 1
        fake.offer(HTTPPROXY)
        fake.create(proxy("late"))
        await eventually(lambda: "default/late" in rec.objects("HTTPProxy"))
        # Withdrawn again (the CRD deleted): its objects go.
        fake.withdraw(HTTPPROXY)
        fake.drop_watches()
        await eventually(lambda: not rec.objects("HTTPProxy"))


async def test_watch_namespaces_limits_namespaced_kinds(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    fake.create(proxy("in-a", "a"))
    fake.create(proxy("in-b", "b"))
    fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}})
    async with running(fake, tmp_path, namespaces=("a", "c")) as (source, rec):
        assert set(rec.objects("HTTPProxy")) == {"a/in-a"}
        assert "default/b" in rec.objects("Namespace")  # cluster-scoped: still read
        fake.create(proxy("in-c", "c"))
        fake.create(proxy("more-b", "b"))
        await eventually(lambda: "c/in-c" in rec.objects("HTTPProxy"))
        assert set(rec.objects("HTTPProxy")) == {"a/in-a", "c/in-c"}
        proxies = [r for r in source.reflectors if r.resource.kind == "HTTPProxy"]
        assert sorted(r.namespace or "" for r in proxies) == ["a", "c"]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_only_tls_and_ca_material_of_secrets_is_kept(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    last_applied = {"kubectl.kubernetes.io/last-applied-configuration": "{secret}", "a": "b"}
    secrets: list[dict[str, Any]] = [
        {
            "metadata": {"name": "tls", "annotations": last_applied},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": _b64("C"), "tls.key": _b64("K"), "extra": _b64("x")},
        },
        {"metadata": {"name": "ca"}, "type": "Opaque", "data": {"ca.crt": _b64("A"), "pw": "x"}},
        {
            "metadata": {"name": "token"},
            "type": "kubernetes.io/service-account-token",
            "data": {"token": _b64("t"), "ca.crt": _b64("A")},
        },
    ]
    for s in secrets:
        fake.create({"apiVersion": "v1", "kind": "Secret", **s})
    fake.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bundle"},
            "data": {"ca.crt": "PEM", "big": "x" * 10_000},
        }
    )
    async with running(fake, tmp_path) as (_, rec):
        kept = {k: thaw(o.raw) for k, o in rec.objects("Secret").items()}
        assert set(kept["default/tls"]["data"]) == {"tls.crt", "tls.key"}
        assert kept["default/tls"]["metadata"]["annotations"] == {"a": "b"}
        assert set(kept["default/ca"]["data"]) == {"ca.crt"}
        assert kept["default/token"]["data"] == {}
        assert thaw(rec.objects("ConfigMap")["default/bundle"].raw)["data"] == {"ca.crt": "PEM"}


async def test_discovery_prefers_the_servers_version_among_those_read(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    from turnout.sources.kubernetes.api import KubeApi

    gw = "gateway.networking.k8s.io"
    fake.offer(Resource(gw, "v1", "ReferenceGrant", "referencegrants"), preferred=True)
    fake.withdraw(Resource(gw, "v1alpha2", "TCPRoute", "tcproutes"))
    api = KubeApi.connect(load_config(fake.kubeconfig(tmp_path / "kubeconfig"), None))
    try:
        found = await discover(api, wanted(READABLE))
    finally:
        await api.close()
    versions = {r.kind: r.version for r in found.served}
    assert versions["ReferenceGrant"] == "v1"  # preferred, and read by the dialect
    assert versions["HTTPRoute"] == "v1"
    assert "TCPRoute" in {r.kind for r in found.missing}
    only_beta = wanted({(f"{gw}/v1beta1", "ReferenceGrant")})
    api = KubeApi.connect(load_config(fake.kubeconfig(tmp_path / "kubeconfig"), None))
    try:
        found = await discover(api, only_beta)
    finally:
        await api.close()
    assert [r.version for r in found.served] == ["v1beta1"]


async def test_a_wrong_token_fails_the_run(fake: FakeApiServer, tmp_path: Path) -> None:
    from turnout.sources.kubernetes.api import KubeApiError

    config = load_config(fake.kubeconfig(tmp_path / "kubeconfig", token="nope"), None)
    source = KubernetesSource(config, READABLE, settings=FAST)
    with pytest.raises(KubeApiError) as err:
        await source.run(Recorder().sink)
    assert err.value.code == 401


def test_a_missing_kubeconfig_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no usable Kubernetes configuration"):
        load_config(tmp_path / "absent", None)

"""A stream's per-change work follows what changed: random sequences of snapshots (clusters
added, changed and removed, the route moved between them, unchanged resources handed over as the
very same messages, snapshots a stream never saw) leave a Delta and a State-of-the-World fake
Envoy holding exactly the current configuration, ready, with stale clusters removed."""

from __future__ import annotations

import hashlib
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.xds_client import (
    AdsClient,
    DeltaClient,
    DeltaFakeEnvoy,
    FakeEnvoy,
    cla,
    cluster,
    listener,
    resource_names,
    route,
)
from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    EnvoyResources,
)
from turnout.envoy.xds import XdsServer

POOL = [f"c{i}" for i in range(8)]


@pytest.fixture
async def server() -> AsyncIterator[XdsServer]:
    srv = XdsServer()
    srv.port = await srv.start("127.0.0.1", 0)  # type: ignore[attr-defined]
    yield srv
    await srv.stop(0)


class Configs:
    """Random configurations whose unchanged resources are the very same message objects, as
    the incremental translator hands them over."""

    def __init__(self, seed: int, hinted: bool = False) -> None:
        self.rng = random.Random(seed)
        self.hinted = hinted
        self.last: EnvoyResources | None = None
        self.made: dict[tuple[str, str, int], Any] = {}
        self.params = {name: 1 for name in POOL}

    def _message(self, kind: str, name: str, param: int, make: Any) -> Any:
        key = (kind, name, param)
        if key not in self.made:
            self.made[key] = make()
        return self.made[key]

    def next(self) -> EnvoyResources:
        rng = self.rng
        for name in rng.sample(POOL, rng.randint(0, 2)):
            self.params[name] = rng.randint(1, 3)
        names = sorted(rng.sample(POOL, rng.randint(1, len(POOL))))
        target = rng.choice(names)
        timeout = rng.randint(10, 12)
        p = self.params
        out = EnvoyResources(
            clusters=tuple(
                self._message("c", n, p[n], lambda n=n: cluster(n, timeout=p[n])) for n in names
            ),
            endpoints=tuple(
                self._message("e", n, p[n], lambda n=n: cla(n, 8000 + p[n])) for n in names
            ),
            listeners=(self._message("l", "http", 0, lambda: listener("http", "main")),),
            routes=(
                self._message("r", target, timeout, lambda: route("main", target, timeout=timeout)),
            ),
        )
        if self.hinted:
            out = self._with_changes(out)
        self.last = out
        return out

    def _with_changes(self, out: EnvoyResources) -> EnvoyResources:
        """`out` with what changed since the last configuration (`EnvoyResources.changes`), as
        a translation that patched it hands them over; an unchanged type is its very tuple."""
        if self.last is None:
            return out
        old, new = self.last.by_type(), out.by_type()
        changes: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        kept: dict[str, tuple[Any, ...]] = {}
        for type_url, messages in new.items():
            key = "cluster_name" if type_url == ENDPOINT_TYPE else "name"
            before = {getattr(m, key): m for m in old[type_url]}
            after = {getattr(m, key): m for m in messages}
            updates: dict[str, Any] = {n: None for n in before.keys() - after.keys()}
            updates.update((n, m) for n, m in after.items() if before.get(n) is not m)
            if updates:
                changes[type_url] = (old[type_url], updates)
                kept[type_url] = messages
            else:
                kept[type_url] = old[type_url]
        return EnvoyResources(
            clusters=kept[CLUSTER_TYPE],
            endpoints=kept[ENDPOINT_TYPE],
            listeners=kept[LISTENER_TYPE],
            routes=kept[ROUTE_TYPE],
            changes=changes,
        )


def digests(messages: tuple[Any, ...], key: str = "name") -> dict[str, str]:
    return {
        getattr(m, key): hashlib.sha256(m.SerializeToString(deterministic=True)).hexdigest()
        for m in messages
    }


async def walk_configurations(
    server: XdsServer, configs: Configs, check: Callable[[EnvoyResources], None]
) -> None:
    """25 configurations set one after the other, each waited for until every Envoy
    acknowledged it, then `check`ed; every fourth step sets one more first that the stream may
    never see (the next one is not built from the one it has)."""
    for step in range(25):
        resources = configs.next()
        if step % 4 == 3:
            server.set_resources(resources)
            resources = configs.next()
        version = server.set_resources(resources)
        assert await server.wait_acked(version, 3), server.readiness()[1]
        check(resources)
        assert server.readiness()[0]


@pytest.mark.parametrize(("seed", "hinted"), [(1, False), (2, False), (3, False), (6, True)])
async def test_delta_envoy_holds_exactly_each_configuration(
    server: XdsServer, seed: int, hinted: bool
) -> None:
    """`hinted`: each configuration says what changed since the one before
    (`EnvoyResources.changes`), which the server patches its snapshot with."""
    fake = DeltaFakeEnvoy(DeltaClient(server.port)).start()  # type: ignore[attr-defined]

    def holds(resources: EnvoyResources) -> None:
        assert fake.have[CLUSTER_TYPE] == digests(resources.clusters)
        current_endpoints = digests(resources.endpoints, "cluster_name")
        have_endpoints = fake.have[ENDPOINT_TYPE]
        assert {n: have_endpoints.get(n) for n in current_endpoints} == current_endpoints
        assert fake.have[LISTENER_TYPE] == digests(resources.listeners)
        assert fake.have[ROUTE_TYPE] == digests(resources.routes)

    try:
        await walk_configurations(server, Configs(seed, hinted), holds)
    finally:
        await fake.stop()


@pytest.mark.parametrize(("seed", "hinted"), [(4, False), (5, False), (7, True)])
async def test_sotw_envoy_holds_exactly_each_configuration(
    server: XdsServer, seed: int, hinted: bool
) -> None:
    fake = FakeEnvoy(AdsClient(server.port)).start()  # type: ignore[attr-defined]

    def holds(resources: EnvoyResources) -> None:
        last_clusters = fake.last[CLUSTER_TYPE]
        assert resource_names(last_clusters) == [c.name for c in resources.clusters]
        assert [r.value for r in last_clusters.resources] == [
            c.SerializeToString(deterministic=True) for c in resources.clusters
        ]
        assert [r.value for r in fake.last[ROUTE_TYPE].resources] == [
            r.SerializeToString(deterministic=True) for r in resources.routes
        ]

    try:
        await walk_configurations(server, Configs(seed, hinted), holds)
    finally:
        await fake.stop()

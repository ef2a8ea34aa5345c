"""Leader election on the Lease (sources/kubernetes/leader.py): acquire, renew, expiry, takeover,
step-down and release with a fake clock against an in-memory Lease; then two electors and the
status writer against the fake API server through lightkube."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig

from tests.fake_apiserver import FakeApiServer
from turnout.metrics import Metrics
from turnout.objects import ObjectRef
from turnout.sources.kubernetes.leader import (
    ElectionSettings,
    LeaderElector,
    LeaseConflict,
    LeaseRecord,
    timing_problem,
)
from turnout.sources.kubernetes.status_api import LightkubeLeaseApi, LightkubeStatusApi
from turnout.sources.kubernetes.status_writer import StatusWriter, WriterSettings

NAMESPACE = "turnout-system"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class MemoryLease:
    """One Lease with a resourceVersion; `down` makes every call fail as a lost API would."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.rv = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise OSError("connection refused")

    async def get(self) -> LeaseRecord | None:
        self._check()
        record = self.record
        await asyncio.sleep(0)  # another candidate may read the same record meanwhile
        return record

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.rv += 1
        self.record = dataclasses.replace(record, resource_version=str(self.rv))
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.record is not None:
            raise LeaseConflict("exists")
        return self._store(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale")
        return self._store(record)


def elector(
    api: Any, clock: Clock, identity: str, changes: list[bool] | None = None
) -> LeaderElector:
    seen = changes if changes is not None else []
    return LeaderElector(api, ElectionSettings(identity), seen.append, clock=clock)


async def test_first_candidate_creates_and_holds_the_lease() -> None:
    api, clock, changes = MemoryLease(), Clock(), []
    a = elector(api, clock, "a", changes)
    await a.step()
    assert a.leading and changes == [True]
    assert api.record is not None
    assert (api.record.holder, api.record.lease_duration_s, api.record.transitions) == ("a", 15, 0)


async def test_standby_waits_while_the_leader_renews() -> None:
    api, clock = MemoryLease(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.step()
    for _ in range(20):  # 40 s of renewals every 2 s
        clock.now += 2
        await a.step()
        await b.step()
    assert a.leading and not b.leading
    assert api.record is not None and api.record.holder == "a"


async def test_standby_takes_over_once_the_lease_expired() -> None:
    api, clock = MemoryLease(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.step()
    await b.step()  # b observes a's record now
    # a is killed: it renews no more. b tries every 2 s and takes over after 15 s unchanged.
    taken_at = None
    for tick in range(1, 12):
        clock.now += 2
        await b.step()
        if b.leading:
            taken_at = tick * 2
            break
    assert taken_at == 16  # the first try after the 15 s lease duration
    assert api.record is not None
    assert (api.record.holder, api.record.transitions) == ("b", 1)


async def test_leader_that_cannot_renew_steps_down_before_the_lease_expires() -> None:
    api, clock, changes = MemoryLease(), Clock(), []
    a = elector(api, clock, "a", changes)
    await a.step()
    api.down = True
    clock.now += 8
    await a.step()
    assert a.leading  # within the 10 s renew deadline
    clock.now += 2
    await a.step()
    assert not a.leading and changes == [True, False]  # 10 s: before the 15 s lease ends


async def test_released_lease_is_taken_at_the_next_try() -> None:
    api, clock = MemoryLease(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.step()
    await b.step()
    await a.release()
    assert not a.leading
    assert api.record is not None and api.record.holder == ""
    clock.now += 2
    await b.step()
    assert b.leading


async def test_of_two_racing_candidates_one_wins() -> None:
    api, clock = MemoryLease(), Clock()
    api.record = LeaseRecord("gone", 15, "t", "t", 3, "0")
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.step()
    await b.step()
    assert not (a.leading or b.leading)  # a Lease first seen counts as just renewed
    clock.now += 16  # unchanged for longer than its duration: expired
    await asyncio.gather(a.step(), b.step())  # both read it before either writes
    assert sorted([a.leading, b.leading]) == [False, True]
    assert api.record is not None and api.record.transitions == 4


# --- against the fake API server --------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


def client(fake: FakeApiServer, path: Path) -> AsyncClient:
    return AsyncClient(KubeConfig.from_file(fake.kubeconfig(path)))


async def test_two_electors_on_the_fake_elect_one(fake: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock()
    a = elector(LightkubeLeaseApi(client(fake, tmp_path / "a"), NAMESPACE), clock, "a")
    b = elector(LightkubeLeaseApi(client(fake, tmp_path / "b"), NAMESPACE), clock, "b")
    for _ in range(3):
        await a.step()
        await b.step()
        clock.now += 2
    assert (a.leading, b.leading) == (True, False)
    lease = fake.get("coordination.k8s.io/v1", "Lease", "turnout", NAMESPACE)
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    await a.release()
    clock.now += 2
    await b.step()
    assert b.leading
    lease = fake.get("coordination.k8s.io/v1", "Lease", "turnout", NAMESPACE)
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)


async def test_writer_on_the_fake_retries_a_409_and_writes_once(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    from turnout.dialects.httpproxy.status import HTTPPROXY_SHAPE
    from turnout.status.model import Condition, ConditionStatus, ObjectStatus, State

    proxy = {
        "apiVersion": "projectcontour.io/v1",
        "kind": "HTTPProxy",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"virtualhost": {"fqdn": "w.example.com"}},
    }
    created = fake.create(proxy)
    status = ObjectStatus(
        ref=ObjectRef("projectcontour.io", "HTTPProxy", "default", "w"),
        api_version="projectcontour.io/v1",
        state=State.VALID,
        summary="Valid HTTPProxy",
        shape=HTTPPROXY_SHAPE,
        conditions=(Condition("Valid", ConditionStatus.TRUE, "Valid", "Valid HTTPProxy", 1),),
        fields={"currentStatus": "valid", "description": "Valid HTTPProxy"},
    )
    writer = StatusWriter(
        LightkubeStatusApi(client(fake, tmp_path / "w")), WriterSettings("c"), metrics=Metrics()
    )
    writer.set_leading(True)
    # The writer saw the object at its creation; someone changes it before the write: 409.
    writer.observe(status.ref, created["metadata"]["resourceVersion"], None)
    fake.update({**created, "spec": {"virtualhost": {"fqdn": "w2.example.com"}}})
    before = len(fake.status_writes("httpproxies"))
    writer.publish([status])
    await writer.write(status.ref)
    got = fake.get("projectcontour.io/v1", "HTTPProxy", "w", "default")
    assert got["status"]["currentStatus"] == "valid"
    assert len(fake.status_writes("httpproxies")) - before == 2  # the 409, then the write
    await writer.write(status.ref)  # nothing changed: no request
    assert len(fake.status_writes("httpproxies")) - before == 2


def test_timings_client_go_refuses_are_refused() -> None:
    assert timing_problem(15, 10, 2) == ""
    assert "lease-duration" in timing_problem(10, 10, 2)
    assert "renew-deadline" in timing_problem(15, 2, 2)

"""The Kubernetes status writer: what it writes (status_diff), how often (the token bucket), and
how it behaves against an API that answers 409 or already holds the status (an in-memory API;
tests/e2e/test_kubernetes_status.py runs it against the fake API server)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import pytest

from turnout.dialects.contour_route.status import ROUTE_SHAPE as CONTOUR_ROUTE_SHAPE
from turnout.dialects.gatewayapi.conditions import ROUTE_SHAPE
from turnout.dialects.httpproxy.status import HTTPPROXY_SHAPE
from turnout.metrics import Metrics
from turnout.objects import ObjectRef
from turnout.sources.kubernetes.status_diff import (
    carry_times,
    comparable,
    merge_foreign,
    merge_patch,
    status_to_write,
    withdrawn,
)
from turnout.sources.kubernetes.status_writer import (
    Conflict,
    Gone,
    Observed,
    StatusTarget,
    StatusWriter,
    TokenBucket,
    WriterSettings,
)
from turnout.status.model import Condition, ConditionStatus, ObjectStatus, Section, State

OURS = "turnout.dev/gateway-controller"
THEIRS = "example.net/other"
T0, T1 = "2026-01-01T00:00:00Z", "2026-02-02T00:00:00Z"
PROXY = ObjectRef("projectcontour.io", "HTTPProxy", "app", "web")
HTTPROUTE = ObjectRef("gateway.networking.k8s.io", "HTTPRoute", "app", "web")


def cond(type_: str, status: str, when: str | None = T0, **kw: Any) -> dict[str, Any]:
    out = {"type": type_, "status": status, "reason": type_, "message": "m", **kw}
    if when is not None:
        out["lastTransitionTime"] = when
    return out


def proxy_status(
    valid: bool = True, description: str = "Valid HTTPProxy", when: str = T1
) -> ObjectStatus:
    truth = ConditionStatus.TRUE if valid else ConditionStatus.FALSE
    return ObjectStatus(
        ref=PROXY,
        api_version="projectcontour.io/v1",
        state=State.VALID if valid else State.INVALID,
        summary=description,
        shape=HTTPPROXY_SHAPE,
        conditions=(Condition("Valid", truth, "Valid", description, 1, when),),
        fields={"currentStatus": "valid" if valid else "invalid", "description": description},
    )


def route_status(controller: str = OURS) -> ObjectStatus:
    section = Section(
        "parents",
        "gw",
        (Condition("Accepted", ConditionStatus.TRUE, "Accepted", "ok", 1, T1),),
        {"parentRef": {"name": "gw"}, "controllerName": controller},
    )
    return ObjectStatus(
        ref=HTTPROUTE,
        api_version="gateway.networking.k8s.io/v1",
        state=State.VALID,
        summary="ok",
        shape=ROUTE_SHAPE,
        sections=(section,),
    )


# --- status_diff ------------------------------------------------------------------------------


def test_comparable_ignores_the_times_a_writer_stamps() -> None:
    a = {"conditions": [cond("Valid", "True", T0)], "lastProcessTime": T0}
    b = {"conditions": [cond("Valid", "True", T1)], "lastProcessTime": T1}
    assert comparable(a) == comparable(b)
    assert comparable(a) != comparable({"conditions": [cond("Valid", "False", T0)]})


def test_unchanged_condition_keeps_the_objects_transition_time() -> None:
    desired = {"conditions": [cond("Valid", "True", T1), cond("Ready", "False", T1)]}
    current = {"conditions": [cond("Ready", "True", T0), cond("Valid", "True", T0)]}
    carried = carry_times(desired, current)
    assert carried["conditions"][0]["lastTransitionTime"] == T0  # same status: kept
    assert carried["conditions"][1]["lastTransitionTime"] == T1  # True -> False: new time


def test_section_conditions_are_matched_by_their_entry() -> None:
    desired = {"listeners": [{"name": "b", "conditions": [cond("Programmed", "True", T1)]}]}
    current = {
        "listeners": [
            {"name": "a", "conditions": [cond("Programmed", "True", "2020-01-01T00:00:00Z")]},
            {"name": "b", "conditions": [cond("Programmed", "True", T0)]},
        ]
    }
    carried = carry_times(desired, current)
    assert carried["listeners"][0]["conditions"][0]["lastTransitionTime"] == T0


def test_other_controllers_parents_are_kept_and_ours_replaced() -> None:
    theirs = {"parentRef": {"name": "x"}, "controllerName": THEIRS, "conditions": []}
    stale_ours = {"parentRef": {"name": "old"}, "controllerName": OURS, "conditions": []}
    ours = {"parentRef": {"name": "gw"}, "controllerName": OURS, "conditions": []}
    merged = merge_foreign({"parents": [ours]}, {"parents": [theirs, stale_ours]}, OURS)
    assert merged["parents"] == [theirs, ours]


def test_withdrawn_takes_out_only_our_shared_entries() -> None:
    theirs = {"parentRef": {"name": "x"}, "controllerName": THEIRS, "conditions": []}
    ours = {"parentRef": {"name": "gw"}, "controllerName": OURS, "conditions": []}
    assert withdrawn({"parents": [theirs, ours]}, OURS) == {"parents": [theirs]}
    assert withdrawn({"parents": [theirs]}, OURS) is None
    assert withdrawn({"currentStatus": "valid"}, OURS) is None
    assert withdrawn(None, OURS) is None


def test_status_to_write_is_none_when_the_object_says_it_already() -> None:
    desired = {"currentStatus": "valid", "conditions": [cond("Valid", "True", T1)]}
    current = {"currentStatus": "valid", "conditions": [cond("Valid", "True", T0)]}
    assert status_to_write(desired, current, controller_name=OURS) is None
    assert status_to_write(desired, None, controller_name=OURS) == desired


def test_route_process_time_is_stamped_only_on_a_change() -> None:
    desired = {"currentStatus": "valid", "errors": []}
    current = {**desired, "lastProcessTime": T0}
    assert status_to_write(desired, current, controller_name=OURS, process_time=T1) is None
    changed = status_to_write(
        {"currentStatus": "error", "errors": ["x"]},
        current,
        controller_name=OURS,
        process_time=T1,
    )
    assert changed == {"currentStatus": "error", "errors": ["x"], "lastProcessTime": T1}


def test_merge_patch_removes_what_went_away() -> None:
    current = {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}, "old": 1, "same": 2}
    desired = {"loadBalancer": {}, "same": 2, "new": 3}
    assert merge_patch(current, desired) == {
        "loadBalancer": {"ingress": None},
        "old": None,
        "new": 3,
    }


# --- the token bucket -------------------------------------------------------------------------


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=10, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.1)
    assert bucket.take() == pytest.approx(0.2)  # queued behind the one before
    now[0] = 10.0  # long idle: refilled to the burst, not beyond
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() > 0


# --- the writer against an in-memory API ------------------------------------------------------


def apply_merge_patch(target: Any, patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            out[key] = apply_merge_patch(out.get(key), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class MemoryApi:
    """Objects' statuses with a resourceVersion each; `interfere` writes of someone else land
    between a read and the next write (so that write gets a 409)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], tuple[int, dict[str, Any] | None]] = {}
        self.writes: list[tuple[str, dict[str, Any]]] = []
        self.reads = 0
        self.interfere = 0

    @staticmethod
    def key(target: StatusTarget) -> tuple[str, str, str]:
        return (target.resource.kind, target.namespace, target.name)

    def add(self, ref: ObjectRef, status: dict[str, Any] | None = None) -> None:
        self.objects[(ref.kind, ref.namespace, ref.name)] = (1, status)

    def status(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self.objects[(ref.kind, ref.namespace, ref.name)][1]

    async def read(self, target: StatusTarget) -> Observed:
        self.reads += 1
        if self.key(target) not in self.objects:
            raise Gone(target.name)
        rv, status = self.objects[self.key(target)]
        return Observed(str(rv), copy.deepcopy(status))

    async def patch(
        self, target: StatusTarget, resource_version: str, status: Mapping[str, Any]
    ) -> Observed:
        rv, current = self.objects[self.key(target)]
        if self.interfere:
            self.interfere -= 1
            self.objects[self.key(target)] = (rv + 1, current)
            raise Conflict(target.name)
        if str(rv) != resource_version:
            raise Conflict(target.name)
        new = apply_merge_patch(current, status)
        self.objects[self.key(target)] = (rv + 1, new)
        self.writes.append((target.name, dict(status)))
        return Observed(str(rv + 1), copy.deepcopy(new))


async def no_sleep(_: float) -> None:
    return None


def writer(api: MemoryApi, *, leading: bool = True) -> StatusWriter:
    w = StatusWriter(api, WriterSettings(OURS, workers=2), metrics=Metrics(), sleep=no_sleep)
    w.set_leading(leading)
    return w


async def drain(w: StatusWriter) -> None:
    task = asyncio.create_task(w.run())
    try:
        await asyncio.sleep(0)
        await asyncio.wait_for(w.idle(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def writes(w: StatusWriter, result: str = "written") -> float:
    value = w.metrics.registry.get_sample_value("turnout_status_writes_total", {"result": result})
    return value or 0.0


async def test_writes_a_status_once_and_never_again_unchanged() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api)
    w.publish([proxy_status(when=T0)])
    await drain(w)
    assert api.status(PROXY) == {
        "currentStatus": "valid",
        "description": "Valid HTTPProxy",
        "conditions": [
            {
                "type": "Valid",
                "status": "True",
                "reason": "Valid",
                "message": "Valid HTTPProxy",
                "observedGeneration": 1,
                "lastTransitionTime": T0,
            }
        ],
    }
    # A recompile: an equal status (a new record, stamped later) writes nothing.
    w.publish([proxy_status(when=T1)])
    await drain(w)
    assert len(api.writes) == 1
    assert writes(w) == 1


async def test_a_restarted_writer_keeps_the_transition_time_the_object_has() -> None:
    api = MemoryApi()
    api.objects[("HTTPProxy", "app", "web")] = (
        1,
        {
            "currentStatus": "valid",
            "description": "old words",
            "conditions": [{**cond("Valid", "True", T0), "message": "old words"}],
        },
    )
    w = writer(api)
    w.publish([proxy_status(description="new words", when=T1)])
    await drain(w)
    status = api.status(PROXY)
    assert status is not None and status["description"] == "new words"
    assert status["conditions"][0]["lastTransitionTime"] == T0


async def test_a_conflict_rereads_and_retries() -> None:
    api = MemoryApi()
    api.add(PROXY)
    api.interfere = 2
    w = writer(api)
    w.publish([proxy_status()])
    await drain(w)
    assert api.status(PROXY) is not None
    assert len(api.writes) == 1
    assert writes(w, "conflict") == 2
    assert api.reads == 3  # the first read, then one per conflict


async def test_statuses_queued_meanwhile_are_coalesced() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api)
    w.publish([proxy_status(valid=False, description="first")])
    w.publish([proxy_status(valid=True, description="second")])
    await drain(w)
    assert [s["description"] for _, s in api.writes] == ["second"]


async def test_only_the_leader_writes_and_a_new_leader_catches_up() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api, leading=False)
    w.publish([proxy_status()])
    await drain(w)
    assert api.writes == []
    w.set_leading(True)
    await drain(w)
    assert len(api.writes) == 1
    assert w.metrics.registry.get_sample_value("turnout_leader") == 1


async def test_a_status_someone_else_overwrote_is_written_again() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api)
    w.publish([proxy_status()])
    await drain(w)
    api.objects[("HTTPProxy", "app", "web")] = (7, {"currentStatus": "tampered"})
    w.observe(PROXY, "7", {"currentStatus": "tampered"})
    assert w.pending == 1
    await drain(w)
    status = api.status(PROXY)
    assert status is not None and status["currentStatus"] == "valid"
    assert len(api.writes) == 2


async def test_route_parents_of_other_controllers_survive() -> None:
    api = MemoryApi()
    theirs = {"parentRef": {"name": "x"}, "controllerName": THEIRS, "conditions": []}
    api.add(HTTPROUTE, {"parents": [theirs]})
    w = writer(api)
    w.publish([route_status()])
    await drain(w)
    status = api.status(HTTPROUTE)
    assert status is not None
    assert [p["controllerName"] for p in status["parents"]] == [THEIRS, OURS]


async def test_a_deleted_object_is_not_retried() -> None:
    api = MemoryApi()
    w = writer(api)
    w.publish([proxy_status()])
    await drain(w)
    assert writes(w, "gone") == 1
    assert api.writes == []


async def test_contour_route_gets_its_process_time() -> None:
    ref = ObjectRef("contour.heptio.com", "Route", "app", "r")
    status = ObjectStatus(
        ref=ref,
        api_version="contour.heptio.com/v1alpha1",
        state=State.VALID,
        summary="valid Route",
        shape=CONTOUR_ROUTE_SHAPE,
        conditions=(Condition("Valid", ConditionStatus.TRUE, "Valid", "valid Route"),),
        fields={"currentStatus": "Valid"},
    )
    api = MemoryApi()
    api.add(ref)
    w = StatusWriter(api, WriterSettings(OURS), metrics=Metrics(), sleep=no_sleep, now=lambda: T1)
    w.set_leading(True)
    w.publish([status])
    await drain(w)
    assert api.status(ref) == {"currentStatus": "Valid", "errors": [], "lastProcessTime": T1}


async def test_an_unreachable_api_is_retried_later() -> None:
    api = MemoryApi()
    api.add(PROXY)
    failures = [OSError("connection refused")]
    patch = api.patch

    async def flaky(target: StatusTarget, rv: str, status: Mapping[str, Any]) -> Observed:
        if failures:
            raise failures.pop()
        return await patch(target, rv, status)

    api.patch = flaky  # type: ignore[method-assign]
    w = writer(api)
    w.publish([proxy_status()])
    task = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(until_written(api), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert writes(w, "error") == 1
    assert len(api.writes) == 1


async def until_written(api: MemoryApi) -> None:
    while not api.writes:
        await asyncio.sleep(0.05)


async def test_the_echo_of_its_own_write_is_not_compared_again() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api)
    w.publish([proxy_status()])
    await drain(w)
    rv, status = api.objects[("HTTPProxy", "app", "web")]
    reads = api.reads
    w.observe(PROXY, str(rv), status)  # the watch event of the write it just made
    assert w.pending == 0
    await drain(w)
    assert (api.reads, len(api.writes)) == (reads, 1)


async def test_a_route_turnout_no_longer_serves_loses_only_our_parent_entry() -> None:
    api = MemoryApi()
    theirs = {"parentRef": {"name": "x"}, "controllerName": THEIRS, "conditions": []}
    api.add(HTTPROUTE, {"parents": [theirs]})
    w = writer(api)
    w.publish([route_status()])
    await drain(w)
    w.observe(HTTPROUTE, "2", api.status(HTTPROUTE))
    # Its Gateway was deleted: the compile gives the route no status any more.
    w.publish([])
    await drain(w)
    assert api.status(HTTPROUTE) == {"parents": [theirs]}
    w.publish([])
    await drain(w)
    assert len(api.writes) == 2  # taken out once


async def test_an_object_without_status_now_keeps_a_status_of_its_own_kind() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api)
    w.publish([proxy_status()])
    await drain(w)
    w.publish([])  # e.g. now of another ingress class: Contour leaves its status alone too
    await drain(w)
    assert api.status(PROXY) is not None and len(api.writes) == 1


async def test_a_deleted_object_is_not_read_to_take_its_status_back() -> None:
    api = MemoryApi()
    api.add(HTTPROUTE)
    w = writer(api)
    w.publish([route_status()])
    await drain(w)
    reads = api.reads
    del api.objects[("HTTPRoute", "app", "web")]
    w.forget(HTTPROUTE)
    w.publish([])
    await drain(w)
    assert api.reads == reads


async def test_an_object_recreated_under_the_same_name_waits_for_its_own_status() -> None:
    api = MemoryApi()
    api.add(PROXY)
    w = writer(api)
    w.publish([proxy_status()])
    await drain(w)
    # Deleted and created again before the next compile: the status computed for the old
    # object (e.g. of another class now) is not written to the new one.
    w.forget(PROXY)
    api.objects[("HTTPProxy", "app", "web")] = (5, None)
    w.observe(PROXY, "5", None)
    await drain(w)
    assert api.status(PROXY) is None and len(api.writes) == 1
    w.publish([proxy_status(description="its own")])
    await drain(w)
    status = api.status(PROXY)
    assert status is not None and status["description"] == "its own"

"""Delta ADS (`DeltaAggregatedResources`) behaviour of `XdsServer`, driven by a real grpc.aio
client on 127.0.0.1: `DeltaClient` for exact protocol steps, `DeltaFakeEnvoy` answering like Envoy
(keeps what it was sent, ACKs, follows the CLAs and route configurations its clusters and
listeners name)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.xds_client import (
    DeltaClient,
    DeltaFakeEnvoy,
    cla,
    cluster,
    delta_names,
    listener,
    snapshot,
    until,
)
from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    EnvoyResources,
)
from turnout.envoy.xds import RefusedResource, XdsServer
from turnout.metrics import Metrics


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def server(metrics: Metrics) -> AsyncIterator[XdsServer]:
    srv = XdsServer(metrics)
    srv.port = await srv.start("127.0.0.1", 0)  # type: ignore[attr-defined]
    yield srv
    await srv.stop(0)


@pytest.fixture
async def clients(server: XdsServer) -> AsyncIterator[Callable[..., DeltaClient]]:
    made: list[DeltaClient] = []

    def make(node_id: str = "node-a") -> DeltaClient:
        client = DeltaClient(server.port, node_id)  # type: ignore[attr-defined]
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture
async def envoys(
    clients: Callable[..., DeltaClient],
) -> AsyncIterator[Callable[..., DeltaFakeEnvoy]]:
    made: list[DeltaFakeEnvoy] = []

    def make(node_id: str = "node-a", **kwargs: Any) -> DeltaFakeEnvoy:
        fake = DeltaFakeEnvoy(clients(node_id), **kwargs).start()
        made.append(fake)
        return fake

    yield make
    for fake in made:
        if fake._task is not None:
            fake._task.cancel()


async def synced(server: XdsServer, resources: EnvoyResources) -> str:
    version = server.set_resources(resources)
    assert await server.wait_acked(version, 3)
    return version


async def test_initial_wildcard_sends_everything_in_make_before_break_order(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy], metrics: Metrics
) -> None:
    fake = envoys()
    await synced(server, snapshot(["a", "b"]))
    assert fake.received() == [
        ("cluster", ("a", "b"), ()),
        ("endpoint", ("a", "b"), ()),
        ("listener", ("http",), ()),
        ("route", ("main",), ()),
    ]
    # Routes only once the clusters and their endpoints are acknowledged.
    assert fake.index("ack", "endpoint") < fake.index("recv", "listener")
    assert fake.index("ack", "listener") < fake.index("recv", "route")
    # A resource's version is the hash of its serialized bytes.
    data = cluster("a").SerializeToString(deterministic=True)
    assert fake.have[CLUSTER_TYPE]["a"] == hashlib.sha256(data).hexdigest()
    assert server.readiness()[0]
    assert server.refused_resources() == ()
    # Envoy's apply time is observed per type.
    for type_short in ("cluster", "endpoint", "listener", "route"):
        count = metrics.registry.get_sample_value(
            "turnout_xds_apply_seconds_count", {"type": type_short}
        )
        assert count == 1


async def test_only_changed_resources_are_sent(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy]
) -> None:
    fake = envoys()
    await synced(server, snapshot(["a", "b"]))
    fake.clear()
    await synced(server, snapshot(["a", "b", "c"]))
    assert fake.received() == [("cluster", ("c",), ()), ("endpoint", ("c",), ())]
    fake.clear()
    await synced(server, snapshot(["a", "b", "c"], route_timeout=30))
    assert fake.received() == [("route", ("main",), ())]
    fake.clear()
    # Identical content: nothing at all.
    server.set_resources(snapshot(["a", "b", "c"], route_timeout=30))
    await fake.client.expect_nothing()
    assert fake.received() == []


async def test_a_message_handed_over_again_is_neither_serialized_nor_sent_again(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy]
) -> None:
    fake = envoys()
    first = snapshot(["a", "b"])
    await synced(server, first)
    fake.clear()
    # The translator never changes a message it handed over and keeps an unchanged piece's
    # message the very same object: the server takes it as it was, by identity. (Changing it in
    # place here shows that nothing of it is serialized or compared again.)
    first.clusters[0].connect_timeout.seconds = 99
    added = cluster("c")
    second = dataclasses.replace(
        first,
        clusters=(*first.clusters, added),
        endpoints=(*first.endpoints, cla("c")),
    )
    await synced(server, second)
    assert fake.received() == [("cluster", ("c",), ()), ("endpoint", ("c",), ())]
    # A new message object is compared by content: equal to what Envoy has, nothing is sent;
    # different, it is.
    fake.clear()
    third = dataclasses.replace(second, clusters=(cluster("a"), cluster("b"), cluster("c")))
    await synced(server, third)
    assert fake.received() == []
    fourth = dataclasses.replace(third, clusters=(cluster("a", timeout=5), *third.clusters[1:]))
    await synced(server, fourth)
    # (A changed EDS cluster warms again: its CLA follows.)
    assert fake.received() == [("cluster", ("a",), ()), ("endpoint", ("a",), ())]


async def test_a_version_names_the_content_whatever_came_between(server: XdsServer) -> None:
    one = server.set_resources(snapshot(["a", "b"]))
    two = server.set_resources(snapshot(["a", "b", "c"]))
    back = server.set_resources(snapshot(["b", "a"]))
    assert one != two
    assert back == one


async def test_removed_clusters_are_announced_after_the_routes_stop_naming_them(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy]
) -> None:
    fake = envoys()
    await synced(server, snapshot(["a"], route_to="a"))
    fake.clear()
    await synced(server, snapshot(["b"], route_to="b"))
    assert fake.received() == [
        ("cluster", ("b",), ()),
        ("endpoint", ("b",), ()),
        ("route", ("main",), ()),
        ("cluster", (), ("a",)),
    ]
    # No route to b before b and its endpoints are acknowledged; a goes after the route.
    assert fake.index("ack", "cluster", ("b",)) < fake.index("recv", "route")
    assert fake.index("ack", "endpoint", ("b",)) < fake.index("recv", "route")
    assert fake.index("ack", "route") < fake.index("recv", "cluster", ())
    assert set(fake.have[CLUSTER_TYPE]) == {"b"}
    # Envoy dropped a's CLA subscription itself; it is not announced as removed.
    assert fake.names[ENDPOINT_TYPE] == {"b"}
    assert server.readiness()[0]


async def test_reconnect_with_initial_resource_versions_gets_only_the_differences(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy]
) -> None:
    first = envoys()
    await synced(server, snapshot(["a", "b"]))
    await first.stop()
    server.set_resources(snapshot(["a", "c"]))
    second = envoys(resume=first)
    await until(lambda: server.readiness()[0], 3)
    # Its listeners and routes are current, so nothing routes to b any more: b goes at once.
    assert sorted(second.received()) == [
        ("cluster", (), ("b",)),
        ("cluster", ("c",), ()),
        ("endpoint", ("c",), ()),
    ]
    assert set(second.have[CLUSTER_TYPE]) == {"a", "c"}


async def test_explicit_names_are_sent_when_they_appear_and_again_when_resubscribed(
    server: XdsServer, clients: Callable[..., DeltaClient]
) -> None:
    server.set_resources(snapshot(["a"]))
    client = clients()
    client.send(ENDPOINT_TYPE, ["x"])
    await client.expect_nothing()
    server.set_resources(EnvoyResources(clusters=(cluster("x"),), endpoints=(cla("a"), cla("x"))))
    response = await client.recv()
    assert (response.type_url, delta_names(response)) == (ENDPOINT_TYPE, ("x",))
    client.ack(response)
    await client.expect_nothing()
    # Subscribing again gets it again though the server knows the client has it.
    client.send(ENDPOINT_TYPE, ["x"])
    again = await client.recv()
    assert delta_names(again) == ("x",)
    assert again.resources[0].version == response.resources[0].version
    client.ack(again)
    # Unsubscribed names are forgotten: a change to x is not sent, a to-be-created name is.
    client.send(ENDPOINT_TYPE, ["y"], ["x"])
    await client.expect_nothing()
    server.set_resources(
        EnvoyResources(clusters=(cluster("x"),), endpoints=(cla("x", port=9), cla("y")))
    )
    response = await client.recv()
    assert delta_names(response) == ("y",)
    assert list(response.removed_resources) == []


async def test_subscriptions_count_even_with_a_stale_nonce(
    server: XdsServer, clients: Callable[..., DeltaClient]
) -> None:
    server.set_resources(snapshot(["a", "b"]))
    client = clients()
    client.send(ENDPOINT_TYPE, ["a"])
    first = await client.recv()
    client.send(ENDPOINT_TYPE, ["b"], nonce="not-the-latest")
    client.ack(first)
    second = await client.recv()
    assert delta_names(second) == ("b",)


async def test_a_nack_naming_one_cluster_refuses_only_that_one(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy], metrics: Metrics
) -> None:
    message = "Error adding/updating cluster(s) b: bad connect timeout"

    def reject(response: Any) -> str | None:
        return message if "b" in delta_names(response) else None

    fake = envoys(reject=reject)
    server.set_resources(snapshot(["a"]))
    await until(lambda: server.readiness()[0], 3)
    server.set_resources(snapshot(["a", "b"], cluster_timeout=2))
    await until(lambda: server.refused_resources() != (), 3)
    assert server.refused_resources() == (RefusedResource("cluster", "b", "node-a", message),)
    nacks = metrics.registry.get_sample_value("turnout_xds_nacks_total", {"type": "cluster"})
    assert nacks == 1
    ready, reason = server.readiness()
    assert not ready and "rejected cluster" in reason
    # The NACKed content is not sent again; the next change of it is.
    fake.clear()
    await fake.client.expect_nothing(0.3)
    server.set_resources(snapshot(["a"]))
    await until(lambda: server.readiness()[0], 3)
    assert server.refused_resources() == ()


async def test_listener_state_follows_delta_acks(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy]
) -> None:
    envoys()
    await synced(server, snapshot(["a"]))
    assert server.listener_state("http").programmed is True
    assert server.listener_state("gone").programmed is True  # no such listener anywhere
    resources = snapshot(["a"])
    await synced(server, EnvoyResources(clusters=resources.clusters, endpoints=resources.endpoints))
    assert server.listener_state("http").programmed is True
    assert server.listener_state("http").exists is False


async def test_a_refused_listener_is_tried_again_with_the_next_change_and_removals_stick(
    server: XdsServer, envoys: Callable[..., DeltaFakeEnvoy]
) -> None:
    message = "Error adding/updating listener(s) busy: cannot bind"

    def reject(response: Any) -> str | None:
        return message if "busy" in delta_names(response) else None

    def with_listeners(*names: str) -> EnvoyResources:
        base = snapshot(["a"])
        extra = tuple(listener(n, "main", 10100 + i) for i, n in enumerate(names))
        return dataclasses.replace(base, listeners=base.listeners + extra)

    fake = envoys(reject=reject)
    await synced(server, with_listeners("old"))
    # One response removes `old` and adds `busy`, which Envoy refuses by name.
    server.set_resources(with_listeners("busy"))
    await until(lambda: server.refused_resources() != (), 3)
    assert set(fake.have[LISTENER_TYPE]) == {"http"}
    fake.clear()
    # The next listener change carries `busy` again (refused again), and `old` stays removed.
    server.set_resources(with_listeners("busy", "new"))
    await until(lambda: ("nack", "listener", ("busy", "new"), ()) in fake.events, 3)
    await until(lambda: not fake.client.inbox.qsize() and server.refused_resources() != (), 3)
    assert server.listener_state("new").programmed is True
    assert server.listener_state("busy").programmed is False
    assert server.readiness(frozenset({"busy"}))[0]

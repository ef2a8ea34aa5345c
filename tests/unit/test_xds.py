"""ADS protocol behaviour of `XdsServer`, driven by a real grpc.aio client on 127.0.0.1.

`AdsClient` is a hand-driven client for exact protocol steps; `FakeEnvoy` answers like Envoy does
(ACK everything, subscribe to the CLAs of EDS clusters and the route configurations of listeners,
ask for listeners once the clusters are in) and records what it received and acknowledged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from envoy.config.route.v3 import route_pb2

from tests.xds_client import (
    SHORT,
    AdsClient,
    FakeEnvoy,
    cla,
    cluster,
    listener,
    pack,
    resource_names,
    route,
    secret,
    snapshot,
    until,
)
from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
    EnvoyResources,
)
from turnout.envoy.xds import XdsServer
from turnout.metrics import Metrics

# --- resource builders --------------------------------------------------------------------------


# --- clients ------------------------------------------------------------------------------------


# --- fixtures -----------------------------------------------------------------------------------


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
async def clients(server: XdsServer) -> AsyncIterator[Callable[..., AdsClient]]:
    made: list[AdsClient] = []

    def make(node_id: str = "node-a") -> AdsClient:
        client = AdsClient(server.port, node_id)  # type: ignore[attr-defined]
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture
async def envoys(
    clients: Callable[..., AdsClient],
) -> AsyncIterator[Callable[..., FakeEnvoy]]:
    made: list[FakeEnvoy] = []

    def make(node_id: str = "node-a", **kwargs: Any) -> FakeEnvoy:
        fake = FakeEnvoy(clients(node_id), **kwargs).start()
        made.append(fake)
        return fake

    yield make
    for fake in made:
        if fake._task is not None:
            fake._task.cancel()


def counter(metrics: Metrics, name: str, type_short: str) -> float:
    value = metrics.registry.get_sample_value(f"turnout_xds_{name}_total", {"type": type_short})
    return value or 0.0


# --- versions -----------------------------------------------------------------------------------


async def test_identical_input_gives_identical_versions_and_no_push(
    server: XdsServer, envoys: Callable[..., FakeEnvoy], metrics: Metrics
) -> None:
    v1 = server.set_resources(snapshot(["a", "b"]))
    # Freshly built, equal messages; another server instance: same version.
    assert server.set_resources(snapshot(["a", "b"])) == v1
    assert XdsServer().set_resources(snapshot(["a", "b"])) == v1
    assert XdsServer().set_resources(snapshot(["a", "c"])) != v1

    fake = envoys()
    assert await server.wait_acked(v1, 2)
    pushes = sum(counter(metrics, "pushes", t) for t in SHORT.values())
    fake.clear()
    assert server.set_resources(snapshot(["a", "b"])) == v1
    await asyncio.sleep(0.15)
    assert fake.events == []
    assert sum(counter(metrics, "pushes", t) for t in SHORT.values()) == pushes


async def test_versions_are_per_type(server: XdsServer, envoys: Callable[..., FakeEnvoy]) -> None:
    server.set_resources(snapshot(["a"]))
    fake = envoys()
    assert await server.wait_acked(server.version or "", 2)
    versions = {t: fake.last[t].version_info for t in (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE)}
    old_route_version = fake.last[ROUTE_TYPE].version_info
    fake.clear()

    v2 = server.set_resources(snapshot(["a"], route_timeout=30))
    assert await server.wait_acked(v2, 2)
    assert fake.received() == [("route", ("main",))]
    assert fake.last[ROUTE_TYPE].version_info != old_route_version
    assert {t: fake.last[t].version_info for t in versions} == versions


async def test_every_response_has_a_fresh_nonce(
    server: XdsServer, envoys: Callable[..., FakeEnvoy]
) -> None:
    server.set_resources(snapshot(["a"]))
    fake = envoys()
    assert await server.wait_acked(server.version or "", 2)
    for timeout in (20, 21, 22):
        assert await server.wait_acked(
            server.set_resources(snapshot(["a"], route_timeout=timeout)), 2
        )
    nonces = [r.nonce for r in fake.last.values()]
    assert all(nonces) and len(set(nonces)) == len(nonces)


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate cluster resource name 'a'"):
        XdsServer().set_resources(EnvoyResources(clusters=(cluster("a"), cluster("a"))))


# --- ACK / NACK / nonces ------------------------------------------------------------------------


async def test_nack_is_recorded_logged_counted_and_not_resent(
    server: XdsServer,
    clients: Callable[..., AdsClient],
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    only_static = EnvoyResources(clusters=(cluster("a", eds=False),))
    server.set_resources(only_static)
    client = clients()
    client.send(CLUSTER_TYPE)
    r1 = await client.recv()
    client.ack(r1)
    await until(lambda: server.readiness()[0])

    server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False, timeout=9),)))
    r2 = await client.recv()
    assert r2.version_info != r1.version_info
    with caplog.at_level(logging.WARNING, logger="turnout.envoy.xds"):
        client.send(CLUSTER_TYPE, nonce=r2.nonce, version=r1.version_info, error="bad cluster a")
        await until(lambda: bool(server.nacks()))

    nack = server.nacks()[0]
    assert (nack.node, nack.type_url, nack.version, nack.message) == (
        "node-a",
        CLUSTER_TYPE,
        r2.version_info,
        "bad cluster a",
    )
    expected = f"Envoy node-a rejected cluster version {r2.version_info}: bad cluster a"
    assert server.readiness() == (False, expected)
    assert expected in caplog.text
    assert counter(metrics, "nacks", "cluster") == 1
    assert [(r.type, r.name, r.node, r.message) for r in server.refused_resources()] == [
        ("cluster", "a", "node-a", "bad cluster a")
    ]

    # Neither the same content again nor a new request on the stream brings the NACKed version back.
    server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False, timeout=9),)))
    client.send(CLUSTER_TYPE, nonce=r2.nonce, version=r1.version_info)
    await client.expect_nothing()
    assert server.readiness() == (False, expected)

    # A later version that is ACKed clears the rejection.
    v3 = server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False, timeout=3),)))
    r3 = await client.recv()
    client.ack(r3)
    assert await server.wait_acked(v3, 2)
    assert server.readiness()[0]
    assert counter(metrics, "acks", "cluster") == 2
    assert server.refused_resources() == ()


async def test_reverting_to_the_last_good_version_after_a_nack_is_sent(
    server: XdsServer, clients: Callable[..., AdsClient]
) -> None:
    good = EnvoyResources(clusters=(cluster("a", eds=False),))
    v1 = server.set_resources(good)
    client = clients()
    client.send(CLUSTER_TYPE)
    r1 = await client.recv()
    client.ack(r1)
    server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False, timeout=9),)))
    r2 = await client.recv()
    client.send(CLUSTER_TYPE, nonce=r2.nonce, version=r1.version_info, error="no")
    await until(lambda: not server.readiness()[0] and "rejected" in server.readiness()[1])

    assert server.set_resources(good) == v1
    r3 = await client.recv()
    assert r3.version_info == r1.version_info
    client.ack(r3)
    assert await server.wait_acked(v1, 2)


async def test_ack_of_new_names_does_not_hide_a_rejection(
    server: XdsServer, clients: Callable[..., AdsClient]
) -> None:
    def routes(timeout: int) -> EnvoyResources:
        return EnvoyResources(routes=(route("main", "a", timeout=timeout), route("other", "a")))

    server.set_resources(routes(15))
    client = clients()
    client.send(ROUTE_TYPE, ["main"])
    r1 = await client.recv()
    client.ack(r1, ["main"])
    server.set_resources(routes(99))
    r2 = await client.recv()
    client.send(ROUTE_TYPE, ["main"], nonce=r2.nonce, version=r1.version_info, error="bad main")
    await until(lambda: bool(server.nacks()))

    # The newly subscribed name goes out (with the current version); its ACK says nothing about
    # "main", which Envoy still holds in its old form.
    client.send(ROUTE_TYPE, ["main", "other"], nonce=r2.nonce, version=r1.version_info)
    r3 = await client.recv()
    assert resource_names(r3) == ["other"]
    assert r3.version_info == r2.version_info
    client.ack(r3, ["main", "other"])
    await client.expect_nothing()
    ready, reason = server.readiness()
    assert not ready and reason.endswith("bad main")


async def test_stale_nonce_is_ignored(server: XdsServer, clients: Callable[..., AdsClient]) -> None:
    server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False),)))
    client = clients()
    client.send(CLUSTER_TYPE)
    r1 = await client.recv()

    # At most one un-ACKed response per type: the change waits for the ACK, then goes out once.
    server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False, timeout=2),)))
    v3 = server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False, timeout=3),)))
    await client.expect_nothing()
    client.ack(r1)
    r2 = await client.recv()
    await client.expect_nothing()
    assert r2.nonce != r1.nonce

    # A NACK carrying the old nonce is stale: not recorded, nothing resent.
    client.send(CLUSTER_TYPE, nonce=r1.nonce, version=r1.version_info, error="late complaint")
    await client.expect_nothing()
    assert server.nacks() == []

    client.ack(r2)
    assert await server.wait_acked(v3, 2)
    assert server.readiness()[0]


async def test_stale_nonce_subscription_change_is_ignored(
    server: XdsServer, clients: Callable[..., AdsClient]
) -> None:
    server.set_resources(
        EnvoyResources(clusters=(cluster("a"), cluster("b")), endpoints=(cla("a"), cla("b")))
    )
    client = clients()
    client.send(ENDPOINT_TYPE, ["a"])
    e1 = await client.recv()
    client.ack(e1, ["a"])

    client.send(ENDPOINT_TYPE, ["a", "b"], nonce="not-the-latest", version=e1.version_info)
    await client.expect_nothing()
    client.send(ENDPOINT_TYPE, ["a", "b"], nonce=e1.nonce, version=e1.version_info)
    e2 = await client.recv()
    assert resource_names(e2) == ["b"]


# --- subscriptions ------------------------------------------------------------------------------


async def test_subset_types_follow_subscriptions(
    server: XdsServer, clients: Callable[..., AdsClient]
) -> None:
    clusters = (cluster("a"), cluster("b"))
    server.set_resources(EnvoyResources(clusters=clusters, endpoints=(cla("a"), cla("b"))))
    client = clients()
    client.send(ENDPOINT_TYPE, ["a"])
    e1 = await client.recv()
    assert resource_names(e1) == ["a"]

    # Newly subscribed names go out even though the version did not change.
    client.ack(e1, ["a", "b"])
    e2 = await client.recv()
    assert resource_names(e2) == ["b"]
    assert e2.version_info == e1.version_info

    # A name that does not exist yet is remembered and sent when it appears.
    client.ack(e2, ["a", "b", "c"])
    await client.expect_nothing()
    server.set_resources(
        EnvoyResources(clusters=(*clusters, cluster("c")), endpoints=(cla("a"), cla("b"), cla("c")))
    )
    e3 = await client.recv()
    assert resource_names(e3) == ["c"]

    # Unsubscribing and subscribing again resends.
    client.ack(e3, ["a", "c"])
    await client.expect_nothing()
    client.send(ENDPOINT_TYPE, ["a", "b", "c"], nonce=e3.nonce, version=e3.version_info)
    e4 = await client.recv()
    assert resource_names(e4) == ["b"]

    # Only changed names are resent when content changes.
    client.ack(e4, ["a", "b", "c"])
    server.set_resources(
        EnvoyResources(
            clusters=(*clusters, cluster("c")), endpoints=(cla("a"), cla("b", 9090), cla("c"))
        )
    )
    e5 = await client.recv()
    assert resource_names(e5) == ["b"]
    assert e5.version_info != e4.version_info


async def test_full_state_types_always_carry_everything(
    server: XdsServer, clients: Callable[..., AdsClient]
) -> None:
    server.set_resources(
        EnvoyResources(clusters=(cluster("a", eds=False), cluster("b", eds=False)))
    )
    client = clients()
    client.send(CLUSTER_TYPE)
    r1 = await client.recv()
    assert resource_names(r1) == ["a", "b"]
    client.ack(r1)
    server.set_resources(
        EnvoyResources(clusters=(cluster("a", eds=False), cluster("b", eds=False, timeout=4)))
    )
    r2 = await client.recv()
    assert resource_names(r2) == ["a", "b"]


async def test_reconnect_with_current_version_is_not_resent(
    server: XdsServer, clients: Callable[..., AdsClient]
) -> None:
    server.set_resources(EnvoyResources(clusters=(cluster("a", eds=False),)))
    first = clients()
    first.send(CLUSTER_TYPE)
    r1 = await first.recv()
    first.ack(r1)
    await first.close()

    again = clients()
    again.send(CLUSTER_TYPE, version=r1.version_info)
    await again.expect_nothing()
    await until(lambda: server.readiness()[0])

    # A nonce from an earlier stream is not "stale" before this stream sent anything.
    other = clients("node-b")
    other.send(CLUSTER_TYPE, version="something-else", nonce="from-the-old-stream")
    assert resource_names(await other.recv()) == ["a"]


# --- make-before-break --------------------------------------------------------------------------


async def test_initial_push_order(server: XdsServer, envoys: Callable[..., FakeEnvoy]) -> None:
    v1 = server.set_resources(snapshot(["a"]))
    fake = envoys()
    assert await server.wait_acked(v1, 2)
    assert fake.received() == [
        ("cluster", ("a",)),
        ("endpoint", ("a",)),
        ("listener", ("http",)),
        ("route", ("main",)),
    ]
    # Listeners only after the endpoints of the clusters were acknowledged, routes after listeners.
    assert fake.index("recv", "listener") > fake.index("ack", "endpoint")
    assert fake.index("recv", "route") > fake.index("ack", "listener")


async def test_stale_clusters_are_removed_last(
    server: XdsServer, envoys: Callable[..., FakeEnvoy]
) -> None:
    server.set_resources(snapshot(["a"], route_to="a"))
    fake = envoys()
    assert await server.wait_acked(server.version or "", 2)
    fake.clear()

    v2 = server.set_resources(snapshot(["b"], route_to="b", listener_port=10081))
    assert await server.wait_acked(v2, 2)
    assert fake.received() == [
        ("cluster", ("a", "b")),  # the new cluster arrives, the old one stays
        ("endpoint", ("b",)),  # the new cluster's CLA, after CDS
        ("listener", ("http",)),
        ("route", ("main",)),
        ("cluster", ("b",)),  # the old cluster goes only after LDS and RDS were ACKed
    ]
    assert fake.index("recv", "endpoint") > fake.index("recv", "cluster", ("a", "b"))
    assert fake.index("recv", "listener") > fake.index("ack", "endpoint", ("b",))
    assert fake.index("recv", "route") > fake.index("ack", "listener")
    assert fake.index("recv", "cluster", ("b",)) > fake.index("ack", "route")
    assert fake.names[ENDPOINT_TYPE] == ["b"]
    assert server.readiness()[0]


async def test_stale_clusters_stay_while_new_routes_are_rejected(
    server: XdsServer, envoys: Callable[..., FakeEnvoy]
) -> None:
    def reject_routes_to_b(response: Any) -> str | None:
        if response.type_url == ROUTE_TYPE:
            rc = route_pb2.RouteConfiguration()
            response.resources[0].Unpack(rc)
            action = rc.virtual_hosts[0].routes[0].route
            if action.cluster == "b" and action.timeout.seconds == 15:
                return "route to b rejected"
        return None

    server.set_resources(snapshot(["a"], route_to="a"))
    fake = envoys(reject=reject_routes_to_b)
    assert await server.wait_acked(server.version or "", 2)
    fake.clear()

    v2 = server.set_resources(snapshot(["b"], route_to="b"))
    assert not await server.wait_acked(v2, 0.3)
    assert fake.received() == [("cluster", ("a", "b")), ("endpoint", ("b",)), ("route", ("main",))]
    ready, reason = server.readiness()
    assert not ready and reason.startswith("Envoy node-a rejected route version")

    # A fixed route goes out; only then does the stale cluster leave.
    v3 = server.set_resources(snapshot(["b"], route_to="b", route_timeout=5))
    assert await server.wait_acked(v3, 2)
    assert fake.received()[3:] == [("route", ("main",)), ("cluster", ("b",))]
    assert server.readiness()[0]


async def test_changed_eds_cluster_gets_its_cla_again(
    server: XdsServer, envoys: Callable[..., FakeEnvoy]
) -> None:
    server.set_resources(snapshot(["a"]))
    fake = envoys()
    assert await server.wait_acked(server.version or "", 2)
    fake.clear()
    # Envoy re-warms a changed EDS cluster and finishes only when a CLA response arrives, even an
    # unchanged one.
    v2 = server.set_resources(snapshot(["a"], cluster_timeout=7))
    assert await server.wait_acked(v2, 2)
    assert fake.received() == [("cluster", ("a",)), ("endpoint", ("a",))]


# --- readiness, metrics, secrets ----------------------------------------------------------------


async def test_readiness_states(
    server: XdsServer,
    clients: Callable[..., AdsClient],
    envoys: Callable[..., FakeEnvoy],
    metrics: Metrics,
) -> None:
    assert server.readiness() == (False, "no configuration has been built yet")
    v1 = server.set_resources(snapshot(["a"]))
    assert server.readiness() == (False, "no Envoy is connected")
    assert not await server.wait_acked(v1, 0.05)

    silent = clients("node-silent")
    silent.send(CLUSTER_TYPE)
    await silent.recv()
    await until(lambda: server.connected() == 1)
    ready, reason = server.readiness()
    assert not ready
    assert reason.startswith("waiting for Envoy node-silent to acknowledge cluster version")
    assert metrics.registry.get_sample_value("turnout_xds_connected_envoys") == 1
    await silent.close()
    await until(lambda: server.connected() == 0)

    fake = envoys("node-a")
    assert await server.wait_acked(v1, 2)
    assert server.readiness() == (True, f"Envoy node-a acknowledged version {v1}")

    # Every connected Envoy counts.
    late = clients("node-late")
    late.send(CLUSTER_TYPE)
    await until(lambda: server.connected() == 2)
    ready, reason = server.readiness()
    assert not ready and "node-late" in reason

    # A new snapshot is not ready until acknowledged; the old version still counts as acked.
    await late.close()
    v2 = server.set_resources(snapshot(["a"], route_timeout=3))
    assert not server.readiness()[0]
    assert await server.wait_acked(v2, 2)
    assert await server.wait_acked(v1, 0)
    assert server.readiness()[0]

    await fake.stop()
    await until(lambda: server.connected() == 0)
    assert server.readiness() == (False, "no Envoy is connected")
    assert metrics.registry.get_sample_value("turnout_xds_connected_envoys") == 0
    assert counter(metrics, "pushes", "cluster") >= 2
    assert counter(metrics, "acks", "route") >= 2


async def test_secrets_are_never_logged(
    server: XdsServer,
    clients: Callable[..., AdsClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = "-----BEGIN PRIVATE KEY----- sUp3r-s3cr3t"
    caplog.set_level(logging.DEBUG)
    server.set_resources(EnvoyResources(secrets=(secret("tls", key),)))
    client = clients()
    client.send(SECRET_TYPE, ["tls"])
    s1 = await client.recv()
    assert resource_names(s1) == ["tls"]
    client.send(SECRET_TYPE, ["tls"], nonce=s1.nonce, error="bad key")
    await until(lambda: bool(server.nacks()))
    assert "rejected secret" in caplog.text
    assert "sUp3r-s3cr3t" not in caplog.text


async def test_readiness_waits_for_the_secrets_listeners_name(
    server: XdsServer, envoys: Callable[..., FakeEnvoy]
) -> None:
    # A listener that terminates TLS with an SDS secret: Envoy is not serving it until it has
    # subscribed to and acknowledged that secret, so /readyz must not say ready before.
    from envoy.config.core.v3 import base_pb2 as core_base_pb2
    from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

    resources = snapshot(["a"], secrets=[secret("cert", "KEY")])
    tls_listener = listener("http", "main")
    chain = tls_listener.filter_chains[0]
    context = tls_pb2.DownstreamTlsContext()
    context.common_tls_context.tls_certificate_sds_secret_configs.add(
        name="cert"
    ).sds_config.ads.SetInParent()
    chain.transport_socket.CopyFrom(
        core_base_pb2.TransportSocket(
            name="envoy.transport_sockets.tls", typed_config=pack(context)
        )
    )
    resources = dataclasses.replace(resources, listeners=(tls_listener,))
    version = server.set_resources(resources)
    fake = envoys("node-tls")
    await until(lambda: "route" in {t for _, t, _ in fake.events})
    await asyncio.sleep(0.1)
    ready, reason = server.readiness()
    assert not ready and "secret" in reason, reason
    fake._subscribe(SECRET_TYPE, ["cert"])
    assert await server.wait_acked(version, 2)
    assert server.readiness()[0]

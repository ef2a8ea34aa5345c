"""Scoped route configurations (SRDS) over ADS: Envoy subscribes to them with a wildcard, gets
them after the listeners and before the route configurations they name, as the whole set over
SotW and as changes over Delta; readiness counts the route configurations the scopes name.
With `inline_scopes` (`--xds-inline-scopes`) a Delta stream takes each scope with its route
configuration inline; without, it takes them as a SotW stream does, naming them."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import random
from collections.abc import AsyncIterator

import pytest
from envoy.config.route.v3 import scoped_route_pb2

from tests.xds_client import AdsClient, DeltaClient, delta_names, resource_names, unpacked
from turnout.envoy.resources import (
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    TYPE_ORDER,
    EnvoyResources,
)
from turnout.envoy.translate import TranslateMemo, TranslateOptions, translate
from turnout.envoy.xds import XdsServer
from turnout.graph.model import (
    DirectResponse,
    Listener,
    ListenerProtocol,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    VirtualHost,
)
from turnout.metrics import Metrics
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "team-a", "app")
SCOPED = TranslateOptions(scoped_routes_min_hosts=1)
A, B = "ingress_http/a.example.com", "ingress_http/b.example.com"
C = "ingress_http/c.example.com"


def resources(hosts: dict[str, str]) -> EnvoyResources:
    """The scoped translation of one listener whose hosts answer 200 with the given bodies."""
    return translate(resources_graph(hosts), SCOPED)


def resources_graph(hosts: dict[str, str]) -> RoutingGraph:
    vhosts = tuple(
        VirtualHost(
            host,
            host,
            (Route(RouteMatch(), DirectResponse(200, body), RouteSource(OWNER, "spec.routes[0]")),),
            OWNER,
        )
        for host, body in hosts.items()
    )
    lst = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts)
    return RoutingGraph(listeners=(lst,))


@pytest.fixture
async def server() -> AsyncIterator[XdsServer]:
    srv = XdsServer(Metrics())
    srv.port = await srv.start("127.0.0.1", 0)  # type: ignore[attr-defined]
    yield srv
    await srv.stop(0)


@pytest.fixture
async def inline() -> AsyncIterator[XdsServer]:
    """A server whose Delta streams take scopes with their route configurations inline."""
    srv = XdsServer(Metrics(), inline_scopes=True)
    srv.port = await srv.start("127.0.0.1", 0)  # type: ignore[attr-defined]
    yield srv
    await srv.stop(0)


def test_scopes_go_after_listeners_and_before_route_configurations() -> None:
    order = list(TYPE_ORDER)
    assert order.index(LISTENER_TYPE) < order.index(SCOPED_ROUTE_TYPE) < order.index(ROUTE_TYPE)


async def take_a_and_b(client: DeltaClient | AdsClient) -> None:
    """As Envoy starts: the listener, the scopes, then the tables of hosts a and b, each ACKed
    (a SotW ACK names what it holds), and nothing more to send."""
    client.send(LISTENER_TYPE)
    client.ack(await client.recv())
    client.send(SCOPED_ROUTE_TYPE)
    client.ack(await client.recv())
    client.send(ROUTE_TYPE, [A, B])
    routes = await client.recv()
    if isinstance(client, AdsClient):
        client.ack(routes, [A, B])
    else:
        client.ack(routes)
    await client.expect_nothing()


async def test_delta_sends_scopes_then_only_the_changed_route_configuration(
    server: XdsServer,
) -> None:
    server.set_resources(resources({"a.example.com": "a", "b.example.com": "b"}))
    client = DeltaClient(server.port)  # type: ignore[attr-defined]
    try:
        client.send(LISTENER_TYPE)
        client.ack(await client.recv())
        client.send(SCOPED_ROUTE_TYPE)  # Envoy's SRDS subscription is a wildcard
        scopes = await client.recv()
        assert scopes.type_url == SCOPED_ROUTE_TYPE
        assert delta_names(scopes) == (A, B)
        scope = scoped_route_pb2.ScopedRouteConfiguration()
        scopes.resources[0].resource.Unpack(scope)
        assert scope.route_configuration_name == A
        client.ack(scopes)
        await client.expect_nothing()
        # The route configurations the scopes name count before Envoy has asked for them.
        assert not server.readiness()[0]
        client.send(ROUTE_TYPE, [A, B])
        routes = await client.recv()
        assert delta_names(routes) == (A, B)
        client.ack(routes)
        await client.expect_nothing()
        assert server.readiness()[0]
        # One host changes: its route configuration alone, no scope.
        version = server.set_resources(resources({"a.example.com": "a2", "b.example.com": "b"}))
        changed = await client.recv()
        assert (changed.type_url, delta_names(changed)) == (ROUTE_TYPE, (A,))
        client.ack(changed)
        await client.expect_nothing()
        assert await server.wait_acked(version, 2)
        # A host goes: its scope is removed.
        server.set_resources(resources({"a.example.com": "a2"}))
        removed = await client.recv()
        assert removed.type_url == SCOPED_ROUTE_TYPE
        assert (delta_names(removed), list(removed.removed_resources)) == ((), [B])
    finally:
        await client.close()


async def test_new_route_configurations_go_before_changed_ones_and_old_scopes_after(
    server: XdsServer,
) -> None:
    """A split host's index (a changed route configuration) may name scopes just added: their
    route configurations go first. A scope the new configuration drops stays until Envoy took
    the route configurations that stopped naming it."""
    c = "ingress_http/c.example.com"
    hosts = {"a.example.com": "a", "b.example.com": "b"}
    server.set_resources(resources(hosts))
    client = DeltaClient(server.port)  # type: ignore[attr-defined]
    try:
        await take_a_and_b(client)
        # c comes while a changes: the scope, then c's table alone, then a's.
        server.set_resources(resources({**hosts, "a.example.com": "a2", "c.example.com": "c"}))
        scopes = await client.recv()
        assert (scopes.type_url, delta_names(scopes)) == (SCOPED_ROUTE_TYPE, (c,))
        # As Envoy does: it asks for a new scope's table while taking the scope, then ACKs.
        client.send(ROUTE_TYPE, [c])
        await client.expect_nothing()  # tables wait for the scopes' ACK
        client.ack(scopes)
        first = await client.recv()
        assert (first.type_url, delta_names(first)) == (ROUTE_TYPE, (c,))
        client.ack(first)
        second = await client.recv()
        assert (second.type_url, delta_names(second)) == (ROUTE_TYPE, (A,))
        client.ack(second)
        await client.expect_nothing()
        # b goes while a changes: a's table first, then b's scope is removed.
        server.set_resources(resources({"a.example.com": "a3", "c.example.com": "c"}))
        changed = await client.recv()
        assert (changed.type_url, delta_names(changed)) == (ROUTE_TYPE, (A,))
        client.ack(changed)
        removed = await client.recv()
        assert removed.type_url == SCOPED_ROUTE_TYPE
        assert list(removed.removed_resources) == [B]
    finally:
        await client.close()


async def test_sotw_sends_every_scope_in_each_response(server: XdsServer) -> None:
    server.set_resources(resources({"a.example.com": "a", "b.example.com": "b"}))
    client = AdsClient(server.port)  # type: ignore[attr-defined]
    try:
        client.send(LISTENER_TYPE)
        client.ack(await client.recv())
        client.send(SCOPED_ROUTE_TYPE)
        scopes = await client.recv()
        assert resource_names(scopes) == [A, B]
        client.ack(scopes)
        client.send(ROUTE_TYPE, [A, B])
        routes = await client.recv()
        assert resource_names(routes) == [A, B]
        client.ack(routes, [A, B])
        await client.expect_nothing()
        assert server.readiness()[0]
        server.set_resources(resources({"a.example.com": "a"}))
        # The whole set: a missing scope is a removed one.
        assert resource_names(await client.recv()) == [A]
    finally:
        await client.close()


async def test_sotw_sends_a_new_route_configuration_before_a_changed_one(
    server: XdsServer,
) -> None:
    c = "ingress_http/c.example.com"
    hosts = {"a.example.com": "a", "b.example.com": "b"}
    server.set_resources(resources(hosts))
    client = AdsClient(server.port)  # type: ignore[attr-defined]
    try:
        await take_a_and_b(client)
        server.set_resources(resources({**hosts, "a.example.com": "a2", "c.example.com": "c"}))
        scopes = await client.recv()
        assert resource_names(scopes) == [A, B, c]
        client.send(ROUTE_TYPE, [A, B, c])
        client.ack(scopes)
        first = await client.recv()
        assert (first.type_url, resource_names(first)) == (ROUTE_TYPE, [c])
        client.ack(first, [A, B, c])
        second = await client.recv()
        assert (second.type_url, resource_names(second)) == (ROUTE_TYPE, [A])
        client.ack(second, [A, B, c])
        await client.expect_nothing()
        assert server.readiness()[0]
    finally:
        await client.close()


# -- inline scopes (Delta) ----------------------------------------------------------------------


def inline_tables(response: object) -> dict[str, str]:
    """Scope name -> the name of the route configuration it holds inline, of a scope response
    whose scopes name none."""
    out = {}
    for scope in unpacked(response):
        assert scope.route_configuration_name == ""
        assert scope.HasField("route_configuration")
        out[scope.name] = scope.route_configuration.name
    return out


async def test_delta_takes_each_scope_with_its_table_inline(inline: XdsServer) -> None:
    """No route configuration over RDS: Envoy is ready once it took the listener and the scopes,
    a changed host sends its scope alone, a new host its scope, a gone host its removal."""
    server = inline
    server.set_resources(resources({"a.example.com": "a", "b.example.com": "b"}))
    client = DeltaClient(server.port)  # type: ignore[attr-defined]
    try:
        client.send(LISTENER_TYPE)
        client.ack(await client.recv())
        client.send(SCOPED_ROUTE_TYPE)
        scopes = await client.recv()
        assert scopes.type_url == SCOPED_ROUTE_TYPE
        assert inline_tables(scopes) == {A: A, B: B}
        # Each scope's version is the sha256 of what it carries, the inline message.
        for res in scopes.resources:
            assert res.version == hashlib.sha256(res.resource.value).hexdigest()
        assert not server.readiness()[0]
        client.ack(scopes)
        await client.expect_nothing()
        assert server.readiness()[0]
        # One host changes: its scope alone, with its new table.
        version = server.set_resources(resources({"a.example.com": "a2", "b.example.com": "b"}))
        changed = await client.recv()
        assert (changed.type_url, delta_names(changed)) == (SCOPED_ROUTE_TYPE, (A,))
        (scope,) = unpacked(changed)
        assert b"a2" in scope.route_configuration.SerializeToString()
        client.ack(changed)
        await client.expect_nothing()
        assert await server.wait_acked(version, 2)
        server.set_resources(resources({"a.example.com": "a2", "c.example.com": "c"}))
        added = await client.recv()
        assert inline_tables(added) == {C: C}
        client.ack(added)
        removed = await client.recv()
        assert (delta_names(removed), list(removed.removed_resources)) == ((), [B])
    finally:
        await client.close()


def test_an_inline_scope_is_what_protobuf_serializes() -> None:
    """The inline scope is joined from the scope's and the table's bytes: the very bytes of the
    message with `route_configuration` set, the route configuration the translation has."""
    translated = resources({"a.example.com": "a", "b.example.com": "b"})
    server = XdsServer(Metrics(), inline_scopes=True)
    server.set_resources(translated)
    snapshot = server._snapshot
    assert snapshot is not None and snapshot.inline is not None
    tables = {rc.name: rc for rc in translated.routes}
    for scope in translated.scoped_routes:
        expected = scoped_route_pb2.ScopedRouteConfiguration()
        expected.CopyFrom(scope)
        expected.ClearField("route_configuration_name")
        expected.route_configuration.CopyFrom(tables[scope.route_configuration_name])
        packed = snapshot.inline.resources[scope.name].packed()
        assert packed.value == expected.SerializeToString(deterministic=True)


async def test_sotw_and_delta_streams_each_take_their_form(inline: XdsServer) -> None:
    server = inline
    server.set_resources(resources({"a.example.com": "a", "b.example.com": "b"}))
    sotw = AdsClient(server.port, node_id="sotw")  # type: ignore[attr-defined]
    delta = DeltaClient(server.port, node_id="delta")  # type: ignore[attr-defined]
    try:
        await take_a_and_b(sotw)
        delta.send(LISTENER_TYPE)
        delta.ack(await delta.recv())
        delta.send(SCOPED_ROUTE_TYPE)
        scopes = await delta.recv()
        assert inline_tables(scopes) == {A: A, B: B}
        delta.ack(scopes)
        await delta.expect_nothing()
        assert server.readiness()[0]
        server.set_resources(resources({"a.example.com": "a2", "b.example.com": "b"}))
        changed = await sotw.recv()
        assert (changed.type_url, resource_names(changed)) == (ROUTE_TYPE, [A])
        sotw.ack(changed, [A, B])
        inline = await delta.recv()
        assert (inline.type_url, delta_names(inline)) == (SCOPED_ROUTE_TYPE, (A,))
        delta.ack(inline)
        await sotw.expect_nothing()
        await delta.expect_nothing()
        assert server.readiness()[0]
    finally:
        await sotw.close()
        await delta.close()


async def test_inline_new_scopes_go_before_changed_ones_and_old_scopes_after(
    inline: XdsServer,
) -> None:
    """Inline, a split host's index scope may name path scopes just added: those go first. A
    scope the configuration drops stays until Envoy took the scopes that stopped naming it."""
    server = inline
    hosts = {"a.example.com": "a", "b.example.com": "b"}
    server.set_resources(resources(hosts))
    client = DeltaClient(server.port)  # type: ignore[attr-defined]
    try:
        client.send(LISTENER_TYPE)
        client.ack(await client.recv())
        client.send(SCOPED_ROUTE_TYPE)
        client.ack(await client.recv())
        server.set_resources(resources({**hosts, "a.example.com": "a2", "c.example.com": "c"}))
        first = await client.recv()
        assert (first.type_url, delta_names(first)) == (SCOPED_ROUTE_TYPE, (C,))
        await client.expect_nothing()
        client.ack(first)
        second = await client.recv()
        assert (second.type_url, delta_names(second)) == (SCOPED_ROUTE_TYPE, (A,))
        client.ack(second)
        await client.expect_nothing()
        server.set_resources(resources({"a.example.com": "a3", "c.example.com": "c"}))
        changed = await client.recv()
        assert (delta_names(changed), list(changed.removed_resources)) == ((A,), [])
        client.ack(changed)
        removed = await client.recv()
        assert (delta_names(removed), list(removed.removed_resources)) == ((), [B])
    finally:
        await client.close()


async def test_patched_inline_scopes_are_a_fresh_build(inline: XdsServer) -> None:
    """What a Delta stream holds after a walk of changes is what a fresh server sends at once
    (names and versions): the inline form patched per change is the one made afresh."""
    server = inline
    steps = [
        {"a.example.com": "a", "b.example.com": "b"},
        {"a.example.com": "a2", "b.example.com": "b"},
        {"a.example.com": "a2", "b.example.com": "b", "c.example.com": "c"},
        {"a.example.com": "a2", "c.example.com": "c2"},
        {"a.example.com": "a", "c.example.com": "c2", "d.example.com": "d"},
    ]
    walked = await held_scopes(server, steps)
    fresh = XdsServer(Metrics(), inline_scopes=True)
    fresh.port = await fresh.start("127.0.0.1", 0)  # type: ignore[attr-defined]
    try:
        assert walked == await held_scopes(fresh, steps[-1:])
    finally:
        await fresh.stop(0)


async def held_scopes(server: XdsServer, steps: list[dict[str, str]]) -> dict[str, str]:
    """Scope name -> version a Delta stream holds after taking each of `steps` in turn."""
    held: dict[str, str] = {}
    client = DeltaClient(server.port)  # type: ignore[attr-defined]
    try:
        client.send(LISTENER_TYPE)
        client.send(SCOPED_ROUTE_TYPE)
        for hosts in steps:
            version = server.set_resources(resources(hosts))
            while not server.acked(version):
                response = await client.recv()
                if response.type_url == SCOPED_ROUTE_TYPE:
                    held.update((res.name, res.version) for res in response.resources)
                    for name in response.removed_resources:
                        del held[name]
                client.ack(response)
                await asyncio.sleep(0.05)
    finally:
        await client.close()
    return held


async def test_a_changed_table_under_the_very_same_scope_is_sent_inline(inline: XdsServer) -> None:
    """The inline scope follows its route configuration even when the scope message is the
    very same object (only the table changed)."""
    server = inline
    first = resources({"a.example.com": "a", "b.example.com": "b"})
    server.set_resources(first)
    client = DeltaClient(server.port)  # type: ignore[attr-defined]
    try:
        client.send(LISTENER_TYPE)
        client.ack(await client.recv())
        client.send(SCOPED_ROUTE_TYPE)
        client.ack(await client.recv())
        tables = resources({"a.example.com": "a2", "b.example.com": "b"}).routes
        server.set_resources(dataclasses.replace(first, routes=tables))
        changed = await client.recv()
        assert (changed.type_url, delta_names(changed)) == (SCOPED_ROUTE_TYPE, (A,))
        (scope,) = unpacked(changed)
        assert b"a2" in scope.route_configuration.SerializeToString()
    finally:
        await client.close()


def test_inline_scopes_patched_over_a_random_walk_are_a_fresh_build() -> None:
    """Hosts come, go and change at random, translated with a carried memo (unchanged hosts keep
    their very messages, so the patch path is taken): after every step the inline form the
    server patched is, name by name, the one a fresh server makes."""
    rng = random.Random(11)
    memo = TranslateMemo()
    walked = XdsServer(Metrics(), inline_scopes=True)
    hosts: dict[str, str] = {}
    for _ in range(40):
        host = f"{rng.choice('abcdef')}.example.com"
        if host in hosts and rng.random() < 0.3:
            del hosts[host]
        else:
            hosts[host] = rng.choice(("x", "y", "z"))
        graph = resources_graph(hosts)
        walked.set_resources(translate(graph, SCOPED, memo))
        fresh = XdsServer(Metrics(), inline_scopes=True)
        fresh.set_resources(translate(graph, SCOPED))
        mine, theirs = walked._snapshot, fresh._snapshot
        assert mine is not None and theirs is not None
        assert mine.inline is not None and theirs.inline is not None
        digests = {n: r.digest for n, r in mine.inline.resources.items()}
        assert digests == {n: r.digest for n, r in theirs.inline.resources.items()}
        assert mine.inline.version == theirs.inline.version
        assert mine.inline.referenced == theirs.inline.referenced


def test_a_restored_snapshot_gives_delta_streams_the_same_inline_scopes() -> None:
    """A restart serving the saved state (`XdsServer.restore`) hands Delta streams the inline
    scopes the compiling server had, byte for byte, under the same version."""
    compiled = XdsServer(Metrics(), inline_scopes=True)
    version = compiled.set_resources(resources({"a.example.com": "a", "b.example.com": "b"}))
    restored = XdsServer(Metrics(), inline_scopes=True)
    restored.restore(compiled.served(), version)
    before, after = compiled._snapshot, restored._snapshot
    assert before is not None and before.inline is not None
    assert after is not None and after.inline is not None
    assert after.inline.version == before.inline.version
    assert {n: r.packed().value for n, r in after.inline.resources.items()} == {
        n: r.packed().value for n, r in before.inline.resources.items()
    }

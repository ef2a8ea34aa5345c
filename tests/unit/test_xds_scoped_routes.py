"""Scoped route configurations (SRDS) over ADS: Envoy subscribes to them with a wildcard, gets
them after the listeners and before the route configurations they name, as the whole set over
SotW and as changes over Delta; readiness counts the route configurations the scopes name."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from envoy.config.route.v3 import scoped_route_pb2

from tests.xds_client import AdsClient, DeltaClient, delta_names, resource_names
from turnout.envoy.resources import (
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    TYPE_ORDER,
    EnvoyResources,
)
from turnout.envoy.translate import TranslateOptions, translate
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


def resources(hosts: dict[str, str]) -> EnvoyResources:
    """The scoped translation of one listener whose hosts answer 200 with the given bodies."""
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
    return translate(RoutingGraph(listeners=(lst,)), SCOPED)


@pytest.fixture
async def server() -> AsyncIterator[XdsServer]:
    srv = XdsServer(Metrics())
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

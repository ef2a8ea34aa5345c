"""HTTPProxy `healthPort`: the resolver finds each endpoint's health target port, and the load
assignment sends it to Envoy as `health_check_config.port_value` (the end-to-end effect is in
tests/e2e/test_httpproxy_healthcheck_e2e.py)."""

from __future__ import annotations

from tests.cases.health_port import CHECKED, SERVICE, endpoint_slice
from turnout.envoy.translate.clusters import translate_load_assignment
from turnout.graph.model import Cluster, Endpoint, UpstreamSettings
from turnout.graph.services import BackendResolver, Unresolved
from turnout.sources.parse import parse_text
from turnout.store import Snapshot


def resolver_of(*docs: str) -> BackendResolver:
    parsed = parse_text("---\n".join((SERVICE, *docs)), "test.yaml")
    assert not parsed.problems
    return BackendResolver(Snapshot.of(parsed.objects))


def _cluster(resolver: BackendResolver, settings: UpstreamSettings = CHECKED) -> Cluster:
    """The cluster as the compile serves it: endpoints are resolved after the dialects ran."""
    cluster = resolver.service("ns", "web", 80, settings=settings)
    assert isinstance(cluster, Cluster), cluster
    return next(c for c in resolver.clusters() if c.name == cluster.name)


def test_each_endpoint_gets_the_health_target_of_its_own_slice() -> None:
    resolver = resolver_of(
        endpoint_slice("a", [("http", 8080), ("admin", 9901)], ["10.0.0.1"]),
        endpoint_slice("b", [("http", 8081), ("admin", 9902)], ["10.0.0.2"]),
    )
    cluster = _cluster(resolver)
    assert cluster.endpoints == (Endpoint("10.0.0.1", 8080, 9901), Endpoint("10.0.0.2", 8081, 9902))
    assert cluster.health_port == 9090


def test_a_slice_without_the_health_port_borrows_one_and_none_means_the_traffic_port() -> None:
    resolver = resolver_of(
        endpoint_slice("a", [("http", 8080), ("admin", 9901)], ["10.0.0.1"]),
        endpoint_slice("b", [("http", 8080)], ["10.0.0.2"]),
    )
    assert [e.health_port for e in _cluster(resolver).endpoints] == [9901, 9901]
    alone = resolver_of(endpoint_slice("b", [("http", 8080)], ["10.0.0.2"]))
    assert _cluster(alone).endpoints == (Endpoint("10.0.0.2", 8080, 0),)


def test_a_health_port_the_service_lacks_is_unresolved() -> None:
    resolver = resolver_of(endpoint_slice("a", [("http", 8080)], ["10.0.0.1"]))
    result = resolver.service("ns", "web", 80, settings=UpstreamSettings(health_port=9999))
    assert isinstance(result, Unresolved)
    assert result.message == 'service "ns/web": health port "9999" not found'


def test_the_traffic_port_as_health_port_changes_nothing() -> None:
    resolver = resolver_of(endpoint_slice("a", [("http", 8080), ("admin", 9901)], ["10.0.0.1"]))
    same = _cluster(resolver, UpstreamSettings(health_port=80))
    assert same.endpoints == (Endpoint("10.0.0.1", 8080),)
    assert same.health_port is None


def test_endpoints_objects_are_read_the_same_way() -> None:
    endpoints = """\
apiVersion: v1
kind: Endpoints
metadata: {name: web, namespace: ns}
subsets:
  - addresses: [{ip: 10.0.0.3}]
    ports: [{name: http, port: 8080}, {name: admin, port: 9903}]
"""
    assert _cluster(resolver_of(endpoints)).endpoints == (Endpoint("10.0.0.3", 8080, 9903),)


def test_the_load_assignment_carries_the_health_port() -> None:
    resolver = resolver_of(endpoint_slice("a", [("http", 8080), ("admin", 9901)], ["10.0.0.1"]))
    cla = translate_load_assignment(_cluster(resolver))
    endpoint = cla.endpoints[0].lb_endpoints[0].endpoint
    assert endpoint.address.socket_address.port_value == 8080
    assert endpoint.health_check_config.port_value == 9901
    plain = translate_load_assignment(_cluster(resolver, UpstreamSettings()))
    assert not plain.endpoints[0].lb_endpoints[0].endpoint.HasField("health_check_config")

"""Health ports where there are no EDS endpoints to carry them: an ExternalName Service (a DNS
cluster) sends its active health checks to the health port, as EDS endpoints do; and one address
and port listed by two EndpointSlices with different health targets is one endpoint."""

from __future__ import annotations

from dataclasses import replace

from tests.cases.health_port import CHECKED, SERVICE, dns_cluster, endpoint_slice, resolver
from turnout.envoy.translate import TranslateOptions
from turnout.envoy.translate.clusters import translate_cluster
from turnout.graph.model import (
    Cluster,
    HTTPHealthCheck,
    UpstreamSettings,
)
from turnout.graph.validate import cluster_problem


def test_a_dns_cluster_sends_health_checks_to_the_health_port() -> None:
    cluster = dns_cluster()
    assert cluster.health_port == 9090
    out = translate_cluster(cluster, TranslateOptions())
    (locality,) = out.load_assignment.endpoints
    (lb,) = locality.lb_endpoints
    assert lb.endpoint.address.socket_address.address == "backend.example.com"
    assert lb.endpoint.address.socket_address.port_value == 80
    assert lb.endpoint.health_check_config.port_value == 9090
    assert len(out.health_checks) == 1


def test_a_dns_cluster_without_health_port_checks_the_traffic_port() -> None:
    cluster = dns_cluster(UpstreamSettings(health_check=HTTPHealthCheck(path="/healthz")))
    out = translate_cluster(cluster, TranslateOptions())
    (lb,) = out.load_assignment.endpoints[0].lb_endpoints
    assert not lb.endpoint.HasField("health_check_config")


def test_the_safety_net_checks_a_dns_clusters_health_port() -> None:
    cluster = dns_cluster()
    assert cluster_problem(cluster) is None
    assert cluster_problem(replace(cluster, health_port=70000)) == (
        "DNS name health port is 70000, outside Envoy's range [1, 65535]"
    )


def test_one_address_in_two_slices_is_one_endpoint_with_the_first_slices_health_port() -> None:
    slices = (
        endpoint_slice("b", [("http", 8080), ("admin", 9902)], ["10.0.0.1", "10.0.0.2"]),
        endpoint_slice("a", [("http", 8080), ("admin", 9901)], ["10.0.0.1"]),
    )
    for ordering in (slices, slices[::-1]):
        backends = resolver(SERVICE, *ordering)
        cluster = backends.service("ns", "web", 80, settings=CHECKED)
        assert isinstance(cluster, Cluster)
        # Endpoints are resolved after the dialects ran: the cluster as the compile serves it.
        cluster = next(c for c in backends.clusters() if c.name == cluster.name)
        assert [(e.address, e.port, e.health_port) for e in cluster.endpoints] == [
            ("10.0.0.1", 8080, 9901),
            ("10.0.0.2", 8080, 9902),
        ]

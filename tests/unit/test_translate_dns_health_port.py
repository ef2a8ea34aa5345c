"""Health ports where there are no EDS endpoints to carry them: an ExternalName Service (a DNS
cluster) sends its active health checks to the health port, as EDS endpoints do; and one address
and port listed by two EndpointSlices with different health targets is one endpoint."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.test_health_port import CHECKED, SERVICE, endpoint_slice
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.translate.clusters import translate_cluster
from turnout.envoy.validate import validate_resources
from turnout.graph.model import (
    Cluster,
    HTTPHealthCheck,
    RoutingGraph,
    UpstreamSettings,
)
from turnout.graph.services import BackendResolver
from turnout.graph.validate import cluster_problem
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

EXTERNAL = """\
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: ns}
spec:
  type: ExternalName
  externalName: backend.example.com
  ports: [{name: http, port: 80}, {name: admin, port: 9090}]
"""


def _resolver(*docs: str, external_names: bool = False) -> BackendResolver:
    parsed = parse_text("---\n".join(docs), "test.yaml")
    assert not parsed.problems
    return BackendResolver(Snapshot.of(parsed.objects), enable_external_name_service=external_names)


def _dns_cluster(settings: UpstreamSettings = CHECKED) -> Cluster:
    cluster = _resolver(EXTERNAL, external_names=True).service("ns", "ext", 80, settings=settings)
    assert isinstance(cluster, Cluster), cluster
    assert cluster.dns_name == "backend.example.com"
    return cluster


def test_a_dns_cluster_sends_health_checks_to_the_health_port() -> None:
    cluster = _dns_cluster()
    assert cluster.health_port == 9090
    out = translate_cluster(cluster, TranslateOptions())
    (locality,) = out.load_assignment.endpoints
    (lb,) = locality.lb_endpoints
    assert lb.endpoint.address.socket_address.address == "backend.example.com"
    assert lb.endpoint.address.socket_address.port_value == 80
    assert lb.endpoint.health_check_config.port_value == 9090
    assert len(out.health_checks) == 1


def test_a_dns_cluster_without_health_port_checks_the_traffic_port() -> None:
    cluster = _dns_cluster(UpstreamSettings(health_check=HTTPHealthCheck(path="/healthz")))
    out = translate_cluster(cluster, TranslateOptions())
    (lb,) = out.load_assignment.endpoints[0].lb_endpoints
    assert not lb.endpoint.HasField("health_check_config")


def test_envoy_accepts_the_health_port_of_a_dns_cluster() -> None:
    result = validate_resources(translate(RoutingGraph(clusters=(_dns_cluster(),))))
    assert result.ok, result.output


def test_the_safety_net_checks_a_dns_clusters_health_port() -> None:
    cluster = _dns_cluster()
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
        cluster = _resolver(SERVICE, *ordering).service("ns", "web", 80, settings=CHECKED)
        assert isinstance(cluster, Cluster)
        assert [(e.address, e.port, e.health_port) for e in cluster.endpoints] == [
            ("10.0.0.1", 8080, 9901),
            ("10.0.0.2", 8080, 9902),
        ]

"""Service ns/web with a health port, its EndpointSlices, and an ExternalName (DNS)
cluster whose health checks go to the health port."""

from __future__ import annotations

from tests import builders
from tests.builders import to_yaml
from turnout.graph.model import (
    Cluster,
    HTTPHealthCheck,
    UpstreamSettings,
)
from turnout.graph.services import BackendResolver
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec: {ports: [{name: http, port: 80}, {name: admin, port: 9090}]}
"""


def endpoint_slice(name: str, ports: list[tuple[str, int]], addresses: list[str]) -> str:
    """A slice of Service ns/web, as manifest text."""
    return to_yaml(builders.endpoint_slice("web", addresses, "ns", name=name, ports=ports))


CHECKED = UpstreamSettings(health_check=HTTPHealthCheck(path="/healthz"), health_port=9090)


EXTERNAL = """\
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: ns}
spec:
  type: ExternalName
  externalName: backend.example.com
  ports: [{name: http, port: 80}, {name: admin, port: 9090}]
"""


def resolver(*docs: str, external_names: bool = False) -> BackendResolver:
    parsed = parse_text("---\n".join(docs), "test.yaml")
    assert not parsed.problems
    return BackendResolver(Snapshot.of(parsed.objects), enable_external_name_service=external_names)


def dns_cluster(settings: UpstreamSettings = CHECKED) -> Cluster:
    cluster = resolver(EXTERNAL, external_names=True).service("ns", "ext", 80, settings=settings)
    assert isinstance(cluster, Cluster), cluster
    assert cluster.dns_name == "backend.example.com"
    return cluster

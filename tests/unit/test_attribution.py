"""Problems found after the dialects ran are reported on the objects that wrote the piece: a
cluster Envoy refused on the routes that send to it, a refused Secret on the hosts serving it."""

from __future__ import annotations

from turnout.app import compile_snapshot
from turnout.graph.attribution import REJECTED_BY_ENVOY, rejection_findings
from turnout.graph.build import fold_findings
from turnout.sources.parse import parse_text
from turnout.status.model import State
from turnout.store import Snapshot

DOCS = """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: a, namespace: team-a}
spec:
  virtualhost: {fqdn: a.example.com}
  routes:
  - conditions: [{prefix: /}]
    services: [{name: app, port: 80}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: b, namespace: team-b}
spec:
  virtualhost: {fqdn: b.example.com}
  routes:
  - conditions: [{prefix: /}]
    services: [{name: app, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: team-a}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: team-b}
spec: {ports: [{port: 80}]}
"""


def _snapshot() -> Snapshot:
    parsed = parse_text(DOCS, "proxies.yaml")
    assert not parsed.problems
    return Snapshot.of(parsed.objects)


def test_a_refused_cluster_is_reported_on_the_object_whose_route_sends_to_it() -> None:
    snapshot = _snapshot()
    result = compile_snapshot(snapshot)
    cluster_a = next(c.name for c in result.graph.clusters if c.namespace == "team-a")
    findings = rejection_findings(
        result.graph, [("cluster", cluster_a, "bad value"), ("route", "ingress_http", "x")]
    )
    assert [(f.ref.namespace, f.ref.name, f.field, f.reason) for f in findings] == [
        ("team-a", "a", "spec.routes[0]", REJECTED_BY_ENVOY)
    ]
    assert "bad value" in findings[0].message

    statuses = {s.ref.name: s for s in fold_findings(result.statuses, findings, snapshot)}
    assert statuses["a"].state is State.INVALID
    assert "bad value" in statuses["a"].summary
    assert statuses["b"].state is State.VALID


def test_every_status_knows_the_file_and_line_of_its_object() -> None:
    result = compile_snapshot(_snapshot())
    origins = {s.ref.name: s.origin for s in result.statuses}
    assert {name: (o.source, o.line) for name, o in origins.items() if o} == {
        "a": ("proxies.yaml", 1),
        "b": ("proxies.yaml", 10),
    }

"""A resource Envoy refuses is reported on the object that wrote it: a cluster Envoy NACKs shows
in the status of the HTTPProxy whose route sends to it, without a /status read to trigger it,
and the other tenant's HTTPProxy stays valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2

from tests.xds_client import AdsClient, FakeEnvoy, until
from turnout.app import build_controller
from turnout.config import ServeConfig
from turnout.envoy.resources import CLUSTER_TYPE

PROXIES = """\
apiVersion: v1
kind: Service
metadata: {name: app, namespace: team-a}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: team-b}
spec: {ports: [{port: 80}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: a, namespace: team-a}
spec:
  virtualhost: {fqdn: a.example.com}
  routes: [{services: [{name: app, port: 80}]}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: b, namespace: team-b}
spec:
  virtualhost: {fqdn: b.example.com}
  routes: [{services: [{name: app, port: 80}]}]
"""


def _refuse_team_a(response: Any) -> str | None:
    """Envoy's answer to a cluster it cannot add: the response is refused, naming the cluster."""
    if response.type_url != CLUSTER_TYPE:
        return None
    for resource in response.resources:
        cluster = cluster_pb2.Cluster()
        resource.Unpack(cluster)
        if cluster.name.startswith("team-a/"):
            return f"Error adding/updating cluster(s) {cluster.name}: bad value"
    return None


async def test_a_cluster_envoy_refuses_shows_in_the_status_of_the_proxy_that_uses_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "proxies.yaml").write_text(PROXIES)
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
        )
    )
    await controller.start()
    fake = FakeEnvoy(AdsClient(controller.xds_port), reject=_refuse_team_a).start()
    try:

        def by_name() -> dict[str, Any]:
            return {s.ref.name: s for s in controller.statuses()}

        await until(lambda: by_name()["a"].state.value == "invalid", 5.0)
        a, b = by_name()["a"], by_name()["b"]
        errors = a.body["conditions"][0]["errors"]
        assert [(e["type"], e["reason"]) for e in errors] == [
            ("RejectedByEnvoy", "RejectedByEnvoy")
        ]
        assert errors[0]["message"].startswith("spec.routes[0]: Envoy refused cluster team-a/app")
        assert "bad value" in errors[0]["message"]
        assert b.state.value == "valid"
        ready, reason = controller.readiness()
        assert not ready and "bad value" in reason
    finally:
        await fake.stop()
        await controller.stop()

"""HTTPProxy `healthCheckPolicy` through a real Envoy: Envoy checks every endpoint of the route's
Service, a status in `expectedStatuses` keeps an endpoint in, and an endpoint whose health path
fails loses its traffic to the other one."""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter

import pytest

from tests.e2e.harness import Harness, backends, multi_endpoint_service
from tests.e2e.route_probes import answered_by, failed_active_hc

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "hc.httpproxy.example.com"


def checked_proxy(name: str, host: str, service: str, *, expected_statuses: str = "") -> str:
    """An HTTPProxy whose one route Envoy health-checks on /healthz every second."""
    statuses = f"\n        expectedStatuses: {expected_statuses}" if expected_statuses else ""
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: {name}, namespace: hchp}}
spec:
  virtualhost: {{fqdn: {host}}}
  routes:
    - healthCheckPolicy:
        path: /healthz
        intervalSeconds: 1
        timeoutSeconds: 1
        # 30 failures at 1 s would take 30 s: an unexpected status must not wait for them.
        unhealthyThresholdCount: 30
        healthyThresholdCount: 1{statuses}
      services: [{service}]
"""


PROXY = checked_proxy(
    "web",
    HOST,
    "{name: web, port: 80}",
    expected_statuses="[{start: 200, end: 300}, {start: 418, end: 419}]",
)


async def only_web_b(harness: Harness, host: str) -> None:
    """Within 8 s (the next checks) every request to `host` goes to web-b, and keeps doing so."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    only_b = await harness.eventually(
        lambda: answered_by(harness, host, "/", 30), {"hchp/web-b"}, timeout=8.0
    )
    assert only_b == {"hchp/web-b"}
    assert loop.time() - started < 8.0
    counts: Counter[str] = await harness.distribution(host, "/", 40)
    assert counts == Counter({"hchp/web-b": 40})


async def test_failing_health_path_moves_traffic_to_the_other_endpoint(harness: Harness) -> None:
    async with backends("hchp", "web-a", "web-b") as (a, b):
        await harness.apply(
            {"svc.yaml": multi_endpoint_service("hchp", "web", [a.port, b.port]), "hp.yaml": PROXY}
        )
        assert harness.status_of("HTTPProxy", "hchp", "web")["currentStatus"] == "valid"
        both = {"hchp/web-a", "hchp/web-b"}
        assert await harness.eventually(lambda: answered_by(harness, HOST, "/", 20), both)
        # Envoy, not a client, asked the backends for the health path.
        assert a.requests("/healthz") > 0 and b.requests("/healthz") > 0

        # 418 is in expectedStatuses: after several checks the endpoint is still healthy.
        a.answer("/healthz", 418)
        checks = a.requests("/healthz")
        await asyncio.sleep(3.5)
        assert a.requests("/healthz") >= checks + 2
        assert (await failed_active_hc(harness, "hchp/web/80/")) == {a.port: False, b.port: False}
        assert await answered_by(harness, HOST, "/", 20) == both

        # 503 is not: the endpoint is out at the next check, and the other takes every request.
        a.answer("/healthz", 503)
        await only_web_b(harness, HOST)
        assert (await failed_active_hc(harness, "hchp/web/80/")) == {a.port: True, b.port: False}

        # One passing check brings it back (healthyThresholdCount: 1).
        a.answer("/healthz", None)
        assert (
            await harness.eventually(lambda: answered_by(harness, HOST, "/", 20), both, 10.0)
            == both
        )


# --- healthPort: checks on another Service port ----------------------------------------------

PORT_HOST = "hcport.httpproxy.example.com"

PORT_PROXY = checked_proxy("split", PORT_HOST, "{name: split, port: 80, healthPort: 9090}")


def two_port_service(name: str, endpoints: list[tuple[int, int]]) -> str:
    """A Service with a traffic port (80) and a health port (9090); each endpoint is 127.0.0.1
    with its own (traffic, health) target ports, one EndpointSlice each."""
    docs = [
        textwrap.dedent(f"""\
            apiVersion: v1
            kind: Service
            metadata: {{name: {name}, namespace: hchp}}
            spec:
              ports: [{{name: http, port: 80}}, {{name: admin, port: 9090}}]
            """)
    ]
    for i, (traffic, health) in enumerate(endpoints):
        docs.append(
            textwrap.dedent(f"""\
                apiVersion: discovery.k8s.io/v1
                kind: EndpointSlice
                metadata:
                  name: {name}-{i}
                  namespace: hchp
                  labels: {{kubernetes.io/service-name: {name}}}
                addressType: IPv4
                ports: [{{name: http, port: {traffic}}}, {{name: admin, port: {health}}}]
                endpoints: [{{addresses: ["127.0.0.1"]}}]
                """)
        )
    return "---\n".join(docs)


async def test_health_port_checks_another_port_and_moves_traffic(harness: Harness) -> None:
    async with backends("hchp", "web-a", "web-b", "health-a", "health-b") as servers:
        a, b, health_a, health_b = servers
        await harness.apply(
            {
                "svc.yaml": two_port_service(
                    "split", [(a.port, health_a.port), (b.port, health_b.port)]
                ),
                "hp.yaml": PORT_PROXY,
            }
        )
        assert harness.status_of("HTTPProxy", "hchp", "split")["currentStatus"] == "valid"
        both = {"hchp/web-a", "hchp/web-b"}
        assert await harness.eventually(lambda: answered_by(harness, PORT_HOST, "/", 20), both)
        # Envoy checks the health port of each endpoint, never its traffic port.
        assert health_a.requests("/healthz") > 0 and health_b.requests("/healthz") > 0
        # A failing health path on the traffic port changes nothing: nobody asks there.
        a.answer("/healthz", 503)
        await asyncio.sleep(2.5)
        assert a.requests("/healthz") == 0 and b.requests("/healthz") == 0
        assert await answered_by(harness, PORT_HOST, "/", 20) == both

        # The health port of A fails: A's traffic moves to B.
        health_a.answer("/healthz", 503)
        await only_web_b(harness, PORT_HOST)
        # Traffic never went to a health server.
        assert health_a.requests("/") == 0 and health_b.requests("/") == 0

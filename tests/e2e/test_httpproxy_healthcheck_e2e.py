"""HTTPProxy `healthCheckPolicy` through a real Envoy: Envoy checks every endpoint of the route's
Service, a status in `expectedStatuses` keeps an endpoint in, and an endpoint whose health path
fails loses its traffic to the other one."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.e2e.harness import Harness
from tests.e2e.test_route_e2e import (
    answered_by,
    backends,
    failed_active_hc,
    multi_endpoint_service,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "hc.httpproxy.example.com"

PROXY = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: web, namespace: hchp}}
spec:
  virtualhost: {{fqdn: {HOST}}}
  routes:
    - healthCheckPolicy:
        path: /healthz
        intervalSeconds: 1
        timeoutSeconds: 1
        # 30 failures at 1 s would take 30 s: an unexpected status must not wait for them.
        unhealthyThresholdCount: 30
        healthyThresholdCount: 1
        expectedStatuses: [{{start: 200, end: 300}}, {{start: 418, end: 419}}]
      services: [{{name: web, port: 80}}]
"""


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
        loop = asyncio.get_running_loop()
        started = loop.time()
        a.answer("/healthz", 503)
        only_b = await harness.eventually(
            lambda: answered_by(harness, HOST, "/", 30), {"hchp/web-b"}, timeout=8.0
        )
        assert only_b == {"hchp/web-b"}
        assert loop.time() - started < 8.0
        assert (await failed_active_hc(harness, "hchp/web/80/")) == {a.port: True, b.port: False}
        counts: Counter[str] = await harness.distribution(HOST, "/", 40)
        assert counts == Counter({"hchp/web-b": 40})

        # One passing check brings it back (healthyThresholdCount: 1).
        a.answer("/healthz", None)
        assert (
            await harness.eventually(lambda: answered_by(harness, HOST, "/", 20), both, 10.0)
            == both
        )

"""Seed 002 Routes through a real Envoy: the seed's example, weighted upstreams, load-balancing
strategies, active health checks taking a failing backend out, and statuses of broken Routes."""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.harness import Harness, backends, multi_endpoint_service, service_yaml
from tests.e2e.route_probes import answered_by, failed_active_hc

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEED_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures/route/seed002-example/input.yaml"


def seed_route() -> str:
    """The seed's example Route, verbatim: the first document of the fixture."""
    return SEED_FIXTURE.read_text().split("\n---\n")[0] + "\n"


def route(name: str, namespace: str, spec: str, created: str | None = None) -> str:
    ts = f'\n  creationTimestamp: "{created}"' if created else ""
    return (
        "apiVersion: contour.heptio.com/v1alpha1\nkind: Route\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}{ts}\n"
        f"spec:\n{textwrap.indent(textwrap.dedent(spec), '  ')}"
    )


async def lb_policies(harness: Harness, prefix: str) -> dict[str, str]:
    """The `lb_policy` of every active cluster whose name starts with `prefix`."""
    out: dict[str, str] = {}
    for cluster in await harness.active_clusters():
        if cluster.get("name", "").startswith(prefix):
            out[cluster["name"]] = cluster.get("lb_policy", "ROUND_ROBIN")
    return out


async def test_seed_example_is_served(harness: Harness) -> None:
    services = [
        service_yaml("finance", name, port, await harness.backend("finance", name))
        for name, port in (("www", 8080), ("canarywww", 8080), ("tickersvc", 80))
    ]
    await harness.apply({"svc.yaml": "---\n".join(services), "route.yaml": seed_route()})
    assert harness.status_of("Route", "finance", "finance-route") == {
        "currentStatus": "Valid",
        "errors": [],
    }
    both = {"finance/www", "finance/canarywww"}
    # The health-checked clusters take traffic once their first check passed (the echo answers
    # 200 on /status); until then Envoy may still be warming them.
    assert await harness.eventually(lambda: answered_by(harness, "heptio.com", "/", 40), both)
    assert await harness.served_by("heptio.com", "/ticker") == "finance/tickersvc"
    assert await harness.served_by("heptio.com", "/ticker/quote") == "finance/tickersvc"
    # String prefix, as Envoy's `prefix` match that Contour used.
    assert await harness.served_by("heptio.com", "/tickers") == "finance/tickersvc"
    r = await harness.get("heptio.com", "/ticker/quote?symbol=VMW")
    assert r.json()["path"] == "/ticker/quote?symbol=VMW"
    assert (await harness.get("www.heptio.com", "/")).status_code == 404
    policies = await lb_policies(harness, "finance/")
    assert len(policies) == 3 and set(policies.values()) == {"ROUND_ROBIN"}


async def test_weights_are_percentages(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(
                ("weights", "stable"), ("weights", "next"), ("weights", "other")
            ),
            "route.yaml": route(
                "canary",
                "weights",
                """\
                host: weights.example.com
                routes:
                  - pathPrefix: /
                    upstreams:
                      - {serviceName: stable, servicePort: 80, weight: 80}
                      - {serviceName: next, servicePort: 80, weight: 20}
                  - pathPrefix: /rest
                    upstreams:
                      - {serviceName: stable, servicePort: 80, weight: 50}
                      - {serviceName: next, servicePort: 80}
                      - {serviceName: other, servicePort: 80}
                """,
            ),
        }
    )
    assert harness.status_of("Route", "weights", "canary")["currentStatus"] == "Valid"
    n = 600
    counts = await harness.distribution("weights.example.com", "/", n)
    assert set(counts) == {"weights/stable", "weights/next"}
    # 20% of 600 is 120 with a standard deviation near 10; the tolerance is over 4 deviations.
    assert abs(counts["weights/next"] / n - 0.20) < 0.07, counts
    # The two unweighted upstreams share the remaining 50%: 25% each.
    rest = await harness.distribution("weights.example.com", "/rest", n)
    assert abs(rest["weights/stable"] / n - 0.50) < 0.08, rest
    assert abs(rest["weights/next"] / n - 0.25) < 0.08, rest
    assert abs(rest["weights/other"] / n - 0.25) < 0.08, rest


async def test_random_and_least_request_strategies(harness: Harness) -> None:
    async with backends("lb", "lb-a", "lb-b") as (a, b):
        await harness.apply(
            {
                "svc.yaml": multi_endpoint_service("lb", "pool", [a.port, b.port]),
                "route.yaml": route(
                    "lb",
                    "lb",
                    """\
                    host: lb.example.com
                    strategy: Random
                    routes:
                      - pathPrefix: /
                        upstreams: [{serviceName: pool, servicePort: 80}]
                      - pathPrefix: /least
                        strategy: WeightedLeastRequest
                        upstreams: [{serviceName: pool, servicePort: 80}]
                    """,
                ),
            }
        )
        assert harness.status_of("Route", "lb", "lb")["currentStatus"] == "Valid"
        policies = await lb_policies(harness, "lb/pool/80/")
        assert sorted(policies.values()) == ["LEAST_REQUEST", "RANDOM"]
        # Both strategies spread requests over both endpoints of the Service.
        for path in ("/", "/least/x"):
            counts = await harness.distribution("lb.example.com", path, 100)
            assert set(counts) == {"lb/lb-a", "lb/lb-b"}, (path, counts)


async def test_failing_health_check_takes_a_backend_out_at_once(harness: Harness) -> None:
    host = "health.example.com"
    async with backends("hc", "web-a", "web-b") as (a, b):
        await harness.apply(
            {
                "svc.yaml": multi_endpoint_service("hc", "web", [a.port, b.port]),
                # 30 failures at 1 s would take 30 s: a 503 must not wait for the threshold.
                "route.yaml": route(
                    "web",
                    "hc",
                    """\
                    host: health.example.com
                    routes:
                      - pathPrefix: /
                        upstreams:
                          - serviceName: web
                            servicePort: 80
                            lbHealthCheck:
                              path: /healthz
                              intervalSeconds: 1
                              timeoutSeconds: 1
                              unhealthyThresholdCount: 30
                              healthyThresholdCount: 1
                    """,
                ),
            }
        )
        both = {"hc/web-a", "hc/web-b"}
        assert await harness.eventually(lambda: answered_by(harness, host, "/", 20), both)

        loop = asyncio.get_running_loop()
        started = loop.time()
        a.answer("/healthz", 503)
        only_b = await harness.eventually(
            lambda: answered_by(harness, host, "/", 30), {"hc/web-b"}, timeout=8.0
        )
        assert only_b == {"hc/web-b"}
        assert loop.time() - started < 8.0
        assert (await failed_active_hc(harness, "hc/web/80/")) == {a.port: True, b.port: False}
        # It stays out while it keeps failing.
        counts: Counter[str] = await harness.distribution(host, "/", 50)
        assert counts == Counter({"hc/web-b": 50})

        # With every host failing, requests get 503 rather than a failing host (no panic mode).
        b.answer("/healthz", 503)
        assert await harness.eventually(lambda: harness.served_by(host, "/"), "503", timeout=8.0)

        # One good check brings a host back (healthyThresholdCount: 1).
        a.answer("/healthz", None)
        b.answer("/healthz", None)
        assert (
            await harness.eventually(lambda: answered_by(harness, host, "/", 20), both, 10.0)
            == both
        )


async def test_statuses_of_broken_routes(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("status", "web")),
            "invalid.yaml": route(
                "invalid",
                "status",
                """\
                host: invalid.example.com
                strategy: Fastest
                routes:
                  - pathPrefix: /
                    upstreams:
                      - {serviceName: web, servicePort: 80, weight: 60}
                      - {serviceName: web, servicePort: "80", weight: 30}
                """,
            ),
            "error.yaml": route(
                "error",
                "status",
                """\
                host: error.example.com
                routes:
                  - pathPrefix: /
                    upstreams: [{serviceName: web, servicePort: 80}]
                  - pathPrefix: /gone
                    upstreams: [{serviceName: gone, servicePort: 80}]
                """,
            ),
        }
    )
    assert harness.status_of("Route", "status", "invalid") == {
        "currentStatus": "Invalid",
        "errors": [
            'spec.strategy: must be one of RoundRobin, WeightedLeastRequest, Random, got "Fastest"',
            "spec.routes[0].upstreams[1].servicePort: must be an integer, got a string",
            "spec.routes[0].upstreams: weights are percentages and must add up to 100, got 90",
        ],
    }
    assert (await harness.get("invalid.example.com", "/")).status_code == 404
    assert harness.status_of("Route", "status", "error") == {
        "currentStatus": "Error",
        "errors": [
            'spec.routes[1].upstreams[0].serviceName: service "status/gone" not found',
            "spec.routes[1]: no upstream that takes traffic could be resolved; it answers 503",
        ],
    }
    assert await harness.served_by("error.example.com", "/gone/x") == "503"
    assert await harness.served_by("error.example.com", "/") == "status/web"

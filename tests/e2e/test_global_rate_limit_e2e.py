"""Global rate limiting through the session Envoy: `--rate-limit-service` points Envoy's ratelimit
filter at a rate limit service (a minimal `envoy.service.ratelimit.v3.RateLimitService` in the
test), which receives the descriptors HTTPProxy's `rateLimitPolicy.global` defines (every entry
kind, virtual host and route, a route opting out) and decides: OK is 200, OVER_LIMIT is 429 (with
the X-RateLimit headers when asked for), and a service that does not answer fails closed (500)
or open (200) as configured (docs/policies.md, "Global rate limits")."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import pytest_asyncio
from envoy.service.ratelimit.v3 import rls_pb2

from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "global-rl.e2e.example.com"
RLS = "envoy.service.ratelimit.v3.RateLimitService"
PROXY = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: global-rl, namespace: default}}
spec:
  virtualhost:
    fqdn: {HOST}
    rateLimitPolicy:
      global:
        descriptors:
          - entries: [{{remoteAddress: {{}}}}]
          - entries:
              - genericKey: {{key: vhost, value: global-rl}}
              - requestHeader: {{headerName: X-Tenant, descriptorKey: tenant}}
  routes:
    - conditions: [{{prefix: /plan}}]
      services: [{{name: app, port: 80}}]
      rateLimitPolicy:
        global:
          descriptors:
            - entries:
                - requestHeaderValueMatch:
                    headers: [{{name: X-Plan, exact: free}}]
                    value: free-plan
                - genericKey: {{value: plan-route}}
            - entries:
                - requestHeaderValueMatch:
                    headers: [{{name: X-Plan, present: true}}]
                    value: no-plan
                    expectMatch: false
    - conditions: [{{prefix: /off}}]
      services: [{{name: app, port: 80}}]
      rateLimitPolicy: {{global: {{disabled: true}}}}
    - services: [{{name: app, port: 80}}]
"""

Descriptors = list[list[tuple[str, str]]]


@dataclass
class RateLimitServer:
    """What the service received (domain, descriptors) per call; it answers OVER_LIMIT when an
    entry's value is "deny"."""

    port: int
    calls: list[tuple[str, Descriptors]] = field(default_factory=list)


def decide(request: Any) -> Any:
    over = any(e.value == "deny" for d in request.descriptors for e in d.entries)
    code = rls_pb2.RateLimitResponse.OVER_LIMIT if over else rls_pb2.RateLimitResponse.OK
    out = rls_pb2.RateLimitResponse(overall_code=code)
    for _ in request.descriptors:
        status = out.statuses.add(code=code, limit_remaining=0 if over else 4)
        status.current_limit.requests_per_unit = 5
        status.current_limit.unit = rls_pb2.RateLimitResponse.RateLimit.MINUTE
        status.duration_until_reset.seconds = 30
    return out


@pytest_asyncio.fixture(loop_scope="session")
async def rls() -> AsyncIterator[RateLimitServer]:
    server = grpc.aio.server()
    state = RateLimitServer(port=server.add_insecure_port("127.0.0.1:0"))

    async def should_rate_limit(request: Any, context: Any) -> Any:
        descriptors = [[(e.key, e.value) for e in d.entries] for d in request.descriptors]
        state.calls.append((request.domain, descriptors))
        return decide(request)

    handler = grpc.method_handlers_generic_handler(
        RLS,
        {
            "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
                should_rate_limit,
                request_deserializer=rls_pb2.RateLimitRequest.FromString,
                response_serializer=rls_pb2.RateLimitResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    await server.start()
    try:
        yield state
    finally:
        await server.stop(None)


async def apply(harness: Harness, **options: Any) -> None:
    services = await harness.services(("default", "app"))
    # A generous timeout: the service is Python on a busy test machine.
    options.setdefault("rate_limit_timeout_s", 2.0)
    await harness.apply({"svc.yaml": services, "proxy.yaml": PROXY}, options=options)


async def test_descriptors_of_every_entry_kind_reach_the_service(
    harness: Harness, rls: RateLimitServer
) -> None:
    await apply(harness, rate_limit_service=f"127.0.0.1:{rls.port}", rate_limit_domain="e2e")
    r = await harness.get(HOST, "/", headers={"X-Tenant": "acme"})
    assert r.status_code == 200
    assert rls.calls[-1] == (
        "e2e",
        [[("remote_address", "127.0.0.1")], [("vhost", "global-rl"), ("tenant", "acme")]],
    )
    # Without X-Tenant the second descriptor cannot be made and is not sent.
    r = await harness.get(HOST, "/")
    assert r.status_code == 200
    assert rls.calls[-1] == ("e2e", [[("remote_address", "127.0.0.1")]])
    # The route's descriptors replace the virtual host's.
    r = await harness.get(HOST, "/plan", headers={"X-Plan": "free", "X-Tenant": "acme"})
    assert r.status_code == 200
    plan = [("header_match", "free-plan"), ("generic_key", "plan-route")]
    assert rls.calls[-1] == ("e2e", [plan])
    r = await harness.get(HOST, "/plan")
    assert r.status_code == 200
    assert rls.calls[-1] == ("e2e", [[("header_match", "no-plan")]])
    # A route that opts out is not asked about.
    calls = len(rls.calls)
    r = await harness.get(HOST, "/off", headers={"X-Tenant": "acme"})
    assert r.status_code == 200
    assert len(rls.calls) == calls


async def test_over_limit_is_429_with_x_ratelimit_headers(
    harness: Harness, rls: RateLimitServer
) -> None:
    await apply(harness, rate_limit_service=f"127.0.0.1:{rls.port}", rate_limit_x_headers=True)
    r = await harness.get(HOST, "/", headers={"X-Tenant": "deny"})
    assert r.status_code == 429
    assert rls.calls[-1][0] == "contour"
    assert r.headers["x-ratelimit-limit"].startswith("5, 5;w=60")
    assert r.headers["x-ratelimit-remaining"] == "0"
    assert r.headers["x-ratelimit-reset"] == "30"
    r = await harness.get(HOST, "/", headers={"X-Tenant": "acme"})
    assert r.status_code == 200
    assert r.headers["x-ratelimit-remaining"] == "4"


async def test_over_limit_without_x_headers_has_none(
    harness: Harness, rls: RateLimitServer
) -> None:
    await apply(harness, rate_limit_service=f"127.0.0.1:{rls.port}")
    r = await harness.get(HOST, "/", headers={"X-Tenant": "deny"})
    assert r.status_code == 429
    assert "x-ratelimit-limit" not in r.headers


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_service_that_is_down_fails_closed_or_open(harness: Harness) -> None:
    down = f"127.0.0.1:{unused_port()}"
    await apply(harness, rate_limit_service=down, rate_limit_timeout_s=0.5)
    r = await harness.get(HOST, "/")
    assert r.status_code == 500
    await apply(harness, rate_limit_service=down, rate_limit_fail_open=True)
    r = await harness.get(HOST, "/")
    assert r.status_code == 200
    assert "service" in r.json()  # the backend answered

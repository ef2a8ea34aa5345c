"""Virtual-host and filter policies through a real Envoy: CORS, IP allow/deny lists (with
X-Forwarded-For and `--num-trusted-hops`) and local rate limits, as a client sees them."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")


def proxy(name: str, fqdn: str, body: str) -> str:
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata:
  name: {name}
  namespace: default
spec:
  virtualhost:
    fqdn: {fqdn}
{body}"""


def answered_by_backend(response: object) -> bool:
    """Whether the echo backend produced the response (Envoy's own answers are not its JSON)."""
    try:
        return "service" in response.json()  # type: ignore[attr-defined]
    except ValueError:
        return False


CORS_HOST = "cors.e2e.example.com"


async def test_cors_preflight_and_simple_requests(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "cors.yaml": proxy(
                "cors",
                CORS_HOST,
                r"""    corsPolicy:
      allowCredentials: true
      allowOrigin:
        - https://allowed.example.com
        - https://.*\.regex\.example\.org
      allowMethods: [GET, POST]
      allowHeaders: [x-custom]
      exposeHeaders: [x-exposed]
      maxAge: 10m
  routes:
    - services: [{name: app, port: 80}]
""",
            ),
            "plain.yaml": proxy(
                "plain",
                "plain.e2e.example.com",
                "  routes:\n    - services: [{name: app, port: 80}]\n",
            ),
        }
    )
    preflight = {"Access-Control-Request-Method": "POST"}

    # A preflight from an allowed origin is answered by Envoy itself, with the policy.
    r = await harness.get(
        CORS_HOST, "/api", {"Origin": "https://allowed.example.com", **preflight}, "OPTIONS"
    )
    assert r.status_code == 200
    assert not answered_by_backend(r)
    assert r.headers["access-control-allow-origin"] == "https://allowed.example.com"
    assert r.headers["access-control-allow-methods"] == "GET,POST"
    assert r.headers["access-control-allow-headers"] == "x-custom"
    assert r.headers["access-control-max-age"] == "600"
    assert r.headers["access-control-allow-credentials"] == "true"

    # A regex origin (Contour's rule: not a bare scheme://host, so a regex).
    r = await harness.get(
        CORS_HOST, "/", {"Origin": "https://app.regex.example.org", **preflight}, "OPTIONS"
    )
    assert r.headers["access-control-allow-origin"] == "https://app.regex.example.org"

    # A disallowed origin is never echoed; its preflight goes on to the backend unanswered.
    r = await harness.get(
        CORS_HOST, "/", {"Origin": "https://evil.example.com", **preflight}, "OPTIONS"
    )
    assert "access-control-allow-origin" not in r.headers
    assert answered_by_backend(r)

    # Simple requests reach the backend; only an allowed origin gets the CORS headers back.
    r = await harness.get(CORS_HOST, "/", {"Origin": "https://allowed.example.com"})
    assert answered_by_backend(r)
    assert r.headers["access-control-allow-origin"] == "https://allowed.example.com"
    assert r.headers["access-control-expose-headers"] == "x-exposed"
    r = await harness.get(CORS_HOST, "/", {"Origin": "https://evil.example.com"})
    assert answered_by_backend(r)
    assert "access-control-allow-origin" not in r.headers

    # The policy belongs to its virtual host only.
    r = await harness.get(
        "plain.e2e.example.com",
        "/",
        {"Origin": "https://allowed.example.com", **preflight},
        "OPTIONS",
    )
    assert "access-control-allow-origin" not in r.headers


async def test_ip_deny_and_allow_rules(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            # The tests' client is 127.0.0.1.
            "deny.yaml": proxy(
                "deny",
                "deny.e2e.example.com",
                """\
    ipDenyPolicy: [{source: Peer, cidr: 127.0.0.1}]
  routes:
    - conditions: [{prefix: /public}]
      services: [{name: app, port: 80}]
      # The route's own list replaces the virtual host's.
      ipAllowPolicy: [{source: Peer, cidr: 127.0.0.0/8}]
    - services: [{name: app, port: 80}]
""",
            ),
            "allow.yaml": proxy(
                "allow",
                "allow.e2e.example.com",
                """\
    ipAllowPolicy: [{source: Peer, cidr: 127.0.0.1}]
  routes:
    - conditions: [{prefix: /internal}]
      services: [{name: app, port: 80}]
      ipAllowPolicy: [{source: Peer, cidr: 10.0.0.0/8}]
    - services: [{name: app, port: 80}]
""",
            ),
        }
    )
    r = await harness.get("deny.e2e.example.com", "/")
    assert r.status_code == 403
    assert not answered_by_backend(r)
    assert await harness.served_by("deny.e2e.example.com", "/public") == "default/app"

    assert await harness.served_by("allow.e2e.example.com", "/") == "default/app"
    assert (await harness.get("allow.e2e.example.com", "/internal")).status_code == 403


REMOTE_HOST = "remote.e2e.example.com"


async def test_remote_source_trusts_x_forwarded_for_only_with_trusted_hops(
    harness: Harness,
) -> None:
    files = {
        "svc.yaml": await harness.services(("default", "app")),
        "remote.yaml": proxy(
            "remote",
            REMOTE_HOST,
            """\
    ipAllowPolicy: [{source: Remote, cidr: 203.0.113.0/24}]
  routes:
    - conditions: [{prefix: /peer}]
      services: [{name: app, port: 80}]
      ipAllowPolicy: [{source: Peer, cidr: 203.0.113.0/24}]
    - services: [{name: app, port: 80}]
""",
        ),
    }
    from_proxy = {"X-Forwarded-For": "203.0.113.7"}

    # Without trusted hops the client address is the peer, whatever X-Forwarded-For claims.
    await harness.apply(files)
    assert (await harness.get(REMOTE_HOST, "/", from_proxy)).status_code == 403

    # With one trusted proxy in front, the address it appended is the client's.
    await harness.apply(files, options={"num_trusted_hops": 1})
    assert await harness.served_by(REMOTE_HOST, "/", from_proxy) == "default/app"
    r = await harness.get(REMOTE_HOST, "/", {"X-Forwarded-For": "198.51.100.1"})
    assert r.status_code == 403
    assert (await harness.get(REMOTE_HOST, "/")).status_code == 403
    # `Peer` stays the connection's own address.
    assert (await harness.get(REMOTE_HOST, "/peer", from_proxy)).status_code == 403


LIMIT_HOST = "limit.e2e.example.com"


async def test_local_rate_limits_per_virtual_host_and_route(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "limit.yaml": proxy(
                "limit",
                LIMIT_HOST,
                """\
    rateLimitPolicy:
      local:
        requests: 2
        unit: minute
        burst: 1
        responseHeadersToAdd: [{name: x-limited-by, value: vhost}]
  routes:
    - conditions: [{prefix: /login}]
      services: [{name: app, port: 80}]
      rateLimitPolicy:
        local:
          requests: 1
          unit: hour
          responseStatusCode: 503
          responseHeadersToAdd: [{name: x-limited-by, value: route}]
    - services: [{name: app, port: 80}]
""",
            ),
        }
    )
    # The virtual host's bucket holds requests + burst = 3 tokens, shared by its routes.
    for path in ("/a", "/b", "/a"):
        assert await harness.served_by(LIMIT_HOST, path) == "default/app"
    for path in ("/a", "/b"):
        r = await harness.get(LIMIT_HOST, path)
        assert r.status_code == 429
        assert r.headers["x-limited-by"] == "vhost"
        assert not answered_by_backend(r)

    # The route with its own limit has its own bucket, status and headers.
    assert await harness.served_by(LIMIT_HOST, "/login") == "default/app"
    r = await harness.get(LIMIT_HOST, "/login")
    assert r.status_code == 503
    assert r.headers["x-limited-by"] == "route"
    assert not answered_by_backend(r)

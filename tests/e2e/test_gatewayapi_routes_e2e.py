"""HTTPRoute rules through the real Envoy: matches, precedence across routes, header filters,
redirects (the Location's port and scheme rules), URL rewrites (the ReplacePrefixMatch table),
mirrors, timeouts, weights, invalid backends and backendRef filters, as the echo backend saw
them."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.gateway_backends import GATEWAY_CLASS, docs
from tests.e2e.harness import Harness, free_port

pytestmark = pytest.mark.asyncio(loop_scope="session")


def gateway(port: int) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: app}}
spec:
  gatewayClassName: turnout
  listeners:
  - {{name: http, port: {port}, protocol: HTTP}}
"""


def route(name: str, rules: str, created: str = "2024-01-01T00:00:00Z") -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: app, creationTimestamp: "{created}"}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [example.org]
  rules:
{rules}
"""


async def setup(harness: Harness, *routes: str, backends: tuple[str, ...] = ("v1",)) -> int:
    port = free_port()
    services = await harness.services(*(("app", b) for b in backends))
    await harness.apply(
        {"gw.yaml": docs(GATEWAY_CLASS, gateway(port), *routes), "svc.yaml": services}
    )
    for r in routes:
        name = r.split("name: ", 1)[1].split(",", 1)[0]
        status = harness.status_of("HTTPRoute", "app", name)
        accepted = next(c for c in status["parents"][0]["conditions"] if c["type"] == "Accepted")
        assert accepted["status"] == "True", status
    return port


async def send(
    port: int,
    path: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    host: str = "example.org",
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
        for attempt in range(50):
            try:
                return await client.request(method, path, headers={"Host": host, **(headers or {})})
            except httpx.ConnectError:
                if attempt == 49:
                    raise
                await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


async def served(port: int, path: str, **kw: object) -> str:
    r = await send(port, path, **kw)  # type: ignore[arg-type]
    return r.json()["service"] if r.status_code == 200 else str(r.status_code)


async def test_matches_and_precedence_across_routes(harness: Harness) -> None:
    older = route(
        "older",
        """
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
    backendRefs: [{name: v2, port: 80}]
""",
    )
    newer = route(
        "newer",
        """
  - matches: [{path: {type: Exact, value: /v2/exact}}]
    backendRefs: [{name: v3, port: 80}]
  - matches:
    - path: {type: RegularExpression, value: "/v2/[0-9]+"}
    backendRefs: [{name: v4, port: 80}]
  - matches:
    - path: {type: PathPrefix, value: /v2}
      method: POST
    - path: {type: PathPrefix, value: /v2}
      queryParams: [{name: q, value: "1"}]
    backendRefs: [{name: v5, port: 80}]
""",
        created="2024-06-01T00:00:00Z",
    )
    port = await setup(harness, older, newer, backends=("v1", "v2", "v3", "v4", "v5"))
    assert await served(port, "/") == "v1"
    assert await served(port, "/v2example") == "v1"
    assert await served(port, "/v2") == "v2"
    assert await served(port, "/v2/") == "v2"
    assert await served(port, "/other", headers={"Version": "two"}) == "v2"
    assert await served(port, "/v2/exact") == "v3"
    assert await served(port, "/v2/exact/") == "v2"
    assert await served(port, "/v2/123") == "v4"
    assert await served(port, "/v2/x", method="POST") == "v5"
    assert await served(port, "/v2/x?q=1") == "v5"
    assert await served(port, "/v2/x?q=2") == "v2"


async def test_header_modifiers(harness: Harness) -> None:
    rules = """
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Set, value: "set 100%"}]
        add: [{name: X-Add, value: added}]
        remove: [X-Remove]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: X-Resp-Set, value: one}]
        add: [{name: X-Resp-Add, value: two}]
        remove: [X-Resp-Remove]
    backendRefs: [{name: v1, port: 80}]
"""
    port = await setup(harness, route("headers", rules))
    r = await send(
        port,
        "/",
        headers={
            "X-Set": "old",
            "X-Add": "first",
            "X-Remove": "gone",
            "X-Echo-Set-Header": "X-Resp-Remove:x,X-Resp-Add:orig",
        },
    )
    seen = r.json()["headers"]
    assert seen["x-set"] == "set 100%"
    assert seen["x-add"] == "first, added"
    assert "x-remove" not in seen
    assert r.headers["x-resp-set"] == "one"
    assert r.headers.get_list("x-resp-add") == ["orig", "two"]
    assert "x-resp-remove" not in r.headers


async def test_redirect_location_rules(harness: Harness) -> None:
    rules = """
  - matches: [{path: {type: PathPrefix, value: /plain}}]
    filters: [{type: RequestRedirect, requestRedirect: {}}]
  - matches: [{path: {type: PathPrefix, value: /https}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /host-https}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: example.net, statusCode: 301}
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 9443, statusCode: 308}}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /one}}
  - matches: [{path: {type: PathPrefix, value: /prefix}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}
  - matches: [{path: {type: PathPrefix, value: /strip}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}
"""
    port = await setup(harness, route("redirects", rules))

    async def location(path: str, status: int = 302) -> tuple[str, str | None, int | None, str]:
        r = await send(port, path)
        assert r.status_code == status, (path, r.status_code)
        url = urlsplit(r.headers["location"])
        return url.scheme, url.hostname, url.port, url.path + (f"?{url.query}" if url.query else "")

    # No scheme and no port: the listener's port, even though the Host carried none.
    assert await location("/plain/a?x=1") == ("http", "example.org", port, "/plain/a?x=1")
    # A set scheme means its well-known port. Envoy writes a port it is given even when it is the
    # scheme's default, and without one it would keep the request's (the listener's) port; the
    # conformance suite accepts :443 (the spec only says SHOULD NOT).
    assert await location("/https/a") == ("https", "example.org", 443, "/https/a")
    assert await location("/host-https", 301) == ("https", "example.net", None, "/host-https")
    assert await location("/port/a", 308) == ("http", "example.org", 9443, "/port/a")
    assert (await location("/full/a/b?q=1"))[3] == "/one?q=1"
    assert (await location("/prefix/a/b"))[3] == "/one/a/b"
    assert (await location("/prefix"))[3] == "/one"
    assert (await location("/strip/a/b"))[3] == "/a/b"
    assert (await location("/strip"))[3] == "/"
    assert (await location("/strip/"))[3] == "/"
    assert (await send(port, "/stripped")).status_code == 404


async def test_url_rewrites(harness: Harness) -> None:
    rules = """
  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /empty}}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: ""}}
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: URLRewrite
      urlRewrite:
        hostname: rewritten.example
        path: {type: ReplaceFullPath, replaceFullPath: /one}
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /host}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: Host, value: by-header.example}]}
    backendRefs: [{name: v1, port: 80}]
"""
    port = await setup(harness, route("rewrites", rules))

    async def upstream(path: str) -> tuple[str, str]:
        r = await send(port, path)
        assert r.status_code == 200, (path, r.status_code)
        return r.json()["path"], r.json()["host"]

    assert (await upstream("/prefix/one/two"))[0] == "/one/two"
    assert (await upstream("/prefix/one"))[0] == "/one"
    assert (await upstream("/prefix/one/"))[0] == "/one/"
    assert (await upstream("/prefix/one/two?q=1"))[0] == "/one/two?q=1"
    assert (await upstream("/strip-prefix/three"))[0] == "/three"
    assert (await upstream("/strip-prefix"))[0] == "/"
    assert (await upstream("/strip-prefix/"))[0] == "/"
    assert (await upstream("/empty/x/y"))[0] == "/x/y"
    assert await upstream("/full/a/b?q=2") == ("/one?q=2", "rewritten.example")
    assert (await upstream("/host/x"))[1] == "by-header.example"
    assert (await send(port, "/prefix/oneX")).status_code == 404


async def test_request_mirror(harness: Harness) -> None:
    rules = """
  - matches: [{path: {type: PathPrefix, value: /mirror}}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: shadow, port: 80}}
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /half}}]
    filters:
    - type: RequestMirror
      requestMirror:
        backendRef: {name: shadow, port: 80}
        fraction: {numerator: 1, denominator: 2}
    backendRefs: [{name: v1, port: 80}]
"""
    port = await setup(harness, route("mirror", rules), backends=("v1", "shadow"))
    shadow = harness._echoes[("app", "shadow")]
    shadow.reset_counts()
    for _ in range(5):
        assert await served(port, "/mirror/x") == "v1"
    mirrored = await harness.eventually(
        lambda: asyncio.sleep(0, result=shadow.requests("/mirror/x")), 5
    )
    assert mirrored == 5
    for _ in range(200):
        await send(port, "/half/x")
    await asyncio.sleep(0.3)
    assert 60 <= shadow.requests("/half/x") <= 140


async def test_timeouts(harness: Harness) -> None:
    rules = """
  - matches: [{path: {type: PathPrefix, value: /request}}]
    timeouts: {request: 500ms}
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /backend}}]
    timeouts: {request: 5s, backendRequest: 500ms}
    backendRefs: [{name: v1, port: 80}]
"""
    port = await setup(harness, route("timeouts", rules))
    assert (await send(port, "/request?delay=0.1")).status_code == 200
    assert (await send(port, "/request?delay=2")).status_code == 504
    assert (await send(port, "/backend?delay=2")).status_code == 504
    assert (await send(port, "/backend?delay=0.1")).status_code == 200


async def test_weights_invalid_backends_and_no_backends(harness: Harness) -> None:
    rules = """
  - matches: [{path: {type: PathPrefix, value: /split}}]
    backendRefs:
    - {name: v1, port: 80, weight: 1}
    - {name: v2, port: 80, weight: 0}
    - {name: missing, port: 80, weight: 1}
  - matches: [{path: {type: PathPrefix, value: /none}}]
  - matches: [{path: {type: PathPrefix, value: /zero}}]
    backendRefs: [{name: v1, port: 80, weight: 0}]
"""
    port = await setup(harness, route("weights", rules), backends=("v1", "v2"))
    counts: Counter[str] = Counter()
    for _ in range(200):
        counts[await served(port, "/split")] += 1
    assert set(counts) == {"v1", "500"}
    assert 60 <= counts["500"] <= 140
    assert (await send(port, "/none")).status_code == 500
    assert (await send(port, "/zero")).status_code == 500
    status = harness.status_of("HTTPRoute", "app", "weights")
    resolved = next(c for c in status["parents"][0]["conditions"] if c["type"] == "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert "spec.rules[0].backendRefs[2]" in resolved["message"]


async def test_backend_ref_filters(harness: Harness) -> None:
    rules = """
  - backendRefs:
    - name: v1
      port: 80
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {set: [{name: X-Backend, value: one}]}
    - name: v2
      port: 80
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {set: [{name: X-Backend, value: two}]}
"""
    port = await setup(harness, route("per-backend", rules), backends=("v1", "v2"))
    seen: set[tuple[str, str]] = set()
    for _ in range(40):
        body = (await send(port, "/")).json()
        seen.add((body["service"], body["headers"]["x-backend"]))
    assert seen == {("v1", "one"), ("v2", "two")}


async def test_an_invalid_route_is_rejected_and_others_still_serve(harness: Harness) -> None:
    good = route("good", "  - backendRefs: [{name: v1, port: 80}]\n")
    bad = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad, namespace: app}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.org]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/(unclosed"}}]
    backendRefs: [{name: v1, port: 80}]
"""
    port = await setup(harness, good)
    services = await harness.services(("app", "v1"))
    await harness.apply(
        {"gw.yaml": docs(GATEWAY_CLASS, gateway(port), good, bad), "svc.yaml": services}
    )
    assert await served(port, "/") == "v1"
    assert (await send(port, "/", host="bad.example.org")).status_code == 404
    status = harness.status_of("HTTPRoute", "app", "bad")
    accepted = next(c for c in status["parents"][0]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "UnsupportedValue")
    assert "spec.rules[0].matches[0].path.value" in accepted["message"]


async def test_cors(harness: Harness) -> None:
    rules = """
  - filters:
    - type: CORS
      cors:
        allowOrigins: ["https://app.example", "https://*.example.net"]
        allowMethods: [GET, PUT]
        allowHeaders: [x-token]
        exposeHeaders: [x-trace]
        maxAge: 60
    backendRefs: [{name: v1, port: 80}]
"""
    port = await setup(harness, route("cors", rules))
    preflight = {
        "Origin": "https://a.b.example.net",
        "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": "x-token",
    }
    r = await send(port, "/x", method="OPTIONS", headers=preflight)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://a.b.example.net"
    assert r.headers["access-control-allow-methods"] == "GET,PUT"
    assert r.headers["access-control-allow-headers"] == "x-token"
    assert r.headers["access-control-max-age"] == "60"
    actual = await send(port, "/x", headers={"Origin": "https://app.example"})
    assert actual.json()["service"] == "v1"
    assert actual.headers["access-control-allow-origin"] == "https://app.example"
    assert actual.headers["access-control-expose-headers"] == "x-trace"
    other = await send(port, "/x", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


async def test_a_redirect_keeps_its_response_headers(harness: Harness) -> None:
    # The mirror and timeouts are accepted and have no effect: a redirect sends nothing upstream.
    rules = """
  - matches: [{path: {type: PathPrefix, value: /old}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: new.example.org, statusCode: 301}
    - type: ResponseHeaderModifier
      responseHeaderModifier: {set: [{name: x-moved, value: "yes"}]}
    - type: RequestMirror
      requestMirror: {backendRef: {name: v1, port: 80}}
    timeouts: {request: 5s}
"""
    port = await setup(harness, route("redirect-extras", rules))
    r = await send(port, "/old/page")
    assert r.status_code == 301
    assert r.headers["location"] == f"http://new.example.org:{port}/old/page"
    assert r.headers["x-moved"] == "yes"


async def test_grpcroute_routes_calls_by_service_and_method_to_h2c_backends(
    harness: Harness,
) -> None:
    from tests.e2e.upstream_servers import start_h2_echo

    echo = await start_h2_echo("grpc-echo")
    other = await start_h2_echo("grpc-other")
    try:
        port = free_port()

        def h2c_service(name: str, backend_port: int) -> str:
            return f"""
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: app}}
spec:
  ports: [{{name: grpc, port: 80, appProtocol: kubernetes.io/h2c}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-slice
  namespace: app
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: grpc, port: {backend_port}}}]
endpoints: [{{addresses: ["127.0.0.1"]}}]
"""

        grpc_route = """
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc, namespace: app}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example.org]
  rules:
  - matches: [{method: {service: pkg.Echo, method: Say}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {add: [{name: x-routed, value: "yes"}]}
    backendRefs: [{name: grpc-echo, port: 80}]
  - matches: [{method: {service: pkg.Echo}}]
    backendRefs: [{name: grpc-other, port: 80}]
  - matches: [{method: {type: RegularExpression, method: "Ping.*"}}]
    backendRefs: [{name: grpc-echo, port: 80}]
  - matches: [{method: {service: pkg.Down}}]
  - matches: [{method: {service: pkg.Half}}]
    backendRefs: [{name: grpc-echo, port: 80}, {name: missing, port: 80}]
"""
        await harness.apply(
            {
                "gw.yaml": docs(
                    GATEWAY_CLASS,
                    gateway(port),
                    grpc_route,
                    h2c_service("grpc-echo", echo.port),
                    h2c_service("grpc-other", other.port),
                )
            }
        )
        status = harness.status_of("GRPCRoute", "app", "grpc")
        accepted = next(c for c in status["parents"][0]["conditions"] if c["type"] == "Accepted")
        assert accepted["status"] == "True", status

        async def call(path: str) -> str:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", http1=False, http2=True, timeout=5.0
            ) as client:
                for attempt in range(50):
                    try:
                        r = await client.post(
                            path,
                            headers={
                                "Host": "grpc.example.org",
                                "content-type": "application/grpc",
                            },
                            content=b"\0\0\0\0\0",
                        )
                        break
                    except httpx.ConnectError:
                        if attempt == 49:
                            raise
                        await asyncio.sleep(0.1)
            if "grpc-status" in r.headers:
                # Envoy answers a gRPC request it cannot route with a gRPC status.
                return "grpc-status " + r.headers["grpc-status"]
            body = r.json()
            assert (r.status_code, body["proto"]) == (200, "HTTP/2")
            return str(body["service"])

        assert await call("/pkg.Echo/Say") == "grpc-echo"
        assert await call("/pkg.Echo/Other") == "grpc-other"
        assert await call("/any.Svc/PingMe") == "grpc-echo"
        # No rule: UNIMPLEMENTED, as the spec asks for calls no route matches.
        assert await call("/any.Svc/Other") == "grpc-status 12"
        # A rule with no backend: UNAVAILABLE.
        assert await call("/pkg.Down/Call") == "grpc-status 14"
        # Half of a split to an invalid backend: those calls get UNAVAILABLE too, not UNKNOWN.
        outcomes = Counter([await call("/pkg.Half/Call") for _ in range(40)])
        assert set(outcomes) == {"grpc-echo", "grpc-status 14"}, outcomes
        resolved = next(
            c for c in status["parents"][0]["conditions"] if c["type"] == "ResolvedRefs"
        )
        assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    finally:
        await echo.close()
        await other.close()

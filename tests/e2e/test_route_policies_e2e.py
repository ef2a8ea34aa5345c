"""Route policies through a real Envoy, as a client and the backends see them: timeouts, retries,
header changes (with Contour's dynamic values), Host and prefix rewrites, mirroring, websockets,
request-hash and cookie affinity, and cookie rewriting; HTTPProxy first, then IngressRoute."""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from typing import Any

import aiohttp
import httpx
import pytest

from tests.e2e.harness import Harness, backends, multi_endpoint_service, service_yaml
from turnout.echo import EchoServer

pytestmark = pytest.mark.asyncio(loop_scope="session")


def proxy(name: str, fqdn: str, routes: str, namespace: str = "default") -> str:
    return (
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        f"metadata: {{name: {name}, namespace: {namespace}}}\n"
        f"spec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n"
        + textwrap.indent(textwrap.dedent(routes), "    ")
    )


def services(*servers: EchoServer) -> str:
    return "---\n".join(service_yaml(s.namespace, s.name, 80, s.port) for s in servers)


def echo(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, (response.status_code, response.text)
    body: dict[str, Any] = response.json()
    return body


# --- timeouts and retries -----------------------------------------------------------------------

TIMEOUT_HOST = "timeouts.e2e.example.com"


async def test_response_timeout_answers_504_and_infinity_waits(harness: Harness) -> None:
    async with backends("default", "slow") as (slow,):
        await harness.apply(
            {
                "svc.yaml": services(slow),
                "proxy.yaml": proxy(
                    "timeouts",
                    TIMEOUT_HOST,
                    """\
                    - conditions: [{prefix: /short}]
                      timeoutPolicy: {response: 500ms}
                      services: [{name: slow, port: 80}]
                    - conditions: [{prefix: /forever}]
                      timeoutPolicy: {response: infinity}
                      services: [{name: slow, port: 80}]
                    """,
                ),
            }
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        r = await harness.get(TIMEOUT_HOST, "/short?delay=3")
        elapsed = loop.time() - started
        assert r.status_code == 504
        assert elapsed < 2.5, elapsed  # Envoy gave up, it did not wait for the backend
        # Within the timeout the answer goes through.
        assert echo(await harness.get(TIMEOUT_HOST, "/short?delay=0.1"))["service"] == "slow"
        # No timeout at all: a slow backend is waited for.
        assert echo(await harness.get(TIMEOUT_HOST, "/forever?delay=1.5"))["service"] == "slow"


RETRY_HOST = "retries.e2e.example.com"


async def test_retries_hide_a_failure_and_count_minus_one_disables_them(harness: Harness) -> None:
    async with backends("default", "flaky") as (flaky,):
        await harness.apply(
            {
                "svc.yaml": services(flaky),
                "proxy.yaml": proxy(
                    "retries",
                    RETRY_HOST,
                    """\
                    - conditions: [{prefix: /retried}]
                      retryPolicy: {count: 2}
                      services: [{name: flaky, port: 80}]
                    - conditions: [{prefix: /not-retried}]
                      retryPolicy: {count: -1}
                      services: [{name: flaky, port: 80}]
                    - conditions: [{prefix: /codes}]
                      retryPolicy:
                        count: 1
                        retryOn: [retriable-status-codes]
                        retriableStatusCodes: [418, 503]
                      services: [{name: flaky, port: 80}]
                    - conditions: [{prefix: /no-codes}]
                      retryPolicy: {count: 1}
                      services: [{name: flaky, port: 80}]
                    - conditions: [{prefix: /codes-without-condition}]
                      retryPolicy: {count: 1, retryOn: [reset], retriableStatusCodes: [503]}
                      services: [{name: flaky, port: 80}]
                    """,
                ),
            }
        )
        # The default condition is 5xx: one 503, then the retry succeeds.
        flaky.answer("/retried", 503, times=1)
        assert echo(await harness.get(RETRY_HOST, "/retried"))["service"] == "flaky"
        assert flaky.requests("/retried") == 2
        # count -1: the failure reaches the client, after one request.
        flaky.answer("/not-retried", 503, times=1)
        assert (await harness.get(RETRY_HOST, "/not-retried")).status_code == 503
        assert flaky.requests("/not-retried") == 1
        # A 418 is retried only where it is listed.
        flaky.answer("/codes", 418, times=1)
        assert echo(await harness.get(RETRY_HOST, "/codes"))["service"] == "flaky"
        assert flaky.requests("/codes") == 2
        flaky.answer("/no-codes", 418, times=1)
        assert (await harness.get(RETRY_HOST, "/no-codes")).status_code == 418
        assert flaky.requests("/no-codes") == 1
        # A listed 503 is retried under `retriable-status-codes`...
        flaky.answer("/codes/503", 503, times=1)
        assert echo(await harness.get(RETRY_HOST, "/codes/503"))["service"] == "flaky"
        assert flaky.requests("/codes/503") == 2
        # ... and not without it, as in Contour (the status warns that the codes do nothing).
        flaky.answer("/codes-without-condition", 503, times=1)
        assert (await harness.get(RETRY_HOST, "/codes-without-condition")).status_code == 503
        assert flaky.requests("/codes-without-condition") == 1
        warnings = str(harness.status_of("HTTPProxy", "default", "retries"))
        assert "spec.routes[4].retryPolicy.retriableStatusCodes" in warnings


REDIRECT_HOST = "internal-redirects.e2e.example.com"


async def test_internal_redirects_followed_by_envoy(harness: Harness) -> None:
    async with backends("default", "redirector") as (backend,):
        await harness.apply(
            {
                "svc.yaml": services(backend),
                "proxy.yaml": proxy(
                    "internal-redirects",
                    REDIRECT_HOST,
                    """\
                    - conditions: [{prefix: /follow}]
                      internalRedirectPolicy: {}
                      services: [{name: redirector, port: 80}]
                    - conditions: [{prefix: /only-301}]
                      internalRedirectPolicy: {redirectResponseCodes: [301]}
                      services: [{name: redirector, port: 80}]
                    - conditions: [{prefix: /twice}]
                      internalRedirectPolicy: {maxInternalRedirects: 2}
                      services: [{name: redirector, port: 80}]
                    - conditions: [{prefix: /repeat}]
                      internalRedirectPolicy:
                        maxInternalRedirects: 5
                        denyRepeatedRouteRedirect: true
                      services: [{name: redirector, port: 80}]
                    - conditions: [{prefix: /}]
                      services: [{name: redirector, port: 80}]
                    """,
                ),
            }
        )

        def redirect(path: str, to: str, status: int = 302) -> None:
            backend.answer(path, status, location=f"http://{REDIRECT_HOST}{to}")

        # Followed: the client gets the final answer, and the backend saw both paths.
        redirect("/follow/start", "/final/a")
        r = await harness.get(REDIRECT_HOST, "/follow/start")
        assert echo(r)["path"] == "/final/a"
        assert (backend.requests("/follow/start"), backend.requests("/final/a")) == (1, 1)
        # Without a policy the redirect reaches the client.
        redirect("/plain/start", "/final/b")
        r = await harness.get(REDIRECT_HOST, "/plain/start")
        assert r.status_code == 302 and r.headers["location"].endswith("/final/b")
        assert backend.requests("/final/b") == 0
        # A code the policy does not list passes through; a listed one is followed.
        redirect("/only-301/found", "/final/c", 302)
        r = await harness.get(REDIRECT_HOST, "/only-301/found")
        assert r.status_code == 302 and backend.requests("/final/c") == 0
        redirect("/only-301/moved", "/final/d", 301)
        assert echo(await harness.get(REDIRECT_HOST, "/only-301/moved"))["path"] == "/final/d"
        # maxInternalRedirects: two hops are followed where two are allowed (here both through
        # the same route, which only denyRepeatedRouteRedirect refuses), one by default.
        redirect("/twice/a", "/twice/b")
        redirect("/twice/b", "/twice/c")
        assert echo(await harness.get(REDIRECT_HOST, "/twice/a"))["path"] == "/twice/c"
        redirect("/follow/a", "/follow/b")
        redirect("/follow/b", "/final/f")
        r = await harness.get(REDIRECT_HOST, "/follow/a")
        assert r.status_code == 302 and r.headers["location"].endswith("/final/f")
        assert (backend.requests("/follow/b"), backend.requests("/final/f")) == (1, 0)
        # denyRepeatedRouteRedirect: a second redirect to the same route is not followed.
        redirect("/repeat/a", "/repeat/b")
        redirect("/repeat/b", "/repeat/c")
        r = await harness.get(REDIRECT_HOST, "/repeat/a")
        assert r.status_code == 302 and r.headers["location"].endswith("/repeat/c")
        assert (backend.requests("/repeat/b"), backend.requests("/repeat/c")) == (1, 0)


# --- headers and rewrites -----------------------------------------------------------------------

HEADERS_HOST = "headers.e2e.example.com"


async def test_header_policies_seen_by_backend_and_client(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("team", "app")),
            "root.yaml": (
                "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
                "metadata: {name: root, namespace: default}\n"
                f"spec:\n  virtualhost: {{fqdn: {HEADERS_HOST}}}\n"
                "  includes: [{name: headers, namespace: team}]\n"
            ),
            "team.yaml": (
                "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
                "metadata: {name: headers, namespace: team}\n"
                "spec:\n  routes:\n"
                + textwrap.indent(
                    textwrap.dedent("""\
                    - requestHeadersPolicy:
                        set:
                          - {name: x-namespace, value: "%CONTOUR_NAMESPACE%"}
                          - {name: x-literal, value: "100% sure, %UNKNOWN%"}
                          - {name: x-copied, value: "from %REQ(x-source)%"}
                          - {name: x-overwritten, value: proxy}
                        remove: [x-secret]
                      responseHeadersPolicy:
                        set: [{name: x-served-by, value: turnout}]
                        remove: [set-cookie]
                      services:
                        - name: app
                          port: 80
                          requestHeadersPolicy:
                            set:
                              - name: x-service
                                value: "%CONTOUR_SERVICE_NAME%:%CONTOUR_SERVICE_PORT%"
                              - {name: x-overwritten, value: service}
                    """),
                    "    ",
                )
            ),
        }
    )
    r = await harness.get(
        HEADERS_HOST,
        "/page?set-cookie=a%3D1",
        headers={"x-secret": "hunter2", "x-source": "client", "x-overwritten": "client"},
    )
    seen = echo(r)["headers"]
    assert seen["x-namespace"] == "team"  # the namespace of the proxy that wrote the route
    assert seen["x-literal"] == "100% sure, %UNKNOWN%"  # escaped for Envoy, literal upstream
    assert seen["x-copied"] == "from client"
    # Set replaces, it does not append; and the route's change comes after the service's.
    assert seen["x-overwritten"] == "proxy"
    assert seen["x-service"] == "app:80"
    assert "x-secret" not in seen
    assert r.headers["x-served-by"] == "turnout"
    assert "set-cookie" not in r.headers  # the backend sent one; the response policy removed it


HOST_REWRITE_HOST = "host-rewrite.e2e.example.com"


async def test_host_rewrite_literal_from_header_and_per_service(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "proxy.yaml": proxy(
                "host-rewrite",
                HOST_REWRITE_HOST,
                """\
                - conditions: [{prefix: /literal}]
                  requestHeadersPolicy: {set: [{name: Host, value: internal.example.com}]}
                  services: [{name: app, port: 80}]
                - conditions: [{prefix: /from-header}]
                  requestHeadersPolicy: {set: [{name: host, value: "%REQ(x-target-host)%"}]}
                  services: [{name: app, port: 80}]
                - conditions: [{prefix: /service}]
                  services:
                    - name: app
                      port: 80
                      requestHeadersPolicy: {set: [{name: host, value: app.internal}]}
                - conditions: [{prefix: /kept}]
                  services: [{name: app, port: 80}]
                """,
            ),
        }
    )
    assert echo(await harness.get(HOST_REWRITE_HOST, "/literal"))["host"] == "internal.example.com"
    r = await harness.get(HOST_REWRITE_HOST, "/from-header", {"x-target-host": "b.internal"})
    assert echo(r)["host"] == "b.internal"
    # Without the header Envoy keeps the Host the client sent.
    assert echo(await harness.get(HOST_REWRITE_HOST, "/from-header"))["host"] == HOST_REWRITE_HOST
    assert echo(await harness.get(HOST_REWRITE_HOST, "/service"))["host"] == "app.internal"
    assert echo(await harness.get(HOST_REWRITE_HOST, "/kept"))["host"] == HOST_REWRITE_HOST


REWRITE_HOST = "rewrite.e2e.example.com"


async def test_prefix_rewrite_with_and_without_trailing_slash(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "proxy.yaml": proxy(
                "rewrite",
                REWRITE_HOST,
                """\
                - conditions: [{prefix: /strip}]
                  pathRewritePolicy: {replacePrefix: [{replacement: /}]}
                  services: [{name: app, port: 80}]
                - conditions: [{prefix: /old/}]
                  pathRewritePolicy: {replacePrefix: [{replacement: /new}]}
                  services: [{name: app, port: 80}]
                - conditions: [{prefix: /api}]
                  pathRewritePolicy:
                    replacePrefix:
                      - {prefix: /other, replacement: /unused}
                      - {replacement: /v2/}
                  services: [{name: app, port: 80}]
                """,
            ),
        }
    )

    async def seen(path: str) -> str:
        return str(echo(await harness.get(REWRITE_HOST, path))["path"])

    # Without the /strip + /strip/ split these would reach the backend as //users and /...
    assert await seen("/strip/users?id=1") == "/users?id=1"
    assert await seen("/strip/") == "/"
    assert await seen("/strip") == "/"
    # A string prefix still: /stripped keeps its tail.
    assert await seen("/stripped") == "/ped"
    # The route was written with a trailing slash and the replacement without one.
    assert await seen("/old/page") == "/new/page"
    assert await seen("/old") == "/new"
    # The default replacement applies (the /other entry names another prefix).
    assert await seen("/api/users") == "/v2/users"
    assert await seen("/api") == "/v2"


# --- mirroring ----------------------------------------------------------------------------------

MIRROR_HOST = "mirror.e2e.example.com"


async def _wait_for_count(server: EchoServer, path: str, at_least: int) -> int:
    # Mirrored requests are sent alongside the live one; they may arrive a little later.
    for _ in range(50):
        if server.requests(path) >= at_least:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.2)
    return server.requests(path)


async def test_mirror_gets_all_or_a_share_of_the_requests(harness: Harness) -> None:
    async with backends("default", "live", "shadow") as (live, shadow):
        await harness.apply(
            {
                "svc.yaml": services(live, shadow),
                "proxy.yaml": proxy(
                    "mirror",
                    MIRROR_HOST,
                    """\
                    - conditions: [{prefix: /all}]
                      services:
                        - {name: live, port: 80}
                        - {name: shadow, port: 80, mirror: true}
                    - conditions: [{prefix: /some}]
                      services:
                        - {name: live, port: 80}
                        - {name: shadow, port: 80, mirror: true, weight: 30}
                    """,
                ),
            }
        )
        async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
            for _ in range(20):
                r = await client.get("/all", headers={"Host": MIRROR_HOST})
                assert echo(r)["service"] == "live"  # the client only ever sees the live answer
            assert live.requests("/all") == 20
            assert await _wait_for_count(shadow, "/all", 20) == 20
            n = 400
            for _ in range(n):
                assert (await client.get("/some", headers={"Host": MIRROR_HOST})).status_code == 200
        assert live.requests("/some") == n
        mirrored = await _wait_for_count(shadow, "/some", 1)
        # 30% of 400 is 120 (standard deviation about 9): a wide margin, still far from 0 or all.
        assert 70 <= mirrored <= 170, mirrored


# --- websockets ---------------------------------------------------------------------------------

WS_HOST = "ws.e2e.example.com"


async def test_websocket_upgrade_only_where_enabled(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "proxy.yaml": proxy(
                "ws",
                WS_HOST,
                """\
                - conditions: [{prefix: /ws}]
                  enableWebsockets: true
                  services: [{name: app, port: 80}]
                - conditions: [{prefix: /}]
                  services: [{name: app, port: 80}]
                """,
            ),
        }
    )
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(
            f"{harness.base_url}/ws/chat", headers={"Host": WS_HOST}
        ) as ws:
            for text in ("hello", "through envoy"):
                await ws.send_str(text)
                assert await asyncio.wait_for(ws.receive_str(), 5.0) == text
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(f"{harness.base_url}/plain", headers={"Host": WS_HOST})
        assert refused.value.status == 403  # Envoy refuses an upgrade the route does not allow


# --- load-balancing affinity --------------------------------------------------------------------

HASH_HOST = "hash.e2e.example.com"


async def test_request_hash_keeps_a_header_value_on_one_endpoint(harness: Harness) -> None:
    async with backends("default", "one", "two") as servers:
        await harness.apply(
            {
                "svc.yaml": multi_endpoint_service("default", "sticky", [s.port for s in servers]),
                "proxy.yaml": proxy(
                    "hash",
                    HASH_HOST,
                    """\
                    - conditions: [{prefix: /header}]
                      loadBalancerPolicy:
                        strategy: RequestHash
                        requestHashPolicies: [{headerHashOptions: {headerName: x-user}}]
                      services: [{name: sticky, port: 80}]
                    - conditions: [{prefix: /query}]
                      loadBalancerPolicy:
                        strategy: RequestHash
                        requestHashPolicies: [{queryParameterHashOptions: {parameterName: user}}]
                      services: [{name: sticky, port: 80}]
                    """,
                ),
            }
        )
        async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:

            async def served(path: str, user: str, by_header: bool) -> str:
                headers = {"Host": HASH_HOST}
                if by_header:
                    headers["x-user"] = user
                    r = await client.get(path, headers=headers)
                else:
                    r = await client.get(f"{path}?user={user}", headers=headers)
                return str(echo(r)["service"])

            for path, by_header in (("/header", True), ("/query", False)):
                for user in ("alice", "bob"):
                    seen = Counter([await served(path, user, by_header) for _ in range(20)])
                    assert len(seen) == 1, (path, user, seen)  # always the same endpoint
                # Different values spread over both endpoints (ring hash of 32 users: the chance
                # that all land on one of two endpoints is about 2 in 4 billion).
                spread = {await served(path, f"user-{i}", by_header) for i in range(32)}
                assert spread == {"one", "two"}, (path, spread)


COOKIE_HOST = "affinity.e2e.example.com"


async def test_cookie_strategy_sets_a_session_cookie_and_sticks_to_it(harness: Harness) -> None:
    async with backends("default", "one", "two") as servers:
        await harness.apply(
            {
                "svc.yaml": multi_endpoint_service(
                    "default", "sessions", [s.port for s in servers]
                ),
                "proxy.yaml": proxy(
                    "affinity",
                    COOKIE_HOST,
                    """\
                    - loadBalancerPolicy: {strategy: Cookie}
                      services: [{name: sessions, port: 80}]
                    """,
                ),
            }
        )
        served: set[str] = set()
        for _ in range(12):
            # A new client each time: no cookie yet, so Envoy picks an endpoint and sets one.
            async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
                first = await client.get("/", headers={"Host": COOKIE_HOST})
                cookie = first.headers["set-cookie"]
                assert cookie.startswith("X-Contour-Session-Affinity=")
                assert "Path=/" in cookie and "Max-Age" not in cookie  # a session cookie
                value = cookie.split(";", 1)[0].split("=", 1)[1]
                backend = echo(first)["service"]
                served.add(backend)
                for _ in range(20):
                    r = await client.get(
                        "/",
                        headers={
                            "Host": COOKIE_HOST,
                            "Cookie": f"X-Contour-Session-Affinity={value}",
                        },
                    )
                    assert echo(r)["service"] == backend
                    assert "set-cookie" not in r.headers  # the cookie is only set once
        # Different sessions use both endpoints (each new cookie is a new hash).
        assert served == {"one", "two"}, served


# --- cookie rewriting ---------------------------------------------------------------------------

COOKIE_REWRITE_HOST = "cookies.e2e.example.com"


async def test_cookie_rewrite_seen_by_the_client(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "proxy.yaml": proxy(
                "cookies",
                COOKIE_REWRITE_HOST,
                """\
                - conditions: [{prefix: /app}]
                  cookieRewritePolicies:
                    - name: session
                      pathRewrite: {value: /}
                      domainRewrite: {value: cookies.e2e.example.com}
                      secure: true
                      sameSite: Strict
                    - {name: insecure, secure: false}
                  services:
                    - name: app
                      port: 80
                      cookieRewritePolicies: [{name: prefs, sameSite: Lax}]
                - conditions: [{prefix: /untouched}]
                  services: [{name: app, port: 80}]
                """,
            ),
        }
    )
    sent = [
        "session=abc; Path=/app; Domain=old.example.com; HttpOnly; SameSite=None",
        "insecure=1; Secure; Path=/",
        "prefs=dark; Max-Age=60",
        "other=2; Path=/x",
    ]
    params = httpx.QueryParams([("set-cookie", c) for c in sent])
    r = await harness.get(COOKIE_REWRITE_HOST, f"/app?{params}")
    assert r.status_code == 200
    got = r.headers.get_list("set-cookie")
    assert got == [
        "session=abc; HttpOnly; Path=/; Domain=cookies.e2e.example.com; Secure; SameSite=Strict",
        "insecure=1; Path=/",
        "prefs=dark; Max-Age=60; SameSite=Lax",  # the service's rule
        "other=2; Path=/x",  # no rule: as the backend sent it
    ]
    untouched = await harness.get(COOKIE_REWRITE_HOST, f"/untouched?{params}")
    assert untouched.headers.get_list("set-cookie") == sent


# --- IngressRoute -------------------------------------------------------------------------------

IR_HOST = "ingressroute-policies.e2e.example.com"


async def test_ingressroute_policies(harness: Harness) -> None:
    async with backends("default", "legacy") as (legacy,):
        await harness.apply(
            {
                "svc.yaml": services(legacy),
                "ir.yaml": textwrap.dedent(f"""\
                    apiVersion: contour.heptio.com/v1beta1
                    kind: IngressRoute
                    metadata: {{name: legacy, namespace: default}}
                    spec:
                      virtualhost: {{fqdn: {IR_HOST}}}
                      routes:
                        - match: /app
                          prefixRewrite: /v1
                          services: [{{name: legacy, port: 80}}]
                        - match: /slow
                          timeoutPolicy: {{request: 500ms}}
                          retryPolicy: {{count: 2}}
                          services: [{{name: legacy, port: 80}}]
                        - match: /ws
                          enableWebsockets: true
                          services: [{{name: legacy, port: 80}}]
                    """),
            }
        )
        status = harness.status_of("IngressRoute", "default", "legacy")
        assert status["currentStatus"] == "valid" and "warnings" not in status
        # Contour v1.0's plain string replacement of the matched prefix.
        assert echo(await harness.get(IR_HOST, "/app/x"))["path"] == "/v1/x"
        assert (await harness.get(IR_HOST, "/slow?delay=3")).status_code == 504
        legacy.answer("/slow", 503, times=1)
        assert echo(await harness.get(IR_HOST, "/slow"))["service"] == "legacy"
        assert legacy.requests("/slow") >= 2
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{harness.base_url}/ws", headers={"Host": IR_HOST}) as ws,
        ):
            await ws.send_str("ping")
            assert await asyncio.wait_for(ws.receive_str(), 5.0) == "ping"

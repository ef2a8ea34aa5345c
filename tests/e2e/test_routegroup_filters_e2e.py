"""Skipper predicates and filters through a real Envoy: the graph policies they need (a route's
share of traffic, compression, route CORS, direct-response headers, content-length ranges, the
client address from X-Forwarded-For) and the filters as clients and backends see them.

The first test gives Envoy every translation at once and requires it to accept them without a
deprecation warning; the others go through RouteGroups on the session's Envoy."""

from __future__ import annotations

import asyncio
import gzip
import textwrap
from collections import Counter

import httpx
import pytest

from tests.e2e.harness import Harness, service_yaml
from tests.e2e.stats import within_sigmas
from turnout.dialects.routegroup.eskip import parse_filters, parse_predicates
from turnout.dialects.routegroup.filters import translate_filters
from turnout.dialects.routegroup.predicates import translate_predicates
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.graph.model import (
    Cluster,
    Endpoint,
    Forward,
    Listener,
    ListenerProtocol,
    Route,
    RouteAction,
    RouteSource,
    RoutingGraph,
    UpstreamSettings,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.validate import enforce_envoy_limits
from turnout.objects import ObjectRef

pytestmark = pytest.mark.asyncio(loop_scope="session")

OWNER = ObjectRef("zalando.org", "RouteGroup", "default", "every")

PREDICATES = [
    'Path("/a")',
    'Path("/u/:id/*rest") && Method("GET")',
    'PathSubtree("/api") && PathRegexp(/\\.json$/) && PathRegexp(/v[0-9]/)',
    'Host(/^www[.]/) && HostAny("a.org", "b.org:8080")',
    'Methods("GET", "head") && Header("X-A", "1") && HeaderRegexp("Accept", /json/)',
    'Cookie("canary", /^A$/) && QueryParam("debug") && QueryParam("v", /^2/)',
    'Source("10.0.0.0/8", "192.168.1.7") && SourceFromLast("172.16.0.0/12")',
    'ClientIP("127.0.0.0/8")',
    "Traffic(.25) && Weight(3) && True()",
    'Traffic(.1, "canary", "A")',
    "TrafficSegment(0, 0.4)",
    "ContentLengthBetween(0, 4096)",
    "ContentLengthBetween(10, 20)",
]

FILTERS = [
    'setRequestHeader("X-A", "100%") -> appendRequestHeader("X-B", "2") '
    '-> dropRequestHeader("X-C") -> setResponseHeader("X-D", "4") '
    '-> appendResponseHeader("X-E", "5") -> dropResponseHeader("Server")',
    'setRequestHeader("Host", "backend.internal") -> modPath(/^\\/api\\/(\\w+)/, "/$1")',
    'setPath("/new") -> tee("http://shadow") -> compress() -> corsOrigin("https://a.org")',
    'ratelimit(20, "1m", 503) -> backendTimeout("1m30s") '
    '-> consistentHashKey("${request.header.X-User}") -> requestCookie("a", "b") '
    '-> responseCookie("canary", "A", 3600)',
    'redirectTo(308, "https://login.example.org/")',
    'status(201) -> inlineContent("{}", "application/json") -> setResponseHeader("X-F", "6")',
    'preserveHost("true") -> corsOrigin()',
]

APP = "default/app/80/x"
SHADOW = "default/shadow/80/x"


async def test_envoy_accepts_every_translation_without_deprecation_warnings() -> None:
    routes: list[Route] = []
    for i, text in enumerate(PREDICATES):
        t = translate_predicates(parse_predicates(text))
        assert not t.problems, (text, t.problems)
        for j, match in enumerate(t.route_matches()):
            action: RouteAction = Forward((WeightedCluster(APP, 1),))
            routes.append(Route(match, action, RouteSource(OWNER, f"p[{i}][{j}]")))
    upstream: dict[str, object] = {}
    for i, text in enumerate(FILTERS):
        f = translate_filters(parse_filters(text), mirror_cluster=lambda _: SHADOW)
        assert not f.problems, (text, f.problems)
        upstream.update(f.upstream)
        action = f.action if f.action is not None else Forward((WeightedCluster(APP, 1),))
        routes.append(
            Route(
                translate_predicates(parse_predicates(f'Path("/f{i}")')).route_matches()[0],
                action,
                RouteSource(OWNER, f"f[{i}]"),
                f.policies,
            )
        )
    # The upstream settings the filters asked for, on a hashing cluster so the balance factor
    # means something to Envoy.
    settings = UpstreamSettings(**upstream)  # type: ignore[arg-type]
    hashed = Cluster(
        "default/hashed/80/x",
        "default",
        "hashed",
        80,
        endpoints=(Endpoint("127.0.0.1", 8080),),
        outlier_detection=settings.outlier_detection,
        hash_balance_factor=settings.hash_balance_factor,
    )
    slow = Cluster(
        "default/slow/80/x",
        "default",
        "slow",
        80,
        endpoints=(Endpoint("127.0.0.1", 8081),),
        slow_start=settings.slow_start,
    )
    clusters = (
        Cluster(APP, "default", "app", 80, endpoints=(Endpoint("127.0.0.1", 8082),)),
        Cluster(SHADOW, "default", "shadow", 80, endpoints=(Endpoint("127.0.0.1", 8083),)),
        hashed,
        slow,
    )
    graph = RoutingGraph(
        listeners=(
            Listener(
                "ingress_http",
                "0.0.0.0",
                8080,
                ListenerProtocol.HTTP,
                (VirtualHost("every.example.org", "every.example.org", tuple(routes), OWNER),),
            ),
        ),
        clusters=tuple(sorted(clusters, key=lambda c: c.name)),
    )
    checked, problems = enforce_envoy_limits(graph)
    assert not problems, problems
    result = validate_resources(translate(checked))
    assert result.ok, result.output[-3000:]
    assert not result.deprecation_warnings, result.deprecation_warnings


# --- through RouteGroups -------------------------------------------------------------------------


def routegroup(name: str, host: str, routes: str, backends: str = "") -> str:
    spec = textwrap.dedent(f"""\
        hosts: [{host}]
        backends:
        - {{name: a, type: service, serviceName: rgf-a, servicePort: 80}}
        - {{name: b, type: service, serviceName: rgf-b, servicePort: 80}}
        - {{name: shunt, type: shunt}}
        {textwrap.dedent(backends).strip()}
        defaultBackends:
        - backendName: b
        routes:
        """) + textwrap.dedent(routes)
    return (
        "apiVersion: zalando.org/v1\nkind: RouteGroup\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        f"spec:\n{textwrap.indent(spec, '  ')}"
    )


async def apply(
    harness: Harness, name: str, host: str, routes: str, backends: str = "", accepted: bool = True
) -> None:
    """Applies the RouteGroup and its Services; with `accepted`, checks that it is Accepted."""
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "rgf-a"), ("default", "rgf-b")),
            "rg.yaml": routegroup(name, host, routes, backends),
        }
    )
    if accepted:
        status = harness.status_of("RouteGroup", "default", name)
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Accepted"]["status"] == "True", status


async def test_traffic_takes_its_share_of_requests(harness: Harness) -> None:
    host = "traffic.rgf.example.org"
    await apply(
        harness,
        "traffic",
        host,
        """\
        - pathSubtree: /
          predicates: ["Traffic(.3)"]
          backends: [{backendName: a}]
        - pathSubtree: /
        """,
    )
    n = 400
    counts: Counter[str] = await harness.distribution(host, "/", n)
    assert set(counts) == {"default/rgf-a", "default/rgf-b"}, counts
    assert within_sigmas(counts["default/rgf-a"], n, 0.3), counts


async def test_sticky_traffic_follows_the_cookie(harness: Harness) -> None:
    host = "sticky.rgf.example.org"
    await apply(
        harness,
        "sticky",
        host,
        """\
        - pathSubtree: /
          predicates: ['Traffic(.5, "canary", "A")']
          filters: ['responseCookie("canary", "A")']
          backends: [{backendName: a}]
        - pathSubtree: /
          filters: ['responseCookie("canary", "B")']
        """,
    )
    for _ in range(20):
        assert await harness.served_by(host, "/", {"cookie": "canary=A"}) == "default/rgf-a"
        assert await harness.served_by(host, "/", {"cookie": "canary=B"}) == "default/rgf-b"
    seen: Counter[str] = Counter()
    for _ in range(60):
        r = await harness.get(host, "/")
        cookie = r.headers["set-cookie"]
        backend = r.json()["service"]
        # The cookie set tells the client which group it landed in.
        assert cookie.startswith("canary=A;" if backend == "rgf-a" else "canary=B;"), cookie
        assert "HttpOnly" in cookie and "Path=/" in cookie
        seen[backend] += 1
    assert seen["rgf-a"] > 0 and seen["rgf-b"] > 0, seen


async def test_compress_only_where_asked(harness: Harness) -> None:
    host = "compress.rgf.example.org"
    await apply(
        harness,
        "compress",
        host,
        """\
        - pathSubtree: /zipped
          filters: ["compress()"]
        - pathSubtree: /
        """,
    )
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        headers = {"Host": host, "Accept-Encoding": "gzip"}
        zipped = await client.get("/zipped", headers=headers)
        plain = await client.get("/plain", headers=headers)
    assert zipped.headers.get("content-encoding") == "gzip"
    assert zipped.json()["path"] == "/zipped"  # httpx decoded it
    assert "content-encoding" not in plain.headers
    # The bytes on the wire are gzip.
    async with (
        httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client,
        client.stream("GET", "/zipped", headers=headers) as stream,
    ):
        wire = b"".join([chunk async for chunk in stream.aiter_raw()])
    assert b'"path": "/zipped"' in gzip.decompress(wire)


async def test_cors_origin_per_route(harness: Harness) -> None:
    host = "cors.rgf.example.org"
    await apply(
        harness,
        "cors",
        host,
        """\
        - pathSubtree: /listed
          filters: ['corsOrigin("https://a.example.org")']
        - pathSubtree: /any
          filters: ['corsOrigin()']
        - path: /answered
          filters: ['status(200)', 'inlineContent("hello")', 'corsOrigin()']
          backends: [{backendName: shunt}]
        - pathSubtree: /
        """,
    )
    listed = await harness.get(host, "/listed", {"Origin": "https://a.example.org"})
    assert listed.headers.get("access-control-allow-origin") == "https://a.example.org"
    other = await harness.get(host, "/listed", {"Origin": "https://evil.example.org"})
    assert "access-control-allow-origin" not in other.headers
    # Skipper's corsOrigin() always answers "*", with or without an Origin.
    anyone = await harness.get(host, "/any", {"Origin": "https://b.example.org"})
    assert anyone.headers.get("access-control-allow-origin") == "*"
    assert (await harness.get(host, "/any")).headers.get("access-control-allow-origin") == "*"
    answered = await harness.get(host, "/answered", {"Origin": "https://b.example.org"})
    assert answered.status_code == 200 and answered.text == "hello"
    assert answered.headers.get("access-control-allow-origin") == "*"
    none = await harness.get(host, "/else", {"Origin": "https://a.example.org"})
    assert "access-control-allow-origin" not in none.headers


async def test_ratelimit_answers_its_status_when_spent(harness: Harness) -> None:
    host = "ratelimit.rgf.example.org"
    await apply(
        harness,
        "ratelimit",
        host,
        """\
        - pathSubtree: /limited
          filters: ['ratelimit(3, "1h")']
        - pathSubtree: /
        """,
    )
    statuses = [(await harness.get(host, "/limited")).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    assert (await harness.get(host, "/other")).status_code == 200


async def test_headers_cookies_and_rewrites_seen_by_backend_and_client(harness: Harness) -> None:
    host = "headers.rgf.example.org"
    await apply(
        harness,
        "headers",
        host,
        """\
        - pathSubtree: /api
          filters:
          - 'setRequestHeader("X-Team", "100% rgf")'
          - 'dropRequestHeader("X-Secret")'
          - 'requestCookie("flag", "on")'
          - 'setResponseHeader("X-Served-By", "turnout")'
          - 'modPath(/^\\/api\\/(\\w+)/, "/v2/$1")'
        """,
    )
    r = await harness.get(host, "/api/orders/7", {"X-Secret": "s", "Cookie": "sid=1"})
    seen = r.json()
    assert seen["path"] == "/v2/orders/7"
    assert seen["headers"]["x-team"] == "100% rgf"
    assert "x-secret" not in seen["headers"]
    assert "flag=on" in seen["headers"]["cookie"] and "sid=1" in seen["headers"]["cookie"]
    assert r.headers["x-served-by"] == "turnout"


async def test_shunt_answers_with_status_content_and_headers(harness: Harness) -> None:
    host = "shunt.rgf.example.org"
    await apply(
        harness,
        "shunt",
        host,
        """\
        - path: /created
          filters:
          - status(201)
          - 'inlineContent("{\\"ok\\": true}", "application/json")'
          - 'setResponseHeader("X-Shunt", "yes")'
          backends: [{backendName: shunt}]
        - path: /login
          filters: ['redirectTo(308, "https://login.example.org/")']
          backends: [{backendName: shunt}]
        """,
    )
    r = await harness.get(host, "/created")
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-shunt"] == "yes"
    assert r.json() == {"ok": True}
    r = await harness.get(host, "/login?x=1")
    assert r.status_code == 308
    assert r.headers["location"] == "https://login.example.org/?x=1"


async def test_content_length_and_client_address_predicates(harness: Harness) -> None:
    host = "match.rgf.example.org"
    await apply(
        harness,
        "match",
        host,
        """\
        - pathSubtree: /upload
          predicates: ["ContentLengthBetween(1, 10)"]
          backends: [{backendName: a}]
        - pathSubtree: /office
          predicates: ['Source("10.0.0.0/8")']
          backends: [{backendName: a}]
        - pathSubtree: /local
          predicates: ['ClientIP("127.0.0.0/8")']
          backends: [{backendName: a}]
        - pathSubtree: /peer
          predicates: ['Source("127.0.0.0/8")']
          backends: [{backendName: a}]
        - pathSubtree: /
        """,
    )
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        small = await client.post("/upload", headers={"Host": host}, content=b"12345")
        big = await client.post("/upload", headers={"Host": host}, content=b"x" * 20)
    assert small.json()["service"] == "rgf-a"
    assert big.json()["service"] == "rgf-b"
    assert await harness.served_by(host, "/office", {"X-Forwarded-For": "10.1.2.3"}) == (
        "default/rgf-a"
    )
    # Nothing sent: the peer, 127.0.0.1.
    assert await harness.served_by(host, "/office") == "default/rgf-b"
    assert await harness.served_by(host, "/local") == "default/rgf-a"
    # Source without X-Forwarded-For is the peer; with it, the first address sent.
    assert await harness.served_by(host, "/peer") == "default/rgf-a"
    assert await harness.served_by(host, "/peer", {"X-Forwarded-For": "10.1.2.3"}) == (
        "default/rgf-b"
    )
    # ClientIP is the peer, whatever X-Forwarded-For claims.
    assert await harness.served_by(host, "/local", {"X-Forwarded-For": "10.1.2.3"}) == (
        "default/rgf-a"
    )


async def test_unsupported_filter_is_reported_and_not_installed(harness: Harness) -> None:
    host = "refused.rgf.example.org"
    await apply(
        harness,
        "refused",
        host,
        """\
        - pathSubtree: /
          filters: ['clusterRatelimit("group", 10, "1m")']
        """,
        accepted=False,
    )
    status = harness.status_of("RouteGroup", "default", "refused")
    text = str(status["conditions"])
    assert "clusterRatelimit" in text and "rate limit service" in text
    r = await harness.get(host, "/")
    assert r.status_code == 500 and "rgf-" not in r.text


async def test_upstream_filters_reach_the_clusters(harness: Harness) -> None:
    host = "upstream.rgf.example.org"
    await apply(
        harness,
        "upstream",
        host,
        """\
        - pathSubtree: /fade
          filters: ['fadeIn("30s", 2)', 'consecutiveBreaker(3, "20s")']
          backends: [{backendName: a}]
        - pathSubtree: /hash
          filters:
          - 'consistentHashKey("${request.header.X-User}")'
          - 'consistentHashBalanceFactor(1.5)'
          backends: [{backendName: hashed}]
        - pathSubtree: /
        """,
        backends="- {name: hashed, type: service, serviceName: rgf-a, servicePort: 80, "
        "algorithm: consistentHash}",
    )
    assert await harness.served_by(host, "/fade") == "default/rgf-a"
    assert await harness.served_by(host, "/hash", {"X-User": "u1"}) == "default/rgf-a"
    clusters = [
        c for c in await harness.active_clusters() if c["name"].startswith("default/rgf-a/")
    ]
    fading = [c for c in clusters if "slow_start_config" in c.get("round_robin_lb_config", {})]
    assert len(fading) == 1, clusters
    slow = fading[0]["round_robin_lb_config"]["slow_start_config"]
    assert slow["slow_start_window"] == "30s"
    assert slow["aggression"]["default_value"] == 0.5  # Skipper's exponent 2
    outlier = fading[0]["outlier_detection"]
    assert outlier["consecutive_5xx"] == 3
    assert outlier["base_ejection_time"] == "20s"
    hashed = [c for c in clusters if c.get("lb_policy") == "RING_HASH"]
    assert len(hashed) == 1, clusters
    factor = hashed[0]["common_lb_config"]["consistent_hashing_lb_config"]
    assert factor["hash_balance_factor"] == 150


async def test_tee_backend_timeout_and_set_path(harness: Harness) -> None:
    """tee copies each request to its URL, backendTimeout answers 504 when the backend is
    slower, setPath sends the backend the new path."""
    host = "tee.rgf.example.org"
    shadow_port = await harness.backend("default", "rgf-shadow")
    shadow = harness._echoes[("default", "rgf-shadow")]
    await apply(
        harness,
        "teeing",
        host,
        f"""\
        - pathSubtree: /copied
          filters: ['tee("http://127.0.0.1:{shadow_port}")']
          backends: [{{backendName: a}}]
        - pathSubtree: /slow
          filters: ['backendTimeout("200ms")']
          backends: [{{backendName: a}}]
        - path: /old
          filters: ['setPath("/new/place")']
          backends: [{{backendName: a}}]
        """,
    )
    shadow.reset_counts()
    for _ in range(3):
        assert await harness.served_by(host, "/copied/x") == "default/rgf-a"
    mirrored = await harness.eventually(
        lambda: asyncio.sleep(0, result=shadow.requests("/copied/x")), 3
    )
    assert mirrored == 3
    slow = await harness.get(host, "/slow/x?delay=1s")
    assert slow.status_code == 504
    fast = await harness.get(host, "/slow/x?delay=10ms")
    assert fast.status_code == 200
    moved = await harness.get(host, "/old?q=1")
    assert moved.status_code == 200
    assert moved.json()["path"] == "/new/place?q=1"


async def test_path_literals_match_escaped_requests(harness: Harness) -> None:
    """Path("/café") and PathSubtree("/a b") take the paths clients send for them."""
    host = "escaped.rgf.example.org"
    await apply(
        harness,
        "escaped",
        host,
        """\
        - path: /café
          backends: [{backendName: a}]
        - pathSubtree: /a b
          backends: [{backendName: a}]
        - pathSubtree: /
        """,
    )
    for path in ("/caf%C3%A9", "/caf%c3%a9", "/a%20b", "/a%20b/c"):
        assert await harness.served_by(host, path) == "default/rgf-a", path
    for path in ("/cafe", "/a%20bc"):
        assert await harness.served_by(host, path) == "default/rgf-b", path


async def test_request_header_templates(harness: Harness) -> None:
    """${request.header.X}, ${request.method} and ${request.clientIP} reach the backend filled
    in; a header whose only placeholder is unresolved is not sent, as in Skipper."""
    host = "templates.rgf.example.org"
    await apply(
        harness,
        "templates",
        host,
        """\
        - pathSubtree: /
          filters:
          - 'setRequestHeader("X-User", "${request.header.X-Id}")'
          - 'setRequestHeader("X-Seen", "${request.method} from ${request.clientIP} 100%")'
          backends: [{backendName: a}]
        """,
    )
    r = await harness.get(host, "/x", {"X-Id": "alice"})
    headers = r.json()["headers"]
    assert headers["x-user"] == "alice"
    assert headers["x-seen"] == "GET from 127.0.0.1 100%"
    r = await harness.get(host, "/x")
    assert "x-user" not in r.json()["headers"]


# Skipper's ApplyContext (eskip/template.go): a template is resolved only when every placeholder
# comes out non-empty, and the header filters leave the header alone otherwise. Each row: the
# filter, the request's headers, the header the backend sees (None: not sent).
TEMPLATE_ROWS = [
    ('setRequestHeader("X-T", "p-${request.header.X-Id}")', {}, None),
    ('setRequestHeader("X-T", "p-${request.header.X-Id}")', {"X-Id": "7"}, "p-7"),
    ('setRequestHeader("X-T", "p-${request.header.X-Id}")', {"X-Id": ""}, None),
    ('setRequestHeader("X-T", "p-${request.header.X-Id}")', {"X-T": "mine"}, "mine"),
    ('setRequestHeader("X-T", "p-${request.header.X-Id}")', {"X-T": "a", "X-Id": "b"}, "p-b"),
    ('setRequestHeader("X-T", "${request.header.A}/${request.header.B}")', {"A": "1"}, None),
    (
        'setRequestHeader("X-T", "${request.header.A}/${request.header.B}")',
        {"A": "1", "B": "2"},
        "1/2",
    ),
    ('appendRequestHeader("X-T", "q-${request.header.X-Id}")', {"X-T": "old"}, "old"),
    ('appendRequestHeader("X-T", "q-${request.header.X-Id}")', {"X-Id": "9"}, "q-9"),
    ('setRequestHeader("X-T", "${request.method} 100%")', {}, "GET 100%"),
    ('setRequestHeader("X-T", "Bearer ${request.header.Token}")', {}, None),
    ('setRequestHeader("X-T", "Bearer ${request.header.Token}")', {"Token": "t"}, "Bearer t"),
]


async def test_header_templates_follow_skippers_table(harness: Harness) -> None:
    host = "tpl-table.rgf.example.org"
    routes = "".join(
        f"- path: /r{i}\n  filters: [{filter_!r}]\n  backends: [{{backendName: a}}]\n"
        for i, (filter_, _, _) in enumerate(TEMPLATE_ROWS)
    )
    await apply(harness, "tpl-table", host, routes)
    for i, (filter_, sent, expected) in enumerate(TEMPLATE_ROWS):
        r = await harness.get(host, f"/r{i}", sent)
        assert r.status_code == 200, (filter_, r.status_code)
        assert r.json()["headers"].get("x-t") == expected, (filter_, sent)


# Skipper's own redirect table (filters/builtin/redirect_test.go, TestRedirect): the request is
# `/some/path?foo=1&bar=2` on incoming.example.org, each row the location and the Location sent.
REDIRECT_ROWS = [
    (None, "https://{host}/some/path?foo=1&bar=2"),
    ("http:", "http://{host}/some/path?foo=1&bar=2"),
    ("http://redirect.example.org", "http://redirect.example.org/some/path?foo=1&bar=2"),
    (
        "http://redirect.example.org/some/other/path",
        "http://redirect.example.org/some/other/path?foo=1&bar=2",
    ),
    (
        "http://redirect.example.org/some/other/path?newquery=3",
        "http://redirect.example.org/some/other/path?foo=1&bar=2&newquery=3",
    ),
    ("//redirect.example.org", "https://redirect.example.org/some/path?foo=1&bar=2"),
    (
        "//redirect.example.org/some/other/path?newquery=3",
        "https://redirect.example.org/some/other/path?foo=1&bar=2&newquery=3",
    ),
    ("/some/other/path", "https://{host}/some/other/path?foo=1&bar=2"),
    ("/some/other/path?newquery=3", "https://{host}/some/other/path?foo=1&bar=2&newquery=3"),
    ("?newquery=3", "https://{host}/some/path?foo=1&bar=2&newquery=3"),
    ("http:///some/other/path?newquery=3", "http://{host}/some/other/path?foo=1&bar=2&newquery=3"),
    ("http://?newquery=3", "http://{host}/some/path?foo=1&bar=2&newquery=3"),
]


def redirect_filter(location: str | None) -> str:
    return "redirectTo(302)" if location is None else f'redirectTo(302, "{location}")'


async def test_redirects_follow_skippers_table(harness: Harness) -> None:
    host = "redirect-table.rgf.example.org"
    routes = "".join(
        f'- path: /some/path\n  predicates: [\'Header("X-Row", "{i}")\']\n'
        f"  filters: ['{redirect_filter(location)}']\n"
        "  backends: [{backendName: shunt}]\n"
        for i, (location, _) in enumerate(REDIRECT_ROWS)
    )
    await apply(harness, "redirect-table", host, routes)
    for i, (location, expected) in enumerate(REDIRECT_ROWS):
        r = await harness.get(host, "/some/path?foo=1&bar=2", {"X-Row": str(i)})
        assert r.status_code == 302, (location, r.status_code)
        assert r.headers["location"] == expected.format(host=host), location
    # Without a request query Skipper still joins with "&" (RawQuery + "&" + query).
    r = await harness.get(host, "/some/path", {"X-Row": "8"})
    assert r.headers["location"] == f"https://{host}/some/other/path?&newquery=3"


async def test_a_backend_without_endpoints_answers_502_for_its_share(harness: Harness) -> None:
    """Skipper routes each backend of a split on its own; the one of a Service without ready
    endpoints answers 502 "no endpoints", the others forward."""
    host = "empty-share.rgf.example.org"
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "rgf-a"))
            + "---\n"
            + service_yaml("default", "rgf-empty", 80, None),
            "rg.yaml": routegroup(
                "empty-share",
                host,
                """\
                - pathSubtree: /
                  backends: [{backendName: a, weight: 50}, {backendName: empty, weight: 50}]
                """,
                "- {name: empty, type: service, serviceName: rgf-empty, servicePort: 80}",
            ),
        }
    )
    answers: Counter[tuple[int, str]] = Counter()
    for _ in range(60):
        r = await harness.get(host, "/x")
        answers[(r.status_code, r.text if r.status_code != 200 else r.json()["service"])] += 1
    assert set(answers) == {(200, "rgf-a"), (502, "no endpoints")}, answers

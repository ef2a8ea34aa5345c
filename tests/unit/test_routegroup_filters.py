"""Skipper filters onto the graph's route policies, actions and upstream settings, and the
filters (or forms of them) that are refused, each with its reason."""

from __future__ import annotations

import pytest

from turnout.dialects.routegroup.eskip import parse_filters
from turnout.dialects.routegroup.filters import FilterTranslation, translate_filters
from turnout.graph.model import (
    COMPRESSIBLE_TYPES,
    Cluster,
    Compression,
    CorsPolicy,
    DirectResponse,
    ExactOrigin,
    Forward,
    HashPolicy,
    HashSource,
    HeaderMatch,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    LocalRateLimit,
    Mirror,
    OutlierDetection,
    PathRewrite,
    Redirect,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    SlowStart,
    StringMatchKind,
    Timeouts,
    WeightedCluster,
)
from turnout.graph.validate import action_problem, cluster_problem, match_problem, policies_problem
from turnout.objects import ObjectRef

SHADOW = "default/rg-tee/8080/abc"


def mirror(url: str) -> str | None:
    return SHADOW if url.startswith("http://shadow") else None


def translate(text: str, shunt: bool | None = None) -> FilterTranslation:
    return translate_filters(parse_filters(text), mirror_cluster=mirror, shunt=shunt)


def ok(text: str, shunt: bool | None = None) -> FilterTranslation:
    t = translate(text, shunt)
    assert not t.problems, t.problems
    return t


def problem(text: str, shunt: bool | None = None) -> tuple[str, int, str]:
    [p] = translate(text, shunt).problems
    return (p.name, p.index, p.message)


# --- headers -------------------------------------------------------------------------------------


def test_request_header_filters_in_order() -> None:
    t = ok(
        'setRequestHeader("X-A", "1") -> appendRequestHeader("X-B", "2") '
        '-> dropRequestHeader("X-C") -> setRequestHeader("X-A", "3") -> dropRequestHeader("x-b")'
    )
    # A later filter on the same header wins, as Skipper runs them one after the other.
    assert t.policies.request_headers == HeaderPolicy(
        set=(HeaderValue("X-A", "3"),), add=(), remove=("x-c", "x-b")
    )


def test_response_header_filters() -> None:
    t = ok(
        'setResponseHeader("X-Served-By", "turnout") -> appendResponseHeader("Vary", "Origin") '
        '-> dropResponseHeader("Server")'
    )
    assert t.policies.response_headers == HeaderPolicy(
        set=(HeaderValue("X-Served-By", "turnout"),),
        add=(HeaderValue("Vary", "Origin"),),
        remove=("server",),
    )


def test_header_values_are_literal_for_envoy() -> None:
    t = ok('setRequestHeader("X-Pct", "100% sure")')
    assert t.policies.request_headers == HeaderPolicy(set=(HeaderValue("X-Pct", "100%% sure"),))
    name, _, message = problem('setRequestHeader("X-Id", "${request.path}")')
    assert name == "setRequestHeader"
    assert "the template '${request.path}' is not supported" in message
    assert "template" in problem('setResponseHeader("X-Id", "${request.header.X-Id}")')[2]
    assert "template" in problem('setRequestHeader("Host", "${request.header.X-Host}")')[2]
    assert "template" in problem('setRequestHeader("X", "${request.header.a%b}")')[2]


def test_request_header_templates_envoy_can_fill() -> None:
    t = ok(
        'setRequestHeader("X-User", "u-${request.header.X-Id} 100%") '
        '-> appendRequestHeader("X-Via", "${request.method} ${request.host}") '
        '-> setRequestHeader("X-Client", "${request.clientIP}")'
    )
    assert t.policies.request_headers == HeaderPolicy(
        set=(
            HeaderValue("X-User", "u-%REQ(X-Id)% 100%%", when_resolved=True),
            HeaderValue(
                "X-Client", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%", when_resolved=True
            ),
        ),
        add=(HeaderValue("X-Via", "%REQ(:METHOD)% %REQ(:AUTHORITY)%", when_resolved=True),),
    )


def test_setting_host_rewrites_the_host() -> None:
    t = ok('setRequestHeader("Host", "backend.internal")')
    assert t.policies.host_rewrite == HostRewrite(literal="backend.internal")
    assert t.policies.request_headers is None


def test_request_and_response_cookies() -> None:
    t = ok('requestCookie("flag", "on") -> responseCookie("canary", "A", 3600)')
    assert t.policies.request_headers == HeaderPolicy(add=(HeaderValue("cookie", "flag=on"),))
    assert t.policies.response_headers == HeaderPolicy(
        add=(HeaderValue("Set-Cookie", "canary=A; Path=/; Max-Age=3600; HttpOnly"),)
    )
    seed = ok('responseCookie("canary", "B")')  # seed 003
    assert seed.policies.response_headers == HeaderPolicy(
        add=(HeaderValue("Set-Cookie", "canary=B; Path=/; HttpOnly"),)
    )
    assert "change-only" in problem('responseCookie("c", "v", 60, "change-only")')[2]


# --- paths, redirects, direct responses ---------------------------------------------------------


def test_mod_path_is_a_regex_rewrite_with_re2_groups() -> None:
    assert ok('modPath("/api", "/")').policies.path_rewrite == PathRewrite(
        regex="/api", substitution="/"
    )  # seed 003
    assert ok('modPath(/^\\/(\\w+)\\/v1/, "/$1/v2")').policies.path_rewrite == PathRewrite(
        regex="^/(\\w+)/v1", substitution="/\\1/v2"
    )
    assert ok('modPath(/(x)/, "${1}$$")').policies.path_rewrite == PathRewrite(
        regex="(x)", substitution="\\1$"
    )
    assert "names group 1" in problem('modPath(/x/, "${1}")')[2]
    assert "numbered groups" in problem('modPath(/(?P<n>x)/, "$n")')[2]


def test_set_path() -> None:
    assert ok('setPath("/new")').policies.path_rewrite == PathRewrite(full_path="/new")
    assert "templates" in problem('setPath("/u/${id}")')[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'redirectTo(308, "https://login.example.org/")',
            Redirect(scheme="https", hostname="login.example.org", path="/", status=308),
        ),
        (
            'redirectTo(308, "https://login.example.org")',  # seed 003: the request path stays
            Redirect(scheme="https", hostname="login.example.org", status=308),
        ),
        (
            'redirectTo(301, "/new?x=1")',
            Redirect(scheme="https", path="/new", status=301, query_suffix="x=1"),
        ),
        ('redirectTo(302, "?x=1")', Redirect(scheme="https", status=302, query_suffix="x=1")),
        ('redirectTo(308, "https:")', Redirect(scheme="https", status=308)),
        ('redirectTo(302, "http://a.org:8080")', Redirect("http", "a.org", 8080, status=302)),
        ("redirectTo(307)", Redirect(scheme="https", status=307)),
    ],
)
def test_redirects(text: str, expected: Redirect) -> None:
    assert ok(text).action == expected


def test_redirect_codes_envoy_cannot_send_are_refused() -> None:
    assert "not a redirect Envoy sends" in problem('redirectTo(305, "/x")')[2]


def test_status_and_inline_content_answer_directly() -> None:
    assert ok("status(418)").action == DirectResponse(418)
    assert ok('inlineContent("hello")').action == DirectResponse(
        200, "hello", (HeaderValue("content-type", "text/plain; charset=utf-8"),)
    )
    t = ok('status(201) -> inlineContent("{}", "application/json") -> setResponseHeader("X", "1")')
    # Route response headers do not reach a direct response in Envoy; they travel with it.
    assert t.action == DirectResponse(
        201, "{}", (HeaderValue("content-type", "application/json"), HeaderValue("X", "1"))
    )
    assert t.policies.response_headers is None


def test_status_on_a_forwarding_route_is_refused() -> None:
    name, index, message = problem('setPath("/") -> status(500)', shunt=False)
    assert (name, index) == ("status", 1)
    assert "replaces the backend's status" in message
    assert ok('status(500) -> inlineContent("x")', shunt=False).action == DirectResponse(
        500, "x", (HeaderValue("content-type", "text/plain; charset=utf-8"),)
    )


def test_preserve_host() -> None:
    assert ok('preserveHost("true")').preserve_host
    assert not ok('preserveHost("false")').preserve_host
    assert "invalid filter parameters" in problem('preserveHost("yes")')[2]


# --- traffic and upstream ------------------------------------------------------------------------


def test_tee_mirrors_to_the_url_cluster() -> None:
    assert ok('tee("http://shadow:8080")').policies.mirrors == (Mirror(SHADOW),)
    assert "not a backend URL" in problem('tee("ftp://x")')[2]
    assert "path rewrite" in problem('tee("http://shadow", /a/, "b")')[2]


def test_compress_cors_and_rate_limits() -> None:
    t = ok('compress() -> corsOrigin() -> ratelimit(20, "1m")')  # ratelimit: seed 003
    assert t.policies.compression == Compression(COMPRESSIBLE_TYPES)
    # Skipper always sets "*": a response header (Envoy's CORS filter would echo the Origin).
    assert t.policies.cors is None
    assert t.policies.response_headers is not None
    assert HeaderValue("Access-Control-Allow-Origin", "*") in t.policies.response_headers.set
    assert t.policies.rate_limit == LocalRateLimit(requests=20, unit_s=60)
    answered = translate_filters(
        parse_filters('status(200) -> inlineContent("x") -> corsOrigin()'), shunt=True
    )
    assert not answered.problems and isinstance(answered.action, DirectResponse)
    assert HeaderValue("Access-Control-Allow-Origin", "*") in answered.action.headers
    listed = translate_filters(
        parse_filters('status(200) -> inlineContent("x") -> corsOrigin("https://a.org")'),
        shunt=True,
    )
    assert [(p.name, p.index) for p in listed.problems] == [("corsOrigin", 2)]
    assert "answers itself" in listed.problems[0].message and listed.policies.cors is None
    t = ok('corsOrigin("https://a.org", "https://b.org") -> ratelimit(2, "1s", 503)')
    assert t.policies.cors == CorsPolicy(
        allow_origins=(ExactOrigin("https://a.org"), ExactOrigin("https://b.org"))
    )
    assert t.policies.rate_limit == LocalRateLimit(requests=2, unit_s=1, status=503)
    assert "level or MIME types" in problem('compress(9, "text/plain")')[2]
    assert "whole seconds" in problem('ratelimit(10, "500ms")')[2]


def test_timeouts_and_upstream_settings() -> None:
    t = ok(
        'backendTimeout("1m30s") -> fadeIn("3m", 2) -> consecutiveBreaker(5, "30s") '
        '-> consistentHashKey("${request.header.X-User}") -> consistentHashBalanceFactor(1.25)'
    )
    assert t.policies.timeouts == Timeouts(response_s=90.0)
    assert t.upstream["slow_start"] == SlowStart(180.0, aggression=0.5, min_weight_percent=1)
    assert t.upstream["outlier_detection"] == OutlierDetection(
        consecutive_5xx=5, interval_s=1.0, base_ejection_time_s=30.0, max_ejection_percent=100
    )
    assert t.upstream["hash_balance_factor"] == 125
    assert t.policies.hash_policies == (HashPolicy(HashSource.HEADER, "x-user"),)
    assert ok("fadeIn(1500)").upstream["slow_start"] == SlowStart(1.5, 1.0, 1)
    assert ok('consistentHashKey("${request.cookie.sid}")').policies.hash_policies == (
        HashPolicy(HashSource.COOKIE, "sid"),
    )
    assert ok('consistentHashKey("${request.clientIP}")').policies.hash_policies == (
        HashPolicy(HashSource.SOURCE_IP),
    )
    assert "not supported" in problem('consistentHashKey("${request.path}")')[2]
    assert "at least 1" in problem("consistentHashBalanceFactor(0.5)")[2]
    assert "half-open" in problem('consecutiveBreaker(5, "30s", 3)')[2]
    assert "duration" in problem('backendTimeout("10")')[2]


# --- refusals ------------------------------------------------------------------------------------


def test_unsupported_filters_are_named_with_their_position() -> None:
    t = translate(
        'oauthTokeninfoAllScope("myapp.write") -> setPath("/") -> '
        'clientRatelimit(100, "1m", "Authorization") -> lua("x")'
    )  # the first and third: seed 003
    assert [(p.name, p.index) for p in t.problems] == [
        ("oauthTokeninfoAllScope", 0),
        ("clientRatelimit", 2),
        ("lua", 3),
    ]
    assert all(f"filter {p.name} is not supported" in p.message for p in t.problems)
    # The supported ones are still translated.
    assert t.policies.path_rewrite == PathRewrite(full_path="/")


def test_filters_refused_for_a_reason_of_their_own() -> None:
    assert "rate limit service" in problem('clusterRatelimit("g", 10, "1m")')[2]


def test_jwt_validation_waits_for_discovery_without_letting_requests_through() -> None:
    # jwtValidation is no longer refused: tests/unit/test_oidc_filters.py covers its mapping.
    t = translate('jwtValidation("https://issuer.example.org")')
    assert not t.problems and t.policies.jwt is None
    [u] = t.unavailable
    assert (u.name, u.reason) == ("jwtValidation", "IssuerDiscoveryPending")


# --- the safety net knows the policies these filters and predicates need ------------------------


def test_the_safety_net_checks_the_new_graph_values() -> None:
    assert match_problem(RouteMatch(runtime_fraction=0.5)) is None
    assert "runtime fraction" in (match_problem(RouteMatch(runtime_fraction=1.5)) or "")
    good = HeaderMatch("content-length", StringMatchKind.RANGE, "0,10")
    assert match_problem(RouteMatch(headers=(good,))) is None
    for value in ("10,0", "a,b", "5", "0,9223372036854775808"):
        bad = HeaderMatch("content-length", StringMatchKind.RANGE, value)
        assert match_problem(RouteMatch(headers=(bad,))) is not None, value
    assert (
        policies_problem(RoutePolicies(compression=Compression(COMPRESSIBLE_TYPES)), frozenset())
        is None
    )
    assert "content types" in (
        policies_problem(RoutePolicies(compression=Compression(("text/csv",))), frozenset()) or ""
    )
    assert (
        policies_problem(RoutePolicies(cors=CorsPolicy((ExactOrigin("*"),))), frozenset()) is None
    )
    assert "hash balance factor" in (
        cluster_problem(Cluster("a/b/80/x", "a", "b", 80, hash_balance_factor=99)) or ""
    )
    source = RouteSource(ObjectRef("zalando.org", "RouteGroup", "a", "b"), "spec.routes[0]")
    direct = DirectResponse(200, "x", (HeaderValue("content-type", "text/plain"),))
    assert action_problem(Route(RouteMatch(), direct, source), frozenset()) is None
    broken = DirectResponse(200, "x", (HeaderValue(":status", "1"),))
    assert action_problem(Route(RouteMatch(), broken, source), frozenset()) is not None
    forward = Forward((WeightedCluster("a/b/80/x", 1),))
    assert action_problem(Route(RouteMatch(), forward, source), frozenset({"a/b/80/x"})) is None

"""Skipper predicates onto the graph: each mapping judged by the requests it lets through, in the
evaluator (which agrees with Envoy), and each refusal by the problem it reports."""

from __future__ import annotations

import pytest

from turnout.dialects.routegroup.eskip import parse_predicates
from turnout.dialects.routegroup.predicates import MatchTranslation, translate_predicates
from turnout.graph.evaluate import Request, make_request, route_miss_reason
from turnout.graph.model import (
    DirectResponse,
    PathMatch,
    PathMatchKind,
    Route,
    RouteSource,
    StringMatchKind,
    VirtualHost,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("zalando.org", "RouteGroup", "default", "rg")
VHOST = VirtualHost("any", "*", (), OWNER)


def translate(text: str) -> MatchTranslation:
    return translate_predicates(parse_predicates(text))


def ok(text: str) -> MatchTranslation:
    t = translate(text)
    assert not t.problems, t.problems
    return t


def matches(text: str, request: Request) -> bool:
    """Whether a route with these predicates takes `request` (any of its variants)."""
    t = ok(text)
    if t.never:
        return False
    for match in t.route_matches():
        route = Route(match, DirectResponse(200), RouteSource(OWNER, "spec.routes[0]"))
        if route_miss_reason(route, request, VHOST) is None:
            return True
    return False


def req(
    path: str = "/",
    host: str = "example.org",
    method: str = "GET",
    headers: dict[str, str] | None = None,
    draw: float | None = None,
) -> Request:
    r = make_request(host, path, method, headers or {})
    return Request(r.host, r.path, r.method, r.headers, r.listener, draw)


def problems(text: str) -> list[tuple[str, int, str]]:
    return [(p.name, p.index, p.message) for p in translate(text).problems]


# --- paths ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicates", "path", "expected"),
    [
        ('Path("/a")', "/a", True),
        ('Path("/a")', "/a/", False),  # Skipper: only with -ignore-trailing-slash
        ('Path("/a")', "/ab", False),
        ('Path("/a/:id")', "/a/17", True),
        ('Path("/a/:id")', "/a/17/x", False),
        ('Path("/a/:id/b")', "/a/17/b", True),
        ('Path("/a/*rest")', "/a/x/y", True),
        ('PathSubtree("/foo")', "/foo", True),
        ('PathSubtree("/foo")', "/foo/", True),
        ('PathSubtree("/foo/")', "/foo/bar/baz", True),
        ('PathSubtree("/foo")', "/foobar", False),
        ('PathSubtree("/")', "/anything", True),
        ('PathSubtree("/u/:id")', "/u/1/photos", True),
        ('PathSubtree("/u/:id")', "/v/1", False),
        ("PathRegexp(/\\.json$/)", "/x.json", True),
        ("PathRegexp(/\\.json$/)", "/x.json?a=1", True),  # the query is not part of the path
        ("PathRegexp(/\\.json$/)", "/x.jsonp", False),
        ("PathRegexp(/^\\/api/)", "/v1/api", False),
        ("PathRegexp(/api/)", "/v1/api/x", True),  # a search, not a full match
        ('PathSubtree("/api") && PathRegexp(/\\.json$/)', "/api/x.json?q=1", True),
        ('PathSubtree("/api") && PathRegexp(/\\.json$/)', "/api/x.html", False),
        ('PathSubtree("/api") && PathRegexp(/\\.json$/)', "/web/x.json", False),
        ("PathRegexp(/a/) && PathRegexp(/b/)", "/ab", True),
        ("PathRegexp(/a/) && PathRegexp(/b/)", "/aa", False),
    ],
)
def test_path_predicates(predicates: str, path: str, expected: bool) -> None:
    assert matches(predicates, req(path)) is expected


def test_path_forms_in_the_graph() -> None:
    assert ok('Path("/a")').path == PathMatch(PathMatchKind.EXACT, "/a")
    assert ok('PathSubtree("/a/")').path == PathMatch(PathMatchKind.SEGMENT_PREFIX, "/a")
    assert ok('PathSubtree("/a/*rest")').path == PathMatch(PathMatchKind.SEGMENT_PREFIX, "/a")
    assert ok('Method("GET")').path is None


def test_a_literal_path_and_a_path_regexp_are_decided_at_once() -> None:
    assert not ok('Path("/x/y") && PathRegexp(/y$/)').never
    assert ok('Path("/x/y") && PathRegexp(/z/)').never


def test_the_tree_path_is_what_the_dialect_orders_by() -> None:
    assert ok('PathSubtree("/a") && Method("GET")').tree_path == "/a"
    assert ok('PathSubtree("/a") && Method("GET")').tree_subtree
    assert ok('Path("/a/:id")').tree_path == "/a/:id"
    assert not ok('Path("/a/:id")').tree_subtree
    assert ok("PathRegexp(/a/)").tree_path is None


def test_which_fractions_are_traffic_draws() -> None:
    """Skipper draws anew for Traffic, once per request for every TrafficSegment: the dialect
    chains only the former."""
    assert ok("TrafficSegment(0, .3)").drawn_anew() == (False,)
    assert ok("Traffic(.3)").drawn_anew() == (True,)
    assert ok("Traffic(.3) && TrafficSegment(0, .5)").drawn_anew() == (True,)
    sticky = ok('Traffic(.3, "c", "g")')
    # The group's cookie decides without a draw; without the cookie the chance does.
    assert [m.runtime_fraction for m in sticky.route_matches()] == [None, 0.3]
    assert sticky.drawn_anew() == (False, True)


# --- hosts, methods, headers, cookies, query ---------------------------------------------------


@pytest.mark.parametrize(
    ("predicates", "host", "expected"),
    [
        ("Host(/^www[.]/)", "www.example.org", True),
        ("Host(/^www[.]/)", "api.example.org", False),
        ('Host("example")', "www.example.org:8080", True),  # a search over the Host, port too
        ('Host("*.example.org")', "shop.example.org", True),  # Skipper's "*." replacement
        ('Host("*.example.org")', "example.org", False),
        ('HostAny("a.org", "b.org:9090")', "b.org:9090", True),
        ('HostAny("a.org", "b.org:9090")', "b.org", False),
        ('HostAny("a.org")', "a.org", True),
    ],
)
def test_host_predicates(predicates: str, host: str, expected: bool) -> None:
    assert matches(predicates, req(host=host)) is expected


@pytest.mark.parametrize(
    ("predicates", "method", "expected"),
    [
        ('Method("GET")', "GET", True),
        ('Method("GET")', "POST", False),
        ('Method("GET") && Method("PUT")', "PUT", True),  # the last Method counts in Skipper
        ('Method("GET") && Method("PUT")', "GET", False),
        ('Methods("get", "post")', "POST", True),
        ('Methods("get", "post")', "PUT", False),
    ],
)
def test_method_predicates(predicates: str, method: str, expected: bool) -> None:
    assert matches(predicates, req(method=method)) is expected


@pytest.mark.parametrize(
    ("predicates", "headers", "expected"),
    [
        ('Header("X-Team", "a")', {"x-team": "a"}, True),
        ('Header("X-Team", "a")', {"x-team": "ab"}, False),
        ('Header("X-Team", "a")', {}, False),
        ('Header("X-Team", "a") && Header("X-Team", "b")', {"x-team": "b"}, True),  # last wins
        ('HeaderRegexp("Accept", /json/)', {"accept": "application/json; q=1"}, True),
        ('HeaderRegexp("Accept", /^text/)', {"accept": "application/json"}, False),
        ('Cookie("canary", /^A$/)', {"cookie": "a=1; canary=A; b=2"}, True),
        ('Cookie("canary", /^A$/)', {"cookie": "canary=AB"}, False),
        ('Cookie("canary", /^A$/)', {"cookie": "xcanary=A"}, False),
        ('Cookie("canary", "team")', {"cookie": "canary=my-team-x"}, True),
        ('Cookie("canary", "team")', {}, False),
        ('Cookie("canary", "team-foo")', {"cookie": "canary=team-foo"}, True),  # seed 003
    ],
)
def test_header_and_cookie_predicates(
    predicates: str, headers: dict[str, str], expected: bool
) -> None:
    assert matches(predicates, req(headers=headers)) is expected


@pytest.mark.parametrize(
    ("predicates", "path", "expected"),
    [
        ('QueryParam("debug")', "/?debug", True),
        ('QueryParam("debug")', "/?debug=1", True),
        ('QueryParam("debug")', "/?x=1", False),
        ('QueryParam("v", /^2/)', "/?v=2.1", True),
        ('QueryParam("v", /^2/)', "/?v=12", False),
    ],
)
def test_query_predicates(predicates: str, path: str, expected: bool) -> None:
    assert matches(predicates, req(path)) is expected


# --- client addresses ----------------------------------------------------------------------------

# What Envoy routes on: X-Forwarded-For as the client sent it followed by one entry Envoy appends
# (the peer, or Envoy's own address for a loopback peer: 192.0.2.2 here), and
# x-envoy-external-address, the peer (127.0.0.1 here).
ENVOY_ADDRESS = "192.0.2.2"


def addressed(xff_sent: str | None, peer: str = "127.0.0.1") -> Request:
    appended = f"{xff_sent},{ENVOY_ADDRESS}" if xff_sent else ENVOY_ADDRESS
    return req(headers={"x-forwarded-for": appended, "x-envoy-external-address": peer})


@pytest.mark.parametrize(
    ("predicates", "sent", "expected"),
    [
        ('ClientIP("127.0.0.0/8")', None, True),
        ('ClientIP("127.0.0.0/8")', "10.1.2.3", True),
        ('ClientIP("10.0.0.0/8")', "10.1.2.3", False),  # the peer, not the header
        ('Source("10.0.0.0/8")', "10.1.2.3, 192.168.0.1", True),  # the first entry sent
        ('Source("192.168.0.0/16")', "10.1.2.3, 192.168.0.1", False),
        ('Source("127.0.0.1")', None, True),  # nothing sent: the peer
        ('Source("192.0.2.2")', None, False),  # not what Envoy appended
        ('SourceFromLast("192.168.0.0/16")', "10.1.2.3, 192.168.0.1", True),
        ('SourceFromLast("10.0.0.0/8")', "10.1.2.3, 192.168.0.1", False),
        ('SourceFromLast("10.0.0.0/8")', "10.1.2.3", True),
        ('SourceFromLast("127.0.0.1")', None, True),
        ('Source("172.16.0.0/12")', "172.31.255.1", True),
        ('Source("172.16.0.0/12")', "172.32.0.1", False),
        ('Source("10.20.30.64/27")', "10.20.30.95", True),
        ('Source("10.20.30.64/27")', "10.20.30.96", False),
        ('Source("10.0.0.1", "192.168.1.0/24")', "192.168.1.200", True),
        ('Source("10.0.0.0/8") && ClientIP("127.0.0.1")', "10.9.9.9", True),
        ('Source("10.0.0.0/8") && ClientIP("127.0.0.2")', "10.9.9.9", False),
    ],
)
def test_client_address_predicates(predicates: str, sent: str | None, expected: bool) -> None:
    assert matches(predicates, addressed(sent)) is expected


def test_ipv6_networks_and_bad_addresses_are_refused() -> None:
    [(name, index, message)] = problems('Source("::1/128")')
    assert (name, index) == ("Source", 0)
    assert "IPv6" in message
    [(_, _, message)] = problems('ClientIP("10.0.0.0/33")')
    assert "is not an IP address or CIDR" in message


# --- traffic -------------------------------------------------------------------------------------


def test_traffic_is_a_fraction_of_the_requests() -> None:
    t = ok("Traffic(.3)")
    assert t.fraction == pytest.approx(0.3)
    assert matches("Traffic(.3)", req(draw=0.29))
    assert not matches("Traffic(.3)", req(draw=0.31))
    assert not matches("Traffic(.3)", req())  # no draw: the unlucky side
    # Two independent draws in Skipper: the product with Envoy's one draw.
    assert ok("Traffic(.5) && Traffic(.5)").fraction == pytest.approx(0.25)
    assert ok("Traffic(0)").never


def test_sticky_traffic_decides_by_cookie_then_by_chance() -> None:
    text = 'Traffic(.1, "canary", "A")'
    assert len(ok(text).route_matches()) == 2
    assert matches(text, req(headers={"cookie": "canary=A"}, draw=0.99))
    assert not matches(text, req(headers={"cookie": "canary=B"}, draw=0.0))
    assert matches(text, req(headers={"cookie": "other=1"}, draw=0.05))
    assert not matches(text, req(draw=0.5))
    assert matches(text, req(draw=0.05))


def test_traffic_segment_is_its_max_after_the_segments_below_it() -> None:
    t = ok("TrafficSegment(0, 0.4)")
    assert t.fraction == pytest.approx(0.4) and t.segment_start == 0
    assert t.weight == 0  # TrafficSegment leaves the priority alone
    upper = ok("TrafficSegment(0.4, 1)")
    assert upper.fraction == pytest.approx(1.0) and upper.segment_start == pytest.approx(0.4)
    assert ok("TrafficSegment(0.4, 0.4)").never
    for text in ("TrafficSegment(0.4, 1) && Traffic(.5)", "Traffic(.5) && TrafficSegment(0.4, 1)"):
        [(_, _, message)] = problems(text)
        assert "Envoy draws one random value per request" in message, text
    [(_, _, message)] = problems("TrafficSegment(0.5, 0.2)")
    assert "invalid predicate parameters" in message


# --- content length, weight, True, False --------------------------------------------------------


@pytest.mark.parametrize(
    ("predicates", "headers", "expected"),
    [
        ("ContentLengthBetween(10, 100)", {"content-length": "50"}, True),
        ("ContentLengthBetween(10, 100)", {"content-length": "100"}, False),
        ("ContentLengthBetween(10, 100)", {"content-length": "10"}, True),
        ("ContentLengthBetween(10, 100)", {}, False),
        ("ContentLengthBetween(0, 100)", {}, True),  # Go reads no length as 0
        ("ContentLengthBetween(0, 100)", {"transfer-encoding": "chunked"}, False),
    ],
)
def test_content_length(predicates: str, headers: dict[str, str], expected: bool) -> None:
    assert matches(predicates, req(headers=headers)) is expected


def test_content_length_is_a_range_match() -> None:
    t = ok("ContentLengthBetween(10, 100)")
    [header] = t.route_matches()[0].headers
    assert (header.name, header.kind, header.value) == (
        "content-length",
        StringMatchKind.RANGE,
        "10,100",
    )


@pytest.mark.parametrize(
    ("predicates", "weight"),
    [
        ('PathSubtree("/")', 0),  # tree predicates count nothing
        ('Path("/") && Method("GET")', 1),
        ('Method("GET") && Method("PUT")', 1),  # one method, however many predicates
        ('Header("a", "1") && Header("a", "2") && HeaderRegexp("b", /x/)', 2),  # per name
        ("Weight(5) && True() && True()", 7),
        ('Host(/a/) && PathRegexp(/b/) && Cookie("c", /d/) && QueryParam("e")', 4),
        ("Traffic(.5) && TrafficSegment(0, 1)", 1),
    ],
)
def test_weights_follow_skippers_leaf_weight(predicates: str, weight: int) -> None:
    assert ok(predicates).weight == weight


def test_false_never_matches_and_true_always() -> None:
    assert ok("False()").never
    assert matches("True()", req())


# --- refusals ------------------------------------------------------------------------------------


def test_unsupported_predicates_are_named_not_dropped() -> None:
    found = problems(
        'Path("/") && JWTPayloadAllKV("iss", "x") && Cron("* * * * *") && Method("GET")'
    )
    assert [(n, i) for n, i, _ in found] == [("JWTPayloadAllKV", 1), ("Cron", 2)]
    assert all(f"predicate {n} is not supported" in m for n, _, m in found)


@pytest.mark.parametrize(
    ("predicates", "name", "message"),
    [
        ("Path(1)", "Path", "expects 1 string argument"),
        ('Path("a")', "Path", "must start with '/'"),
        ('Path("/a") && PathSubtree("/b")', "PathSubtree", "multiple tree predicates"),
        ('Path("/a/*x/b")', "Path", "free wildcard param should be last"),
        ("PathRegexp(/(/)", "PathRegexp", "invalid regular expression"),
        ('Header("a")', "Header", "expects 2 string arguments"),
        ("Methods()", "Methods", "at least one method should be specified"),
        ('Methods("PUSH")', "Methods", "method: PUSH is not allowed"),
        ("Traffic(2)", "Traffic", "from 0 to 1"),
        ('Traffic(.1, "c")', "Traffic", "invalid predicate parameters"),
        ('Weight("x")', "Weight", "expects one number"),
        ("True(1)", "True", "takes no arguments"),
        ("ContentLengthBetween(10, 5)", "ContentLengthBetween", "0 <= min < max"),
        ('Cookie("a=b", "x")', "Cookie", "is not a cookie name"),
        ('HeaderRegexp("X", /a{1000}/)', "HeaderRegexp", "exceeds Envoy's limit"),
    ],
)
def test_bad_arguments_are_refused_with_skippers_reason(
    predicates: str, name: str, message: str
) -> None:
    found = problems(predicates)
    assert found, predicates
    assert found[-1][0] == name
    assert message in found[-1][2]

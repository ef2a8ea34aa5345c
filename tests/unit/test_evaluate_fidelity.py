"""The evaluator reads a request as Envoy 1.40 does with the translator's configuration.

Every normalisation below was observed on the real Envoy (a redirect with `prefix_rewrite: /`
echoes the normalised path in its Location); `tests/e2e/test_differential.py` keeps checking it.
"""

from __future__ import annotations

import pytest
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.envoy.translate import translate
from turnout.graph.evaluate import (
    effective_forward,
    evaluate,
    make_request,
    normalize_path,
    query_params,
)
from turnout.graph.model import (
    DirectResponse,
    Forward,
    HeaderMatch,
    HostnameMatch,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    StringMatchKind,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "p")

ENVOY_NORMALISES = {
    "/a/../e": "/e",
    "/a/%2e%2e/e": "/e",
    "/a/.%2e/e": "/e",
    "/%65": "/e",
    "/%41%42": "/AB",
    "/%7e": "/~",
    "/%2d": "/-",
    "/%5F": "/_",
    "/x\\..\\e": "/e",
    "/a\\b": "/a/b",
    "/./e": "/e",
    "/../e": "/e",
    "/.": "/",
    "/..": "/",
    "/e/.": "/e/",
    "/a/./b/.": "/a/b/",
    "/a/b/../../..": "/",
    "/a/%2e.": "/",
    "/a%2e%2e/": "/a../",
    "/a/..%2fe": "/a/..%2fe",
    "/x%2F..%2Fy": "/x%2F..%2Fy",
    "/a/b/..%2F": "/a/b/..%2F",
    "/%5c": "/%5c",
    "/%7b": "/%7b",
    "/%3F": "/%3F",
    "/%23": "/%23",
    "/%20": "/%20",
    "/%25": "/%25",
    "/%2541": "/%2541",
    "/%C3%A9": "/%C3%A9",
    "/%": "/%",
    "/%2": "/%2",
    "/%zz": "/%zz",
    "/%%41": "/%A",
    "/%%300": "/%2500",
    "/%%30%30": "/%2500",
    "/%%2541": "/%%2541",
    '/"': "/%22",
    "/<>": "/%3C%3E",
    "/{|}^`": "/%7B%7C%7D%5E%60",
    "/[]'@:;=+$,!*()&": "/[]'@:;=+$,!*()&",
    "//a//b": "//a//b",
    "/a/.../e": "/a/.../e",
    "/a..": "/a..",
    "/a/..e": "/a/..e",
}


@pytest.mark.parametrize("raw, normalised", sorted(ENVOY_NORMALISES.items()))
def test_paths_are_normalised_as_envoy_does(raw: str, normalised: str) -> None:
    assert normalize_path(raw) == normalised


def test_an_encoded_nul_fails_normalisation() -> None:
    assert normalize_path("/a%00") is None


def route(i: int, match: RouteMatch, action: object = None) -> Route:
    act = action if action is not None else DirectResponse(200, f"r{i}")
    return Route(match, act, RouteSource(OWNER, f"spec.routes[{i}]"))  # type: ignore[arg-type]


def graph(*vhosts: VirtualHost) -> RoutingGraph:
    return RoutingGraph(
        listeners=(Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts),)
    )


def one_host(*routes: Route) -> RoutingGraph:
    return graph(VirtualHost("a.com", "a.com", routes, OWNER))


def body(g: RoutingGraph, path: str, host: str = "a.com") -> str | int:
    d = evaluate(g, make_request(host, path))
    if d.route is not None and isinstance(d.route.action, DirectResponse):
        return d.route.action.body
    return d.status


def test_routes_see_the_normalised_path_and_the_raw_query() -> None:
    g = one_host(
        route(0, RouteMatch(PathMatch(PathMatchKind.EXACT, "/e"))),
        route(1, RouteMatch(PathMatch(PathMatchKind.PREFIX, "/A"))),
    )
    assert body(g, "/x/../e?q=/../x") == "r0"
    assert body(g, "/%41bc") == "r1"
    assert body(g, "/%2e%2e/%65") == "r0"
    assert body(g, "/e/.") == 404


@pytest.mark.parametrize(
    "target", ["/e#frag", "/q?y=1#f", "/a b", "/é", "/a\tb", "/a\x7f", "/a%00"]
)
def test_requests_envoy_refuses_before_routing_are_400(target: str) -> None:
    g = one_host(route(0, RouteMatch()))
    d = evaluate(g, make_request("a.com", target))
    assert (d.status, d.route) == (400, None)
    assert d.rejected_reason


def test_query_values_and_names_are_compared_raw() -> None:
    def q(name: str, value: str, kind: StringMatchKind = StringMatchKind.EXACT) -> RouteMatch:
        return RouteMatch(query=(QueryMatch(name, kind, value),))

    g = one_host(
        route(0, q("x", "a b")),
        route(1, q("x", "a+b")),
        route(2, q("x", "a%20b")),
        route(3, q("x%20y", "", StringMatchKind.PRESENT)),
        route(4, q("y", "1")),
        route(5, q("z", "")),
    )
    assert body(g, "/?x=a+b") == "r1"
    assert body(g, "/?x=a%20b") == "r2"
    assert body(g, "/?x%20y=1") == "r3"
    assert body(g, "/?y=2&y=1") == 404  # the first occurrence counts
    assert body(g, "/?&&y=1&") == "r4"
    assert body(g, "/?z") == "r5"
    assert body(g, "/?y=%31") == 404
    assert query_params("a=1=2&&b&=c") == [("a", "1=2"), ("b", ""), ("", "c")]


def test_a_forward_without_weight_answers_503_in_the_evaluator_and_the_translator() -> None:
    zero = Forward((WeightedCluster("c1", 0), WeightedCluster("c2", 0)))
    split = Forward((WeightedCluster("c1", 2), WeightedCluster("c2", 0), WeightedCluster("c1", 3)))
    g = one_host(
        route(0, RouteMatch(PathMatch.prefix("/zero")), zero),
        route(1, RouteMatch(PathMatch.prefix("/split")), split),
    )
    d = evaluate(g, make_request("a.com", "/zero"))
    assert d.status == 503
    assert d.clusters == (("c1", 0), ("c2", 0))
    assert evaluate(g, make_request("a.com", "/split")).status == 200
    assert effective_forward(zero) == ()
    assert effective_forward(split) == (("c1", 5),)
    [config] = translate(g).routes
    zero_route, split_route = config.virtual_hosts[0].routes
    assert zero_route.direct_response.status == 503
    assert split_route.route.cluster == "c1"


def test_everything_after_the_last_colon_of_the_host_is_ignored() -> None:
    g = graph(
        VirtualHost("a.com", "a.com", (route(0, RouteMatch()),), OWNER),
        VirtualHost("*", "*", (route(1, RouteMatch()),), OWNER),
        VirtualHost("*#2", "*", (route(2, RouteMatch()),), OWNER),
    )
    assert body(g, "/", "A.COM:8080") == "r0"
    assert body(g, "/", "a.com:not-a-port") == "r0"
    assert body(g, "/", "a.com:") == "r0"
    assert body(g, "/", "b.com") == "r1"  # the first catch-all, as the translator keeps it


def test_a_one_label_wildcard_applies_the_translators_authority_regex() -> None:
    g = graph(
        VirtualHost(
            "*.one.example.com", "*.one.example.com", (route(0, RouteMatch()),), OWNER,
            HostnameMatch.WILDCARD_ONE_LABEL,
        )
    )  # fmt: skip
    assert body(g, "/", "x.one.example.com:80") == "r0"
    assert body(g, "/", "X.ONE.example.com") == "r0"
    assert body(g, "/", "x.y.one.example.com") == 404
    # The port is stripped for selecting the host, but the authority regex sees it all.
    assert body(g, "/", "x.one.example.com:abc") == 404


def test_the_translator_configures_envoy_as_the_evaluator_assumes() -> None:
    """The evaluator's path and host rules hold for these HCM and route table settings only."""
    resources = translate(one_host(route(0, RouteMatch())))
    [listener] = resources.listeners
    hcm = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(hcm)
    assert hcm.normalize_path.value is True
    assert hcm.merge_slashes is True
    assert hcm.path_with_escaped_slashes_action == (
        hcm_pb2.HttpConnectionManager.UNESCAPE_AND_REDIRECT
    )
    assert not hcm.strip_any_host_port and not hcm.strip_matching_host_port
    [config] = resources.routes
    assert config.ignore_port_in_host_matching is True


def test_a_header_sent_twice_matches_when_one_value_does() -> None:
    def h(kind: StringMatchKind, value: str, **flags: bool) -> RouteMatch:
        return RouteMatch(headers=(HeaderMatch("x-a", kind, value, **flags),))

    g = graph(
        *(
            VirtualHost(f"h{i}.com", f"h{i}.com", (route(i, m),), OWNER)
            for i, m in enumerate(
                [
                    h(StringMatchKind.EXACT, "a"),
                    h(StringMatchKind.EXACT, "a,zz"),
                    h(StringMatchKind.EXACT, "a", invert=True),
                    h(StringMatchKind.SUFFIX, "a"),
                    h(StringMatchKind.EXACT, "", treat_missing_as_empty=True),
                ]
            )
        )
    )

    def status(i: int, headers: tuple[tuple[str, str], ...]) -> int:
        return evaluate(g, make_request(f"h{i}.com", "/", headers=headers)).status

    twice = (("x-a", "a"), ("x-a", "zz"))
    assert [status(i, twice) for i in range(4)] == [200, 404, 404, 200]
    assert status(1, (("x-a", "a,zz"),)) == 200
    assert status(4, ()) == 200  # missing, matched as one empty value
    assert status(4, (("x-a", "x"),)) == 404

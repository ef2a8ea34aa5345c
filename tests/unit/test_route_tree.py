"""Matcher trees for large virtual hosts: the planner's leaves, and the translated tree.

The planner is checked against a model of Envoy's lookup (the longest key that prefixes the raw
`:path`, then the leaf's routes in order, no fallback): for generated route lists and paths, the
leaf's first matching route must be the list's first matching route. The real Envoy answers the
same question in tests/e2e/test_differential.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from envoy.config.route.v3 import route_components_pb2 as rc
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.envoy.translate import TranslateOptions, translate, translate_virtual_host
from turnout.envoy.translate.route_tree import (
    MAX_COPIES_PER_ROUTE,
    Placement,
    RouteTree,
    placement,
    plan_route_tree,
    regex_literal_prefix,
)
from turnout.graph.evaluate import path_matches
from turnout.graph.model import (
    DirectResponse,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    VirtualHost,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "team-a", "app")
EXACT, PREFIX, SEGMENT, REGEX = (
    PathMatchKind.EXACT,
    PathMatchKind.PREFIX,
    PathMatchKind.SEGMENT_PREFIX,
    PathMatchKind.REGEX,
)


def m(kind: PathMatchKind, value: str) -> RouteMatch:
    return RouteMatch(PathMatch(kind, value))


def first_in_list(matches: Sequence[RouteMatch], target: str) -> int | None:
    path = target.partition("?")[0]
    return next((i for i, match in enumerate(matches) if path_matches(match, path)), None)


def first_in_tree(tree: RouteTree, matches: Sequence[RouteMatch], target: str) -> int | None:
    """Envoy's lookup: the leaf of the longest key prefixing the raw target, query included."""
    leaf = max((kv for kv in tree.leaves if target.startswith(kv[0])), key=lambda kv: len(kv[0]),
               default=None)  # fmt: skip
    candidates = tree.no_match if leaf is None else leaf[1]
    path = target.partition("?")[0]
    return next((i for i in candidates if path_matches(matches[i], path)), None)


def test_every_leaf_holds_the_routes_that_can_match_there_in_the_hosts_order() -> None:
    matches = [
        m(EXACT, "/a"),  # 0: leaf /a only
        m(PREFIX, "/a"),  # 1: /a and every key below it
        m(REGEX, ".*/b"),  # 2: everywhere
        m(SEGMENT, "/a/b/"),  # 3: /a/b and /a/b/..., not /a/bc
        m(PREFIX, "/a/b/c"),  # 4
        m(PREFIX, "/a/bc"),  # 5
        m(PREFIX, "/"),  # 6: everywhere
    ]
    tree = plan_route_tree(matches)
    assert tree == RouteTree(
        leaves=(
            ("/a", (0, 1, 2, 6)),
            ("/a/b", (1, 2, 3, 6)),
            ("/a/b/c", (1, 2, 3, 4, 6)),
            ("/a/bc", (1, 2, 5, 6)),
        ),
        no_match=(2, 6),
    )


def test_keys_never_hold_a_query_or_fragment_and_slash_is_everywhere() -> None:
    assert placement(m(PREFIX, "/a?x")).key is None
    assert placement(m(EXACT, "/a#f")).key is None
    assert placement(m(PREFIX, "/")).key is None
    assert placement(m(SEGMENT, "/")).key is None
    assert placement(m(SEGMENT, "/a/")).key == "/a"
    assert placement(m(EXACT, "/a/")).key == "/a/"


def test_a_regex_is_placed_under_the_literal_text_every_path_it_matches_starts_with() -> None:
    assert regex_literal_prefix("/team-a/.*") == "/team-a/"
    assert regex_literal_prefix("/a/[^/]+") == "/a/"
    assert regex_literal_prefix("/a/b+") == "/a/b"
    # A quantifier makes the literal before it optional.
    assert regex_literal_prefix("/ab?") == "/a"
    assert regex_literal_prefix("/ab*c") == "/a"
    assert regex_literal_prefix("/ab{0,2}") == "/a"
    # Unsure: an alternation anywhere, an anchor or group first, an escape, non-ASCII.
    assert regex_literal_prefix("/a|/b") == ""
    assert regex_literal_prefix("^/a") == ""
    assert regex_literal_prefix("(/a)/b") == ""
    assert regex_literal_prefix("/a\\.b") == "/a"
    assert regex_literal_prefix("/é") == "/"
    assert placement(m(REGEX, "/team-a/.*")) == Placement(REGEX, "/team-a/")
    assert placement(m(REGEX, "/.*")).key is None
    tree = plan_route_tree([m(REGEX, "/a/.*"), m(PREFIX, "/a/b"), m(PREFIX, "/b")])
    assert tree == RouteTree(leaves=(("/a/", (0,)), ("/a/b", (0, 1)), ("/b", (2,))), no_match=())


def test_a_host_without_keys_or_copying_too_often_stays_a_list() -> None:
    assert plan_route_tree([m(REGEX, ".*/a"), m(PREFIX, "/")]) is None
    # Every regex route would be copied into each of the many prefix leaves.
    many = [m(PREFIX, f"/p{i}") for i in range(50)] + [m(REGEX, f"(/r{i}).*") for i in range(50)]
    assert plan_route_tree(many) is None
    assert plan_route_tree(many, max_copies=60) is not None
    # Deep chains of nested prefixes copy each route into every longer key's leaf.
    chain = [m(PREFIX, "/a" * n) for n in range(1, 12)]
    assert plan_route_tree(chain) is None


def test_ten_thousand_prefixes_make_one_entry_per_route() -> None:
    matches = [m(PREFIX, f"/team-{i}/") for i in range(10_000)] + [m(PREFIX, "/")]
    tree = plan_route_tree(matches)
    assert tree is not None
    assert len(tree.leaves) == 10_000
    # /team-1/ does not prefix /team-10/: each leaf holds its route and the catch-all.
    assert tree.entries == 10_000 * 2 + 1
    assert tree.entries <= MAX_COPIES_PER_ROUTE * len(matches)


PATHS = ["/", "/a", "/a/", "/a/b", "/a/b/", "/a/bc", "/ab", "/a/b/c", "/b", "/a?x", "/a%2f", "/A"]
route_matches = st.one_of(
    st.builds(m, st.sampled_from([EXACT, PREFIX, SEGMENT]), st.sampled_from(PATHS)),
    st.builds(
        m, st.just(REGEX), st.sampled_from(["/a.*", "/a/[^/]+", "/b", "/ab?", "/a|/b", ".*b"])
    ),
)
targets = st.builds(
    lambda base, cut, tail: base[: max(1, len(base) - cut)] + tail,
    st.sampled_from(PATHS),
    st.integers(0, 3),
    st.sampled_from(["", "/", "x", "/x", "?q=1", "/?q", "?x=/a/b"]),
)


@settings(max_examples=400, derandomize=True, database=None)
@given(matches=st.lists(route_matches, min_size=1, max_size=20), paths=st.lists(targets))
def test_the_leaf_reached_gives_the_lists_first_match(
    matches: list[RouteMatch], paths: list[str]
) -> None:
    tree = plan_route_tree(matches, max_copies=len(matches) + 1)
    if tree is None:
        assert all(placement(x).key is None for x in matches)
        return
    for target in paths:
        assert first_in_tree(tree, matches, target) == first_in_list(matches, target), target


# --- the translated host ---------------------------------------------------------------------


NAME = "HTTPProxy/team-a/app/r[{}]"


def host(n: int) -> VirtualHost:
    routes = tuple(
        Route(m(PREFIX, f"/r{i}/"), DirectResponse(200, f"r{i}"), RouteSource(OWNER, f"r[{i}]"))
        for i in range(n)
    )
    return VirtualHost("app.example.com", "app.example.com", routes, OWNER)


def route_list(on_match: Any) -> list[str]:
    out = rc.RouteList()
    assert on_match.action.typed_config.Unpack(out)
    return [r.name for r in out.routes]


def test_a_host_from_the_threshold_on_is_a_prefix_tree_on_the_path() -> None:
    below = translate_virtual_host(host(3), matcher_tree_min_routes=4)
    assert [r.name for r in below.routes] == [NAME.format(i) for i in range(3)]
    assert not below.HasField("matcher")
    tree = translate_virtual_host(host(4), matcher_tree_min_routes=4)
    assert not tree.routes
    node = tree.matcher.matcher_tree
    assert node.input.typed_config.type_url.endswith("HttpRequestHeaderMatchInput")
    assert sorted(node.prefix_match_map.map) == ["/r0/", "/r1/", "/r2/", "/r3/"]
    assert route_list(node.prefix_match_map.map["/r2/"]) == [NAME.format(2)]
    assert not tree.matcher.HasField("on_no_match")
    never = translate_virtual_host(host(500), matcher_tree_min_routes=0)
    assert len(never.routes) == 500


def test_the_default_threshold_and_the_option_reach_every_route_configuration() -> None:
    def graph(n: int) -> RoutingGraph:
        lst = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (host(n),))
        return RoutingGraph(listeners=(lst,))

    [small] = translate(graph(127)).routes
    [large] = translate(graph(128)).routes
    assert not small.virtual_hosts[0].HasField("matcher")
    assert large.virtual_hosts[0].HasField("matcher")
    [off] = translate(graph(128), TranslateOptions(matcher_tree_min_routes=0)).routes
    assert len(off.virtual_hosts[0].routes) == 128
    again = translate(graph(128)).routes[0]
    assert again.SerializeToString(deterministic=True) == large.SerializeToString(
        deterministic=True
    )


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="matcher_tree_min_routes"):
        TranslateOptions(matcher_tree_min_routes=-1)

"""A big host split into path scopes (`path_scopes`, `split_host`): for random route tables and
random request paths, the first route that matches in the scope the index leads the request to
is the first route of the whole host that matches it; the resources Envoy gets; a patch that
changes one route sends that route's scope only."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from turnout.envoy.resources import LISTENER_TYPE, ROUTE_TYPE, SCOPED_ROUTE_TYPE
from turnout.envoy.translate import TranslateMemo, translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.path_scopes import (
    EVERYWHERE,
    DirCounts,
    choose_dirs,
    path_spot,
    plan_split,
    request_scope,
)
from turnout.envoy.translate.scope_keys import SCOPE_KEY_FILTER, SCOPE_KEY_HEADER
from turnout.envoy.translate.split_host import dirs_generation
from turnout.envoy.validate import validate_resources
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
SEGMENTS = ("a", "b", "ab", "g1", "g10", "t", "t1", "x.y", "%41", "")
KINDS = (
    PathMatchKind.EXACT,
    PathMatchKind.PREFIX,
    PathMatchKind.SEGMENT_PREFIX,
    PathMatchKind.REGEX,
)
# Split from 8 routes, scopes of about 6.
SPLIT = TranslateOptions(
    scoped_routes_min_hosts=0,
    split_host_min_routes=8,
    split_scope_max_routes=6,
    matcher_tree_min_routes=0,
)


def random_path(rng: random.Random, depth: int = 4) -> str:
    return "/" + "/".join(rng.choice(SEGMENTS) for _ in range(rng.randint(0, depth)))


def random_match(rng: random.Random) -> PathMatch:
    kind = rng.choice(KINDS)
    value = random_path(rng)
    if kind is PathMatchKind.PREFIX and rng.random() < 0.3:
        value = value[: rng.randint(0, len(value))]  # a partial segment, "" or "/"
    if kind is PathMatchKind.SEGMENT_PREFIX and rng.random() < 0.2:
        value += "/"
    if kind is PathMatchKind.REGEX:
        value = rng.choice((value + "/.*", value + "[0-9]*", ".*" + value, value, "(/a|/b).*"))
    return PathMatch(kind, value)


def random_request(rng: random.Random) -> str:
    path = random_path(rng, 5)
    if rng.random() < 0.2:
        path += "/"
    if rng.random() < 0.3:
        path += "?q=" + rng.choice(SEGMENTS) + "/x"
    return path


def route(i: int, match: PathMatch) -> Route:
    return Route(
        RouteMatch(path=match),
        DirectResponse(200, str(i)),
        RouteSource(OWNER, f"spec.routes[{i}]"),
    )


def first(routes: list[int], matches: list[PathMatch], path: str) -> int | None:
    only = path.split("?", 1)[0]
    return next((i for i in routes if path_matches(RouteMatch(path=matches[i]), only)), None)


@pytest.mark.parametrize("seed", range(40))
def test_the_scope_of_a_path_holds_the_first_match_of_the_whole_host(seed: int) -> None:
    rng = random.Random(seed)
    matches = [random_match(rng) for _ in range(rng.randint(10, 120))]
    spots = [path_spot(m) for m in matches]
    pinned = [None if s is EVERYWHERE else s[1] for s in spots]
    # Any number of copies: the first match must hold however routes are spread.
    plan = plan_split(spots, pinned, rng.choice((1, 3, 8)), max_extra=1000)
    assert plan is not None
    everything = list(range(len(matches)))
    for _ in range(300):
        path = random_request(rng)
        scope = request_scope(path, plan.dirs)
        held = list(plan.scopes[0 if not scope else plan.dirs.index(scope) + 1])
        assert held == sorted(held)
        assert first(held, matches, path) == first(everything, matches, path), (path, scope)


def test_spots_place_routes_by_their_path() -> None:
    assert path_spot(PathMatch(PathMatchKind.EXACT, "/a/b")) == ("e", ("a", "b"), "")
    assert path_spot(PathMatch(PathMatchKind.SEGMENT_PREFIX, "/a/b/")) == ("s", ("a", "b"), "")
    assert path_spot(PathMatch(PathMatchKind.PREFIX, "/a/b")) == ("p", ("a",), "b")
    assert path_spot(PathMatch(PathMatchKind.PREFIX, "/a/")) == ("p", ("a",), "")
    assert path_spot(PathMatch(PathMatchKind.REGEX, "/a/b.*")) == ("p", ("a",), "b")
    for everywhere in (
        PathMatch(PathMatchKind.PREFIX, "/"),
        PathMatch(PathMatchKind.PREFIX, ""),
        PathMatch(PathMatchKind.SEGMENT_PREFIX, "/"),
        PathMatch(PathMatchKind.REGEX, ".*"),
        PathMatch(PathMatchKind.PREFIX, "/a?b"),
    ):
        assert path_spot(everywhere) is EVERYWHERE


def test_a_path_belongs_to_its_longest_directory() -> None:
    dirs = [("g5",), ("g5", "t1")]
    assert request_scope("/g5/t1", dirs) == ("g5", "t1")
    assert request_scope("/g5/t1/x?y=/z", dirs) == ("g5", "t1")
    assert request_scope("/g5/t10", dirs) == ("g5",)
    assert request_scope("/g5?t1", dirs) == ("g5",)
    assert request_scope("/g50", dirs) == ()
    assert request_scope("*", dirs) == ()


# --- the Envoy resources ------------------------------------------------------------------------


def big_host(n: int, extra: tuple[Route, ...] = ()) -> VirtualHost:
    routes = tuple(route(i, PathMatch(PathMatchKind.PREFIX, f"/g{i % 4}/t{i}/r")) for i in range(n))
    return VirtualHost("big", "Big.example.com", (*routes, *extra), OWNER)


def small_host() -> VirtualHost:
    return VirtualHost("small", "small.example.com", (route(0, PathMatch.prefix()),), OWNER)


def graph(*hosts: VirtualHost) -> RoutingGraph:
    lst = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, hosts)
    return RoutingGraph(listeners=(lst,))


def index_key(config: Any, path: str) -> str:
    """The scope key the index's routes (a list) name for `path`, as Envoy picks the route."""
    only = path.split("?", 1)[0]
    (vh,) = config.virtual_hosts
    for r in vh.routes:
        prefix = r.match.path_separated_prefix
        which = r.match.WhichOneof("path_specifier")
        if which == "prefix" or only == prefix or only.startswith(prefix + "/"):
            return str(r.metadata.filter_metadata[SCOPE_KEY_FILTER]["key"])
    raise AssertionError("the index has no route for " + path)


def test_a_big_host_is_an_index_and_path_scopes_on_a_scoped_listener() -> None:
    res = translate(graph(big_host(24), small_host()), SPLIT)
    g = dirs_generation([("g0",), ("g1",), ("g2",), ("g3",)])
    (listener,) = res.listeners
    assert b"scoped_routes" in listener.SerializeToString() or res.scoped_routes
    names = [s.name for s in res.scoped_routes]
    assert names == [
        "ingress_http/big.example.com",
        f"ingress_http/big.example.com{g}/",
        f"ingress_http/big.example.com{g}/g0",
        f"ingress_http/big.example.com{g}/g1",
        f"ingress_http/big.example.com{g}/g2",
        f"ingress_http/big.example.com{g}/g3",
        "ingress_http/small.example.com",
    ]
    tables = {c.name: c for c in res.routes}
    index = tables["ingress_http/big.example.com"]
    assert index_key(index, "/g1/t1/r?x") == f"big.example.com{g}/g1"
    assert index_key(index, "/g1") == f"big.example.com{g}/g1"
    assert index_key(index, "/g10/t1") == f"big.example.com{g}/"
    assert index_key(index, "/") == f"big.example.com{g}/"
    for scope in res.scoped_routes:
        assert scope.key.fragments[0].string_key == scope.name.removeprefix("ingress_http/")
        config = tables[scope.route_configuration_name]
        assert list(config.request_headers_to_remove) == [SCOPE_KEY_HEADER]
        (vh,) = config.virtual_hosts
        if "big" in scope.name:
            assert (vh.name, list(vh.domains)) == ("big", ["Big.example.com"])
    g1 = tables[f"ingress_http/big.example.com{g}/g1"].virtual_hosts[0]
    assert [r.match.prefix for r in g1.routes] == [f"/g1/t{i}/r" for i in range(1, 24, 4)]
    assert not tables[f"ingress_http/big.example.com{g}/"].virtual_hosts[0].routes
    assert index_key(index, "/g3/t3/r") == f"big.example.com{g}/g3"
    result = validate_resources(res)
    assert result.ok, result.output


def test_a_host_below_the_minimum_or_with_routes_everywhere_is_not_split() -> None:
    res = translate(graph(big_host(7), small_host()), SPLIT)
    assert not res.scoped_routes  # two hosts, no big one: one table
    everywhere = tuple(route(100 + i, PathMatch.prefix()) for i in range(8))
    res = translate(graph(big_host(24, everywhere), small_host()), SPLIT)
    assert [s.name for s in res.scoped_routes] == [
        "ingress_http/big.example.com",
        "ingress_http/small.example.com",
    ]


def wire(res: Any) -> dict[str, list[tuple[str, bytes]]]:
    return {
        t: [(str(m.name), m.SerializeToString(deterministic=True)) for m in ms]
        for t, ms in res.by_type().items()
        if t in (LISTENER_TYPE, ROUTE_TYPE, SCOPED_ROUTE_TYPE)
    }


def test_a_change_to_one_route_sends_its_scope_only_and_matches_a_fresh_translation() -> None:
    memo = TranslateMemo()
    n = 200
    host, small = big_host(n), small_host()
    options = dataclasses.replace(SPLIT, split_scope_max_routes=60, matcher_tree_min_routes=16)
    translate(graph(host, small), options, memo)
    routes = list(host.routes)
    routes[9] = route(9, PathMatch(PathMatchKind.PREFIX, "/g1/t9/changed"))
    changed = dataclasses.replace(host, routes=tuple(routes))
    patched = translate(graph(changed, small), options, memo)
    assert wire(patched) == wire(translate(graph(changed, small), options))
    assert set(patched.changes) == {ROUTE_TYPE}
    g = dirs_generation([("g0",), ("g1",), ("g2",), ("g3",)])
    assert set(patched.changes[ROUTE_TYPE][1]) == {f"ingress_http/big.example.com{g}/g1"}
    # A new directory: new scopes for the new directories, the index names them, the old go.
    grown = dataclasses.replace(
        changed,
        routes=(*changed.routes, *(route(n + i, PathMatch.prefix(f"/g9/{i}")) for i in range(70))),
    )
    patched = translate(graph(grown, small), options, memo)
    assert wire(patched) == wire(translate(graph(grown, small), options))
    g2 = dirs_generation([("g0",), ("g1",), ("g2",), ("g3",), ("g9",)])
    scopes = patched.changes[SCOPED_ROUTE_TYPE][1]
    assert scopes[f"ingress_http/big.example.com{g2}/g9"] is not None
    assert scopes[f"ingress_http/big.example.com{g}/g1"] is None
    assert "ingress_http/big.example.com" in patched.changes[ROUTE_TYPE][1]
    # The host renamed (its table's virtual host, the index's too), then its settings changed.
    for again in (
        dataclasses.replace(grown, name="big-renamed"),
        dataclasses.replace(grown, name="big-renamed", hostname="BIG.example.com"),
    ):
        patched = translate(graph(again, small), options, memo)
        assert wire(patched) == wire(translate(graph(again, small), options))


def test_directories_stay_while_routes_come_and_go_below_the_lines() -> None:
    # 50 groups x 20 children x 5 routes, scopes of 1024: every group is a directory, the
    # children are not; one route more in any group changes nothing.
    pinned: list[tuple[str, ...] | None] = [
        (f"g{g}", f"t{t}") for g in range(50) for t in range(20) for _ in range(5)
    ]
    counts = DirCounts.of(pinned)
    dirs = choose_dirs(counts, 1024)
    assert dirs == tuple(sorted((f"g{g}",) for g in range(50)))
    for g in range(50):
        counts.add([(f"g{g}", "t0")], 1)
        assert choose_dirs(counts, 1024) == dirs
    # Many small children: each gets a directory, since together they are too many.
    small = DirCounts.of([(f"t{t}",) for t in range(300) for _ in range(5)])
    assert len(choose_dirs(small, 1024)) == 300
    # Under the largest scope: no directory at all.
    assert choose_dirs(DirCounts.of([("a",)] * 1024), 1024) == ()

"""A root's routes deduplicated and ordered, patched when only some of its include subtrees changed
(`dialects/httpproxy/route_order.py`): with the memo carried, every compile gives exactly what a
fresh compile gives (routes in order, duplicates and the problems they report), and the order is
patched, not built again."""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import kube_object, service, snapshot
from turnout.app import default_dialects
from turnout.compile_inputs import HTTP_LISTENER, CompileOptions
from turnout.dialects.contour.order import compare_routes, route_key, sorted_headers
from turnout.dialects.httpproxy import route_order
from turnout.dialects.httpproxy.jwt import NO_JWT
from turnout.dialects.httpproxy.recording import Trace, Walk, replay_walks
from turnout.graph import host_routes
from turnout.graph.build import CompileResult, build_graph
from turnout.graph.host_routes import IdsMemo, ids_of
from turnout.graph.memo import CompileMemo
from turnout.graph.model import (
    DirectResponse,
    HeaderMatch,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Route,
    RouteMatch,
    RouteSource,
    StringMatchKind,
    VirtualHost,
)
from turnout.objects import KubeObject, ObjectRef
from turnout.store import Snapshot

HOST = "a.example.com"


def proxy(name: str, spec: dict[str, Any]) -> KubeObject:
    return kube_object("projectcontour.io/v1", "HTTPProxy", name, "default", spec=spec)


class Carried:
    """Compiles snapshot after snapshot with one memo, checking each against a fresh compile."""

    def __init__(self) -> None:
        self.memo = CompileMemo()
        self.options = CompileOptions()
        self.dialects = default_dialects().all

    def compile(self, snap: Snapshot) -> CompileResult:
        carried = build_graph(snap, self.options, self.dialects, self.memo)
        assert carried == build_graph(snap, self.options, self.dialects)
        return carried


def vhosts(result: CompileResult) -> dict[str, VirtualHost]:
    lst = next(x for x in result.graph.listeners if x.name == HTTP_LISTENER)
    return {v.name: v for v in lst.virtual_hosts}


# --- the sort key is the comparison ---------------------------------------------------------


def _random_match(rng: random.Random) -> RouteMatch:
    kind = rng.choice(list(PathMatchKind))
    value = "/" + "".join(rng.choice("ab/") for _ in range(rng.randrange(4)))
    pool = [
        HeaderMatch(":method", StringMatchKind.EXACT, rng.choice(("GET", "POST"))),
        HeaderMatch("x-a", rng.choice((StringMatchKind.EXACT, StringMatchKind.PRESENT)), "1"),
        HeaderMatch("x-b", StringMatchKind.EXACT, rng.choice("12"), invert=rng.random() < 0.3),
        HeaderMatch("x-c", StringMatchKind.CONTAINS, "z", ignore_case=rng.random() < 0.5),
    ]
    headers = sorted_headers([h for h in pool if rng.random() < 0.35])
    query = tuple(
        QueryMatch(name, StringMatchKind.EXACT, rng.choice(("1", "2")))
        for name in ("q", "r")
        if rng.random() < 0.3
    )
    return RouteMatch(PathMatch(kind, value), headers, query)


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


def test_the_route_key_orders_exactly_as_the_comparison() -> None:
    rng = random.Random(7)
    source = RouteSource(ObjectRef("projectcontour.io", "HTTPProxy", "default", "p"), "")
    routes = [Route(_random_match(rng), DirectResponse(200), source) for _ in range(300)]
    for a, b in itertools.product(routes[:120], repeat=2):
        ka, kb = route_key(a.match), route_key(b.match)
        assert _sign(compare_routes(a, b)) == (ka > kb) - (ka < kb), (a.match, b.match)
    assert sorted(routes, key=lambda r: route_key(r.match)) == sorted(
        routes, key=functools.cmp_to_key(compare_routes)
    )


# --- one root including many children with overlapping conditions ---------------------------


def _condition(rng: random.Random) -> list[dict[str, Any]]:
    path = rng.choice(({"prefix": "/a"}, {"prefix": "/ab"}, {"prefix": "/a/b"}, {"exact": "/a"}))
    out: list[dict[str, Any]] = [path]
    if rng.random() < 0.4:
        out.append({"header": {"name": "x-v", "exact": rng.choice(("1", "2"))}})
    if rng.random() < 0.2:
        out.append({"header": {"name": "x-w", "present": True}})
    if rng.random() < 0.25:  # routes that differ by `:method` alone tie in the order
        out.append({"header": {"name": ":method", "exact": rng.choice(("GET", "POST"))}})
    return out


def _child(name: str, rng: random.Random) -> KubeObject:
    routes = [
        {"conditions": _condition(rng), "services": [{"name": "app", "port": 80}]}
        for _ in range(rng.randrange(1, 4))
    ]
    return proxy(name, {"routes": routes})


class World:
    """A root including groups (no conditions: their spaces overlap) that include children,
    some under a prefix or a header, so that routes of different children are duplicates and
    tie in the order."""

    GROUP_CONDITIONS = ([], [{"prefix": "/g"}], [{"header": {"name": "x-g", "exact": "1"}}])

    def __init__(self, rng: random.Random, groups: int = 3, children: int = 12) -> None:
        self.rng = rng
        self.children = {f"c{i}": _child(f"c{i}", rng) for i in range(children)}
        self.members = {
            f"g{g}": [f"c{i}" for i in range(children) if i % groups == g] for g in range(groups)
        }
        self.own = [{"conditions": [{"prefix": "/a"}], "services": [{"name": "app", "port": 80}]}]
        self.names = itertools.count(children)

    def group(self, name: str) -> KubeObject:
        members = self.members[name]
        incs = [
            {"name": c, "conditions": self.GROUP_CONDITIONS[int(c[1:]) % 3]}
            if int(c[1:]) % 4
            else {"name": c}
            for c in members
        ]
        return proxy(name, {"includes": incs})

    def objects(self) -> Iterator[KubeObject]:
        spec = {
            "virtualhost": {"fqdn": HOST},
            "includes": [{"name": g} for g in self.members],
            "routes": self.own,
        }
        yield proxy("root", spec)
        yield from (self.group(g) for g in self.members)
        yield from self.children.values()
        yield service("app")

    def step(self) -> str:
        rng = self.rng
        name = rng.choice(sorted(self.children))
        roll = rng.random()
        if roll < 0.5:
            self.children[name] = _child(name, rng)  # new routes: it moves in the order
            return f"change {name}"
        if roll < 0.65:
            del self.children[name]  # its includes find nothing (a 502 under conditions)
            return f"remove {name}"
        if roll < 0.8:
            fresh = f"c{next(self.names)}"
            self.children[fresh] = _child(fresh, rng)
            self.members[rng.choice(sorted(self.members))].append(fresh)
            return f"add {fresh}"
        if roll < 0.9:
            group = rng.choice(sorted(self.members))
            rng.shuffle(self.members[group])  # kept routes change places against each other
            return f"shuffle {group}"
        self.own = [
            {"conditions": _condition(rng), "services": [{"name": "app", "port": 80}]}
            for _ in range(rng.randrange(1, 3))
        ]
        return "root"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many routes each full build of a route order read (the patch calls none)."""
    calls: list[int] = []
    real = route_order.build

    def counted(parts: Any, jwt: Any) -> route_order.RouteOrder:
        calls.append(sum(map(len, parts)))
        return real(parts, jwt)

    monkeypatch.setattr(route_order, "build", counted)
    return calls


def _routes(result: CompileResult) -> tuple[Route, ...]:
    return vhosts(result)[HOST].routes


def _duplicate_warnings(result: CompileResult) -> list[str]:
    return [
        d.message
        for s in result.statuses
        if s.ref.kind == "HTTPProxy"
        for c in s.conditions
        for d in c.warnings
        if d.reason == "DuplicateMatchConditions"
    ]


@pytest.mark.parametrize("seed", range(6))
def test_a_carried_order_is_a_fresh_one_route_by_route_and_status_by_status(
    seed: int, builds: list[int]
) -> None:
    rng = random.Random(seed)
    world = World(rng)
    run = Carried()  # asserts the carried compile equals a fresh one, statuses in order
    before = run.compile(snapshot(list(world.objects())))
    assert _duplicate_warnings(before)  # the children overlap
    patched = 0
    for _ in range(25):
        what = world.step()
        built = len(builds)
        after = run.compile(snapshot(list(world.objects())))
        old, new = _routes(before), _routes(after)
        # Exactness is asserted by `Carried`; the routes of children that did not change are
        # the very same objects (a shuffle may make another of two equal routes the winner).
        kept = {(r.source.object.name, r.source.field, r.match): r for r in old}
        for r in new if not what.startswith("shuffle") else ():
            same = kept.get((r.source.object.name, r.source.field, r.match))
            if same is not None and r.source.object.name not in what and same == r:
                assert r is same, what
        patched += len(builds) == built + 1  # the fresh compile's build only
        before = after
    assert patched >= 12  # most steps were patches


def _route(prefix: str, *headers: tuple[str, str]) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"prefix": prefix}]
    conditions += [{"header": {"name": n, "exact": v}} for n, v in headers]
    return {"conditions": conditions, "services": [{"name": "app", "port": 80}]}


def _leaf(name: str, *routes: dict[str, Any]) -> KubeObject:
    return proxy(name, {"routes": list(routes)})


def _including(name: str, *children: str, fqdn: str | None = None) -> KubeObject:
    spec: dict[str, Any] = {"includes": [{"name": c} for c in children]}
    if fqdn is not None:
        spec["virtualhost"] = {"fqdn": fqdn}
    return proxy(name, spec)


def _order(result: CompileResult) -> list[tuple[str, str, str]]:
    """Each route as (path, its headers, the proxy that wrote it), in first-match order."""
    out = []
    for r in _routes(result):
        headers = ",".join(f"{h.name}={h.value}" for h in r.match.headers)
        out.append((r.match.path.value, headers, r.source.object.name))
    return out


def test_tied_routes_follow_the_first_candidate_of_their_match(builds: list[int]) -> None:
    # /a for GET and for POST tie in Contour's order: the walk order of each match's first
    # route decides. c3 replaces c1's GET route at c1's place, before c2's POST route.
    get, post = (":method", "GET"), (":method", "POST")
    objects = [_including("root", "c1", "c2", "c3", fqdn=HOST), service("app")]
    leaves = [_leaf("c1", _route("/a", get)), _leaf("c2", _route("/a", post))]
    run = Carried()
    first = run.compile(snapshot(objects, leaves, _leaf("c3", _route("/a", get))))
    assert _order(first) == [("/a", ":method=GET", "c3"), ("/a", ":method=POST", "c2")]
    assert len(_duplicate_warnings(first)) == 1
    # c1 leaves /a: the GET match now starts at c3, after c2's POST.
    count = len(builds)
    moved = run.compile(
        snapshot(objects, _leaf("c1", _route("/b", get)), leaves[1], _leaf("c3", _route("/a", get)))
    )
    assert len(builds) == count + 1  # the fresh compile's; the carried one patched
    assert _order(moved) == [
        ("/b", ":method=GET", "c1"),
        ("/a", ":method=POST", "c2"),
        ("/a", ":method=GET", "c3"),
    ]
    assert _duplicate_warnings(moved) == []
    assert _routes(moved)[1] is _routes(first)[1]


def test_duplicates_moves_removals_and_additions_under_one_group(builds: list[int]) -> None:
    x1 = ("x-v", "1")
    objects = [_including("root", "g", fqdn=HOST), service("app")]
    c1, c2 = _leaf("c1", _route("/a/x")), _leaf("c2", _route("/a"))
    c3, c4 = _leaf("c3", _route("/a/x")), _leaf("c4", _route("/b", x1), _route("/b"))
    group = _including("g", "c1", "c2", "c3", "c4")
    run = Carried()
    first = run.compile(snapshot(objects, group, c1, c2, c3, c4))
    # A header condition sorts a route before the same prefix without one.
    assert _order(first) == [
        ("/a/x", "", "c3"),
        ("/b", "x-v=1", "c4"),
        ("/b", "", "c4"),
        ("/a", "", "c2"),
    ]
    assert _duplicate_warnings(first) == [
        "spec.routes[0] has the same match conditions as spec.routes[0] of HTTPProxy "
        "default/c3, which replaces it"
    ]
    count = len(builds)
    # c2 moves to the front (a longer prefix).
    c2 = _leaf("c2", _route("/a/x/y"))
    moved = run.compile(snapshot(objects, group, c1, c2, c3, c4))
    assert _order(moved)[0] == ("/a/x/y", "", "c2")
    # c3 leaves: c1's route is no longer replaced.
    gone = run.compile(snapshot(objects, group, c1, c2, c4))
    assert ("/a/x", "", "c1") in _order(gone)
    assert _duplicate_warnings(gone) == []
    # c5 joins the group with c4's header route: it replaces it, at its place.
    c5 = _leaf("c5", _route("/b", x1))
    added = run.compile(snapshot(objects, _including("g", "c1", "c2", "c4", "c5"), c1, c2, c4, c5))
    assert _order(added)[2:] == [("/b", "x-v=1", "c5"), ("/b", "", "c4")]
    assert len(_duplicate_warnings(added)) == 1
    assert len(builds) == count + 3  # the fresh compiles'; the carried ones patched


def test_a_replayed_walk_costs_its_own_revisits_and_those_of_proxies_walked_before() -> None:
    trace = Trace(walks=[(("ns", "a"), 2), (("ns", "b"), 1), (("ns", "a"), 2)])
    keys = frozenset({("ns", "a"), ("ns", "b")})
    assert replay_walks(trace, 5, set()) == Walk(3, keys)
    assert replay_walks(trace, 2, set()) == Walk(0, keys)
    assert replay_walks(trace, 1, set()) is None
    assert replay_walks(trace, 5, {("ns", "b")}) == Walk(2, keys)
    assert replay_walks(trace, 4, {("ns", "a")}) == Walk(0, keys)
    assert replay_walks(trace, 3, {("ns", "a")}) is None


@pytest.mark.parametrize("seed", range(4))
def test_a_patched_route_tuple_hands_the_graph_stages_its_exact_diff(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stages diff a host's route tuples by the routes' identity; for a patched order the
    # dialect hands them the diff (`IdsMemo.derive`) instead of two passes over the host.
    # (Its ids memoized as a big host's: a host of fewer than `PER_ROUTE_MIN_ROUTES` is taken
    # whole.)
    monkeypatch.setattr(host_routes, "PER_ROUTE_MIN_ROUTES", 1)
    ended: list[dict[Any, Any]] = []  # each compile's diffs, which its end forgets
    real_end = IdsMemo.end

    def end(memo: IdsMemo) -> None:
        ended.append(dict(memo.diffs))
        real_end(memo)

    monkeypatch.setattr(IdsMemo, "end", end)
    rng = random.Random(seed)
    world = World(rng, groups=4, children=40)
    run = Carried()
    before = run.compile(snapshot(list(world.objects())))
    derived = 0
    for _ in range(25):
        world.step()
        after = run.compile(snapshot(list(world.objects())))
        old, new = _routes(before), _routes(after)
        ids = run.memo.stage("route-ids", IdsMemo)
        now = ids.get(new)
        assert now == ids_of(new)
        assert ids.diffs == {}  # forgotten at the compile's end
        for was, made, (added, removed) in list(ended[-2].values()):
            if made is new and was is not new:
                assert was is old
                assert {id(r) for r in added} == set(map(id, new)) - set(map(id, old))
                assert {id(r) for r in removed} == set(map(id, old)) - set(map(id, new))
                assert len(added) + len(removed) < len(new)  # the changed routes only
                derived += 1
        before = after
    assert derived >= 12  # most steps were patched and handed their diff


def _candidate(path: str, name: str) -> route_order.Candidate:
    match = RouteMatch(PathMatch(PathMatchKind.PREFIX, path))
    source = RouteSource(ObjectRef("projectcontour.io", "HTTPProxy", "default", name), "r")
    return route_order.Candidate(Route(match, DirectResponse(200), source), ("default", name))


def test_a_small_order_is_kept_compact_and_patched_as_a_whole_one_would_be() -> None:
    # A root of a few routes keeps its parts and routes only (memory at 10,000 roots); a patch
    # makes the rest again first and gives what a build gives, kept routes the same objects.
    ids = IdsMemo()
    a, b, c = _candidate("/a", "x"), _candidate("/b", "x"), _candidate("/a", "y")
    order = route_order.build([[a, b]], NO_JWT)
    made = route_order.routes_tuple(order, ids)
    assert order.compact and not order.keys and not order.winners and order.ids is None
    assert made == (b.route, a.route) and route_order.routes_tuple(order, ids) is made
    patched = route_order.patch(order, [[a, b, c]], NO_JWT)
    assert patched is not None and not patched.compact
    fresh = route_order.build([[a, b, c]], NO_JWT)
    assert (patched.keys, patched.order, patched.routes) == (fresh.keys, fresh.order, fresh.routes)
    assert patched.replacements == fresh.replacements == [(a, c)]
    after = route_order.routes_tuple(patched, ids)
    assert after[0] is b.route and after == (b.route, c.route)
    assert ids.get(after) == ids_of(after)
    big = [_candidate(f"/p{i}", "x") for i in range(route_order.COMPACT_BELOW)]
    whole = route_order.build([big], NO_JWT)
    route_order.routes_tuple(whole, ids)
    assert not whole.compact and len(whole.keys) == route_order.COMPACT_BELOW

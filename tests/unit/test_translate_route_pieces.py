"""A big virtual host translated per route (`routes.route_pieces`, `route_tree.TreeBook`): with a
memo carried over, each route's kept message and the patched matcher tree give exactly the
bytes of a fresh translation, also when a kept route's message would be stale (a route replaced
inside the host, a host-level setting the routes read changing under the same Route objects, a
matcher-tree host gaining and losing routes)."""

from __future__ import annotations

import dataclasses
import random

from envoy.config.route.v3 import route_components_pb2 as rc

from turnout.envoy.translate import TranslateMemo
from turnout.envoy.translate.route_tree import matcher_tree, plan_route_tree
from turnout.envoy.translate.routes import (
    PER_ROUTE_MIN_ROUTES,
    translate_route_guarded,
    virtual_host_bytes,
    wildcard_authority_matcher,
)
from turnout.graph.model import (
    DirectResponse,
    HostnameMatch,
    PathMatch,
    PathMatchKind,
    Route,
    RouteMatch,
    RouteSource,
    VirtualHost,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "team-a", "app")
KINDS = (PathMatchKind.PREFIX, PathMatchKind.EXACT, PathMatchKind.SEGMENT_PREFIX)


def route(path: str, kind: PathMatchKind = PathMatchKind.PREFIX, status: int = 200) -> Route:
    source = RouteSource(OWNER, f"spec.routes[{path}]")
    return Route(RouteMatch(PathMatch(kind, path)), DirectResponse(status), source)


def host(routes: list[Route], hostname: str = "app.example.com", **kw: object) -> VirtualHost:
    return VirtualHost("app", hostname, tuple(routes), OWNER, **kw)  # type: ignore[arg-type]


def reference(vh: VirtualHost, min_routes: int) -> bytes:
    """The host as `translate_virtual_host` built it before it was assembled from pieces."""
    authority = wildcard_authority_matcher(vh)
    out = rc.VirtualHost(name=vh.name, domains=[vh.hostname])
    kept = [(r, translate_route_guarded(r, authority)) for r in vh.routes]
    translated = [(r, m) for r, m in kept if m is not None]
    tree = None
    if 0 < min_routes <= len(translated):
        tree = plan_route_tree([r.match for r, _ in translated])
    if tree is None:
        out.routes.extend(m for _, m in translated)
    else:
        out.matcher.CopyFrom(matcher_tree(tree, [m for _, m in translated]))
    return bytes(out.SerializeToString(deterministic=True))


def check(vh: VirtualHost, memo: TranslateMemo, min_routes: int = 4) -> None:
    carried = virtual_host_bytes(vh, min_routes, memo)
    assert carried == virtual_host_bytes(vh, min_routes)
    assert carried == reference(vh, min_routes)


def test_a_route_replaced_inside_a_big_host_is_translated_again() -> None:
    routes = [route(f"/team-{i}/app") for i in range(PER_ROUTE_MIN_ROUTES * 2)]
    memo = TranslateMemo()
    check(host(routes), memo)
    routes[7] = route("/team-7/app", status=418)  # same match, another answer
    check(host(routes), memo)
    assert b"\x08\xa2\x03" in virtual_host_bytes(host(routes), 4, memo)  # status 418 on the wire


def test_a_host_level_setting_the_routes_read_changes_under_the_same_routes() -> None:
    routes = tuple(route(f"/r{i}") for i in range(PER_ROUTE_MIN_ROUTES * 2))
    memo = TranslateMemo()
    plain = host(list(routes), "*.example.com")
    check(plain, memo)
    # The same Route objects under a one-label wildcard: every match carries the authority.
    wild = dataclasses.replace(plain, hostname_match=HostnameMatch.WILDCARD_ONE_LABEL)
    check(wild, memo)
    assert b":authority" in virtual_host_bytes(wild, 4, memo)
    check(plain, memo)
    assert b":authority" not in virtual_host_bytes(plain, 4, memo)


def test_a_matcher_tree_host_gaining_and_losing_routes_matches_a_fresh_tree() -> None:
    rng = random.Random(7)
    paths = ["/a", "/a/b", "/a/bc", "/b", "/b/c/d", "/c", "/c/", "/d/e", "/", "/x?y"]
    routes = [route(p + str(i)) for i, p in enumerate(paths * 8)]
    memo = TranslateMemo()
    check(host(routes), memo)
    for step in range(60):
        action = rng.random()
        if action < 0.4 or len(routes) < PER_ROUTE_MIN_ROUTES + 2:
            path = rng.choice(paths) + rng.choice(["", "/z", str(step), "x"])
            routes.insert(rng.randrange(len(routes) + 1), route(path, rng.choice(KINDS)))
        elif action < 0.7:
            del routes[rng.randrange(len(routes))]
        elif action < 0.9:
            i = rng.randrange(len(routes))
            routes[i] = route(rng.choice(paths) + "/n", rng.choice(KINDS), 201 + step)
        else:
            i, j = rng.randrange(len(routes)), rng.randrange(len(routes))
            routes[i], routes[j] = routes[j], routes[i]  # the same routes in another order
        check(host(routes), memo)
        check(host(routes), memo, min_routes=len(routes) + rng.choice([-1, 0, 1]))


def test_a_route_catching_every_path_joins_and_leaves_every_leaf() -> None:
    routes = [route(f"/k{i}/") for i in range(PER_ROUTE_MIN_ROUTES)]
    memo = TranslateMemo()
    check(host(routes), memo)
    routes.insert(3, route(".*", PathMatchKind.REGEX))
    check(host(routes), memo)
    del routes[3]
    check(host(routes), memo)


def test_a_route_twice_and_many_routes_added_at_one_place_match_a_fresh_tree() -> None:
    routes = [route(f"/k{i}/") for i in range(PER_ROUTE_MIN_ROUTES)]
    memo = TranslateMemo()
    check(host(routes), memo)
    routes.insert(5, routes[9])  # the very same Route object twice
    check(host(routes), memo)
    del routes[5]
    check(host(routes), memo)
    for step in range(80):  # each between the same two neighbours: their numbers run out
        routes.insert(10, route(f"/k9/{step}"))
        check(host(routes), memo)


def test_routes_placed_everywhere_count_once_per_leaf_against_the_copy_budget() -> None:
    # 10 keys and 3 routes everywhere: 4 * 13 - 3 * 11 - 10 = 9 copies to spare, a tree.
    routes = [route(f"/k{i}/") for i in range(10)]
    routes += [route(f".*/x{i}", PathMatchKind.REGEX) for i in range(3)]
    check(host(routes), TranslateMemo())
    assert b"prefix" not in virtual_host_bytes(host(routes), 4)  # no field name on the wire
    assert rc.VirtualHost.FromString(virtual_host_bytes(host(routes), 4)).HasField("matcher")

"""A big virtual host taken per route across compiles (`graph.host_routes`): the Envoy-limits
net's route verdicts kept by the route's identity, and the names a host's routes use counted per
route, give exactly what a full compile gives, whatever changed under a route that stayed."""

from __future__ import annotations

from tests.builders import kube_object, service, snapshot
from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.graph.build import CompileResult, build_graph
from turnout.graph.host_routes import (
    PER_ROUTE_MIN_ROUTES,
    IdsMemo,
    NameCounts,
    ids_of,
    route_diff,
)
from turnout.graph.memo import CompileMemo
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Forward,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.validate import (
    GraphProblem,
    PatchedLimits,
    enforce_envoy_limits,
    patch_envoy_limits,
)
from turnout.objects import KubeObject, ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "p")
LISTENER = "ingress_http"
HOST = "a.example.com"


def _route(i: int, cluster: str) -> Route:
    return Route(
        RouteMatch(PathMatch(PathMatchKind.PREFIX, f"/r{i}")),
        Forward((WeightedCluster(cluster, 1),)),
        RouteSource(OWNER, f"spec.routes[{i}]"),
    )


def _host(routes: tuple[Route, ...]) -> VirtualHost:
    return VirtualHost(name=HOST, hostname=HOST, routes=routes, owner=OWNER)


def _graph(vh: VirtualHost, clusters: list[str]) -> RoutingGraph:
    listener = Listener(LISTENER, "0.0.0.0", 8080, ListenerProtocol.HTTP, (vh,))
    return RoutingGraph(
        listeners=(listener,),
        clusters=tuple(Cluster(name=c, namespace="default", service=c, port=80) for c in clusters),
    )


class _Net:
    """`patch_envoy_limits` carried from graph to graph, told what changed as `build_graph`
    tells it: the host when it is not the very same object, the clusters added or removed."""

    def __init__(self) -> None:
        self.kept = PatchedLimits()
        self.ids = IdsMemo()
        self.last: RoutingGraph | None = None

    def check(self, graph: RoutingGraph) -> tuple[RoutingGraph, tuple[GraphProblem, ...]]:
        self.ids.age()
        names = [c.name for c in graph.clusters]
        by_name = {c.name: c for c in graph.clusters}
        vh = graph.listeners[0].virtual_hosts[0]
        hosts: set[tuple[str, str]] | None = None
        clusters: set[str] | None = None
        if self.last is not None:
            before = self.last.listeners[0].virtual_hosts[0]
            hosts = set() if before is vh else {(LISTENER, HOST)}
            clusters = set(names).symmetric_difference(c.name for c in self.last.clusters)
        self.last = graph
        named = {LISTENER: {HOST: vh}}
        return patch_envoy_limits(
            graph, self.kept, hosts, clusters, names, by_name, named, self.ids
        )


ROUTES = tuple(_route(i, f"c{i % 50}") for i in range(400))
CLUSTERS = [f"c{k}" for k in range(50)]


def test_a_route_that_stays_follows_its_cluster_going_and_coming_back() -> None:
    """The very same routes, in the very same host or in a new host of them: each time a
    cluster leaves or comes back, the routes that send to it answer 500 or are whole again."""
    net = _Net()
    vh = _host(ROUTES)
    graph = _graph(vh, CLUSTERS)
    assert net.check(graph) == (graph, ())
    gone = _graph(vh, [c for c in CLUSTERS if c != "c7"])
    found, problems = net.check(gone)
    assert (found, problems) == enforce_envoy_limits(gone)
    out = found.listeners[0].virtual_hosts[0].routes
    assert len(problems) == 8
    assert all(isinstance(out[i].action, DirectResponse) for i in range(7, 400, 50))
    assert out[8] is ROUTES[8]
    # A new host of the very same routes while the cluster is back.
    again = _graph(_host(ROUTES), CLUSTERS)
    assert net.check(again) == (again, ())
    # And gone again, with one route replaced in the same compile.
    replaced = list(ROUTES)
    replaced[57] = _route(57, "c8")
    gone = _graph(_host(tuple(replaced)), [c for c in CLUSTERS if c != "c7"])
    found, problems = net.check(gone)
    assert (found, problems) == enforce_envoy_limits(gone) and len(problems) == 7


def test_routes_replaced_added_and_removed_in_a_big_host() -> None:
    net = _Net()
    graph = _graph(_host(ROUTES), CLUSTERS)
    assert net.check(graph) == (graph, ())
    routes = list(ROUTES)
    routes[3] = _route(3, "missing")  # answers 500
    del routes[10]
    routes.insert(200, _route(1000, "c1"))
    no_slash = RouteMatch(PathMatch(PathMatchKind.PREFIX, "no-slash"))  # left out
    routes.insert(
        201, Route(no_slash, Forward((WeightedCluster("c1", 1),)), RouteSource(OWNER, "x"))
    )
    changed = _graph(_host(tuple(routes)), CLUSTERS)
    found, problems = net.check(changed)
    assert (found, problems) == enforce_envoy_limits(changed) and len(problems) == 2
    # The bad routes replaced by good ones: the host comes back as it is.
    fixed = _graph(_host(ROUTES[:300]), CLUSTERS)
    assert net.check(fixed) == (fixed, ())
    # A route listed twice keeps its problem twice, as the full net says.
    bad = _route(5000, "missing")
    twice = _graph(_host((*ROUTES[:300], bad, bad)), CLUSTERS)
    assert net.check(twice) == enforce_envoy_limits(twice)
    once = _graph(_host((*ROUTES[:300], bad)), CLUSTERS)
    assert net.check(once) == enforce_envoy_limits(once)


def test_a_route_diff_and_counts_by_identity() -> None:
    memo = IdsMemo()
    old = ids_of(ROUTES, memo)
    assert ids_of(ROUTES, memo) is old
    new_route = _route(3, "c3")  # equal in value to ROUTES[3], another object
    routes = (*ROUTES[:3], new_route, *ROUTES[4:], new_route)
    found = route_diff(ROUTES, routes, memo)
    assert found == ([new_route], [ROUTES[3]])
    assert route_diff(ROUTES, routes, memo) is found

    def cluster(r: Route) -> list[str]:
        assert isinstance(r.action, Forward)
        return [r.action.clusters[0].cluster]

    counts = NameCounts()
    assert counts.patch(ROUTES, cluster) == frozenset(CLUSTERS)
    left = tuple(r for r in ROUTES if cluster(r) != ["c9"])
    assert counts.patch(left, cluster) == frozenset(CLUSTERS) - {"c9"}
    assert counts.patch(ROUTES[:1], cluster) == {"c0"}
    assert counts.patch((*ROUTES[:1], _route(1, "c0")), cluster) == {"c0"}


def test_ids_derived_from_a_diff_the_dialect_vouches_for() -> None:
    memo = IdsMemo()
    base = ids_of(ROUTES, memo)  # the dialect's own, for the tuple it handed out
    extra = _route(3, "c3")  # equal in value to ROUTES[3], another object
    routes = (*ROUTES[:3], extra, *ROUTES[4:])
    made = memo.derive((ROUTES, base), routes, [extra], [ROUTES[3]])
    assert made is base and made == ids_of(routes)  # patched in place: no copy of the host
    assert memo.get(routes) is made
    # The stages' diff is the one handed over, not two passes over the host.
    assert route_diff(ROUTES, routes, memo) == ([extra], [ROUTES[3]])
    # The tuple before forgot its ids (they became the new tuple's): asked, they are made anew.
    assert ids_of(ROUTES, memo) == ids_of(ROUTES) and ids_of(ROUTES, memo) is not made
    # No route in or out: the very same ids.
    same = (*routes[:1], *routes[1:])
    assert memo.derive((routes, made), same, [], []) is made
    # A diff that cannot be the tuple's falls back to counting it, the ids before untouched.
    for added, removed in (([ROUTES[0]], []), ([], [_route(5, "c5")]), ([extra], [])):
        memo = IdsMemo()
        base = ids_of(ROUTES)
        found = memo.derive((ROUTES, base), routes, added, removed)
        assert found == ids_of(routes) and base == ids_of(ROUTES)
        assert route_diff(ROUTES, routes, memo) == ([extra], [ROUTES[3]])


# --- through `build_graph`: one root including children, as the one-host shape ---------------


def _child(i: int, services: list[str]) -> KubeObject:
    routes = [
        {"conditions": [{"prefix": f"/s{k}"}], "services": [{"name": s, "port": 80}]}
        for k, s in enumerate(services)
    ]
    return kube_object(
        "projectcontour.io/v1", "HTTPProxy", f"child-{i}", "default", spec={"routes": routes}
    )


def _root(children: int) -> KubeObject:
    includes = [
        {"name": f"child-{i}", "conditions": [{"prefix": f"/c{i}"}]} for i in range(children)
    ]
    return kube_object(
        "projectcontour.io/v1",
        "HTTPProxy",
        "root",
        "default",
        spec={"virtualhost": {"fqdn": HOST}, "includes": includes},
    )


def _objects(children: dict[int, list[str]]) -> list[KubeObject]:
    # Every Service stays: a cluster leaves because no route sends to it any more.
    services = {"shared", *(f"own-{i}" for i in children)}
    return [
        _root(len(children)),
        *(_child(i, names) for i, names in children.items()),
        *(service(s) for s in sorted(services)),
    ]


def _compile(memo: CompileMemo, objects: list[KubeObject]) -> CompileResult:
    return build_graph(snapshot(objects), CompileOptions(), default_dialects().all, memo)


def _fresh(objects: list[KubeObject]) -> CompileResult:
    return _compile(CompileMemo(), objects)


def test_a_cluster_leaves_a_big_host_with_its_last_route() -> None:
    children = {i: ["shared", f"own-{i}", f"own-{i}"] for i in range(30)}
    memo = CompileMemo()
    first = _compile(memo, _objects(children))
    assert first == _fresh(_objects(children))
    names = {c.name.split("/")[1] for c in first.graph.clusters}
    assert {"shared", "own-4"} <= names
    children[4] = ["shared", "shared"]
    second = _compile(memo, _objects(children))
    assert second == _fresh(_objects(children))
    assert "own-4" not in {c.name.split("/")[1] for c in second.graph.clusters}
    # The other children's routes were kept: the per-route path was taken.
    before = set(map(id, first.graph.listeners[0].virtual_hosts[0].routes))
    after = second.graph.listeners[0].virtual_hosts[0].routes
    assert sum(id(r) in before for r in after) >= 29 * 3
    children[4] = ["own-4", "missing"]  # a Service that does not exist
    third = _compile(memo, _objects(children))
    assert third == _fresh(_objects(children))
    children[4] = ["shared"]
    fourth = _compile(memo, _objects(children))
    assert fourth == _fresh(_objects(children))


def test_a_small_host_is_checked_whole_and_keeps_no_route_verdicts() -> None:
    """A host of fewer than `PER_ROUTE_MIN_ROUTES` routes keeps no per-route state (memory at
    10,000 small hosts) and still follows its clusters as the full net does."""
    net = _Net()
    small = ROUTES[: PER_ROUTE_MIN_ROUTES - 1]
    graph = _graph(_host(small), CLUSTERS)
    assert net.check(graph) == (graph, ())
    assert net.kept.listeners[LISTENER].verdicts == {}
    assert net.ids.get(small) is None and ids_of(small, net.ids) == ids_of(small)  # no memo
    gone = _graph(graph.listeners[0].virtual_hosts[0], [c for c in CLUSTERS if c != "c7"])
    found, problems = net.check(gone)
    assert (found, problems) == enforce_envoy_limits(gone) and len(problems) == 2
    back = _graph(gone.listeners[0].virtual_hosts[0], CLUSTERS)
    assert net.check(back) == (back, ())
    # Grown past the threshold, it keeps its route verdicts; shrunk back, it drops them.
    big = _graph(_host(ROUTES[:PER_ROUTE_MIN_ROUTES]), CLUSTERS[1:])
    assert net.check(big) == enforce_envoy_limits(big)
    assert set(net.kept.listeners[LISTENER].verdicts) == {HOST}
    again = _graph(_host(small), CLUSTERS[1:])
    assert net.check(again) == enforce_envoy_limits(again)
    assert net.kept.listeners[LISTENER].verdicts == {}

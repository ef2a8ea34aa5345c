"""The graph stages after the dialects keep their results across compiles (`CompileMemo`):
the very same objects while their inputs are the same, recomputed when an input changes, and
always what a compile with a fresh memo gives."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from tests.builders import endpoint_slice, kube_object, service, snapshot
from tests.e2e.certs import CA
from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.graph.attribution import WriterIndex, Writers, cluster_writers
from turnout.graph.build import CompileResult, build_graph, fold_findings
from turnout.graph.memo import CompileMemo, IdentityCache, IdentityMemo, replaced_keys
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Forward,
    Listener,
    ListenerProtocol,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    TCPProxy,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.services import (
    BackendResolver,
    ClusterBook,
    SliceIndex,
    index_endpoint_slices,
    slice_index,
)
from turnout.graph.validate import (
    GraphProblem,
    LimitsMemo,
    PatchedLimits,
    enforce_envoy_limits,
    patch_envoy_limits,
)
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import Finding
from turnout.store import Snapshot

DIALECTS = default_dialects().all
OPTIONS = CompileOptions()
CERT = CA().issue("a.example.com", "b.example.com")


def _proxy(version: int, *, tls: bool = False, service_name: str = "t") -> KubeObject:
    vhost: dict[str, Any] = {"fqdn": "b.example.com"}
    if tls:
        vhost["tls"] = {"secretName": "cert"}
    route = {
        "conditions": [{"prefix": f"/v{version}"}],
        "services": [{"name": service_name, "port": 80}],
    }
    return kube_object(
        "projectcontour.io/v1", "HTTPProxy", "p", spec={"virtualhost": vhost, "routes": [route]}
    )


def _ingress(*, tls: bool = False, class_name: str = "turnout", name: str = "i") -> KubeObject:
    path = {
        "path": "/",
        "pathType": "Prefix",
        "backend": {"service": {"name": "s", "port": {"number": 80}}},
    }
    spec: dict[str, Any] = {
        "ingressClassName": class_name,
        "rules": [{"host": "a.example.com", "http": {"paths": [path]}}],
    }
    if tls:
        spec["tls"] = [{"hosts": ["a.example.com"], "secretName": "cert"}]
    return kube_object("networking.k8s.io/v1", "Ingress", name, spec=spec)


def _cert_secret() -> KubeObject:
    data = {"tls.crt": CERT.cert_pem, "tls.key": CERT.key_pem}
    return kube_object("v1", "Secret", "cert", type="kubernetes.io/tls", stringData=data)


def _base() -> list[KubeObject]:
    return [
        service("s"),
        service("t"),
        endpoint_slice("s", ["10.0.0.1"]),
        endpoint_slice("t", ["10.0.0.2"]),
    ]


# Shared by the snapshots of a test, as a store shares the objects of unchanged partitions.
BASE = _base()


def _carried(*snapshots: Snapshot) -> list[CompileResult]:
    memo = CompileMemo()
    return [build_graph(s, OPTIONS, DIALECTS, memo) for s in snapshots]


def _fresh(snap: Snapshot) -> CompileResult:
    return build_graph(snap, OPTIONS, DIALECTS)


def _cluster(result: CompileResult, service_name: str) -> Cluster:
    (found,) = [c for c in result.graph.clusters if c.service == service_name]
    return found


def test_a_reused_dialect_keeps_its_clusters_and_secrets() -> None:
    """The Ingress dialect is reused whole when only the HTTPProxy changes: the cluster and the
    TLS Secret only its output names are still served, the very same objects."""
    base = [*BASE, _cert_secret(), _ingress(tls=True)]
    first, second = snapshot(*base, _proxy(1, tls=True)), snapshot(*base, _proxy(2, tls=True))
    before, after = _carried(first, second)
    assert after == _fresh(second)
    assert _cluster(after, "s") is _cluster(before, "s")
    assert [s.name for s in after.graph.secrets] == [s.name for s in before.graph.secrets]
    assert after.graph.secrets[0] is before.graph.secrets[0]


def test_a_changed_service_gives_a_new_cluster() -> None:
    """The cluster record reads the Service (here its health port): a changed Service is read
    again, never taken from the compile before."""
    changed = kube_object(
        "v1", "Service", "t", spec={"ports": [{"port": 80}, {"port": 81, "name": "health"}]}
    )
    first = snapshot(*BASE, _proxy(1))
    second = snapshot(
        *(o for o in BASE if o.name != "t" or o.kind != "Service"), changed, _proxy(1)
    )
    before, after = _carried(first, second)
    assert after == _fresh(second)
    assert _cluster(after, "t") == _cluster(before, "t")  # the same record, read again
    assert _cluster(after, "t") is not _cluster(before, "t")


def test_endpoints_follow_their_slices() -> None:
    """An unchanged EndpointSlice keeps the cluster (identity); a changed one resolves again."""
    first = snapshot(*BASE, _proxy(1))
    same = snapshot(*BASE, _proxy(1))
    moved = [o for o in BASE if o.kind != "EndpointSlice" or o.name != "t-1"]
    third = snapshot(*moved, endpoint_slice("t", ["10.0.0.9"]), _proxy(1))
    one, two, three = _carried(first, same, third)
    assert _cluster(two, "t") is _cluster(one, "t")
    assert [e.address for e in _cluster(three, "t").endpoints] == ["10.0.0.9"]
    assert three == _fresh(third)


def test_refused_endpoints_are_checked_again_when_the_slice_changes() -> None:
    """`drop_forbidden_endpoints` per cluster: a link-local endpoint added later is refused."""
    first = snapshot(*BASE, _proxy(1))
    moved = [o for o in BASE if o.kind != "EndpointSlice" or o.name != "t-1"]
    second = snapshot(*moved, endpoint_slice("t", ["10.0.0.2", "169.254.169.254"]), _proxy(1))
    _, after = _carried(first, second)
    assert after == _fresh(second)
    assert [e.address for e in _cluster(after, "t").endpoints] == ["10.0.0.2"]
    assert any("169.254.169.254" in p.reason for p in after.problems)


def test_endpoint_dependence_of_a_reused_dialect_is_kept() -> None:
    """A RouteGroup reads whether its Service has endpoints; when its dialect is reused, the
    Service stays endpoint-dependent (else the endpoints fast path would skip its routing)."""
    group = kube_object(
        "zalando.org/v1",
        "RouteGroup",
        "g",
        spec={
            "hosts": ["g.example.com"],
            "backends": [{"name": "b", "type": "service", "serviceName": "s", "servicePort": 80}],
            "routes": [{"pathSubtree": "/", "backends": [{"backendName": "b"}]}],
        },
    )
    first = snapshot(*BASE, group, _proxy(1))
    second = snapshot(*BASE, group, _proxy(2))
    before, after = _carried(first, second)
    assert ("default", "s") in before.endpoint_dependent_services
    assert after == _fresh(second)


def test_ignored_objects_follow_their_dialect() -> None:
    """A dialect's `ignored` answer is reused while its kinds are unchanged, asked again when
    one of them changes."""
    other = _ingress(class_name="other", name="o")
    first = snapshot(*BASE, other, _proxy(1))
    second = snapshot(*BASE, other, _proxy(2))
    third = snapshot(*BASE, other, _ingress(class_name="other", name="o2"), _proxy(2))
    one, two, three = _carried(first, second, third)
    assert two.ignored == one.ignored and len(two.ignored) == 1
    assert [i.ref.name for i in three.ignored] == ["o", "o2"]
    assert three == _fresh(third)


def _vhost(cluster: str) -> VirtualHost:
    route = Route(
        RouteMatch(),
        Forward((WeightedCluster(cluster, 1),)),
        RouteSource(ObjectRef("projectcontour.io", "HTTPProxy", "default", "p"), "spec.routes[0]"),
    )
    return VirtualHost(
        name="a.example.com",
        hostname="a.example.com",
        routes=(route,),
        owner=ObjectRef("projectcontour.io", "HTTPProxy", "default", "p"),
    )


def _graph(vh: VirtualHost, *clusters: str) -> RoutingGraph:
    listener = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (vh,))
    return RoutingGraph(
        listeners=(listener,),
        clusters=tuple(
            Cluster(name=c, namespace="default", service="s", port=80) for c in clusters
        ),
    )


def test_limits_memo_keeps_a_checked_host_and_rechecks_when_its_cluster_goes() -> None:
    vh = _vhost("c")
    memo = LimitsMemo()
    bad, problems = enforce_envoy_limits(_graph(vh, "x"), memo)
    again, problems_again = enforce_envoy_limits(_graph(vh, "x"), memo)
    assert problems == problems_again and problems
    assert again.listeners[0].virtual_hosts[0] is bad.listeners[0].virtual_hosts[0]
    good, none = enforce_envoy_limits(_graph(vh, "c", "x"), memo)
    assert none == () and good.listeners[0].virtual_hosts[0] is vh
    gone, problems_gone = enforce_envoy_limits(_graph(vh, "x"), memo)
    assert isinstance(gone.listeners[0].virtual_hosts[0].routes[0].action, DirectResponse)
    assert problems_gone == enforce_envoy_limits(_graph(vh, "x"))[1]


def test_limits_memo_rechecks_a_changed_cluster() -> None:
    memo = LimitsMemo()
    ok = Cluster(name="c", namespace="default", service="s", port=80)
    bad = dataclasses.replace(ok, connect_timeout_s=-1.0)
    graph = _graph(_vhost("c"))
    assert enforce_envoy_limits(dataclasses.replace(graph, clusters=(ok,)), memo)[1] == ()
    _, problems = enforce_envoy_limits(dataclasses.replace(graph, clusters=(bad,)), memo)
    assert problems == enforce_envoy_limits(dataclasses.replace(graph, clusters=(bad,)))[1]
    assert problems


def test_fold_findings_keeps_a_folded_status_and_refolds_new_findings() -> None:
    snap = snapshot(*BASE, _proxy(1))
    status = _fresh(snap).endpoint_basis.statuses[0]  # type: ignore[union-attr]
    memo = CompileMemo()
    memo.begin(snap, OPTIONS)
    (first,) = fold_findings([status], [], snap, memo)
    memo.begin(snap, OPTIONS)
    (second,) = fold_findings([status], [], snap, memo)
    assert second is first
    finding = Finding(status.ref, "spec", "EnvoyLimit", "too long")
    memo.begin(snap, OPTIONS)
    (third,) = fold_findings([status], [finding], snap, memo)
    assert third == fold_findings([status], [finding], snap)[0]
    assert third != first


def test_the_cluster_book_never_serves_a_record_of_a_changed_service() -> None:
    """A cluster a reused piece names comes from the book only while its Service is the same:
    an ExternalName Service turned into another name is read again, or left out."""
    options = dataclasses.replace(OPTIONS, enable_external_name_service=True)

    def external(host: str) -> KubeObject:
        spec = {"type": "ExternalName", "externalName": host, "ports": [{"port": 80}]}
        return kube_object("v1", "Service", "x", spec=spec)

    book = ClusterBook()
    first = BackendResolver(
        snapshot(external("a.example.net")), enable_external_name_service=True, book=book
    )
    made = first.service("default", "x", 80)
    assert isinstance(made, Cluster) and made.dns_name == "a.example.net"
    assert first.used({made.name}) == ((made, None),)
    same = BackendResolver(
        snapshot(external("a.example.net")), enable_external_name_service=True, book=book
    )
    assert same.used({made.name}) == ((made, None),)  # an equal Service: the same record
    moved = BackendResolver(
        snapshot(external("b.example.net")), enable_external_name_service=True, book=book
    )
    assert moved.used({made.name}) == ()
    asked = moved.service("default", "x", 80)
    assert isinstance(asked, Cluster) and asked.dns_name == "b.example.net"
    assert moved.used({made.name}) == ((asked, None),)
    proxy = _proxy(1, service_name="x")
    carried = CompileMemo()
    build_graph(snapshot(external("a.example.net"), proxy), options, DIALECTS, carried)
    second = snapshot(external("b.example.net"), proxy)
    after = build_graph(second, options, DIALECTS, carried)
    assert after == build_graph(second, options, DIALECTS)
    assert _cluster(after, "x").dns_name == "b.example.net"


def _http_hosts(result: CompileResult) -> dict[str, VirtualHost]:
    (http,) = [lst for lst in result.graph.listeners if lst.name == "ingress_http"]
    return {vh.name: vh for vh in http.virtual_hosts}


def test_held_hosts_and_listeners_stay_the_same_objects_until_they_change() -> None:
    """An invalid root's hostname is held (404) on the HTTP listener: the same held host and
    listener while nothing changes there, gone once the root is valid."""
    spec = {"virtualhost": {"fqdn": "b.example.com", "tls": {"secretName": "missing"}}}
    invalid = kube_object("projectcontour.io/v1", "HTTPProxy", "p", spec=spec)
    first = snapshot(*BASE, _ingress(), invalid)
    second = snapshot(*BASE, _ingress(name="j"), invalid)
    third = snapshot(*BASE, _ingress(name="j"), _proxy(1))
    one, two, three = _carried(first, second, third)
    assert _http_hosts(one)["b.example.com"].routes == ()
    assert _http_hosts(two)["b.example.com"] is _http_hosts(one)["b.example.com"]
    assert _http_hosts(three)["b.example.com"].routes
    assert three == _fresh(third)
    same = _carried(first, first)
    assert same[1].graph.listeners[0] is same[0].graph.listeners[0]


def test_kind_checks_follow_the_objects() -> None:
    """`check_kinds` per object: an unread kind is reported while it is there, not after."""
    typo = kube_object("projectcontour.io/v1", "HTTPProxxy", "x", spec={})
    first = snapshot(*BASE, typo, _proxy(1))
    second = snapshot(*BASE, _proxy(1))
    one, two = _carried(first, second)
    assert one.rejected == (typo.ref,) and any("HTTPProxxy" in p.reason for p in one.problems)
    assert two.rejected == () and not any("HTTPProxxy" in p.reason for p in two.problems)
    assert two == _fresh(second)


def test_cluster_writers_with_a_memo_are_those_of_a_walk() -> None:
    """Writers per virtual host, by identity, merged: what one walk of the graph gives; a
    changed host is walked again."""
    memo: IdentityMemo[VirtualHost, Writers] = IdentityMemo()
    graph = _graph(_vhost("c"), "c")
    assert cluster_writers(graph, memo) == cluster_writers(graph)
    assert cluster_writers(graph, memo) == cluster_writers(graph)
    moved = _graph(_vhost("d"), "d")
    assert set(cluster_writers(moved, memo)) == {"d"}


def test_a_refused_endpoint_names_every_slice_that_lists_it() -> None:
    """The problem of a refused endpoint names the slices listing it: a slice added later that
    lists it too (on another port, so the endpoints stay the same) is named."""
    refused = endpoint_slice("t", ["169.254.169.254"], name="t-1")
    other = endpoint_slice("t", ["169.254.169.254"], name="t-2", ports=(("other", 81),))
    rest = [o for o in BASE if o.kind != "EndpointSlice" or o.name != "t-1"]
    first = snapshot(*rest, refused, _proxy(1))
    second = snapshot(*rest, refused, other, _proxy(1))
    one, two = _carried(first, second)
    assert [p.reason for p in one.problems if "t-2" in p.reason] == []
    assert [p for p in two.problems if "t-2" in p.reason]
    assert two == _fresh(second)


def test_endpoints_of_a_cluster_kept_from_the_compile_before() -> None:
    """A piece reused from the compile before may ask for the endpoints of a cluster it did not
    ask the resolver for this time: they come from its Service's slices, and it is recorded."""
    snap = snapshot(*BASE)
    book = ClusterBook()
    first = BackendResolver(snap, book=book)
    made = first.service("default", "t", 80)
    assert isinstance(made, Cluster)
    first.used({made.name})
    again = BackendResolver(snap, book=book)
    assert [e.address for e in again.endpoints(made)] == ["10.0.0.2"]
    assert again.endpoint_dependent() == {("default", "t")}


def test_the_slice_index_follows_adds_moves_and_deletes() -> None:
    """`slice_index` updated per changed slice is `index_endpoint_slices` built anew, and never
    changes the index it handed out before."""
    rng = random.Random(7)
    kept = SliceIndex()
    objects: dict[str, KubeObject] = {}
    previous = slice_index(snapshot(), None, kept)
    for _ in range(60):
        name = f"s-{rng.randrange(6)}"
        before = {k: list(v) for k, v in previous.items()}
        if name in objects and rng.random() < 0.3:
            del objects[name]
        else:
            owner = rng.choice(("a", "b", "c"))
            objects[name] = endpoint_slice(owner, [f"10.0.0.{rng.randrange(9)}"], name=name)
        snap = snapshot(*objects.values())
        index = slice_index(snap, [("default", name)], kept)
        assert index == index_endpoint_slices(snap)
        assert previous == before  # the compile before's index is left as it was
        previous = index


def test_a_refused_endpoint_is_reported_on_every_object_that_sends_to_it() -> None:
    """The same refusal (the same cluster and endpoint) is reported anew on an object that
    starts sending to the cluster."""
    refused = endpoint_slice("t", ["169.254.169.254"], name="t-1")
    rest = [o for o in BASE if o.kind != "EndpointSlice" or o.name != "t-1"]
    spec = {
        "virtualhost": {"fqdn": "q.example.com"},
        "routes": [{"services": [{"name": "t", "port": 80}]}],
    }
    second_proxy = kube_object("projectcontour.io/v1", "HTTPProxy", "q", spec=spec)
    proxy = _proxy(1)
    first = snapshot(*rest, refused, proxy)
    second = snapshot(*rest, refused, proxy, second_proxy)
    one, two = _carried(first, second)
    assert one.endpoint_basis is not None and two.endpoint_basis is not None
    assert {f.ref.name for f in one.endpoint_basis.endpoint_findings} == {"p"}
    assert {f.ref.name for f in two.endpoint_basis.endpoint_findings} == {"p", "q"}
    assert two == _fresh(second)


def test_replaced_keys_are_those_not_the_very_same_object() -> None:
    kept, old_value, equal_copy = object(), [1], [1]
    old = {"kept": kept, "replaced": old_value, "removed": object()}
    new = {"kept": kept, "replaced": equal_copy, "added": object()}
    assert replaced_keys(old, new) == {"replaced", "removed", "added"}
    assert replaced_keys(old, old) == set()
    assert replaced_keys(old, dict(old)) == set()


def _named_proxy(
    name: str, fqdn: str, service_name: str, *, secret: str | None = None
) -> KubeObject:
    vhost: dict[str, Any] = {"fqdn": fqdn}
    if secret is not None:
        vhost["tls"] = {"secretName": secret}
    route = {"conditions": [{"prefix": "/"}], "services": [{"name": service_name, "port": 80}]}
    spec = {"virtualhost": vhost, "routes": [route]}
    return kube_object("projectcontour.io/v1", "HTTPProxy", name, spec=spec)


def _walk(*snapshots: Snapshot) -> list[CompileResult]:
    """Carried compiles of `snapshots`, each checked against a full compile."""
    results = _carried(*snapshots)
    for snap, result in zip(snapshots, results, strict=True):
        assert result == _fresh(snap)
    return results


def test_a_cluster_leaves_the_graph_with_its_last_user() -> None:
    """The clusters used are counted per virtual host: a cluster two hosts send to stays while
    one of them moves away, and goes with the second."""
    a_t, b_t = _named_proxy("a", "a.example.com", "t"), _named_proxy("b", "b.example.com", "t")
    a_s, b_s = _named_proxy("a", "a.example.com", "s"), _named_proxy("b", "b.example.com", "s")
    both, one, none = _walk(
        snapshot(*BASE, a_t, b_t), snapshot(*BASE, a_s, b_t), snapshot(*BASE, a_s, b_s)
    )
    assert {c.service for c in both.graph.clusters} == {"t"}
    assert {c.service for c in one.graph.clusters} == {"s", "t"}
    assert _cluster(one, "t") is _cluster(both, "t")
    assert {c.service for c in none.graph.clusters} == {"s"}
    assert none.endpoint_basis is not None
    assert set(none.endpoint_basis.backends) == {("default", "s")}


def test_a_secret_stays_while_one_host_still_names_it() -> None:
    """TLS Secrets are counted per virtual host: one host dropping TLS leaves the Secret
    served for the other; it goes when neither names it."""
    secret = _cert_secret()
    a_tls = _named_proxy("a", "a.example.com", "t", secret="cert")
    b_tls = _named_proxy("b", "b.example.com", "t", secret="cert")
    a_plain, b_plain = (
        _named_proxy("a", "a.example.com", "t"),
        _named_proxy("b", "b.example.com", "t"),
    )
    both, one, none = _walk(
        snapshot(*BASE, secret, a_tls, b_tls),
        snapshot(*BASE, secret, a_plain, b_tls),
        snapshot(*BASE, secret, a_plain, b_plain),
    )
    assert [s.secret for s in both.graph.secrets] == ["cert"]
    assert [s.secret for s in one.graph.secrets] == ["cert"]
    assert one.graph.secrets[0] is both.graph.secrets[0]
    assert none.graph.secrets == ()


def test_a_held_host_is_released_and_held_again() -> None:
    """A hostname whose root turns invalid is held (404), released when the root is valid
    again, and held again: each step as a full compile gives it."""
    spec = {"virtualhost": {"fqdn": "b.example.com", "tls": {"secretName": "missing"}}}
    invalid = kube_object("projectcontour.io/v1", "HTTPProxy", "p", spec=spec)
    held, released, again = _walk(
        snapshot(*BASE, _ingress(), invalid),
        snapshot(*BASE, _ingress(), _proxy(1)),
        snapshot(*BASE, _ingress(), invalid),
    )
    assert _http_hosts(held)["b.example.com"].routes == ()
    assert _http_hosts(released)["b.example.com"].routes
    assert _http_hosts(again)["b.example.com"].routes == ()
    assert list(_http_hosts(again)) == sorted(_http_hosts(again))


def _patched(
    graph: RoutingGraph,
    kept: PatchedLimits,
    hosts: set[tuple[str, str]] | None,
    clusters: set[str] | None,
) -> tuple[RoutingGraph, tuple[GraphProblem, ...]]:
    by_name = {c.name: c for c in graph.clusters}
    return patch_envoy_limits(graph, kept, hosts, clusters, list(by_name), by_name)


def test_patched_limits_follow_a_violation_in_one_host() -> None:
    """The net patched per name: a host whose cluster goes is checked again though the host
    did not change (it asked about the name), and is whole again when the cluster is back;
    a changed host alone is checked again. Each answer is the full net's."""
    kept = PatchedLimits()
    vh = _vhost("c")
    other = dataclasses.replace(_vhost("d"), name="b.example.com", hostname="b.example.com")
    listener = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (vh, other))
    graph = dataclasses.replace(_graph(vh, "c", "d"), listeners=(listener,))
    assert _patched(graph, kept, None, None) == (graph, ())
    gone = dataclasses.replace(graph, clusters=graph.clusters[1:])
    found, problems = _patched(gone, kept, set(), {"c"})
    assert (found, problems) == enforce_envoy_limits(gone) and problems
    assert isinstance(found.listeners[0].virtual_hosts[0].routes[0].action, DirectResponse)
    assert found.listeners[0].virtual_hosts[1] is other
    assert _patched(graph, kept, set(), {"c"}) == (graph, ())
    moved = dataclasses.replace(_vhost("x"), name="a.example.com")
    listener = dataclasses.replace(listener, virtual_hosts=(moved, other))
    changed = dataclasses.replace(graph, listeners=(listener,))
    found, problems = _patched(changed, kept, {("ingress_http", "a.example.com")}, set())
    assert (found, problems) == enforce_envoy_limits(changed) and problems


def test_ownership_follows_the_claims_that_changed() -> None:
    """Ownership patched per claim: the oldest claimant wins, and loses its hostname to the
    next oldest when it stops claiming it."""
    a, b = _ingress(name="a"), _ingress(name="b")
    first, second, third = _walk(snapshot(*BASE, a, b), snapshot(*BASE, b), snapshot(*BASE, a, b))
    owner = {vh.name: vh.owner for vh in first.graph.listeners[0].virtual_hosts}
    assert owner["a.example.com"].name == "a"
    assert {vh.owner.name for vh in second.graph.listeners[0].virtual_hosts} == {"b"}
    assert third.graph == first.graph


def test_kind_problems_stay_for_an_equal_object_handed_over_again() -> None:
    """A store may hand over an equal object for an unchanged one (no change in the delta):
    the objects turnout does not read are still reported, in the snapshot's order."""
    one = kube_object("example.com/v1", "Widget", "a", spec={})
    two = kube_object("example.com/v1", "Widget", "b", spec={})
    first = snapshot(*BASE, one, two, _proxy(1))
    second = snapshot(*BASE, dataclasses.replace(one), two, _proxy(1))
    _, after = _carried(first, second)
    assert after == _fresh(second)
    assert [i.ref.name for i in after.ignored] == ["a", "b"]


def _random_host(rng: random.Random, pool: list[VirtualHost]) -> VirtualHost:
    """A host of the pool again (the very same object), or a new one naming random clusters."""
    if pool and rng.random() < 0.6:
        return rng.choice(pool)
    routes = []
    for r in range(rng.randint(0, 3)):
        owner = ObjectRef("projectcontour.io", "HTTPProxy", "default", f"p{rng.randint(0, 4)}")
        clusters = tuple(WeightedCluster(f"c{rng.randint(0, 5)}", 1) for _ in range(2))
        routes.append(Route(RouteMatch(), Forward(clusters), RouteSource(owner, f"r{r}")))
    vh = VirtualHost(
        name=f"h{rng.randint(0, 9)}",
        hostname="h.example.com",
        routes=tuple(routes),
        owner=ObjectRef("projectcontour.io", "HTTPProxy", "default", "p"),
    )
    pool.append(vh)
    return vh


def test_the_writer_index_gives_the_writers_a_walk_gives() -> None:
    """`WriterIndex` patched from the hosts added and removed since its last call: per
    cluster, the same writers in the same order as `cluster_writers`' walk, over random
    graphs (hosts shared across listeners and compiles, TCP proxies, a host listed twice)."""
    rng = random.Random(3)
    for _ in range(40):
        index, pool = WriterIndex(), []
        for _ in range(25):
            listeners = []
            for port in range(rng.randint(1, 3)):
                hosts = [_random_host(rng, pool) for _ in range(rng.randint(0, 5))]
                owner = ObjectRef("projectcontour.io", "HTTPProxy", "default", f"t{port}")
                tcp = [
                    TCPProxy(f"t{j}", "", (WeightedCluster(f"c{rng.randint(0, 5)}", 1),), owner)
                    for j in range(rng.randint(0, 2))
                ]
                protocol = ListenerProtocol.HTTP
                listeners.append(
                    Listener(f"l{port}", "0.0.0.0", port, protocol, tuple(hosts), tuple(tcp))
                )
            graph = RoutingGraph(listeners=tuple(listeners))
            names = {f"c{rng.randint(0, 6)}" for _ in range(rng.randint(1, 4))}
            assert index.writers(graph, names) == cluster_writers(graph, only=names)


def test_an_identity_cache_answers_the_very_same_object_only_and_stays_bounded() -> None:
    calls: list[object] = []

    def length(value: list[int]) -> int:
        calls.append(value)
        return len(value)

    cache = IdentityCache(length, limit=2)
    a, equal = [1, 2], [1, 2]
    assert (cache(a), cache(a)) == (2, 2)
    assert calls == [a]  # the second answer was kept
    assert cache(equal) == 2 and calls[-1] is equal  # equal is not the same object
    cache([3])  # full: everything is forgotten before this one is kept
    cache(a)
    assert len(calls) == 4 and calls[-1] is a

"""A translation that patches the last one (`envoy.translate.patch`): byte-identical to a fresh
translation on random walks of host, cluster and Secret changes; nothing a patch removed is
still sent; the changed names it hands the xDS server (`EnvoyResources.changes`) turn the
tuple it patched into the new one, removals included."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from tests.cases.tcp_tls import CERT
from turnout.compile_inputs import ListenerProtocol
from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    SECRET_TYPE,
    EnvoyResources,
)
from turnout.envoy.translate import TranslateMemo, retranslate_clusters, translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import PER_ROUTE_MIN_ROUTES
from turnout.envoy.xds import XdsServer
from turnout.graph.model import (
    Cluster,
    Endpoint,
    Forward,
    Listener,
    PathMatch,
    PathMatchKind,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    TLSSecret,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

SCOPED = TranslateOptions(scoped_routes_min_hosts=2)
# One table for every host, a tree from 4 routes on.
PLAIN = TranslateOptions(scoped_routes_min_hosts=0, matcher_tree_min_routes=4)
# Hosts of 6 routes or more split into path scopes of about 4, trees from 4 routes on.
SPLIT = TranslateOptions(
    scoped_routes_min_hosts=2,
    split_host_min_routes=6,
    split_scope_max_routes=4,
    split_max_extra_share=100.0,
    matcher_tree_min_routes=4,
)


def _name(message: Any) -> str:
    return str(getattr(message, "name", "") or message.cluster_name)


def wire(resources: EnvoyResources) -> dict[str, list[tuple[str, bytes]]]:
    """Every resource's name and deterministic bytes, per type, in the translator's order."""
    return {
        type_url: [(_name(m), m.SerializeToString(deterministic=True)) for m in messages]
        for type_url, messages in resources.by_type().items()
    }


def host(hostname: str, cluster: str, prefixes: tuple[str, ...] = ("/",)) -> VirtualHost:
    owner = ObjectRef("projectcontour.io", "HTTPProxy", "default", hostname)
    routes = tuple(
        Route(
            match=RouteMatch(path=PathMatch(PathMatchKind.PREFIX, p)),
            action=Forward((WeightedCluster(cluster, 1),)),
            source=RouteSource(owner, f"spec.routes[{i}]"),
        )
        for i, p in enumerate(prefixes)
    )
    return VirtualHost(name=hostname, hostname=hostname, routes=routes, owner=owner)


def cluster(i: int, port: int = 80) -> Cluster:
    return Cluster(f"default/app{i}/80/x", "default", f"app{i}", 80, (Endpoint("10.0.0.1", port),))


def graph(
    hosts: tuple[VirtualHost, ...],
    clusters: tuple[Cluster, ...],
    secrets: tuple[TLSSecret, ...] = (),
) -> RoutingGraph:
    listener = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, hosts)
    by_name = tuple(sorted(clusters, key=lambda c: c.name))
    return RoutingGraph(listeners=(listener,), clusters=by_name, secrets=secrets)


def secret(i: int) -> TLSSecret:
    return dataclasses.replace(CERT, name=f"default/cert{i}/1", secret=f"cert{i}")


def assert_changes_lead_from(before: EnvoyResources, after: EnvoyResources) -> None:
    """Every type `after` does not name in `changes` is `before`'s very tuple; every one it
    names is its base with those names replaced or removed."""
    old, new = before.by_type(), after.by_type()
    for type_url, messages in new.items():
        if type_url not in after.changes:
            assert messages is old[type_url], type_url
            continue
        base, updates = after.changes[type_url]
        assert base is old[type_url]
        patched = {_name(m): m for m in base}
        for name, message in updates.items():
            if message is None:
                assert name in patched, name
                del patched[name]
            else:
                patched[name] = message
        assert {n: id(m) for n, m in patched.items()} == {_name(m): id(m) for m in messages}


def test_random_walks_give_the_bytes_of_a_fresh_translation() -> None:
    _random_walks(SCOPED)


def test_random_walks_of_a_plain_listener_give_the_bytes_of_a_fresh_translation() -> None:
    _random_walks(PLAIN)


def test_random_walks_with_split_hosts_give_the_bytes_of_a_fresh_translation() -> None:
    _random_walks(SPLIT, big=True)


def test_a_route_changed_in_a_big_host_of_a_plain_listener_patches_its_table_only() -> None:
    prefixes = tuple(f"/team-{i}/" for i in range(PER_ROUTE_MIN_ROUTES * 3))
    hosts = {"big.example.com": host("big.example.com", cluster(0).name, prefixes)}
    hosts["small.example.com"] = host("small.example.com", cluster(1).name)
    memo = TranslateMemo()
    clusters = (cluster(0), cluster(1))
    before = translate(graph(tuple(hosts.values()), clusters), PLAIN, memo)
    for step, where in enumerate((5, 0, len(prefixes) - 1)):
        changed = list(prefixes)
        changed.insert(where, f"/team-{where}/new{step}")
        hosts["big.example.com"] = host("big.example.com", cluster(step % 2).name, tuple(changed))
        g = graph(tuple(hosts.values()), clusters)
        after = translate(g, PLAIN, memo)
        assert wire(after) == wire(translate(g, PLAIN)), step
        assert set(after.changes) == {ROUTE_TYPE}, step  # the listener is the very same
        assert_changes_lead_from(before, after)
        [table] = after.routes
        assert after.serialized(table) == table.SerializeToString(deterministic=True)
        before = after


def _random_walks(options: TranslateOptions, big: bool = False) -> None:
    patches = 0
    for seed in range(4):
        rng = random.Random(seed)
        names = [f"h{i}.example.com" for i in range(6)]
        hosts = {n: host(n, cluster(i % 3).name) for i, n in enumerate(names)}
        big_prefixes = [f"/g{i % 3}/t{i}/" for i in range(12)]
        if big:
            hosts[BIG] = host(BIG, cluster(0).name, tuple(big_prefixes))
        clusters = {i: cluster(i) for i in range(3)}
        secrets = {0: secret(0)}
        memo = TranslateMemo()
        server = XdsServer()
        first = graph(tuple(hosts.values()), tuple(clusters.values()))
        before = translate(first, options, memo)
        server.set_resources(before)
        for step in range(40):
            if big and rng.random() < 0.5:
                _mutate_big(rng, step, big_prefixes)
                hosts[BIG] = host(BIG, cluster(step % 3).name, tuple(big_prefixes))
            else:
                _mutate(rng, step, hosts, clusters, secrets)
            g = graph(tuple(hosts.values()), tuple(clusters.values()), tuple(secrets.values()))
            after = translate(g, options, memo)
            fresh = translate(g, options)
            assert wire(after) == wire(fresh), (seed, step)
            # The server patching its snapshot with the changes has the fresh snapshot's
            # content and references.
            server.set_resources(after)
            alone = XdsServer()
            alone.set_resources(fresh)
            assert server.version == alone.version, (seed, step)
            assert server._snapshot is not None and alone._snapshot is not None
            assert server._snapshot.referenced == alone._snapshot.referenced, (seed, step)
            if after.changes:  # a full translation has none
                patches += 1
                assert_changes_lead_from(before, after)
            before = after
    assert patches > 40  # most steps were patches, not full translations


def _mutate(
    rng: random.Random,
    step: int,
    hosts: dict[str, VirtualHost],
    clusters: dict[int, Cluster],
    secrets: dict[int, TLSSecret],
) -> None:
    choice = rng.randrange(7)
    if choice == 0 and len(hosts) > 2:
        del hosts[rng.choice(sorted(hosts))]
    elif choice == 1:
        name = f"n{step}.example.com"
        hosts[name] = host(name, rng.choice(list(clusters.values())).name)
    elif choice == 2:
        # Another case of an existing name: two hosts share a scope key.
        name = rng.choice(sorted(hosts)).upper()
        hosts[name] = host(name, rng.choice(list(clusters.values())).name)
    elif choice == 3:
        i = rng.randrange(5)
        clusters[i] = cluster(i, rng.randint(1, 3000))
    elif choice == 4 and len(clusters) > 1:
        del clusters[rng.choice(sorted(clusters))]
    elif choice == 5:
        i = rng.randrange(3)
        if i in secrets:
            del secrets[i]
        else:
            secrets[i] = secret(i)
    else:
        name = rng.choice(sorted(hosts))
        hosts[name] = host(name, rng.choice(list(clusters.values())).name, ("/", f"/s{step}"))


BIG = "big.example.com"


def _mutate_big(rng: random.Random, step: int, prefixes: list[str]) -> None:
    """A route of the big host added (in a directory, new or not), removed or changed."""
    choice = rng.randrange(4)
    if choice == 0 and len(prefixes) > 7:
        del prefixes[rng.randrange(len(prefixes))]
    elif choice == 1:
        prefixes.insert(rng.randrange(len(prefixes) + 1), f"/g{rng.randrange(6)}/s{step}")
    elif choice == 2:
        prefixes[rng.randrange(len(prefixes))] = rng.choice(("/", "/g1", f"/g2/t{step}/x"))
    else:
        prefixes.extend(f"/d{step}/x{k}" for k in range(5))


def _three_hosts() -> tuple[dict[str, VirtualHost], RoutingGraph]:
    hosts = {f"h{i}.example.com": host(f"h{i}.example.com", cluster(0).name) for i in range(3)}
    return hosts, graph(tuple(hosts.values()), (cluster(0), cluster(1)), (secret(0),))


def test_a_removed_host_loses_its_scope_and_table_and_the_server_hears_of_it() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    server = XdsServer()
    before = translate(first, SCOPED, memo)
    server.set_resources(before)
    del hosts["h1.example.com"]
    after = translate(graph(tuple(hosts.values()), first.clusters, first.secrets), SCOPED, memo)
    gone = "ingress_http/h1.example.com"
    assert gone not in {s.name for s in after.scoped_routes}
    assert gone not in {r.name for r in after.routes}
    assert after.changes[ROUTE_TYPE][1] == {gone: None}
    assert after.changes[SCOPED_ROUTE_TYPE][1] == {gone: None}
    # Nothing else changed: the other types are the very same tuples.
    for type_url in (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, SECRET_TYPE):
        assert after.by_type()[type_url] is before.by_type()[type_url]
    server.set_resources(after)
    fresh = XdsServer()
    fresh.set_resources(
        translate(graph(tuple(hosts.values()), first.clusters, first.secrets), SCOPED)
    )
    assert server.version == fresh.version
    snapshot = server._snapshot
    assert snapshot is not None
    assert gone not in snapshot.resources[ROUTE_TYPE]
    assert gone not in snapshot.resources[SCOPED_ROUTE_TYPE]
    assert gone not in snapshot.referenced[ROUTE_TYPE]
    assert snapshot.changes[ROUTE_TYPE] == {gone}


def test_a_changed_host_keeps_its_scope_and_every_other_type() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    before = translate(first, SCOPED, memo)
    hosts["h2.example.com"] = host("h2.example.com", cluster(0).name, ("/", "/new"))
    g = graph(tuple(hosts.values()), first.clusters, first.secrets)
    after = translate(g, SCOPED, memo)
    assert wire(after) == wire(translate(g, SCOPED))
    assert set(after.changes) == {ROUTE_TYPE}
    assert after.scoped_routes is before.scoped_routes
    assert after.listeners is before.listeners


def test_a_removed_cluster_is_neither_a_cluster_nor_an_assignment() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    translate(first, SCOPED, memo)
    gone = cluster(1).name
    g = graph(tuple(hosts.values()), (first.clusters[0],), first.secrets)
    after = translate(g, SCOPED, memo)
    assert [c.name for c in after.clusters] == [cluster(0).name]
    assert [e.cluster_name for e in after.endpoints] == [cluster(0).name]
    assert after.changes[CLUSTER_TYPE][1] == {gone: None}
    assert after.changes[ENDPOINT_TYPE][1] == {gone: None}
    server = XdsServer()
    server.set_resources(translate(first, SCOPED))
    server.set_resources(after)
    assert server._snapshot is not None
    assert gone not in server._snapshot.resources[CLUSTER_TYPE]
    assert gone not in server._snapshot.referenced[ENDPOINT_TYPE]


def test_a_renamed_secret_is_sent_under_its_new_name_only() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    before = translate(first, SCOPED, memo)
    renamed = secret(7)
    g = graph(tuple(hosts.values()), first.clusters, (renamed,))
    after = translate(g, SCOPED, memo)
    assert wire(after) == wire(translate(g, SCOPED))
    assert [s.name for s in after.secrets] == [renamed.name]
    assert after.changes[SECRET_TYPE][0] is before.secrets
    assert after.changes[SECRET_TYPE][1].keys() == {secret(0).name, renamed.name}
    assert after.changes[SECRET_TYPE][1][secret(0).name] is None


def test_a_host_sharing_a_scope_key_is_translated_whole_and_the_first_keeps_the_key() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    translate(first, SCOPED, memo)
    hosts["H0.example.com"] = host("H0.example.com", cluster(1).name)
    g = graph(tuple(hosts.values()), first.clusters, first.secrets)
    after = translate(g, SCOPED, memo)
    assert wire(after) == wire(translate(g, SCOPED))
    del hosts["h0.example.com"]
    g = graph(tuple(hosts.values()), first.clusters, first.secrets)
    after = translate(g, SCOPED, memo)
    assert wire(after) == wire(translate(g, SCOPED))
    (table,) = [r for r in after.routes if r.name == "ingress_http/h0.example.com"]
    assert table.virtual_hosts[0].domains[0] == "H0.example.com"


def test_a_hint_against_another_tuple_is_not_taken() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    server = XdsServer()
    server.set_resources(translate(first, SCOPED, memo))
    del hosts["h1.example.com"]
    g = graph(tuple(hosts.values()), first.clusters, first.secrets)
    after = translate(g, SCOPED, memo)
    # The server installed something else in between: it diffs instead.
    other = translate(graph(tuple(hosts.values())[:1], first.clusters, first.secrets), SCOPED)
    server.set_resources(other)
    server.set_resources(after)
    fresh = XdsServer()
    fresh.set_resources(translate(g, SCOPED))
    assert server.version == fresh.version


def test_a_patch_after_a_snapshot_of_equal_content_is_still_taken_whole() -> None:
    memo = TranslateMemo()
    hosts, first = _three_hosts()
    server = XdsServer()
    version = server.set_resources(translate(first, SCOPED, memo))
    # An equal but new host: new messages, the same bytes, so the server keeps its snapshot.
    hosts["h1.example.com"] = host("h1.example.com", cluster(0).name)
    g = graph(tuple(hosts.values()), first.clusters, first.secrets)
    assert server.set_resources(translate(g, SCOPED, memo)) == version
    hosts["h2.example.com"] = host("h2.example.com", cluster(1).name, ("/", "/x"))
    del hosts["h0.example.com"]
    g = graph(tuple(hosts.values()), first.clusters, first.secrets)
    patched = translate(g, SCOPED, memo)
    assert patched.changes  # a patch of the tuples the server did not install
    server.set_resources(patched)
    fresh = XdsServer()
    fresh.set_resources(translate(g, SCOPED))
    assert server.version == fresh.version
    assert server._snapshot is not None and fresh._snapshot is not None
    assert server._snapshot.referenced == fresh._snapshot.referenced
    assert server._snapshot.changes[ROUTE_TYPE] == {
        "ingress_http/h0.example.com",
        "ingress_http/h2.example.com",
    }


def test_the_endpoints_fast_path_hands_the_server_its_clusters_by_name() -> None:
    memo = TranslateMemo()
    _, first = _three_hosts()
    resources = translate(first, SCOPED, memo)
    server = XdsServer()
    server.set_resources(resources)
    moved = dataclasses.replace(first.clusters[1], endpoints=(Endpoint("10.0.0.9", 80),))
    g = dataclasses.replace(first, clusters=(first.clusters[0], moved))
    fast = retranslate_clusters(resources, g, [moved], SCOPED, memo)
    assert fast.changes[CLUSTER_TYPE][0] is resources.clusters
    assert fast.changes[ENDPOINT_TYPE][1].keys() == {moved.name}
    server.set_resources(fast)
    alone = XdsServer()
    alone.set_resources(translate(g, SCOPED))
    assert server.version == alone.version
    assert server._snapshot is not None
    assert server._snapshot.changes[ENDPOINT_TYPE] == {moved.name}
    # The next translation patches on from the fast path's clusters.
    after = translate(g, SCOPED, memo)
    assert after.endpoints[1] is fast.endpoints[1]

"""The translate memo (`envoy.translate.memo.TranslateMemo`): a translation with a memo carried
over from earlier translations gives exactly the bytes of a fresh one, reuses the messages of
every piece that is the very same object as before, and forgets everything when the options
change."""

from __future__ import annotations

import dataclasses

import pytest

from tests.cases.clusters import every_kind_of_cluster
from tests.cases.route_policies import rich_policies_graph
from tests.cases.tcp_tls import CERT, every_tls_feature_graph, tls_graph, vhost
from tests.fixture_cases import CASES, compile_case
from turnout.compile_inputs import ListenerProtocol
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import TranslateMemo, retranslate_clusters, translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import host_route_configuration, translate_route_configuration
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
    TLSTermination,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef


def wire(resources: EnvoyResources) -> dict[str, list[tuple[str, bytes]]]:
    """Every resource's name and deterministic bytes, per type, in the translator's order."""
    return {
        type_url: [
            (str(getattr(m, "name", "") or m.cluster_name), m.SerializeToString(deterministic=True))
            for m in messages
        ]
        for type_url, messages in resources.by_type().items()
    }


def graphs() -> list[RoutingGraph]:
    out = [compile_case(case).graph for case in CASES]
    return [*out, rich_policies_graph(), every_kind_of_cluster(), every_tls_feature_graph()]


def test_a_carried_memo_gives_the_bytes_of_a_fresh_translation_over_every_fixture() -> None:
    memo = TranslateMemo()
    sequence = graphs()
    # Forwards, backwards and each graph twice in a row: the memo sees every kind of change.
    for graph in [*sequence, *reversed(sequence), *(g for g in sequence for _ in range(2))]:
        carried = translate(graph, None, memo)
        assert wire(carried) == wire(translate(graph))


def test_route_configurations_come_with_their_exact_serialization() -> None:
    for graph in graphs():
        resources = translate(graph, None, TranslateMemo())
        for config in resources.routes:
            data = config.SerializeToString(deterministic=True)
            assert resources.serialized(config) == data
            assert resources.encoded[id(config)] == (config, data)


def _host(name: str, prefixes: tuple[str, ...]) -> VirtualHost:
    owner = ObjectRef("projectcontour.io", "HTTPProxy", "default", name)
    routes = tuple(
        Route(
            match=RouteMatch(path=PathMatch(PathMatchKind.PREFIX, p)),
            action=Forward((WeightedCluster("default/app/80/x", 1),)),
            source=RouteSource(owner, f"spec.routes[{i}]"),
        )
        for i, p in enumerate(prefixes)
    )
    return VirtualHost(name=name, hostname=name, routes=routes, owner=owner)


def _two_hosts_graph() -> RoutingGraph:
    listener = Listener(
        "ingress_http",
        "0.0.0.0",
        8080,
        ListenerProtocol.HTTP,
        virtual_hosts=(_host("a.example.com", ("/a",)), _host("b.example.com", ("/b",))),
    )
    clusters = (
        Cluster("default/app/80/x", "default", "app", 80, endpoints=(Endpoint("10.0.0.1", 80),)),
    )
    return RoutingGraph(listeners=(listener,), clusters=clusters)


def _with_b_changed(graph: RoutingGraph) -> tuple[RoutingGraph, VirtualHost]:
    """`graph` of `_two_hosts_graph` with b.example.com given a second route `/c`."""
    (listener,) = graph.listeners
    changed_host = _host("b.example.com", ("/b", "/c"))
    hosts = (listener.virtual_hosts[0], changed_host)
    listeners = (dataclasses.replace(listener, virtual_hosts=hosts),)
    return dataclasses.replace(graph, listeners=listeners), changed_host


def test_unchanged_pieces_keep_their_messages_and_a_changed_host_is_translated_anew() -> None:
    memo = TranslateMemo()
    graph = _two_hosts_graph()
    first = translate(graph, None, memo)
    again = translate(graph, None, memo)
    # The very same graph: the very same messages, so the xDS server has nothing to do.
    assert all(
        a is b
        for type_url, messages in first.by_type().items()
        for a, b in zip(messages, again.by_type()[type_url], strict=True)
    )
    (listener,) = graph.listeners
    changed, changed_host = _with_b_changed(graph)
    after = translate(changed, None, memo)
    assert wire(after) == wire(translate(changed))
    assert after.clusters[0] is first.clusters[0]
    assert after.endpoints[0] is first.endpoints[0]
    (config,) = after.routes
    assert config is not first.routes[0]
    assert [r.match.prefix for r in config.virtual_hosts[1].routes] == ["/b", "/c"]
    # The unchanged host is the part the memo kept: the same bytes, not translated again.
    assert memo.hosts.get(listener.virtual_hosts[0]) is not None
    assert memo.hosts.get(changed_host) is not None


def test_an_equal_but_new_piece_is_translated_again_not_taken_for_the_old_one() -> None:
    memo = TranslateMemo()
    graph = _two_hosts_graph()
    translate(graph, None, memo)
    copy = _two_hosts_graph()  # equal content, new objects
    assert memo.hosts.get(copy.listeners[0].virtual_hosts[0]) is None
    assert wire(translate(copy, None, memo)) == wire(translate(graph))


@pytest.mark.parametrize(
    "other",
    [
        TranslateOptions(stat_prefix="edge_"),
        TranslateOptions(matcher_tree_min_routes=1),
        TranslateOptions(num_trusted_hops=2),
    ],
)
def test_other_options_drop_the_memo(other: TranslateOptions) -> None:
    memo = TranslateMemo()
    graph = _two_hosts_graph()
    before = translate(graph, None, memo)
    after = translate(graph, other, memo)
    assert wire(after) == wire(translate(graph, other))
    assert wire(after) != wire(before)
    assert not any(a is b for a, b in zip(before.listeners, after.listeners, strict=True))
    assert not any(a is b for a, b in zip(before.routes, after.routes, strict=True))


def test_the_endpoints_fast_path_feeds_the_memo_consistently() -> None:
    memo = TranslateMemo()
    graph = _two_hosts_graph()
    resources = translate(graph, None, memo)
    (old,) = graph.clusters
    new = dataclasses.replace(old, endpoints=(Endpoint("10.0.0.2", 80),))
    updated = dataclasses.replace(graph, clusters=(new,))
    fast = retranslate_clusters(resources, updated, [new], None, memo)
    full = translate(updated, None, memo)
    assert wire(fast) == wire(full) == wire(translate(updated))
    # The next translation reuses what the fast path translated, and everything else.
    assert full.clusters[0] is fast.clusters[0]
    assert full.endpoints[0] is fast.endpoints[0]
    assert full.routes[0] is resources.routes[0]


def test_a_memo_made_under_other_options_is_left_alone_by_the_fast_path() -> None:
    memo = TranslateMemo()
    graph = _two_hosts_graph()
    resources = translate(graph, TranslateOptions(stat_prefix="edge_"), memo)
    (old,) = graph.clusters
    new = dataclasses.replace(old, endpoints=(Endpoint("10.0.0.2", 80),))
    updated = dataclasses.replace(graph, clusters=(new,))
    fast = retranslate_clusters(resources, updated, [new], TranslateOptions(), memo)
    assert memo.clusters.get(new) is None
    assert fast.endpoints[0].endpoints[0].lb_endpoints[
        0
    ].endpoint.address.socket_address.address == ("10.0.0.2")


def test_a_tls_host_keeps_its_chain_and_table_while_another_host_changes() -> None:
    memo = TranslateMemo()
    tls = TLSTermination(secret=CERT.name)
    a, b = vhost("a.example.com", tls), vhost("b.example.com", tls)
    first = translate(tls_graph((a, b)), None, memo)
    changed = dataclasses.replace(b, routes=(*b.routes, *b.routes))
    after = translate(tls_graph((a, changed)), None, memo)
    assert wire(after) == wire(translate(tls_graph((a, changed))))
    tables = {c.name: c for c in first.routes}
    tables_after = {c.name: c for c in after.routes}
    assert tables_after["https/a.example.com"] is tables["https/a.example.com"]
    assert tables_after["https/b.example.com"] is not tables["https/b.example.com"]
    # A new host elsewhere changes which names a wildcard chain answers 421: not kept then.
    wildcard = vhost("*.example.com", tls)
    first = translate(tls_graph((a, wildcard)), None, memo)
    after = translate(tls_graph((a, wildcard, vhost("c.example.com", tls))), None, memo)
    assert wire(after) == wire(translate(tls_graph((a, wildcard, vhost("c.example.com", tls)))))
    old = {c.name: c for c in first.routes}["https/*.example.com"]
    assert {c.name: c for c in after.routes}["https/*.example.com"] is not old


def test_a_table_per_host_is_kept_while_its_host_is() -> None:
    memo = TranslateMemo()
    a, b = _host("a.example.com", ("/a",)), _host("b.example.com", ("/b",))
    memo.begin(TranslateOptions())
    first = host_route_configuration("a", a, 0, memo)
    assert host_route_configuration("a", a, 0, memo) is first
    assert host_route_configuration("other", a, 0, memo) is not first
    memo.begin(TranslateOptions())
    changed = dataclasses.replace(a, routes=b.routes)
    table = host_route_configuration("a", changed, 0, memo)
    assert table.SerializeToString(deterministic=True) == translate_route_configuration(
        "a", (changed,), 0
    ).SerializeToString(deterministic=True)
    assert [r.match.prefix for r in table.virtual_hosts[0].routes] == ["/b"]


SCOPED = TranslateOptions(scoped_routes_min_hosts=1)


def test_a_carried_memo_gives_the_bytes_of_a_fresh_translation_with_scoped_routes() -> None:
    memo = TranslateMemo()
    sequence = graphs()
    for graph in [*sequence, *reversed(sequence)]:
        assert wire(translate(graph, SCOPED, memo)) == wire(translate(graph, SCOPED))


def test_a_scoped_host_keeps_its_table_and_scope_while_another_host_changes() -> None:
    memo = TranslateMemo()
    graph = _two_hosts_graph()
    first = translate(graph, SCOPED, memo)
    assert len(first.scoped_routes) == 2
    changed, _ = _with_b_changed(graph)
    after = translate(changed, SCOPED, memo)
    assert wire(after) == wire(translate(changed, SCOPED))
    # a.example.com is untouched: its table and scope are the very same messages.
    assert after.routes[0] is first.routes[0]
    assert after.scoped_routes[0] is first.scoped_routes[0]
    assert after.routes[1] is not first.routes[1]
    assert [r.match.prefix for r in after.routes[1].virtual_hosts[0].routes] == ["/b", "/c"]

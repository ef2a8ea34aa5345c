"""`translate()` is total: a piece that cannot be translated costs only itself, never the whole
configuration. These graphs bypass `enforce_envoy_limits` on purpose."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.envoy.translate import translate
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Endpoint,
    Forward,
    HeaderMatch,
    HTTPHealthCheck,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    StringMatchKind,
    TLSSecret,
    TLSTermination,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

A, B = "default/a/80/aaaa", "default/b/80/bbbb"
CLUSTERS = (
    Cluster(A, "default", "a", 80, endpoints=(Endpoint("10.0.0.1", 8080),)),
    Cluster(B, "default", "b", 80, endpoints=(Endpoint("10.0.0.2", 8080),)),
)


def ref(name: str) -> ObjectRef:
    return ObjectRef("projectcontour.io", "HTTPProxy", "default", name)


def route(owner: str, path: str, action: RouteAction, match: RouteMatch | None = None) -> Route:
    return Route(
        match or RouteMatch(PathMatch(PathMatchKind.PREFIX, path)),
        action,
        RouteSource(ref(owner), "spec.routes[0]"),
    )


def http(*vhosts: VirtualHost, clusters: tuple[Cluster, ...] = CLUSTERS) -> RoutingGraph:
    lst = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts)
    return RoutingGraph(listeners=(lst,), clusters=clusters)


GOOD = VirtualHost(
    "good.example.com",
    "good.example.com",
    (route("good", "/", Forward((WeightedCluster(A, 1),))),),
    ref("good"),
)


def vhosts_by_name(graph: RoutingGraph) -> dict[str, Any]:
    [config] = translate(graph).routes
    return {vh.name: vh for vh in config.virtual_hosts}


def test_a_route_protobuf_refuses_answers_500_with_its_match_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heavy = Forward((WeightedCluster(A, 5_000_000_000), WeightedCluster(B, 1)))
    vh = VirtualHost(
        "mixed.example.com",
        "mixed.example.com",
        (route("total-heavy", "/heavy", heavy), route("total-fine", "/", DirectResponse(204))),
        ref("total-heavy"),
    )
    graph = http(GOOD, vh)
    with caplog.at_level(logging.ERROR, logger="turnout.envoy.translate.routes"):
        first = vhosts_by_name(graph)
        second = vhosts_by_name(graph)
    assert first == second
    heavy_route, fine = first["mixed.example.com"].routes
    assert heavy_route.match.prefix == "/heavy"
    assert heavy_route.direct_response.status == 500
    assert heavy_route.name == "HTTPProxy/default/total-heavy/spec.routes[0]"
    assert fine.direct_response.status == 204
    assert first["good.example.com"].routes[0].route.cluster == A
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "HTTPProxy default/total-heavy spec.routes[0]" in errors[0].getMessage()


def test_a_route_whose_match_protobuf_refuses_is_left_out() -> None:
    unencodable = RouteMatch(headers=(HeaderMatch("x-a", StringMatchKind.EXACT, "\ud800"),))
    vh = VirtualHost(
        "mixed.example.com",
        "mixed.example.com",
        (
            route("total-match", "/", DirectResponse(200), unencodable),
            route("total-next", "/", DirectResponse(204)),
        ),
        ref("total-match"),
    )
    routes = vhosts_by_name(http(GOOD, vh))["mixed.example.com"].routes
    assert [r.direct_response.status for r in routes] == [204]


def test_a_virtual_host_protobuf_refuses_is_left_out() -> None:
    broken = VirtualHost("\ud800", "broken.example.com", (), ref("total-vhost"))
    assert set(vhosts_by_name(http(GOOD, broken))) == {"good.example.com"}


def test_a_cluster_protobuf_refuses_falls_back_to_a_bare_cluster() -> None:
    odd = Cluster(
        B, "default", "b", 80, health_check=HTTPHealthCheck("/h", interval_s=float("nan"))
    )
    resources = translate(http(GOOD, clusters=(CLUSTERS[0], odd)))
    by_name = {c.name: c for c in resources.clusters}
    assert set(by_name) == {A, B}
    assert not by_name[B].health_checks
    assert len(by_name[A].load_assignment.endpoints) == 0  # EDS: endpoints come separately
    assert {e.cluster_name for e in resources.endpoints} == {A, B}


def test_an_https_host_whose_filter_chain_protobuf_refuses_leaves_the_others() -> None:
    secret = TLSSecret("default/cert/1", "default", "cert", "chain", "key")
    ok = VirtualHost(
        "ok.example.com",
        "ok.example.com",
        GOOD.routes,
        ref("good"),
        tls=TLSTermination(secret.name),
    )
    broken = VirtualHost(
        "broken.example.com", "broken.example.com", GOOD.routes, ref("total-tls"),
        tls=TLSTermination("\udc00"),
    )  # fmt: skip
    lst = Listener("ingress_https", "0.0.0.0", 8443, ListenerProtocol.HTTPS, (broken, ok))
    resources = translate(RoutingGraph(listeners=(lst,), clusters=CLUSTERS, secrets=(secret,)))
    [listener] = resources.listeners
    assert [list(c.filter_chain_match.server_names) for c in listener.filter_chains] == [
        ["ok.example.com"]
    ]


junk = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None), max_size=6),
    st.none(),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(
    weight=junk,
    status=junk,
    body=junk,
    path=junk,
    header_value=junk,
    hostname=junk,
    port=junk,
    interval=junk,
)
def test_translate_never_raises_whatever_a_route_or_cluster_holds(
    weight: Any,
    status: Any,
    body: Any,
    path: Any,
    header_value: Any,
    hostname: Any,
    port: Any,
    interval: Any,
) -> None:
    routes = (
        route("j1", "/w", Forward((WeightedCluster(A, weight), WeightedCluster(B, 1)))),
        route("j2", "/d", DirectResponse(status, body)),
        route("j3", "/r", Redirect(hostname=hostname, port=port, path=path)),
        route(
            "j4", "/h", DirectResponse(200),
            RouteMatch(PathMatch(PathMatchKind.EXACT, path),
                       (HeaderMatch("x-a", StringMatchKind.PREFIX, header_value),)),
        ),
    )  # fmt: skip
    vh = VirtualHost("junk", hostname if isinstance(hostname, str) else "junk", routes, ref("j"))
    odd = Cluster(B, "default", "b", 80, endpoints=(Endpoint("10.0.0.2", port),),
                  health_check=HTTPHealthCheck("/h", interval_s=interval))  # fmt: skip
    resources = translate(http(GOOD, vh, clusters=(CLUSTERS[0], odd)))
    [config] = resources.routes
    good = next(v for v in config.virtual_hosts if v.name == "good.example.com")
    assert good.routes[0].route.cluster == A
    assert {c.name for c in resources.clusters} == {A, B}

"""TCPRoute and TLSRoute rules (`dialects/gatewayapi/streams.py`) and the translation of the
listeners they end up on: a plain TCP listener and a TLS listener on any port."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2

from tests import builders
from tests.builders import kube_object
from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.dialects.gatewayapi.streams import CompiledStream, compile_tcproute, compile_tlsroute
from turnout.envoy.translate import TranslateOptions, translate, translate_listener
from turnout.graph.dialect import CompileContext, Ownership
from turnout.graph.model import (
    INVALID_BACKEND,
    Cluster,
    Listener,
    ListenerProtocol,
    RoutingGraph,
    TCPProxy,
    WeightedCluster,
)
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.graph.validate import enforce_envoy_limits
from turnout.objects import KubeObject, ObjectRef
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"


def obj(api: str, kind: str, name: str, namespace: str = "apps", **body: Any) -> KubeObject:
    return kube_object(api, kind, name, namespace, **body)


def service(name: str, namespace: str = "apps", port: int = 9000) -> KubeObject:
    return builders.service(name, namespace, port)


def tcproute(rules: Any) -> KubeObject:
    return obj(f"{GROUP}/v1alpha2", "TCPRoute", "t", spec={"rules": rules})


def tlsroute(rules: Any) -> KubeObject:
    return obj(
        f"{GROUP}/v1", "TLSRoute", "t", spec={"hostnames": ["a.example.com"], "rules": rules}
    )


def compile_with(route: KubeObject, *objects: KubeObject) -> CompiledStream:
    snapshot = Snapshot.of([route, *objects])
    ctx = CompileContext(
        CompileOptions(), Ownership(), BackendResolver(snapshot), SecretResolver(snapshot)
    )
    grants = ReferenceGrants.from_snapshot(snapshot)
    if route.kind == "TLSRoute":
        return compile_tlsroute(route, ctx, grants)
    return compile_tcproute(route, ctx, grants)


def reasons(result: CompiledStream) -> list[tuple[str, str]]:
    return [(p.condition, p.reason) for p in result.problems]


@pytest.mark.parametrize("make", [tcproute, tlsroute])
def test_weighted_backends_become_one_split(make: Any) -> None:
    rules = [
        {"backendRefs": [{"name": "a", "port": 9000, "weight": 3}, {"name": "b", "port": 9000}]}
    ]
    result = compile_with(make(rules), service("a"), service("b"))
    assert result.problems == ()
    assert [(c.cluster.split("/")[1], c.weight) for c in result.clusters] == [("a", 3), ("b", 1)]
    assert all(
        c.cluster.startswith(f"apps/{n}/9000/") for c, n in zip(result.clusters, "ab", strict=True)
    )


def test_invalid_backends_keep_their_share_as_rejections() -> None:
    rules = [
        {
            "backendRefs": [
                {"name": "a", "port": 9000},
                {"name": "missing", "port": 9000, "weight": 2},
                {"kind": "Pod", "name": "p", "port": 9000},
                {"name": "a", "namespace": "other", "port": 9000},
            ]
        }
    ]
    result = compile_with(tcproute(rules), service("a"), service("a", namespace="other"))
    assert [c.weight for c in result.clusters] == [1, 2, 1, 1]
    assert [c.cluster for c in result.clusters[1:]] == [INVALID_BACKEND] * 3
    assert reasons(result) == [
        ("ResolvedRefs", "BackendNotFound"),
        ("ResolvedRefs", "InvalidKind"),
        ("ResolvedRefs", "RefNotPermitted"),
    ]
    assert result.problems[0].message.startswith("spec.rules[0].backendRefs[1]")


def test_reference_grant_for_tcproutes() -> None:
    grant = obj(
        f"{GROUP}/v1beta1",
        "ReferenceGrant",
        "g",
        "other",
        spec={
            "from": [{"group": GROUP, "kind": "TCPRoute", "namespace": "apps"}],
            "to": [{"group": "", "kind": "Service"}],
        },
    )
    rules = [{"backendRefs": [{"name": "a", "namespace": "other", "port": 9000}]}]
    result = compile_with(tcproute(rules), service("a", namespace="other"), grant)
    assert result.problems == ()
    assert result.clusters[0].cluster.startswith("other/a/9000/")


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        (None, "spec.rules"),
        ([], "spec.rules"),
        ("x", "spec.rules"),
        ([{}], "spec.rules[0].backendRefs"),
        ([{"backendRefs": []}], "spec.rules[0].backendRefs"),
        (["x"], "spec.rules[0].backendRefs"),
    ],
)
def test_a_route_without_backends_is_invalid(rules: Any, field: str) -> None:
    result = compile_with(tcproute(rules))
    assert not result.accepted
    assert result.clusters == (WeightedCluster(INVALID_BACKEND, 1),)
    assert reasons(result) == [("Accepted", "UnsupportedValue")]
    assert result.problems[0].message.startswith(field)


@pytest.mark.parametrize(
    ("ref", "field"),
    [
        ({"name": "a", "port": 9000, "weight": -3}, "spec.rules[0].backendRefs[1].weight"),
        ({"name": "a", "port": 9000, "weight": "2"}, "spec.rules[0].backendRefs[1].weight"),
        ({"name": "a"}, "spec.rules[0].backendRefs[1].port"),
    ],
)
def test_a_value_the_crd_refuses_makes_the_route_invalid(ref: Any, field: str) -> None:
    rules = [{"backendRefs": [{"name": "a", "port": 9000}, ref]}]
    result = compile_with(tcproute(rules), service("a"))
    assert not result.accepted
    assert reasons(result) == [("Accepted", "UnsupportedValue")]
    assert result.problems[0].message.startswith(field)


def test_more_than_sixteen_backend_refs_make_the_route_invalid() -> None:
    rules = [{"backendRefs": [{"name": "a", "port": 9000}] * 17}]
    result = compile_with(tcproute(rules), service("a"))
    assert not result.accepted
    assert reasons(result) == [("Accepted", "UnsupportedValue")]
    assert "17 entries" in result.problems[0].message


def test_unresolved_refs_leave_the_route_accepted() -> None:
    rules = [{"backendRefs": [{"name": "a", "port": 9000}, {"name": "missing", "port": 9000}]}]
    result = compile_with(tcproute(rules), service("a"))
    assert result.accepted
    assert reasons(result) == [("ResolvedRefs", "BackendNotFound")]


def test_old_construction_still_means_accepted() -> None:
    assert CompiledStream((), ()).accepted


def test_all_zero_weights_reject_every_connection() -> None:
    rules = [{"backendRefs": [{"name": "a", "port": 9000, "weight": 0}]}]
    result = compile_with(tlsroute(rules), service("a"))
    assert result.clusters == (WeightedCluster(INVALID_BACKEND, 1),)
    assert result.problems == ()
    rules = [
        {"backendRefs": [{"name": "a", "port": 9000, "weight": 0}, {"name": "a", "port": 9000}]}
    ]
    result = compile_with(tlsroute(rules), service("a"))
    assert [c.weight for c in result.clusters] == [0, 1]


def test_more_than_one_rule_makes_the_route_invalid() -> None:
    # The CRD has `MaxItems=1`: serving the first rule would hide the others silently.
    rules = [
        {"backendRefs": [{"name": "a", "port": 9000}]},
        {"backendRefs": [{"name": "b", "port": 9000}]},
    ]
    result = compile_with(tlsroute(rules), service("a"), service("b"))
    assert not result.accepted
    assert reasons(result) == [("Accepted", "UnsupportedValue")]
    assert result.problems[0].message == "spec.rules: 2 rules; a TLSRoute has exactly one rule"


def test_tcp_backends_are_tcp_clusters_whatever_the_app_protocol() -> None:
    svc = obj("v1", "Service", "db", spec={"ports": [{"port": 5432, "appProtocol": "postgresql"}]})
    snapshot = Snapshot.of([svc])
    backends = BackendResolver(snapshot)
    ctx = CompileContext(CompileOptions(), Ownership(), backends, SecretResolver(snapshot))
    route = tcproute([{"backendRefs": [{"name": "db", "port": 5432}]}])
    result = compile_tcproute(route, ctx, ReferenceGrants.from_snapshot(snapshot))
    assert result.problems == ()
    (cluster,) = backends.clusters()
    assert cluster.protocol.value == "tcp" and cluster.name == result.clusters[0].cluster


# --- translation of the listeners the Gateway dialect builds from them ---------------------------

OWNER = ObjectRef(GROUP, "TCPRoute", "apps", "t")
A = Cluster("apps/a/9000/x", "apps", "a", 9000)
B = Cluster("apps/b/9000/x", "apps", "b", 9000)


def _tcp_config(chain: Any) -> Any:
    (f,) = chain.filters
    config = tcp_proxy_pb2.TcpProxy()
    f.typed_config.Unpack(config)
    return config


def test_tcp_listener_on_any_port_proxies_every_connection() -> None:
    proxy = TCPProxy(
        "tcp", "", (WeightedCluster(A.name, 1), WeightedCluster(INVALID_BACKEND, 2)), OWNER
    )
    listener = Listener(
        "gateway_9100", "127.0.0.1", 9100, ListenerProtocol.TCP, tcp_proxies=(proxy,)
    )
    out = translate_listener(listener, TranslateOptions())
    assert out is not None and out.route_configurations == ()
    assert out.listener.address.socket_address.port_value == 9100
    assert not out.listener.listener_filters  # no TLS inspection
    (chain,) = out.listener.filter_chains
    assert not chain.HasField("filter_chain_match")
    split = {c.name: c.weight for c in _tcp_config(chain).weighted_clusters.clusters}
    assert split == {A.name: 1, INVALID_BACKEND: 2}


def test_tcp_listener_without_a_usable_proxy_is_not_opened() -> None:
    zero = TCPProxy("tcp", "", (WeightedCluster(A.name, 0),), OWNER)
    for proxies in ((), (zero,)):
        listener = Listener(
            "gateway_9100", "127.0.0.1", 9100, ListenerProtocol.TCP, tcp_proxies=proxies
        )
        assert translate_listener(listener, TranslateOptions()) is None


def test_tls_listener_on_any_port_routes_by_sni_with_passthrough() -> None:
    proxies = (
        TCPProxy("a.example.com", "a.example.com", (WeightedCluster(A.name, 1),), OWNER),
        TCPProxy("*.example.org", "*.example.org", (WeightedCluster(B.name, 1),), OWNER),
        TCPProxy(
            "bad.example.com", "bad.example.com", (WeightedCluster(INVALID_BACKEND, 1),), OWNER
        ),
    )
    listener = Listener(
        "gateway_9443", "127.0.0.1", 9443, ListenerProtocol.TLS_PASSTHROUGH, tcp_proxies=proxies
    )
    graph = RoutingGraph(listeners=(listener,), clusters=(A, B))
    checked, problems = enforce_envoy_limits(graph)
    assert problems == () and checked == graph
    resources = translate(checked)
    (out,) = resources.listeners
    assert out.address.socket_address.port_value == 9443
    assert [f.name for f in out.listener_filters] == ["envoy.filters.listener.tls_inspector"]
    chains = {tuple(c.filter_chain_match.server_names): c for c in out.filter_chains}
    assert set(chains) == {("a.example.com",), ("*.example.org",), ("bad.example.com",)}
    for chain in chains.values():
        assert not chain.HasField("transport_socket")  # passthrough: the backend's TLS
    assert _tcp_config(chains[("bad.example.com",)]).cluster == INVALID_BACKEND
    assert {c.name for c in resources.clusters} == {A.name, B.name}


# --- through the Gateway dialect: status and which route serves the listener ----------------------

_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turnout}
spec: {controllerName: turnout.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: app}
spec:
  gatewayClassName: turnout
  listeners: [{name: tcp, port: 9000, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: app}
spec: {ports: [{port: 5432}]}
"""


def _tcproute(name: str, created: str, rules: str) -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: {name}, namespace: app, creationTimestamp: "{created}"}}
spec:
  parentRefs: [{{name: gw}}]
{rules}
"""


_GOOD_RULES = "  rules: [{backendRefs: [{name: db, port: 5432}]}]"


def _gateway_compile(text: str) -> Any:
    from turnout.app import compile_snapshot
    from turnout.sources.parse import parse_text

    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects), CompileOptions())


def _route_accepted(result: Any, name: str) -> dict[str, Any]:
    (status,) = [s for s in result.statuses if s.ref.kind == "TCPRoute" and s.ref.name == name]
    (parent,) = status.body["parents"]
    (accepted,) = [c for c in parent["conditions"] if c["type"] == "Accepted"]
    return dict(accepted)


def _served_by(result: Any) -> list[tuple[str, str, list[str]]]:
    return [
        (lst.name, p.owner.name, [c.cluster.split("/")[1] for c in p.clusters])
        for lst in result.graph.listeners
        for p in lst.tcp_proxies
    ]


def _attached(result: Any) -> int:
    (gw,) = [s for s in result.statuses if s.ref.kind == "Gateway"]
    (listener,) = gw.body["listeners"]
    return int(listener["attachedRoutes"])


@pytest.mark.parametrize(
    "broken_rules",
    [
        "",  # no rules
        "  rules: [{}]",  # no backendRefs
        "  rules: [{backendRefs: [{name: db, port: 5432, weight: -3}, {name: db, port: 5432}]}]",
        "  rules: [{backendRefs: [{name: db}]}]",  # no port
        "  rules: [{backendRefs: [{name: db, port: 5432}]}, {backendRefs: [{name: db}]}]",
    ],
)
def test_an_older_invalid_tcproute_does_not_take_the_listener(broken_rules: str) -> None:
    text = (
        _GATEWAY
        + _tcproute("good", "2024-02-01T00:00:00Z", _GOOD_RULES)
        + _tcproute("broken", "2024-01-01T00:00:00Z", broken_rules)
    )
    result = _gateway_compile(text)
    broken = _route_accepted(result, "broken")
    assert (broken["status"], broken["reason"]) == ("False", "UnsupportedValue")
    assert broken["message"].startswith("spec.rules")
    good = _route_accepted(result, "good")
    assert (good["status"], good["reason"], good["message"]) == (
        "True",
        "Accepted",
        "Route is accepted",
    )
    assert _served_by(result) == [("gateway_9000", "good", ["db"])]
    assert _attached(result) == 1


def test_a_newer_tcproute_on_a_served_listener_says_it_gets_no_connections() -> None:
    text = (
        _GATEWAY
        + _tcproute("newer", "2024-02-01T00:00:00Z", _GOOD_RULES)
        + _tcproute("older", "2024-01-01T00:00:00Z", _GOOD_RULES)
    )
    result = _gateway_compile(text)
    # TCPRouteMultipleRoutesAttachment: both Accepted True (reason Accepted), both counted in
    # attachedRoutes, only the oldest bound; the newer one's message says so.
    older, newer = _route_accepted(result, "older"), _route_accepted(result, "newer")
    assert (older["status"], older["reason"], older["message"]) == (
        "True",
        "Accepted",
        "Route is accepted",
    )
    assert (newer["status"], newer["reason"]) == ("True", "Accepted")
    assert newer["message"] == (
        "Route is accepted; listener 'tcp' of Gateway app/gw: the older TCPRoute app/older "
        "serves its connections; this route receives none of them"
    )
    assert _served_by(result) == [("gateway_9000", "older", ["db"])]
    assert _attached(result) == 2

"""Gateway API backendRefs (`dialects/gatewayapi/backend_refs.py`): every ResolvedRefs reason,
weights, upstream protocols from appProtocol, ExternalName Services; and the invalid backend's
share (`INVALID_BACKEND`) through the graph's safety net, the evaluator and the translator."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.route.v3 import route_components_pb2 as rc
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from tests.builders import kube_object
from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.backend_refs import ResolvedBackendRef, resolve_backend_ref
from turnout.dialects.gatewayapi.conditions import RouteProblem
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.envoy.translate import translate
from turnout.envoy.translate.routes import translate_route
from turnout.graph.dialect import CompileContext, Ownership
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    INVALID_BACKEND,
    Cluster,
    Endpoint,
    Forward,
    Listener,
    ListenerProtocol,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    UpstreamProtocol,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.graph.validate import enforce_envoy_limits
from turnout.objects import KubeObject, ObjectRef
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"
INTERNAL_SERVER_ERROR = rc.RouteAction.INTERNAL_SERVER_ERROR


def obj(api: str, kind: str, namespace: str, name: str, **body: Any) -> KubeObject:
    return kube_object(api, kind, name, namespace, **body)


def service(name: str, namespace: str = "apps", port: int = 80, **port_fields: Any) -> KubeObject:
    return builders.service(name, namespace, port, **port_fields)


ROUTE = obj(f"{GROUP}/v1", "HTTPRoute", "apps", "r", spec={})


def resolve(
    ref: Any, *objects: KubeObject, app: str = "http", route: KubeObject = ROUTE, **options: Any
) -> ResolvedBackendRef:
    snapshot = Snapshot.of(objects)
    opts = CompileOptions(**options)
    ctx = CompileContext(
        options=opts,
        ownership=Ownership(),
        backends=BackendResolver(
            snapshot, enable_external_name_service=opts.enable_external_name_service
        ),
        secrets=SecretResolver(snapshot),
    )
    return resolve_backend_ref(
        route,
        ref,
        "spec.rules[0].backendRefs[0]",
        ctx,
        ReferenceGrants.from_snapshot(snapshot),
        app=app,
    )


def problem(result: ResolvedBackendRef) -> tuple[str, str]:
    assert result.cluster is None
    assert isinstance(result.problem, RouteProblem)
    assert result.problem.message.startswith("spec.rules[0].backendRefs[0]")
    return result.problem.condition, result.problem.reason


def test_a_service_port_resolves_to_its_cluster() -> None:
    result = resolve({"name": "web", "port": 80}, service("web"))
    assert result.problem is None and result.weight == 1
    assert result.cluster is not None and result.cluster.startswith("apps/web/80/")
    assert result.weighted_cluster == WeightedCluster(result.cluster, 1)


@pytest.mark.parametrize(
    "ref",
    [
        {"group": "", "kind": "Service", "name": "web", "port": 80},
        {"group": "core", "kind": "Service", "name": "web", "port": 80},
        {"name": "web", "namespace": "apps", "port": 80, "weight": None},
    ],
)
def test_defaults_and_spellings_of_a_core_service(ref: dict[str, Any]) -> None:
    result = resolve(ref, service("web"))
    assert result.problem is None and result.cluster is not None


@pytest.mark.parametrize(
    "ref",
    [
        {"group": "example.com", "kind": "Service", "name": "web", "port": 80},
        {"kind": "ConfigMap", "name": "web", "port": 80},
        {"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80},
        {"kind": 5, "name": "web", "port": 80},
    ],
)
def test_other_kinds_are_invalid_kind(ref: dict[str, Any]) -> None:
    assert problem(resolve(ref, service("web"))) == ("ResolvedRefs", "InvalidKind")


def test_cross_namespace_needs_a_reference_grant() -> None:
    backend = service("web", namespace="backends")
    ref = {"name": "web", "namespace": "backends", "port": 80}
    assert problem(resolve(ref, backend)) == ("ResolvedRefs", "RefNotPermitted")
    grant = obj(
        f"{GROUP}/v1beta1",
        "ReferenceGrant",
        "backends",
        "g",
        spec={
            "from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "apps"}],
            "to": [{"group": "", "kind": "Service"}],
        },
    )
    result = resolve(ref, backend, grant)
    assert result.problem is None and result.cluster is not None
    assert result.cluster.startswith("backends/web/80/")
    # The grant names HTTPRoutes: a TCPRoute in the same namespace is still refused.
    tcp_route = obj(f"{GROUP}/v1alpha2", "TCPRoute", "apps", "t", spec={})
    assert problem(resolve(ref, backend, grant, app="tcp", route=tcp_route)) == (
        "ResolvedRefs",
        "RefNotPermitted",
    )


def test_ref_not_permitted_wins_over_not_found() -> None:
    # A route must not learn whether a Service exists in a namespace it may not reference.
    ref = {"name": "missing", "namespace": "backends", "port": 80}
    assert problem(resolve(ref)) == ("ResolvedRefs", "RefNotPermitted")


@pytest.mark.parametrize(
    "ref",
    [
        {"name": "missing", "port": 80},
        {"name": "web", "port": 81},
        {"port": 80},
        {"name": 7, "port": 80},
        {"name": "web", "namespace": 7, "port": 80},
        "web",
    ],
)
def test_missing_service_or_port_is_backend_not_found(ref: Any) -> None:
    assert problem(resolve(ref, service("web"))) == ("ResolvedRefs", "BackendNotFound")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"name": "web"}, "port: Must have port for Service reference"),
        ({"name": "web", "port": None}, "port: Must have port for Service reference"),
        ({"name": "web", "port": "http"}, "port: 'http' is not a port number"),
        ({"name": "web", "port": 0}, "port: 0 is not a port number"),
        ({"name": "web", "port": 65536}, "port: 65536 is not a port number"),
        ({"name": "web", "port": True}, "port: True is not a port number"),
    ],
)
def test_a_port_the_crd_refuses_is_unsupported_value(ref: dict[str, Any], message: str) -> None:
    result = resolve(ref, service("web"))
    assert problem(result) == ("Accepted", "UnsupportedValue")
    assert result.problem is not None
    assert result.problem.message.startswith(f"spec.rules[0].backendRefs[0].{message}")


def test_weight_problems_name_the_field() -> None:
    result = resolve({"name": "web", "port": 80, "weight": -3}, service("web"))
    assert result.problem is not None
    assert result.problem.message == (
        "spec.rules[0].backendRefs[0].weight: -3 is not between 0 and 1000000"
    )


def test_weights() -> None:
    assert resolve({"name": "web", "port": 80, "weight": 0}, service("web")).weight == 0
    heavy = resolve({"name": "web", "port": 80, "weight": 1_000_000}, service("web"))
    assert heavy.weight == 1_000_000 and heavy.problem is None
    for bad in (-1, 1_000_001, "3", True, 1.5):
        result = resolve({"name": "web", "port": 80, "weight": bad}, service("web"))
        assert problem(result) == ("Accepted", "UnsupportedValue")
        assert result.weight == 1


def test_invalid_refs_keep_their_weight() -> None:
    result = resolve({"name": "missing", "port": 80, "weight": 3})
    assert result.weight == 3
    assert result.weighted_cluster == WeightedCluster(INVALID_BACKEND, 3)


def _find(result: ResolvedBackendRef, snapshot: Snapshot) -> Cluster:
    for protocol in UpstreamProtocol:
        resolver = BackendResolver(snapshot)
        for svc in snapshot.kind("", "Service"):
            c = resolver.service(svc.namespace, svc.name, 80, protocol)
            if isinstance(c, Cluster) and c.name == result.cluster:
                return c
    raise AssertionError(f"no cluster {result.cluster}")


@pytest.mark.parametrize(
    ("app", "app_protocol", "expected", "websockets"),
    [
        ("http", None, UpstreamProtocol.HTTP, False),
        ("http", "http", UpstreamProtocol.HTTP, False),
        ("http", "HTTP", UpstreamProtocol.HTTP, False),  # IANA names are case-insensitive
        ("http", "kubernetes.io/h2c", UpstreamProtocol.H2C, False),
        ("http", "kubernetes.io/ws", UpstreamProtocol.HTTP, True),
        ("grpc", None, UpstreamProtocol.H2C, False),
        ("grpc", "kubernetes.io/h2c", UpstreamProtocol.H2C, False),
        ("grpc", "gRPC", UpstreamProtocol.H2C, False),
        ("tcp", None, UpstreamProtocol.TCP, False),
        ("tcp", "mysql", UpstreamProtocol.TCP, False),
        ("tls", "kubernetes.io/wss", UpstreamProtocol.TCP, False),
    ],
)
def test_upstream_protocol_from_app_protocol(
    app: str, app_protocol: str | None, expected: UpstreamProtocol, websockets: bool
) -> None:
    fields: dict[str, Any] = {"appProtocol": app_protocol} if app_protocol else {}
    svc = service("web", **fields)
    result = resolve({"name": "web", "port": 80}, svc, app=app)
    assert result.problem is None
    assert _find(result, Snapshot.of([svc])).protocol is expected
    assert result.websockets is websockets


@pytest.mark.parametrize(
    ("app", "app_protocol"),
    [
        ("http", "mysql"),
        ("http", "example.com/custom"),
        ("http", "https"),  # TLS needs a BackendTLSPolicy
        ("http", "HTTPS"),
        ("http", "Kubernetes.io/h2c"),  # prefixed names compare as written
        ("http", "kubernetes.io/wss"),
        ("grpc", "http"),
        ("grpc", "kubernetes.io/ws"),
    ],
)
def test_unsupported_app_protocols(app: str, app_protocol: str) -> None:
    result = resolve({"name": "web", "port": 80}, service("web", appProtocol=app_protocol), app=app)
    assert problem(result) == ("ResolvedRefs", "UnsupportedProtocol")


@pytest.mark.parametrize("app", ["http", "grpc", "tcp", "tls"])
def test_udp_ports_are_unsupported_for_every_route_kind(app: str) -> None:
    result = resolve({"name": "dns", "port": 80}, service("dns", protocol="UDP"), app=app)
    assert problem(result) == ("ResolvedRefs", "UnsupportedProtocol")


def external(name: str = "ext", target: str = "example.com") -> KubeObject:
    return obj(
        "v1",
        "Service",
        "apps",
        name,
        spec={"type": "ExternalName", "externalName": target, "ports": [{"port": 80}]},
    )


def test_external_name_services_follow_the_installation_setting() -> None:
    ref = {"name": "ext", "port": 80}
    refused = resolve(ref, external())
    assert problem(refused) == ("ResolvedRefs", "BackendNotFound")
    assert (
        refused.problem is not None and "--enable-external-name-service" in refused.problem.message
    )
    allowed = resolve(ref, external(), enable_external_name_service=True)
    assert allowed.problem is None and allowed.cluster is not None
    localhost = resolve(ref, external(target="localhost"), enable_external_name_service=True)
    assert problem(localhost) == ("ResolvedRefs", "BackendNotFound")


# --- the invalid backend's share, downstream of the dialect ----------------------------------


def _graph(*clusters: WeightedCluster) -> RoutingGraph:
    web = Cluster("apps/web/80/x", "apps", "web", 80, endpoints=(Endpoint("127.0.0.1", 8000),))
    route = Route(
        RouteMatch(),
        Forward(clusters),
        RouteSource(ObjectRef(GROUP, "HTTPRoute", "apps", "r"), "spec.rules[0]"),
    )
    vh = VirtualHost("a.example.com", "a.example.com", (route,), owner=route.source.object)
    listener = Listener("ingress_http", "127.0.0.1", 8080, ListenerProtocol.HTTP, (vh,))
    return RoutingGraph(listeners=(listener,), clusters=(web,))


def test_evaluator_answers_500_for_an_all_invalid_split_and_reports_the_share() -> None:
    request = make_request("a.example.com", "/")
    only = evaluate(_graph(WeightedCluster(INVALID_BACKEND, 1)), request)
    assert only.status == 500 and only.invalid_share == 1.0
    mixed = evaluate(
        _graph(
            WeightedCluster("apps/web/80/x", 2),
            WeightedCluster(INVALID_BACKEND, 1),
            WeightedCluster("apps/web/80/x", 0),
        ),
        request,
    )
    assert mixed.status == 200
    assert mixed.invalid_share == pytest.approx(1 / 3)
    zero = evaluate(
        _graph(WeightedCluster("apps/web/80/x", 1), WeightedCluster(INVALID_BACKEND, 0)), request
    )
    assert zero.invalid_share == 0.0 and zero.status == 200


def test_safety_net_keeps_routes_to_the_invalid_backend() -> None:
    graph = _graph(WeightedCluster("apps/web/80/x", 1), WeightedCluster(INVALID_BACKEND, 1))
    checked, problems = enforce_envoy_limits(graph)
    assert problems == ()
    assert checked.listeners[0].virtual_hosts[0].routes[0].action == Forward(
        (WeightedCluster("apps/web/80/x", 1), WeightedCluster(INVALID_BACKEND, 1))
    )
    # ... while a real cluster that is missing still makes the route answer 500 directly.
    broken = _graph(WeightedCluster("apps/gone/80/x", 1))
    _, problems = enforce_envoy_limits(broken)
    assert len(problems) == 1


def test_translator_sends_the_share_to_an_unknown_cluster_answered_500() -> None:
    graph = _graph(WeightedCluster("apps/web/80/x", 1), WeightedCluster(INVALID_BACKEND, 2))
    resources = translate(graph)
    (config,) = resources.routes
    assert config.HasField("validate_clusters") and not config.validate_clusters.value
    (route,) = config.virtual_hosts[0].routes
    split = {c.name: c.weight.value for c in route.route.weighted_clusters.clusters}
    assert split == {"apps/web/80/x": 1, INVALID_BACKEND: 2}
    assert route.route.cluster_not_found_response_code == INTERNAL_SERVER_ERROR
    assert INVALID_BACKEND not in {c.name for c in resources.clusters}

    source = RouteSource(ObjectRef(GROUP, "HTTPRoute", "apps", "r"), "spec.rules[1]")
    single = translate_route(
        Route(RouteMatch(), Forward((WeightedCluster(INVALID_BACKEND, 1),)), source)
    )
    assert single.route.cluster == INVALID_BACKEND
    assert single.route.cluster_not_found_response_code == INTERNAL_SERVER_ERROR


def test_route_tables_without_invalid_backends_are_unchanged() -> None:
    (config,) = translate(_graph(WeightedCluster("apps/web/80/x", 1))).routes
    assert not config.HasField("validate_clusters")
    (route,) = config.virtual_hosts[0].routes
    assert route.route.cluster_not_found_response_code == rc.RouteAction.SERVICE_UNAVAILABLE


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
_REF_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "group": st.sampled_from(["", "core", "example.com", None, 3]),
        "kind": st.sampled_from(["Service", "Pod", None, 3]),
        "name": st.sampled_from(["web", "", "missing", None, 3]),
        "namespace": st.sampled_from(["apps", "backends", "", None, 3]),
        "port": st.sampled_from([80, 81, 0, 70000, "80", None, True]),
        "weight": st.sampled_from([0, 1, 1_000_000, 1_000_001, -1, None, 1.5, "2"]),
    },
)


@settings(max_examples=200, deadline=None)
@given(ref=_REF_FIELDS | _JSON, app=st.sampled_from(["http", "grpc", "tcp", "tls"]))
def test_any_ref_resolves_or_names_its_problem(ref: Any, app: str) -> None:
    result = resolve(ref, service("web"), service("web", namespace="backends"), app=app)
    assert (result.cluster is None) == (result.problem is not None)
    if result.problem is not None:
        assert result.problem.message.startswith("spec.rules[0].backendRefs[0]")
        assert result.problem.condition in ("Accepted", "ResolvedRefs")
    assert 0 <= result.weight <= 1_000_000

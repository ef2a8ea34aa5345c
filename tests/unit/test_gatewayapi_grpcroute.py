"""GRPCRoute rules (`dialects/gatewayapi/grpcroute.py`): service/method matching as paths, header
matches, filters, h2c backends, and the problem reasons."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from envoy.config.route.v3 import route_components_pb2 as rc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import builders
from tests.builders import kube_object
from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.grpcroute import compile_grpcroute
from turnout.dialects.gatewayapi.httproute import CompiledRoute, ListenerInfo, order_routes
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.envoy.translate.routes import translate_route
from turnout.graph.dialect import CompileContext, Ownership
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    INVALID_BACKEND,
    DirectResponse,
    Forward,
    HeaderPolicy,
    HeaderValue,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    Route,
    RoutingGraph,
    UpstreamProtocol,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.objects import KubeObject
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"


def obj(api: str, kind: str, namespace: str, name: str, spec: Any) -> KubeObject:
    return kube_object(api, kind, name, namespace, spec=spec)


def service(name: str, app_protocol: str | None = None) -> KubeObject:
    return builders.service(name, "apps", app_protocol=app_protocol)


SERVICES = (
    service("grpc"),
    service("grpc2", "kubernetes.io/h2c"),
    service("mirror"),
    service("web", "http"),
)


def compile_rules(rules: Any) -> tuple[CompiledRoute, BackendResolver]:
    route = obj(
        f"{GROUP}/v1", "GRPCRoute", "apps", "g", {"parentRefs": [{"name": "gw"}], "rules": rules}
    )
    snapshot = Snapshot.of((*SERVICES, route))
    backends = BackendResolver(snapshot)
    ctx = CompileContext(CompileOptions(), Ownership(), backends, SecretResolver(snapshot))
    result = compile_grpcroute(
        route, ListenerInfo(80, "http"), ctx, ReferenceGrants.from_snapshot(snapshot)
    )
    return result, backends


def routes_of(rules: Any) -> tuple[Route, ...]:
    result, _ = compile_rules(rules)
    assert result.accepted, result.problems
    return order_routes(result.routes)


def rule(backend: str = "grpc", **match: Any) -> dict[str, Any]:
    return {"matches": [match], "backendRefs": [{"name": backend, "port": 80}]}


def call(routes: tuple[Route, ...], path: str, **headers: str) -> Route | None:
    vh = VirtualHost("example.com", "example.com", routes, routes[0].source.object)
    graph = RoutingGraph(listeners=(Listener("l", "127.0.0.1", 80, ListenerProtocol.HTTP, (vh,)),))
    request = make_request("example.com", path, method="POST", headers=headers, listener="l")
    return evaluate(graph, request).route


@pytest.mark.parametrize(
    ("method", "path", "hits", "misses"),
    [
        (
            {"service": "pkg.Echo", "method": "Say"},
            PathMatch(PathMatchKind.EXACT, "/pkg.Echo/Say"),
            ["/pkg.Echo/Say"],
            ["/pkg.Echo/SayMore", "/pkg.Echo/Other", "/other.Echo/Say"],
        ),
        (
            {"service": "pkg.Echo"},
            PathMatch(PathMatchKind.PREFIX, "/pkg.Echo/"),
            ["/pkg.Echo/Say", "/pkg.Echo/Other"],
            ["/pkg.EchoTwo/Say", "/other.Echo/Say"],
        ),
        (
            {"method": "Say"},
            PathMatch(PathMatchKind.REGEX, "/[^/]+/Say"),
            ["/pkg.Echo/Say", "/a.B/Say"],
            ["/pkg.Echo/Say2", "/Say"],
        ),
        (
            {"type": "RegularExpression", "service": "pkg\\..*", "method": "S.y"},
            PathMatch(PathMatchKind.REGEX, "/(?:pkg\\..*)/(?:S.y)"),
            ["/pkg.Echo/Say", "/pkg.X/Spy"],
            ["/other.Echo/Say", "/pkg.Echo/Sayy"],
        ),
        (
            {"type": "RegularExpression", "method": "Echo(Two)?"},
            PathMatch(PathMatchKind.REGEX, "/[^/]+/(?:Echo(Two)?)"),
            ["/a.B/Echo", "/a.B/EchoTwo"],
            ["/a.B/EchoThree"],
        ),
    ],
)
def test_method_matches_are_path_matches(
    method: dict[str, str], path: PathMatch, hits: list[str], misses: list[str]
) -> None:
    routes = routes_of([rule(method=method)])
    assert routes[0].match.path == path
    for p in hits:
        assert call(routes, p) is not None, p
    for p in misses:
        assert call(routes, p) is None, p


def test_no_match_takes_every_call_and_headers_are_case_insensitive() -> None:
    routes = routes_of(
        [
            {"backendRefs": [{"name": "grpc", "port": 80}]},
            rule("grpc2", headers=[{"name": "X-Tenant", "value": "a"}]),
        ]
    )
    chosen = call(routes, "/any.Svc/Call", **{"x-tenant": "a"})
    assert chosen is not None and chosen.source.field == "spec.rules[1].matches[0]"
    fallback = call(routes, "/any.Svc/Call")
    assert fallback is not None and fallback.source.field == "spec.rules[0]"


def test_backends_speak_h2c() -> None:
    result, backends = compile_rules([rule("grpc"), rule("grpc2", method={"method": "X"})])
    assert result.accepted and not result.problems
    assert {c.service: c.protocol for c in backends.clusters()} == {
        "grpc": UpstreamProtocol.H2C,
        "grpc2": UpstreamProtocol.H2C,
    }


def test_an_http_app_protocol_is_unsupported_for_grpc() -> None:
    result, _ = compile_rules([rule("web")])
    assert result.accepted
    [problem] = result.problems
    assert (problem.condition, problem.reason) == ("ResolvedRefs", "UnsupportedProtocol")
    # Calls the rule cannot send anywhere are answered 503: gRPC clients read UNAVAILABLE.
    assert order_routes(result.routes)[0].action == DirectResponse(503)


def test_the_invalid_share_of_a_split_answers_unavailable() -> None:
    # GRPCRouteRule.BackendRefs: calls that would have gone to an invalid backend get UNAVAILABLE
    # (HTTP 503 for a gRPC client), not the 500 (UNKNOWN) of HTTPRoute.
    result, _ = compile_rules(
        [{"backendRefs": [{"name": "grpc", "port": 80}, {"name": "missing", "port": 80}]}]
    )
    assert result.accepted
    (route,) = order_routes(result.routes)
    assert isinstance(route.action, Forward)
    assert route.action.invalid_backend_status == 503
    decision = _decide((route,), "/pkg.Echo/Say")
    assert decision.invalid_share == 0.5 and decision.invalid_status == 503
    assert translate_route(route).route.cluster_not_found_response_code == (
        rc.RouteAction.SERVICE_UNAVAILABLE
    )


@pytest.mark.parametrize(
    ("status", "code", "answered"),
    [
        (500, rc.RouteAction.INTERNAL_SERVER_ERROR, 500),
        (503, rc.RouteAction.SERVICE_UNAVAILABLE, 503),
        (404, rc.RouteAction.NOT_FOUND, 404),
        (418, rc.RouteAction.INTERNAL_SERVER_ERROR, 500),  # Envoy cannot answer it
    ],
)
def test_the_invalid_backend_status_becomes_envoys_cluster_not_found_code(
    status: int, code: int, answered: int
) -> None:
    (route,) = routes_of([rule("grpc")])
    forward = Forward(
        (WeightedCluster(INVALID_BACKEND, 1), WeightedCluster("apps/grpc/80/x", 1)),
        invalid_backend_status=status,
    )
    out = translate_route(replace(route, action=forward))
    assert out.route.cluster_not_found_response_code == code
    only = replace(route, action=Forward((WeightedCluster(INVALID_BACKEND, 1),), status))
    assert _decide((only,), "/pkg.Echo/Say").status == ((status != 418 and status) or 500)


def _decide(routes: tuple[Route, ...], path: str) -> Any:
    vh = VirtualHost("example.com", "example.com", routes, routes[0].source.object)
    graph = RoutingGraph(listeners=(Listener("l", "127.0.0.1", 80, ListenerProtocol.HTTP, (vh,)),))
    return evaluate(graph, make_request("example.com", path, method="POST", listener="l"))


def test_no_backends_answer_unavailable() -> None:
    routes = routes_of([{"matches": [{"method": {"service": "a.B"}}]}])
    assert routes[0].action == DirectResponse(503)


def test_header_filters_and_mirror() -> None:
    routes = routes_of(
        [
            {
                "filters": [
                    {
                        "type": "RequestHeaderModifier",
                        "requestHeaderModifier": {"add": [{"name": "x-a", "value": "1"}]},
                    },
                    {
                        "type": "ResponseHeaderModifier",
                        "responseHeaderModifier": {"set": [{"name": "x-b", "value": "2"}]},
                    },
                    {
                        "type": "RequestMirror",
                        "requestMirror": {
                            "backendRef": {"name": "mirror", "port": 80},
                            "percent": 50,
                        },
                    },
                ],
                "backendRefs": [
                    {
                        "name": "grpc",
                        "port": 80,
                        "filters": [
                            {
                                "type": "RequestHeaderModifier",
                                "requestHeaderModifier": {"remove": ["x-c"]},
                            }
                        ],
                    }
                ],
            }
        ]
    )
    p = routes[0].policies
    assert p.request_headers == HeaderPolicy(add=(HeaderValue("x-a", "1"),))
    assert p.response_headers == HeaderPolicy(set=(HeaderValue("x-b", "2"),))
    assert [(m.cluster.split("/")[1], m.percent) for m in p.mirrors] == [("mirror", 50.0)]
    action = routes[0].action
    assert isinstance(action, Forward)
    assert action.clusters[0].policies is not None
    out = translate_route(routes[0])
    assert out.route.request_mirror_policies[0].cluster.startswith("apps/mirror/")


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ([rule(method={})], "spec.rules[0].matches[0].method"),
        ([rule(method={"service": "bad service"})], "spec.rules[0].matches[0].method.service"),
        ([rule(method={"method": "a/b"})], "spec.rules[0].matches[0].method.method"),
        ([rule(method={"type": "Prefix", "service": "a"})], "spec.rules[0].matches[0].method.type"),
        (
            [rule(method={"type": "RegularExpression", "service": "("})],
            "spec.rules[0].matches[0].method.service",
        ),
        (
            [{"filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "a.b"}}]}],
            "spec.rules[0].filters[0].type",
        ),
        (
            [{"filters": [{"type": "RequestRedirect", "requestRedirect": {}}]}],
            "spec.rules[0].filters[0].type",
        ),
        ([{"sessionPersistence": {}}], "spec.rules[0].sessionPersistence"),
        ([rule(path={"value": "/"})], "spec.rules[0].matches[0].path"),
        ([{**rule(), "name": ""}], "spec.rules[0].name"),
        ([{**rule(), "name": "Echo"}], "spec.rules[0].name"),
        ([{**rule(), "name": "echo_rule"}], "spec.rules[0].name"),
        ([{**rule(), "name": "-echo"}], "spec.rules[0].name"),
        ([{**rule(), "name": "a" * 254}], "spec.rules[0].name"),
        ([{**rule(), "name": 7}], "spec.rules[0].name"),
        ([{**rule(), "name": "echo"}, {**rule(), "name": "echo"}], "spec.rules[1].name"),
    ],
)
def test_invalid_rules_reject_the_route(rules: Any, field: str) -> None:
    result, _ = compile_rules(rules)
    assert not result.accepted and not result.routes
    [problem] = result.problems
    assert (problem.condition, problem.reason) == ("Accepted", "UnsupportedValue")
    assert problem.message.startswith(f"{field}:"), problem.message


def test_an_extension_ref_answers_unavailable_and_is_reported() -> None:
    result, _ = compile_rules(
        [
            {
                "filters": [
                    {
                        "type": "ExtensionRef",
                        "extensionRef": {"group": "x.io", "kind": "F", "name": "f"},
                    }
                ],
                "backendRefs": [{"name": "grpc", "port": 80}],
            }
        ]
    )
    assert result.accepted
    [problem] = result.problems
    assert (problem.condition, problem.reason) == ("ResolvedRefs", "InvalidKind")
    assert order_routes(result.routes)[0].action == DirectResponse(503)


_KEYS = [
    "matches",
    "method",
    "type",
    "service",
    "headers",
    "name",
    "value",
    "filters",
    "requestHeaderModifier",
    "requestMirror",
    "backendRef",
    "backendRefs",
    "port",
    "weight",
    "add",
    "set",
    "remove",
]
_SCALARS = st.one_of(
    st.none(),
    st.integers(min_value=-1, max_value=100),
    st.sampled_from(["Exact", "RegularExpression", "a.B", "Get", "(", "grpc", "RequestMirror", ""]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=16,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4), max_size=3))
def test_arbitrary_rules_never_raise(rules: Any) -> None:
    result, _ = compile_rules(rules)
    assert result.accepted or any(p.condition == "Accepted" for p in result.problems)
    for problem in result.problems:
        assert problem.message.startswith("spec"), problem


def test_named_rules_route_as_unnamed_ones() -> None:
    echo = {**rule("grpc", method={"service": "pkg.Echo", "method": "Say"}), "name": "say.v1"}
    two = {**rule("grpc2", method={"service": "pkg.Echo", "method": "Two"}), "name": "two"}
    other = rule("grpc", method={"service": "pkg.Echo"})
    named = routes_of([echo, two, other])
    unnamed = routes_of([{k: v for k, v in r.items() if k != "name"} for r in (echo, two, other)])
    assert named == unnamed
    hit = call(named, "/pkg.Echo/Two")
    assert hit is not None and hit.source.field == "spec.rules[1].matches[0]"

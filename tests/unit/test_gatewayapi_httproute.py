"""HTTPRoute rules (`dialects/gatewayapi/httproute.py`): matches, filters, redirects, rewrites,
mirrors, timeouts, backends and every problem reason, through the graph and the evaluator (and
the translator where Envoy's meaning matters)."""

from __future__ import annotations

from typing import Any

import pytest
import re2
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import builders
from tests.builders import kube_object
from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.filters import cors_origin
from turnout.dialects.gatewayapi.httproute import (
    CompiledRoute,
    ListenerInfo,
    compile_httproute,
    order_routes,
)
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.envoy.translate.routes import translate_route
from turnout.graph.dialect import CompileContext, Ownership
from turnout.graph.evaluate import Decision, evaluate, make_request
from turnout.graph.model import (
    INVALID_BACKEND,
    CorsPolicy,
    DirectResponse,
    ExactOrigin,
    Forward,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    Listener,
    ListenerProtocol,
    PathMatchKind,
    PathRewrite,
    Redirect,
    RegexOrigin,
    Route,
    RoutePolicies,
    RoutingGraph,
    Timeouts,
    VirtualHost,
)
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.objects import KubeObject
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"
HTTP = ListenerInfo(port=8080, scheme="http")


def obj(api: str, kind: str, namespace: str, name: str, **body: Any) -> KubeObject:
    return kube_object(api, kind, name, namespace, created=body.pop("created", None), **body)


def service(name: str, namespace: str = "apps", port: int = 80, **fields: Any) -> KubeObject:
    return builders.service(name, namespace, port, **fields)


def endpoints(name: str, ip: str, namespace: str = "apps", port: int = 80) -> KubeObject:
    return builders.endpoint_slice(name, [ip], namespace, ports=[(None, port)])


BACKENDS = (
    service("web"),
    service("api"),
    service("mirror"),
    endpoints("web", "10.0.0.1"),
    endpoints("api", "10.0.0.2"),
    endpoints("mirror", "10.0.0.3"),
)


def httproute(
    rules: Any, name: str = "r", namespace: str = "apps", created: str | None = None
) -> KubeObject:
    body: dict[str, Any] = {"spec": {"parentRefs": [{"name": "gw"}], "rules": rules}}
    if created is not None:
        body["created"] = created
    return obj(f"{GROUP}/v1", "HTTPRoute", namespace, name, **body)


def compile_route(
    route: KubeObject,
    *objects: KubeObject,
    listener: ListenerInfo = HTTP,
) -> tuple[CompiledRoute, BackendResolver]:
    snapshot = Snapshot.of((*BACKENDS, *objects, route))
    backends = BackendResolver(snapshot)
    ctx = CompileContext(
        options=CompileOptions(),
        ownership=Ownership(),
        backends=backends,
        secrets=SecretResolver(snapshot),
    )
    return compile_httproute(
        route, listener, ctx, ReferenceGrants.from_snapshot(snapshot)
    ), backends


def compiled(rules: Any, *objects: KubeObject, **kw: Any) -> CompiledRoute:
    return compile_route(httproute(rules), *objects, **kw)[0]


def accepted_routes(rules: Any, *objects: KubeObject, **kw: Any) -> tuple[Route, ...]:
    result = compiled(rules, *objects, **kw)
    assert result.accepted, result.problems
    return order_routes(result.routes)


def graph_of(routes: tuple[Route, ...], backends: BackendResolver | None = None) -> RoutingGraph:
    vh = VirtualHost(
        name="example.com",
        hostname="example.com",
        routes=routes,
        owner=routes[0].source.object if routes else httproute([]).ref,
    )
    clusters = backends.clusters() if backends is not None else ()
    return RoutingGraph(
        listeners=(Listener("gw", "127.0.0.1", 8080, ListenerProtocol.HTTP, virtual_hosts=(vh,)),),
        clusters=clusters,
    )


def decide(routes: tuple[Route, ...], path: str, method: str = "GET", **headers: str) -> Decision:
    request = make_request(
        "example.com",
        path,
        method=method,
        headers={k.replace("_", "-"): v for k, v in headers.items()},
        listener="gw",
    )
    return evaluate(graph_of(routes), request)


def backend_of(decision: Decision) -> str | None:
    if decision.route is None or not isinstance(decision.route.action, Forward):
        return None
    names = [c.cluster.split("/")[1] for c in decision.route.action.clusters if c.weight > 0]
    return names[0] if len(names) == 1 else ",".join(names)


def ref(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "port": 80, **fields}


def problems(result: CompiledRoute) -> list[tuple[str, str, str]]:
    return [(p.condition, p.reason, p.message) for p in result.problems]


def only_problem(result: CompiledRoute) -> tuple[str, str, str]:
    found = problems(result)
    assert len(found) == 1, found
    return found[0]


# --- matches -------------------------------------------------------------------------------------


def test_a_rule_without_matches_matches_every_path_with_its_own_field() -> None:
    routes = accepted_routes([{"backendRefs": [ref("web")]}])
    assert len(routes) == 1
    assert routes[0].source.field == "spec.rules[0]"
    assert routes[0].match.path.kind is PathMatchKind.PREFIX
    for path in ("/", "/anything", "/a/b?c=d"):
        assert backend_of(decide(routes, path)) == "web"


def test_a_route_without_rules_gets_the_crd_default_rule_answering_500() -> None:
    route = obj(f"{GROUP}/v1", "HTTPRoute", "apps", "r", spec={"parentRefs": [{"name": "gw"}]})
    result, _ = compile_route(route)
    assert result.accepted and not result.problems
    routes = order_routes(result.routes)
    assert decide(routes, "/x").status == 500


@pytest.mark.parametrize(
    ("value", "hits", "misses"),
    [
        ("/v2", ["/v2", "/v2/", "/v2/example"], ["/v2example", "/v", "/V2"]),
        ("/v2/", ["/v2", "/v2/", "/v2/example"], ["/v2example"]),
        ("/", ["/", "/anything"], []),
    ],
)
def test_path_prefix_matches_by_segment(value: str, hits: list[str], misses: list[str]) -> None:
    routes = accepted_routes(
        [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": value}}],
                "backendRefs": [ref("web")],
            }
        ]
    )
    for path in hits:
        assert backend_of(decide(routes, path)) == "web", path
    for path in misses:
        assert decide(routes, path).route is None, path


def test_path_prefix_is_envoys_path_separated_prefix() -> None:
    routes = accepted_routes(
        [{"matches": [{"path": {"value": "/v2/"}}], "backendRefs": [ref("web")]}]
    )
    out = translate_route(routes[0])
    assert out.match.path_separated_prefix == "/v2"
    root = accepted_routes([{"matches": [{"path": {"value": "/"}}], "backendRefs": [ref("web")]}])
    assert translate_route(root[0]).match.prefix == "/"


def test_exact_path_is_strict() -> None:
    routes = accepted_routes(
        [
            {
                "matches": [{"path": {"type": "Exact", "value": "/two"}}],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert backend_of(decide(routes, "/two")) == "web"
    assert backend_of(decide(routes, "/two?x=1")) == "web"
    for path in ("/two/", "/Two", "/twoo"):
        assert decide(routes, path).route is None


def test_regular_expression_path_must_match_the_whole_path() -> None:
    routes = accepted_routes(
        [
            {
                "matches": [{"path": {"type": "RegularExpression", "value": "/v[0-9]+/.*"}}],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert backend_of(decide(routes, "/v12/users")) == "web"
    assert decide(routes, "/x/v1/users").route is None


def test_header_matches_are_case_insensitive_by_name_and_the_first_duplicate_counts() -> None:
    routes = accepted_routes(
        [
            {
                "matches": [
                    {
                        "headers": [
                            {"name": "Version", "value": "one"},
                            {"name": "version", "value": "two"},
                            {"name": "X-Color", "type": "RegularExpression", "value": "bl(ue|ack)"},
                        ]
                    }
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    headers = routes[0].match.headers
    assert [(h.name, h.value) for h in headers] == [("version", "one"), ("x-color", "bl(ue|ack)")]
    assert backend_of(decide(routes, "/", VERSION="one", x_color="blue")) == "web"
    assert decide(routes, "/", version="two", x_color="blue").route is None
    assert decide(routes, "/", version="one", x_color="blues").route is None
    assert decide(routes, "/", version="One", x_color="black").route is None  # values are exact


def test_query_param_matches_are_case_sensitive_by_name() -> None:
    routes = accepted_routes(
        [
            {
                "matches": [
                    {
                        "queryParams": [
                            {"name": "animal", "value": "whale"},
                            {"name": "animal", "value": "dolphin"},
                            {"name": "n", "type": "RegularExpression", "value": "[0-9]+"},
                        ]
                    }
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert len(routes[0].match.query) == 2
    assert backend_of(decide(routes, "/?animal=whale&n=42")) == "web"
    assert decide(routes, "/?animal=dolphin&n=42").route is None
    assert decide(routes, "/?Animal=whale&n=42").route is None
    assert decide(routes, "/?animal=whale&n=x").route is None


def test_method_match_is_an_exact_method_condition() -> None:
    routes = accepted_routes([{"matches": [{"method": "POST"}], "backendRefs": [ref("web")]}])
    assert backend_of(decide(routes, "/", method="POST")) == "web"
    assert decide(routes, "/", method="GET").route is None


def test_matches_are_ored_and_conditions_anded() -> None:
    routes = accepted_routes(
        [
            {
                "matches": [
                    {"path": {"value": "/a"}, "headers": [{"name": "x", "value": "1"}]},
                    {"path": {"type": "Exact", "value": "/b"}},
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert [r.source.field for r in routes] == [
        "spec.rules[0].matches[1]",  # the exact path first (precedence)
        "spec.rules[0].matches[0]",
    ]
    assert backend_of(decide(routes, "/a", x="1")) == "web"
    assert decide(routes, "/a").route is None
    assert backend_of(decide(routes, "/b")) == "web"


# --- backends ------------------------------------------------------------------------------------


def test_weights_split_traffic_and_weight_zero_gets_none() -> None:
    routes = accepted_routes(
        [
            {
                "backendRefs": [
                    ref("web", weight=3),
                    ref("api", weight=1),
                    ref("mirror", weight=0),
                ]
            }
        ]
    )
    action = routes[0].action
    assert isinstance(action, Forward)
    weights = {c.cluster.split("/")[1]: c.weight for c in action.clusters}
    assert weights == {"web": 3, "api": 1, "mirror": 0}
    out = translate_route(routes[0])
    assert {c.name.split("/")[1]: c.weight.value for c in out.route.weighted_clusters.clusters} == {
        "web": 3,
        "api": 1,
    }


def test_a_rule_without_backend_refs_answers_500() -> None:
    routes = accepted_routes([{"matches": [{"path": {"value": "/none"}}]}])
    assert routes[0].action == DirectResponse(500)
    assert decide(routes, "/none").status == 500


def test_every_weight_zero_answers_500() -> None:
    routes = accepted_routes([{"backendRefs": [ref("web", weight=0), ref("api", weight=0)]}])
    assert decide(routes, "/").status == 500


def test_an_invalid_backend_keeps_its_share_answered_500() -> None:
    result = compiled([{"backendRefs": [ref("web"), ref("missing")]}])
    assert result.accepted
    assert only_problem(result)[:2] == ("ResolvedRefs", "BackendNotFound")
    routes = order_routes(result.routes)
    action = routes[0].action
    assert isinstance(action, Forward)
    assert [c.cluster for c in action.clusters][1] == INVALID_BACKEND
    decision = decide(routes, "/")
    assert decision.invalid_share == pytest.approx(0.5)
    out = translate_route(routes[0])
    assert out.route.cluster_not_found_response_code == rc.RouteAction.INTERNAL_SERVER_ERROR


@pytest.mark.parametrize(
    ("backend", "reason"),
    [
        (ref("missing"), "BackendNotFound"),
        ({"name": "web", "port": 80, "kind": "Unknown", "group": "example.com"}, "InvalidKind"),
        ({"name": "web", "port": 80, "namespace": "other"}, "RefNotPermitted"),
    ],
)
def test_all_invalid_backends_answer_500_with_the_reason(backend: Any, reason: str) -> None:
    result = compiled([{"backendRefs": [backend]}], service("web", namespace="other"))
    assert result.accepted
    condition, found, message = only_problem(result)
    assert (condition, found) == ("ResolvedRefs", reason)
    assert message.startswith("spec.rules[0].backendRefs[0]")
    assert decide(order_routes(result.routes), "/").status == 500


def test_a_reference_grant_admits_a_cross_namespace_backend() -> None:
    grant = obj(
        f"{GROUP}/v1beta1",
        "ReferenceGrant",
        "other",
        "g",
        spec={
            "from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "apps"}],
            "to": [{"group": "", "kind": "Service"}],
        },
    )
    result = compiled(
        [{"backendRefs": [ref("web", namespace="other")]}],
        service("web", namespace="other"),
        grant,
    )
    assert result.accepted and not result.problems
    action = order_routes(result.routes)[0].action
    assert isinstance(action, Forward) and action.clusters[0].cluster.startswith("other/web/")


def test_backend_ref_filters_become_backend_policies() -> None:
    routes = accepted_routes(
        [
            {
                "backendRefs": [
                    ref(
                        "web",
                        filters=[
                            {
                                "type": "RequestHeaderModifier",
                                "requestHeaderModifier": {"set": [{"name": "x-b", "value": "web"}]},
                            },
                            {
                                "type": "ResponseHeaderModifier",
                                "responseHeaderModifier": {"remove": ["server"]},
                            },
                        ],
                    ),
                    ref(
                        "api",
                        filters=[{"type": "URLRewrite", "urlRewrite": {"hostname": "api.local"}}],
                    ),
                ]
            }
        ]
    )
    action = routes[0].action
    assert isinstance(action, Forward)
    web, api = action.clusters
    assert web.policies is not None and web.policies.request_headers == HeaderPolicy(
        set=(HeaderValue("x-b", "web"),)
    )
    assert web.policies.response_headers == HeaderPolicy(remove=("server",))
    assert api.policies is not None and api.policies.host_rewrite == HostRewrite(
        literal="api.local"
    )
    out = translate_route(routes[0])
    entries = {c.name.split("/")[1]: c for c in out.route.weighted_clusters.clusters}
    assert entries["web"].request_headers_to_add[0].header.key == "x-b"
    assert entries["api"].host_rewrite_literal == "api.local"


@pytest.mark.parametrize(
    "f",
    [
        {"type": "RequestRedirect", "requestRedirect": {"hostname": "x.example"}},
        {"type": "RequestMirror", "requestMirror": {"backendRef": ref("mirror")}},
        {
            "type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/x"}},
        },
        {"type": "CORS", "cors": {"allowOrigins": ["*"]}},
    ],
)
def test_backend_ref_filters_envoy_cannot_apply_per_backend_reject_the_route(f: Any) -> None:
    result = compiled([{"backendRefs": [ref("web", filters=[f])]}])
    assert not result.accepted and not result.routes
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("Accepted", "UnsupportedValue")
    assert message.startswith("spec.rules[0].backendRefs[0].filters")


# --- header filters ------------------------------------------------------------------------------


def test_request_and_response_header_modifiers() -> None:
    routes = accepted_routes(
        [
            {
                "filters": [
                    {
                        "type": "RequestHeaderModifier",
                        "requestHeaderModifier": {
                            "set": [{"name": "X-Set", "value": "100%"}],
                            "add": [{"name": "X-Add", "value": "b"}],
                            "remove": ["X-Drop"],
                        },
                    },
                    {
                        "type": "ResponseHeaderModifier",
                        "responseHeaderModifier": {"add": [{"name": "X-Resp", "value": "r"}]},
                    },
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    p = routes[0].policies
    # Envoy reads % as the start of a substitution: a literal one is doubled.
    assert p.request_headers == HeaderPolicy(
        set=(HeaderValue("X-Set", "100%%"),), add=(HeaderValue("X-Add", "b"),), remove=("X-Drop",)
    )
    assert p.response_headers == HeaderPolicy(add=(HeaderValue("X-Resp", "r"),))
    out = translate_route(routes[0])
    added = {(h.header.key, h.append_action) for h in out.request_headers_to_add}
    assert ("X-Set", base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD) in added
    assert ("X-Add", base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD) in added
    assert list(out.request_headers_to_remove) == ["X-Drop"]


def test_setting_host_is_a_host_rewrite() -> None:
    routes = accepted_routes(
        [
            {
                "filters": [
                    {
                        "type": "RequestHeaderModifier",
                        "requestHeaderModifier": {"set": [{"name": "Host", "value": "in.example"}]},
                    }
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert routes[0].policies.host_rewrite == HostRewrite(literal="in.example")
    assert routes[0].policies.request_headers == HeaderPolicy()


@pytest.mark.parametrize(
    ("modifier", "field"),
    [
        (
            {"set": [{"name": "x", "value": "1"}], "add": [{"name": "X", "value": "2"}]},
            "add[0].name",
        ),
        ({"set": [{"name": "x", "value": "1"}], "remove": ["x"]}, "remove[0]"),
        ({"add": [{"name": "host", "value": "h"}]}, "add[0].name"),
        ({"set": [{"name": "bad name", "value": "1"}]}, "set[0].name"),
        ({"set": [{"name": "x", "value": "a\nb"}]}, "set[0].value"),
        ({"remove": ["Host"]}, "remove[0]"),
    ],
)
def test_invalid_header_modifiers_reject_the_route(modifier: Any, field: str) -> None:
    result = compiled(
        [
            {
                "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": modifier}],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert not result.accepted
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("Accepted", "UnsupportedValue")
    assert message.startswith(f"spec.rules[0].filters[0].requestHeaderModifier.{field}:")


# --- URL rewrites --------------------------------------------------------------------------------


def rewrite_rule(match: str, modifier: dict[str, Any], hostname: str | None = None) -> Any:
    rewrite: dict[str, Any] = {"path": modifier}
    if hostname:
        rewrite["hostname"] = hostname
    return [
        {
            "matches": [{"path": {"type": "PathPrefix", "value": match}}],
            "filters": [{"type": "URLRewrite", "urlRewrite": rewrite}],
            "backendRefs": [ref("web")],
        }
    ]


def apply_prefix_rewrite(routes: tuple[Route, ...], path: str) -> str | None:
    """What Envoy sends upstream: prefix_rewrite replaces the matched prefix as a string; the
    EXACT route's full-path rewrite replaces the path (query kept)."""
    decision = decide(routes, path)
    assert decision.route is not None, path
    rewrite = decision.route.policies.path_rewrite
    only = path.split("?", 1)[0]
    query = path[len(only) :]
    if rewrite is None:
        return path
    if rewrite.full_path is not None:
        return rewrite.full_path + query
    assert rewrite.prefix is not None
    matched = decision.route.match.path
    prefix = "/" if matched.value in ("", "/") else matched.value
    assert only.startswith(prefix)
    return rewrite.prefix + only[len(prefix) :] + query


# The table of HTTPPathModifier.ReplacePrefixMatch (httproute_types.go).
@pytest.mark.parametrize(
    ("request_path", "match", "replacement", "expected"),
    [
        ("/foo/bar", "/foo", "/xyz", "/xyz/bar"),
        ("/foo/bar", "/foo", "/xyz/", "/xyz/bar"),
        ("/foo/bar", "/foo/", "/xyz", "/xyz/bar"),
        ("/foo/bar", "/foo/", "/xyz/", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"),
        ("/foo/", "/foo", "/xyz", "/xyz/"),
        ("/foo/bar", "/foo", "", "/bar"),
        ("/foo/", "/foo", "", "/"),
        ("/foo", "/foo", "", "/"),
        ("/foo/", "/foo", "/", "/"),
        ("/foo", "/foo", "/", "/"),
        ("/foo/bar?q=1", "/foo", "/", "/bar?q=1"),
        ("/bar", "/", "/xyz", "/xyz/bar"),
    ],
)
def test_replace_prefix_match_follows_the_spec_table(
    request_path: str, match: str, replacement: str, expected: str
) -> None:
    routes = accepted_routes(
        rewrite_rule(match, {"type": "ReplacePrefixMatch", "replacePrefixMatch": replacement})
    )
    assert apply_prefix_rewrite(routes, request_path) == expected
    # The split routes never widen or narrow the match.
    assert decide(routes, match.rstrip("/") + "x").route is None or match == "/"


def test_replace_prefix_match_translates_to_prefix_rewrite() -> None:
    routes = accepted_routes(
        rewrite_rule("/foo", {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/xyz/"})
    )
    out = translate_route(routes[0])
    assert out.match.path_separated_prefix == "/foo"
    assert out.route.prefix_rewrite == "/xyz"


def test_replace_full_path_and_hostname() -> None:
    routes = accepted_routes(
        rewrite_rule(
            "/full", {"type": "ReplaceFullPath", "replaceFullPath": "/one"}, hostname="new.example"
        )
    )
    p = routes[0].policies
    assert p.path_rewrite == PathRewrite(full_path="/one")
    assert p.host_rewrite == HostRewrite(literal="new.example")
    out = translate_route(routes[0])
    assert out.route.regex_rewrite.substitution == "/one"
    assert out.route.host_rewrite_literal == "new.example"


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        (
            {
                "matches": [{"path": {"type": "Exact", "value": "/a"}}],
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/b"}
                        },
                    }
                ],
            },
            "spec.rules[0].filters",
        ),
        (
            {
                "matches": [{"path": {"value": "/a"}}, {"path": {"value": "/b"}}],
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/b"}
                        },
                    }
                ],
            },
            "spec.rules[0].filters",
        ),
        (
            {
                "filters": [
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "a.example"}},
                    {"type": "RequestRedirect", "requestRedirect": {"hostname": "b.example"}},
                ]
            },
            "spec.rules[0].filters",
        ),
        (
            {
                "filters": [
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "a.example"}},
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "b.example"}},
                ]
            },
            "spec.rules[0].filters[1].type",
        ),
        (
            {
                "filters": [
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "*.example"}},
                ]
            },
            "spec.rules[0].filters[0].urlRewrite.hostname",
        ),
        (
            {
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "path": {"type": "ReplaceFullPath", "replaceFullPath": "/a//b"}
                        },
                    },
                ]
            },
            "spec.rules[0].filters[0].urlRewrite.path.replaceFullPath",
        ),
        (
            {
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "path": {"type": "ReplaceFullPath", "replacePrefixMatch": "/a"}
                        },
                    },
                ]
            },
            "spec.rules[0].filters[0].urlRewrite.path.replacePrefixMatch",
        ),
        (
            {"filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "x.io"}}]}
            | {"backendRefs": [ref("web")]},
            "spec.rules[0]",
        ),
        (
            {"filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 304}}]},
            "spec.rules[0].filters[0].requestRedirect.statusCode",
        ),
        (
            {"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "ftp"}}]},
            "spec.rules[0].filters[0].requestRedirect.scheme",
        ),
        (
            {"filters": [{"type": "RequestRedirect", "requestRedirect": {"port": 0}}]},
            "spec.rules[0].filters[0].requestRedirect.port",
        ),
        (
            {"filters": [{"type": "Magic", "magic": {}}]},
            "spec.rules[0].filters[0].type",
        ),
        (
            {"filters": [{"type": "RequestHeaderModifier"}]},
            "spec.rules[0].filters[0].requestHeaderModifier",
        ),
        (
            {"filters": [{"type": "CORS", "cors": {"allowOrigins": ["ftp://a.example"]}}]},
            "spec.rules[0].filters[0].cors.allowOrigins[0]",
        ),
        (
            {"filters": [{"type": "CORS", "cors": {"allowOrigins": ["*", "https://a.example"]}}]},
            "spec.rules[0].filters[0].cors.allowOrigins",
        ),
        (
            {"filters": [{"type": "CORS", "cors": {"allowMethods": ["FETCH"]}}]},
            "spec.rules[0].filters[0].cors.allowMethods[0]",
        ),
        (
            {"filters": [{"type": "CORS", "cors": {"maxAge": 0}}]},
            "spec.rules[0].filters[0].cors.maxAge",
        ),
    ],
)
def test_invalid_filter_combinations_and_values_reject_the_route(rule: Any, field: str) -> None:
    result = compiled([rule])
    assert not result.accepted and not result.routes
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("Accepted", "UnsupportedValue")
    assert message.startswith(f"{field}:"), message


# --- redirects -----------------------------------------------------------------------------------


def redirect_route(listener: ListenerInfo, **redirect: Any) -> Redirect:
    routes = accepted_routes(
        [{"filters": [{"type": "RequestRedirect", "requestRedirect": redirect}]}],
        listener=listener,
    )
    action = routes[0].action
    assert isinstance(action, Redirect)
    return action


LISTENER_80 = ListenerInfo(port=80, scheme="http")
LISTENER_8080 = ListenerInfo(port=8080, scheme="http")
LISTENER_443 = ListenerInfo(port=443, scheme="https")


# The cases of the conformance test HTTPRouteRedirectPortAndScheme, as (listener, redirect,
# Location scheme, Location port): None is "no port in the Location" (the scheme's default).
@pytest.mark.parametrize(
    ("listener", "redirect", "scheme", "port"),
    [
        (LISTENER_80, {}, None, None),
        (LISTENER_80, {"port": 80}, None, None),
        (LISTENER_80, {"port": 8080}, None, 8080),
        (LISTENER_80, {"scheme": "https"}, "https", 443),
        (LISTENER_80, {"scheme": "https", "port": 443}, "https", 443),
        (LISTENER_80, {"scheme": "https", "port": 8443}, "https", 8443),
        (LISTENER_8080, {}, None, 8080),
        (LISTENER_8080, {"port": 80}, None, 80),
        (LISTENER_8080, {"scheme": "https"}, "https", 443),
        (LISTENER_443, {}, None, None),
        (LISTENER_443, {"port": 443}, None, None),
        (LISTENER_443, {"port": 8443}, None, 8443),
        (LISTENER_443, {"scheme": "http"}, "http", 80),
        (LISTENER_443, {"scheme": "http", "port": 80}, "http", 80),
        (LISTENER_443, {"scheme": "http", "port": 8080}, "http", 8080),
    ],
)
def test_redirect_port_and_scheme_rules(
    listener: ListenerInfo, redirect: dict[str, Any], scheme: str | None, port: int | None
) -> None:
    action = redirect_route(listener, **redirect)
    assert (action.scheme, action.port, action.status) == (scheme, port, 302)


def test_with_a_hostname_the_default_port_is_left_out() -> None:
    # Envoy writes every port it is given; with a new hostname the request's port cannot leak.
    action = redirect_route(LISTENER_8080, hostname="example.org", scheme="https")
    assert (action.hostname, action.scheme, action.port) == ("example.org", "https", None)
    action = redirect_route(LISTENER_8080, hostname="example.org")
    assert action.port == 8080


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_redirect_status_codes(code: int) -> None:
    routes = accepted_routes(
        [
            {
                "filters": [
                    {
                        "type": "RequestRedirect",
                        "requestRedirect": {"hostname": "x.example", "statusCode": code},
                    }
                ]
            }
        ],
        listener=LISTENER_80,
    )
    assert decide(routes, "/").status == code
    out = translate_route(routes[0])
    assert out.redirect.host_redirect == "x.example"


def test_a_redirect_keeps_its_response_headers_and_nothing_meant_for_upstream() -> None:
    routes = accepted_routes(
        [
            {
                "filters": [
                    {"type": "RequestRedirect", "requestRedirect": {"hostname": "x.example"}},
                    {
                        "type": "ResponseHeaderModifier",
                        "responseHeaderModifier": {"set": [{"name": "x-moved", "value": "yes"}]},
                    },
                    {
                        "type": "RequestHeaderModifier",
                        "requestHeaderModifier": {"set": [{"name": "x-up", "value": "1"}]},
                    },
                    {"type": "CORS", "cors": {"allowOrigins": ["https://app.example"]}},
                    {"type": "RequestMirror", "requestMirror": {"backendRef": ref("mirror")}},
                ],
                "timeouts": {"request": "5s"},
            }
        ],
        listener=LISTENER_80,
    )
    (route,) = routes
    assert isinstance(route.action, Redirect)
    assert route.policies == RoutePolicies(
        response_headers=HeaderPolicy(set=(HeaderValue("x-moved", "yes"),))
    )
    out = translate_route(route)
    assert out.redirect.host_redirect == "x.example"
    assert [(h.header.key, h.header.value) for h in out.response_headers_to_add] == [
        ("x-moved", "yes")
    ]
    assert not out.request_headers_to_add and not out.typed_per_filter_config


def test_redirect_paths() -> None:
    full = accepted_routes(
        [
            {
                "matches": [{"path": {"value": "/full"}}],
                "filters": [
                    {
                        "type": "RequestRedirect",
                        "requestRedirect": {
                            "path": {"type": "ReplaceFullPath", "replaceFullPath": "/one"}
                        },
                    }
                ],
            }
        ],
        listener=LISTENER_80,
    )
    assert isinstance(full[0].action, Redirect) and full[0].action.path == "/one"
    prefix = accepted_routes(
        [
            {
                "matches": [{"path": {"value": "/prefix"}}],
                "filters": [
                    {
                        "type": "RequestRedirect",
                        "requestRedirect": {
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/one/"}
                        },
                    }
                ],
            }
        ],
        listener=LISTENER_80,
    )
    assert isinstance(prefix[0].action, Redirect) and prefix[0].action.prefix == "/one"
    assert translate_route(prefix[0]).redirect.prefix_rewrite == "/one"
    strip = accepted_routes(
        [
            {
                "matches": [{"path": {"value": "/strip"}}],
                "filters": [
                    {
                        "type": "RequestRedirect",
                        "requestRedirect": {
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": ""}
                        },
                    }
                ],
            }
        ],
        listener=LISTENER_80,
    )
    exact = decide(strip, "/strip").route
    nested = decide(strip, "/strip/a/b").route
    assert exact is not None and isinstance(exact.action, Redirect) and exact.action.path == "/"
    assert nested is not None and isinstance(nested.action, Redirect)
    assert (nested.match.path.value, nested.action.prefix) == ("/strip/", "/")
    assert decide(strip, "/stripe").route is None


# --- mirrors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mirror", "percent"),
    [
        ({}, 100.0),
        ({"percent": 20}, 20.0),
        ({"fraction": {"numerator": 1, "denominator": 3}}, 100 / 3),
        ({"fraction": {"numerator": 5}}, 5.0),
    ],
)
def test_request_mirror_percent_and_fraction(mirror: dict[str, Any], percent: float) -> None:
    routes = accepted_routes(
        [
            {
                "filters": [
                    {
                        "type": "RequestMirror",
                        "requestMirror": {"backendRef": ref("mirror"), **mirror},
                    },
                    {"type": "RequestMirror", "requestMirror": {"backendRef": ref("api")}},
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    mirrors = routes[0].policies.mirrors
    assert [m.cluster.split("/")[1] for m in mirrors] == ["mirror", "api"]
    assert mirrors[0].percent == pytest.approx(percent)
    out = translate_route(routes[0])
    assert len(out.route.request_mirror_policies) == 2


def test_a_mirror_that_does_not_resolve_is_left_out_and_reported() -> None:
    result = compiled(
        [
            {
                "filters": [
                    {"type": "RequestMirror", "requestMirror": {"backendRef": ref("nope")}}
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert result.accepted
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("ResolvedRefs", "BackendNotFound")
    assert message.startswith("spec.rules[0].filters[0].requestMirror.backendRef")
    route = order_routes(result.routes)[0]
    assert route.policies.mirrors == ()
    assert backend_of(decide((route,), "/")) == "web"


def test_mirror_with_percent_and_fraction_is_refused() -> None:
    result = compiled(
        [
            {
                "filters": [
                    {
                        "type": "RequestMirror",
                        "requestMirror": {
                            "backendRef": ref("mirror"),
                            "percent": 10,
                            "fraction": {"numerator": 1},
                        },
                    }
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert not result.accepted
    assert only_problem(result)[:2] == ("Accepted", "UnsupportedValue")


# --- CORS ----------------------------------------------------------------------------------------


def test_cors_filter_becomes_the_routes_cors_policy() -> None:
    routes = accepted_routes(
        [
            {
                "filters": [
                    {
                        "type": "CORS",
                        "cors": {
                            "allowOrigins": [
                                "https://Www.Example.com",
                                "http://*.example.org:8080",
                            ],
                            "allowMethods": ["GET", "PUT"],
                            "allowHeaders": ["x-a"],
                            "exposeHeaders": ["x-b"],
                            "allowCredentials": True,
                        },
                    }
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    cors = routes[0].policies.cors
    assert cors == CorsPolicy(
        allow_origins=(
            ExactOrigin("https://www.example.com"),
            RegexOrigin("(?i)http://.+\\.example\\.org:8080"),
        ),
        allow_methods=("GET", "PUT"),
        allow_headers=("x-a",),
        expose_headers=("x-b",),
        max_age_s=5,
        allow_credentials=True,
    )
    out = translate_route(routes[0])
    assert "envoy.filters.http.cors" in out.typed_per_filter_config


def test_cors_origins() -> None:
    assert cors_origin("*") == ExactOrigin("*")
    assert cors_origin("https://A.Example") == ExactOrigin("https://a.example")
    for bad in ("a.example", "https://a.example/path", "ftp://a.example", "https://a.*.example"):
        assert cors_origin(bad) is None, bad
    converted = cors_origin("https://*.example.com")
    assert isinstance(converted, RegexOrigin)
    pattern = re2.compile(converted.pattern)
    # A greedy match to the left: any number of labels, never the bare domain.
    for origin in ("https://a.example.com", "https://a.b.example.com", "HTTPS://A.EXAMPLE.COM"):
        assert pattern.fullmatch(origin), origin
    for origin in ("https://example.com", "http://a.example.com", "https://a.example.com.evil"):
        assert not pattern.fullmatch(origin), origin


# --- extension refs ------------------------------------------------------------------------------


def test_an_extension_ref_is_an_unresolved_reference_answered_500() -> None:
    result = compiled(
        [
            {
                "filters": [
                    {
                        "type": "ExtensionRef",
                        "extensionRef": {"group": "example.com", "kind": "Magic", "name": "m"},
                    }
                ],
                "backendRefs": [ref("web")],
            }
        ]
    )
    assert result.accepted
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("ResolvedRefs", "InvalidKind")
    assert "spec.rules[0].filters[0].extensionRef" in message
    assert decide(order_routes(result.routes), "/").status == 500


# --- timeouts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeouts", "expected"),
    [
        ({"request": "10s"}, Timeouts(response_s=10.0)),
        ({"request": "1m30s", "backendRequest": "500ms"}, Timeouts(90.0, None, 0.5)),
        ({"request": "0s", "backendRequest": "20s"}, Timeouts(0.0, None, 20.0)),
        ({"backendRequest": "20s"}, Timeouts(20.0, None, 20.0)),
        ({"request": "1h"}, Timeouts(response_s=3600.0)),
    ],
)
def test_timeouts(timeouts: dict[str, str], expected: Timeouts) -> None:
    routes = accepted_routes([{"timeouts": timeouts, "backendRefs": [ref("web")]}])
    assert routes[0].policies.timeouts == expected


def test_timeouts_reach_envoy_as_route_and_per_try_timeouts() -> None:
    routes = accepted_routes(
        [{"timeouts": {"request": "2s", "backendRequest": "1s"}, "backendRefs": [ref("web")]}]
    )
    out = translate_route(routes[0])
    assert out.route.timeout.seconds == 2
    assert out.route.retry_policy.per_try_timeout.seconds == 1


@pytest.mark.parametrize(
    ("timeouts", "field"),
    [
        ({"request": "1s", "backendRequest": "2s"}, "backendRequest"),
        ({"request": "10"}, "request"),
        ({"request": "1.5s"}, "request"),
        ({"backendRequest": "1d"}, "backendRequest"),
    ],
)
def test_invalid_timeouts_reject_the_route(timeouts: dict[str, str], field: str) -> None:
    result = compiled([{"timeouts": timeouts, "backendRefs": [ref("web")]}])
    assert not result.accepted
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("Accepted", "UnsupportedValue")
    assert message.startswith(f"spec.rules[0].timeouts.{field}:")


# --- invalid matches -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("match", "field"),
    [
        ({"path": {"type": "Prefix", "value": "/"}}, "path.type"),
        ({"path": {"value": "no-slash"}}, "path.value"),
        ({"path": {"value": "/a//b"}}, "path.value"),
        ({"path": {"type": "Exact", "value": "/a/../b"}}, "path.value"),
        ({"path": {"value": "/a%2fb"}}, "path.value"),
        ({"path": {"value": "/a/."}}, "path.value"),
        ({"path": {"value": "/a b"}}, "path.value"),
        ({"path": {"type": "RegularExpression", "value": "/(unclosed"}}, "path.value"),
        ({"path": {"type": "RegularExpression", "value": "/(a{50}){50}"}}, "path.value"),
        ({"headers": [{"name": "x", "type": "Prefix", "value": "a"}]}, "headers[0].type"),
        ({"headers": [{"name": "x"}]}, "headers[0].value"),
        ({"headers": [{"name": "x:y", "value": "a"}]}, "headers[0].name"),
        (
            {"queryParams": [{"name": "q", "type": "RegularExpression", "value": "("}]},
            "queryParams[0].value",
        ),
        ({"method": "FETCH"}, "method"),
        ({"pathPrefix": "/a"}, "pathPrefix"),
    ],
)
def test_invalid_matches_reject_the_route(match: Any, field: str) -> None:
    result = compiled([{"matches": [match], "backendRefs": [ref("web")]}])
    assert not result.accepted and not result.routes
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("Accepted", "UnsupportedValue")
    assert message.startswith(f"spec.rules[0].matches[0].{field}:"), message


def test_unknown_and_experimental_rule_fields_are_refused() -> None:
    result = compiled([{"retry": {"attempts": 2}, "backendRefs": [ref("web")]}])
    assert not result.accepted
    assert only_problem(result) == (
        "Accepted",
        "UnsupportedValue",
        "spec.rules[0].retry: is not supported by turnout",
    )


def test_malformed_shapes_never_raise() -> None:
    for rules in ("x", [1], [{"matches": "x"}], [{"matches": [{"path": 3}]}], [{"filters": [1]}]):
        result = compiled(rules)
        assert not result.accepted and result.problems


def test_a_bad_rule_never_touches_another_route() -> None:
    good, _ = compile_route(httproute([{"backendRefs": [ref("web")]}], name="good"))
    bad, _ = compile_route(httproute([{"matches": [{"method": "NOPE"}]}], name="bad"))
    assert good.accepted and not bad.accepted
    assert len(good.routes) == 1


def test_an_extension_ref_on_a_backend_ref_invalidates_that_share_only() -> None:
    result = compiled(
        [
            {
                "backendRefs": [
                    ref("web"),
                    ref(
                        "api",
                        filters=[
                            {
                                "type": "ExtensionRef",
                                "extensionRef": {"group": "x.io", "kind": "F", "name": "f"},
                            }
                        ],
                    ),
                ]
            }
        ]
    )
    assert result.accepted
    assert only_problem(result)[:2] == ("ResolvedRefs", "InvalidKind")
    action = order_routes(result.routes)[0].action
    assert isinstance(action, Forward)
    assert [c.cluster == INVALID_BACKEND for c in action.clusters] == [False, True]


# --- robustness ----------------------------------------------------------------------------------

_KEYS = [
    "matches",
    "path",
    "type",
    "value",
    "headers",
    "name",
    "queryParams",
    "method",
    "filters",
    "requestHeaderModifier",
    "responseHeaderModifier",
    "requestRedirect",
    "urlRewrite",
    "requestMirror",
    "extensionRef",
    "cors",
    "set",
    "add",
    "remove",
    "scheme",
    "hostname",
    "port",
    "statusCode",
    "replaceFullPath",
    "replacePrefixMatch",
    "backendRef",
    "percent",
    "fraction",
    "numerator",
    "denominator",
    "backendRefs",
    "weight",
    "kind",
    "group",
    "namespace",
    "timeouts",
    "request",
    "backendRequest",
    "allowOrigins",
    "allowMethods",
    "maxAge",
]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=70000),
    st.sampled_from(
        [
            "/",
            "/a",
            "",
            "Exact",
            "PathPrefix",
            "RegularExpression",
            "RequestRedirect",
            "URLRewrite",
            "RequestMirror",
            "RequestHeaderModifier",
            "CORS",
            "ExtensionRef",
            "ReplacePrefixMatch",
            "ReplaceFullPath",
            "web",
            "https",
            "1s",
            "(",
            "*",
        ]
    ),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4), max_size=3))
def test_arbitrary_rules_never_raise_and_rejections_always_say_why(rules: Any) -> None:
    result = compiled(rules)
    if not result.accepted:
        assert not result.routes
        assert any(p.condition == "Accepted" for p in result.problems)
    for problem in result.problems:
        assert problem.message.startswith("spec"), problem


def test_an_extension_ref_is_not_skipped_on_a_redirecting_rule() -> None:
    result = compiled(
        [
            {
                "filters": [
                    {"type": "RequestRedirect", "requestRedirect": {"hostname": "x.example"}},
                    {
                        "type": "ExtensionRef",
                        "extensionRef": {"group": "x.io", "kind": "F", "name": "f"},
                    },
                ]
            }
        ]
    )
    assert result.accepted
    assert order_routes(result.routes)[0].action == DirectResponse(500)


def test_an_empty_rules_list_serves_nothing() -> None:
    result = compiled([])
    assert result.accepted and not result.problems and not result.routes


def test_cors_wildcard_methods_with_credentials_are_listed() -> None:
    def methods(cors: dict[str, Any]) -> tuple[str, ...]:
        routes = accepted_routes(
            [{"filters": [{"type": "CORS", "cors": cors}], "backendRefs": [ref("web")]}]
        )
        policy = routes[0].policies.cors
        assert policy is not None
        return policy.allow_methods

    assert methods({"allowOrigins": ["*"], "allowMethods": ["*"]}) == ("*",)
    listed = methods({"allowOrigins": ["*"], "allowMethods": ["*"], "allowCredentials": True})
    assert "*" not in listed and {"GET", "PUT", "DELETE", "PATCH"} <= set(listed)


# --- rule names (HTTPRouteNamedRouteRule) --------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "field"),
    [
        ([""], "spec.rules[0].name"),
        (["Named"], "spec.rules[0].name"),
        (["named_rule"], "spec.rules[0].name"),
        (["named-"], "spec.rules[0].name"),
        (["a" * 254], "spec.rules[0].name"),
        (["one", "two", "one"], "spec.rules[2].name"),
    ],
)
def test_invalid_or_repeated_rule_names_reject_the_route(names: list[str], field: str) -> None:
    result = compiled([{"name": n, "backendRefs": [ref("web")]} for n in names])
    assert not result.accepted and not result.routes
    condition, reason, message = only_problem(result)
    assert (condition, reason) == ("Accepted", "UnsupportedValue")
    assert message.startswith(f"{field}:"), message


def test_rule_names_change_no_routing() -> None:
    rules: list[dict[str, Any]] = [
        {"name": "v1.named-rule", "matches": [{"path": {"value": "/a"}}]},
        {"matches": [{"path": {"value": "/b"}}]},
        {"name": "x" * 253, "matches": [{"path": {"value": "/c"}}]},
    ]
    named = accepted_routes([{**r, "backendRefs": [ref("web")]} for r in rules])
    unnamed = accepted_routes(
        [{"matches": r["matches"], "backendRefs": [ref("web")]} for r in rules]
    )
    assert named == unnamed and len(named) == 3

"""Gateway API match precedence (`dialects/gatewayapi/precedence.py`) across rules and routes:
each step of the spec's list, the conformance cases HTTPRouteMatchingAcrossRoutes and
HTTPRoutePathMatchOrder, and GRPCRoute's order."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests import builders
from tests.builders import kube_object
from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.grpcroute import compile_grpcroute
from turnout.dialects.gatewayapi.httproute import (
    ListenerInfo,
    RankedRoute,
    compile_httproute,
    order_routes,
)
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.graph.dialect import CompileContext, Ownership
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    Forward,
    Listener,
    ListenerProtocol,
    Route,
    RoutingGraph,
    VirtualHost,
)
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.objects import KubeObject
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"
LISTENER = ListenerInfo(port=80, scheme="http")
SERVICES = tuple(f"v{i}" for i in range(1, 9))


def obj(api: str, kind: str, namespace: str, name: str, spec: Any, created: str = "") -> KubeObject:
    return kube_object(api, kind, name, namespace, spec=spec, created=created)


def service(name: str, namespace: str = "apps", app_protocol: str | None = None) -> KubeObject:
    return builders.service(name, namespace, app_protocol=app_protocol)


def route(
    name: str, rules: Any, namespace: str = "apps", created: str = "", kind: str = "HTTPRoute"
) -> KubeObject:
    return obj(f"{GROUP}/v1", kind, namespace, name, {"rules": rules}, created)


def to(backend: str, **match: Any) -> dict[str, Any]:
    """One rule with one match sending to `backend`."""
    return {"matches": [match], "backendRefs": [{"name": backend, "port": 80}]}


def ranked(*routes: KubeObject) -> list[RankedRoute]:
    services = [service(s, ns) for s in SERVICES for ns in ("apps", "other")]
    snapshot = Snapshot.of((*services, *routes))
    ctx = CompileContext(
        options=CompileOptions(),
        ownership=Ownership(),
        backends=BackendResolver(snapshot),
        secrets=SecretResolver(snapshot),
    )
    grants = ReferenceGrants.from_snapshot(snapshot)
    out: list[RankedRoute] = []
    for r in routes:
        compile_fn = compile_grpcroute if r.kind == "GRPCRoute" else compile_httproute
        result = compile_fn(r, LISTENER, ctx, grants)
        assert result.accepted, result.problems
        out.extend(result.routes)
    return out


def first_match(
    routes: tuple[Route, ...], path: str, method: str = "GET", **headers: str
) -> str | None:
    vh = VirtualHost("example.com", "example.com", routes, routes[0].source.object)
    graph = RoutingGraph(listeners=(Listener("l", "127.0.0.1", 80, ListenerProtocol.HTTP, (vh,)),))
    decision = evaluate(
        graph,
        make_request("example.com", path, method=method, headers=headers, listener="l"),
    )
    if decision.route is None:
        return None
    action = decision.route.action
    assert isinstance(action, Forward)
    return action.clusters[0].cluster.split("/")[1]


def ordered(*routes: KubeObject) -> tuple[Route, ...]:
    """order_routes, checked to give the same order whatever order the routes come in."""
    items = ranked(*routes)
    first = order_routes(items)
    for permutation in itertools.islice(itertools.permutations(items), 24):
        assert order_routes(permutation) == first
    return first


def test_exact_beats_any_prefix_and_longer_prefix_beats_shorter() -> None:
    routes = ordered(
        route("a", [to("v1", path={"value": "/"})]),
        route("b", [to("v2", path={"value": "/foo"})]),
        route("c", [to("v3", path={"value": "/foo/bar"})]),
        route("d", [to("v4", path={"type": "Exact", "value": "/foo/bar/baz"})]),
    )
    assert first_match(routes, "/x") == "v1"
    assert first_match(routes, "/foo") == "v2"
    assert first_match(routes, "/foo/bar/x") == "v3"
    assert first_match(routes, "/foo/bar/baz") == "v4"
    assert first_match(routes, "/foo/bar/baz/") == "v3"


def test_regular_expressions_come_after_exact_and_before_prefixes() -> None:
    routes = ordered(
        route("a", [to("v1", path={"value": "/api/very/long/prefix"})]),
        route("b", [to("v2", path={"type": "RegularExpression", "value": "/api/.*"})]),
        route("c", [to("v3", path={"type": "Exact", "value": "/api/x"})]),
    )
    assert first_match(routes, "/api/x") == "v3"
    assert first_match(routes, "/api/very/long/prefix/1") == "v2"


def test_trailing_slash_of_a_prefix_does_not_count() -> None:
    routes = ordered(
        route("a", [to("v1", path={"value": "/foo/"})]),
        route("b", [to("v2", path={"value": "/foo"}, headers=[{"name": "x", "value": "1"}])]),
    )
    # Same prefix length: the header match decides.
    assert first_match(routes, "/foo/a", x="1") == "v2"


def test_method_beats_headers_and_headers_beat_query_params() -> None:
    routes = ordered(
        route(
            "a",
            [
                to(
                    "v1",
                    path={"value": "/p"},
                    headers=[{"name": "a", "value": "1"}, {"name": "b", "value": "1"}],
                )
            ],
        ),
        route("b", [to("v2", path={"value": "/p"}, method="GET")]),
        route(
            "c",
            [
                to(
                    "v3",
                    path={"value": "/p"},
                    headers=[{"name": "a", "value": "1"}],
                    queryParams=[{"name": "q", "value": "1"}, {"name": "r", "value": "1"}],
                )
            ],
        ),
        route(
            "d",
            [to("v4", path={"value": "/p"}, headers=[{"name": "a", "value": "1"}])],
        ),
    )
    assert first_match(routes, "/p?q=1&r=1", a="1", b="1") == "v2"
    assert first_match(routes, "/p?q=1&r=1", method="POST", a="1", b="1") == "v1"
    assert first_match(routes, "/p?q=1&r=1", method="POST", a="1") == "v3"
    assert first_match(routes, "/p?q=1", method="POST", a="1") == "v4"


def test_ties_go_to_the_oldest_route_then_namespace_name_then_rule_then_match() -> None:
    same = {"path": {"value": "/"}}
    routes = ordered(
        route("zeta", [to("v1", **same)], created="2024-01-01T00:00:00Z"),
        route("alpha", [to("v2", **same)], created="2024-06-01T00:00:00Z"),
        route("beta", [to("v3", **same)], namespace="other", created="2024-06-01T00:00:00Z"),
    )
    assert first_match(routes, "/") == "v1"  # oldest, whatever its name
    rest = ordered(
        route("alpha", [to("v2", **same)], created="2024-06-01T00:00:00Z"),
        route("beta", [to("v3", **same)], namespace="other", created="2024-06-01T00:00:00Z"),
        route("aaa", [to("v4", **same)], namespace="other", created="2024-06-01T00:00:00Z"),
    )
    assert first_match(rest, "/") == "v2"  # "apps/alpha" < "other/aaa"
    rules = ordered(
        route(
            "r",
            [
                to("v5", **same),
                {
                    "matches": [{"path": {"value": "/"}}, {"path": {"value": "/"}}],
                    "backendRefs": [{"name": "v6", "port": 80}],
                },
            ],
        )
    )
    assert [r.source.field for r in rules] == [
        "spec.rules[0].matches[0]",
        "spec.rules[1].matches[0]",
        "spec.rules[1].matches[1]",
    ]
    assert first_match(rules, "/") == "v5"


def test_timestamps_compare_as_instants_not_strings() -> None:
    same = {"path": {"value": "/"}}
    routes = ordered(
        route("a", [to("v1", **same)], created="2024-01-01T10:00:00+02:00"),
        route("b", [to("v2", **same)], created="2024-01-01T09:00:00Z"),
    )
    assert first_match(routes, "/") == "v1"  # 08:00Z is older than 09:00Z


# The conformance test HTTPRouteMatchingAcrossRoutes (one hostname of it): two routes whose rules
# interleave.
MATCHING_ACROSS_ROUTES = (
    route(
        "matching-part1",
        [
            {
                "matches": [
                    {"path": {"type": "PathPrefix", "value": "/"}},
                    {"headers": [{"name": "version", "value": "one"}]},
                ],
                "backendRefs": [{"name": "v1", "port": 80}],
            }
        ],
    ),
    route(
        "matching-part2",
        [
            {
                "matches": [
                    {"path": {"type": "PathPrefix", "value": "/v2"}},
                    {"headers": [{"name": "version", "value": "two"}]},
                ],
                "backendRefs": [{"name": "v2", "port": 80}],
            }
        ],
    ),
)


@pytest.mark.parametrize(
    ("path", "headers", "backend"),
    [
        ("/", {}, "v1"),
        ("/example", {}, "v1"),
        ("/v2", {}, "v2"),
        ("/v2/example", {}, "v2"),
        ("/", {"version": "one"}, "v1"),
        ("/", {"version": "two"}, "v2"),
        ("/v2example", {}, "v1"),
    ],
)
def test_matching_across_routes(path: str, headers: dict[str, str], backend: str) -> None:
    routes = ordered(*MATCHING_ACROSS_ROUTES)
    assert first_match(routes, path, **headers) == backend


# Paths in the manner of HTTPRoutePathMatchOrder: each request goes to the most specific match.
PATH_ORDER = route(
    "path-order",
    [
        to("v1", path={"type": "PathPrefix", "value": "/match"}),
        to("v2", path={"type": "PathPrefix", "value": "/match/prefix"}),
        to("v3", path={"type": "PathPrefix", "value": "/match/prefix/one"}),
        to("v4", path={"type": "Exact", "value": "/match/exact"}),
        to("v5", path={"type": "Exact", "value": "/match/exact/one"}),
        to("v6", path={"type": "PathPrefix", "value": "/match/prefix/one"}, method="POST"),
        to(
            "v7",
            path={"type": "PathPrefix", "value": "/match/prefix"},
            headers=[{"name": "h", "value": "1"}],
        ),
    ],
)


@pytest.mark.parametrize(
    ("path", "method", "headers", "backend"),
    [
        ("/match", "GET", {}, "v1"),
        ("/match/exact", "GET", {}, "v4"),
        ("/match/exact/one", "GET", {}, "v5"),
        ("/match/exact/two", "GET", {}, "v1"),
        ("/match/prefix", "GET", {}, "v2"),
        ("/match/prefix/two", "GET", {"h": "1"}, "v7"),
        ("/match/prefix/one/x", "GET", {"h": "1"}, "v3"),
        ("/match/prefix/one/x", "POST", {"h": "1"}, "v6"),
        ("/match/prefixone", "GET", {}, "v1"),
    ],
)
def test_path_match_order(path: str, method: str, headers: dict[str, str], backend: str) -> None:
    routes = ordered(PATH_ORDER)
    assert first_match(routes, path, method=method, **headers) == backend


def grpc_rule(backend: str, service: str = "", method: str = "", **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {}
    if service or method:
        m["method"] = {k: v for k, v in (("service", service), ("method", method)) if v}
    m.update(extra)
    return {"matches": [m], "backendRefs": [{"name": backend, "port": 80}]}


def test_grpc_precedence_service_then_method_then_headers() -> None:
    routes = ordered(
        route("a", [grpc_rule("v1")], kind="GRPCRoute"),
        route("b", [grpc_rule("v2", service="pkg.Svc")], kind="GRPCRoute"),
        route("c", [grpc_rule("v3", service="pkg.Svc", method="Get")], kind="GRPCRoute"),
        route("d", [grpc_rule("v4", method="Get")], kind="GRPCRoute"),
        route(
            "e",
            [grpc_rule("v5", service="pkg.Svc", headers=[{"name": "x", "value": "1"}])],
            kind="GRPCRoute",
        ),
    )
    post = "POST"
    assert first_match(routes, "/pkg.Svc/Get", method=post) == "v3"
    assert first_match(routes, "/pkg.Svc/Put", method=post, x="1") == "v5"
    assert first_match(routes, "/pkg.Svc/Put", method=post) == "v2"
    assert first_match(routes, "/other.Svc/Get", method=post) == "v4"
    assert first_match(routes, "/other.Svc/Put", method=post) == "v1"


def test_http_and_grpc_keys_stay_comparable() -> None:
    items = ranked(
        route("h", [to("v1", path={"value": "/"})]),
        route("g", [grpc_rule("v2", service="pkg.Svc")], kind="GRPCRoute"),
    )
    assert len(order_routes(items)) == 2


def test_a_split_prefix_rewrite_keeps_the_precedence_of_its_match() -> None:
    # ReplacePrefixMatch "/" becomes an exact route and a "/foo/" prefix route in the graph; both
    # still rank as the PathPrefix "/foo" they came from, so a "/foo" match with a header wins.
    strip = {
        "matches": [{"path": {"value": "/foo"}}],
        "filters": [
            {
                "type": "URLRewrite",
                "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
            }
        ],
        "backendRefs": [{"name": "v1", "port": 80}],
    }
    routes = ordered(
        route("a", [strip], created="2024-01-01T00:00:00Z"),
        route(
            "b",
            [to("v2", path={"value": "/foo"}, headers=[{"name": "x", "value": "1"}])],
            created="2024-06-01T00:00:00Z",
        ),
        route(
            "c", [to("v3", path={"type": "Exact", "value": "/foo"})], created="2024-06-01T00:00:00Z"
        ),
    )
    assert first_match(routes, "/foo", x="1") == "v3"
    assert first_match(routes, "/foo/a", x="1") == "v2"
    assert first_match(routes, "/foo/a") == "v1"
    assert first_match(routes, "/foo") == "v3"

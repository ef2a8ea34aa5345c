"""The caps that keep one object's compile short (issue 14: the worst object the limits allow
compiles in well under 100 ms, bench/worst_object.py). For each: an object at the cap compiles
and serves every route; one more is refused with a status naming the field and the cap."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import kube_object, service, snapshot
from turnout.app import compile_snapshot
from turnout.compile_inputs import DEFAULT_MAX_INCLUDE_REVISITS
from turnout.dialects.fields import LIST_CAPS, MAX_OBJECT_BACKENDS, MAX_OBJECT_ROUTES
from turnout.graph.build import CompileResult
from turnout.objects import KubeObject

HTTPPROXY = "projectcontour.io/v1"
INGRESSROUTE = "contour.heptio.com/v1beta1"
ROUTE = "contour.heptio.com/v1alpha1"
ROUTEGROUP = "zalando.org/v1"
INGRESS = "networking.k8s.io/v1"
NS = "a"


def _status(result: CompileResult, kind: str, name: str) -> str:
    for status in result.statuses:
        if status.ref.kind == kind and status.ref.name == name:
            return json.dumps(status.body)
    raise AssertionError(f"no status for {kind} {name}")


def _served(result: CompileResult, name: str) -> int:
    """The graph routes written by the object `name` (each host's copy counts)."""
    return sum(
        1
        for listener in result.graph.listeners
        for vh in listener.virtual_hosts
        for route in vh.routes
        if route.source.object.name == name
    )


def _compile(*objects: KubeObject) -> CompileResult:
    return compile_snapshot(snapshot(service("s", NS), *objects))


def _httpproxy_routes(n: int) -> list[KubeObject]:
    routes = [
        {"conditions": [{"prefix": f"/r{i}"}], "services": [{"name": "s", "port": 80}]}
        for i in range(n)
    ]
    spec = {"virtualhost": {"fqdn": "big.example.com"}, "routes": routes}
    return [kube_object(HTTPPROXY, "HTTPProxy", "big", NS, spec=spec)]


def _httpproxy_includes(n: int, child_routes: int = 1) -> list[KubeObject]:
    includes = [{"name": "child", "conditions": [{"prefix": f"/i{i}"}]} for i in range(n)]
    spec = {"virtualhost": {"fqdn": "big.example.com"}, "includes": includes}
    child = {
        "routes": [
            {"conditions": [{"prefix": f"/r{i}"}], "services": [{"name": "s", "port": 80}]}
            for i in range(child_routes)
        ]
    }
    return [
        kube_object(HTTPPROXY, "HTTPProxy", "big", NS, spec=spec),
        kube_object(HTTPPROXY, "HTTPProxy", "child", NS, spec=child),
    ]


def _ingressroute_routes(n: int) -> list[KubeObject]:
    routes = [{"match": f"/r{i}", "services": [{"name": "s", "port": 80}]} for i in range(n)]
    spec = {"virtualhost": {"fqdn": "big.example.com"}, "routes": routes}
    return [kube_object(INGRESSROUTE, "IngressRoute", "big", NS, spec=spec)]


def _contour_route_routes(n: int) -> list[KubeObject]:
    routes = [
        {"pathPrefix": f"/r{i}", "upstreams": [{"serviceName": "s", "servicePort": 80}]}
        for i in range(n)
    ]
    spec = {"host": "big.example.com", "routes": routes}
    return [kube_object(ROUTE, "Route", "big", NS, spec=spec)]


def _routegroup(routes: int, hosts: int = 1) -> list[KubeObject]:
    spec = {
        "hosts": [f"h{i}.example.com" for i in range(hosts)],
        "backends": [{"name": "b", "type": "service", "serviceName": "s", "servicePort": 80}],
        "defaultBackends": [{"backendName": "b"}],
        "routes": [{"path": f"/r{i}"} for i in range(routes)],
    }
    return [kube_object(ROUTEGROUP, "RouteGroup", "big", NS, spec=spec)]


def _ingress(rules: int, paths: int) -> list[KubeObject]:
    def path(j: int) -> dict[str, Any]:
        backend = {"service": {"name": "s", "port": {"number": 80}}}
        return {"path": f"/r{j}", "pathType": "Prefix", "backend": backend}

    spec = {
        "ingressClassName": "turnout",
        "rules": [
            {"host": f"h{i}.example.com", "http": {"paths": [path(j) for j in range(paths)]}}
            for i in range(rules)
        ],
    }
    return [kube_object(INGRESS, "Ingress", "big", NS, spec=spec)]


ROUTES, RULES, PATHS, INCLUDES = (LIST_CAPS[k] for k in ("routes", "rules", "paths", "includes"))

# (kind, objects of n entries, the field the cap is on, cap)
LIST_CASES: list[tuple[str, Callable[[int], list[KubeObject]], str, int]] = [
    ("HTTPProxy", _httpproxy_routes, "spec.routes", ROUTES),
    ("HTTPProxy", _httpproxy_includes, "spec.includes", INCLUDES),
    ("IngressRoute", _ingressroute_routes, "spec.routes", ROUTES),
    ("Route", _contour_route_routes, "spec.routes", ROUTES),
    ("RouteGroup", _routegroup, "spec.routes", ROUTES),
    ("Ingress", lambda n: _ingress(1, n), "spec.rules[0].http.paths", PATHS),
    ("Ingress", lambda n: _ingress(n, 1), "spec.rules", RULES),
]


def test_the_lists_of_routes_are_capped_at_256() -> None:
    assert (ROUTES, RULES, PATHS, INCLUDES) == (256, 256, 256, 256)
    assert MAX_OBJECT_ROUTES == 256
    assert DEFAULT_MAX_INCLUDE_REVISITS == 2048
    assert MAX_OBJECT_BACKENDS == 512


@pytest.mark.parametrize(
    ("kind", "build", "field", "cap"), LIST_CASES, ids=[f"{c[0]}-{c[2]}" for c in LIST_CASES]
)
def test_an_object_at_a_list_cap_serves_every_route(
    kind: str, build: Callable[[int], list[KubeObject]], field: str, cap: int
) -> None:
    result = _compile(*build(cap))
    assert _served(result, "big") + _served(result, "child") == cap
    assert "must have at most" not in _status(result, kind, "big")


@pytest.mark.parametrize(
    ("kind", "build", "field", "cap"), LIST_CASES, ids=[f"{c[0]}-{c[2]}" for c in LIST_CASES]
)
def test_one_entry_over_a_list_cap_is_an_error_naming_the_field_and_the_cap(
    kind: str, build: Callable[[int], list[KubeObject]], field: str, cap: int
) -> None:
    result = _compile(*build(cap + 1))
    assert f"{field}: must have at most {cap} items, got {cap + 1}" in _status(result, kind, "big")


def test_an_ingress_may_make_256_routes_over_all_its_rules() -> None:
    at_cap = _compile(*_ingress(2, MAX_OBJECT_ROUTES // 2))
    assert _served(at_cap, "big") == MAX_OBJECT_ROUTES
    over = _compile(*_ingress(2, MAX_OBJECT_ROUTES // 2 + 1))
    assert _served(over, "big") == 0
    assert (
        "spec.rules: may make at most 256 routes in total (paths over all rules), got 258"
        in _status(over, "Ingress", "big")
    )


def test_a_routegroup_may_make_256_routes_over_its_hosts_and_methods() -> None:
    at_cap = _compile(*_routegroup(MAX_OBJECT_ROUTES // 4, hosts=4))
    assert _served(at_cap, "big") == MAX_OBJECT_ROUTES
    over = _compile(*_routegroup(MAX_OBJECT_ROUTES // 4 + 1, hosts=4))
    assert _served(over, "big") == 0
    assert (
        "spec: may make at most 256 routes in total (hosts x routes x methods), got 260"
        in _status(over, "RouteGroup", "big")
    )


def test_a_routegroup_counts_each_method_of_a_route() -> None:
    (rg,) = _routegroup(1)
    spec = dict(rg.raw["spec"])
    spec["routes"] = [{"path": f"/r{i}", "methods": ["GET", "POST"]} for i in range(129)]
    over = _compile(kube_object(ROUTEGROUP, "RouteGroup", "big", NS, spec=spec))
    assert "may make at most 256 routes in total (hosts x routes x methods), got 258" in (
        _status(over, "RouteGroup", "big")
    )


def test_an_httpproxy_root_pays_for_each_route_it_walks_again() -> None:
    # One child of 128 routes included under k prefixes is walked k times: k - 1 revisits of
    # 1 + 128 each against --max-include-revisits (2,048): 15 x 129 = 1,935 fits, 16 x 129
    # does not.
    at_budget = _compile(*_httpproxy_includes(16, 128))
    assert _served(at_budget, "child") == 16 * 128
    over = _compile(*_httpproxy_includes(17, 128))
    assert _served(over, "child") == 0
    assert (
        "the include graph of this root walks HTTPProxies it already walked on another path, "
        "for more than 2048 proxies and routes (--max-include-revisits)"
        in _status(over, "HTTPProxy", "big")
    )


def test_an_httpproxy_root_may_include_many_distinct_children() -> None:
    # A shared host including many teams walks each child once: nothing is charged, however
    # many routes the tree has in all.
    teams, per_team = 256, 12
    root = {
        "virtualhost": {"fqdn": "shared.example.com"},
        "includes": [
            {"name": f"team{i}", "conditions": [{"prefix": f"/t{i}"}]} for i in range(teams)
        ],
    }
    child = {
        "routes": [
            {"conditions": [{"prefix": f"/r{j}"}], "services": [{"name": "s", "port": 80}]}
            for j in range(per_team)
        ]
    }
    objects = [
        service("s", namespace=NS),
        kube_object(HTTPPROXY, "HTTPProxy", "big", NS, spec=root),
    ]
    objects += [
        kube_object(HTTPPROXY, "HTTPProxy", f"team{i}", NS, spec=child) for i in range(teams)
    ]
    result = _compile(*objects)
    assert "IncludeGraphTooLarge" not in _status(result, "HTTPProxy", "big")
    assert sum(_served(result, f"team{i}") for i in range(teams)) == teams * per_team


def _ingressroute_tree(delegations: int, child_routes: int) -> list[KubeObject]:
    root = {
        "virtualhost": {"fqdn": "big.example.com"},
        "routes": [{"match": "/", "delegate": {"name": "child"}}] * delegations,
    }
    child = {
        "routes": [
            {"match": f"/r{i}", "services": [{"name": "s", "port": 80}]}
            for i in range(child_routes)
        ]
    }
    return [
        kube_object(INGRESSROUTE, "IngressRoute", "big", NS, spec=root),
        kube_object(INGRESSROUTE, "IngressRoute", "child", NS, spec=child),
    ]


def test_an_ingressroute_root_pays_for_each_route_it_walks_again() -> None:
    # d delegations to one child of 127 routes: d - 1 revisits of 1 + 127 each against
    # --max-include-revisits (2,048): 16 x 128 = 2,048 fits, 17 x 128 does not.
    at_budget = _compile(*_ingressroute_tree(17, 127))
    assert _served(at_budget, "child") > 0
    assert "DelegationGraphTooLarge" not in _status(at_budget, "IngressRoute", "big")
    over = _compile(*_ingressroute_tree(18, 127))
    assert _served(over, "child") == 0
    assert (
        "the delegation graph of this root walks IngressRoutes it already walked on another "
        "path, for more than 2048 objects and routes (--max-include-revisits)"
        in _status(over, "IngressRoute", "big")
    )


def _with_backends(kind: str, routes: int, per_route: int) -> KubeObject:
    """`routes` routes of `per_route` backend references each, in the dialect's own words."""
    if kind == "HTTPProxy":
        (obj,) = _httpproxy_routes(routes)
        key, ref = "services", {"name": "s", "port": 80, "weight": 1}
    elif kind == "IngressRoute":
        (obj,) = _ingressroute_routes(routes)
        key, ref = "services", {"name": "s", "port": 80, "weight": 1}
    elif kind == "Route":
        (obj,) = _contour_route_routes(routes)
        # Route weights are percentages adding up to 100.
        weight = 100 // per_route
        key, ref = "upstreams", {"serviceName": "s", "servicePort": 80, "weight": weight}
    else:
        (obj,) = _routegroup(routes)
        key, ref = "backends", {}
    spec = json.loads(json.dumps(obj.raw["spec"], default=dict))
    if kind == "RouteGroup":
        # A RouteGroup names each backend once per route: declare as many as a route uses.
        backend = {"type": "service", "serviceName": "s", "servicePort": 80}
        spec["backends"] = [{"name": f"b{k}", **backend} for k in range(per_route)]
        spec["defaultBackends"] = [{"backendName": "b0"}]
    for route in spec["routes"]:
        route[key] = (
            [{"backendName": f"b{k}", "weight": 1} for k in range(per_route)]
            if kind == "RouteGroup"
            else [ref] * per_route
        )
    return kube_object(obj.api_version, kind, "big", NS, spec=spec)


BACKEND_CASES = [
    ("HTTPProxy", "services"),
    ("IngressRoute", "services"),
    ("Route", "upstreams"),
    ("RouteGroup", "backends (a route's or the default ones)"),
]


@pytest.mark.parametrize(("kind", "what"), BACKEND_CASES, ids=[c[0] for c in BACKEND_CASES])
def test_the_routes_of_an_object_name_at_most_512_backends(kind: str, what: str) -> None:
    at_cap = _compile(_with_backends(kind, 128, MAX_OBJECT_BACKENDS // 128))
    assert _served(at_cap, "big") == 128
    over = _compile(_with_backends(kind, 129, MAX_OBJECT_BACKENDS // 128))
    assert _served(over, "big") == 0
    assert f"spec.routes: may name at most 512 {what} over all routes, got 516" in _status(
        over, kind, "big"
    )

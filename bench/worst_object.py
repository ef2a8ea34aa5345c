"""The worst compile time one object can cost, within the limits turnout enforces.

For each dialect, builds the largest or most pathological single object the list caps
(`turnout.dialects.fields.LIST_CAPS`, the Gateway API's maxItems) and `--max-file-bytes` allow:
every list at its cap with each item invalid, and at its cap with each item valid; then the
objects whose lists multiply up to the per-object totals (`MAX_OBJECT_ROUTES`,
`MAX_OBJECT_BACKENDS`), an HTTPRoute whose rules redirect (compiled once per listener port),
and, reported apart, an HTTPProxy include tree at `--max-include-revisits` (two objects: a
root including one child of 128 routes under 16 prefixes). Times
`turnout.app.compile_snapshot` of it next to one small neighbour (a valid HTTPProxy in another
namespace), best of `--repeat`, wall clock and CPU time. Fails (exit 1) when a single-object
case takes `--budget-ms` or more (wall clock; CPU time with `--cpu`). Run:

    PYTHONPATH=src python3 bench/worst_object.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from turnout.app import compile_snapshot
from turnout.compile_inputs import DEFAULT_MAX_INCLUDE_REVISITS
from turnout.dialects.fields import (
    LIST_CAPS,
    MAX_OBJECT_BACKENDS,
    MAX_OBJECT_ROUTES,
)
from turnout.objects import KubeObject, freeze, thaw
from turnout.store import Snapshot

Doc = dict[str, Any]
ROUTES = LIST_CAPS["routes"]
PATHS = LIST_CAPS["paths"]
GATEWAY_RULES, GATEWAY_REFS, GATEWAY_LISTENERS = 16, 16, 64


def obj(api: str, kind: str, name: str, ns: str, spec: Any) -> KubeObject:
    raw = {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}}
    raw["spec"] = spec
    return KubeObject(api, kind, ns, name, freeze(raw))


def service(ns: str, name: str = "s") -> KubeObject:
    raw = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"port": 80}]},
    }
    return KubeObject("v1", "Service", ns, name, freeze(raw))


def neighbour() -> list[KubeObject]:
    spec = {
        "virtualhost": {"fqdn": "neighbour.example.com"},
        "routes": [{"conditions": [{"prefix": "/"}], "services": [{"name": "s", "port": 80}]}],
    }
    return [service("n"), obj("projectcontour.io/v1", "HTTPProxy", "n", "n", spec)]


def httpproxy(valid: bool) -> list[KubeObject]:
    routes: list[Any] = (
        [
            {
                "conditions": [{"prefix": f"/r{i}"}, {"header": {"name": "x", "exact": str(i)}}],
                "services": [{"name": "s", "port": 80}],
            }
            for i in range(ROUTES)
        ]
        if valid
        else [1] * ROUTES
    )
    spec = {"virtualhost": {"fqdn": "big.example.com"}, "routes": routes}
    return [service("a"), obj("projectcontour.io/v1", "HTTPProxy", "big", "a", spec)]


def ingressroute(valid: bool) -> list[KubeObject]:
    routes: list[Any] = (
        [{"match": f"/r{i}", "services": [{"name": "s", "port": 80}]} for i in range(ROUTES)]
        if valid
        else [{"match": 1, "services": 1}] * ROUTES
    )
    spec = {"virtualhost": {"fqdn": "big.example.com"}, "routes": routes}
    return [service("a"), obj("contour.heptio.com/v1beta1", "IngressRoute", "big", "a", spec)]


def contour_route(valid: bool) -> list[KubeObject]:
    routes: list[Any] = (
        [
            {"pathPrefix": f"/r{i}", "upstreams": [{"serviceName": "s", "servicePort": 80}]}
            for i in range(ROUTES)
        ]
        if valid
        else [{"pathPrefix": 1}] * ROUTES
    )
    spec = {"host": "big.example.com", "routes": routes}
    return [service("a"), obj("contour.heptio.com/v1alpha1", "Route", "big", "a", spec)]


def ingress(valid: bool) -> list[KubeObject]:
    paths: list[Any] = (
        [
            {
                "path": f"/r{i}",
                "pathType": "Prefix",
                "backend": {"service": {"name": "s", "port": {"number": 80}}},
            }
            for i in range(PATHS)
        ]
        if valid
        else [{"path": 1}] * PATHS
    )
    spec = {
        "ingressClassName": "turnout",
        "rules": [{"host": "big.example.com", "http": {"paths": paths}}],
    }
    return [service("a"), obj("networking.k8s.io/v1", "Ingress", "big", "a", spec)]


def routegroup(valid: bool) -> list[KubeObject]:
    routes: list[Any] = (
        [
            {"path": f"/r{i}", "methods": ["GET"], "filters": ['setPath("/x")']}
            for i in range(ROUTES)
        ]
        if valid
        else [1] * ROUTES
    )
    spec = {
        "hosts": ["big.example.com"],
        "backends": [{"name": "b", "type": "service", "serviceName": "s", "servicePort": 80}],
        "defaultBackends": [{"backendName": "b"}],
        "routes": routes,
    }
    return [service("a"), obj("zalando.org/v1", "RouteGroup", "big", "a", spec)]


GW = "gateway.networking.k8s.io/v1"


def gateway_parts() -> list[KubeObject]:
    cls = KubeObject(
        GW,
        "GatewayClass",
        "",
        "turnout",
        freeze(
            {
                "apiVersion": GW,
                "kind": "GatewayClass",
                "metadata": {"name": "turnout"},
                "spec": {"controllerName": "turnout.dev/gateway-controller"},
            }
        ),
    )
    listeners = [
        {"name": f"l{i}", "port": 9000 + i, "protocol": "HTTP", "hostname": f"h{i}.example.com"}
        for i in range(GATEWAY_LISTENERS)
    ]
    spec = {"gatewayClassName": "turnout", "listeners": listeners}
    return [cls, obj(GW, "Gateway", "gw", "a", spec)]


def httproute(valid: bool) -> list[KubeObject]:
    # The total-matches cap (128) bounds a route: 16 rules of 8 matches. (More is refused
    # before any match is compiled.) Each route compiles once per listener port it attaches to.
    per_rule = 8
    match: Callable[[int, int], Doc] = (
        (
            lambda r, m: {
                "path": {"type": "PathPrefix", "value": f"/r{r}/m{m}"},
                "headers": [{"name": "x", "value": str(m)}],
            }
        )
        if valid
        else (lambda r, m: {"path": {"type": "RegularExpression", "value": "("}})
    )
    rules = [
        {
            "matches": [match(r, m) for m in range(per_rule)],
            "backendRefs": [{"name": "s", "port": 80}] * GATEWAY_REFS,
        }
        for r in range(GATEWAY_RULES)
    ]
    spec = {
        "parentRefs": [{"name": "gw", "sectionName": f"l{i}"} for i in range(32)],
        "hostnames": [f"h{i}.example.com" for i in range(16)],
        "rules": rules,
    }
    return [service("a"), *gateway_parts(), obj(GW, "HTTPRoute", "big", "a", spec)]


def httpproxy_services() -> list[KubeObject]:
    # Every route with a header condition and its share of the object's backend references.
    per_route = MAX_OBJECT_BACKENDS // ROUTES
    routes = [
        {
            "conditions": [{"prefix": f"/r{i}"}, {"header": {"name": "x", "exact": str(i)}}],
            "services": [{"name": "s", "port": 80, "weight": 1 + k} for k in range(per_route)],
        }
        for i in range(ROUTES)
    ]
    spec = {"virtualhost": {"fqdn": "big.example.com"}, "routes": routes}
    return [service("a"), obj("projectcontour.io/v1", "HTTPProxy", "big", "a", spec)]


def routegroup_hosts() -> list[KubeObject]:
    # 16 hosts x 16 routes of one method each: the object's route total.
    hosts = 16
    spec = {
        "hosts": [f"h{i}.example.com" for i in range(hosts)],
        "backends": [{"name": "b", "type": "service", "serviceName": "s", "servicePort": 80}],
        "defaultBackends": [{"backendName": "b"}],
        "routes": [
            {"path": f"/r{i}", "methods": ["GET"], "filters": ['setPath("/x")']}
            for i in range(MAX_OBJECT_ROUTES // hosts)
        ],
    }
    return [service("a"), obj("zalando.org/v1", "RouteGroup", "big", "a", spec)]


def ingress_hosts() -> list[KubeObject]:
    # One path in each of 256 rules, each rule its own host (virtual host).
    backend = {"service": {"name": "s", "port": {"number": 80}}}
    rules = [
        {
            "host": f"h{i}.example.com",
            "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]},
        }
        for i in range(MAX_OBJECT_ROUTES)
    ]
    spec = {"ingressClassName": "turnout", "rules": rules}
    return [service("a"), obj("networking.k8s.io/v1", "Ingress", "big", "a", spec)]


def httproute_redirects() -> list[KubeObject]:
    # Redirects depend on the listener's port and scheme: compiled once per port (32 here).
    rules = [
        {
            "matches": [
                {
                    "path": {"type": "PathPrefix", "value": f"/r{r}/m{m}"},
                    "headers": [{"name": "x", "value": str(m)}],
                }
                for m in range(8)
            ],
            "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "x.test"}}],
        }
        for r in range(GATEWAY_RULES)
    ]
    spec = {
        "parentRefs": [{"name": "gw", "sectionName": f"l{i}"} for i in range(32)],
        "hostnames": [f"h{i}.example.com" for i in range(16)],
        "rules": rules,
    }
    return [service("a"), *gateway_parts(), obj(GW, "HTTPRoute", "big", "a", spec)]


def httpproxy_tree() -> list[KubeObject]:
    # Two objects: a root including one child under 16 prefixes, the child with 128 routes: 15
    # revisits of 1 + 128, the most --max-include-revisits' default (2,048) allows.
    per_child = 128
    includes = [
        {"name": "child", "conditions": [{"prefix": f"/i{i}"}]}
        for i in range(DEFAULT_MAX_INCLUDE_REVISITS // (per_child + 1) + 1)
    ]
    child = {
        "routes": [
            {
                "conditions": [{"prefix": f"/r{i}"}, {"header": {"name": "x", "exact": str(i)}}],
                "services": [{"name": "s", "port": 80}],
            }
            for i in range(per_child)
        ]
    }
    root = {"virtualhost": {"fqdn": "big.example.com"}, "includes": includes}
    return [
        service("a"),
        obj("projectcontour.io/v1", "HTTPProxy", "big", "a", root),
        obj("projectcontour.io/v1", "HTTPProxy", "child", "a", child),
    ]


# Valid objects whose lists multiply up to a per-object total.
TOTALS: dict[str, Callable[[], list[KubeObject]]] = {
    f"HTTPProxy ({ROUTES} x {MAX_OBJECT_BACKENDS // ROUTES} services)": httpproxy_services,
    "RouteGroup (16 hosts)": routegroup_hosts,
    f"Ingress ({MAX_OBJECT_ROUTES} hosts)": ingress_hosts,
    "HTTPRoute (redirects)": httproute_redirects,
}
# More than one object: not held to the budget, reported for what a tree can cost.
TREES: dict[str, Callable[[], list[KubeObject]]] = {
    "HTTPProxy tree (16 x 128 routes)": httpproxy_tree,
}


CASES: dict[str, Callable[[bool], list[KubeObject]]] = {
    "HTTPProxy": httpproxy,
    "IngressRoute": ingressroute,
    "Route": contour_route,
    "Ingress": ingress,
    "RouteGroup": routegroup,
    "HTTPRoute+Gateway": httproute,
}


def best_ms(objects: list[KubeObject], repeat: int) -> tuple[float, float]:
    """The best wall-clock and the best CPU time (ms) of `repeat` compiles. On a shared machine
    the wall clock also counts the time spent waiting for a core; the CPU time does not."""
    snapshot = Snapshot.of([*objects, *neighbour()])
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        compile_snapshot(snapshot)
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - started_cpu)
    return best * 1000, best_cpu * 1000


def json_bytes(objects: list[KubeObject]) -> int:
    return sum(len(json.dumps(thaw(o.raw))) for o in objects)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget-ms", type=float, default=100.0)
    parser.add_argument(
        "--cpu", action="store_true", help="hold the CPU time, not the wall clock, to the budget"
    )
    args = parser.parse_args()
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"# {python}, {os.cpu_count()} cpus, best of {args.repeat}")
    print(f"# load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<36} {'JSON bytes':>10} {'best ms':>8} {'CPU ms':>8}")
    over = []
    cases: list[tuple[str, Callable[[], list[KubeObject]], bool]] = []
    for name, build in CASES.items():
        for valid in (False, True):
            label = f"{name} ({'valid' if valid else 'invalid'})"
            cases.append((label, lambda build=build, valid=valid: build(valid), True))
    cases += [(label, build, True) for label, build in TOTALS.items()]
    cases += [(label, build, False) for label, build in TREES.items()]
    for label, make, budgeted in cases:
        objects = make()
        ms, cpu_ms = best_ms(objects, args.repeat)
        print(f"{label:<36} {json_bytes(objects):>10} {ms:>8.1f} {cpu_ms:>8.1f}", flush=True)
        if budgeted and (cpu_ms if args.cpu else ms) >= args.budget_ms:
            over.append(label)
    if over:
        print(f"over {args.budget_ms} ms: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

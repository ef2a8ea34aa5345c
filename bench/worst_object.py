"""The worst compile time one object can cost, within the limits turnout enforces.

For each dialect, builds the largest or most pathological single object the list caps
(`turnout.dialects.fields.LIST_CAPS`, the Gateway API's maxItems) and `--max-file-bytes` allow:
every list at its cap with each item invalid, and at its cap with each item valid. Times
`turnout.app.compile_snapshot` of it next to one small neighbour (a valid HTTPProxy in another
namespace), best of `--repeat`. Fails (exit 1) when a case takes `--budget-ms` or more. Run:

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
from turnout.dialects.fields import LIST_CAPS
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


CASES: dict[str, Callable[[bool], list[KubeObject]]] = {
    "HTTPProxy": httpproxy,
    "IngressRoute": ingressroute,
    "Route": contour_route,
    "Ingress": ingress,
    "RouteGroup": routegroup,
    "HTTPRoute+Gateway": httproute,
}


def best_ms(objects: list[KubeObject], repeat: int) -> float:
    snapshot = Snapshot.of([*objects, *neighbour()])
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        compile_snapshot(snapshot)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def json_bytes(objects: list[KubeObject]) -> int:
    return sum(len(json.dumps(thaw(o.raw))) for o in objects)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget-ms", type=float, default=100.0)
    args = parser.parse_args()
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"# {python}, {os.cpu_count()} cpus, best of {args.repeat}")
    print(f"{'case':<28} {'JSON bytes':>10} {'best ms':>8}")
    over = []
    for name, build in CASES.items():
        for valid in (False, True):
            objects = build(valid)
            ms = best_ms(objects, args.repeat)
            label = f"{name} ({'valid' if valid else 'invalid'})"
            print(f"{label:<28} {json_bytes(objects):>10} {ms:>8.1f}")
            if ms >= args.budget_ms:
                over.append(label)
    if over:
        print(f"over {args.budget_ms} ms: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

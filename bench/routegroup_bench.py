"""Measures the RouteGroup dialect's compile path at scale, against a parse baseline and against
the HTTPProxy compile of the same route table.

The same workloads as bench/gateway_bench.py, written as Skipper RouteGroups: N RouteGroups in
one namespace, each with one host (`scale`: spread over 5 hosts; `hostnames`: one host each),
one route `pathSubtree: /route-<i>` and one `type: service` backend (its own Service and
EndpointSlice by default). The HTTPProxy comparison is the same one gateway_bench.py uses; every
figure is a ratio against parsing the RouteGroups' YAML in the same run. Run:

    python3 bench/routegroup_bench.py --routes 1000 --repeat 5
    python3 bench/routegroup_bench.py --routes 5000 --repeat 3 --gc-probe
    python3 bench/routegroup_bench.py --routes 5000 --repeat 1 --variant hostnames --profile 15
"""

from __future__ import annotations

from gateway_bench import NAMESPACE, backend_docs, hostname, run


def routegroup_yaml(routes: int, hosts: int, backends: int) -> str:
    """`routes` RouteGroups over `hosts` hosts, one route and one Service backend each."""
    docs: list[str] = []
    for i in range(routes):
        svc = f"svc-{i % backends}"
        docs.append(
            "apiVersion: zalando.org/v1\nkind: RouteGroup\n"
            f"metadata: {{name: benchmark-route-{i}, namespace: {NAMESPACE}}}\n"
            f"spec:\n  hosts: [{hostname(i, hosts, routes)}]\n"
            f"  backends: [{{name: {svc}, type: service, serviceName: {svc}, servicePort: 8080}}]\n"
            "  routes:\n"
            f"    - pathSubtree: /route-{i}\n"
            f"      backends: [{{backendName: {svc}}}]\n"
        )
    docs.extend(backend_docs(backends))
    return "---\n".join(docs)


if __name__ == "__main__":
    run("RouteGroup", "RouteGroups", routegroup_yaml, __doc__)

"""Measures the per-change hot path: store snapshot -> routing graph -> Envoy resources -> bytes.

The machines are shared and noisy, so every figure is reported as a ratio against a baseline
measured in the same run: parsing the same objects' YAML with PyYAML (work every change already
pays in the files source). Run:

    python3 bench/compile_bench.py --proxies 1000 --routes 5 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

from turnout.app import compile_snapshot
from turnout.envoy.translate import translate
from turnout.sources.parse import parse_text
from turnout.store import Snapshot


def generate(proxies: int, routes: int) -> str:
    """A root per team with `routes` routes, half of the roots including a child proxy."""
    docs: list[str] = []
    for i in range(proxies):
        ns = f"team-{i}"
        docs.append(
            f"apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: {ns}}}\n"
            f"spec: {{ports: [{{name: http, port: 80}}]}}\n"
        )
        docs.append(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
            f"metadata: {{name: app-1, namespace: {ns}, labels: "
            "{kubernetes.io/service-name: app}}\n"
            "ports: [{name: http, port: 8080}]\n"
            f"endpoints: [{{addresses: [10.0.{i // 250}.{i % 250}]}}]\n"
        )
        route_lines = "".join(
            f"    - conditions: [{{prefix: /r{r}}}, {{header: {{name: x-r, exact: '{r}'}}}}]\n"
            f"      services: [{{name: app, port: 80}}]\n"
            for r in range(routes)
        )
        include = (
            f"  includes: [{{name: child, namespace: {ns}, conditions: [{{prefix: /child}}]}}]\n"
            if i % 2 == 0
            else ""
        )
        docs.append(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
            f"metadata: {{name: root, namespace: {ns}}}\n"
            f"spec:\n  virtualhost: {{fqdn: host{i}.example.com}}\n  routes:\n{route_lines}"
            f"{include}"
        )
        if i % 2 == 0:
            docs.append(
                "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
                f"metadata: {{name: child, namespace: {ns}}}\n"
                "spec:\n  routes:\n    - conditions: [{prefix: /}]\n"
                "      services: [{name: app, port: 80}]\n"
            )
    return "---\n".join(docs)


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--proxies", type=int, default=1000)
    parser.add_argument("--routes", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    text = generate(args.proxies, args.routes)
    parsed = parse_text(text, "bench.yaml")
    snapshot = Snapshot.of(parsed.objects)
    result = compile_snapshot(snapshot)
    resources = translate(result.graph)
    n_routes = sum(len(vh.routes) for lst in result.graph.listeners for vh in lst.virtual_hosts)

    t_parse = best_of(args.repeat, lambda: parse_text(text, "bench.yaml"))
    t_compile = best_of(args.repeat, lambda: compile_snapshot(snapshot))
    t_translate = best_of(args.repeat, lambda: translate(result.graph))
    t_serialize = best_of(
        args.repeat,
        lambda: [
            m.SerializeToString(deterministic=True)
            for msgs in resources.by_type().values()
            for m in msgs
        ],
    )
    total = t_compile + t_translate + t_serialize
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}"
    )
    print(
        f"input: {len(parsed.objects)} objects, {args.proxies} roots, {n_routes} routes, "
        f"{len(result.graph.clusters)} clusters; median of {args.repeat}"
    )
    print(f"baseline  parse YAML         {t_parse * 1000:9.1f} ms  1.00x")
    for label, t in (
        ("compile graph", t_compile),
        ("translate to Envoy", t_translate),
        ("serialize protos", t_serialize),
        ("compile+translate+serialize", total),
    ):
        print(f"          {label:<27}{t * 1000:9.1f} ms  {t / t_parse:.2f}x")


if __name__ == "__main__":
    main()

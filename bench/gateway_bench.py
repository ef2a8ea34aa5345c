"""Measures the Gateway API dialect's compile path at scale, against a parse baseline and against
the HTTPProxy compile of the same route table.

Modelled on Envoy Gateway's release benchmark ScaleHTTPRoute (test/benchmark/tests/
scale_httproutes.go, reference/gateway-api.md §5.1): one Gateway with one HTTP listener
(`allowedRoutes: Same`), N HTTPRoutes in its namespace spread over 5 hostnames
(`www.benchmark-<k>.com`), each with one PathPrefix rule and a backend Service. Upstream every
route points at one Service with PathPrefix `/`, so on each hostname only the oldest route's
rule is ever matched; here each route has its own path (`/route-<i>`) and, by default, its own
Service (with an EndpointSlice), so every route is reachable and every backend is resolved.
The `hostnames` variant gives each route its own hostname, so N virtual hosts instead of 5.

The machines are shared and noisy, so every figure is a ratio against a baseline measured in the
same run: parsing the same objects' YAML (work every change already pays in the files source).
The HTTPProxy comparison compiles one root HTTPProxy per hostname listing the same routes (same
prefixes, same Services), timed interleaved with the Gateway figures. Run:

    python3 bench/gateway_bench.py --routes 1000 --repeat 5
    python3 bench/gateway_bench.py --routes 5000 --repeat 3 --gc-probe
    python3 bench/gateway_bench.py --routes 5000 --repeat 1 --variant hostnames --profile 30
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from turnout.app import compile_snapshot
from turnout.dialects.fields import LIST_CAPS
from turnout.envoy.translate import translate
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

NAMESPACE = "benchmark-test"
# The most routes one HTTPProxy may hold: a larger host is a root including children.
ROUTES_CAP = LIST_CAPS["routes"]
GATEWAY = "benchmark"
# Upstream spreads the routes over 5 hostnames (`totalHosts`).
SCALE_HOSTS = 5


def backend_docs(backends: int, namespace: str = NAMESPACE) -> list[str]:
    """One Service and one EndpointSlice per backend, `svc-<k>` on port 8080."""
    docs: list[str] = []
    for k in range(backends):
        docs.append(
            f"apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{k}, namespace: {namespace}}}\n"
            "spec: {ports: [{name: http, port: 8080}]}\n"
        )
        docs.append(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
            f"metadata: {{name: svc-{k}, namespace: {namespace}, labels: "
            f"{{kubernetes.io/service-name: svc-{k}}}}}\n"
            "addressType: IPv4\nports: [{name: http, port: 8080}]\n"
            f"endpoints: [{{addresses: ['10.{k // 62500}.{k // 250 % 250}.{k % 250 + 1}']}}]\n"
        )
    return docs


def hostname(i: int, hosts: int, routes: int) -> str:
    # With one hostname per route the names follow the route; otherwise upstream's format.
    return f"route-{i}.benchmark.com" if hosts == routes else f"www.benchmark-{i % hosts}.com"


def gateway_yaml(routes: int, hosts: int, backends: int) -> str:
    """A GatewayClass, one Gateway and `routes` HTTPRoutes over `hosts` hostnames."""
    docs = [
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n"
        "metadata: {name: turnout}\nspec: {controllerName: turnout.dev/gateway-controller}\n",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n"
        f"metadata: {{name: {GATEWAY}, namespace: {NAMESPACE}}}\n"
        "spec:\n  gatewayClassName: turnout\n  listeners:\n"
        "    - {name: http, port: 8081, protocol: HTTP, "
        "allowedRoutes: {namespaces: {from: Same}}}\n",
    ]
    for i in range(routes):
        docs.append(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
            f"metadata: {{name: benchmark-route-{i}, namespace: {NAMESPACE}}}\n"
            f"spec:\n  parentRefs: [{{name: {GATEWAY}}}]\n"
            f"  hostnames: [{hostname(i, hosts, routes)}]\n"
            "  rules:\n"
            f"    - matches: [{{path: {{type: PathPrefix, value: /route-{i}}}}}]\n"
            f"      backendRefs: [{{name: svc-{i % backends}, port: 8080}}]\n"
        )
    docs.extend(backend_docs(backends))
    return "---\n".join(docs)


def httpproxy_yaml(routes: int, hosts: int, backends: int) -> str:
    """The same route table as `gateway_yaml` as HTTPProxies: one root per hostname."""
    by_host: dict[str, list[int]] = {}
    for i in range(routes):
        by_host.setdefault(hostname(i, hosts, routes), []).append(i)
    docs: list[str] = []
    for n, (fqdn, indices) in enumerate(by_host.items()):
        if len(indices) <= ROUTES_CAP:
            docs.append(
                _proxy(f"root-{n}", f"  virtualhost: {{fqdn: {fqdn}}}\n", indices, backends)
            )
            continue
        # More routes than one HTTPProxy may hold: the root includes children of up to the cap.
        chunks = [indices[k : k + ROUTES_CAP] for k in range(0, len(indices), ROUTES_CAP)]
        includes = "".join(f"    - name: root-{n}-{k}\n" for k in range(len(chunks)))
        head = f"  virtualhost: {{fqdn: {fqdn}}}\n  includes:\n{includes}"
        docs.append(_proxy(f"root-{n}", head, [], backends))
        docs.extend(_proxy(f"root-{n}-{k}", "", c, backends) for k, c in enumerate(chunks))
    docs.extend(backend_docs(backends))
    return "---\n".join(docs)


def _proxy(name: str, head: str, indices: list[int], backends: int) -> str:
    route_lines = "".join(
        f"    - conditions: [{{prefix: /route-{i}}}]\n"
        f"      services: [{{name: svc-{i % backends}, port: 8080}}]\n"
        for i in indices
    )
    routes = f"  routes:\n{route_lines}" if indices else ""
    return (
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        f"metadata: {{name: {name}, namespace: {NAMESPACE}}}\n"
        f"spec:\n{head}{routes}"
    )


@dataclass(frozen=True, slots=True)
class Workload:
    """One input set, parsed and compiled once so each stage can be timed on its own."""

    label: str
    text: str
    snapshot: Snapshot
    objects: int
    virtual_hosts: int
    routes: int
    clusters: int
    not_valid: tuple[str, ...]  # "Kind ns/name: summary" of every object that did not compile

    @staticmethod
    def of(label: str, text: str) -> Workload:
        parsed = parse_text(text, f"{label}.yaml")
        if parsed.problems:
            raise SystemExit(f"{label}: generated YAML has problems: {parsed.problems[:3]}")
        snapshot = Snapshot.of(parsed.objects)
        result = compile_snapshot(snapshot)
        vhosts = [vh for lst in result.graph.listeners for vh in lst.virtual_hosts]
        return Workload(
            label=label,
            text=text,
            snapshot=snapshot,
            objects=len(parsed.objects),
            virtual_hosts=len(vhosts),
            routes=sum(len(vh.routes) for vh in vhosts),
            clusters=len(result.graph.clusters),
            not_valid=tuple(f"{s.ref}: {s.summary}" for s in result.statuses if not s.state.ok),
        )

    def stages(self, gc_probe: bool) -> dict[str, Callable[[], object]]:
        graph = compile_snapshot(self.snapshot).graph
        resources = translate(graph)
        stages: dict[str, Callable[[], object]] = {
            "parse": lambda: parse_text(self.text, f"{self.label}.yaml"),
            "compile": lambda: compile_snapshot(self.snapshot),
            "translate": lambda: translate(graph),
            "serialize": lambda: [
                m.SerializeToString(deterministic=True)
                for msgs in resources.by_type().values()
                for m in msgs
            ],
        }
        if gc_probe:
            stages["compile, cyclic GC off"] = lambda: without_gc(
                lambda: compile_snapshot(self.snapshot)
            )
        return stages


def without_gc(fn: Callable[[], object]) -> object:
    """`fn()` with Python's cyclic collector off: how much of a stage is collector pauses, which
    a large heap (every parsed object stays alive in the store) makes expensive."""
    gc.disable()
    try:
        return fn()
    finally:
        gc.enable()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(
    workloads: Sequence[Workload], repeat: int, gc_probe: bool = False
) -> list[dict[str, float]]:
    """Median seconds per stage for each workload; each repeat runs every workload's stages in
    turn, so drift in machine load hits all of them alike."""
    plans = [w.stages(gc_probe) for w in workloads]
    samples: list[dict[str, list[float]]] = [{k: [] for k in p} for p in plans]
    for _ in range(repeat):
        for plan, sample in zip(plans, samples, strict=True):
            for stage, fn in plan.items():
                sample[stage].append(timed(fn))
    return [{k: statistics.median(v) for k, v in s.items()} for s in samples]


def describe(w: Workload) -> str:
    return (
        f"{w.objects} objects, {w.virtual_hosts} virtual hosts, {w.routes} graph routes, "
        f"{w.clusters} clusters"
    )


def report(
    dialect: str,
    kind: str,
    variant: str,
    routes: int,
    ws: Sequence[Workload],
    t: list[dict[str, float]],
) -> None:
    (d, h), (dw, hw) = t, ws
    d_total = d["compile"] + d["translate"] + d["serialize"]
    h_total = h["compile"] + h["translate"] + h["serialize"]
    base = d["parse"]
    print(f"\n== variant {variant}: {routes} {kind}")
    print(f"{dialect}: {describe(dw)}")
    print(f"HTTPProxy: {describe(hw)}")
    print(f"{'stage':<40}{'time':>11}{'ratio':>9}{'per route':>12}")
    rows: list[tuple[str, float]] = [
        (f"baseline: parse {dialect} YAML", base),
        (f"compile graph ({dialect})", d["compile"]),
        ("translate to Envoy protos", d["translate"]),
        ("serialize protos", d["serialize"]),
        ("compile + translate + serialize", d_total),
        ("HTTPProxy: parse YAML", h["parse"]),
        ("HTTPProxy: compile graph", h["compile"]),
        ("HTTPProxy: translate", h["translate"]),
        ("HTTPProxy: serialize", h["serialize"]),
        ("HTTPProxy: compile+translate+serialize", h_total),
    ]
    if "compile, cyclic GC off" in d:
        rows += [
            (f"compile ({dialect}), cyclic GC off", d["compile, cyclic GC off"]),
            ("HTTPProxy: compile, cyclic GC off", h["compile, cyclic GC off"]),
        ]
    for label, secs in rows:
        print(f"{label:<40}{secs * 1000:9.1f} ms{secs / base:8.2f}x{secs / routes * 1e6:9.1f} µs")
    print(
        f"{dialect} / HTTPProxy: compile {d['compile'] / h['compile']:.2f}x, "
        f"translate {d['translate'] / h['translate']:.2f}x, "
        f"whole path {d_total / h_total:.2f}x; "
        f"each against its own parse: {d_total / base:.2f}x vs {h_total / h['parse']:.2f}x"
    )


def profile(workload: Workload, top: int) -> None:
    """cProfile of one compile + translate, top functions by own time and by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    translate(compile_snapshot(workload.snapshot).graph)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    print(f"\n== cProfile, one compile + translate of {workload.label} (by own time)")
    stats.sort_stats("tottime").print_stats(top)
    print("== cProfile, same run (by cumulative time)")
    stats.sort_stats("cumulative").print_stats(top)


# (routes, hostnames, backends) -> YAML of the dialect's objects and their Services.
Generator = Callable[[int, int, int], str]


def run(dialect: str, kind: str, generate: Generator, doc: str | None) -> None:
    """The command line shared by the dialect benches: both variants, each against HTTPProxy."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--routes", type=int, default=1000, help=f"number of {kind}")
    parser.add_argument(
        "--backends", type=int, default=0, help="distinct Services (default: one per route)"
    )
    parser.add_argument("--variant", choices=("scale", "hostnames", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="TOP", help="profile the last variant"
    )
    parser.add_argument(
        "--gc-probe", action="store_true", help="also time each compile with cyclic GC off"
    )
    args = parser.parse_args()
    backends = args.backends or args.routes
    variants = ("scale", "hostnames") if args.variant == "both" else (args.variant,)

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}; median of {args.repeat}"
    )
    last: Workload | None = None
    for variant in variants:
        hosts = SCALE_HOSTS if variant == "scale" else args.routes
        last = Workload.of(f"{kind}-{variant}", generate(args.routes, hosts, backends))
        hp = Workload.of(f"httpproxy-{variant}", httpproxy_yaml(args.routes, hosts, backends))
        for w in (last, hp):
            # A route lost to a status error would make the comparison meaningless.
            if w.not_valid or w.routes < args.routes:
                print(f"{w.label}: {describe(w)}; not valid: {len(w.not_valid)}")
                for line in w.not_valid[:5]:
                    print(f"  {line}")
                raise SystemExit(f"{w.label} did not compile every route")
        timings = measure((last, hp), args.repeat, args.gc_probe)
        report(dialect, kind, variant, args.routes, (last, hp), timings)
    if args.profile and last is not None:
        profile(last, args.profile)


if __name__ == "__main__":
    run("Gateway API", "HTTPRoutes", gateway_yaml, __doc__)

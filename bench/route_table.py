"""Envoy's throughput on one virtual host with many routes: a route list against a matcher tree.

One host with 1, 1,000 and 10,000 prefix routes (`/route-<i>/`, each a direct response naming it),
the request matching the LAST route (`/route-<N-1>/x`), so a list walks every route first. Each
table is translated three times: as a list (`matcher_tree_min_routes=0`), as a matcher tree
(`matcher_tree_min_routes=1`), and on a scoped listener (`scoped`: the scope key filter runs on
every request; from 2,048 routes the host is split into path scopes, so the request finds the index
route, then its route in its directory's scope), loaded into its own Envoy (`--concurrency 1`, one
worker) as a static bootstrap, and loaded with `wrk` (Debian's `wrk`; `-t1 -c16`). Every Envoy is
started first; the rounds then run each configuration in turn, so a noisy neighbour hurts them
alike. Every figure is a ratio against the single-route list in the same round; the median over
rounds is reported. Before measuring, each Envoy must answer the request with the last route's
body.

    python3 bench/route_table.py                      # 1, 1000, 10000 routes; 5 rounds of 5 s
    python3 bench/route_table.py --routes 1 100 1000 --rounds 3 --seconds 3
    python3 bench/route_table.py --envoy-cpu 0 --wrk-cpu 1   # pin Envoy and wrk (taskset)
    python3 bench/route_table.py --routes 45000 --translate-only  # turnout's side only
    python3 bench/route_table.py --upstream       # routes forward to a local nginx instead

With `--upstream` every route forwards to a local nginx (Debian's `nginx-light`; one worker)
that answers with the route's name, which the route sets as a request header: the cost of a
real proxied request, against which the scope key filter is a smaller share. Next to the
throughput, every configuration's Envoy CPU time per request (its /proc utime + stime over the
wrk run, divided by wrk's request count) is reported as a ratio: what a machine whose Envoy is
the bottleneck would get, whatever the co-located nginx and wrk take of the 2 cores.

It also prints what the tree costs turnout for the largest table: translate time and bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.validate import static_bootstrap
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Endpoint,
    Forward,
    HeaderPolicy,
    HeaderValue,
    Listener,
    ListenerProtocol,
    PathMatch,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

HOST = "bench.example.com"
OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "bench", "routes")
# The options of each shape: a list, a matcher tree, and scoped routes (the scope key filter on
# every request; a host of 2,048 routes or more split into path scopes, `split_host`).
SHAPES = {
    "list": TranslateOptions(matcher_tree_min_routes=0, split_host_min_routes=0),
    "tree": TranslateOptions(matcher_tree_min_routes=1, split_host_min_routes=0),
    "scoped": TranslateOptions(scoped_routes_min_hosts=1),
}


@dataclass(frozen=True)
class Config:
    routes: int
    shape: str

    @property
    def label(self) -> str:
        return f"{self.routes} routes, {self.shape}"

    @property
    def target(self) -> str:
        return f"/route-{self.routes - 1}/x"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


UPSTREAM = "bench/upstream/80"
NGINX_CONF = """worker_processes 1; daemon off; pid {dir}/nginx.pid; error_log stderr error;
events {{ worker_connections 1024; }}
http {{ access_log off; server {{ listen 127.0.0.1:{port};
  location / {{ return 200 $http_x_route; }} }} }}
"""


def graph(routes: int, port: int, upstream: int | None = None) -> RoutingGraph:
    """The host of `routes` routes, each answering its name: directly, or (`upstream`: nginx's
    port) through nginx, which answers the `x-route` header the route sets."""
    table = tuple(route(i, upstream) for i in range(routes))
    vh = VirtualHost(HOST, HOST, table, OWNER)
    listener = Listener("ingress_http", "127.0.0.1", port, ListenerProtocol.HTTP, (vh,))
    if upstream is None:
        return RoutingGraph(listeners=(listener,))
    nginx = Cluster(UPSTREAM, "bench", "upstream", 80, endpoints=(Endpoint("127.0.0.1", upstream),))
    return RoutingGraph(listeners=(listener,), clusters=(nginx,))


def route(i: int, upstream: int | None) -> Route:
    match, source = RouteMatch(PathMatch.prefix(f"/route-{i}/")), RouteSource(OWNER, f"r[{i}]")
    if upstream is None:
        return Route(match, DirectResponse(200, f"route-{i}"), source)
    name = HeaderPolicy(set=(HeaderValue("x-route", f"route-{i}"),))
    forward = Forward((WeightedCluster(UPSTREAM, 1),))
    return Route(match, forward, source, RoutePolicies(request_headers=name))


def start_nginx(work: Path, cpu: str | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=work, port=port))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    command = [nginx, "-c", str(conf), "-p", str(work), "-e", "stderr"]
    if cpu is not None:
        command = ["taskset", "-c", cpu, *command]
    return subprocess.Popen(command), port


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (its worker threads included), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_envoy(
    config: Config, work: Path, cpu: str | None, upstream: int | None
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    resources = translate(graph(config.routes, port, upstream), SHAPES[config.shape])
    path = work / f"envoy-{config.routes}-{config.shape}.json"
    path.write_text(json.dumps(static_bootstrap(resources)))
    envoy = shutil.which("envoy") or "envoy"
    command = [envoy, "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
               "--log-level", "error"]  # fmt: skip
    if cpu is not None:
        command = ["taskset", "-c", cpu, *command]
    return subprocess.Popen(command), port


def wait_serving(config: Config, port: int, timeout_s: float = 60.0) -> None:
    want = f"route-{config.routes - 1}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{config.target}", headers={"Host": HOST}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                body = answer.read().decode()
            if body != want:
                raise SystemExit(f"{config.label}: answered {body!r}, not the last route")
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{config.label}: Envoy did not serve within {timeout_s} s")


def wrk(config: Config, port: int, seconds: int, cpu: str | None) -> tuple[float, int]:
    """wrk's requests/s and request count."""
    command = ["wrk", "-t1", "-c16", f"-d{seconds}s", "-H", f"Host: {HOST}",
               f"http://127.0.0.1:{port}{config.target}"]  # fmt: skip
    if cpu is not None:
        command = ["taskset", "-c", cpu, *command]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if re.search(r"Non-2xx or 3xx responses", out):
        raise SystemExit(f"{config.label}: wrk saw errors:\n{out}")
    match = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    count = re.search(r"([0-9]+) requests in", out)
    if match is None or count is None:
        raise SystemExit(f"cannot read wrk's output:\n{out}")
    return float(match.group(1)), int(count.group(1))


def run_round(
    running: dict[Config, tuple[subprocess.Popen[bytes], int]], args: argparse.Namespace
) -> dict[Config, tuple[float, float]]:
    """Each configuration's requests/s and Envoy CPU seconds per request, in turn."""
    out = {}
    for c, (process, port) in running.items():
        cpu_before = cpu_seconds(process.pid)
        rate, count = wrk(c, port, args.seconds, args.wrk_cpu)
        out[c] = (rate, (cpu_seconds(process.pid) - cpu_before) / max(count, 1))
    return out


Ratios = dict[Config, list[tuple[float, float]]]


def measure(args: argparse.Namespace) -> Ratios:
    """Per configuration and round: (requests/s, 1 / Envoy CPU per request), each as a ratio
    to the single-route list's in the same round."""
    configs = [Config(n, shape) for n in args.routes for shape in SHAPES]
    baseline = Config(1, "list")
    if baseline not in configs:
        configs.insert(0, baseline)
    ratios: Ratios = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        nginx = start_nginx(Path(tmp), args.upstream_cpu) if args.upstream else None
        upstream = None if nginx is None else nginx[1]
        running = {c: start_envoy(c, Path(tmp), args.envoy_cpu, upstream) for c in configs}
        try:
            for c, (_, port) in running.items():
                wait_serving(c, port)
            for r in range(args.rounds):
                rates = run_round(running, args)
                (rate0, cpu0) = rates[baseline]
                for c, (rate, cpu) in rates.items():
                    ratios[c].append((rate / rate0, cpu0 / cpu))
                print(f"round {r + 1}: " + ", ".join(f"{c.label} {rates[c][0]:.0f}/s" for c in
                      configs), file=sys.stderr)  # fmt: skip
        finally:
            for process, _ in [*running.values(), *([nginx] if nginx else [])]:
                process.terminate()
                process.wait(10)
    return ratios


def translation_cost(routes: int, repeat: int = 3) -> None:
    """What the tree costs turnout: translate time and RouteConfiguration bytes, list vs tree."""
    print(f"\n| {routes} routes | translate (median of {repeat}) | bytes |\n|---|---|---|")
    for shape, options in SHAPES.items():
        times, size = [], 0
        table = graph(routes, 8080)
        for _ in range(repeat):
            start = time.perf_counter()
            resources = translate(table, options)
            times.append(time.perf_counter() - start)
            size = sum(len(r.SerializeToString(deterministic=True)) for r in resources.routes)
        print(f"| {shape} | {statistics.median(times) * 1000:.0f} ms | {size:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, nargs="+", default=[1, 1000, 10000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--envoy-cpu", help="taskset CPU list for every Envoy")
    parser.add_argument("--wrk-cpu", help="taskset CPU list for wrk")
    parser.add_argument("--translate-only", action="store_true", help="skip the Envoy load")
    parser.add_argument("--upstream", action="store_true", help="routes forward to local nginx")
    parser.add_argument("--upstream-cpu", help="taskset CPU list for nginx")
    args = parser.parse_args()
    translation_cost(max(args.routes))
    if args.translate_only:
        return
    ratios = measure(args)
    print("\n| routes | shape | requests/s vs 1 route (list): median, min, max | "
          "Envoy CPU per request, 1 route (list) / this: median, min, max |")  # fmt: skip
    print("|---|---|---|---|")
    for c, pairs in ratios.items():
        rates, cpus = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"| {c.routes} | {c.shape} | {spread(rates)} | {spread(cpus)} |")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}, {min(values):.3f}, {max(values):.3f}"


if __name__ == "__main__":
    main()

"""What one EndpointSlice change costs: the endpoints fast path against a full compile.

In process (always): the HTTPProxies of `bench/compile_bench.py` (a root per team, its
Service and EndpointSlice), one store partition per team as the files source keeps one per
file. Each change rewrites one team's EndpointSlice (its endpoint moves to another port) and
times, from the store change to the Envoy resources ready: (a) the path the controller takes
(snapshot, diff, `update_endpoints`, `retranslate_clusters`) and (b) the full compile of the
same change (snapshot, `compile_snapshot`, `translate`), the baseline, in the same run.

Black-box (`--envoy`): `turnout serve` on a directory with a real Envoy and two echo
backends; each change rewrites one EndpointSlice file so its endpoint moves to the other
backend's port, and the time until a request through Envoy is answered by that backend is
recorded (p50/p99). Run:

    python3 bench/endpoint_change.py --proxies 1000 10000 --changes 20
    python3 bench/endpoint_change.py --proxies 1000 --changes 20 --envoy
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_bench import generate

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import retranslate_clusters, translate
from turnout.graph.build import CompileResult
from turnout.graph.endpoint_update import update_endpoints
from turnout.objects import KubeObject
from turnout.sources.parse import parse_text
from turnout.store import Snapshot, Store, changed_objects


def slice_text(team: int, port: int, address: str | None = None) -> str:
    """Team `team`'s EndpointSlice with its endpoint on `port`."""
    address = address or f"10.0.{team // 250}.{team % 250}"
    return (
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
        f"metadata: {{name: app-1, namespace: team-{team}, labels: "
        "{kubernetes.io/service-name: app}}\n"
        f"ports: [{{name: http, port: {port}}}]\n"
        f"endpoints: [{{addresses: [{address}]}}]\n"
    )


def _objects(text: str, path: str) -> tuple[KubeObject, ...]:
    parsed = parse_text(text, path)
    assert not parsed.problems, parsed.problems
    return parsed.objects


class Teams:
    """The store, one partition per team (namespace) as one file per team would be, and each
    team's objects other than its EndpointSlice."""

    def __init__(self, proxies: int, routes: int) -> None:
        self.store = Store()
        self.rest: dict[str, list[KubeObject]] = {}
        by_team: dict[str, list[KubeObject]] = {}
        for obj in _objects(generate(proxies, routes), "bench.yaml"):
            by_team.setdefault(obj.namespace, []).append(obj)
        for team, objects in by_team.items():
            self.store.replace_partition(team, objects)
            self.rest[team] = [o for o in objects if o.kind != "EndpointSlice"]

    def change(self, team: int, port: int) -> None:
        """Rewrites the team's partition with its endpoint on `port` (the file rewritten)."""
        ns = f"team-{team}"
        fresh = _objects(slice_text(team, port), f"{ns}.yaml")
        self.store.replace_partition(ns, [*self.rest[ns], *fresh])


Applied = tuple[Snapshot, CompileResult, EnvoyResources]


def fast(store: Store, last: Applied, options: CompileOptions) -> Applied:
    old, result, resources = last
    snapshot = store.snapshot()
    changes = store.changes(old, snapshot)
    if changes is None:
        changes = changed_objects(old, snapshot)
    update = update_endpoints(result, old, snapshot, changes, options)
    assert update is not None
    return (
        snapshot,
        update.result,
        retranslate_clusters(resources, update.result.graph, update.clusters),
    )


def full(store: Store, last: Applied, options: CompileOptions) -> Applied:
    snapshot = store.snapshot()
    result = compile_snapshot(snapshot, options)
    return snapshot, result, translate(result.graph)


def timed(
    teams: Teams,
    last: Applied,
    changes: int,
    proxies: int,
    path: Callable[[Store, Applied, CompileOptions], Applied],
) -> tuple[list[float], Applied]:
    """`changes` changes, each to another team's slice, each timed from the store change to
    the resources ready."""
    options = CompileOptions()
    times = []
    for i in range(changes):
        team = (i * 7919) % proxies
        started = time.perf_counter()
        teams.change(team, 9000 + i)
        last = path(teams.store, last, options)
        times.append(time.perf_counter() - started)
    return times, last


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def in_process(proxies: int, routes: int, changes: int) -> None:
    teams = Teams(proxies, routes)
    snapshot = teams.store.snapshot()
    result = compile_snapshot(snapshot, CompileOptions())
    last: Applied = (snapshot, result, translate(result.graph))
    t_fast, last = timed(teams, last, changes, proxies, fast)
    t_full, _ = timed(teams, last, 3, proxies, full)
    base = statistics.median(t_full)
    print(
        f"{proxies} HTTPProxy roots ({len(snapshot.objects)} objects, "
        f"{len(result.graph.clusters)} clusters), {changes} EndpointSlice changes"
    )
    for label, t in (("full compile (baseline)", t_full), ("endpoints fast path", t_fast)):
        p50, p99 = statistics.median(t), percentile(t, 99)
        print(
            f"  {label:<24} p50 {p50 * 1000:8.1f} ms  p99 {p99 * 1000:8.1f} ms  {p50 / base:.4f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--proxies", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--routes", type=int, default=5)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--envoy", action="store_true", help="also black-box through Envoy")
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}"
    )
    for proxies in args.proxies:
        in_process(proxies, args.routes, args.changes)
    if args.envoy:
        from endpoint_change_envoy import black_box

        for proxies in args.proxies:
            black_box(proxies, args.routes, args.changes)


if __name__ == "__main__":
    main()

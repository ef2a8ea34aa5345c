"""Issue 11 item 6, in process: where a cold start of N objects spends its time and memory.

Writes the `hosts` shape of `bench/change_latency.py` (N HTTPProxy roots x 5 routes, a Service
and an EndpointSlice each: 3N files) into a temporary directory (or reads `--dir`), then runs the
stages `turnout serve` runs before Envoy can be programmed, one after the other, timing each and
measuring the memory each leaves behind (RSS and, with `--tracemalloc`, Python allocations by
stage and the top allocation sites at the end):

    import turnout.cli -> list the files -> read + parse them (FileSource.load_all into a Store)
    -> Store.snapshot -> compile (build_graph) -> translate -> serialize every resource

`--profile STAGE` runs that stage under cProfile and prints its top functions. With
`--parse-cache FILE` the files source reads that parse cache (as `serve` does from its state
directory) and writes it at the end: run twice for a cold and a warm start. Run:

    PYTHONPATH=src python3 bench/cold_start.py --objects 10000
    PYTHONPATH=src python3 bench/cold_start.py --dir DIR --parse-cache /tmp/pc   # twice
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import change_latency  # the generator of the black-box benchmark's files


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Stages:
    def __init__(self, profile: str | None, trace: bool) -> None:
        self.profile = profile
        self.trace = trace
        self.rows: list[tuple[str, float, float, float, float]] = []

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        before = tracemalloc.get_traced_memory()[0] if self.trace else 0
        profiler = cProfile.Profile() if name == self.profile else None
        start, cpu = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        result = fn()
        if profiler is not None:
            profiler.disable()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = tracemalloc.get_traced_memory()[0] if self.trace else 0
        self.rows.append((name, elapsed, cpu, rss_mib(), (after - before) / 2**20))
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
        return result

    def report(self) -> None:
        total, total_cpu = sum(r[1] for r in self.rows), sum(r[2] for r in self.rows)
        print(f"{'stage':<14}{'wall s':>9}{'CPU s':>9}{'RSS MiB':>9}{'py alloc MiB':>14}")
        for name, elapsed, cpu, rss, alloc in self.rows:
            traced = f"{alloc:14.1f}" if self.trace else ""
            print(f"{name:<14}{elapsed:9.2f}{cpu:9.2f}{rss:9.0f}{traced}")
        print(f"{'total':<14}{total:9.2f}{total_cpu:9.2f}   peak RSS {peak_mib():.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, help="read these files instead of generating them")
    parser.add_argument("--profile", help="a stage to run under cProfile (e.g. load)")
    parser.add_argument("--tracemalloc", action="store_true", help="Python allocations by stage")
    parser.add_argument("--top", type=int, default=25, help="allocation sites shown at the end")
    parser.add_argument(
        "--collector",
        choices=["paused", "on"],
        default="paused",
        help="paused: as `serve` does for files (collector off, then gc.freeze); on: left alone",
    )
    parser.add_argument("--parse-cache", type=Path, help="read (and at the end write) it")
    args = parser.parse_args()

    directory = args.dir
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="turnout-cold-"))
        # Endpoints on 18080, not on the default --http-port 8080: served, as in `serve`
        # (on 8080 every endpoint is refused and every HTTPProxy carries five errors).
        shape = change_latency.Shape("hosts", args.objects)
        change_latency.generate(directory, shape, 18080)
    if args.tracemalloc:
        tracemalloc.start(8)
    stages = Stages(args.profile, args.tracemalloc)
    if args.collector == "paused":
        gc.disable()
    run_stages(stages, directory, args.parse_cache)
    stages.report()
    if args.tracemalloc:
        top_allocations(args.top)


def run_stages(stages: Stages, directory: Path, parse_cache: Path | None = None) -> None:
    stages.run("import", lambda: __import__("turnout.cli"))
    from turnout.app import default_dialects
    from turnout.compile_inputs import CompileOptions
    from turnout.envoy.translate import TranslateMemo, translate
    from turnout.envoy.xds import XdsServer
    from turnout.graph.build import build_graph
    from turnout.graph.memo import CompileMemo
    from turnout.metrics import Metrics
    from turnout.sources.files import FileSource, discover
    from turnout.sources.parse_cache import ParseCache
    from turnout.store import Store

    files = stages.run("list", lambda: discover([directory]))
    store = Store()
    cache = None if parse_cache is None else ParseCache(parse_cache)
    source = FileSource([directory], store, watch=False, parse_cache=cache)
    stages.run("read+parse", source.load_all)
    snapshot = stages.run("snapshot", store.snapshot)
    # With the memos `serve` carries from one compile to the next (they hold per-route data).
    memo, translate_memo = CompileMemo(), TranslateMemo()
    dialects = default_dialects().all
    result = stages.run(
        "compile", lambda: build_graph(snapshot, CompileOptions(), dialects, memo, None)
    )
    resources = stages.run("translate", lambda: translate(result.graph, None, translate_memo))
    xds = XdsServer(Metrics())
    stages.run("xds snapshot", lambda: xds.set_resources(resources))
    blobs = stages.run(
        "serialize",
        lambda: [
            m.SerializeToString(deterministic=True)
            for msgs in resources.by_type().values()
            for m in msgs
        ],
    )
    if not gc.isenabled():  # as `serve` does once the first compile is served
        gc.freeze()
        gc.enable()
    # What the collector's next full pass costs (after `gc.freeze`, it skips what was built).
    stages.run("gc pass", gc.collect)
    if cache is not None:
        stages.run("cache write", source.save_cache)
    print(
        f"{len(files)} files, {len(snapshot.objects)} objects, {len(result.graph.clusters)} "
        f"clusters, {sum(map(len, blobs)) / 2**20:.1f} MiB of xDS"
    )
    stages.keep = (store, snapshot, result, resources, blobs, memo, translate_memo, xds)  # type: ignore[attr-defined]


def top_allocations(limit: int) -> None:
    snapshot = tracemalloc.take_snapshot()
    print(f"\ntop {limit} allocation sites (by line) still held:")
    for stat in snapshot.statistics("lineno")[:limit]:
        frame = stat.traceback[0]
        print(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d}  {frame.filename}:{frame.lineno}")
    print(f"\ntop {limit} modules (where what is still held was allocated):")
    for stat in snapshot.statistics("filename")[:limit]:
        frame = stat.traceback[0]
        print(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d}  {frame.filename}")


if __name__ == "__main__":
    main()

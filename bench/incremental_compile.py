"""In process, per stage: what one HTTPProxy change costs with the compile's memory (`CompileMemo`)
against a full compile of the same snapshot, in the same run.

Loads the `bench/change_latency.py` shapes (`hosts`: N roots x 5 routes, one Service and
EndpointSlice each; `one-host`: one root including N children) into a store, one partition per
file as the files source makes them, compiles once, then for each of `--changes` changes
rewrites one object's HTTPProxy with one more route and times, with the memos carried over:
`build_graph` (the compile), `translate` (its `TranslateMemo`) and the whole. One full compile
(fresh memos) of the last snapshot is the baseline. The heap is frozen after the first compile
and after each change, as `turnout serve` of files does. Run from the repository root:

    PYTHONPATH=src python3 bench/incremental_compile.py --objects 10000 --changes 10
    PYTHONPATH=src python3 bench/incremental_compile.py --objects 10000 --profile
    PYTHONPATH=src python3 bench/incremental_compile.py --objects 10000 --change ingress
    PYTHONPATH=src python3 bench/incremental_compile.py --objects 10000 --change add
    PYTHONPATH=src python3 bench/incremental_compile.py --objects 10000 --change delete

`--change add` adds one new HTTPProxy root (its own host) with its Service and EndpointSlice per
change, as three new files; `--change delete` removes one HTTPProxy's file (a root in the
`hosts` shape, an included child in the `one-host` shape, whose group then names a missing
include).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import change_latency as shapes

from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.controller import freeze_heap
from turnout.envoy.translate import TranslateMemo, translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.build import build_graph
from turnout.graph.dialect import Dialect
from turnout.graph.memo import CompileMemo
from turnout.sources.parse import parse_text
from turnout.store import Store


def ingress_text(extra: int) -> str:
    """One Ingress beside the HTTPProxies (`--change ingress`): a change to it leaves the
    HTTPProxy dialect's output reused whole, as an incremental dialect leaves unchanged hosts."""
    paths = "".join(
        f"      - {{path: /v{k}, pathType: Prefix, backend: {{service: {{name: app, port: "
        "{number: 80}}}}\n"
        for k in range(extra + 1)
    )
    return (
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\n"
        "metadata: {name: ing, namespace: team-0}\n"
        "spec:\n  ingressClassName: turnout\n  rules:\n  - host: ingress.example.com\n"
        f"    http:\n      paths:\n{paths}"
    )


def load(shape: shapes.Shape) -> Store:
    files: dict[str, str] = {"ingress.yaml": ingress_text(0)}
    for i in range(shape.n):
        files.update(shapes.service_files(i, 18080))  # not --http-port: served
        files[f"proxy-{i}.yaml"] = shapes.proxy_text(shape, i, 0)
    if shape.name == "one-host":
        files.update(shapes.one_host_roots(shape.n))
    store = Store()
    for name, text in files.items():
        parsed = parse_text(text, name)
        store.replace_partition(name, parsed.objects, parsed.problems)
    return store


def apply_change(store: Store, shape: shapes.Shape, change: str, k: int, i: int) -> None:
    """Change `k` of its kind (`i`: a random object's index) written into the store."""
    files: dict[str, str | None]
    if change == "httpproxy":
        files = {f"proxy-{i}.yaml": shapes.proxy_text(shape, i, k + 1)}
    elif change == "ingress":
        files = {"ingress.yaml": ingress_text(k + 1)}
    elif change == "add":
        new = shape.n + k
        files = dict(shapes.service_files(new, 18080))
        files[f"proxy-{new}.yaml"] = shapes.proxy_text(shapes.Shape("hosts", shape.n), new, 0)
    else:
        files = {f"proxy-{i}.yaml": None}
    for name, text in files.items():
        if text is None:
            store.remove_partition(name)
        else:
            parsed = parse_text(text, name)
            store.replace_partition(name, parsed.objects, parsed.problems)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--shape", choices=("hosts", "one-host"), default="hosts")
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="cProfile one change")
    parser.add_argument(
        "--change",
        nargs="+",
        choices=("httpproxy", "ingress", "add", "delete"),
        default=["httpproxy"],
        help="what each change does: rewrite one HTTPProxy or the one Ingress, add a new root "
        "with its Service and EndpointSlice, or delete one HTTPProxy (several: each in turn, "
        "on the same store)",
    )
    args = parser.parse_args()
    shape = shapes.Shape(args.shape, args.objects)
    started = time.perf_counter()
    store = load(shape)
    print(f"load {args.objects} objects: {time.perf_counter() - started:.2f} s")
    run = Run(store, shape, default_dialects().all, CompileOptions(), TranslateOptions())
    started = time.perf_counter()
    translate(
        build_graph(store.snapshot(), run.options, run.dialects, run.memo).graph,
        run.topts,
        run.tmemo,
    )
    print(f"first compile + translate: {time.perf_counter() - started:.2f} s")
    # As `turnout serve` of files does: the cold start's heap frozen, then again after each
    # compile, so no full collection over earlier survivors lands in a timed change.
    gc.collect()
    gc.freeze()
    picked = random.Random(1).sample(range(args.objects), args.changes * len(args.change))
    timings = {kind: run.changes(kind, args.changes, picked, args.profile) for kind in args.change}
    t0 = time.perf_counter()
    full = build_graph(store.snapshot(), run.options, run.dialects)
    t1 = time.perf_counter()
    translate(full.graph, run.topts)
    base = time.perf_counter() - t0
    print(f"full compile (baseline): compile {t1 - t0:.3f} s, translate {base - t1 + t0:.3f} s")
    for kind, (compile_s, translate_s, cpu_s) in timings.items():
        inc = [c + t for c, t in zip(compile_s, translate_s, strict=True)]
        print(
            f"{kind}, memo carried: compile p50 {ms(statistics.median(compile_s))}, "
            f"translate p50 {ms(statistics.median(translate_s))}, "
            f"total p50 {ms(statistics.median(inc))} p99 {ms(percentile(inc, 0.99))}, "
            f"CPU p50 {ms(statistics.median(cpu_s))} p99 {ms(percentile(cpu_s, 0.99))}, "
            f"ratio to full {statistics.median(inc) / base:.4f}x"
        )


@dataclass
class Run:
    """The store and the memos carried from one change to the next."""

    store: Store
    shape: shapes.Shape
    dialects: Sequence[Dialect]
    options: CompileOptions
    topts: TranslateOptions
    memo: CompileMemo = field(default_factory=CompileMemo)
    tmemo: TranslateMemo = field(default_factory=TranslateMemo)
    added: int = 0  # new roots so far

    def changes(
        self, kind: str, count: int, picked: list[int], profile: bool
    ) -> tuple[list[float], list[float], list[float]]:
        """`count` changes of one kind, each timed: compile, translate (wall) and CPU."""
        compile_s: list[float] = []
        translate_s: list[float] = []
        cpu_s: list[float] = []
        for k in range(count):
            old = self.store.snapshot()
            at = self.added if kind == "add" else k
            apply_change(self.store, self.shape, kind, at, picked.pop())
            self.added += kind == "add"
            c0, t0 = time.process_time(), time.perf_counter()
            snapshot = self.store.snapshot()
            changes = self.store.changes(old, snapshot)
            prof = cProfile.Profile() if profile and k == count - 1 else None
            if prof is not None:
                prof.enable()
            result = build_graph(snapshot, self.options, self.dialects, self.memo, changes)
            t1 = time.perf_counter()
            translate(result.graph, self.topts, self.tmemo)
            t2, c2 = time.perf_counter(), time.process_time()
            if prof is not None:
                prof.disable()
                pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            compile_s.append(t1 - t0)
            translate_s.append(t2 - t1)
            cpu_s.append(c2 - c0)
            freeze_heap()
        return compile_s, translate_s, cpu_s


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


if __name__ == "__main__":
    main()

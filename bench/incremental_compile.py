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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import change_latency as shapes

from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.controller import freeze_heap
from turnout.envoy.translate import TranslateMemo, translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.build import build_graph
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
    """Change `k` of the run (`i`: a random object's index) written into the store."""
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
        choices=("httpproxy", "ingress", "add", "delete"),
        default="httpproxy",
        help="what each change does: rewrite one HTTPProxy or the one Ingress, add a new root "
        "with its Service and EndpointSlice, or delete one HTTPProxy",
    )
    args = parser.parse_args()
    shape = shapes.Shape(args.shape, args.objects)
    started = time.perf_counter()
    store = load(shape)
    print(f"load {args.objects} objects: {time.perf_counter() - started:.2f} s")
    dialects = default_dialects().all
    options, topts = CompileOptions(), TranslateOptions()
    memo, tmemo = CompileMemo(), TranslateMemo()
    started = time.perf_counter()
    translate(build_graph(store.snapshot(), options, dialects, memo).graph, topts, tmemo)
    print(f"first compile + translate: {time.perf_counter() - started:.2f} s")
    # As `turnout serve` of files does: the cold start's heap frozen, then again after each
    # compile, so no full collection over earlier survivors lands in a timed change.
    gc.collect()
    gc.freeze()
    picked = random.Random(1).sample(range(args.objects), args.changes)
    compile_s: list[float] = []
    translate_s: list[float] = []
    for k in range(args.changes):
        old = store.snapshot()
        apply_change(store, shape, args.change, k, picked.pop())
        t0 = time.perf_counter()
        snapshot = store.snapshot()
        changes = store.changes(old, snapshot)
        profile = cProfile.Profile() if args.profile and k == args.changes - 1 else None
        if profile is not None:
            profile.enable()
        result = build_graph(snapshot, options, dialects, memo, changes)
        t1 = time.perf_counter()
        translate(result.graph, topts, tmemo)
        t2 = time.perf_counter()
        if profile is not None:
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
        compile_s.append(t1 - t0)
        translate_s.append(t2 - t1)
        freeze_heap()
    t0 = time.perf_counter()
    full = build_graph(store.snapshot(), options, dialects)
    t1 = time.perf_counter()
    translate(full.graph, topts)
    t2 = time.perf_counter()
    base = t2 - t0
    inc = [c + t for c, t in zip(compile_s, translate_s, strict=True)]
    print(f"full compile (baseline): compile {t1 - t0:.3f} s, translate {t2 - t1:.3f} s")
    print(
        f"one change, memo carried: compile p50 {statistics.median(compile_s) * 1000:.1f} ms, "
        f"translate p50 {statistics.median(translate_s) * 1000:.1f} ms, "
        f"total p50 {statistics.median(inc) * 1000:.1f} ms "
        f"p99 {percentile(inc, 0.99) * 1000:.1f} ms (max {max(inc) * 1000:.1f} ms), "
        f"ratio to full {statistics.median(inc) / base:.4f}x"
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


if __name__ == "__main__":
    main()

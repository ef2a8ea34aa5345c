"""Envoy's first apply of N hosts, in process: the compile's resources served by one XdsServer to
a real Envoy (turnout's bootstrap, `--concurrency 1`), timed per type (push -> ACK, as
`turnout_xds_apply_seconds`) and in Envoy's CPU time (which the machine's load does not
inflate), then Envoy's RSS and statistics count, then K one-host changes (route count + 1) with
Envoy's apply per type. Delta streams take inline scopes unless `--named-scopes`; `--ab` runs two
Envoys, named and inline, and hands each change to both in turn. `--bootstrap` sets top-level
bootstrap fields (e.g. `{"deferred_stat_options": {"enable_deferred_creation_stats": true}}`).

    PYTHONPATH=src python3 bench/envoy_first_apply.py --objects 10000 --changes 20 --ab
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import change_latency as shapes
from incremental_compile import load

from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.envoy import translate as translate_module
from turnout.envoy.bootstrap import bootstrap_config, write_bootstrap
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.xds import SHORT_TYPE_NAMES, XdsServer
from turnout.graph.build import build_graph
from turnout.graph.memo import CompileMemo
from turnout.sources.parse import parse_text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """Envoy's CPU time (user + system): what it spent, whatever else loads the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timings:
    """`XdsServer._observe_apply` recorded per type, with Envoy's CPU time spent since the
    previous ACK (the types go out one after another, so that is mostly this type's apply)."""

    def __init__(self) -> None:
        self.apply: dict[str, list[float]] = {}
        self.cpu: dict[str, float] = {}
        self.pid = 0
        self.last_cpu = 0.0

    def hook(self, server: XdsServer) -> None:
        original = server._observe_apply

        def observe(type_url: str, seconds: float) -> None:
            name = SHORT_TYPE_NAMES[type_url]
            self.apply.setdefault(name, []).append(seconds)
            if self.pid:
                now = cpu_seconds(self.pid)
                self.cpu[name] = self.cpu.get(name, 0.0) + now - self.last_cpu
                self.last_cpu = now
            original(type_url, seconds)

        server._observe_apply = observe  # type: ignore[method-assign]

    def take(self) -> dict[str, list[float]]:
        out, self.apply = self.apply, {}
        return out

    def take_cpu(self) -> dict[str, float]:
        out, self.cpu = self.cpu, {}
        return out


def rss_mib(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def admin_get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return str(r.read().decode())


@dataclass
class Side:
    """One XdsServer and the Envoy it programs."""

    label: str
    server: XdsServer
    timings: Timings
    admin_port: int
    envoy: subprocess.Popen[bytes]
    changes: list[tuple[float, float]] = field(default_factory=list)  # (apply s, Envoy CPU s)

    @staticmethod
    async def start(label: str, args: argparse.Namespace, tmp: Path, named: bool) -> Side:
        server = XdsServer(inline_scopes=not named)
        timings = Timings()
        timings.hook(server)
        xds_port = await server.start("127.0.0.1", 0)
        admin_port = free_port()
        config = bootstrap_config(
            xds_address="127.0.0.1",
            xds_port=xds_port,
            admin_address="127.0.0.1",
            admin_port=admin_port,
            node_id=f"bench-{label}",
            xds_api=args.xds_api,
        )
        for key, value in json.loads(args.bootstrap).items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        path = write_bootstrap(tmp / f"bootstrap-{label}.yaml", config)
        envoy = subprocess.Popen(
            [
                *("envoy", "-c", str(path), "-l", "warning", "--concurrency", "1"),
                *("--use-dynamic-base-id", *args.envoy_args),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / f"envoy-{label}.log", "w"),  # noqa: SIM115
        )
        while server.connected() == 0:
            await asyncio.sleep(0.05)
        timings.pid = envoy.pid
        return Side(label, server, timings, admin_port, envoy)

    async def first_apply(self, resources: EnvoyResources) -> None:
        pid = self.envoy.pid
        self.timings.last_cpu = cpu0 = cpu_seconds(pid)
        t0 = time.monotonic()
        version = self.server.set_resources(resources)
        if not await self.server.wait_acked(version, 600):
            raise SystemExit(f"not acked: {self.server.readiness()}")
        first, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
        await asyncio.sleep(1)
        rss, hwm = rss_mib(pid)
        stats = admin_get(self.admin_port, "/stats").count("\n")
        memory = json.loads(admin_get(self.admin_port, "/memory"))
        applied, cpus = self.timings.take(), self.timings.take_cpu()
        print(
            f"[{self.label}] first apply {first:.2f} s (set_resources -> every type acked), "
            f"Envoy CPU {cpu:.2f} s; {os.getloadavg()[0]:.2f} load"
        )
        for t, values in applied.items():
            print(
                f"  {t:13s} {sum(values):6.2f} s over {len(values)} response(s), "
                f"Envoy CPU {cpus.get(t, 0.0):6.2f} s"
            )
        print(
            f"  Envoy RSS {rss:.0f} MiB (peak {hwm:.0f}), allocated "
            f"{int(memory['allocated']) / 2**20:.0f} MiB, heap "
            f"{int(memory['heap_size']) / 2**20:.0f} MiB, {stats} stats"
        )
        self.timings.last_cpu = cpu_seconds(pid)

    async def change(self, k: int, resources: EnvoyResources) -> None:
        t0 = time.monotonic()
        version = self.server.set_resources(resources)
        if not await self.server.wait_acked(version, 60):
            raise SystemExit("change not acked")
        took = time.monotonic() - t0
        applied, cpus = self.timings.take(), self.timings.take_cpu()
        self.changes.append((sum(sum(v) for v in applied.values()), sum(cpus.values())))
        per = ", ".join(
            f"{t} {sum(v) * 1000:.1f} ms, Envoy CPU {cpus.get(t, 0.0) * 1000:.0f} ms"
            for t, v in applied.items()
        )
        print(f"[{self.label}] change {k}: acked in {took * 1000:.0f} ms ({per})")

    def summary(self) -> str:
        applies = sorted(a for a, _ in self.changes)
        cpu = sum(c for _, c in self.changes)
        return (
            f"[{self.label}] {len(applies)} changes: Envoy apply (push -> ACK) median "
            f"{statistics.median(applies) * 1000:.1f} ms, max {applies[-1] * 1000:.1f} ms, "
            f"Envoy CPU {cpu * 1000 / len(applies):.1f} ms a change"
        )

    async def stop(self) -> None:
        self.envoy.terminate()
        self.envoy.wait()
        await self.server.stop()


async def run(args: argparse.Namespace) -> None:
    shape = shapes.Shape("hosts", args.objects)
    store = load(shape)
    dialects = default_dialects().all
    options, topts = CompileOptions(), TranslateOptions()
    memo, tmemo = CompileMemo(), translate_module.TranslateMemo()
    graph = build_graph(store.snapshot(), options, dialects, memo).graph
    resources = translate_module.translate(graph, topts, tmemo)
    forms = [("named", True), ("inline", False)] if args.ab else []
    forms = forms or [("named" if args.named_scopes else "inline", args.named_scopes)]
    sides: list[Side] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for label, named in forms:
                sides.append(await Side.start(label, args, Path(tmp), named))
                await sides[-1].first_apply(resources)
            for k in range(args.changes):
                i = (k * 7919) % args.objects
                name = f"proxy-{i}.yaml"
                parsed = parse_text(shapes.proxy_text(shape, i, k + 1), name)
                old = store.snapshot()
                store.replace_partition(name, parsed.objects, parsed.problems)
                snap = store.snapshot()
                result = build_graph(snap, options, dialects, memo, store.changes(old, snap))
                resources = translate_module.translate(result.graph, topts, tmemo)
                # Each side in turn, alternating who goes first: the same load for both.
                for side in sides if k % 2 == 0 else sides[::-1]:
                    await side.change(k, resources)
            for side in sides:
                if side.changes:
                    print(side.summary())
            if args.keep:
                print(f"admin ports {[s.admin_port for s in sides]}; Ctrl-C to stop")
                await asyncio.sleep(3600)
        finally:
            for side in sides:
                await side.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10000)
    parser.add_argument("--changes", type=int, default=3)
    parser.add_argument("--xds-api", choices=("delta", "sotw"), default="delta")
    parser.add_argument("--envoy-args", nargs="*", default=[])
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--named-scopes", action="store_true", help="Delta streams too take scopes naming tables"
    )
    parser.add_argument(
        "--ab", action="store_true", help="two Envoys, named and inline scopes, changes in turn"
    )
    parser.add_argument(
        "--bootstrap", default="{}", help="JSON: top-level bootstrap fields to set (null: drop)"
    )
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

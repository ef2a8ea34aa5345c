"""Issue 11's table, black-box: a change among N objects, from the file written to served by Envoy.

`turnout serve DIR` (its own Envoy, free ports, a fresh state directory) watches a temp directory
holding one file per object (each written to a temporary name and renamed, as a deployment tool
does), in one of two shapes:

- `hosts`: N HTTPProxy roots `hostI.example.com` x 5 prefix routes `/r0`..`/r4`, one Service and
  EndpointSlice each;
- `one-host`: one root `shared.example.com` including N children x 5 routes, one Service and
  EndpointSlice per child. An object's `includes` list is capped at 256, so the root includes
  groups of 200 children (`/gG/tI/rR`): one host, N + N/200 + 1 HTTPProxies.

Every endpoint is a local echo backend (`python -m turnout.echo`, two processes `app-0`/`app-1`).
Measured: cold start (process start -> `/readyz` 200 and a route answered through Envoy); K route
changes (one object's file rewritten with one more route, the new route polled through Envoy
every 5 ms until it answers 200); K EndpointSlice changes (one Service's endpoint moved to the
other backend, polled until that backend answers); peak RSS (VmHWM) of turnout and Envoy; the
mean of `turnout_xds_apply_seconds` (Envoy's push -> ACK) over the changes. With `--load`, `wrk`
(or a Python loop without it) requests existing routes, including those of the changed objects,
during the changes and counts non-2xx answers and socket errors.

The same run first measures a small baseline (`--baseline`, 100 objects) the same way; every
figure is also printed as a ratio to it. Run:

    PYTHONPATH=src python3 bench/change_latency.py --objects 1000 --shape hosts --changes 20 --load

`--restart` then restarts turnout twice with the files as the run left them: after a clean stop
(turnout stops its Envoy: a fresh one starts) and after turnout alone was killed (SIGKILL: its
Envoy is adopted), each measured as the cold start, plus when its first compile was through.

`--serve-flags "..."` passes flags to every `turnout serve`. `--variants NAME=FLAGS ...` compares
serve flags instead of sizes: each size runs once per variant, and the first variant is the
baseline of the ratios, e.g. one RouteConfiguration against scoped routes per host:

    PYTHONPATH=src python3 bench/change_latency.py --objects 10000 --changes 3 \
        --variants "single=--scoped-routes-min-hosts 0" "scoped=--scoped-routes-min-hosts 1000"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

GROUP = 200
ROUTES = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_atomically(path: Path, text: str) -> None:
    # The files source reads only .yaml/.json: the temporary name is never loaded half-written.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Shape:
    """Where object `i` lives: its namespace, host and the path prefix in front of its routes."""

    name: str
    n: int

    def host(self, i: int) -> str:
        return f"host{i}.example.com" if self.name == "hosts" else "shared.example.com"

    def prefix(self, i: int) -> str:
        return "" if self.name == "hosts" else f"/g{i // GROUP}/t{i}"

    def url_path(self, i: int, route: str) -> str:
        return self.prefix(i) + route


def service_files(i: int, port: int) -> dict[str, str]:
    ns = f"team-{i}"
    svc = (
        f"apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: {ns}}}\n"
        "spec: {ports: [{name: http, port: 80}]}\n"
    )
    return {f"svc-{i}.yaml": svc, f"slice-{i}.yaml": slice_text(i, port)}


def slice_text(i: int, port: int) -> str:
    return (
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
        f"metadata: {{name: app-1, namespace: team-{i}, "
        "labels: {kubernetes.io/service-name: app}}\n"
        f"ports: [{{name: http, port: {port}}}]\nendpoints: [{{addresses: [127.0.0.1]}}]\n"
    )


def proxy_text(shape: Shape, i: int, extra: int) -> str:
    """Object `i`'s HTTPProxy with 5 routes plus `extra` routes `/new0`.. added by changes."""
    paths = [f"/r{r}" for r in range(ROUTES)] + [f"/new{k}" for k in range(extra)]
    routes = "".join(
        f"    - conditions: [{{prefix: {p}}}]\n      services: [{{name: app, port: 80}}]\n"
        for p in paths
    )
    if shape.name == "hosts":
        head = f"metadata: {{name: root, namespace: team-{i}}}\n"
        head += f"spec:\n  virtualhost: {{fqdn: {shape.host(i)}}}\n"
    else:
        head = f"metadata: {{name: child, namespace: team-{i}}}\nspec:\n"
    return f"apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n{head}  routes:\n{routes}"


def include_list(items: list[tuple[str, str, str]]) -> str:
    return "".join(
        f"    - {{name: {name}, namespace: {ns}, conditions: [{{prefix: {prefix}}}]}}\n"
        for name, ns, prefix in items
    )


def one_host_roots(n: int) -> dict[str, str]:
    """The shared root and its groups, each group including up to GROUP children."""
    groups = (n + GROUP - 1) // GROUP
    files = {
        "root.yaml": "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        "metadata: {name: root, namespace: shared}\n"
        "spec:\n  virtualhost: {fqdn: shared.example.com}\n  includes:\n"
        + include_list([(f"group-{g}", "shared", f"/g{g}") for g in range(groups)])
    }
    for g in range(groups):
        children = range(g * GROUP, min(n, (g + 1) * GROUP))
        files[f"group-{g}.yaml"] = (
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
            f"metadata: {{name: group-{g}, namespace: shared}}\nspec:\n  includes:\n"
            + include_list([("child", f"team-{i}", f"/t{i}") for i in children])
        )
    return files


def generate(directory: Path, shape: Shape, port: int) -> None:
    files: dict[str, str] = {}
    for i in range(shape.n):
        files.update(service_files(i, port))
        files[f"proxy-{i}.yaml"] = proxy_text(shape, i, 0)
    if shape.name == "one-host":
        files.update(one_host_roots(shape.n))
    for name, text in files.items():
        write_atomically(directory / name, text)


def serve(
    directory: Path, state: Path, ports: dict[str, int], log: Path, flags: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "turnout", "serve", str(directory), "--state-dir", str(state)]
    for flag, port in ports.items():
        cmd += [f"--{flag}", str(port)]
    cmd += ["--log-level", "warning", "--envoy-log-level", "error", "--no-demo-backends"]
    cmd += flags
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=out)


async def until(check: object, timeout: float) -> float:
    """Seconds until the awaitable factory `check` returns True, polled every 5 ms."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if await check():  # type: ignore[operator]
                return time.perf_counter() - started
        await asyncio.sleep(0.005)
    raise TimeoutError(f"not served within {timeout} s")


def answered(
    client: httpx.AsyncClient, url: str, host: str, path: str, backend: str | None = None
) -> object:
    async def check() -> bool:
        r = await client.get(url + path, headers={"host": host})
        return r.status_code == 200 and (backend is None or r.json()["service"] == backend)

    return check


def rss_peak_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


ROUTE_TYPES = ("route", "scoped_route")


def apply_seconds(metrics: str, types: tuple[str, ...] = ()) -> tuple[float, float]:
    """Sum and count of `turnout_xds_apply_seconds` over every type (or only `types`)."""
    total = count = 0.0
    for line in metrics.splitlines():
        m = re.match(r'turnout_xds_apply_seconds_(sum|count)\{.*type="(\w+)".*\} (\S+)$', line)
        if m and (not types or m.group(2) in types):
            if m.group(1) == "sum":
                total += float(m.group(3))
            else:
                count += float(m.group(3))
    return total, count


@dataclass
class Load:
    """Requests against existing routes while the changes run: wrk if installed, else Python."""

    port: int
    targets: list[tuple[str, str]]
    directory: Path
    proc: subprocess.Popen[bytes] | None = None
    task: asyncio.Task[None] | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: {"requests": 0, "non2xx": 0, "errors": 0}
    )

    async def start(self) -> None:
        if shutil.which("wrk"):
            reqs = ", ".join(f'wrk.format("GET", "{p}", {{Host = "{h}"}})' for h, p in self.targets)
            script = self.directory / "load.lua"
            script.write_text(
                f"local reqs = {{{reqs}}}\nlocal i = 0\n"
                "request = function() i = i % #reqs + 1; return reqs[i] end\n"
            )
            cmd = ["wrk", "-t1", "-c8", "-d3600s", "-s", str(script)]
            cmd.append(f"http://127.0.0.1:{self.port}/")
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        else:
            self.task = asyncio.create_task(self.python_loop())

    async def python_loop(self) -> None:
        url = f"http://127.0.0.1:{self.port}"
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                for host, path in self.targets:
                    self.counts["requests"] += 1
                    try:
                        r = await client.get(url + path, headers={"host": host})
                        self.counts["non2xx"] += r.status_code // 100 != 2
                    except httpx.HTTPError:
                        self.counts["errors"] += 1

    async def stop(self) -> dict[str, int]:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            return self.counts
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        out = (await asyncio.to_thread(self.proc.communicate, None, 60))[0].decode()
        number = r"(\d+)"
        for key, pattern in (
            ("requests", rf"{number} requests in"),
            ("non2xx", rf"Non-2xx.*: {number}"),
        ):
            m = re.search(pattern, out)
            self.counts[key] = int(m.group(1)) if m else 0
        m = re.search(rf"connect {number}, read {number}, write {number}, timeout {number}", out)
        self.counts["errors"] = sum(int(g) for g in m.groups()) if m else 0
        return self.counts


def pick(n: int, k: int, salt: int) -> int:
    """The object the k-th change touches: spread over the whole range, never object 0."""
    return 1 + (k * 7919 + salt) % max(1, n - 1)


async def route_changes(run: Run, client: httpx.AsyncClient, k: int) -> list[float]:
    extra: dict[int, int] = {}
    times = []
    for c in range(k):
        i = pick(run.shape.n, c, 0)
        extra[i] = extra.get(i, 0) + 1
        path = run.shape.url_path(i, f"/new{extra[i] - 1}")
        write_atomically(run.directory / f"proxy-{i}.yaml", proxy_text(run.shape, i, extra[i]))
        check = answered(client, run.envoy, run.shape.host(i), path)
        times.append(await until(check, run.timeout))
    return times


async def slice_changes(run: Run, client: httpx.AsyncClient, k: int) -> list[float]:
    on: dict[int, int] = {}
    times = []
    for c in range(k):
        i = pick(run.shape.n, c, 5003)
        on[i] = 1 - on.get(i, 0)
        write_atomically(run.directory / f"slice-{i}.yaml", slice_text(i, run.backends[on[i]]))
        path = run.shape.url_path(i, "/r0")
        check = answered(client, run.envoy, run.shape.host(i), path, f"app-{on[i]}")
        times.append(await until(check, run.timeout))
    return times


@dataclass
class Run:
    shape: Shape
    directory: Path
    backends: tuple[int, int]
    envoy: str
    timeout: float
    flags: tuple[str, ...] = ()  # more `turnout serve` flags


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def cold_start(
    client: httpx.AsyncClient, run: Run, admin: str, started: float
) -> dict[str, float]:
    async def ready() -> bool:
        return (await client.get(admin + "/readyz")).status_code == 200

    await until(ready, run.timeout)
    ready_at = time.perf_counter() - started
    await until(answered(client, run.envoy, run.shape.host(0), run.shape.url_path(0, "/r0")), 60)
    return {"ready": ready_at, "served": time.perf_counter() - started}


async def measure(
    run: Run, ports: dict[str, int], k: int, load: bool, log: Path
) -> dict[str, float]:
    state = run.directory.parent / "state"
    admin = f"http://127.0.0.1:{ports['admin-port']}"
    started = time.perf_counter()
    proc = serve(run.directory, state, ports, log, run.flags)
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            result = await cold_start(client, run, admin, started)
            before = apply_seconds((await client.get(admin + "/metrics")).text)
            n = run.shape.n
            targets = [
                (run.shape.host(pick(n, c, 0)), run.shape.url_path(pick(n, c, 0), "/r4"))
                for c in range(min(k, 20))
            ]
            targets.append((run.shape.host(n - 1), run.shape.url_path(n - 1, "/r4")))
            pressure = Load(ports["http-port"], targets, run.directory.parent)
            if load:
                await pressure.start()
            text = (await client.get(admin + "/metrics")).text
            routes_before = apply_seconds(text, ROUTE_TYPES)
            routes = await route_changes(run, client, k)
            routes_after = apply_seconds((await client.get(admin + "/metrics")).text, ROUTE_TYPES)
            slices = await slice_changes(run, client, k)
            counts = await pressure.stop() if load else {}
            after = apply_seconds((await client.get(admin + "/metrics")).text)
        envoy_pid = int((state / "envoy.pid").read_text().split()[0])
        result.update(
            route_p50=statistics.median(routes),
            route_p99=pct(routes, 0.99),
            slice_p50=statistics.median(slices),
            slice_p99=pct(slices, 0.99),
            apply_mean=(after[0] - before[0]) / max(1.0, after[1] - before[1]),
            apply_route_mean=(routes_after[0] - routes_before[0])
            / max(1.0, routes_after[1] - routes_before[1]),
            turnout_rss=rss_peak_mib(proc.pid),
            envoy_rss=rss_peak_mib(envoy_pid),
            **{f"load_{key}": float(v) for key, v in counts.items()},
        )
        return result
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def compiled(client: httpx.AsyncClient, admin: str) -> object:
    """Whether turnout's first compile is through (`turnout_compiles_total` counted one)."""

    async def check() -> bool:
        text = (await client.get(admin + "/metrics")).text
        m = re.search(r"^turnout_compiles_total (\S+)$", text, re.MULTILINE)
        return m is not None and float(m.group(1)) >= 1

    return check


async def restarts(run: Run, ports: dict[str, int], log: Path) -> dict[str, float]:
    """Two restarts with the files as the measured run left them: after a clean stop (turnout
    stops its Envoy, so a fresh one starts), then after turnout alone was killed (SIGKILL, once
    its first compile was through): its Envoy kept running and is adopted."""
    state = run.directory.parent / "state"
    out: dict[str, float] = {}
    try:
        await restart_twice(run, ports, log, out)
    except BaseException:
        # The killed turnout's Envoy must not outlive the run.
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((state / "envoy.pid").read_text().split()[0]), signal.SIGTERM)
        raise
    return out


async def restart_twice(run: Run, ports: dict[str, int], log: Path, out: dict[str, float]) -> None:
    state = run.directory.parent / "state"
    admin = f"http://127.0.0.1:{ports['admin-port']}"
    async with httpx.AsyncClient(timeout=5.0) as client:
        for name in ("restart", "adopted"):
            started = time.perf_counter()
            proc = serve(run.directory, state, ports, log, run.flags)
            try:
                result = await cold_start(client, run, admin, started)
                out[f"{name}_ready"], out[f"{name}_served"] = result["ready"], result["served"]
                await until(compiled(client, admin), run.timeout)
                out[f"{name}_compiled"] = time.perf_counter() - started
            finally:
                if name == "restart":
                    proc.kill()  # turnout only: the next one adopts its Envoy
                else:
                    proc.send_signal(signal.SIGTERM)
                proc.wait(60)


async def one(
    shape: Shape,
    k: int,
    load: bool,
    timeout: float,
    flags: tuple[str, ...] = (),
    restart: bool = False,
) -> dict[str, float]:
    names = ("http-port", "https-port", "admin-port", "xds-port", "envoy-admin-port")
    ports = {name: free_port() for name in names}
    pair = (free_port(), free_port())
    backends = [
        subprocess.Popen(
            [sys.executable, "-m", "turnout.echo", "--port", str(p), "--name", f"app-{b}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for b, p in enumerate(pair)
    ]
    with tempfile.TemporaryDirectory(prefix="turnout-change-") as tmp:
        directory = Path(tmp) / "objects"
        directory.mkdir()
        envoy = f"http://127.0.0.1:{ports['http-port']}"
        run = Run(shape, directory, pair, envoy, timeout, flags)
        try:
            generate(directory, shape, pair[0])
            result = await measure(run, ports, k, load, Path(tmp) / "turnout.log")
            if restart:
                result.update(await restarts(run, ports, Path(tmp) / "turnout.log"))
            return result
        except Exception:
            with contextlib.suppress(OSError):
                sys.stderr.write((Path(tmp) / "turnout.log").read_text()[-4000:])
            raise
        finally:
            for b in backends:
                b.terminate()
                b.wait(10)


ROWS = (
    ("cold start: /readyz 200", "ready", "s"),
    ("cold start: a route served", "served", "s"),
    ("restart (fresh Envoy): /readyz 200", "restart_ready", "s"),
    ("restart (fresh Envoy): a route served", "restart_served", "s"),
    ("restart (fresh Envoy): first compile through", "restart_compiled", "s"),
    ("restart (Envoy adopted): /readyz 200", "adopted_ready", "s"),
    ("restart (Envoy adopted): first compile through", "adopted_compiled", "s"),
    ("route added -> served p50", "route_p50", "ms"),
    ("route added -> served p99", "route_p99", "ms"),
    ("EndpointSlice -> new backend p50", "slice_p50", "ms"),
    ("EndpointSlice -> new backend p99", "slice_p99", "ms"),
    ("Envoy apply (push -> ACK), mean", "apply_mean", "ms"),
    ("Envoy apply of route changes (RDS/SRDS push -> ACK), mean", "apply_route_mean", "ms"),
    ("turnout RSS peak", "turnout_rss", "MiB"),
    ("Envoy RSS peak", "envoy_rss", "MiB"),
    ("load: requests during changes", "load_requests", ""),
    ("load: non-2xx", "load_non2xx", ""),
    ("load: socket errors", "load_errors", ""),
)


def table(
    title: str, base: dict[str, float], big: dict[str, float], columns: tuple[str, str]
) -> str:
    lines = [
        title,
        f"| measure | {columns[0]} (baseline) | {columns[1]} | ratio |",
        "|---|---:|---:|---:|",
    ]
    for label, key, unit in ROWS:
        if key not in big:
            continue
        scale = 1000 if unit == "ms" else 1
        a, b = base.get(key, float("nan")) * scale, big[key] * scale
        ratio = f"{b / a:.2f}x" if a else "-"
        fmt = ".1f" if unit in ("s", "MiB") else ".0f"
        lines.append(f"| {label} ({unit or 'count'}) | {a:,{fmt}} | {b:,{fmt}} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, nargs="+", default=[1000])
    parser.add_argument("--baseline", type=int, default=100, help="the small run's objects")
    parser.add_argument("--shape", choices=["hosts", "one-host"], nargs="+", default=["hosts"])
    parser.add_argument("--changes", type=int, default=20, help="route and EndpointSlice changes")
    parser.add_argument("--load", action="store_true", help="wrk (or Python) load on old routes")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per wait")
    parser.add_argument("--serve-flags", default="", help="more flags for every turnout serve")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="then restart with the files unchanged: after a clean stop, and turnout killed alone",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[],
        metavar="NAME=FLAGS",
        help="compare serve flags at each size, the first variant being the baseline",
    )
    args = parser.parse_args()
    common = tuple(shlex.split(args.serve_flags))
    for shape in args.shape:
        mode = f"{'under load' if args.load else 'quiet'}, {args.changes} changes"
        if args.variants:
            compare_variants(args, shape, common, mode)
            continue
        base = asyncio.run(
            one(Shape(shape, args.baseline), args.changes, args.load, args.timeout, common,
                args.restart)
        )  # fmt: skip
        for n in args.objects:
            big = asyncio.run(
                one(Shape(shape, n), args.changes, args.load, args.timeout, common, args.restart)
            )
            columns = (f"{args.baseline:,}", f"{n:,}")
            print(table(f"\n{shape}, {mode}", base, big, columns), flush=True)


def compare_variants(
    args: argparse.Namespace, shape: str, common: tuple[str, ...], mode: str
) -> None:
    variants = [v.partition("=") for v in args.variants]
    for n in args.objects:
        results = [
            asyncio.run(
                one(Shape(shape, n), args.changes, args.load, args.timeout,
                    common + tuple(shlex.split(flags)))
            )
            for _, _, flags in variants
        ]  # fmt: skip
        for (name, _, _), result in zip(variants[1:], results[1:], strict=True):
            title = f"\n{shape}, {n:,} objects, {mode}: {variants[0][0]} vs {name}"
            print(table(title, results[0], result, (variants[0][0], name)), flush=True)


if __name__ == "__main__":
    main()

"""Black-box half of `bench/endpoint_change.py`: an EndpointSlice change through a real Envoy.

`turnout serve` (with its own Envoy) on a directory holding the HTTPProxies of
`bench/compile_bench.py`; team 0's EndpointSlice is a file of its own whose endpoint points at
one of two echo backends on loopback. Each change rewrites that file (write, then rename, as a
deployment tool does) so the endpoint moves to the other backend's port, and times until a
request through Envoy is answered by that backend. The baseline (same run) makes the same
change with an unrelated ConfigMap in the file changed too, which takes the full compile.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from compile_bench import generate

from turnout.echo import start_echo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def slice_file(port: int, marker: str) -> str:
    """Team 0's EndpointSlice on `port`, and a ConfigMap nothing reads holding `marker`."""
    return (
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
        "metadata: {name: app-1, namespace: team-0, labels: {kubernetes.io/service-name: app}}\n"
        f"ports: [{{name: http, port: {port}}}]\n"
        "endpoints: [{addresses: [127.0.0.1]}]\n"
        "---\napiVersion: v1\nkind: ConfigMap\n"
        f"metadata: {{name: bench, namespace: team-0}}\ndata: {{marker: '{marker}'}}\n"
    )


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def answered_by(client: httpx.AsyncClient, url: str, name: str, timeout: float) -> float:
    """Seconds until a request to `url` is answered by the backend `name`."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        try:
            r = await client.get(url, headers={"host": "host0.example.com", "x-r": "0"})
            if r.status_code == 200 and r.json().get("service") == name:
                return time.perf_counter() - started
        except (httpx.HTTPError, ValueError):
            pass
        await asyncio.sleep(0.002)
    raise TimeoutError(f"{name} never answered")


def serve(directory: Path, state: Path, http_port: int, admin_port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "turnout", "serve", str(directory)]
    for flag, port in (
        ("--http-port", http_port),
        ("--admin-port", admin_port),
        ("--https-port", free_port()),
        ("--xds-port", free_port()),
        ("--envoy-admin-port", free_port()),
    ):
        cmd += [flag, str(port)]
    cmd += ["--state-dir", str(state), "--log-level", "warning"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def changes(
    directory: Path, url: str, ports: tuple[int, int], n: int, full: bool
) -> list[float]:
    times = []
    async with httpx.AsyncClient(timeout=2.0) as client:
        for i in range(n):
            target = i % 2
            marker = f"full-{i}" if full else "same"
            write_atomically(directory / "slice.yaml", slice_file(ports[target], marker))
            times.append(await answered_by(client, url, f"app-{target}", 60.0))
    return times


async def run(proxies: int, routes: int, n: int) -> None:
    backends = [await start_echo("127.0.0.1", 0, name=f"app-{i}") for i in range(2)]
    ports = (backends[0].port, backends[1].port)
    http_port, admin_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmp:
        directory, state = Path(tmp) / "objects", Path(tmp) / "state"
        directory.mkdir()
        docs = generate(proxies, routes).split("---\n")
        docs = [d for d in docs if "namespace: team-0, labels" not in d]
        (directory / "routes.yaml").write_text("---\n".join(docs))
        write_atomically(directory / "slice.yaml", slice_file(ports[1], "same"))
        proc = serve(directory, state, http_port, admin_port)
        url = f"http://127.0.0.1:{http_port}/r0"
        try:
            started = time.perf_counter()
            async with httpx.AsyncClient(timeout=2.0) as client:
                await answered_by(client, url, "app-1", 900.0)
            print(f"  cold start to first answer: {time.perf_counter() - started:.1f} s")
            # The fast ones first: the file's ConfigMap stays as it was written at the start.
            fast = await changes(directory, url, ports, n, full=False)
            baseline = await changes(directory, url, ports, 4, full=True)
        finally:
            proc.terminate()
            proc.wait(30)
            for b in backends:
                await b.close()
    base = statistics.median(baseline)
    print(f"{proxies} HTTPProxy roots through Envoy, EndpointSlice change -> new backend answers")
    for label, t in (("full compile (baseline)", baseline), ("endpoints fast path", fast)):
        ordered = sorted(t)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        print(
            f"  {label:<24} p50 {statistics.median(t) * 1000:8.1f} ms  p99 {p99 * 1000:8.1f} ms"
            f"  {statistics.median(t) / base:.3f}x  (n={len(t)})"
        )


def black_box(proxies: int, routes: int, n: int) -> None:
    asyncio.run(run(proxies, routes, n))

"""Status convergence: N HTTPRoutes (or N HTTPProxies) created at once in the fake API server,
and the time until `turnout serve --kubernetes` has written every one's status (HTTPRoute: its
parent's `Accepted` True; HTTPProxy: `currentStatus: valid`). Target: <= 2 s for 1,000
(docs/benchmarks.md, "Status convergence").

Three processes: the fake API server, turnout (`--no-envoy --no-leader-elect`, the default status
write rate) and this one, a plain HTTP client that creates the objects (8 requests in flight)
and lists them every 50 ms. The same run's baselines: how long the fake takes to accept the N
creates, and (turnout stopped) how long it takes to accept N status merge-patches from a plain
client with 8 in flight, the floor for any status writer against this server. Run from the
repository root:

    PYTHONPATH=src python3 bench/status_convergence.py --objects 1000 --kind HTTPRoute
    PYTHONPATH=src python3 bench/status_convergence.py --objects 1000 --kind HTTPProxy
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]

NS = "bench"
GW = "gateway.networking.k8s.io/v1"
CONTROLLER = "turnout.dev/gateway-controller"
IN_FLIGHT = 8
# The fake API server in its own process: it prints its URL and token, and serves until stdin
# closes.
SERVER = """
import sys, pathlib
sys.path.insert(0, {repo!r})
from tests.fake_apiserver import FakeApiServer
with FakeApiServer(bookmark_interval=5.0) as fake:
    fake.kubeconfig(pathlib.Path({kubeconfig!r}))
    print(fake.url, fake.token, flush=True)
    sys.stdin.read()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def objects(kind: str, n: int) -> list[dict[str, Any]]:
    meta = {"namespace": NS}
    web = {"name": "web", "port": 80}
    if kind == "HTTPRoute":
        return [
            {
                "apiVersion": GW,
                "kind": "HTTPRoute",
                "metadata": {**meta, "name": f"r{i}"},
                "spec": {
                    "parentRefs": [{"name": "gw"}],
                    "hostnames": [f"r{i}.example.com"],
                    "rules": [{"backendRefs": [web]}],
                },
            }
            for i in range(n)
        ]
    return [
        {
            "apiVersion": "projectcontour.io/v1",
            "kind": "HTTPProxy",
            "metadata": {**meta, "name": f"p{i}"},
            "spec": {
                "virtualhost": {"fqdn": f"p{i}.example.com"},
                "routes": [{"services": [web]}],
            },
        }
        for i in range(n)
    ]


def converged(kind: str, status: Any) -> bool:
    if not isinstance(status, dict):
        return False
    if kind == "HTTPProxy":
        return status.get("currentStatus") == "valid"
    for parent in status.get("parents", []):
        if parent.get("controllerName") == CONTROLLER:
            return any(
                c.get("type") == "Accepted" and c.get("status") == "True"
                for c in parent.get("conditions", [])
            )
    return False


def collection(kind: str) -> str:
    if kind == "HTTPRoute":
        return f"/apis/{GW}/namespaces/{NS}/httproutes"
    if kind == "HTTPProxy":
        return f"/apis/projectcontour.io/v1/namespaces/{NS}/httpproxies"
    if kind == "Gateway":
        return f"/apis/{GW}/namespaces/{NS}/gateways"
    if kind == "GatewayClass":
        return f"/apis/{GW}/gatewayclasses"
    if kind == "Service":
        return f"/api/v1/namespaces/{NS}/services"
    return "/api/v1/namespaces"


async def all_converged(api: httpx.AsyncClient, kind: str, n: int) -> bool:
    items = (await api.get(collection(kind))).json()["items"]
    return len(items) == n and all(converged(kind, o.get("status")) for o in items)


async def wait(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def send_all(api: httpx.AsyncClient, requests: list[tuple[str, str, Any]]) -> None:
    """Sends every request, IN_FLIGHT at a time; any error answer stops the benchmark."""
    queue = list(reversed(requests))

    async def worker() -> None:
        while queue:
            method, path, body = queue.pop()
            headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
            r = await api.request(method, path, content=json.dumps(body), headers=headers)
            if r.status_code >= 400:
                raise SystemExit(f"{method} {path}: {r.status_code} {r.text[:200]}")

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))


def start_turnout(kubeconfig: Path, state: str, admin: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "turnout", "serve", "--kubernetes", "--kubeconfig"]
    cmd += [str(kubeconfig), "--no-envoy", "--no-leader-elect", "--no-demo-backends"]
    for flag in ("--http-port", "--https-port", "--xds-port", "--envoy-admin-port"):
        cmd += [flag, str(free_port())]
    cmd += ["--admin-port", str(admin), "--state-dir", state, "--log-level", "warning"]
    return subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def status_writes(admin: int) -> dict[str, float]:
    """turnout_status_writes_total by result, from turnout's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{admin}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("turnout_status_writes_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            out[result] = float(line.rsplit(" ", 1)[1])
    return out


def setup_objects() -> list[tuple[str, dict[str, Any]]]:
    port = free_port()
    return [
        ("Namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        (
            "Service",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"ports": [{"name": "http", "port": 80}]},
            },
        ),
        (
            "GatewayClass",
            {
                "apiVersion": GW,
                "kind": "GatewayClass",
                "metadata": {"name": "turnout"},
                "spec": {"controllerName": CONTROLLER},
            },
        ),
        (
            "Gateway",
            {
                "apiVersion": GW,
                "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": NS},
                "spec": {
                    "gatewayClassName": "turnout",
                    "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
                },
            },
        ),
    ]


async def gateway_has_status(api: httpx.AsyncClient) -> bool:
    return "status" in (await api.get(f"{collection('Gateway')}/gw")).json()


async def measure(api: httpx.AsyncClient, kind: str, n: int, kubeconfig: Path) -> dict[str, float]:
    for k, o in setup_objects():
        await send_all(api, [("POST", collection(k), o)])
    admin = free_port()
    with tempfile.TemporaryDirectory() as state:
        proc = start_turnout(kubeconfig, state, admin)
        try:
            # Ready: the Gateway got its status (watches up, a compile and a write done).
            await wait(lambda: gateway_has_status(api), 120, "turnout's first status")
            await asyncio.sleep(1.0)
            before = status_writes(admin)
            creates = [("POST", collection(kind), o) for o in objects(kind, n)]
            started = time.perf_counter()
            await send_all(api, creates)
            created = time.perf_counter() - started
            await wait(lambda: all_converged(api, kind, n), 600, "every status written")
            total = time.perf_counter() - started
            await asyncio.sleep(2.0)  # anything written after convergence counts too
            after = status_writes(admin)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    # The floor: the same number of status patches from a plain client, turnout stopped.
    names = [o["metadata"]["name"] for o in objects(kind, n)]
    patches = [
        ("PATCH", f"{collection(kind)}/{name}/status", {"status": {"bench": 1}}) for name in names
    ]
    started = time.perf_counter()
    await send_all(api, patches)
    patched = time.perf_counter() - started
    written = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {"create_s": created, "converged_s": total, "patch_s": patched, **written}


async def run_once(kind: str, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        code = SERVER.format(repo=str(REPO), kubeconfig=str(kubeconfig))
        server = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert server.stdout is not None
            url, token = server.stdout.readline().decode().split()
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as api:
                return await measure(api, kind, n, kubeconfig)
        finally:
            server.kill()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--kind", choices=["HTTPRoute", "HTTPProxy"], default="HTTPRoute")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs")
    for i in range(args.repeat):
        r = asyncio.run(run_once(args.kind, args.objects))
        print(
            f"run {i + 1}: {args.objects} {args.kind}s: the fake accepted the creates in "
            f"{r['create_s']:.2f} s; every status written {r['converged_s']:.2f} s after the "
            f"first create ({r['converged_s'] - r['create_s']:.2f} s after the last); baseline: "
            f"{args.objects} status patches from a plain client took {r['patch_s']:.2f} s; "
            f"turnout's writes: {int(r.get('written', 0))} written, "
            f"{int(r.get('conflict', 0))} conflicts, {int(r.get('error', 0))} errors",
            flush=True,
        )


if __name__ == "__main__":
    main()

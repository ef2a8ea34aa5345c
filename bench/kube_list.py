"""Lists 10,000 HTTPProxies and 10,000 Ingresses from the fake API server with each candidate
client, measuring list+decode time and memory: the figures behind turnout's choice of lightkube's
transport with raw `json.loads` (docs/benchmarks.md, "Kubernetes list and decode").

The fake API server runs in a child process, so its JSON encoding does not share this process's
GIL, and the client's own work is this process's CPU time, given as a ratio to `json.loads` of
the same response body measured in the same run (the machines are shared and noisy). Memory is
tracemalloc's peak while listing and what the decoded result keeps, in a separate pass (tracing
slows the code it traces). Run from the repository root:

    PYTHONPATH=src python3 bench/kube_list.py --objects 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from turnout.sources.kubernetes.api import KubeApi, load_config  # noqa: E402
from turnout.sources.kubernetes.convert import to_object  # noqa: E402
from turnout.sources.kubernetes.kinds import by_group_kind  # noqa: E402

SERVER = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.fake_apiserver import FakeApiServer
n = {n}
with FakeApiServer() as fake:
    for i in range(n):
        ns = f"team-{{i % 100}}"
        fake.create({{"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
            "metadata": {{"name": f"p{{i}}", "namespace": ns, "labels": {{"app": "web"}}}},
            "spec": {{"virtualhost": {{"fqdn": f"h{{i}}.example.com",
                "tls": {{"secretName": "c"}}}},
                "routes": [{{"conditions": [{{"prefix": f"/r{{j}}"}}],
                    "services": [{{"name": "web", "port": 80}}]}} for j in range(3)]}}}})
        fake.create({{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {{"name": f"i{{i}}", "namespace": ns}},
            "spec": {{"ingressClassName": "turnout", "rules": [{{"host": f"h{{i}}.example.org",
                "http": {{"paths": [{{"path": f"/p{{j}}", "pathType": "Prefix",
                    "backend": {{"service": {{"name": "web", "port": {{"number": 80}}}}}}}}
                    for j in range(3)]}}}}]}}}})
    fake.kubeconfig(__import__("pathlib").Path({kubeconfig!r}))
    print(fake.port, flush=True)
    sys.stdin.read()
"""

HP_PATH = "/apis/projectcontour.io/v1/httpproxies"
ING_PATH = "/apis/networking.k8s.io/v1/ingresses"


def start_server(n: int, kubeconfig: Path) -> tuple[subprocess.Popen[str], int]:
    code = SERVER.format(repo=str(REPO), n=n, kubeconfig=str(kubeconfig))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def candidates(kubeconfig: Path) -> dict[str, Callable[[str], Awaitable[Any]]]:
    """name -> an async function listing one collection path and decoding it."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from lightkube import AsyncClient, KubeConfig
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.resources.networking_v1 import Ingress

    config = load_config(kubeconfig, None)
    hp_generic = create_namespaced_resource("projectcontour.io", "v1", "HTTPProxy", "httpproxies")
    official = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    resources = by_group_kind()

    async def raw(path: str) -> Any:
        api = KubeApi.connect(config)
        try:
            return (await api.get(path))["items"]
        finally:
            await api.close()

    async def raw_objects(path: str) -> Any:
        kind = (
            ("projectcontour.io", "HTTPProxy")
            if path == HP_PATH
            else ("networking.k8s.io", "Ingress")
        )
        return [to_object(i, resources[kind]) for i in await raw(path)]

    async def typed(path: str) -> Any:
        client = AsyncClient(KubeConfig.from_file(kubeconfig))
        try:
            res = hp_generic if path == HP_PATH else Ingress
            return [o async for o in client.list(res, namespace="*")]
        finally:
            await client.close()

    async def official_client(path: str) -> Any:
        if path == HP_PATH:
            return await asyncio.to_thread(
                k8s.CustomObjectsApi(official).list_cluster_custom_object,
                "projectcontour.io",
                "v1",
                "httpproxies",
            )
        return await asyncio.to_thread(
            k8s.NetworkingV1Api(official).list_ingress_for_all_namespaces
        )

    return {
        "lightkube transport + json.loads (turnout)": raw,
        "  ... + KubeObject (what the store keeps)": raw_objects,
        "lightkube typed / generic resource": typed,
        "official kubernetes client": official_client,
    }


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds): the server is another process, so the CPU
    time is the client's own work (HTTP, decode), which the wall time hides on a busy machine."""
    walls, cpus = [], []
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        await fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


async def memory(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(peak MB while listing, MB the decoded result keeps)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    result = await fn()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return (peak - base) / 1e6, (current - base) / 1e6


async def measure(port: int, kubeconfig: Path, repeat: int) -> None:
    fns = candidates(kubeconfig)
    headers = {"Authorization": "Bearer test-token"}
    for label, path in (("HTTPProxy", HP_PATH), ("Ingress", ING_PATH)):
        body = httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=60).content
        baseline = statistics.median(
            _time(lambda body=body: json.loads(body)) for _ in range(repeat)
        )
        n = len(json.loads(body)["items"])
        print(f"\n{n} {label} ({len(body) / 1e6:.1f} MB body); json.loads {baseline * 1e3:.0f} ms")
        print("| client | wall | client CPU | CPU / json.loads | peak MB | kept MB |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, fn in fns.items():
            wall, cpu = await timed(lambda fn=fn, path=path: fn(path), repeat)
            peak, kept = await memory(lambda fn=fn, path=path: fn(path))
            print(
                f"| {name} | {wall * 1e3:,.0f} ms | {cpu * 1e3:,.0f} ms | {cpu / baseline:.1f}x "
                f"| {peak:,.0f} | {kept:,.0f} |"
            )


def _time(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000, help="of each kind")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {args.objects} of each kind")
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        proc, port = start_server(args.objects, kubeconfig)
        try:
            asyncio.run(measure(port, kubeconfig, args.repeat))
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()

"""Envoy's memory per 1,000 clusters, with turnout's default trimmed statistics and with all of
them (`--envoy-stats`).

Starts the `envoy` on PATH with turnout's bootstrap plus N static clusters (one endpoint each,
named as turnout names Service clusters), waits until Envoy is ready, and reads its resident set
size, the allocator's `/memory` figures and the number of statistics. The baseline is the same
Envoy with no clusters, measured in the same run.

    python3 bench/envoy_stats_memory.py --clusters 1000 5000
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from turnout.envoy.bootstrap import bootstrap_config, write_bootstrap
from turnout.envoy.stats import EnvoyStats


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster(i: int) -> dict[str, Any]:
    name = f"team{i}/web/80"
    endpoint = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 9}}}
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": endpoint}]}],
        },
    }


def measure(clusters: int, stats: EnvoyStats, workdir: Path) -> dict[str, float]:
    admin = free_port()
    config = bootstrap_config(
        xds_address="127.0.0.1",
        xds_port=free_port(),
        admin_address="127.0.0.1",
        admin_port=admin,
        node_id="bench",
        stats=stats,
    )
    del config["dynamic_resources"]  # static clusters only: nothing to wait for
    config["static_resources"]["clusters"] = [cluster(i) for i in range(clusters)]
    path = write_bootstrap(workdir / f"b-{clusters}-{stats}.yaml", config)
    proc = subprocess.Popen(
        ["envoy", "-c", str(path), "--concurrency", "2", "--base-id", str(admin)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{admin}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base}/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        time.sleep(2)  # let the workers pick up the clusters
        with urllib.request.urlopen(f"{base}/memory") as r:
            memory = json.load(r)
        with urllib.request.urlopen(f"{base}/stats") as r:
            count = sum(1 for _ in r)
        rss_kib = next(
            int(line.split()[1])
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        return {
            "rss_mib": rss_kib / 1024,
            "allocated_mib": int(memory["allocated"]) / 2**20,
            "stats": count,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000, 5000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        baseline = measure(0, EnvoyStats.ALL, work)
        print(
            f"baseline (0 clusters): RSS {baseline['rss_mib']:.1f} MiB, "
            f"allocated {baseline['allocated_mib']:.1f} MiB, {baseline['stats']} stats"
        )
        print(
            "| clusters | stats | statistics | RSS MiB | allocated MiB "
            "| allocated per 1,000 clusters (MiB) | ratio to all |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|")
        for n in args.clusters:
            rows = {s: measure(n, s, work) for s in (EnvoyStats.ALL, EnvoyStats.TRIMMED)}
            full = rows[EnvoyStats.ALL]["allocated_mib"] - baseline["allocated_mib"]
            for s, row in rows.items():
                per = (row["allocated_mib"] - baseline["allocated_mib"]) * 1000 / n
                ratio = (row["allocated_mib"] - baseline["allocated_mib"]) / full
                print(
                    f"| {n:,} | {s} | {row['stats']:,} | {row['rss_mib']:.1f} | "
                    f"{row['allocated_mib']:.1f} | {per:.1f} | {ratio:.2f} |"
                )


if __name__ == "__main__":
    main()

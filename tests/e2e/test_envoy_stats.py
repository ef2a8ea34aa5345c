"""`--envoy-stats`: a real Envoy started from turnout's bootstrap keeps the statistics the docs
list and drops the other per-cluster ones unless told to keep them all."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.harness import free_port
from turnout.envoy.bootstrap import bootstrap_config, write_bootstrap
from turnout.envoy.stats import KEPT_PER_CLUSTER, EnvoyStats


def _stat_names(tmp_path: Path, stats: EnvoyStats) -> set[str]:
    admin = free_port()
    config = bootstrap_config(
        xds_address="127.0.0.1",
        xds_port=free_port(),
        admin_address="127.0.0.1",
        admin_port=admin,
        node_id="stats-test",
        stats=stats,
    )
    del config["dynamic_resources"]
    endpoint = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 9}}}
    config["static_resources"]["clusters"].append(
        {
            "name": "team-a/web/80",
            "type": "STATIC",
            "connect_timeout": "1s",
            "load_assignment": {
                "cluster_name": "team-a/web/80",
                "endpoints": [{"lb_endpoints": [{"endpoint": endpoint}]}],
            },
        }
    )
    path = write_bootstrap(tmp_path / f"{stats}.yaml", config)
    envoy = subprocess.Popen(
        ["envoy", "-c", str(path), "--base-id", str(admin)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=2) as r:
                    return {line.split(":")[0] for line in r.read().decode().splitlines()}
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        envoy.terminate()
        envoy.wait(timeout=30)


@pytest.mark.parametrize("stats", list(EnvoyStats))
def test_per_cluster_statistics(tmp_path: Path, stats: EnvoyStats) -> None:
    names = _stat_names(tmp_path, stats)
    cluster = {n.removeprefix("cluster.team-a/web/80.") for n in names if "team-a/web/80" in n}
    # What the docs promise is always there, and so is everything that is not per-cluster.
    assert {"upstream_rq_total", "upstream_cx_active", "membership_healthy"} <= cluster
    assert "server.live" in names and "cluster_manager.active_clusters" in names
    if stats is EnvoyStats.ALL:
        assert "upstream_cx_rx_bytes_total" in cluster
        assert len(cluster) > 50
    else:
        assert cluster <= set(KEPT_PER_CLUSTER)

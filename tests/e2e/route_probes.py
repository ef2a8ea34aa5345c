"""What the running Envoy says about a route: who answered, which endpoints failed checks."""

from __future__ import annotations

from tests.e2e.harness import Harness


async def failed_active_hc(harness: Harness, prefix: str) -> dict[int, bool]:
    """Whether Envoy's active health check currently fails each endpoint (by port) of the
    clusters whose name starts with `prefix`."""
    data = await harness.envoy_admin("/clusters?format=json")
    out: dict[int, bool] = {}
    for cluster in data.get("cluster_statuses", []):
        if not cluster.get("name", "").startswith(prefix):
            continue
        for host in cluster.get("host_statuses", []):
            port = host["address"]["socket_address"]["port_value"]
            out[port] = bool(host.get("health_status", {}).get("failed_active_health_check"))
    return out


async def answered_by(harness: Harness, host: str, path: str, n: int) -> set[str]:
    return set((await harness.distribution(host, path, n)).keys())

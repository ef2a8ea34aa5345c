"""The session Envoy speaks Delta xDS (turnout's default bootstrap), and configuration changes
under a request loop lose no request: new clusters are in before the routes that use them, stale
ones go only after the routes stopped naming them."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest
import yaml

from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

STABLE = "stable.delta.example.com"
MOVING = "moving.delta.example.com"
EXTRA = "extra.delta.example.com"


def proxy(name: str, fqdn: str, service: str, timeout: str = "15s") -> str:
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: {name}, namespace: delta}}
spec:
  virtualhost: {{fqdn: {fqdn}}}
  routes:
  - services: [{{name: {service}, port: 80}}]
    timeoutPolicy: {{response: {timeout}}}
"""


async def _load(harness: Harness, host: str, stop: asyncio.Event, seen: Counter[str]) -> None:
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        while not stop.is_set():
            r = await client.get("/", headers={"Host": host})
            backend = r.json()["service"] if r.status_code == 200 else str(r.status_code)
            seen[f"{host} {r.status_code} {backend}"] += 1


async def test_changes_under_load_lose_no_request_over_delta(harness: Harness) -> None:
    bootstrap = yaml.safe_load(harness.controller.state_dir.bootstrap.read_text())
    assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"

    services = await harness.services(
        ("delta", "a"), ("delta", "b"), ("delta", "c"), ("delta", "d")
    )

    def files(step: int) -> dict[str, str]:
        # The moving host switches between b and c (the unused cluster is removed each time)
        # and changes its timeout; a third host comes and goes with its own cluster d.
        out = {
            "svc.yaml": services,
            "stable.yaml": proxy("stable", STABLE, "a"),
            "moving.yaml": proxy("moving", MOVING, "bc"[step % 2], f"{10 + step}s"),
        }
        if step % 2:
            out["extra.yaml"] = proxy("extra", EXTRA, "d")
        return out

    await harness.apply(files(0))
    stop = asyncio.Event()
    seen: Counter[str] = Counter()
    loops = [
        asyncio.create_task(_load(harness, host, stop, seen))
        for host in (STABLE, STABLE, MOVING, MOVING)
    ]
    try:
        for step in range(1, 9):
            await harness.apply(files(step))
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.gather(*loops)
    failed = {k: n for k, n in seen.items() if " 200 " not in k}
    assert failed == {}, seen
    assert seen[f"{STABLE} 200 a"] > 20
    assert seen[f"{MOVING} 200 b"] > 0 and seen[f"{MOVING} 200 c"] > 0
    # The stale cluster left Envoy once nothing routed to it.
    names = {c.get("name", "") for c in await harness.active_clusters()}
    assert any("delta/b/80" in n for n in names)
    assert not any("delta/c/80" in n for n in names)
    assert (await harness.get(EXTRA)).status_code == 404

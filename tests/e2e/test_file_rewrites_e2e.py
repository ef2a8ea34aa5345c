"""Watched files rewritten while traffic flows through the real Envoy: an in-place rewrite that
leaves the file empty for a moment, or an atomic replace, serves every request; a deleted file's
routes go at once."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Harness, service_yaml

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "rewrites.e2e.example.com"
PROXY = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata:
  name: rewrites
  namespace: default
spec:
  virtualhost:
    fqdn: {HOST}
  routes:
    - services: [{{name: rewrites-app, port: 80}}]
"""


async def _setup(harness: Harness) -> tuple[str, str]:
    """Applies the proxy, the Service and its EndpointSlice, each in a file of its own."""
    port = await harness.backend("default", "rewrites-app")
    service, slice_ = service_yaml("default", "rewrites-app", 80, port).split("---\n")
    await harness.apply({"proxy.yaml": PROXY, "service.yaml": service, "slice.yaml": slice_})
    assert (await harness.get(HOST)).status_code == 200
    return PROXY, slice_


async def _statuses_while(harness: Harness, change: Callable[[], Awaitable[None]]) -> Counter[int]:
    """200 requests over about 3 s, with `change` made 0.5 s in; the status codes answered."""
    codes: Counter[int] = Counter()

    async def requests() -> None:
        async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
            for _ in range(200):
                r = await client.get("/", headers={"Host": HOST})
                codes[r.status_code] += 1
                await asyncio.sleep(0.015)

    loop = asyncio.create_task(requests())
    await asyncio.sleep(0.5)
    await change()
    await loop
    return codes


async def _rewrite_in_place(path: Path, text: str) -> None:
    """What a writer that opens the file for writing, then takes its time, does."""
    with path.open("w") as f:
        f.flush()
        await asyncio.sleep(0.3)  # the watcher sees the empty file meanwhile
        f.write(text)


async def test_in_place_rewrite_of_a_route_file_serves_every_request(harness: Harness) -> None:
    text, _ = await _setup(harness)
    changed = text.replace("namespace: default", "namespace: default\n  labels: {rev: two}")
    codes = await _statuses_while(
        harness, lambda: _rewrite_in_place(harness.config_dir / "proxy.yaml", changed)
    )
    assert codes == Counter({200: 200})
    applied = harness.controller.applied
    assert applied is not None
    assert any("'rev': 'two'" in str(o.raw) for o in applied.snapshot.objects)


async def test_in_place_rewrite_of_an_endpointslice_file_serves_every_request(
    harness: Harness,
) -> None:
    _, slice_ = await _setup(harness)
    codes = await _statuses_while(
        harness, lambda: _rewrite_in_place(harness.config_dir / "slice.yaml", slice_)
    )
    assert codes == Counter({200: 200})


async def test_atomic_replace_serves_every_request(harness: Harness) -> None:
    text, slice_ = await _setup(harness)

    async def replace() -> None:
        for name, content in (("proxy.yaml", text), ("slice.yaml", slice_)):
            tmp = harness.config_dir / f".{name}.tmp"
            tmp.write_text(content)
            os.replace(tmp, harness.config_dir / name)
            await asyncio.sleep(0.3)

    assert await _statuses_while(harness, replace) == Counter({200: 200})


async def test_deleted_route_file_stops_serving_promptly(harness: Harness) -> None:
    await _setup(harness)
    assert harness.controller.config.empty_file_grace_s >= 2
    loop = asyncio.get_running_loop()
    deleted = loop.time()
    (harness.config_dir / "proxy.yaml").unlink()
    async with asyncio.timeout(3):
        while (await harness.get(HOST)).status_code != 404:
            await asyncio.sleep(0.02)
    # Well within the empty-file grace period: deleting is not held.
    assert loop.time() - deleted < 2

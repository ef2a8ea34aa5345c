"""`turnout serve` as a user runs it: the real command, its own Envoy child, the quickstart."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.harness import free_port
from tests.e2e.serve import copy_example, serving


def test_quickstart_serves_through_envoy(tmp_path: Path) -> None:
    example = copy_example("quickstart", tmp_path, ["services.yaml"], ["9101", "9102", "9103"])
    http_port, admin_port = free_port(), free_port()
    with serving(example, http_port, admin_port):
        base = f"http://127.0.0.1:{http_port}"
        host = {"Host": "demo.turnout.local"}
        r = httpx.get(f"{base}/", headers=host)
        assert r.status_code == 200 and r.json()["service"] == "web"
        r = httpx.get(f"{base}/blog/hello", headers={**host, "x-canary": "true"})
        assert r.status_code == 200
        assert (r.json()["namespace"], r.json()["service"]) == ("marketing", "blog-canary")
        status = httpx.get(f"http://127.0.0.1:{admin_port}/status").json()
        states = {o["metadata"]["name"]: o["status"]["currentStatus"] for o in status["objects"]}
        assert states == {"demo": "valid", "blog": "valid"}
    # Stopping turnout stops its Envoy: nothing listens on the HTTP port any more.
    try:
        httpx.get(f"http://127.0.0.1:{http_port}/", timeout=1.0)
        raise AssertionError("Envoy still serving after turnout stopped")
    except httpx.ConnectError:
        pass

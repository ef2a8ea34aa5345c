"""`turnout serve` as a user runs it: the real command, its own Envoy child, the quickstart."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.harness import free_port

REPO = Path(__file__).resolve().parents[2]


def _wait_ready(admin: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"turnout exited with {proc.returncode}")
        try:
            r = httpx.get(f"{admin}/readyz", timeout=1.0)
            if r.status_code == 200:
                return
            last = r.text
        except httpx.HTTPError as err:
            last = str(err)
        time.sleep(0.2)
    raise AssertionError(f"turnout never became ready: {last}")


def test_quickstart_serves_through_envoy(tmp_path: Path) -> None:
    example = tmp_path / "quickstart"
    shutil.copytree(REPO / "examples" / "quickstart", example)
    # The example uses fixed backend ports; move them to free ones so tests never collide.
    services = example / "services.yaml"
    text = services.read_text()
    for fixed in ("9101", "9102", "9103"):
        text = text.replace(fixed, str(free_port()))
    services.write_text(text)

    http_port, admin_port = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "turnout",
        "serve",
        str(example),
        "--http-port",
        str(http_port),
        "--https-port",
        str(free_port()),
        "--admin-port",
        str(admin_port),
        "--xds-port",
        str(free_port()),
        "--envoy-admin-port",
        str(free_port()),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        _wait_ready(f"http://127.0.0.1:{admin_port}", proc)
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
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            output = proc.communicate(timeout=15)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0].decode()
    assert proc.returncode == 0, output
    # Stopping turnout stops its Envoy: nothing listens on the HTTP port any more.
    try:
        httpx.get(f"http://127.0.0.1:{http_port}/", timeout=1.0)
        raise AssertionError("Envoy still serving after turnout stopped")
    except httpx.ConnectError:
        pass

"""`turnout serve` restarted with its files unchanged serves the last run's configuration through a
real Envoy (a fresh one after a clean stop, the adopted one after SIGKILL) before it compiled;
a file touched in between makes it compile first, as a cold start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import free_port, service_yaml
from tests.e2e.serve import ok_backend, proxy_yaml, start_serve, stop_serve, wait_ready

pytestmark = pytest.mark.e2e

RESTORED = "serving the last run's configuration"


@pytest.fixture
def backend_port() -> Iterator[int]:
    with ok_backend() as port:
        yield port


def _served(http_port: int, host: str) -> bool:
    r = httpx.get(f"http://127.0.0.1:{http_port}/", headers={"Host": host}, timeout=2.0)
    return r.status_code == 200


def test_a_restart_serves_the_saved_state_and_a_touched_file_compiles_first(
    tmp_path: Path,
    backend_port: int,
) -> None:
    config, state = tmp_path / "config", tmp_path / "state"
    config.mkdir()
    (config / "svc.yaml").write_text(service_yaml("default", "app", 80, backend_port))
    (config / "a.yaml").write_text(proxy_yaml("a", "a.example.com"))
    http_port, admin_port = free_port(), free_port()
    ports = [(f, free_port()) for f in ("--https-port", "--xds-port", "--envoy-admin-port")]
    admin = f"http://127.0.0.1:{admin_port}"

    def serve() -> subprocess.Popen[bytes]:
        extra = ["--no-demo-backends", "--log-level", "info"]
        return start_serve(config, http_port, admin_port, state_dir=state, ports=ports, extra=extra)

    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(first := serve())
        wait_ready(admin, first)
        output = stop_serve(first)  # a clean stop writes the served state, and stops Envoy
        assert "served state saved" in output and (state / "served-state").exists()

        procs.append(fresh := serve())
        wait_ready(admin, fresh)
        assert _served(http_port, "a.example.com")
        envoy_pid = int((state / "envoy.pid").read_text())
        fresh.send_signal(signal.SIGKILL)  # turnout alone: its Envoy is adopted next
        fresh.wait(10)
        output = fresh.communicate()[0].decode()
        assert RESTORED in output, output

        procs.append(adopting := serve())
        wait_ready(admin, adopting)
        assert _served(http_port, "a.example.com")
        assert int((state / "envoy.pid").read_text()) == envoy_pid
        output = stop_serve(adopting)
        assert RESTORED in output and "adopted the running Envoy" in output, output

        st = (config / "a.yaml").stat()
        os.utime(config / "a.yaml", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        procs.append(touched := serve())
        wait_ready(admin, touched)
        assert _served(http_port, "a.example.com")
        output = stop_serve(touched)
        assert RESTORED not in output and "the files changed" in output, output
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_serve(proc)
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((state / "envoy.pid").read_text()), signal.SIGKILL)

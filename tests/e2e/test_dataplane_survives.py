"""The data plane outlives the control plane: `turnout serve` killed with SIGKILL leaves its Envoy
serving; a turnout started again with the same state directory and ports adopts that Envoy."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import free_port, service_yaml
from tests.e2e.serve import ok_backend, proxy_yaml, start_serve, stop_serve, wait_ready

pytestmark = pytest.mark.e2e


@pytest.fixture
def backend_port() -> Iterator[int]:
    with ok_backend() as port:
        yield port


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _envoys_of(bootstrap: Path) -> list[int]:
    """The live processes started with `bootstrap` (Envoys of this state directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if os.fsencode(str(bootstrap)) in args and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _request_loop(url: str, host: str, n: int, seconds: float, failures: list[str]) -> None:
    with httpx.Client(timeout=2.0) as client:
        for _ in range(n):
            try:
                r = client.get(url, headers={"Host": host})
                if r.status_code != 200:
                    failures.append(str(r.status_code))
            except httpx.HTTPError as err:
                failures.append(repr(err))
            time.sleep(seconds / n)


def _wait_for(check: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_envoy_survives_turnout_sigkill_and_is_adopted(tmp_path: Path, backend_port: int) -> None:
    config, state = tmp_path / "config", tmp_path / "state"
    config.mkdir()
    (config / "app.yaml").write_text(
        service_yaml("default", "app", 80, backend_port)
        + "---\n"
        + proxy_yaml("a", "a.example.com")
    )
    http_port, admin_port = free_port(), free_port()
    ports = [(f, free_port()) for f in ("--https-port", "--xds-port", "--envoy-admin-port")]
    args = (config, http_port, admin_port)
    first = start_serve(*args, state_dir=state, ports=ports, extra=["--no-demo-backends"])
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_ready(f"http://127.0.0.1:{admin_port}", first)
        envoy_pid = int((state / "envoy.pid").read_text())
        # Envoy's admin: a Unix socket only turnout's user may use, no TCP port.
        assert stat.S_IMODE((state / "envoy-admin.sock").stat().st_mode) == 0o600
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{dict(ports)['--envoy-admin-port']}/server_info")

        failures: list[str] = []
        url = f"http://127.0.0.1:{http_port}/"
        loop = threading.Thread(
            target=_request_loop, args=(url, "a.example.com", 300, 4.0, failures)
        )
        loop.start()
        time.sleep(1.0)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        loop.join(60)
        assert failures == [] and _alive(envoy_pid)

        second = start_serve(*args, state_dir=state, ports=ports, extra=["--no-demo-backends"])
        wait_ready(f"http://127.0.0.1:{admin_port}", second)
        assert _envoys_of(state / "envoy-bootstrap.yaml") == [envoy_pid]
        assert int((state / "envoy.pid").read_text()) == envoy_pid
        # xDS reconnected: a new file's route reaches the adopted Envoy.
        (config / "b.yaml").write_text(proxy_yaml("b", "b.example.com"))
        assert _wait_for(
            lambda: httpx.get(url, headers={"Host": "b.example.com"}).status_code == 200
        )

        output = stop_serve(second)
        assert second.returncode == 0, output
        assert _wait_for(lambda: not _alive(envoy_pid), 10)
        assert not (state / "envoy.pid").exists()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop_serve(proc)
        for pid in _envoys_of(state / "envoy-bootstrap.yaml"):
            os.kill(pid, signal.SIGKILL)


def test_envoy_left_with_another_xds_port_is_replaced(tmp_path: Path, backend_port: int) -> None:
    """An Envoy of this state directory started for another --xds-port would never find the new
    turnout: it is stopped and a new Envoy serves."""
    config, state = tmp_path / "config", tmp_path / "state"
    config.mkdir()
    (config / "app.yaml").write_text(
        service_yaml("default", "app", 80, backend_port)
        + "---\n"
        + proxy_yaml("a", "a.example.com")
    )
    http_port, admin_port = free_port(), free_port()
    args = (config, http_port, admin_port)
    first = start_serve(*args, state_dir=state, ports=[("--xds-port", free_port())])
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_ready(f"http://127.0.0.1:{admin_port}", first)
        old = int((state / "envoy.pid").read_text())
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = start_serve(*args, state_dir=state, ports=[("--xds-port", free_port())])
        wait_ready(f"http://127.0.0.1:{admin_port}", second)
        assert not _alive(old)
        new = int((state / "envoy.pid").read_text())
        assert _envoys_of(state / "envoy-bootstrap.yaml") == [new] and new != old
        url = f"http://127.0.0.1:{http_port}/"
        assert httpx.get(url, headers={"Host": "a.example.com"}).status_code == 200
        output = stop_serve(second)
        assert second.returncode == 0, output
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop_serve(proc)
        for pid in _envoys_of(state / "envoy-bootstrap.yaml"):
            os.kill(pid, signal.SIGKILL)

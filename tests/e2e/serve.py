"""`turnout serve` as a user runs it, for the tests of the real command: an example copied where
its fixed ports can be moved, and the command run as a child process with its own Envoy."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from tests.e2e.harness import free_port

REPO = Path(__file__).resolve().parents[2]


def copy_example(name: str, to: Path, files: Sequence[str], fixed_ports: Sequence[str]) -> Path:
    """examples/`name` copied below `to`, with each of `fixed_ports` in `files` moved to a free
    port, so that tests never collide with each other or with a user's demo."""
    example = to / name
    shutil.copytree(REPO / "examples" / name, example)
    moved = {fixed: str(free_port()) for fixed in fixed_ports}
    for file in files:
        path = example / file
        text = path.read_text()
        for fixed, port in moved.items():
            text = text.replace(fixed, port)
        path.write_text(text)
    return example


def wait_ready(admin: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
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


def start_serve(
    path: Path | None,
    http_port: int,
    admin_port: int,
    *,
    state_dir: Path,
    ports: Sequence[tuple[str, int]] = (),
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Starts `turnout serve path` as a child process (no path: `extra` says where objects come
    from, e.g. --kubernetes); `ports` sets the other port flags (free ports otherwise) and
    `state_dir` its --state-dir."""
    chosen = dict(ports)
    flags: list[str] = []
    for flag in ("--https-port", "--xds-port", "--envoy-admin-port"):
        flags += [flag, str(chosen.get(flag) or free_port())]
    cmd = [
        sys.executable,
        "-m",
        "turnout",
        "serve",
        *([str(path)] if path is not None else []),
        "--http-port",
        str(http_port),
        "--admin-port",
        str(admin_port),
        *flags,
        "--state-dir",
        str(state_dir),
        "--log-level",
        "warning",
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop_serve(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM, then the output (SIGKILL after 15 s)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=15)[0].decode()
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0].decode()


@contextlib.contextmanager
def serving(path: Path, http_port: int, admin_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Runs `turnout serve path` on `http_port` and `admin_port` (free ports for the rest) until
    /readyz answers; on leaving, stops it with SIGTERM and, unless the body failed, asserts that
    it exited cleanly."""
    with tempfile.TemporaryDirectory(prefix="turnout-e2e-") as state_dir:
        proc = start_serve(path, http_port, admin_port, state_dir=Path(state_dir))
        try:
            wait_ready(f"http://127.0.0.1:{admin_port}", proc)
            yield proc
        finally:
            output = stop_serve(proc)
        assert proc.returncode == 0, output


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def ok_backend() -> Iterator[int]:
    """A backend answering 200 "ok" that is not turnout's (the demo backends die with turnout):
    its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def proxy_yaml(name: str, fqdn: str) -> str:
    """An HTTPProxy root in `default` for `fqdn` sending everything to Service `app` port 80."""
    return (
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        f"spec:\n  virtualhost: {{fqdn: {fqdn}}}\n"
        "  routes:\n  - services: [{name: app, port: 80}]\n"
    )

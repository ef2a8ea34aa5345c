"""xDS over mutual TLS with real Envoys: `turnout certgen` makes the certificates, `turnout
serve --no-envoy --xds-tls-*` serves, `turnout bootstrap --xds-tls-*` writes each Envoy's
bootstrap. An Envoy with the client certificate routes traffic; one with a certificate from
another CA, or speaking plain gRPC, gets no configuration; a rotated set of files is served to
new Envoys while a connected one keeps serving; `serve` with the TLS flags gives its own Envoy
child the matching client side.

These Envoys are this module's own (bootstrap-specific), not the session Envoy."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import free_port
from tests.e2e.serve import copy_example, start_serve, stop_serve, wait_ready
from turnout.envoy.process import envoy_binary

pytestmark = pytest.mark.e2e

HOST = {"Host": "demo.turnout.local"}
SERVER_NAME = "turnout.turnout-system.svc"


def _turnout(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "turnout", *args], check=True, capture_output=True)


def _certgen(out: Path, *extra: str) -> Path:
    _turnout("certgen", "--out", str(out), *extra)
    return out


def _server_flags(certs: Path) -> list[str]:
    return [
        "--xds-tls-cert",
        str(certs / "xds-server.crt"),
        "--xds-tls-key",
        str(certs / "xds-server.key"),
        "--xds-tls-ca",
        str(certs / "ca.crt"),
    ]


def _client_flags(certs: Path) -> list[str]:
    return [
        "--xds-tls-cert",
        str(certs / "xds-client.crt"),
        "--xds-tls-key",
        str(certs / "xds-client.key"),
        "--xds-tls-ca",
        str(certs / "ca.crt"),
        "--xds-server-name",
        SERVER_NAME,
    ]


class Envoy:
    """An Envoy started from a bootstrap `turnout bootstrap` wrote, with its admin on a TCP
    port of its own."""

    def __init__(self, tmp: Path, xds_port: int, tls: Sequence[str]) -> None:
        self.admin_port = free_port()
        # Its own directory: the SDS files `turnout bootstrap` writes beside the bootstrap are
        # watched by this Envoy alone.
        home = tmp / f"envoy-{self.admin_port}"
        home.mkdir()
        self.bootstrap = home / "envoy.yaml"
        _turnout(
            "bootstrap",
            str(self.bootstrap),
            "--xds-port",
            str(xds_port),
            "--admin-port",
            str(self.admin_port),
            "--node-id",
            f"tls-{self.admin_port}",
            *tls,
        )
        self.log = home / "envoy.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    envoy_binary(),
                    "-c",
                    str(self.bootstrap),
                    "--use-dynamic-base-id",
                    "-l",
                    "warning",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def stat(self, name: str) -> int:
        # A port taken between `free_port` and Envoy's bind would make another process answer.
        assert self.proc.poll() is None, f"Envoy exited: {self.log.read_text()[-2000:]}"
        r = httpx.get(f"http://127.0.0.1:{self.admin_port}/stats?filter=^{name}$", timeout=2)
        for line in r.text.splitlines():
            key, _, value = line.partition(": ")
            if key == name:
                return int(value)
        return 0

    def listeners(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.admin_port}/listeners", timeout=2).text

    def until(self, probe: str, at_least: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if self.stat(probe) >= at_least:
                    return
            time.sleep(0.2)
        raise AssertionError(f"{probe} never reached {at_least}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def _envoy(tmp: Path, xds_port: int, tls: Sequence[str]) -> Iterator[Envoy]:
    envoy = Envoy(tmp, xds_port, tls)
    try:
        yield envoy
    finally:
        envoy.stop()


def _admin_up(admin: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "turnout exited"
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{admin}/healthz", timeout=1)
            return
        time.sleep(0.2)
    raise AssertionError("turnout's admin server never answered")


@contextlib.contextmanager
def _serving_tls(
    tmp: Path, certs: Path, http_port: int, xds_port: int
) -> Iterator[subprocess.Popen[bytes]]:
    tmp = Path(tempfile.mkdtemp(dir=tmp))
    example = copy_example("quickstart", tmp, ["services.yaml"], ["9101", "9102", "9103"])
    admin_port = free_port()
    with tempfile.TemporaryDirectory(prefix="turnout-e2e-") as state:
        proc = start_serve(
            example,
            http_port,
            admin_port,
            state_dir=Path(state),
            ports=[("--xds-port", xds_port)],
            extra=["--no-envoy", *_server_flags(certs)],
        )
        try:
            _admin_up(f"http://127.0.0.1:{admin_port}", proc)
            yield proc
        finally:
            output = stop_serve(proc)
    assert proc.returncode == 0, output


def _routes(http_port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        r = httpx.get(f"http://127.0.0.1:{http_port}/", headers=HOST, timeout=2)
        return r.status_code == 200 and r.json()["service"] == "web"
    return False


def _eventually_routes(http_port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _routes(http_port):
        assert time.monotonic() < deadline, "Envoy never routed the quickstart"
        time.sleep(0.2)


def test_envoy_with_the_client_certificate_routes_and_strangers_get_nothing(
    tmp_path: Path,
) -> None:
    certs = _certgen(tmp_path / "certs")
    strangers = _certgen(tmp_path / "other-ca")
    http_port, xds_port = free_port(), free_port()
    with _serving_tls(tmp_path, certs, http_port, xds_port):
        with _envoy(tmp_path, xds_port, _client_flags(certs)) as envoy:
            envoy.until("control_plane.connected_state", 1)
            _eventually_routes(http_port)
            assert envoy.stat("cluster.turnout_xds.ssl.handshake") >= 1
        with (
            _envoy(tmp_path, xds_port, _client_flags(strangers)) as other_ca,
            _envoy(tmp_path, xds_port, []) as plaintext,
        ):
            # Each tried (and retried) and was refused: no stream, no listener, no route.
            other_ca.until("cluster.turnout_xds.upstream_cx_total", 2)
            plaintext.until("cluster.turnout_xds.upstream_cx_total", 2)
            for refused in (other_ca, plaintext):
                assert refused.stat("control_plane.connected_state") == 0
                assert "ingress_http" not in refused.listeners()
            assert not _routes(http_port)


def _install(source: Path, target: Path) -> None:
    """Copies the certificate files into `target` one by one, each renamed into place, as a
    Secret volume's update or a careful operator does."""
    target.mkdir(exist_ok=True)
    for file in sorted(source.iterdir()):
        staged = target / f".{file.name}.new"
        shutil.copy2(file, staged)
        os.replace(staged, target / file.name)


def test_rotated_files_serve_new_envoys_and_the_connected_one_keeps_routing(
    tmp_path: Path,
) -> None:
    certs = _certgen(tmp_path / "certs")  # turnout's files
    mounted = tmp_path / "envoy-certs"  # the first Envoy's own copy, rotated separately
    _install(certs, mounted)
    old = shutil.copytree(certs, tmp_path / "old")
    http_port, xds_port = free_port(), free_port()
    with _envoy(tmp_path, xds_port, _client_flags(mounted)) as before:
        with _serving_tls(tmp_path, certs, http_port, xds_port):
            before.until("control_plane.connected_state", 1)
            _eventually_routes(http_port)
            # It started before turnout and retried until turnout listened.
            connections = before.stat("cluster.turnout_xds.upstream_cx_total")
            _certgen(certs, "--overwrite")  # a new CA and key pairs over turnout's files
            with _envoy(tmp_path, xds_port, _client_flags(certs)) as after:
                after.until("control_plane.connected_state", 1)
                after.until("listener_manager.total_listeners_active", 1)
            # The Envoy connected before the rotation kept its stream and still routes.
            assert before.stat("control_plane.connected_state") == 1
            assert before.stat("cluster.turnout_xds.upstream_cx_total") == connections
            _eventually_routes(http_port)
            # A new Envoy with the old client certificate (the old CA) is refused now.
            with _envoy(tmp_path, xds_port, _client_flags(old)) as stale:
                stale.until("cluster.turnout_xds.upstream_cx_total", 2)
                # Not `control_plane.connected_state`: Envoy sets it to 1 when it opens a
                # stream, before the TLS handshake, so it flickers on every retry.
                stale.until("cluster.turnout_xds.ssl.fail_verify_error", 1)
                assert stale.stat("cluster.turnout_xds.ssl.handshake") == 0
                assert "ingress_http" not in stale.listeners()
        # The first Envoy's files are rotated too and turnout restarted: it reconnects with the
        # new client certificate and CA, which it re-read through its SDS files.
        _install(certs, mounted)
        with _serving_tls(tmp_path, certs, http_port, xds_port):
            before.until("cluster.turnout_xds.upstream_cx_total", connections + 1)
            before.until("control_plane.connected_state", 1)
            _eventually_routes(http_port)


def test_serve_gives_its_envoy_child_the_client_side(tmp_path: Path) -> None:
    certs = _certgen(tmp_path / "certs")
    example = copy_example("quickstart", tmp_path, ["services.yaml"], ["9101", "9102", "9103"])
    http_port, admin_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="turnout-e2e-") as state:
        proc = start_serve(
            example, http_port, admin_port, state_dir=Path(state), extra=_server_flags(certs)
        )
        try:
            wait_ready(f"http://127.0.0.1:{admin_port}", proc)
            _eventually_routes(http_port)
            bootstrap = (Path(state) / "envoy-bootstrap.yaml").read_text()
            assert "envoy.transport_sockets.tls" in bootstrap
            sds = (Path(state) / "xds-tls-certificate.yaml").read_text()
            assert str(certs / "xds-server.key") in sds
        finally:
            output = stop_serve(proc)
    assert proc.returncode == 0, output

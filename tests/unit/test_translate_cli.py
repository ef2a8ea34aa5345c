"""`turnout translate` and the admin API's /debug/xds: the xDS resources turnout sends Envoy, as
Envoy's JSON or YAML, grouped by type, with private keys redacted; /debug/xds shows the running
configuration the same way and answers loopback peers only."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiohttp import web

from turnout.admin.server import is_loopback_peer, make_app
from turnout.app import build_controller
from turnout.cli import main
from turnout.config import ServeConfig
from turnout.envoy.dump import REDACTED, redact

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
TLS = REPO / "tests" / "fixtures" / "ingressroute" / "tls-secret-present" / "input.yaml"

LISTENER_URL = "type.googleapis.com/envoy.config.listener.v3.Listener"
CLUSTER_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
SECRET_URL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"


def _translate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["translate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_translate_prints_every_type_with_its_type_url_as_yaml_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _translate(capsys, str(QUICKSTART))
    assert code == 0
    doc = yaml.safe_load(out)
    assert list(doc) == ["listeners", "routes", "clusters", "endpoints", "secrets"]
    assert doc["listeners"]["typeUrl"] == LISTENER_URL
    assert doc["clusters"]["typeUrl"] == CLUSTER_URL
    listeners = {lst["name"]: lst for lst in doc["listeners"]["resources"]}
    assert "ingress_http" in listeners
    # Envoy's own field names, as in an Envoy config file.
    assert listeners["ingress_http"]["address"]["socket_address"]["port_value"] == 8080
    clusters = {c["name"] for c in doc["clusters"]["resources"]}
    assert any(name.startswith("infra/web/80/") for name in clusters), clusters
    assert any(name.startswith("marketing/blog/80/") for name in clusters), clusters


def test_translate_takes_the_port_and_translate_flags_of_serve(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _translate(
        capsys, str(QUICKSTART), "--http-port", "9080", "--num-trusted-hops", "2", "-o", "json"
    )
    assert code == 0
    listeners = {lst["name"]: lst for lst in json.loads(out)["listeners"]["resources"]}
    assert listeners["ingress_http"]["address"]["socket_address"]["port_value"] == 9080
    assert '"xff_num_trusted_hops": 2' in out


def test_translate_makes_hosts_matcher_trees_from_the_flags_route_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def hosts(*flags: str) -> list[dict[str, Any]]:
        code, out, _ = _translate(capsys, str(QUICKSTART), "--type", "routes", "-o", "json", *flags)
        assert code == 0
        configs = json.loads(out)["routes"]["resources"]
        return [vh for config in configs for vh in config["virtual_hosts"]]

    assert all("routes" in vh and "matcher" not in vh for vh in hosts())
    trees = hosts("--matcher-tree-min-routes", "1")
    assert trees and all("matcher" in vh and "routes" not in vh for vh in trees)
    with pytest.raises(SystemExit) as exited:
        main(["translate", str(QUICKSTART), "--matcher-tree-min-routes", "-1"])
    assert exited.value.code == 2
    assert "expected a whole number from 0" in capsys.readouterr().err


def test_translate_scopes_a_listener_for_a_host_the_flag_splits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def types(*flags: str) -> list[str]:
        code, out, _ = _translate(capsys, str(QUICKSTART), "-o", "json", *flags)
        assert code == 0
        return list(json.loads(out))

    assert "scoped_routes" not in types()  # one host of 3 routes
    assert "scoped_routes" in types("--split-host-min-routes", "3")
    assert "scoped_routes" not in types("--split-host-min-routes", "0")
    with pytest.raises(SystemExit) as exited:
        main(["translate", str(QUICKSTART), "--split-host-min-routes", "-1"])
    assert exited.value.code == 2


def test_translate_type_shows_only_that_type(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _translate(capsys, str(QUICKSTART), "--type", "clusters", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["clusters"]
    assert doc["clusters"]["resources"]


def test_translate_redacts_private_keys_and_keeps_certificates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _translate(capsys, str(TLS), "--type", "secrets", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["secrets"]["typeUrl"] == SECRET_URL
    secret = next(s for s in doc["secrets"]["resources"] if "site-tls" in s["name"])
    certificate = secret["tls_certificate"]
    assert certificate["private_key"] == {"inline_string": REDACTED}
    assert "BEGIN CERTIFICATE" in certificate["certificate_chain"]["inline_string"]
    code, out, _ = _translate(capsys, str(TLS))
    assert code == 0
    assert "PRIVATE KEY" not in out
    assert "MIGHAgEAMBMGByqGSM49" not in out  # a piece of the fixture's key


def test_redaction_keeps_where_a_key_is_kept_and_covers_every_key_field() -> None:
    secret = {
        "name": "s",
        "tls_certificate": {
            "certificate_chain": {"inline_bytes": "Y2VydA=="},
            "private_key": {"filename": "/etc/tls/key.pem"},
            "password": {"inline_string": "hunter2"},
        },
        "session_ticket_keys": {"keys": [{"inline_bytes": "a2V5"}]},
        "generic_secret": {"secret": {"environment_variable": "TOKEN"}},
    }
    assert redact(secret) == {
        "name": "s",
        "tls_certificate": {
            "certificate_chain": {"inline_bytes": "Y2VydA=="},
            "private_key": {"filename": "/etc/tls/key.pem"},
            "password": {"inline_string": REDACTED},
        },
        "session_ticket_keys": {"keys": [{"inline_bytes": REDACTED}]},
        "generic_secret": {"secret": {"environment_variable": "TOKEN"}},
    }


def test_translate_of_a_missing_path_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _translate(capsys, str(tmp_path / "nope.yaml"))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "nope.yaml" in err


def test_translate_of_an_unreadable_file_exits_2_with_the_problem_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    code, out, err = _translate(capsys, str(bad), "-o", "json")
    assert code == 2
    assert "bad.yaml" in err
    assert json.loads(out)["listeners"]["typeUrl"] == LISTENER_URL  # stdout stays one document


def test_a_bad_type_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", str(QUICKSTART), "--type", "pods"])
    assert exit_info.value.code == 2


# -- /debug/xds --------------------------------------------------------------------------------


def _config(path: Path) -> ServeConfig:
    return ServeConfig(paths=(path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0)


@contextlib.asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[httpx.AsyncClient]:
    """`app` on a free loopback port, and a client for it."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield client
    finally:
        await runner.cleanup()


async def test_debug_xds_serves_what_translate_prints_for_the_same_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(TLS, tmp_path / "input.yaml")
    controller = build_controller(_config(tmp_path))
    await controller.start()
    try:
        async with _serving(make_app(controller)) as client:
            as_yaml = await client.get("/debug/xds", params={"format": "yaml"})
            assert as_yaml.status_code == 200
            served_yaml = as_yaml.text
            as_json = await client.get("/debug/xds", params={"type": "secrets"})
            assert as_json.status_code == 200
            assert as_json.headers["content-type"].startswith("application/json")
            served_secrets = as_json.json()
            bad = await client.get("/debug/xds", params={"type": "pods"})
            assert bad.status_code == 400
            assert "pods" in bad.text
    finally:
        await controller.stop()
    code, printed, _ = _translate(capsys, str(tmp_path))
    assert code == 0
    assert served_yaml == printed
    _, printed_secrets, _ = _translate(capsys, str(tmp_path), "--type", "secrets", "-o", "json")
    assert served_secrets == json.loads(printed_secrets)
    assert "PRIVATE KEY" not in served_yaml


async def test_debug_xds_before_the_first_compile_is_503(tmp_path: Path) -> None:
    controller = build_controller(_config(tmp_path))
    async with _serving(make_app(controller)) as client:
        response = await client.get("/debug/xds")
        assert response.status_code == 503


async def test_debug_xds_refuses_a_peer_that_is_not_loopback(tmp_path: Path) -> None:
    (tmp_path / "input.yaml").write_text(TLS.read_text())
    controller = build_controller(_config(tmp_path))

    # The test client connects over loopback: the request is given another peer address, as
    # one from another host has when --admin-address is not loopback.
    @web.middleware
    async def from_afar(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        return await handler(request.clone(remote="192.0.2.7"))

    app = make_app(controller)
    app.middlewares.append(from_afar)
    await controller.start()
    try:
        async with _serving(app) as client:
            refused = await client.get("/debug/xds")
            assert refused.status_code == 403
            assert "PRIVATE" not in refused.text
            # The rest of the admin API is not restricted by peer.
            assert (await client.get("/healthz")).status_code == 200
    finally:
        await controller.stop()


@pytest.mark.parametrize(
    ("remote", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("2001:db8::1", False),
        ("", False),
        (None, False),
    ],
)
def test_is_loopback_peer(remote: Any, loopback: bool) -> None:
    assert is_loopback_peer(remote) is loopback

"""`turnout check` and `turnout serve` build their compile options with one builder
(`turnout.app.compile_options`), so they agree: a Gateway listener on a port turnout itself uses
is refused by both, with the same message, and every object is shown with its file and line."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from turnout.app import build_controller
from turnout.cli import build_parser, main, serve_config
from turnout.config import ServeConfig

GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turnout}
spec: {controllerName: turnout.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: app}
spec:
  gatewayClassName: turnout
  listeners:
  - {name: web, port: PORT, protocol: HTTP}
"""


def _listener_accepted(status: dict[str, Any]) -> dict[str, Any]:
    (listener,) = status["listeners"]
    return next(c for c in listener["conditions"] if c["type"] == "Accepted")


def _check_json(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, Any]:
    code = main(["check", str(path), "-o", "json", *flags])
    return code, json.loads(capsys.readouterr().out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("port", "flags", "flag"),
    [
        (8001, (), "--admin-port"),  # the defaults of both commands
        (9901, (), "--envoy-admin-port"),
        (7001, ("--admin-port", "7001"), "--admin-port"),
        (None, ("--xds-port", None), "--xds-port"),  # a free port: serve binds it
    ],
)
async def test_a_gateway_listener_on_a_port_of_turnout_is_refused_by_check_and_serve_alike(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    port: int | None,
    flags: tuple[str | None, ...],
    flag: str,
) -> None:
    xds_port = _free_port()
    port = xds_port if port is None else port
    argv = [str(xds_port) if f is None else f for f in flags]
    if "--xds-port" not in argv:
        argv += ["--xds-port", str(xds_port)]
    path = tmp_path / "gw.yaml"
    path.write_text(GATEWAY.replace("PORT", str(port)))
    code, doc = _check_json(path, capsys, *argv)
    assert code == 1
    gateway = next(o for o in doc["objects"] if o["kind"] == "Gateway")
    checked = _listener_accepted(gateway["status"])
    assert (checked["status"], checked["reason"]) == ("False", "PortUnavailable")
    assert flag in checked["message"]
    assert gateway["source"] == {"file": str(path), "line": 6}

    # serve's settings come from the same flags through the same builder.
    args = build_parser().parse_args(
        ["serve", str(tmp_path), *argv, "--no-envoy", "--no-watch", "--no-demo-backends"]
    )
    controller = build_controller(serve_config(args))
    await controller.start()
    try:
        served = next(s for s in controller.statuses() if s.ref.kind == "Gateway")
        # serve keeps history (lastTransitionTime); a one-shot check has none.
        accepted = _listener_accepted(served.body)
        assert accepted.pop("lastTransitionTime")
        assert accepted == checked
        assert controller.status_json(served)["source"] == gateway["source"]
    finally:
        await controller.stop()


def test_check_text_names_the_file_and_line_of_each_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(GATEWAY.replace("PORT", "8081"))
    main(["check", str(path)])
    out = capsys.readouterr().out
    assert f"{path}:1: GatewayClass turnout: valid" in out
    assert f"{path}:6: Gateway app/gw: " in out


NET_REFUSED = """\
apiVersion: v1
kind: Service
metadata: {name: s, namespace: default}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: t, namespace: default}
spec: {ports: [{port: 80}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: heavy, namespace: default}
spec:
  virtualhost: {fqdn: heavy.example.com}
  routes:
    # Each weight passes the dialect; their sum is beyond the uint32 Envoy takes.
    - conditions: [{prefix: /split}]
      services: [{name: s, port: 80, weight: 3000000000}, {name: t, port: 80, weight: 3000000000}]
    - services: [{name: s, port: 80}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: good, namespace: default}
spec: {virtualhost: {fqdn: good.example.com}, routes: [{services: [{name: s, port: 80}]}]}
"""


def _errors(status: dict[str, Any]) -> list[dict[str, Any]]:
    return list(status["conditions"][0].get("errors", []))


async def test_a_route_the_envoy_limits_net_refuses_shows_in_its_httpproxy_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "proxies.yaml").write_text(NET_REFUSED)
    code, doc = _check_json(tmp_path, capsys)
    assert code == 1
    checked = {o["metadata"]["name"]: o["status"] for o in doc["objects"]}
    (error,) = _errors(checked["heavy"])
    assert (error["type"], error["reason"]) == ("EnvoyLimit", "EnvoyLimit")
    assert error["message"].startswith("spec.routes[0]: ")
    assert checked["heavy"]["currentStatus"] == "invalid"
    assert checked["good"]["currentStatus"] == "valid"

    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), xds_port=0, run_envoy=False, watch=False, demo_backends=False
        )
    )
    await controller.start()
    try:
        served = {s.ref.name: controller.status_json(s)["status"] for s in controller.statuses()}
        assert [e["message"] for e in _errors(served["heavy"])] == [error["message"]]
        assert served["good"]["currentStatus"] == "valid"
    finally:
        await controller.stop()

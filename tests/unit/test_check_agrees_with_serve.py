"""`turnout check` and `turnout serve` build their compile options with one builder
(`turnout.app.compile_options`), so they agree: a Gateway listener on a port turnout itself uses
is refused by both, with the same message, and every object is shown with its file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from turnout.app import build_controller
from turnout.cli import main
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


@pytest.mark.parametrize(
    ("port", "flags", "flag"),
    [
        (8001, (), "--admin-port"),  # the defaults of both commands
        (18000, (), "--xds-port"),
        (9901, (), "--envoy-admin-port"),
        (7001, ("--admin-port", "7001"), "--admin-port"),
    ],
)
async def test_a_gateway_listener_on_a_port_of_turnout_is_refused_by_check_and_serve_alike(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    port: int,
    flags: tuple[str, ...],
    flag: str,
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(GATEWAY.replace("PORT", str(port)))
    code, doc = _check_json(path, capsys, *flags)
    assert code == 1
    gateway = next(o for o in doc["objects"] if o["kind"] == "Gateway")
    checked = _listener_accepted(gateway["status"])
    assert (checked["status"], checked["reason"]) == ("False", "PortUnavailable")
    assert flag in checked["message"]
    assert gateway["source"] == {"file": str(path), "line": 6}

    admin_port = int(flags[1]) if flags else 8001
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,),
            admin_port=admin_port,
            run_envoy=False,
            watch=False,
            demo_backends=False,
        )
    )
    controller.files.load_all()
    applied = await controller.recompile()
    assert applied is not None
    served = next(s for s in applied.result.statuses if s.ref.kind == "Gateway")
    assert _listener_accepted(served.body) == checked
    assert controller.status_json(served)["source"] == gateway["source"]


def test_check_text_names_the_file_and_line_of_each_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(GATEWAY.replace("PORT", "8081"))
    main(["check", str(path)])
    out = capsys.readouterr().out
    assert f"{path}:1: GatewayClass turnout: valid" in out
    assert f"{path}:6: Gateway app/gw: " in out

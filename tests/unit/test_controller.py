"""The controller keeps the last good configuration when a compile fails, and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnout.app import build_controller
from turnout.config import ServeConfig

PROXY = """\
apiVersion: v1
kind: Service
metadata: {name: app}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: root}
spec:
  virtualhost: {fqdn: ctl.example.com}
  routes: [{services: [{name: app, port: 80}]}]
"""


async def test_compile_failure_keeps_last_good_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.yaml").write_text(PROXY)
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
        )
    )
    await controller.start()
    try:
        good = controller.applied
        assert good is not None and controller.xds.version == good.version

        def broken(*args: object, **kwargs: object) -> object:
            raise RuntimeError("dialect bug")

        monkeypatch.setattr("turnout.controller.build_graph", broken)
        (tmp_path / "a.yaml").write_text(PROXY.replace("ctl.example.com", "other.example.com"))
        assert await controller.reload() is good
        assert controller.xds.version == good.version
        ready, reason = controller.readiness()
        assert not ready and "dialect bug" in reason
        assert controller.metrics.compile_errors._value.get() == 1

        monkeypatch.undo()
        applied = await controller.reload()
        assert applied is not None and applied.version != good.version
        assert controller.compile_error is None
    finally:
        await controller.stop()

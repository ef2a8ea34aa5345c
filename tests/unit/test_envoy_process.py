"""The child Envoy's output: its stdout (the access log) goes to turnout's stdout as written, its
log lines on stderr to the `turnout.envoy` logger."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from turnout.envoy.process import EnvoyProcess

ACCESS_LINE = '{"method":"GET","path":"/x","response_code":200}'


def fake_envoy(tmp_path: Path) -> str:
    script = tmp_path / "envoy"
    script.write_text(
        f"#!/bin/sh\necho '{ACCESS_LINE}'\necho '[warning][config] a log line' >&2\nexec sleep 30\n"
    )
    script.chmod(0o755)
    return str(script)


async def test_stdout_is_copied_verbatim_and_stderr_is_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnout.envoy")
    envoy = EnvoyProcess(tmp_path / "bootstrap.yaml", binary=fake_envoy(tmp_path))
    await envoy.start()
    try:
        for _ in range(100):
            if ACCESS_LINE in capsys.readouterr().out:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the access log line never reached stdout")
        for _ in range(100):
            if any(r.getMessage() == "a log line" for r in caplog.records):
                break
            await asyncio.sleep(0.05)
    finally:
        await envoy.stop(drain_seconds=1.0)
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "turnout.envoy"]
    assert (logging.WARNING, "a log line") in logged
    assert all(ACCESS_LINE not in message for _, message in logged)

"""The command line as operators meet it: `--version`, every default in `--help`, one meaning for
`-o`, a one-line `turnout: ...` error (never a traceback) for bad paths and flags, empty input,
JSON logs, a clean shutdown without warnings, and progress during a long cold start."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from turnout.app import build_controller
from turnout.cli import JsonLogFormatter, main
from turnout.config import ServeConfig
from turnout.envoy.process import EnvoyProcess
from turnout.sources.base import SourceSink

COMMANDS = ("serve", "check", "explain", "bootstrap", "certgen")
# Options that take a value and have no default to show.
NO_DEFAULT = {"--host"}


def _run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main(argv) -> (exit code, stdout, stderr), usage errors and --help/--version included."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_version_comes_from_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--version"], capsys)
    assert code == 0
    assert re.fullmatch(r"turnout \d+\.\d+\.\d+\S*\n", out)


# "  -o {a,b}, --output {a,b}   help": the option strings (with metavars) and the help's start.
_VALUE = r"(?: '[^']*'| [^-\s]\S*)?"
HELP_ENTRY = re.compile(rf"^  (-\S+{_VALUE}(?:, --\S+{_VALUE})*)(?:  +(.*))?$")


def _help_entries(text: str) -> dict[str, str]:
    """`--flag METAVAR` -> its help text (whitespace collapsed), for every option taking a
    value in a --help output."""
    entries: dict[str, str] = {}
    current: str | None = None
    for line in text.split("options:", 1)[1].splitlines():
        match = HELP_ENTRY.match(line)
        if match is not None:
            current = match.group(1).split(", ")[-1]
            entries[current] = match.group(2) or ""
        elif current is not None and line.startswith("    "):
            entries[current] = f"{entries[current]} {line.strip()}".strip()
    return entries


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_has_help_and_shows_its_default(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run([command, "--help"], capsys)
    assert code == 0
    entries = _help_entries(out)
    assert len(entries) > 5
    if command == "explain":
        assert "--header 'Name: value'" in entries
    for entry, text in entries.items():
        flag, _, metavar = entry.partition(" ")
        assert text, f"{command} {flag} has no help"
        if metavar and flag not in NO_DEFAULT:
            assert "default" in text, f"{command} {flag}: {text}"


def test_port_flags_name_their_default(capsys: pytest.CaptureFixture[str]) -> None:
    entries = _help_entries(_run(["serve", "--help"], capsys)[1])
    assert "(default: 8080)" in entries["--http-port PORT"]
    assert "(default: 18000)" in entries["--xds-port PORT"]
    assert "(default: text)" in entries["--log-format {text,json}"]


@pytest.mark.parametrize("flag", ["-o", "--output", "--format"])
def test_bootstrap_output_format_is_dash_o_output(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "envoy.json"
    assert _run(["bootstrap", str(out), flag, "json"], capsys)[0] == 0
    assert json.loads(out.read_text())["node"]["id"] == "turnout-envoy"
    code, stdout, _ = _run(["bootstrap", "-o", "yaml"], capsys)
    assert code == 0 and yaml.safe_load(stdout)["node"]["id"] == "turnout-envoy"


def _bad_invocations(tmp_path: Path) -> list[list[str]]:
    missing = str(tmp_path / "missing.yaml")
    here = str(tmp_path)
    return [
        ["serve", "--no-envoy", missing],
        ["serve", "--no-envoy", "--http-port", "99999", here],
        ["serve", "--no-envoy", "--log-format", "xml", here],
        ["check", missing],
        ["check", here, "--bogus"],
        ["check"],
        ["check", here, "-o", "xml"],
        ["explain", missing, "--host", "a.example.com"],
        ["explain", here],
        ["explain", here, "--host", "a", "-H", "no colon"],
        ["bootstrap", "/nonexistent/dir/x.yaml"],
        ["bootstrap", "--xds-port", "port"],
        ["bootstrap", str(tmp_path / "is-a-dir")],
        ["translate-nothing"],
    ]


def test_bad_paths_and_flags_are_one_line_and_exit_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "is-a-dir").mkdir()
    for argv in _bad_invocations(tmp_path):
        code, out, err = _run(argv, capsys)
        assert code == 2, (argv, code, err)
        assert out == "", argv
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("turnout: "), (argv, err)


def test_empty_input_says_so_and_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["check", str(tmp_path)], capsys)
    assert code == 0 and out == "0 objects: 0 valid, 0 invalid, 0 ignored, 0 warnings\n"
    assert err == f"turnout: warning: no routing objects found in {tmp_path}\n"
    code, out, err = _run(["check", str(tmp_path), "-o", "json"], capsys)
    doc = json.loads(out)
    assert code == 0 and (doc["objects"], doc["problems"], doc["ignored"]) == ([], [], [])
    assert doc["summary"]["objects"] == 0
    assert "no routing objects found" in err


def test_json_log_lines_carry_time_level_logger_and_message() -> None:
    record = logging.LogRecord("turnout.envoy", logging.WARNING, "x.py", 1, "a %s", ("b",), None)
    record.envoy_logger = "config"
    line = json.loads(JsonLogFormatter().format(record))
    assert line["level"] == "warning" and line["logger"] == "turnout.envoy"
    assert line["message"] == "a b" and line["envoy_logger"] == "config"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])


def test_serve_json_logs_empty_input_and_a_clean_stop(tmp_path: Path) -> None:
    """`serve --log-format json` on an empty directory: every line is JSON, the empty input is
    one warning, and SIGINT stops it at INFO with exit 0."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    argv = ["serve", str(tmp_path), "--no-envoy", "--no-demo-backends", "--log-format", "json"]
    argv += ["--admin-port", "0", "--xds-port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnout", *argv], stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    lines: list[dict[str, str]] = []
    for raw in proc.stderr:
        lines.append(json.loads(raw))
        if lines[-1]["message"].startswith("turnout serving"):
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=20)
    lines += [json.loads(raw) for raw in rest.splitlines()]
    assert proc.returncode == 0
    warnings = [line["message"] for line in lines if line["level"] != "info"]
    assert warnings == [f"no routing objects found in {tmp_path}"]
    assert any(line["message"] == "turnout stopping" for line in lines)


FAKE_ENVOY = """#!/bin/sh
echo "[warning][config] a warning while running" >&2
trap 'echo "[warning][main] caught ENVOY_SIGTERM" >&2; exit 0' TERM
while true; do sleep 0.05; done
"""


async def test_envoy_warnings_of_a_clean_stop_are_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    binary = tmp_path / "envoy"
    binary.write_text(FAKE_ENVOY)
    binary.chmod(0o755)
    caplog.set_level(logging.INFO, logger="turnout")
    envoy = EnvoyProcess(tmp_path / "bootstrap.yaml", binary=str(binary))
    await envoy.start()
    for _ in range(100):
        if any("while running" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    await envoy.stop(drain_seconds=5)
    levels = {r.getMessage(): r.levelno for r in caplog.records if r.name == "turnout.envoy"}
    assert levels["a warning while running"] == logging.WARNING
    assert levels["caught ENVOY_SIGTERM"] == logging.INFO


class GatedSource:
    """Lists nothing until `gate` is set, like a slow source on a cold start."""

    name = "slow"

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    async def run(self, sink: SourceSink) -> None:
        await self.gate.wait()
        sink.synced()
        await asyncio.Event().wait()

    async def reload(self) -> None:
        return None


async def test_a_long_cold_start_logs_progress(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("turnout.controller.PROGRESS_INTERVAL_S", 0.05)
    caplog.set_level(logging.INFO, logger="turnout")
    gate = asyncio.Event()
    config = ServeConfig(paths=(), run_envoy=False, demo_backends=False, xds_port=0)
    controller = build_controller(config, sources=[GatedSource(gate)])
    starting = asyncio.create_task(controller.start())
    try:
        await asyncio.sleep(0.3)
        progress = [r.getMessage() for r in caplog.records if "starting (" in r.getMessage()]
        assert progress and progress[-1].endswith("waiting for source(s) slow")
        gate.set()
        await asyncio.wait_for(starting, 5)
    finally:
        await controller.stop()

"""The layers of docs/architecture.md hold: `lint-imports` keeps the contracts in pyproject.toml,
and breaking one is caught."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    script = Path(sys.executable).with_name("lint-imports")
    command = str(script) if script.exists() else shutil.which("lint-imports") or "lint-imports"
    return subprocess.run(
        [command, "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_are_kept() -> None:
    run = _lint_imports(ROOT / "src", ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "BROKEN" not in run.stdout


def test_a_dialect_importing_envoy_breaks_the_contracts(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "turnout", tmp_path / "src" / "turnout")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    spec = tmp_path / "src" / "turnout" / "dialects" / "httpproxy" / "spec.py"
    spec.write_text(spec.read_text() + "\nimport turnout.envoy.translate  # noqa\n")
    run = _lint_imports(tmp_path / "src", tmp_path)
    assert run.returncode != 0
    assert "turnout.dialects.httpproxy.spec -> turnout.envoy.translate" in run.stdout

"""The Contour family's packages have no import cycle, and `dialects.contour` stays below the
dialects (pyproject.toml's contracts)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = (
    "turnout.dialects.httpproxy",
    "turnout.dialects.ingressroute",
    "turnout.dialects.contour_route",
    "turnout.dialects.contour",
)


def _cycle_members(graph: grimp.ImportGraph, package: str) -> set[str]:
    """Modules of `package` that import themselves back through other modules of `package`
    (imports inside functions and under TYPE_CHECKING count: grimp sees them all)."""
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    imports = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    in_cycle: set[str] = set()
    for start in modules:
        seen: set[str] = set()
        todo = list(imports[start])
        while todo:
            module = todo.pop()
            if module == start:
                in_cycle.add(start)
                break
            if module not in seen:
                seen.add(module)
                todo.extend(imports[module])
    return in_cycle


@pytest.mark.parametrize("package", PACKAGES)
def test_package_has_no_import_cycle(package: str) -> None:
    graph = grimp.build_graph("turnout")
    assert _cycle_members(graph, package) == set()


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("lint-imports")
    command = str(script) if script.exists() else shutil.which("lint-imports") or "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [command, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_contour_importing_a_dialect_breaks_the_contracts(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "turnout", tmp_path / "src" / "turnout")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    order = tmp_path / "src" / "turnout" / "dialects" / "contour" / "order.py"
    order.write_text(order.read_text() + "\nimport turnout.dialects.ingress.spec  # noqa\n")
    run = lint_imports(tmp_path / "src", tmp_path)
    assert run.returncode != 0
    assert "turnout.dialects.contour.order -> turnout.dialects.ingress.spec" in run.stdout

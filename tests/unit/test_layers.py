"""The layers of docs/architecture.md hold: `lint-imports` keeps the contracts in pyproject.toml,
and breaking one is caught. No test module imports another: shared helpers live in helper
modules (tests/builders.py, tests/cases/, tests/xds_client.py)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

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


def test_the_contour_package_importing_a_dialect_breaks_the_contracts(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "turnout", tmp_path / "src" / "turnout")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    order = tmp_path / "src" / "turnout" / "dialects" / "contour" / "order.py"
    order.write_text(order.read_text() + "\nimport turnout.dialects.ingress.spec  # noqa\n")
    run = _lint_imports(tmp_path / "src", tmp_path)
    assert run.returncode != 0
    assert "turnout.dialects.contour.order -> turnout.dialects.ingress.spec" in run.stdout


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_between_modules() -> None:
    """Counting imports inside functions and under TYPE_CHECKING too: a cycle hidden in a
    function is still two modules that cannot be understood apart."""
    graph = grimp.build_graph("turnout", cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(imports) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _test_module_imports(source: str) -> list[str]:
    """The modules whose last dotted part starts with `test_` that `source` imports from, with
    the line of each import (`from x import test_y` counts: it may name a test module too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [
            f"line {node.lineno}: {name}"
            for name in names
            if name.rpartition(".")[2].startswith("test_")
        ]
    return found


def test_no_test_module_imports_another_test_module() -> None:
    """A helper two test modules share belongs in a helper module, not in one of the tests."""
    offenders = [
        f"{path.relative_to(ROOT)} {entry}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for entry in _test_module_imports(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "test modules importing test modules:\n" + "\n".join(offenders)


def test_the_test_import_finder_finds_them() -> None:
    source = (
        "import tests.unit.test_a\n"
        "from tests.unit.test_b import helper\n"
        "from .test_c import x\n"
        "from tests.unit import test_d\n"
        "from tests.builders import service\n"
        "import tests.xds_client\n"
    )
    assert _test_module_imports(source) == [
        "line 1: tests.unit.test_a",
        "line 2: tests.unit.test_b",
        "line 3: .test_c",
        "line 4: tests.unit.test_d",
    ]

"""The fixture cases under tests/fixtures: each compiled with its own options."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.graph.build import CompileResult
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

FIXTURES = Path(__file__).resolve().parent / "fixtures"


CASES = sorted(p for p in FIXTURES.glob("*/*") if (p / "input.yaml").is_file())


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def case_options(case: Path) -> CompileOptions:
    raw = load_yaml(case / "options.yaml") or {}
    known = {f.name for f in fields(CompileOptions)}
    unknown = set(raw) - known
    assert not unknown, f"{case}/options.yaml: unknown options {sorted(unknown)}"
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return CompileOptions(**values)


def compile_case(case: Path) -> CompileResult:
    parsed = parse_text((case / "input.yaml").read_text(), str(case / "input.yaml"))
    assert not parsed.problems, "input.yaml does not load:\n" + "\n".join(
        str(p) for p in parsed.problems
    )
    return compile_snapshot(Snapshot.of(parsed.objects), case_options(case))

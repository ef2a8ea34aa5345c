"""Every configuration the dialect fixtures compile to is accepted by the real Envoy, with no
deprecation warnings: a translator bug or an unvalidated regex shows up here as a rejection."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.fixture_cases import CASES, compile_case
from turnout.envoy.translate import translate
from turnout.envoy.validate import ValidationResult, validate_resources


def _validate(case: Path) -> tuple[Path, ValidationResult]:
    return case, validate_resources(translate(compile_case(case).graph))


def test_every_fixture_configuration_passes_envoy_validation() -> None:
    assert len(CASES) >= 30
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_validate, CASES))
    rejected = [
        f"{case.parent.name}/{case.name}: {r.output[-2000:]}" for case, r in results if not r.ok
    ]
    assert not rejected, "\n\n".join(rejected)
    deprecated = [
        f"{case.name}: {r.deprecation_warnings}" for case, r in results if r.deprecation_warnings
    ]
    assert not deprecated, "\n".join(deprecated)

"""Which regexes Envoy 1.40 accepts, proven against the real binary, and `regex_error` agrees.

Each row is served as a route's `safe_regex` path match and checked with `envoy --mode validate`.
Envoy compiles the pattern's UTF-8 bytes with RE2 in Latin-1 mode: `.` and `[^/]` are one byte,
a range between multi-byte characters is a range between bytes, and `\\x{100}` does not parse.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from turnout.envoy.process import envoy_binary
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.validate import ValidationResult, static_bootstrap, validate_resources
from turnout.graph.model import (
    DirectResponse,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    VirtualHost,
)
from turnout.graph.regex import ENVOY_MAX_PROGRAM_SIZE, envoy_program_size, regex_error
from turnout.objects import ObjectRef

pytestmark = [pytest.mark.e2e]

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "regex")

ACCEPTED, SIZE, SYNTAX = "accepted", "refused for size", "refused for syntax"

# (regex, Envoy's verdict, Envoy's program size; None when it does not parse)
TABLE: tuple[tuple[str, str, int | None], ...] = (
    ("/x.{20}", ACCEPTED, 46),  # RE2's default UTF-8 count is 166
    ("/x.{47}", ACCEPTED, 100),
    ("/x.{48}", SIZE, 102),
    ("[a-z]{96}", ACCEPTED, 100),
    ("[a-z]{97}", SIZE, 101),
    (r"\d{96}", ACCEPTED, 100),
    (r"\d{97}", SIZE, 101),
    ("(?i)[a-z]{96}", ACCEPTED, 100),  # 580 in UTF-8 mode
    ("é{95}", ACCEPTED, 100),  # the repetition applies to é's last byte only
    ("é{96}", SIZE, 101),
    ("/café/[^/]+", ACCEPTED, 14),
    ("[本-日]", ACCEPTED, 8),  # UTF-8 RE2 refuses this range; Envoy reads it as bytes A5-E6
    ("/(foo|bar|baz|qux){8}", SIZE, 101),
    (r"\w{50}", SIZE, 154),
    ("/api/v[0-9]+/.*", ACCEPTED, 15),
    ("(unclosed", SYNTAX, None),
    (r"\x{100}", SYNTAX, None),  # no such byte in Latin-1
    ("/(?=admin).*", SYNTAX, None),
)


def _resources(regex: str) -> EnvoyResources:
    route = Route(
        RouteMatch(PathMatch(PathMatchKind.REGEX, regex)),
        DirectResponse(200),
        RouteSource(OWNER, "spec.routes[0]"),
    )
    vhost = VirtualHost("*", "*", (route,), OWNER)
    listener = Listener("ingress_http", "127.0.0.1", 8080, ListenerProtocol.HTTP, (vhost,))
    return translate(RoutingGraph(listeners=(listener,)), TranslateOptions())


def _size_as_envoy_reports(regex: str, tmp_path: Path) -> int:
    """Envoy's own count, read from its error with the size limit lowered to 0."""
    bootstrap = static_bootstrap(_resources(regex))
    runtime = {"re2.max_program_size.error_level": 0}
    bootstrap["layered_runtime"] = {"layers": [{"name": "limit", "static_layer": runtime}]}
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(bootstrap))
    proc = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--use-dynamic-base-id"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    reported = re.search(r"RE2 program size of (\d+)", proc.stderr + proc.stdout)
    assert reported is not None, proc.stderr
    return int(reported.group(1))


@pytest.mark.parametrize(("regex", "verdict", "size"), TABLE)
def test_regex_error_agrees_with_envoy(regex: str, verdict: str, size: int | None) -> None:
    problem = regex_error(regex)
    if verdict == ACCEPTED:
        assert problem is None
        assert envoy_program_size(regex) == size
    elif verdict == SIZE:
        assert problem == f"RE2 program size {size} exceeds Envoy's limit of 100"
    else:
        assert problem is not None and problem.startswith("invalid RE2 syntax: ")


@pytest.mark.parametrize(("regex", "verdict", "size"), TABLE)
def test_envoy_gives_the_tables_verdict(
    regex: str, verdict: str, size: int | None, tmp_path: Path
) -> None:
    result: ValidationResult = validate_resources(_resources(regex), envoy=envoy_binary())
    assert result.returncode is not None, result.output
    assert result.ok == (verdict == ACCEPTED), result.output
    reported = re.search(r"RE2 program size of (\d+)", result.output)
    if verdict == SIZE:
        assert reported is not None, result.output
        assert int(reported.group(1)) == size
        assert f"> max program size of {ENVOY_MAX_PROGRAM_SIZE}" in result.output
    elif verdict == SYNTAX:
        assert reported is None, result.output
    if size is not None:
        assert _size_as_envoy_reports(regex, tmp_path) == size

"""Data-driven dialect fixtures: `tests/fixtures/<dialect>/<case>/`.

Each case directory holds
- `input.yaml`: every object of the case (multi-document YAML);
- `status.yaml` (optional): a list of `{kind, namespace, name, status}`; each `status` is compared
  as a subset of the compiled status body (mappings: listed keys only; lists: same length,
  element by element); `{kind, namespace, name, absent: true}` asserts that the object gets no
  status at all (e.g. it belongs to another ingress class);
- `requests.yaml` (optional): a list of `{host, path, method, headers, listener, expect}` checked
  through the evaluator; `expect` may hold `status` (int), `cluster` (the one cluster with weight,
  as a `ns/service/port` prefix), `clusters` (a list of `{cluster, weight}`, in order), `route`
  (the field of the chosen route, e.g. `spec.routes[1]`), `source` (`ns/name` of the object
  that wrote the chosen route) and `tls` (null: the chosen virtual host has no TLS; or a subset
  of `{secret: ns/name, min_version, max_version}` of its TLS termination; `listener:
  ingress_https` asks the HTTPS listener, assuming the SNI equals the host) and `upstream` (a
  subset of `{protocol, lb_strategy, health_check}` of every chosen cluster with weight, with the
  graph's field names and enum values);
- `options.yaml` (optional): `CompileOptions` fields, e.g. `root_namespaces: [roots]`.

Adding a case is adding a directory; every dialect's cases run here.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from turnout.dialects.base import CompileOptions
from turnout.graph.build import CompileResult, compile_snapshot
from turnout.graph.evaluate import Decision, evaluate, make_request
from turnout.graph.model import DirectResponse, Forward, Redirect
from turnout.objects import DEFAULT_NAMESPACE
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = sorted(p for p in FIXTURES.glob("*/*") if (p / "input.yaml").is_file())


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _options(case: Path) -> CompileOptions:
    raw = _load(case / "options.yaml") or {}
    known = {f.name for f in fields(CompileOptions)}
    unknown = set(raw) - known
    assert not unknown, f"{case}/options.yaml: unknown options {sorted(unknown)}"
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return CompileOptions(**values)


def _compile(case: Path) -> CompileResult:
    parsed = parse_text((case / "input.yaml").read_text(), str(case / "input.yaml"))
    assert not parsed.problems, "input.yaml does not load:\n" + "\n".join(
        str(p) for p in parsed.problems
    )
    return compile_snapshot(Snapshot.of(parsed.objects), _options(case))


def subset_mismatches(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where `expected` is not a subset of `actual`, as `path: expected ..., got ...` lines."""
    where = path or "(top)"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected a mapping, got {actual!r}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: missing (expected {value!r})")
            else:
                out.extend(subset_mismatches(value, actual[key], f"{path}.{key}"))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where}: expected a list, got {actual!r}"]
        if len(expected) != len(actual):
            return [f"{where}: expected {len(expected)} items, got {len(actual)}: {actual!r}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            out.extend(subset_mismatches(e, a, f"{path}[{i}]"))
        return out
    if expected != actual:
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return []


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def check_statuses(result: CompileResult, expected: list[dict[str, Any]]) -> list[str]:
    by_key = {
        (s.ref.kind, s.ref.namespace, s.ref.name): _jsonable(dict(s.body)) for s in result.statuses
    }
    failures: list[str] = []
    for item in expected:
        key = (item["kind"], item.get("namespace", DEFAULT_NAMESPACE), item["name"])
        label = f"{key[0]} {key[1]}/{key[2]}"
        actual = by_key.get(key)
        if item.get("absent"):
            if actual is not None:
                failures.append(
                    f"status of {label}: expected none, got:\n"
                    + _indent(yaml.safe_dump(actual, sort_keys=False), 4)
                )
            continue
        if actual is None:
            failures.append(f"status of {label}: no status was compiled")
            continue
        mismatches = subset_mismatches(item.get("status", {}), actual, "status")
        if mismatches:
            failures.append(
                f"status of {label}:\n  "
                + "\n  ".join(mismatches)
                + "\n  actual status:\n"
                + _indent(yaml.safe_dump(actual, sort_keys=False), 4)
            )
    return failures


def _prefix_matches(prefix: str, cluster: str) -> bool:
    return cluster == prefix or cluster.startswith(prefix + "/")


def _describe(decision: Decision) -> str:
    lines = []
    if decision.virtual_host is None:
        lines.append("no virtual host matched")
    else:
        lines.append(f"virtual host {decision.virtual_host.name}")
    for miss in decision.passed_over:
        lines.append(f"passed over {miss.route.source}: {miss.reason}")
    route = decision.route
    if route is None:
        lines.append(f"no route matched -> {decision.status}")
    else:
        action = route.action
        if isinstance(action, Forward):
            what = ", ".join(f"{c.cluster} (weight {c.weight})" for c in action.clusters)
        elif isinstance(action, DirectResponse):
            what = f"direct response {action.status}"
        else:
            assert isinstance(action, Redirect)
            what = f"redirect {action.status}"
        lines.append(f"chose {route.source}: {what}")
    return "\n".join(lines)


def check_request(result: CompileResult, req: dict[str, Any]) -> list[str]:
    request = make_request(
        host=req["host"],
        path=req.get("path", "/"),
        method=req.get("method", "GET"),
        headers={str(k): str(v) for k, v in (req.get("headers") or {}).items()},
        listener=req.get("listener", "ingress_http"),
    )
    decision = evaluate(result.graph, request)
    expect = req.get("expect") or {}
    problems: list[str] = []
    if "status" in expect and decision.status != expect["status"]:
        problems.append(f"status: expected {expect['status']}, got {decision.status}")
    weighted = [(name, weight) for name, weight in decision.clusters if weight > 0]
    if "cluster" in expect and not (
        len(weighted) == 1 and _prefix_matches(expect["cluster"], weighted[0][0])
    ):
        problems.append(f"cluster: expected {expect['cluster']}, got {weighted or 'none'}")
    if "clusters" in expect:
        want = [(c["cluster"], c["weight"]) for c in expect["clusters"]]
        got = list(decision.clusters)
        if len(want) != len(got) or any(
            not _prefix_matches(wc, gc) or ww != gw
            for (wc, ww), (gc, gw) in zip(want, got, strict=False)
        ):
            problems.append(f"clusters: expected {want}, got {got}")
    route = decision.route
    if "route" in expect and (route is None or route.source.field != expect["route"]):
        problems.append(
            f"route: expected {expect['route']}, got {route.source.field if route else None}"
        )
    if "source" in expect:
        got_source = (
            f"{route.source.object.namespace}/{route.source.object.name}" if route else None
        )
        if got_source != expect["source"]:
            problems.append(f"source: expected {expect['source']}, got {got_source}")
    if "tls" in expect:
        problems.extend(_tls_mismatches(result, decision, expect["tls"]))
    if "upstream" in expect:
        problems.extend(_upstream_mismatches(result, weighted, expect["upstream"]))
    if not problems:
        return []
    headers = req.get("headers") or {}
    label = f"{request.method} {request.host}{request.path}" + (f" {headers}" if headers else "")
    return [
        f"request {label}:\n  "
        + "\n  ".join(problems)
        + "\n  evaluator:\n"
        + _indent(_describe(decision), 4)
    ]


def _tls_mismatches(result: CompileResult, decision: Decision, expected: Any) -> list[str]:
    vh = decision.virtual_host
    tls = vh.tls if vh is not None else None
    if expected is None:
        return [] if tls is None else [f"tls: expected none, got {tls}"]
    if tls is None:
        return [f"tls: expected {expected}, got none"]
    secret = next((s for s in result.graph.secrets if s.name == tls.secret), None)
    actual = {
        "secret": f"{secret.namespace}/{secret.secret}" if secret else f"(missing) {tls.secret}",
        "min_version": tls.min_version,
        "max_version": tls.max_version,
    }
    return subset_mismatches(expected, actual, "tls")


def _upstream_mismatches(
    result: CompileResult, weighted: list[tuple[str, int]], expected: dict[str, Any]
) -> list[str]:
    if not weighted:
        return ["upstream: no cluster was chosen"]
    problems: list[str] = []
    for name, _ in weighted:
        cluster = result.graph.cluster(name)
        if cluster is None:
            problems.append(f"upstream: the graph has no cluster {name}")
            continue
        actual = {
            "protocol": cluster.protocol.value,
            "lb_strategy": cluster.lb_strategy.value,
            "health_check": asdict(cluster.health_check) if cluster.health_check else None,
        }
        problems.extend(subset_mismatches(expected, _jsonable(actual), f"upstream of {name}"))
    return problems


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.rstrip("\n").splitlines())


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_fixture(case: Path) -> None:
    statuses = _load(case / "status.yaml")
    requests = _load(case / "requests.yaml")
    assert statuses or requests, f"{case}: needs status.yaml or requests.yaml"
    result = _compile(case)
    failures = check_statuses(result, statuses or [])
    for req in requests or []:
        failures.extend(check_request(result, req))
    if failures:
        pytest.fail(f"{case.relative_to(FIXTURES)}:\n\n" + "\n\n".join(failures), pytrace=False)


def test_there_are_fixtures() -> None:
    assert len([c for c in CASES if c.parent.name == "httpproxy"]) >= 30

"""Data-driven dialect fixtures: `tests/fixtures/<dialect>/<case>/`.

Each case directory holds
- `input.yaml`: every object of the case (multi-document YAML);
- `status.yaml` (optional): a list of `{kind, namespace, name, status}`; each `status` is compared
  as a subset of the compiled status body (mappings: listed keys only; lists: same length,
  element by element); `{kind, namespace, name, absent: true}` asserts that the object gets no
  status at all (e.g. it belongs to another ingress class);
- `requests.yaml` (optional): a list of `{host, path, method, headers, listener, sni, expect}`
  checked through the evaluator (`sni`: the server name of the request's TLS connection, `""`
  for none; absent: the Host's); `expect` may hold `status` (int), `cluster` (the one cluster
  with weight, as a `ns/service/port` prefix), `clusters` (a list of `{cluster, weight}`, in
  order), `route` (the field of the chosen route, e.g. `spec.routes[1]`), `source` (`ns/name`
  of the object that wrote the chosen route) and `tls` (null: the chosen virtual host has no
  TLS; or a subset of `{secret: ns/name, min_version, max_version}` of its TLS termination;
  `listener: ingress_https` asks the HTTPS listener) and `upstream` (a
  subset of `{protocol, lb_strategy, health_check, outlier_detection, validation, slow_start,
  connect_timeout_s, idle_connection_timeout_s, dns_name, endpoints}` of every chosen cluster
  with weight, with the graph's field names and enum values; `validation.ca_secret` is the
  bundle's `ns/name`) and `filters` (a subset of `{cors, ip_filter, rate_limit}`, the policies
  Envoy's HTTP filters apply to the request: the chosen route's IP filter and rate limit, or
  else its virtual host's, and the virtual host's CORS; graph field names, null for none) and
  `policies` (a subset of the chosen route's `RoutePolicies`: timeouts, retry, headers,
  rewrites, mirrors, websockets, cookie rewrites, hash policies; graph field names and enum
  values, a mirror's cluster as a `ns/service/port` prefix) and `backend_policies` (for each
  backend of the chosen route, in order, a subset of its `BackendPolicies`, or null for none)
  and `policy_answer` (null: no policy answers before the route; or a subset of
  `{status, policy, filter, source, definite, reason, headers}` of `Decision.policy_answer`,
  `headers` as `[name, value]` pairs); a request's `client_address` is the connection's
  address IP filters see (default 127.0.0.1);
- `sni.yaml` (optional): TLS connections by SNI and the filter chain each gets (TCP proxies,
  passthrough, the fallback certificate); see `fixture_sni.py`, whose `tls_facts` also gives
  `expect.tls` its `client_validation` and `fallback` keys;
- `options.yaml` (optional): `CompileOptions` fields, e.g. `root_namespaces: [roots]`.

Adding a case is adding a directory; every dialect's cases run here.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixture_cases import CASES, FIXTURES, compile_case, load_yaml
from tests.unit.fixture_sni import check_sni, tls_facts
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import Decision, evaluate, make_request
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    ExactOrigin,
    Forward,
    OriginMatch,
    Redirect,
    RegexOrigin,
)
from turnout.graph.policy_answers import DEFAULT_CLIENT_ADDRESS
from turnout.objects import DEFAULT_NAMESPACE


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
        sni=req.get("sni"),
        client_address=req.get("client_address", DEFAULT_CLIENT_ADDRESS),
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
    if "filters" in expect:
        problems.extend(_filter_mismatches(decision, expect["filters"]))
    if "policies" in expect:
        problems.extend(_policies_mismatches(decision, expect["policies"]))
    if "backend_policies" in expect:
        problems.extend(_backend_policies_mismatches(decision, expect["backend_policies"]))
    if "policy_answer" in expect:
        problems.extend(_policy_answer_mismatches(decision, expect["policy_answer"]))
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
    return subset_mismatches(expected, tls_facts(result.graph, tls), "tls")


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
            **_upstream_policies(result, cluster),
        }
        problems.extend(subset_mismatches(expected, _jsonable(actual), f"upstream of {name}"))
    return problems


def _filter_mismatches(decision: Decision, expected: dict[str, Any]) -> list[str]:
    vh, route = decision.virtual_host, decision.route
    if vh is None or route is None:
        return ["filters: no route was chosen"]
    actual = {
        "cors": vh.policies.cors,
        "ip_filter": route.policies.ip_filter or vh.policies.ip_filter,
        "rate_limit": route.policies.rate_limit or vh.policies.rate_limit,
    }
    as_json = {k: _jsonable(asdict(v)) if v is not None else None for k, v in actual.items()}
    if as_json["cors"] is not None:
        # The fixtures write a regex origin as "regex:<pattern>", an exact one as written.
        origins = vh.policies.cors.allow_origins  # type: ignore[union-attr]
        as_json["cors"]["allow_origins"] = [origin_text(o) for o in origins]
    for rule in (as_json["ip_filter"] or {}).get("rules", ()):
        rule["source"] = rule["source"].value
    return subset_mismatches(expected, as_json, "filters")


def _policy_answer_mismatches(decision: Decision, expected: Any) -> list[str]:
    answer = decision.policy_answer
    if expected is None:
        return [] if answer is None else [f"policy_answer: expected none, got {answer}"]
    if answer is None:
        return [f"policy_answer: expected {expected}, got none"]
    actual = _jsonable(asdict(answer))
    actual["headers"] = [list(h) for h in answer.headers]
    return subset_mismatches(expected, actual, "policy_answer")


def origin_text(origin: OriginMatch) -> str:
    return f"regex:{origin.pattern}" if isinstance(origin, RegexOrigin) else origin.origin


def _plain(value: Any) -> Any:
    """A dataclass tree as plain YAML-comparable values (enums by value)."""
    if isinstance(value, ExactOrigin | RegexOrigin):
        return origin_text(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _policies_mismatches(decision: Decision, expected: dict[str, Any]) -> list[str]:
    route = decision.route
    if route is None:
        return ["policies: no route was chosen"]
    actual = _plain(route.policies)
    for mirror, want in zip(actual["mirrors"], expected.get("mirrors") or [], strict=False):
        # Cluster names end in a hash of settings; fixtures name them by prefix.
        if isinstance(want, dict) and _prefix_matches(str(want.get("cluster")), mirror["cluster"]):
            mirror["cluster"] = want["cluster"]
    return subset_mismatches(expected, actual, "policies")


def _backend_policies_mismatches(decision: Decision, expected: list[Any]) -> list[str]:
    route = decision.route
    if route is None or not isinstance(route.action, Forward):
        return ["backend_policies: the chosen route does not forward"]
    actual = [_plain(wc.policies) for wc in route.action.clusters]
    return subset_mismatches(expected, actual, "backend_policies")


def _upstream_policies(result: CompileResult, cluster: Cluster) -> dict[str, Any]:
    """The upstream policies of a cluster; a validation's CA bundle as `ns/secret`."""
    validation: dict[str, Any] | None = None
    if cluster.validation is not None:
        wanted = cluster.validation.ca_secret
        bundle = next((b for b in result.graph.ca_bundles if b.name == wanted), None)
        validation = {
            "ca_secret": f"{bundle.namespace}/{bundle.secret}" if bundle else None,
            "subject_names": list(cluster.validation.subject_names),
            "sni": cluster.validation.sni,
        }
    return {
        "outlier_detection": asdict(cluster.outlier_detection)
        if cluster.outlier_detection
        else None,
        "validation": validation,
        "slow_start": asdict(cluster.slow_start) if cluster.slow_start else None,
        "connect_timeout_s": cluster.connect_timeout_s,
        "idle_connection_timeout_s": cluster.idle_connection_timeout_s,
        "dns_name": cluster.dns_name,
        "endpoints": [f"{e.address}:{e.port}" for e in cluster.endpoints],
    }


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.rstrip("\n").splitlines())


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_fixture(case: Path) -> None:
    statuses = load_yaml(case / "status.yaml")
    requests = load_yaml(case / "requests.yaml")
    sni = load_yaml(case / "sni.yaml")
    assert statuses or requests or sni, f"{case}: needs status.yaml, requests.yaml or sni.yaml"
    result = compile_case(case)
    failures = check_statuses(result, statuses or [])
    for req in requests or []:
        failures.extend(check_request(result, req))
    for entry in sni or []:
        failures.extend(check_sni(result, entry, subset_mismatches))
    if failures:
        pytest.fail(f"{case.relative_to(FIXTURES)}:\n\n" + "\n\n".join(failures), pytrace=False)


def test_there_are_fixtures() -> None:
    assert len([c for c in CASES if c.parent.name == "httpproxy"]) >= 30

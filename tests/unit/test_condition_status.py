"""Ingress and RouteGroup statuses as typed records: what the safety net refuses after the dialects
ran shows in the object's own Accepted condition, written as a problem the dialect found would be;
repeated problems are skipped in linear time; the discover hint rewrites the typed condition."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.cases.ingress_objects import compile_objects, ingress, path, rule, service
from tests.cases.oidc import ISSUER, compile_rg
from tests.cases.routegroup_objects import routegroup, web_service
from turnout.app import compile_snapshot
from turnout.cli import with_discover_hint
from turnout.dialects.condition_status import ACCEPTED, RESOLVED_REFS, Problem
from turnout.dialects.ingress.status import IngressStatusAccessor
from turnout.dialects.routegroup.spec import parse_routegroup
from turnout.dialects.routegroup.status import RouteGroupStatus
from turnout.graph.build import CompileResult
from turnout.objects import KubeObject, ObjectRef, freeze
from turnout.status.model import ConditionStatus, Finding, ObjectStatus, Severity, State
from turnout.store import Snapshot

ENVOY_LIMIT = "EnvoyLimit"


def status_of(result: CompileResult, kind: str, name: str) -> ObjectStatus:
    [found] = [s for s in result.statuses if s.ref.kind == kind and s.ref.name == name]
    return found


def body_conditions(status: ObjectStatus) -> dict[str, dict[str, Any]]:
    body = json.loads(json.dumps(status.body))
    return {c["type"]: c for c in body["conditions"]}


def weighted_routegroup(name: str, host: str, weight: int) -> KubeObject:
    backends = [
        {"name": "w", "type": "service", "serviceName": "web", "servicePort": 80},
        {"name": "x", "type": "network", "address": "http://10.0.0.9:80"},
    ]
    refs = [{"backendName": "w", "weight": weight}, {"backendName": "x", "weight": weight}]
    spec = {"hosts": [host], "backends": backends, "routes": [{"path": "/", "backends": refs}]}
    return routegroup(name, spec)


# --- findings in the object's own conditions ------------------------------------------------------


def test_a_routegroup_route_only_the_envoy_limits_net_refuses_shows_in_its_accepted() -> None:
    heavy = weighted_routegroup("heavy", "heavy.example.com", 3_000_000_000)
    light = weighted_routegroup("light", "light.example.com", 1)
    result = compile_snapshot(Snapshot.of([*web_service(), heavy, light]))

    status = status_of(result, "RouteGroup", "heavy")
    accepted = status.condition(ACCEPTED)
    assert accepted is not None
    assert (accepted.status, accepted.reason) == (ConditionStatus.FALSE, ENVOY_LIMIT)
    assert accepted.message.startswith("spec.routes[0]: backend weights sum to 6000000000")
    assert "uint32" in accepted.message
    assert status.state is State.INVALID and status.summary == accepted.message
    rendered = body_conditions(status)
    assert rendered[ACCEPTED] == {
        "type": ACCEPTED,
        "status": "False",
        "reason": ENVOY_LIMIT,
        "message": accepted.message,
        "observedGeneration": status.generation,
    }
    assert rendered[RESOLVED_REFS]["status"] == "True"

    neighbour = status_of(result, "RouteGroup", "light")
    assert neighbour.state is State.VALID
    assert body_conditions(neighbour)[ACCEPTED]["status"] == "True"
    assert body_conditions(neighbour)[ACCEPTED]["message"] == "RouteGroup is served"


def test_an_ingress_host_only_the_envoy_limits_net_refuses_shows_in_its_accepted() -> None:
    # A one-label wildcard this long needs an :authority regex beyond Envoy's program size.
    wild_host = "*." + ".".join(["abcdefghijkl"] * 19)
    result = compile_objects(
        [
            service("svc"),
            ingress("wild", rule(wild_host, path("/"))),
            ingress("plain", rule("plain.example.com", path("/"))),
        ]
    )
    wild = status_of(result, "Ingress", "wild")
    accepted = body_conditions(wild)[ACCEPTED]
    assert (accepted["status"], accepted["reason"]) == ("False", ENVOY_LIMIT)
    assert accepted["message"].startswith(f"virtual host '{wild_host}': hostname")
    assert "RE2 program size" in accepted["message"]
    assert wild.state is State.INVALID
    assert json.loads(json.dumps(wild.body))["loadBalancer"] == {"ingress": [{"ip": "127.0.0.1"}]}

    plain = status_of(result, "Ingress", "plain")
    assert plain.state is State.VALID
    assert body_conditions(plain)[ACCEPTED] == {
        "type": ACCEPTED,
        "status": "True",
        "reason": ACCEPTED,
        "message": "Ingress is served",
        "observedGeneration": plain.generation,
    }


# --- fold, directly -------------------------------------------------------------------------------


def ingress_object(name: str = "web") -> KubeObject:
    raw = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default", "generation": 3},
    }
    return KubeObject("networking.k8s.io/v1", "Ingress", "default", name, freeze(raw))


def finding(ref: ObjectRef, reason: str, message: str, severity: Severity) -> Finding:
    return Finding(ref, "spec.rules[0].http.paths[0]", reason, message, severity)


def test_fold_writes_a_finding_as_the_dialect_would_have_written_the_same_problem() -> None:
    obj = ingress_object()
    dialect_found = IngressStatusAccessor.with_problems(
        obj,
        [
            Problem(ACCEPTED, "PathConflict", "spec.rules[0].http.paths[0]: oops"),
            Problem(ACCEPTED, "Refused", "spec.rules[0].http.paths[0]: over the limit"),
            Problem(ACCEPTED, "Odd", "looks odd", warning=True),
            Problem(ACCEPTED, "Later", "later", warning=True),
        ],
    ).build("127.0.0.1")
    base = IngressStatusAccessor.with_problems(
        obj,
        [
            Problem(ACCEPTED, "PathConflict", "spec.rules[0].http.paths[0]: oops"),
            Problem(ACCEPTED, "Odd", "looks odd", warning=True),
        ],
    ).build("127.0.0.1")
    folded = base.with_findings(
        [
            finding(obj.ref, "Refused", "over the limit", Severity.ERROR),
            Finding(obj.ref, "", "Later", "later", Severity.WARNING),
        ]
    )
    assert folded.body == dialect_found.body
    accepted = body_conditions(folded)[ACCEPTED]
    assert accepted["reason"] == "PathConflict"  # the first error's
    assert accepted["message"] == (
        "spec.rules[0].http.paths[0]: oops; spec.rules[0].http.paths[0]: over the limit; "
        "warning: looks odd; warning: later"
    )
    assert (folded.state, folded.summary) == (State.INVALID, "spec.rules[0].http.paths[0]: oops")


def test_a_first_error_found_after_the_dialects_gives_accepted_its_reason_and_the_summary() -> None:
    obj = ingress_object()
    status = IngressStatusAccessor.with_problems(
        obj, [Problem(ACCEPTED, "Odd", "looks odd", warning=True)]
    ).build("10.1.1.1")
    folded = status.with_findings(
        [finding(obj.ref, "EndpointRefused", "endpoint refused", Severity.ERROR)]
    )
    accepted = body_conditions(folded)[ACCEPTED]
    assert (accepted["status"], accepted["reason"]) == ("False", "EndpointRefused")
    assert accepted["message"] == (
        "spec.rules[0].http.paths[0]: endpoint refused; warning: looks odd"
    )
    assert accepted["observedGeneration"] == 3
    assert folded.state is State.INVALID
    assert folded.summary == "spec.rules[0].http.paths[0]: endpoint refused"
    assert body_conditions(folded)[RESOLVED_REFS] == body_conditions(status)[RESOLVED_REFS]


def test_an_invalid_status_keeps_its_first_error_as_summary_when_findings_fold_in() -> None:
    obj = ingress_object()
    status = IngressStatusAccessor.with_problems(
        obj, [Problem(RESOLVED_REFS, "ServiceNotFound", "service svc not found")]
    ).build("10.1.1.1")
    folded = status.with_findings([finding(obj.ref, ENVOY_LIMIT, "too big", Severity.ERROR)])
    assert folded.summary == "service svc not found"
    assert body_conditions(folded)[ACCEPTED]["reason"] == ENVOY_LIMIT
    assert body_conditions(folded)[RESOLVED_REFS]["reason"] == "ServiceNotFound"


def test_a_warning_found_after_the_dialects_leaves_the_object_accepted() -> None:
    obj = ingress_object()
    status = RouteGroupStatus(obj).build("10.1.1.1")
    folded = status.with_findings([finding(obj.ref, "Slow", "slow", Severity.WARNING)])
    accepted = body_conditions(folded)[ACCEPTED]
    assert (accepted["status"], accepted["reason"]) == ("True", ACCEPTED)
    assert accepted["message"] == (
        "RouteGroup is served; warning: spec.rules[0].http.paths[0]: slow"
    )
    assert (folded.state, folded.summary) == (State.VALID, "RouteGroup is served")


# --- repeated problems ----------------------------------------------------------------------------


def test_twenty_thousand_distinct_problems_are_collected_in_linear_time() -> None:
    problems = [Problem(ACCEPTED, "Many", f"problem {i}") for i in range(20_000)]
    started = time.perf_counter()
    status = IngressStatusAccessor.with_problems(ingress_object(), [*problems, *problems[:10]])
    built = status.build("10.1.1.1")
    assert time.perf_counter() - started < 2
    assert status.problems == problems  # first-seen order, repeats skipped
    message = body_conditions(built)[ACCEPTED]["message"]
    assert message.startswith("problem 0; problem 1; problem 2;")


def test_a_routegroup_with_twenty_thousand_unknown_fields_is_read_in_linear_time() -> None:
    spec = {f"field{i}": i for i in range(20_000)}
    started = time.perf_counter()
    parsed = parse_routegroup(routegroup("many", spec))
    assert time.perf_counter() - started < 2
    unknown = [p.message for p in parsed.problems if p.reason == "UnknownField"]
    assert len(unknown) == 20_000
    assert unknown[:2] == [
        'spec.field0: unknown field "field0"',
        'spec.field1: unknown field "field1"',
    ]


# --- the discover hint ----------------------------------------------------------------------------


def test_the_discover_hint_is_written_into_the_typed_condition() -> None:
    status = status_of(compile_rg(ISSUER), "RouteGroup", "rg")
    hinted = with_discover_hint(status, "check")
    hint = "; run `turnout check --discover` to resolve the issuer"
    refs, before = hinted.condition(RESOLVED_REFS), status.condition(RESOLVED_REFS)
    assert refs is not None and before is not None
    assert refs.reason == "IssuerDiscoveryPending" and refs.message == before.message + hint
    assert body_conditions(hinted)[RESOLVED_REFS]["message"] == before.message + hint
    assert hinted.summary.endswith(hint) and before.message + hint in hinted.summary
    assert hinted.condition(ACCEPTED) == status.condition(ACCEPTED)
    plain = RouteGroupStatus(ingress_object()).build("10.1.1.1")
    assert with_discover_hint(plain, "check") is plain

"""Gateway API statuses as typed records (`dialects/gatewayapi/status.py`, `conditions.py`):
findings found after the dialects ran, folded into each kind's status as its users read it."""

from __future__ import annotations

from typing import Any

from tests.cases.gateway_docs import CLASS, compile_docs, gateway_doc, service_doc
from turnout.dialects.gatewayapi.conditions import GATEWAY_SHAPE, ROUTE_SHAPE
from turnout.objects import ObjectRef
from turnout.status.model import (
    Condition,
    ConditionStatus,
    Finding,
    ObjectStatus,
    Section,
    Severity,
    State,
)

ROUTE = ObjectRef("gateway.networking.k8s.io", "HTTPRoute", "app", "web")
GATEWAY = ObjectRef("gateway.networking.k8s.io", "Gateway", "app", "gw")

TWO_PARENTS = (
    CLASS
    + gateway_doc(
        "gw",
        "{name: a, port: 18081, protocol: HTTP}",
        "{name: b, port: 18082, protocol: HTTP}",
    )
    # A link-local endpoint (a cloud metadata service) is refused after the dialects ran.
    + service_doc("meta", "http", 80, 80, "169.254.169.254")
    + """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: app}
spec:
  parentRefs: [{name: gw, sectionName: a}, {name: gw, sectionName: b}]
  rules: [{backendRefs: [{name: meta, port: 80}]}]
"""
)


def _by_type(conditions: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


def test_a_route_whose_backend_endpoint_is_refused_is_partially_invalid_on_each_parent() -> None:
    result = compile_docs(TWO_PARENTS)
    (status,) = [s for s in result.statuses if s.ref == ROUTE]
    parents = status.body["parents"]
    assert [p["parentRef"]["sectionName"] for p in parents] == ["a", "b"]
    for parent in parents:
        conditions = _by_type(parent["conditions"])
        assert conditions["Accepted"]["status"] == "True"
        partly = conditions["PartiallyInvalid"]
        assert (partly["status"], partly["reason"]) == ("True", "UnsupportedValue")
        assert "169.254.169.254" in partly["message"]
        assert partly["observedGeneration"] == conditions["Accepted"]["observedGeneration"]
    assert status.state is State.INVALID
    assert "169.254.169.254" in status.summary


def _route_status(foreign: tuple[dict[str, Any], ...] = ()) -> ObjectStatus:
    def parent(section: str) -> Section:
        accepted = Condition("Accepted", ConditionStatus.TRUE, "Accepted", "Route is accepted", 3)
        ref = {"group": GATEWAY.group, "kind": "Gateway", "name": "gw", "sectionName": section}
        return Section(
            "parents",
            f"gw/{section}",
            (accepted,),
            {"parentRef": ref, "controllerName": "turnout.dev/gateway-controller"},
        )

    return ObjectStatus(
        ref=ROUTE,
        api_version="gateway.networking.k8s.io/v1",
        state=State.VALID,
        summary="Route is accepted",
        shape=ROUTE_SHAPE,
        generation=3,
        sections=(parent("a"), parent("b")),
        fields={"parents": foreign} if foreign else {},
    )


def test_an_envoy_limit_finding_makes_every_parent_of_a_route_partially_invalid() -> None:
    other = {"parentRef": {"name": "x"}, "controllerName": "other.io/ctl", "conditions": []}
    findings = (
        Finding(ROUTE, "spec.rules[1]", "EnvoyLimit", "header value is too long"),
        Finding(ROUTE, "spec.rules[2]", "EnvoyLimit", "regex is too big"),
    )
    folded = _route_status((other,)).with_findings(findings)
    first, *ours = folded.body["parents"]
    assert first == other  # another controller's entry is not turnout's to change
    assert len(ours) == 2
    for parent in ours:
        partly = _by_type(parent["conditions"])["PartiallyInvalid"]
        assert partly == {
            "type": "PartiallyInvalid",
            "status": "True",
            "reason": "UnsupportedValue",
            "message": "spec.rules[1]: header value is too long; spec.rules[2]: regex is too big",
            "observedGeneration": 3,
        }
    assert folded.state is State.INVALID
    assert folded.summary == "spec.rules[1]: header value is too long"
    assert folded.findings == findings


def test_a_warning_finding_changes_no_route_condition() -> None:
    warning = Finding(ROUTE, "spec", "EnvoyLimit", "close to a limit", Severity.WARNING)
    status = _route_status()
    folded = status.with_findings((warning,))
    assert folded.body == status.body
    assert folded.state is State.VALID


def test_a_gateway_finding_keeps_accepted_and_says_what_was_dropped() -> None:
    accepted = Condition("Accepted", ConditionStatus.TRUE, "Accepted", "Gateway is accepted")
    gateway = ObjectStatus(
        ref=GATEWAY,
        api_version="gateway.networking.k8s.io/v1",
        state=State.VALID,
        summary="Gateway is accepted",
        shape=GATEWAY_SHAPE,
        conditions=(accepted,),
        fields={"addresses": []},
    )
    finding = Finding(GATEWAY, "spec.listeners[0]", "EnvoyLimit", "hostname is too long")
    folded = gateway.with_findings((finding,))
    rendered = _by_type(folded.body["conditions"])["Accepted"]
    assert (rendered["status"], rendered["reason"]) == ("True", "Accepted")
    assert rendered["message"] == "Gateway is accepted; spec.listeners[0]: hostname is too long"
    assert folded.body["listeners"] == []
    assert folded.state is State.INVALID

"""Gateway API status conditions: the records the route compilers report problems with, the
condition type every status of the API carries (`turnout.status.model.Condition`), and the
`StatusShape`s that render and fold the statuses of each kind family.

A rendered condition is `{type, status, reason, message, observedGeneration}`.
`lastTransitionTime` is left out: a compile is a pure function of the objects and cannot know
when a condition last changed; a status writer that keeps history (a Kubernetes status updater)
sets it (`turnout.status.model.stamp_transitions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.status.model import (
    Condition,
    ConditionStatus,
    Finding,
    ObjectStatus,
    Severity,
    State,
    render_plain,
)

__all__ = ["Condition", "ConditionStatus"]

# Condition types and reasons, spelled as in apis/v1 (gateway_types.go, shared_types.go).
ACCEPTED = "Accepted"
PROGRAMMED = "Programmed"
RESOLVED_REFS = "ResolvedRefs"
CONFLICTED = "Conflicted"
OVERLAPPING_TLS_CONFIG = "OverlappingTLSConfig"
SUPPORTED_VERSION = "SupportedVersion"
PARTIALLY_INVALID = "PartiallyInvalid"
PENDING = "Pending"
# Route (and policy) reasons reported by more than one module.
UNSUPPORTED_VALUE = "UnsupportedValue"
INVALID_KIND = "InvalidKind"
BACKEND_NOT_FOUND = "BackendNotFound"

TRUE = ConditionStatus.TRUE
FALSE = ConditionStatus.FALSE


@dataclass(frozen=True, slots=True)
class RouteProblem:
    """Something wrong with a route, as the route's status reports it for every parent."""

    condition: str  # "Accepted" | "ResolvedRefs"
    reason: str  # the spec's reason, e.g. "BackendNotFound", "RefNotPermitted", "UnsupportedValue"
    message: str  # names the field: "spec.rules[0].backendRefs[1]: Service app/foo not found"


def observed(conditions: Iterable[Condition], generation: int | None) -> tuple[Condition, ...]:
    """The conditions with `observed_generation` set to the object's `generation`."""
    return tuple(dataclasses.replace(c, observed_generation=generation) for c in conditions)


def _errors_text(findings: Sequence[Finding]) -> str:
    return "; ".join(f.text for f in findings if f.severity is Severity.ERROR)


def _with_message(conditions: Iterable[Condition], type_: str, extra: str) -> tuple[Condition, ...]:
    return tuple(
        dataclasses.replace(c, message=f"{c.message}; {extra}") if c.type == type_ else c
        for c in conditions
    )


def _invalid(status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
    first = next(f for f in findings if f.severity is Severity.ERROR)
    return dataclasses.replace(status, state=State.INVALID, summary=first.text)


@dataclass(frozen=True, slots=True)
class GatewayShape:
    """GatewayClass, Gateway and BackendTLSPolicy statuses: `fields`, `conditions`, then each
    section group (`groups` are always written, as empty lists when there is no section); a
    GatewayClass writes `conditions` first (`conditions_first`), a policy has no `conditions`
    of its own (`conditions_key` False).

    `fold`: the spec has no condition for "part of what this object configures was dropped", so
    the error findings change no condition's status (a Gateway stays Accepted: its listeners are
    served). They are appended to the message of the object's `Accepted` condition (for a policy:
    of each ancestor's), and make the object INVALID with the first finding as its summary.
    Warnings are only recorded (`ObjectStatus.findings`)."""

    groups: tuple[str, ...] = ()
    conditions_key: bool = True
    conditions_first: bool = False

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        out = render_plain(status, conditions_key=self.conditions_key)
        for group in self.groups:
            out.setdefault(group, [])
        if self.conditions_first:
            out = {"conditions": out.pop("conditions"), **out}
        return out

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        text = _errors_text(findings)
        if not text:
            return status
        sections = status.sections
        if not self.conditions_key:
            sections = tuple(
                dataclasses.replace(s, conditions=_with_message(s.conditions, ACCEPTED, text))
                for s in sections
            )
        folded = dataclasses.replace(
            status,
            conditions=_with_message(status.conditions, ACCEPTED, text),
            sections=sections,
        )
        return _invalid(folded, findings)


@dataclass(frozen=True, slots=True)
class RouteShape:
    """HTTPRoute, GRPCRoute, TCPRoute and TLSRoute statuses: `parents`, the entries of other
    controllers (kept as the object carries them, in `fields["parents"]`) then turnout's (the
    `parents` sections).

    `fold`: error findings (a rule the Envoy-limits net dropped, a refused endpoint) add to each
    of turnout's parents the spec's condition for a route part of which is not served:
    `PartiallyInvalid` True, reason `UnsupportedValue`, listing the findings; the route becomes
    INVALID with the first finding as its summary. Warnings are only recorded."""

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        foreign = list(status.fields.get("parents", ()))
        return {"parents": [*foreign, *(s.to_json() for s in status.sections)]}

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        text = _errors_text(findings)
        if not text:
            return status
        partly = Condition(
            PARTIALLY_INVALID, TRUE, UNSUPPORTED_VALUE, text, observed_generation=status.generation
        )
        sections = tuple(
            dataclasses.replace(
                s, conditions=(*(c for c in s.conditions if c.type != PARTIALLY_INVALID), partly)
            )
            for s in status.sections
        )
        return _invalid(dataclasses.replace(status, sections=sections), findings)


CLASS_SHAPE = GatewayShape(conditions_first=True)
GATEWAY_SHAPE = GatewayShape(groups=("listeners",))
POLICY_SHAPE = GatewayShape(groups=("ancestors",), conditions_key=False)
ROUTE_SHAPE = RouteShape()

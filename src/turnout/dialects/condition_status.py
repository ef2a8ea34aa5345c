"""The status of a dialect whose API writes no conditions of its own (Ingress, RouteGroup).

turnout adds two conditions in the shape of metav1.Condition (`type`, `status`, `reason`,
`message`, `observedGeneration`; no `lastTransitionTime`, so the same input always gives the same
status) next to the API's `loadBalancer`:

- `Accepted`: False when the object, or part of it, is not served as written; the reason is the
  first problem's, the message lists every problem (warnings appended, prefixed "warning: ").
- `ResolvedRefs`: False when a Service or Secret cannot be used.

Each dialect subclasses `ConditionStatus` to say under which key its `loadBalancer` lists the
listener address and what an accepted object's message is.

Each condition keeps the problems its message lists as `errors`/`warnings` details, so that a
problem found after the dialects ran (`ConditionShape.fold`) is written exactly as one the
dialect found; the rendered condition (a metav1.Condition) shows only the joined message.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from turnout.objects import KubeObject
from turnout.status.model import Condition, Detail, Finding, ObjectStatus, Severity, State
from turnout.status.model import ConditionStatus as Truth

ACCEPTED = "Accepted"
RESOLVED_REFS = "ResolvedRefs"
REFS_RESOLVED_MESSAGE = "every Service and Secret reference is resolved"
MAX_MESSAGE_LENGTH = 32768  # metav1.Condition's limit


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an object: `type` is the condition it falsifies."""

    type: str  # ACCEPTED | RESOLVED_REFS
    reason: str
    message: str
    warning: bool = False


def load_balancer_entry(address: str) -> dict[str, str]:
    """A `status.loadBalancer` entry for the listener address."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return {"hostname": address}
    return {"ip": address}


def make_condition(
    type_: str,
    errors: Sequence[Detail],
    warnings: Sequence[Detail],
    ok_message: str,
    generation: int,
) -> Condition:
    """False with the first error's reason when there are errors, else True; the message lists
    every error (or `ok_message`), then every warning prefixed "warning: "."""
    if errors:
        status, reason, messages = Truth.FALSE, errors[0].reason, [d.message for d in errors]
    else:
        status, reason, messages = Truth.TRUE, type_, [ok_message]
    message = "; ".join([*messages, *(f"warning: {d.message}" for d in warnings)])
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message[:MAX_MESSAGE_LENGTH],
        observed_generation=generation,
        errors=tuple(errors),
        warnings=tuple(warnings),
    )


def _condition_json(condition: Condition) -> dict[str, Any]:
    # metav1.Condition has no details: the message already lists them.
    out = condition.to_json()
    out.pop("errors", None)
    out.pop("warnings", None)
    return out


def _merged(details: Iterable[Detail], more: Iterable[Detail]) -> tuple[Detail, ...]:
    return tuple(dict.fromkeys((*details, *more)))


@dataclass(frozen=True, slots=True)
class ConditionShape:
    """The status of an API without conditions of its own: its `fields` (`loadBalancer`), then
    turnout's `conditions`. `accepted_message` is an accepted object's Accepted message."""

    accepted_message: str

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        return {**status.fields, "conditions": [_condition_json(c) for c in status.conditions]}

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        """Findings join the Accepted condition as problems the dialect found would: errors
        after its errors, warnings after its warnings."""
        new_errors = [
            Detail(ACCEPTED, f.reason, f.text) for f in findings if f.severity is Severity.ERROR
        ]
        new_warnings = [
            Detail(ACCEPTED, f.reason, f.text) for f in findings if f.severity is Severity.WARNING
        ]
        accepted = status.condition(ACCEPTED)
        if accepted is None or not (new_errors or new_warnings):
            return status
        folded = make_condition(
            ACCEPTED,
            _merged(accepted.errors, new_errors),
            _merged(accepted.warnings, new_warnings),
            self.accepted_message,
            status.generation if status.generation is not None else 0,
        )
        conditions = tuple(folded if c.type == ACCEPTED else c for c in status.conditions)
        if not new_errors:
            return dataclasses.replace(status, conditions=conditions)
        summary = status.summary if status.state is State.INVALID else new_errors[0].message
        return dataclasses.replace(
            status, conditions=conditions, state=State.INVALID, summary=summary
        )


def _details(problems: Iterable[Problem]) -> list[Detail]:
    return [Detail(p.type, p.reason, p.message) for p in problems]


@dataclass
class ConditionStatus:
    """The problems of one object, collected while compiling, and the status they make."""

    LOAD_BALANCER_KEY: ClassVar[str]  # `status.loadBalancer.<key>`
    ACCEPTED_MESSAGE: ClassVar[str]

    obj: KubeObject
    # A dict keeps the first-seen order and makes a repeated problem cheap to skip.
    seen: dict[Problem, None] = field(default_factory=dict)
    served: bool = False  # at least one route of the object is in the graph

    @classmethod
    def with_problems(cls, obj: KubeObject, problems: Iterable[Problem]) -> Self:
        """The status of `obj` starting with what reading it found."""
        status = cls(obj)
        for problem in problems:
            status.add(problem)
        return status

    @property
    def problems(self) -> list[Problem]:
        return list(self.seen)

    def add(self, problem: Problem) -> None:
        self.seen.setdefault(problem)

    def error(self, type_: str, reason: str, message: str) -> None:
        self.add(Problem(type_, reason, message))

    def warning(self, reason: str, message: str) -> None:
        self.add(Problem(ACCEPTED, reason, message, warning=True))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.seen if not p.warning]

    def build(self, addresses: Sequence[str]) -> ObjectStatus:
        errors = self.errors
        warnings = _details(p for p in self.seen if p.warning)
        generation = self.obj.generation
        conditions = (
            make_condition(
                ACCEPTED,
                _details(p for p in errors if p.type == ACCEPTED),
                warnings,
                self.ACCEPTED_MESSAGE,
                generation,
            ),
            make_condition(
                RESOLVED_REFS,
                _details(p for p in errors if p.type == RESOLVED_REFS),
                [],
                REFS_RESOLVED_MESSAGE,
                generation,
            ),
        )
        entries = [load_balancer_entry(address) for address in addresses]
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=State.INVALID if errors else State.VALID,
            summary=errors[0].message if errors else self.ACCEPTED_MESSAGE,
            shape=ConditionShape(self.ACCEPTED_MESSAGE),
            generation=generation,
            conditions=conditions,
            fields={"loadBalancer": {self.LOAD_BALANCER_KEY: entries} if self.served else {}},
        )

"""The status of a dialect whose API writes no conditions of its own (Ingress, RouteGroup).

turnout adds two conditions in the shape of metav1.Condition (`type`, `status`, `reason`,
`message`, `observedGeneration`; no `lastTransitionTime`, so the same input always gives the same
status) next to the API's `loadBalancer`:

- `Accepted`: False when the object, or part of it, is not served as written; the reason is the
  first problem's, the message lists every problem (warnings appended, prefixed "warning: ").
- `ResolvedRefs`: False when a Service or Secret cannot be used.

Each dialect subclasses `ConditionStatus` to say under which key its `loadBalancer` lists the
listener address and what an accepted object's message is.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus, PrebuiltShape, State

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


@dataclass
class ConditionStatus:
    """The problems of one object, collected while compiling, and the status they make."""

    LOAD_BALANCER_KEY: ClassVar[str]  # `status.loadBalancer.<key>`
    ACCEPTED_MESSAGE: ClassVar[str]

    obj: KubeObject
    problems: list[Problem] = field(default_factory=list)
    served: bool = False  # at least one route of the object is in the graph

    @classmethod
    def with_problems(cls, obj: KubeObject, problems: Iterable[Problem]) -> Self:
        """The status of `obj` starting with what reading it found."""
        status = cls(obj)
        for problem in problems:
            status.add(problem)
        return status

    def add(self, problem: Problem) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def error(self, type_: str, reason: str, message: str) -> None:
        self.add(Problem(type_, reason, message))

    def warning(self, reason: str, message: str) -> None:
        self.add(Problem(ACCEPTED, reason, message, warning=True))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    def build(self, address: str) -> ObjectStatus:
        errors = self.errors
        warnings = [p for p in self.problems if p.warning]
        conditions = [
            self._condition(
                ACCEPTED, [p for p in errors if p.type == ACCEPTED], self.ACCEPTED_MESSAGE, warnings
            ),
            self._condition(
                RESOLVED_REFS,
                [p for p in errors if p.type == RESOLVED_REFS],
                REFS_RESOLVED_MESSAGE,
                [],
            ),
        ]
        entries = [load_balancer_entry(address)]
        body: dict[str, Any] = {
            "loadBalancer": {self.LOAD_BALANCER_KEY: entries} if self.served else {},
            "conditions": conditions,
        }
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=State.INVALID if errors else State.VALID,
            summary=errors[0].message if errors else self.ACCEPTED_MESSAGE,
            shape=PrebuiltShape(body),
        )

    def _condition(
        self, type_: str, errors: list[Problem], ok_message: str, warnings: list[Problem]
    ) -> dict[str, Any]:
        if errors:
            status, reason, messages = "False", errors[0].reason, [p.message for p in errors]
        else:
            status, reason, messages = "True", type_, [ok_message]
        message = "; ".join([*messages, *(f"warning: {p.message}" for p in warnings)])
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:MAX_MESSAGE_LENGTH],
            "observedGeneration": self.obj.generation,
        }

"""HTTPProxy status in Contour's shape: one `Valid` DetailedCondition with errors and warnings, and
`currentStatus`/`description` derived from it (`internal/status/proxystatus.go`).

The accessor collects sub-conditions while the processor walks the include graph. A proxy can be
visited more than once (several roots include it); its errors are the union of all visits, each
reported once. No wall-clock time goes into the body: `lastTransitionTime` is omitted so that the
same input always gives the same status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.status_names import ORPHANED
from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus, PrebuiltShape, State

VALID_CONDITION = "Valid"
VALID_MESSAGE = "Valid HTTPProxy"
ERROR_PRESENT = "ErrorPresent"
ERROR_MESSAGE = "At least one error present, see Errors for details"
ORPHANED_MESSAGE = "this HTTPProxy is not part of a delegation chain from a root HTTPProxy"

# The CRD limits each message to this many characters (Contour truncates the same way).
LONG_MESSAGE_LENGTH = 32760


@dataclass
class ProxyStatusAccessor:
    obj: KubeObject
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def add(self, problem: Problem) -> None:
        target = self.warnings if problem.warning else self.errors
        if problem not in target:
            target.append(problem)

    def add_error(self, type_: str, reason: str, message: str) -> None:
        self.add(Problem(type_, reason, message[:LONG_MESSAGE_LENGTH]))

    def add_warning(self, type_: str, reason: str, message: str) -> None:
        self.add(Problem(type_, reason, message[:LONG_MESSAGE_LENGTH], warning=True))

    @property
    def has_errors(self) -> bool:
        return bool(self.errors)

    def build(self) -> ObjectStatus:
        condition: dict[str, Any] = {
            "type": VALID_CONDITION,
            "status": "False" if self.errors else "True",
            "reason": ERROR_PRESENT if self.errors else VALID_CONDITION,
            "message": ERROR_MESSAGE if self.errors else VALID_MESSAGE,
            "observedGeneration": self.obj.generation,
        }
        if self.errors:
            condition["errors"] = [_sub(p) for p in self.errors]
        if self.warnings:
            condition["warnings"] = [_sub(p) for p in self.warnings]

        orphan = next((p for p in self.errors if p.type == ORPHANED), None)
        if not self.errors:
            state, description, summary = State.VALID, VALID_MESSAGE, VALID_MESSAGE
        elif orphan is not None:
            state, description, summary = State.ORPHANED, orphan.message, orphan.message
        else:
            # The description is Contour's generic one; people want the first error.
            state, description, summary = State.INVALID, ERROR_MESSAGE, self.errors[0].message
        body = {"currentStatus": state.value, "description": description, "conditions": [condition]}
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=state,
            summary=summary,
            shape=PrebuiltShape(body),
        )


def _sub(p: Problem) -> dict[str, str]:
    return {"type": p.type, "status": "True", "reason": p.reason, "message": p.message}

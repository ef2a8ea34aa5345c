"""Route status in seed 002's shape: `currentStatus` and `errors`, nothing else.

- `Valid`: everything the Route says is served.
- `Invalid`: the Route itself is wrong (a field of the wrong type, an unknown field, a value out of
  range, weights that are not percentages...). It serves nothing; fixing it means editing it.
- `Error`: the Route is well formed, but something outside it keeps it from being served as
  written: a Service or port that does not exist (that route answers 503 or loses the upstream),
  a host owned by an older object, a namespace where hosts may not be defined.

`errors` is a list of strings, each starting with the field it is about.

`lastProcessTime` ("time the object was processed ... and made available") is not part of the
compiled status. A compile is a pure function of its inputs and carries no clock; the moment a
Route is "made available" is when Envoy acknowledges the configuration built from it, which only a
status sink knows. The sink that writes Kubernetes status sets it when it writes; `/status` and
`turnout check` show the compiled status and leave it out.

The typed status keeps the errors as sub-conditions of a `Valid` condition (the record every
Contour kind shares). `ROUTE_SHAPE` renders them as the list of strings, and folds in problems
found after the dialects ran (the Envoy-limits net, refused endpoints) as more `errors`: they make
a `Valid` Route `Error`, because the Route is well formed and the rest of it is still served.
seed 002's status has no place for a warning: a warning finding stays in the typed status (and in
`turnout check`'s problems) without changing the body.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.objects import KubeObject
from turnout.status.model import (
    Condition,
    ConditionStatus,
    Detail,
    Finding,
    ObjectStatus,
    Severity,
    State,
)

VALID = "Valid"
INVALID = "Invalid"
ERROR = "Error"
VALID_SUMMARY = "valid Route"
# The sub-condition type of an error the dialect found (a finding's type is its reason).
ROUTE_ERROR = "RouteError"

# The CRD limits each message to this many characters (as Contour does for its messages).
MAX_MESSAGE_LENGTH = 32760


@dataclass
class RouteStatus:
    obj: KubeObject
    invalid: bool = False
    # An ordered set (first-seen order): each message once, without a scan per add.
    errors: dict[str, None] = field(default_factory=dict)

    def add(self, message: str) -> None:
        self.errors.setdefault(message[:MAX_MESSAGE_LENGTH], None)

    def build(self) -> ObjectStatus:
        if self.invalid:
            current = INVALID
        elif self.errors:
            current = ERROR
        else:
            current = VALID
        errors = tuple(Detail(ROUTE_ERROR, current, m) for m in self.errors)
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=State.VALID if current == VALID else State.INVALID,
            summary=errors[0].message if errors else VALID_SUMMARY,
            shape=ROUTE_SHAPE,
            generation=self.obj.generation,
            conditions=(_valid_condition(current, errors, (), self.obj.generation),),
            fields={"currentStatus": current},
        )


def _valid_condition(
    current: str, errors: tuple[Detail, ...], warnings: tuple[Detail, ...], generation: int | None
) -> Condition:
    return Condition(
        type=VALID,
        status=ConditionStatus.of(current == VALID),
        reason=current,
        message=errors[0].message if errors else VALID_SUMMARY,
        observed_generation=generation,
        errors=errors,
        warnings=warnings,
    )


@dataclass(frozen=True, slots=True)
class RouteShape:
    """seed 002's `{currentStatus, errors}`."""

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        valid = status.condition(VALID)
        errors = [d.message for d in valid.errors] if valid is not None else []
        return {"currentStatus": status.fields.get("currentStatus", VALID), "errors": errors}

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        valid = status.condition(VALID)
        current = str(status.fields.get("currentStatus", VALID))
        errors = _union(
            valid.errors if valid is not None else (),
            (_finding_detail(f) for f in findings if f.severity is Severity.ERROR),
        )
        warnings = _union(
            valid.warnings if valid is not None else (),
            (_finding_detail(f) for f in findings if f.severity is Severity.WARNING),
        )
        if errors and current == VALID:
            current = ERROR
        generation = valid.observed_generation if valid is not None else status.generation
        folded = _valid_condition(current, errors, warnings, generation)
        others = tuple(c for c in status.conditions if c.type != VALID)
        return dataclasses.replace(
            status,
            state=State.VALID if current == VALID else State.INVALID,
            summary=folded.message,
            fields={**status.fields, "currentStatus": current},
            conditions=(folded, *others),
        )


def _finding_detail(f: Finding) -> Detail:
    return Detail(f.reason, f.reason, f.text[:MAX_MESSAGE_LENGTH])


def _union(before: tuple[Detail, ...], added: Iterable[Detail]) -> tuple[Detail, ...]:
    """`before`, then what `added` has that it lacks: a message once, as `RouteStatus.add`."""
    seen = {d.message for d in before}
    out = list(before)
    for d in added:
        if d.message not in seen:
            seen.add(d.message)
            out.append(d)
    return tuple(out)


ROUTE_SHAPE = RouteShape()

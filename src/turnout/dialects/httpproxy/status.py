"""HTTPProxy status in Contour's shape: one `Valid` DetailedCondition with errors and warnings, and
`currentStatus`/`description` derived from it (`internal/status/proxystatus.go`).

The accessor collects sub-conditions while the processor walks the include graph. A proxy can be
visited more than once (several roots include it); its errors are the union of all visits, each
reported once. No wall-clock time goes into the body: `lastTransitionTime` is omitted so that the
same input always gives the same status.

`HTTPPROXY_SHAPE` renders the typed status and folds in problems found after the dialects ran
(the Envoy-limits net, refused endpoints) as error sub-conditions under `Valid`, where a Contour
user reads every other problem of the object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.status_names import ORPHANED
from turnout.objects import KubeObject
from turnout.status.model import (
    Condition,
    ConditionStatus,
    Detail,
    Finding,
    ObjectStatus,
    Severity,
    State,
    render_plain,
)

VALID_CONDITION = "Valid"
VALID_MESSAGE = "Valid HTTPProxy"
VALID_EXTENSION_MESSAGE = "Valid ExtensionService"
ERROR_PRESENT = "ErrorPresent"
ERROR_MESSAGE = "At least one error present, see Errors for details"
ORPHANED_MESSAGE = "this HTTPProxy is not part of a delegation chain from a root HTTPProxy"

# The CRD limits each message to this many characters (Contour truncates the same way).
LONG_MESSAGE_LENGTH = 32760


@dataclass
class ProxyStatusAccessor:
    obj: KubeObject
    # Ordered sets (dicts keep first-seen order): a proxy visited from many roots repeats its
    # problems, and a list membership test per add made that quadratic.
    errors: dict[Problem, None] = field(default_factory=dict)
    warnings: dict[Problem, None] = field(default_factory=dict)
    # Every `add`, a repeated problem too: a memo of per-route work keeps what reported nothing.
    adds: int = 0

    def add(self, problem: Problem) -> None:
        self.adds += 1
        target = self.warnings if problem.warning else self.errors
        target.setdefault(problem, None)

    def add_error(self, type_: str, reason: str, message: str) -> None:
        self.add(Problem(type_, reason, message[:LONG_MESSAGE_LENGTH]))

    def add_warning(self, type_: str, reason: str, message: str) -> None:
        self.add(Problem(type_, reason, message[:LONG_MESSAGE_LENGTH], warning=True))

    @property
    def has_errors(self) -> bool:
        return bool(self.errors)

    def build(self) -> ObjectStatus:
        errors = tuple(_detail(p) for p in self.errors)
        warnings = tuple(_detail(p) for p in self.warnings)
        orphan = next((p for p in self.errors if p.type == ORPHANED), None)
        if orphan is not None:
            state, description, summary = State.ORPHANED, orphan.message, orphan.message
        else:
            state, description, summary = _outcome(errors)
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=state,
            summary=summary,
            shape=HTTPPROXY_SHAPE,
            generation=self.obj.generation,
            conditions=(_valid_condition(errors, warnings, self.obj.generation),),
            fields={"currentStatus": state.value, "description": description},
        )

    def build_extension(self) -> ObjectStatus:
        """An ExtensionService's status: Contour's `Valid` condition alone."""
        errors = tuple(_detail(p) for p in self.errors)
        warnings = tuple(_detail(p) for p in self.warnings)
        valid = _valid_condition(errors, warnings, self.obj.generation)
        if not errors:
            valid = dataclasses.replace(valid, message=VALID_EXTENSION_MESSAGE)
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=State.INVALID if errors else State.VALID,
            summary=errors[0].message if errors else VALID_EXTENSION_MESSAGE,
            shape=EXTENSION_SHAPE,
            generation=self.obj.generation,
            conditions=(valid,),
        )


def _detail(p: Problem) -> Detail:
    return Detail(p.type, p.reason, p.message)


def _outcome(errors: Sequence[Detail]) -> tuple[State, str, str]:
    """State, description and summary of a proxy that is not orphaned."""
    if not errors:
        return State.VALID, VALID_MESSAGE, VALID_MESSAGE
    # The description is Contour's generic one; people want the first error.
    return State.INVALID, ERROR_MESSAGE, errors[0].message


def _valid_condition(
    errors: tuple[Detail, ...], warnings: tuple[Detail, ...], generation: int | None
) -> Condition:
    return Condition(
        type=VALID_CONDITION,
        status=ConditionStatus.of(not errors),
        reason=ERROR_PRESENT if errors else VALID_CONDITION,
        message=ERROR_MESSAGE if errors else VALID_MESSAGE,
        observed_generation=generation,
        errors=errors,
        warnings=warnings,
    )


def _union(before: tuple[Detail, ...], added: Iterable[Detail]) -> tuple[Detail, ...]:
    return tuple(dict.fromkeys((*before, *added)))


@dataclass(frozen=True, slots=True)
class HTTPProxyShape:
    """Contour's `{currentStatus, description, conditions: [Valid]}`."""

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        return render_plain(status)

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        """Each finding a sub-condition of `Valid` (type and reason the finding's reason); an
        error makes the proxy invalid unless it is orphaned, which says more."""
        valid = status.condition(VALID_CONDITION) or _valid_condition((), (), status.generation)
        errors = _union(
            valid.errors, (_finding_detail(f) for f in findings if f.severity is Severity.ERROR)
        )
        warnings = _union(
            valid.warnings, (_finding_detail(f) for f in findings if f.severity is Severity.WARNING)
        )
        folded = _valid_condition(errors, warnings, valid.observed_generation)
        conditions = tuple(c for c in status.conditions if c.type != VALID_CONDITION)
        out = dataclasses.replace(status, conditions=(folded, *conditions))
        if status.state is State.ORPHANED:
            return out
        state, description, summary = _outcome(errors)
        fields = {**status.fields, "currentStatus": state.value, "description": description}
        return dataclasses.replace(out, state=state, summary=summary, fields=fields)


def _finding_detail(f: Finding) -> Detail:
    return Detail(f.reason, f.reason, f.text[:LONG_MESSAGE_LENGTH])


HTTPPROXY_SHAPE = HTTPProxyShape()


@dataclass(frozen=True, slots=True)
class ExtensionServiceShape:
    """Contour's ExtensionService status: `{conditions: [Valid]}`; findings are errors under it."""

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        return render_plain(status)

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        folded = HTTPPROXY_SHAPE.fold(status, findings)
        return dataclasses.replace(folded, fields=status.fields)


EXTENSION_SHAPE = ExtensionServiceShape()

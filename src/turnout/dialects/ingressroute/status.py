"""IngressRoute status in Contour's shape, with seed 000's delegation statuses.

Contour v1.0 wrote `{currentStatus, description}` only: `valid` / "valid IngressRoute",
`invalid` / the first error, `orphaned` / "this IngressRoute is not part of a delegation chain
from a root IngressRoute". turnout writes the same two fields, and adds:

- `delegationStatuses` (seed 000, on objects without a virtualhost): one `connected` entry per
  parent whose delegation reaches the object, or a single `orphaned` entry;
- `errors` and `warnings`: every finding as `{reason, message}` (Contour stopped at the first
  error; seed 000 rejects an object for any of them, so all are worth showing at once).

No wall-clock time goes into the body, so the same input always gives the same status; seed 000's
`connectedAt` is therefore left out (a status writer that keeps history can add it).

The typed status keeps the errors and warnings as sub-conditions of a `Valid` condition (the
record every Contour kind shares); `INGRESSROUTE_SHAPE` renders them as the two lists, and folds
problems found after the dialects ran (the Envoy-limits net, refused endpoints) into them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.ingressroute.spec import Problem
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

VALID_CONDITION = "Valid"
VALID_MESSAGE = "valid IngressRoute"
ORPHANED_MESSAGE = "this IngressRoute is not part of a delegation chain from a root IngressRoute"

# The order errors are listed in, so that `description` shows the most fundamental one first, as
# Contour did by stopping at it: a root in the wrong namespace or without its hostname is about
# that before anything in its spec.
NAMESPACE_ORDER = 0
OWNERSHIP_ORDER = 1
SPEC_ORDER = 2
TLS_ORDER = 3
SERVICE_ORDER = 4
DELEGATION_ORDER = 5

# The CRD limits a string in status to this many characters.
MAX_MESSAGE_LENGTH = 32760


@dataclass
class StatusAccessor:
    obj: KubeObject
    is_root: bool
    # Ordered sets (first-seen order): each problem once, without a scan per add. An error maps
    # to its order.
    errors: dict[Problem, int] = field(default_factory=dict)
    warnings: dict[Problem, None] = field(default_factory=dict)
    # (parent namespace, parent name, delegated prefix) of each delegation that reached it.
    parents: set[tuple[str, str, str]] = field(default_factory=set)
    # An IngressRoute that delegates here but is not itself served (orphans only).
    last_parent: tuple[str, str] | None = None

    def add(self, problem: Problem, order: int = SPEC_ORDER) -> None:
        problem = Problem(problem.reason, problem.message[:MAX_MESSAGE_LENGTH], problem.warning)
        if problem.warning:
            self.warnings.setdefault(problem, None)
        else:
            self.errors.setdefault(problem, order)

    def error(self, order: int, reason: str, message: str) -> None:
        self.add(Problem(reason, message), order)

    def warn(self, reason: str, message: str) -> None:
        self.add(Problem(reason, message, warning=True))

    def connect(self, namespace: str, name: str, prefix: str) -> None:
        self.parents.add((namespace, name, prefix))

    @property
    def reached(self) -> bool:
        return bool(self.parents)

    def build(self) -> ObjectStatus:
        # sorted is stable: within one order, first-seen order.
        errors = tuple(_detail(p) for p in sorted(self.errors, key=self.errors.__getitem__))
        warnings = tuple(_detail(p) for p in self.warnings)
        if errors:
            state, description = State.INVALID, errors[0].message
        elif not self.is_root and not self.reached:
            state, description = State.ORPHANED, ORPHANED_MESSAGE
        else:
            state, description = State.VALID, VALID_MESSAGE
        fields: dict[str, Any] = {"currentStatus": state.value, "description": description}
        if not self.is_root:
            fields["delegationStatuses"] = self._delegation_statuses()
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=state,
            summary=description,
            shape=INGRESSROUTE_SHAPE,
            generation=self.obj.generation,
            conditions=(_valid_condition(errors, warnings, description, self.obj.generation),),
            fields=fields,
        )

    def _delegation_statuses(self) -> list[dict[str, Any]]:
        if self.parents:
            return [
                {
                    "state": {
                        "connected": {
                            "parent": {"name": name, "namespace": namespace, "prefix": prefix}
                        }
                    }
                }
                for namespace, name, prefix in sorted(self.parents)
            ]
        orphaned: dict[str, Any] = {}
        if self.last_parent is not None:
            namespace, name = self.last_parent
            orphaned["lastParent"] = {"name": name, "namespace": namespace}
        return [{"state": {"orphaned": orphaned}}]


def _detail(p: Problem) -> Detail:
    return Detail(p.reason, p.reason, p.message)


def _valid_condition(
    errors: tuple[Detail, ...],
    warnings: tuple[Detail, ...],
    description: str,
    generation: int | None,
) -> Condition:
    return Condition(
        type=VALID_CONDITION,
        status=ConditionStatus.of(not errors),
        reason=errors[0].reason if errors else VALID_CONDITION,
        message=description,
        observed_generation=generation,
        errors=errors,
        warnings=warnings,
    )


def _entries(details: Iterable[Detail]) -> list[dict[str, str]]:
    return [{"reason": d.reason, "message": d.message} for d in details]


@dataclass(frozen=True, slots=True)
class IngressRouteShape:
    """`{currentStatus, description, delegationStatuses?, errors?, warnings?}` (no conditions:
    the `Valid` condition is rendered as the two lists)."""

    def render(self, status: ObjectStatus) -> dict[str, Any]:
        out: dict[str, Any] = dict(status.fields)
        valid = status.condition(VALID_CONDITION)
        if valid is not None and valid.errors:
            out["errors"] = _entries(valid.errors)
        if valid is not None and valid.warnings:
            out["warnings"] = _entries(valid.warnings)
        return out

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        """Each finding an entry of `errors` or `warnings` (after the dialect's own); an error
        makes the IngressRoute invalid, with the first error as its description."""
        valid = status.condition(VALID_CONDITION)
        before_errors = valid.errors if valid is not None else ()
        before_warnings = valid.warnings if valid is not None else ()
        errors = _union(before_errors, (_finding_detail(f) for f in findings if _is_error(f)))
        warnings = _union(
            before_warnings, (_finding_detail(f) for f in findings if not _is_error(f))
        )
        state, description = status.state, str(status.fields.get("description", status.summary))
        if errors:
            state, description = State.INVALID, errors[0].message
        fields = {**status.fields, "currentStatus": state.value, "description": description}
        generation = valid.observed_generation if valid is not None else status.generation
        folded = _valid_condition(errors, warnings, description, generation)
        others = tuple(c for c in status.conditions if c.type != VALID_CONDITION)
        return dataclasses.replace(
            status,
            state=state,
            summary=description,
            fields=fields,
            conditions=(folded, *others),
        )


def _is_error(f: Finding) -> bool:
    return f.severity is Severity.ERROR


def _finding_detail(f: Finding) -> Detail:
    return Detail(f.reason, f.reason, f.text[:MAX_MESSAGE_LENGTH])


def _union(before: tuple[Detail, ...], added: Iterable[Detail]) -> tuple[Detail, ...]:
    return tuple(dict.fromkeys((*before, *added)))


INGRESSROUTE_SHAPE = IngressRouteShape()

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.ingressroute.spec import Problem
from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus, PrebuiltShape, State

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
    errors: list[tuple[int, Problem]] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    # (parent namespace, parent name, delegated prefix) of each delegation that reached it.
    parents: set[tuple[str, str, str]] = field(default_factory=set)
    # An IngressRoute that delegates here but is not itself served (orphans only).
    last_parent: tuple[str, str] | None = None

    def add(self, problem: Problem, order: int = SPEC_ORDER) -> None:
        problem = Problem(problem.reason, problem.message[:MAX_MESSAGE_LENGTH], problem.warning)
        if problem.warning:
            if problem not in self.warnings:
                self.warnings.append(problem)
        elif all(p != problem for _, p in self.errors):
            self.errors.append((order, problem))

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
        errors = [p for _, p in sorted(self.errors, key=lambda e: e[0])]
        if errors:
            state, description = State.INVALID, errors[0].message
        elif not self.is_root and not self.reached:
            state, description = State.ORPHANED, ORPHANED_MESSAGE
        else:
            state, description = State.VALID, VALID_MESSAGE
        body: dict[str, Any] = {"currentStatus": state.value, "description": description}
        if not self.is_root:
            body["delegationStatuses"] = self._delegation_statuses()
        if errors:
            body["errors"] = [{"reason": p.reason, "message": p.message} for p in errors]
        if self.warnings:
            body["warnings"] = [{"reason": p.reason, "message": p.message} for p in self.warnings]
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=state,
            summary=description,
            shape=PrebuiltShape(body),
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

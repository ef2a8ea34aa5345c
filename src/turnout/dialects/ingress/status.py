"""Ingress status: `status.loadBalancer` as the Ingress API defines it, plus turnout's conditions.

The Ingress API has no conditions, so an Ingress can only say where it is served. turnout also
needs to say what is wrong, for `turnout check` and `/status`: the body carries `conditions` in
the shape of metav1.Condition (`type`, `status`, `reason`, `message`, `observedGeneration`; no
`lastTransitionTime`, so the same input always gives the same status). This is a turnout
extension: the API server drops unknown status fields, so in Kubernetes mode the same problems
are to be written as Events instead.

- `Accepted`: False when part of the Ingress is not served as written: a field the API server
  would refuse (then nothing is served), a path turnout cannot serve, a path another Ingress
  already serves, a host another object owns. The message lists every such problem.
- `ResolvedRefs`: False when a Service or TLS Secret cannot be used (paths answer 503; hosts are
  not served over HTTPS).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.ingress.spec import ACCEPTED, RESOLVED_REFS, Problem
from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus, State

VALID_MESSAGE = "Ingress is served"
REFS_RESOLVED_MESSAGE = "every Service and Secret reference is resolved"

# metav1.Condition limits messages to this many characters.
MAX_MESSAGE_LENGTH = 32768


def load_balancer_entry(address: str) -> dict[str, str]:
    """`status.loadBalancer.ingress[]` entry for the listener address."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return {"hostname": address}
    return {"ip": address}


@dataclass
class IngressStatusAccessor:
    obj: KubeObject
    problems: list[Problem] = field(default_factory=list)
    served: bool = False  # at least one route of this Ingress is in the graph

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
        accepted = [p for p in errors if p.type == ACCEPTED]
        refs = [p for p in errors if p.type == RESOLVED_REFS]
        conditions = [
            self._condition(ACCEPTED, accepted, ACCEPTED, VALID_MESSAGE, warnings),
            self._condition(RESOLVED_REFS, refs, RESOLVED_REFS, REFS_RESOLVED_MESSAGE, []),
        ]
        body: dict[str, Any] = {
            "loadBalancer": {"ingress": [load_balancer_entry(address)]} if self.served else {},
            "conditions": conditions,
        }
        if errors:
            state, summary = State.INVALID, errors[0].message
        else:
            state, summary = State.VALID, VALID_MESSAGE
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=state,
            summary=summary,
            body=body,
        )

    def _condition(
        self,
        type_: str,
        errors: list[Problem],
        ok_reason: str,
        ok_message: str,
        warnings: list[Problem],
    ) -> dict[str, Any]:
        if errors:
            status, reason, messages = "False", errors[0].reason, [p.message for p in errors]
        else:
            status, reason, messages = "True", ok_reason, [ok_message]
        message = "; ".join([*messages, *(f"warning: {p.message}" for p in warnings)])
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:MAX_MESSAGE_LENGTH],
            "observedGeneration": self.obj.generation,
        }

"""Gateway API status conditions: the records the route compilers report problems with, and the
condition objects every status of the API carries.

A condition is `{type, status, reason, message, observedGeneration}`. `lastTransitionTime` is
left out: a compile is a pure function of the objects and cannot know when a condition last
changed; a status writer that keeps history (a Kubernetes status updater) sets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Condition types and reasons, spelled as in apis/v1 (gateway_types.go, shared_types.go).
ACCEPTED = "Accepted"
PROGRAMMED = "Programmed"
RESOLVED_REFS = "ResolvedRefs"
CONFLICTED = "Conflicted"
OVERLAPPING_TLS_CONFIG = "OverlappingTLSConfig"
SUPPORTED_VERSION = "SupportedVersion"
PENDING = "Pending"
# Route (and policy) reasons reported by more than one module.
UNSUPPORTED_VALUE = "UnsupportedValue"
INVALID_KIND = "InvalidKind"
BACKEND_NOT_FOUND = "BackendNotFound"


@dataclass(frozen=True, slots=True)
class RouteProblem:
    """Something wrong with a route, as the route's status reports it for every parent."""

    condition: str  # "Accepted" | "ResolvedRefs"
    reason: str  # the spec's reason, e.g. "BackendNotFound", "RefNotPermitted", "UnsupportedValue"
    message: str  # names the field: "spec.rules[0].backendRefs[1]: Service app/foo not found"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str

    def to_json(self, generation: int) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": "Unknown" if self.status is None else ("True" if self.status else "False"),
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": generation,
        }


def conditions_json(conditions: list[Condition], generation: int) -> list[dict[str, Any]]:
    return [c.to_json(generation) for c in conditions]

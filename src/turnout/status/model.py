"""Object status as compiled: one record per object, in its API's own shape.

A dialect fills `body` in its API's status shape (Contour's `currentStatus`/`description`/
`conditions`, Gateway API's per-parent conditions, ...). `state` is the dialect-neutral summary used
by `turnout check` (exit code), metrics and logs.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.objects import ObjectRef


class State(enum.Enum):
    VALID = "valid"
    INVALID = "invalid"
    ORPHANED = "orphaned"

    @property
    def ok(self) -> bool:
        return self is State.VALID


@dataclass(frozen=True, slots=True)
class ObjectStatus:
    ref: ObjectRef
    api_version: str
    state: State
    summary: str  # one line for people: the description or first error
    body: Mapping[str, Any]  # the status subresource, in the API's own shape

    def to_json(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.ref.kind,
            "metadata": {"namespace": self.ref.namespace, "name": self.ref.name},
            "status": dict(self.body),
        }

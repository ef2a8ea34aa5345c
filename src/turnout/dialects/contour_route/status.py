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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus, PrebuiltShape, State

VALID = "Valid"
INVALID = "Invalid"
ERROR = "Error"
VALID_SUMMARY = "valid Route"

# The CRD limits each message to this many characters (as Contour does for its messages).
MAX_MESSAGE_LENGTH = 32760


@dataclass
class RouteStatus:
    obj: KubeObject
    invalid: bool = False
    errors: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        message = message[:MAX_MESSAGE_LENGTH]
        if message not in self.errors:
            self.errors.append(message)

    def build(self) -> ObjectStatus:
        if self.invalid:
            current = INVALID
        elif self.errors:
            current = ERROR
        else:
            current = VALID
        body: dict[str, Any] = {"currentStatus": current, "errors": list(self.errors)}
        return ObjectStatus(
            ref=self.obj.ref,
            api_version=self.obj.api_version,
            state=State.VALID if current == VALID else State.INVALID,
            summary=self.errors[0] if self.errors else VALID_SUMMARY,
            shape=PrebuiltShape(body),
        )

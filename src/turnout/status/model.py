"""Object status as typed records: one model for every dialect, rendered in each API's shape.

A dialect builds an `ObjectStatus` of records: the object's own `conditions`, its `sections`
(the parts of a status with conditions of their own: a Gateway listener, a route's parent, a
policy's ancestor) and the few API-specific `fields` (Contour's `currentStatus`, a
`loadBalancer`, a GatewayClass's `supportedFeatures`). Its `shape` is the dialect's
`StatusShape`, which knows two things about the API:

- `render`: the status subresource in the API's own JSON shape (`ObjectStatus.body`);
- `fold`: the status with problems found after the dialects ran (`Finding`s: the Envoy-limits
  net, refused endpoints, an Envoy rejection of a resource the object wrote) written where a user
  of that API reads them (an HTTPProxy error, a Gateway route's `PartiallyInvalid` condition).

`state` and `summary` are the dialect-neutral view used by `turnout check` (exit code), metrics
and logs. The compile is pure, so a compiled condition has no `last_transition_time`; a sink that
keeps history stamps it (`stamp_transitions`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from turnout.objects import KubeObject, ObjectRef, Origin


class State(enum.Enum):
    VALID = "valid"
    INVALID = "invalid"
    ORPHANED = "orphaned"

    @property
    def ok(self) -> bool:
        return self is State.VALID


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"

    @classmethod
    def of(cls, value: bool | None) -> ConditionStatus:
        if value is None:
            return cls.UNKNOWN
        return cls.TRUE if value else cls.FALSE


@dataclass(frozen=True, slots=True)
class Detail:
    """One error or warning under a condition (Contour's `SubCondition`: its status is always
    True, the condition it sits under says what it means)."""

    type: str
    reason: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "status": "True", "reason": self.reason, "message": self.message}


@dataclass(frozen=True, slots=True)
class Condition:
    """A metav1.Condition (Contour's DetailedCondition when it carries `errors`/`warnings`)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    observed_generation: int | None = None
    last_transition_time: str | None = None  # RFC 3339; set by a sink that keeps history
    errors: tuple[Detail, ...] = ()
    warnings: tuple[Detail, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "status": str(self.status),
            "reason": self.reason,
            "message": self.message,
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        if self.last_transition_time is not None:
            out["lastTransitionTime"] = self.last_transition_time
        if self.errors:
            out["errors"] = [d.to_json() for d in self.errors]
        if self.warnings:
            out["warnings"] = [d.to_json() for d in self.warnings]
        return out


@dataclass(frozen=True, slots=True)
class Section:
    """A part of a status with conditions of its own. `group` is the list it is rendered in
    (`listeners`, `parents`, `ancestors`), `key` its identity within the object (stable across
    compiles: lastTransitionTime is carried over by it), `fields` its other fields in the API's
    JSON shape (`name`, `attachedRoutes`, `parentRef`, `controllerName`, ...)."""

    group: str
    key: str
    conditions: tuple[Condition, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.fields, "conditions": [c.to_json() for c in self.conditions]}


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem found after the dialects ran, on the object that wrote the offending piece.
    `field` names the piece (`spec.routes[2]`, `spec.rules[0].backendRefs[1]`); `reason` is a
    CamelCase word (`EnvoyLimit`, `EndpointRefused`, `RejectedByEnvoy`)."""

    ref: ObjectRef
    field: str
    reason: str
    message: str
    severity: Severity = Severity.ERROR

    @property
    def text(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class StatusShape(Protocol):
    """How one API writes its status (implemented by each dialect)."""

    def render(self, status: ObjectStatus) -> dict[str, Any]: ...

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus: ...


@dataclass(frozen=True, slots=True)
class ObjectStatus:
    ref: ObjectRef
    api_version: str
    state: State
    summary: str  # one line for people: the description or first error
    shape: StatusShape
    generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    sections: tuple[Section, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)
    origin: Origin | None = None
    findings: tuple[Finding, ...] = ()  # folded in after the dialects ran

    @property
    def body(self) -> dict[str, Any]:
        """The status subresource, in the API's own shape."""
        return self.shape.render(self)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def with_findings(self, findings: Sequence[Finding]) -> ObjectStatus:
        if not findings:
            return self
        folded = self.shape.fold(self, findings)
        return dataclasses.replace(folded, findings=(*self.findings, *findings))

    def to_json(self, *, cluster_scoped: bool = False) -> dict[str, Any]:
        out = object_json(self.ref, self.api_version, self.origin, cluster_scoped)
        return {**out, "status": self.body}


def object_json(
    ref: ObjectRef, api_version: str, origin: Origin | None, cluster_scoped: bool
) -> dict[str, Any]:
    """An object's identity as JSON (no namespace for a cluster-scoped kind), with `source`
    (file and line) when known; the key order `check -o json` prints."""
    metadata: dict[str, Any] = {"name": ref.name}
    if not cluster_scoped:
        metadata = {"namespace": ref.namespace, "name": ref.name}
    out: dict[str, Any] = {"apiVersion": api_version, "kind": ref.kind, "metadata": metadata}
    if origin is not None:
        out["source"] = {"file": origin.source, "line": origin.line}
    return out


def render_plain(status: ObjectStatus, *, conditions_key: bool = True) -> dict[str, Any]:
    """The common shape: `fields`, then `conditions`, then each section group as a list."""
    out: dict[str, Any] = dict(status.fields)
    if conditions_key:
        out["conditions"] = [c.to_json() for c in status.conditions]
    for section in status.sections:
        out.setdefault(section.group, []).append(section.to_json())
    return out


# --- lastTransitionTime ---------------------------------------------------------------------------


def _stamped(
    conditions: Iterable[Condition],
    before: Mapping[str, Condition],
    now: str,
) -> tuple[Condition, ...]:
    out: list[Condition] = []
    for c in conditions:
        prior = before.get(c.type)
        if prior is not None and prior.status == c.status and prior.last_transition_time:
            when = prior.last_transition_time
        else:
            when = now
        out.append(dataclasses.replace(c, last_transition_time=when))
    return tuple(out)


def stamp_transitions(
    status: ObjectStatus, previous: ObjectStatus | None, now: str
) -> ObjectStatus:
    """`status` with every condition's `last_transition_time`: the previous one while the
    condition's status is unchanged (matched by section key and type), else `now`."""
    own = {c.type: c for c in previous.conditions} if previous is not None else {}
    sections_before: dict[tuple[str, str], dict[str, Condition]] = {}
    if previous is not None:
        for s in previous.sections:
            sections_before[(s.group, s.key)] = {c.type: c for c in s.conditions}
    sections = tuple(
        dataclasses.replace(
            s, conditions=_stamped(s.conditions, sections_before.get((s.group, s.key), {}), now)
        )
        for s in status.sections
    )
    return dataclasses.replace(
        status, conditions=_stamped(status.conditions, own, now), sections=sections
    )


# --- objects turnout does not take ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IgnoredObject:
    """An object turnout read and left alone, with why: another controller's class, a kind
    turnout does not read. It gets no status (another controller owns it), but every sink lists
    it so that nothing is ignored silently."""

    ref: ObjectRef
    api_version: str
    origin: Origin | None
    reason: str
    # The lower-cased strings its spec holds (at most `MAX_SPEC_STRINGS`), so that `explain` can
    # say which ignored objects name a host nothing serves.
    spec_strings: frozenset[str] = frozenset()

    @staticmethod
    def of(obj: KubeObject, reason: str) -> IgnoredObject:
        strings = frozenset(_strings(obj.raw.get("spec"), MAX_SPEC_STRINGS))
        return IgnoredObject(obj.ref, obj.api_version, obj.origin, reason, strings)

    def names(self, hostname: str) -> bool:
        """Whether its spec holds `hostname` as a value (a host of another class's object)."""
        return hostname.lower().rstrip(".") in self.spec_strings

    def to_json(self, *, cluster_scoped: bool = False) -> dict[str, Any]:
        out = object_json(self.ref, self.api_version, self.origin, cluster_scoped)
        return {**out, "reason": self.reason}


# Enough for the hosts of any real object; bounded, so a huge ignored object costs little.
MAX_SPEC_STRINGS = 256


def _strings(value: object, limit: int) -> list[str]:
    """The string leaves of `value` (mappings and lists), lower-cased, breadth-first, at most
    `limit` of them."""
    found: list[str] = []
    queue: deque[object] = deque([value])
    while queue and len(found) < limit:
        item = queue.popleft()
        if isinstance(item, str):
            found.append(item.lower())
        elif isinstance(item, Mapping):
            queue.extend(item.values())
        elif isinstance(item, list | tuple):
            queue.extend(item)
    return found

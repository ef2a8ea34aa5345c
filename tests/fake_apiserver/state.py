"""The fake API server's storage: objects per (group, plural), one global monotonically increasing
resourceVersion, an event log that watches replay from, and a compaction point below which a
watch gets 410 Gone. Everything here runs on the server's event loop (the test hooks hop onto it),
so nothing needs a lock."""

from __future__ import annotations

import copy
import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

# Built-in kinds that have no /status subresource in a real API server.
NO_STATUS = frozenset({"Secret", "ConfigMap", "EndpointSlice", "IngressClass", "Lease"})


@dataclass(frozen=True)
class Resource:
    """One API resource as discovery shows it. Versions of one (group, plural) share storage."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    status: bool = True

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


def as_resource(r: Any) -> Resource:
    """Accepts a `Resource` or anything shaped like one (group, version, kind, plural,
    namespaced), e.g. turnout's own `kinds.ApiResource`."""
    if isinstance(r, Resource):
        return r
    return Resource(r.group, r.version, r.kind, r.plural, r.namespaced, r.kind not in NO_STATUS)


@dataclass(frozen=True)
class Event:
    rv: int
    key: tuple[str, str]
    namespace: str
    type: str
    obj: Obj


class ApiError(Exception):
    """A failure the HTTP layer answers with a `Status` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> Obj:
        return status_body(self.code, self.reason, self.message)


def status_body(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _spec_part(obj: Obj) -> Obj:
    """What bumps metadata.generation: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class State:
    rv: int = 1
    compacted: int = 0
    objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = field(default_factory=dict)
    log: list[Event] = field(default_factory=list)
    listeners: list[Callable[[Event], None]] = field(default_factory=list)

    def _bucket(self, res: Resource) -> dict[tuple[str, str], Obj]:
        return self.objects.setdefault(res.key, {})

    def list(self, res: Resource, namespace: str | None) -> list[Obj]:
        items = self._bucket(res).values()
        return [copy.deepcopy(o) for o in items if namespace in (None, _ns(o))]

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self._bucket(res).get((namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural}.{res.group} "{name}" not found')
        return copy.deepcopy(obj)

    def _emit(self, res: Resource, etype: str, obj: Obj) -> None:
        event = Event(self.rv, res.key, _ns(obj), etype, copy.deepcopy(obj))
        self.log.append(event)
        for listener in list(self.listeners):
            listener(event)

    def _stamp(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, res: Resource, namespace: str, obj: Obj, keep_status: bool = False) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta["namespace"] = meta.get("namespace") or namespace or "default"
        else:
            meta.pop("namespace", None)
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if not key[1]:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if key in self._bucket(res):
            raise ApiError(409, "AlreadyExists", f'{res.plural} "{key[1]}" already exists')
        if res.status and not keep_status:
            obj.pop("status", None)
        meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=_now())
        obj["apiVersion"], obj["kind"] = res.group_version, res.kind
        self._stamp(obj)
        self._bucket(res)[key] = obj
        self._emit(res, "ADDED", obj)
        return copy.deepcopy(obj)

    def _check_rv(self, current: Obj, given: Obj) -> None:
        want = given.get("metadata", {}).get("resourceVersion")
        have = current["metadata"]["resourceVersion"]
        if want not in (None, "", have):
            raise ApiError(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {current.get('kind')} "
                f'"{current["metadata"].get("name")}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )

    def replace(self, res: Resource, namespace: str, name: str, new: Obj, sub: str) -> Obj:
        """PUT: the whole object (status kept when it is a subresource) or only its status."""
        current = self._bucket(res).get((namespace, name))
        if current is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
        self._check_rv(current, new)
        return self._store(res, current, new, sub)

    def patch(self, res: Resource, namespace: str, name: str, patch: Obj, sub: str) -> Obj:
        current = self._bucket(res).get((namespace, name))
        if current is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
        self._check_rv(current, patch)
        return self._store(res, current, merge_patch(current, patch), sub)

    def _store(self, res: Resource, current: Obj, new: Obj, sub: str) -> Obj:
        new = copy.deepcopy(new)
        if sub == "status":
            merged = copy.deepcopy(current)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
        else:
            merged = new
            if res.status:
                merged.pop("status", None)
                if "status" in current:
                    merged["status"] = copy.deepcopy(current["status"])
            merged["metadata"] = self._kept_metadata(current, new)
        merged["apiVersion"], merged["kind"] = res.group_version, res.kind
        if merged == current:
            return copy.deepcopy(current)  # a no-op write changes no resourceVersion
        if _spec_part(merged) != _spec_part(current):
            merged["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        self._stamp(merged)
        self._bucket(res)[(_ns(current), current["metadata"]["name"])] = merged
        self._emit(res, "MODIFIED", merged)
        return copy.deepcopy(merged)

    @staticmethod
    def _kept_metadata(current: Obj, new: Obj) -> Obj:
        meta = dict(new.get("metadata", {}))
        for k in ("uid", "creationTimestamp", "generation", "resourceVersion", "name"):
            if k in current["metadata"]:
                meta[k] = current["metadata"][k]
        if "namespace" in current["metadata"]:
            meta["namespace"] = current["metadata"]["namespace"]
        return meta

    def delete(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self._bucket(res).pop((namespace, name), None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
        self._stamp(obj)
        self._emit(res, "DELETED", obj)
        return copy.deepcopy(obj)

    def compact(self) -> int:
        """Forgets the event log: a watch from any resourceVersion before now gets 410 Gone."""
        self.compacted = self.rv
        self.log.clear()
        return self.rv

    def events_since(self, key: tuple[str, str], namespace: str | None, rv: int) -> list[Event]:
        if rv < self.compacted:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.compacted})")
        return [e for e in self.log if e.rv > rv and _matches(e, key, namespace)]


def _ns(obj: Obj) -> str:
    ns = obj.get("metadata", {}).get("namespace", "")
    return ns if isinstance(ns, str) else ""


def _matches(e: Event, key: tuple[str, str], namespace: str | None) -> bool:
    return e.key == key and namespace in (None, e.namespace)

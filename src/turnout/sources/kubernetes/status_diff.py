"""What the status writer sends: the status an object should have, given the one it has.

Pure functions over the status JSON (the dialect's rendering, `ObjectStatus.body`, and the
`status` read from the API server), so that every rule about *whether* and *what* to write is
tested without a server:

- `comparable`: a status without the times a writer stamps (`lastTransitionTime`, Route's
  `lastProcessTime`): two statuses equal under it need no write, so a recompile that changes
  nothing writes nothing.
- `carry_times`: each condition's `lastTransitionTime` taken from the object's current status
  while the condition's status is the same, so a turnout that restarts (or a new leader) does not
  restamp conditions that did not change.
- `merge_foreign`: Gateway API `parents` (routes) and `ancestors` (policies) entries whose
  `controllerName` is another implementation's are kept as the object has them; only turnout's
  entries are replaced.
- `withdrawn`: the status of an object turnout no longer gives one (a route whose Gateway was
  deleted, or that now names another implementation's Gateway) without turnout's entries of the
  shared lists, so that no entry keeps claiming a parent turnout no longer serves.
- `merge_patch`: the RFC 7386 merge patch turning one status into another (a key that went
  away is written as null, so it is removed rather than left behind).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Stamped by whoever writes: not part of what a status says.
VOLATILE_KEYS = frozenset({"lastTransitionTime", "lastProcessTime"})
# Lists of entries that several Gateway API implementations share, each owning its own.
SHARED_LISTS = ("parents", "ancestors")
# The fields that identify an entry of a status list (a condition, listener, parent, ancestor).
_IDENTITY_KEYS = ("type", "name", "parentRef", "ancestorRef", "controllerName")


def comparable(value: Any) -> Any:
    """`value` without `VOLATILE_KEYS` at any depth."""
    if isinstance(value, Mapping):
        return {k: comparable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list | tuple):
        return [comparable(v) for v in value]
    return value


def same_status(desired: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    return bool(comparable(desired) == comparable(current or {}))


def _identity(entry: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((k, repr(comparable(entry[k]))) for k in _IDENTITY_KEYS if k in entry)


def carry_times(desired: Any, current: Any) -> Any:
    """`desired` with the `lastTransitionTime` of each condition whose status `current` has
    unchanged (conditions matched by type, list entries by their identity fields)."""
    if isinstance(desired, Mapping):
        if not isinstance(current, Mapping):
            return dict(desired)
        out = {k: carry_times(v, current.get(k)) for k, v in desired.items()}
        if (
            "lastTransitionTime" in desired
            and current.get("lastTransitionTime")
            and "status" in desired
            and current.get("status") == desired["status"]
        ):
            out["lastTransitionTime"] = current["lastTransitionTime"]
        return out
    if isinstance(desired, list | tuple):
        if not isinstance(current, list | tuple):
            return [carry_times(v, None) for v in desired]
        by_identity = {_identity(c): c for c in current if isinstance(c, Mapping)}
        return [
            carry_times(d, by_identity.get(_identity(d))) if isinstance(d, Mapping) else d
            for d in desired
        ]
    return desired


def merge_foreign(
    desired: Mapping[str, Any], current: Mapping[str, Any] | None, controller_name: str
) -> dict[str, Any]:
    """`desired` whose shared lists hold the object's entries of other controllers (as the
    object has them now) followed by turnout's own entries from `desired`."""
    out = dict(desired)
    for key in SHARED_LISTS:
        if key not in desired:
            continue
        theirs = [
            entry
            for entry in (current or {}).get(key) or ()
            if isinstance(entry, Mapping) and entry.get("controllerName") != controller_name
        ]
        ours = [
            entry
            for entry in desired[key]
            if isinstance(entry, Mapping) and entry.get("controllerName") == controller_name
        ]
        out[key] = [*theirs, *ours]
    return out


def status_to_write(
    desired: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    *,
    controller_name: str,
    process_time: str | None = None,
) -> dict[str, Any] | None:
    """The status to write over `current`, or None when the object already says `desired`.
    `process_time` is stamped as `lastProcessTime` (Contour's Route) when something changed."""
    merged = carry_times(merge_foreign(desired, current, controller_name), current)
    if same_status(merged, current):
        return None
    if process_time is not None:
        merged["lastProcessTime"] = process_time
    return dict(merged)


def withdrawn(current: Mapping[str, Any] | None, controller_name: str) -> dict[str, Any] | None:
    """`current` without turnout's `parents`/`ancestors` entries, or None when it has none
    (nothing to write: the rest of the status, and every other kind's, is left as it is)."""
    if not current:
        return None
    out = dict(current)
    for key in SHARED_LISTS:
        entries = current.get(key)
        if not isinstance(entries, list | tuple):
            continue
        kept = [
            e
            for e in entries
            if not (isinstance(e, Mapping) and e.get("controllerName") == controller_name)
        ]
        if len(kept) != len(entries):
            out[key] = kept
    return out if out != dict(current) else None


def merge_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns `current` into `desired` (lists are replaced)."""
    patch: dict[str, Any] = {}
    before = current or {}
    for key in before:
        if key not in desired:
            patch[key] = None
    for key, value in desired.items():
        old = before.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif key not in before or old != value:
            patch[key] = value
    return patch

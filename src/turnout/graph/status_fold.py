"""The statuses in ref order, with the findings on their objects folded in, patched from the
compile before: a status added, removed or replaced is put in or taken out of the sorted list
by bisection, and only the places that changed are folded again (`fold_findings`)."""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, count
from operator import is_not

from turnout.graph.memo import CompileMemo, IdentityMemo, replaced_places
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import Finding, ObjectStatus
from turnout.store import Snapshot

# A patch of more statuses than this (plus one in 16 of all) sorts afresh: each costs a
# bisection and a list move.
PATCH_LIMIT = 64

# One step from the sorted list before to this one: (place, True) a status put in there,
# (place, False) the status there taken out.
Edit = tuple[int, bool]


class StatusOrder:
    """The statuses of the compile before as the dialects gave them and sorted by ref; how
    this compile's sorted list was made from the one before, for `fold_findings` to follow."""

    def __init__(self) -> None:
        self.given: list[ObjectStatus] = []
        self.sorted: list[ObjectStatus] = []
        # Whether two statuses of `sorted` have one ref: then the dialects' order breaks the
        # tie, which only a sort afresh keeps.
        self.ties = False
        # The sorted list of the compile before, the edits from it to `sorted` (None: sorted
        # afresh) and the refs of the statuses put in.
        self.before: list[ObjectStatus] = []
        self.edits: list[Edit] | None = None
        self.moved: set[ObjectRef] = set()


def status_key(s: ObjectStatus) -> tuple[str, str, str, str]:
    return (s.ref.group, s.ref.kind, s.ref.namespace, s.ref.name)


def sorted_statuses(given: list[ObjectStatus], memo: CompileMemo) -> list[ObjectStatus]:
    """`given` sorted by ref (stable): the compile before's sorted list with the statuses that
    are not the very same objects taken out and put in by bisection, when they are few and
    no two statuses share a ref (a sort afresh otherwise)."""
    kept = memo.stage("status-order", StatusOrder)
    before = kept.sorted
    edits = None if memo.delta.everything or kept.ties else _patch_order(kept, given)
    if edits is None:
        kept.sorted = sorted(given, key=status_key)
        keys = list(map(status_key, kept.sorted))
        kept.ties = any(map(tuple.__eq__, keys, keys[1:]))
        kept.moved = set()
    kept.given, kept.before, kept.edits = given, before, edits
    return kept.sorted


def _patch_order(kept: StatusOrder, given: list[ObjectStatus]) -> list[Edit] | None:
    """Patches `kept.sorted` to hold `given`, returning the edits; None where it cannot."""
    changed = _replaced(kept.given, given)
    if changed is None:
        return None
    removed, added = changed
    if len(removed) + len(added) > PATCH_LIMIT + len(given) // 16:
        return None
    out = list(kept.sorted)
    edits: list[Edit] = []
    for status in removed:
        key = status_key(status)
        i = bisect_left(out, key, key=status_key)
        if i >= len(out) or out[i] is not status:
            return None
        del out[i]
        edits.append((i, False))
    for status in added:
        key = status_key(status)
        i = bisect_left(out, key, key=status_key)
        if i < len(out) and status_key(out[i]) == key:
            return None  # a tie: the dialects' order decides
        out.insert(i, status)
        edits.append((i, True))
    kept.sorted, kept.moved = out, {s.ref for s in added}
    return edits


def _replaced(
    old: list[ObjectStatus], new: list[ObjectStatus]
) -> tuple[list[ObjectStatus], list[ObjectStatus]] | None:
    """The statuses of `old` that are not in `new` and those of `new` not in `old`, by
    identity, at C speed but for those: position by position for lists of one length, else
    between the first and the last place they differ (a status added or removed shifts the
    rest: the very same objects from both ends); None when `new` holds one status twice there.
    (A status in both lists twice is a tie `sorted_statuses` sorts afresh.)"""
    if len(old) == len(new):
        places = replaced_places(old, new)
        if all(old[i].ref == new[i].ref for i in places):
            return [old[i] for i in places], [new[i] for i in places]
    head = _same_run(old, new)
    tail = min(_same_run(old, new, backwards=True), min(len(old), len(new)) - head)
    old_ids = _by_id(old[head : len(old) - tail])
    new_part = new[head : len(new) - tail]
    new_ids = _by_id(new_part)
    if len(new_ids) != len(new_part):
        return None
    removed = [old_ids[k] for k in old_ids.keys() - new_ids.keys()]
    return removed, [new_ids[k] for k in new_ids.keys() - old_ids.keys()]


def _same_run(a: Sequence[object], b: Sequence[object], *, backwards: bool = False) -> int:
    """How many leading (or trailing) places of `a` and `b` hold the very same objects: at C
    speed, up to the first that does not (the shorter one's length when all do)."""
    pairs = map(is_not, reversed(a), reversed(b)) if backwards else map(is_not, a, b)
    return next(compress(count(), pairs), min(len(a), len(b)))


def _by_id(items: list[ObjectStatus]) -> dict[int, ObjectStatus]:
    return dict(zip(map(id, items), items, strict=True))


def fold_findings(
    statuses: Iterable[ObjectStatus],
    findings: Iterable[Finding],
    snapshot: Snapshot,
    memo: CompileMemo | None = None,
) -> tuple[ObjectStatus, ...]:
    """Each status with the findings on its object folded in (by the object's API's own
    `StatusShape`), and the origin (file and line) of its object. `memo`: a status folded
    before with the same findings and object keeps its folded result (the very same object);
    with build_graph's sorted statuses patched from the compile before's (`sorted_statuses`),
    the folded list is patched alike and only the statuses put in, whose object changed or
    whose findings changed are folded again."""
    # Dicts as ordered sets: linear in the findings, however many land on one object.
    by_ref: dict[ObjectRef, dict[Finding, None]] = {}
    for finding in findings:
        by_ref.setdefault(finding.ref, {})[finding] = None
    memo = CompileMemo() if memo is None else memo
    folded: FoldMemo = memo.stage("fold", IdentityMemo)
    kept = memo.stage("fold-places", FoldPlaces)
    order = memo.stage("status-order", StatusOrder)
    given = statuses if isinstance(statuses, list) else list(statuses)
    if given is order.sorted and order.edits is not None and kept.given is order.before:
        out = list(kept.out)
        for i, put in order.edits:
            if put:
                out.insert(i, given[i])  # folded below: its ref is in `order.moved`
            else:
                del out[i]
        for i in _refold_places(kept, given, by_ref, memo, order.moved):
            out[i] = _folded(given[i], by_ref, snapshot, folded)
    else:
        out = [_folded(status, by_ref, snapshot, folded) for status in given]
    kept.given, kept.out, kept.by_ref = given, out, by_ref
    return tuple(out)


class FoldPlaces:
    """`fold_findings`' last sorted statuses, their folded results and the findings by ref."""

    def __init__(self) -> None:
        self.given: list[ObjectStatus] = []
        self.out: list[ObjectStatus] = []
        self.by_ref: dict[ObjectRef, dict[Finding, None]] = {}


def _refold_places(
    kept: FoldPlaces,
    given: list[ObjectStatus],
    by_ref: dict[ObjectRef, dict[Finding, None]],
    memo: CompileMemo,
    moved: set[ObjectRef],
) -> set[int]:
    """The places to fold again: those of the statuses that are new objects (`moved`), of the
    objects the delta names and of those whose findings changed (found by bisection: the
    statuses are sorted)."""
    places: set[int] = set()
    old = kept.by_ref
    stale = {
        r for r in old.keys() | by_ref.keys() if tuple(old.get(r, ())) != tuple(by_ref.get(r, ()))
    }
    for ref in stale | memo.delta.refs | moved:
        key = (ref.group, ref.kind, ref.namespace, ref.name)
        i = bisect_left(given, key, key=status_key)
        while i < len(given) and given[i].ref == ref:
            places.add(i)
            i += 1
    return places


def _folded(
    status: ObjectStatus,
    by_ref: Mapping[ObjectRef, Mapping[Finding, None]],
    snapshot: Snapshot,
    folded: FoldMemo,
) -> ObjectStatus:
    obj = snapshot.get_ref(status.ref)
    own = tuple(by_ref.get(status.ref, ()))
    hit = folded.get(status)
    if hit is None or hit[0] is not obj or hit[1] != own:
        origin = obj is not None and status.origin is None
        done = dataclasses.replace(status, origin=obj.origin) if origin and obj else status
        hit = folded.put(status, (obj, own, done.with_findings(own)))
    return hit[2]


FoldMemo = IdentityMemo[ObjectStatus, tuple[KubeObject | None, tuple[Finding, ...], ObjectStatus]]

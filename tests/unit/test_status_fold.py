"""The sorted and folded statuses patched from the compile before (`graph/status_fold.py`)
equal a sort and fold afresh, over random walks of statuses added, removed, replaced and
reordered, objects changed and findings moved."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from tests.builders import kube_object
from turnout.compile_inputs import CompileOptions
from turnout.graph.memo import CompileMemo
from turnout.graph.status_fold import StatusOrder, fold_findings, sorted_statuses, status_key
from turnout.objects import KubeObject
from turnout.status.model import Finding, ObjectStatus, State
from turnout.store import Snapshot


class _Shape:
    def render(self, status: ObjectStatus) -> dict[str, Any]:
        return {"summary": status.summary}

    def fold(self, status: ObjectStatus, findings: Sequence[Finding]) -> ObjectStatus:
        summary = "; ".join([status.summary, *(f.message for f in findings)])
        return dataclasses.replace(status, summary=summary)


SHAPE = _Shape()


def _object(rng: random.Random) -> KubeObject:
    kind = rng.choice(("Widget", "Gadget"))
    name, version = f"o{rng.randint(0, 30)}", rng.randint(0, 2)
    return kube_object("example.com/v1", kind, name, f"ns{rng.randint(0, 2)}", spec={"v": version})


def _status(obj: KubeObject, rng: random.Random) -> ObjectStatus:
    return ObjectStatus(obj.ref, obj.api_version, State.VALID, f"s{rng.randint(0, 99)}", SHAPE)


def _step(rng: random.Random, given: list[ObjectStatus], objects: dict[Any, KubeObject]) -> None:
    """One random change of the dialects' statuses or of the objects."""
    action = rng.random()
    if action < 0.3 or not given:  # a new object's status, anywhere in the dialects' order
        obj = _object(rng)
        objects.setdefault(obj.ref, obj)
        if rng.random() < 0.9 and any(s.ref == obj.ref for s in given):
            return  # a second status of one ref only now and then: ties sort afresh
        given.insert(rng.randint(0, len(given)), _status(objects[obj.ref], rng))
    elif action < 0.5:
        del given[rng.randrange(len(given))]
    elif action < 0.7:  # a status made again
        i = rng.randrange(len(given))
        given[i] = dataclasses.replace(given[i], summary=f"s{rng.randint(0, 99)}")
    elif action < 0.8:  # an object changed: its status folds its new origin
        ref = rng.choice(given).ref
        objects[ref] = kube_object(
            "example.com/v1", ref.kind, ref.name, ref.namespace, spec={"v": rng.random()}
        )
    elif action < 0.9:  # the dialects' order changed
        i, j = rng.randrange(len(given)), rng.randrange(len(given))
        given[i], given[j] = given[j], given[i]


def test_patched_statuses_sort_and_fold_as_afresh() -> None:
    rng = random.Random(7)
    options = CompileOptions()
    patched = 0
    for _ in range(30):
        memo = CompileMemo()
        given: list[ObjectStatus] = []
        objects: dict[Any, KubeObject] = {}
        for _ in range(60):
            for _ in range(rng.randint(1, 3)):
                _step(rng, given, objects)
            snap = Snapshot.of(objects.values())
            refs = [s.ref for s in given]
            findings = [
                Finding(rng.choice(refs), "spec", "EnvoyLimit", f"f{rng.randint(0, 3)}")
                for _ in range(rng.randint(0, 3) if refs else 0)
            ]
            memo.begin(snap, options)
            ordered = sorted_statuses(list(given), memo)
            patched += memo.stage("status-order", StatusOrder).edits is not None
            assert ordered == sorted(given, key=status_key)
            assert all(a is b for a, b in zip(ordered, sorted(given, key=status_key), strict=True))
            assert fold_findings(ordered, findings, snap, memo) == fold_findings(
                sorted(given, key=status_key), findings, snap
            )
    assert patched > 1000  # most steps patch the order

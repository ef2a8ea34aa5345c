"""The store's cheap path for small changes: a snapshot patched from the last one equals the
snapshot built from scratch, and the change log tells what `changed_objects` finds, over random
partition updates (duplicates across and within partitions, problems, removals included)."""

from __future__ import annotations

import operator
import random

import pytest

import turnout.store as store_module
from tests.builders import endpoint_slice, service
from turnout.objects import KubeObject
from turnout.store import Snapshot, SourceProblem, Store, changed_objects


def _from_scratch(store: Store) -> Snapshot:
    fresh = Store()
    for name in store.partitions():
        objects, problems = store.partition(name)
        fresh.replace_partition(name, objects, problems)
    return fresh.snapshot()


def _same(a: Snapshot, b: Snapshot) -> None:
    assert a.objects == b.objects
    # The very objects of the partitions, wherever the snapshot was patched from.
    assert all(x is y for x, y in zip(a.objects, b.objects, strict=True))
    assert [o.origin for o in a.objects] == [o.origin for o in b.objects]
    assert a.problems == b.problems
    kinds = {(o.group, o.kind) for o in (*a.objects, *b.objects)}
    for group, kind in kinds:
        assert list(a.kind(group, kind)) == list(b.kind(group, kind))
        assert all(x is y for x, y in zip(a.kind(group, kind), b.kind(group, kind), strict=True))
        assert list(a.keys_of(group, kind)) == list(b.keys_of(group, kind))
        for obj in b.objects:
            assert a.get_ref(obj.ref) is b.get_ref(obj.ref)


def _random_object(rng: random.Random) -> KubeObject:
    name = f"s{rng.randint(0, 6)}"
    if rng.random() < 0.3:
        return service(name, port=rng.choice((80, 81)))
    return endpoint_slice(name, [f"10.0.0.{rng.randint(1, 3)}"], name=f"{name}-{rng.randint(1, 2)}")


def _random_update(rng: random.Random, store: Store) -> None:
    partition = f"p{rng.randint(0, 4)}"
    action = rng.random()
    if action < 0.1:
        store.remove_partition(partition)
    elif action < 0.2:
        store.set_problems(partition, [SourceProblem(partition, 1, "bad")] * rng.randint(0, 1))
    elif action < 0.5:
        store.upsert(partition, _random_object(rng))
    elif action < 0.6:
        store.delete(partition, _random_object(rng).ref)
    else:
        store.replace_partition(partition, [_random_object(rng) for _ in range(rng.randint(0, 3))])


def test_patched_snapshots_and_the_change_log_agree_with_a_rebuild() -> None:
    rng = random.Random(11)
    bridged = 0
    for _ in range(40):
        store = Store()
        old = store.snapshot()
        for _ in range(30):
            for _ in range(rng.randint(1, 3)):
                _random_update(rng, store)
            new = store.snapshot()
            _same(new, _from_scratch(store))
            logged = store.changes(old, new)
            if logged is not None:
                bridged += 1
                key = lambda c: str((c[0] or c[1]).ref)  # noqa: E731
                assert sorted(logged, key=key) == sorted(changed_objects(old, new), key=key)
            old = new
    assert bridged > 300  # the log answers most of the time


def test_a_patched_snapshot_keeps_its_kinds_sorted_whether_or_not_its_base_sorted_them() -> None:
    # A patched snapshot patches the sorted keys its base had made (`Snapshot.kind`): a key
    # added, removed, or removed and added back between two snapshots lands where a sort puts it.
    rng = random.Random(23)
    for _ in range(30):
        store = Store()
        for _ in range(40):
            for _ in range(rng.randint(1, 4)):
                _random_update(rng, store)
            new = store.snapshot()
            if rng.random() < 0.6:  # sorted now, so the next snapshot patches these lists
                list(new.kind("discovery.k8s.io", "EndpointSlice"))
                list(new.kind("", "Service"))
            _same(new, _from_scratch(store))


def test_upserts_and_deletes_keep_the_partition_a_list_replaced_in_place() -> None:
    # What an informer's writes mean, against a plain list: a new ref is appended, a known one
    # replaced where it was, an equal object changes nothing, a delete removes it.
    rng = random.Random(5)
    store, model = Store(), []
    for _ in range(2000):
        obj = _random_object(rng)
        if rng.random() < 0.2:
            changed = store.delete("p", obj.ref)
            expected = any(o.ref == obj.ref for o in model)
            model = [o for o in model if o.ref != obj.ref]
        else:
            at = next((i for i, o in enumerate(model) if o.ref == obj.ref), None)
            expected = at is None or not (model[at] == obj and model[at].origin == obj.origin)
            if at is None:
                model.append(obj)
            elif expected:
                model[at] = obj
            changed = store.upsert("p", obj)
        assert changed == expected
        assert list(store.partition("p")[0]) == model


def test_the_objects_of_many_partitions_come_in_partition_order_as_chunks_split_and_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A snapshot's objects are its partitions' in name order, joined per chunk of names: with
    # chunks of 2, partitions added, rewritten and removed split chunks and empty them, and the
    # objects and problems stay those of every partition in sorted order.
    monkeypatch.setattr(store_module, "CHUNK", 2)
    rng = random.Random(31)
    for _ in range(20):
        store = Store()
        for _ in range(60):
            name = f"f{rng.randint(0, 40):02}"
            action = rng.random()
            if action < 0.3:
                store.remove_partition(name)
            elif action < 0.4:
                store.set_problems(name, [SourceProblem(name, 1, "bad")])
            elif action < 0.5:
                store.upsert(name, _random_object(rng))
            else:
                objects = [_random_object(rng) for _ in range(rng.randint(0, 2))]
                store.replace_partition(name, objects)
            names = sorted(store.partitions())
            want = Snapshot.of(
                [o for n in names for o in store.partition(n)[0]],
                [p for n in names for p in store.partition(n)[1]],
            )
            got = store.snapshot()
            assert len(got.objects) == len(want.objects)
            assert all(map(operator.is_, want.objects, got.objects))
            assert got.problems == want.problems

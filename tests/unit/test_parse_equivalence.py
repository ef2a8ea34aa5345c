"""The parser builds exactly what PyYAML's own constructor, frozen, would: same values, same types
(tuples, FrozenDicts, ints, floats, bools, None, timestamps kept as text), same problems.

The reference below is the plain way: `yaml.load_all` with a SafeLoader that keeps timestamps as
text, then `freeze`; the parser takes faster paths and must not be told apart from it."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.cli import cold_start_gc
from turnout.objects import DEFAULT_NAMESPACE, freeze
from turnout.sources.parse import parse_text


class _Reference(yaml.SafeLoader):
    pass


_Reference.add_constructor(
    "tag:yaml.org,2002:timestamp",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


def reference_raw(text: str) -> list[Any]:
    """The frozen raw content of each object document, namespace filled in as the parser does."""
    out = []
    for doc in yaml.load_all(text, Loader=_Reference):
        metadata = dict(doc["metadata"])
        metadata["namespace"] = metadata.get("namespace") or DEFAULT_NAMESPACE
        out.append(freeze({**doc, "metadata": metadata}))
    return out


def typed(value: Any) -> Any:
    """`value` with every container's and scalar's type spelled out (equality alone would let
    a list pass for a tuple, or True for 1)."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, [typed(v) for v in value])
    if hasattr(value, "items"):
        return (type(value).__name__, [(typed(k), typed(v)) for k, v in value.items()])
    return (type(value).__name__, value)


def assert_same(text: str) -> None:
    """The parser's objects are the reference's; a document PyYAML cannot construct (`=` is
    tagged `value`, which nothing constructs) fails the file in both."""
    result = parse_text(text, "x.yaml")
    try:
        expected = [typed(r) for r in reference_raw(text)]
    except yaml.YAMLError as err:
        assert result.failed
        assert str(getattr(err, "problem", "")) in result.problems[0].reason
        return
    assert not result.failed, result.problems
    assert [typed(o.raw) for o in result.objects] == expected


HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {app: x}}\n"

SCALARS = [
    "1",
    "-2",
    "0x1F",
    "0o7",
    "1_000",
    "1:30",
    "1.5",
    "1e3",
    "-.5",
    ".inf",
    ".nan",
    "true",
    "yes",
    "Off",
    "~",
    "null",
    "''",
    "'1'",
    '"true"',
    "2001-12-14",
    "2001-12-14T21:59:43.10-05:00",
    "=",
    "<<",
    "!!str 3",
    "!!int '3'",
    "!!float '1'",
    "!!bool 'yes'",
    "!!null ''",
    "plain text",
    "/path",
    "*glob",
    "-",
]


@pytest.mark.parametrize("scalar", SCALARS)
def test_each_scalar_is_what_pyyaml_builds(scalar: str) -> None:
    if scalar == "*glob":
        scalar = "'*glob'"
    assert_same(HEAD + f"data: {{v: {scalar}, l: [{scalar}]}}\n")


@pytest.mark.parametrize(
    "body",
    [
        "data: {1: a, '1': b}",
        "data: {true: a, 1: b}",
        "data: {null: a, ~: b}",
        "x: &a {p: 1}\ndata: {<<: *a, q: 2}",
        "x: &a [1, {b: 2}]\ndata: [*a, *a]",
        "data: {a: 1, a: 2}",
        "data: !!set {a, b}",
        "data: !!omap [a: 1]",
        "data: !!binary aGVsbG8=",
        "data: {? [a, b]: 1}",
        "data: " + "[" * 98 + "]" * 98,
    ],
)
def test_unusual_documents_are_what_pyyaml_builds(body: str) -> None:
    assert_same(HEAD + body + "\n")


def test_too_large_documents_are_refused_as_before() -> None:
    deep = parse_text(HEAD + "data: " + "[" * 150 + "]" * 150 + "\n", "x.yaml")
    assert deep.failed
    assert deep.problems[0].reason == "document is nested more than 100 levels deep"
    laughs = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcde", "bcdef", strict=True)
    )
    big = parse_text(laughs, "x.yaml")
    assert big.failed
    assert big.problems[0].reason.startswith("document expands to more than")


def test_a_list_of_objects_is_read_item_by_item() -> None:
    text = "apiVersion: v1\nkind: List\nitems:\n- " + HEAD.replace("\n", "\n  ") + "\n- 3\n"
    result = parse_text(text, "x.yaml")
    assert [o.name for o in result.objects] == ["a"]
    assert [p.reason for p in result.problems] == ["document is not an object (a mapping)"]


keys = st.sampled_from(["a", "b", "name", "1", "true", "on", "~", "2001-01-01", "x y"])
leaves = st.sampled_from(SCALARS[:-4])
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]")
        | st.dictionaries(keys, inner, max_size=3).map(
            lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"
        )
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(values)
def test_random_documents_are_what_pyyaml_builds(value: str) -> None:
    assert_same(HEAD + f"data: {value}\n")


def test_the_cold_start_pauses_the_collector_and_freezes_what_it_built() -> None:
    assert gc.isenabled()
    with cold_start_gc():
        assert not gc.isenabled()
    try:
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("namespace", ["team", "''", "~", "default"])
def test_an_object_naming_its_namespace_is_what_pyyaml_builds(namespace: str) -> None:
    assert_same(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{namespace: {namespace}, name: a}}\n"
        "data: {a: [1, {b: c}]}\n---\n"
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: b, namespace: {namespace}}}\n"
        "data: {a: [1, {b: c}]}\n"
    )

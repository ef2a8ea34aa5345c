"""Hypothesis strategies the dialects' fuzz tests share: arbitrary JSON-like specs, and small
structural mutations of a valid template, so that a fuzzer reaches the semantic checks and not
only the schema's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

Strategy = st.SearchStrategy[Any]
# Draws a replacement for a scalar (or empty container) of the template.
LeafMutation = Callable[[st.DrawFn, Any], Any]
Mutator = Callable[[Any], Strategy]


def json_values(strings: Strategy, field_names: Sequence[str]) -> tuple[Strategy, Strategy]:
    """(scalars, values): what YAML may put in a spec, its mappings keyed mostly by real field
    names so that the reader goes past its unknown-field check."""
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-2, 70000), strings, st.floats(allow_nan=True)
    )
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(
                st.one_of(st.sampled_from(field_names), st.text(max_size=4)), inner, max_size=5
            ),
        ),
        max_leaves=30,
    )
    return scalars, values


def typed_leaf(
    values: Strategy, strings: Strategy, integers: Sequence[int], keep_booleans: bool = True
) -> LeafMutation:
    """Mostly keeps a scalar's type, so that the semantic checks run, not only the schema."""

    def leaf(draw: st.DrawFn, value: Any) -> Any:
        if draw(st.integers(0, 3)) == 0:
            return draw(values)
        if isinstance(value, bool):
            if keep_booleans:
                return draw(st.booleans())
        elif isinstance(value, int):
            return draw(st.sampled_from(integers))
        elif isinstance(value, str):
            return draw(strings)
        return draw(values)

    return leaf


def mutator(values: Strategy, field_names: Sequence[str], leaf: LeafMutation) -> Mutator:
    """A strategy factory: `value` with one small change somewhere: a node replaced, a key
    dropped or added, a list item dropped or repeated."""

    @st.composite
    def mutated(draw: st.DrawFn, value: Any) -> Any:
        if not isinstance(value, dict | list) or not value:
            return leaf(draw, value)
        choice = draw(st.integers(0, 9))
        if choice == 0:
            return draw(values)
        if isinstance(value, dict):
            key = draw(st.sampled_from(sorted(value)))
            if choice == 1:
                return {k: v for k, v in value.items() if k != key}
            if choice == 2:
                return {**value, draw(st.sampled_from(field_names)): draw(values)}
            return {**value, key: draw(mutated(value[key]))}
        i = draw(st.integers(0, len(value) - 1))
        if choice == 1:
            return [*value[:i], *value[i + 1 :]]
        if choice == 2:
            return [*value, value[i]]
        return [*value[:i], draw(mutated(value[i])), *value[i + 1 :]]

    return mutated


def mutations(mutated: Mutator, value: Any, depth: int) -> Strategy:
    """`value` after `depth` successive mutations."""
    strategy: Strategy = st.just(value)
    for _ in range(depth):
        strategy = strategy.flatmap(mutated)
    return strategy

"""Output kept in key order and patched per key at C speed (issue 11: a change costs what it
touches): the dialect's claims, virtual hosts and TCP proxies are each root's pieces, one after
the other in (namespace, name) order, as a full compile lists them."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Generic, TypeVar

Key = tuple[str, str]  # (namespace, name)
T = TypeVar("T")
V = TypeVar("V")


def in_order(order: Iterable[Key], values: dict[Key, V]) -> dict[Key, V]:
    """`values` with its keys in `order`'s order (C-speed passes, for a dict that gained keys)."""
    keys = list(filter(values.__contains__, order))
    return dict(zip(keys, map(values.__getitem__, keys), strict=True))


class Pieces(Generic[T]):
    """Each key's pieces (only keys that have some), in key order, and all of them in one flat
    list. A key whose pieces keep their number is patched in the flat list in place; any other
    change rebuilds the list at `finish` (one C-speed pass)."""

    __slots__ = ("dirty", "flat", "gained", "parts", "start")

    def __init__(self) -> None:
        self.parts: dict[Key, tuple[T, ...]] = {}
        self.flat: list[T] = []
        self.start: dict[Key, int] = {}
        self.dirty = False  # `flat` and `start` are stale
        self.gained = False  # `parts` gained a key: out of order

    def set(self, key: Key, pieces: tuple[T, ...]) -> None:
        old = self.parts.get(key)
        if old is not None and len(old) == len(pieces) and not self.dirty:
            at = self.start[key]
            self.flat[at : at + len(pieces)] = pieces
            self.parts[key] = pieces
        elif pieces:
            self.gained = self.gained or old is None
            self.parts[key] = pieces
            self.dirty = True
        elif old is not None:
            del self.parts[key]
            self.dirty = True

    def finish(self, order: Iterable[Key]) -> None:
        """Puts the pieces back in key order (`order`: every key, sorted) after `set`s."""
        if self.gained:
            self.parts = in_order(order, self.parts)
            self.gained = False
        if self.dirty:
            values = self.parts.values()
            self.flat = list(itertools.chain.from_iterable(values))
            starts = itertools.accumulate(map(len, values), initial=0)
            self.start = dict(zip(self.parts, starts, strict=False))
            self.dirty = False

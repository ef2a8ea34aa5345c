"""Kubernetes-shaped objects as the sources deliver them.

Every source (files, Kubernetes) hands the store `KubeObject` records. A record is immutable:
the raw mapping is deep-frozen so that no dialect can change what another dialect sees.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

DEFAULT_NAMESPACE = "default"


class FrozenDict(Mapping[str, Any]):
    """A read-only, hashable mapping used for the raw content of objects."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    # The Mapping ABC's generic views look every key up again; the dict's own are much faster,
    # and dialects iterate objects on every compile.
    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def values(self) -> ValuesView[Any]:
        return self._data.values()

    def items(self) -> ItemsView[str, Any]:
        return self._data.items()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(sorted((k, _hashable(v)) for k, v in self._data.items())))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenDict):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        # Pickled (the parse cache) without its hash: string hashes differ between processes.
        return None, {"_data": self._data, "_hash": None}


# What an absent mapping reads as: one, as it cannot change.
_EMPTY = FrozenDict({})


def frozen_dict(data: dict[str, Any]) -> FrozenDict:
    """A FrozenDict that takes `data` over instead of copying it: for a builder that made a
    dict of frozen values and no longer touches it (the parser, at 100,000s of mappings)."""
    frozen = FrozenDict.__new__(FrozenDict)
    frozen._data = data
    frozen._hash = None
    return frozen


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def freeze(value: Any) -> Any:
    """Deep-freezes parsed YAML/JSON: dicts become FrozenDict, lists become tuples."""
    if isinstance(value, Mapping):
        return FrozenDict({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of `freeze`, for output (JSON, YAML)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """Identifies one object: its API group, kind, namespace and name."""

    group: str
    kind: str
    namespace: str
    name: str

    @property
    def namespaced_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an object came from, so errors and `explain` can point at what a user wrote."""

    source: str  # a file path, or "kubernetes"
    line: int | None = None  # 1-based line of the document start, when known


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


@dataclass(frozen=True, slots=True)
class KubeObject:
    api_version: str
    kind: str
    namespace: str
    name: str
    raw: FrozenDict
    origin: Origin = field(default=Origin("unknown"), compare=False)
    # Built once: the store and every compile ask for it, several times per object.
    _ref: ObjectRef = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ref = ObjectRef(group_of(self.api_version), self.kind, self.namespace, self.name)
        object.__setattr__(self, "_ref", ref)

    @property
    def group(self) -> str:
        return self._ref.group

    @property
    def ref(self) -> ObjectRef:
        return self._ref

    @property
    def metadata(self) -> Mapping[str, Any]:
        meta = self.raw.get("metadata")
        # The exact type first: the ABC check is slower, and these are asked for per route.
        if meta.__class__ is FrozenDict or isinstance(meta, Mapping):
            return meta
        return _EMPTY

    @property
    def spec(self) -> Any:
        return self.raw.get("spec")

    @property
    def labels(self) -> Mapping[str, str]:
        labels = self.metadata.get("labels")
        if labels.__class__ is FrozenDict or isinstance(labels, Mapping):
            return labels
        return _EMPTY

    @property
    def annotations(self) -> Mapping[str, str]:
        ann = self.metadata.get("annotations")
        if ann.__class__ is FrozenDict or isinstance(ann, Mapping):
            return ann
        return _EMPTY

    @property
    def creation_timestamp(self) -> str:
        """RFC 3339 string, or "" when absent; an absent timestamp sorts as the newest."""
        ts = self.metadata.get("creationTimestamp")
        return str(ts) if ts is not None else ""

    @property
    def generation(self) -> int:
        gen = self.metadata.get("generation")
        return gen if isinstance(gen, int) and not isinstance(gen, bool) else 1

    @property
    def created_at(self) -> datetime | None:
        """creationTimestamp as an aware UTC instant; None when absent or not RFC 3339."""
        return parse_timestamp(self.creation_timestamp)

    @property
    def age_key(self) -> tuple[int, datetime, str, str]:
        """Orders objects oldest first: creationTimestamp as an instant, then namespace/name.

        An absent or unparsable timestamp sorts last (the newest): leaving it out must not be a
        way to take another tenant's hostname. Objects written by hand without timestamps still
        order among themselves by namespace/name."""
        created = self.created_at
        if created is None:
            return (1, _EPOCH, self.namespace, self.name)
        return (0, created, self.namespace, self.name)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_timestamp(value: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)

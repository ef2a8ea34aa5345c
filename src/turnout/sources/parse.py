"""Turns YAML/JSON text into objects, reporting every problem with its file and line.

Multi-document YAML and `kind: List` both work. A document that is not a Kubernetes object at all
(neither apiVersion nor kind: a `kustomization.yaml`, Helm `values.yaml`, a list of strings) is
skipped with a warning; one that is an object but malformed (apiVersion without kind, no name, a
field of the wrong type at the top) becomes an error `SourceProblem`. The other documents of the
file are kept. A file that does not parse at all yields only a problem, so
the caller can keep the file's last good objects.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from turnout.objects import DEFAULT_NAMESPACE, KubeObject, Origin, freeze, frozen_dict
from turnout.store import SourceProblem


@dataclass(frozen=True, slots=True)
class ParseResult:
    objects: tuple[KubeObject, ...]
    problems: tuple[SourceProblem, ...]
    # True when the text as a whole could not be read: the caller keeps the last good objects.
    failed: bool = False


# libyaml's C parser when PyYAML was built with it: about ten times faster than pure Python.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """SafeLoader that keeps timestamps as strings (Kubernetes treats them as RFC 3339 text).

    Its `resolve` gives a plain scalar its tag as PyYAML's does, faster: the C parser calls it
    for every scalar, and PyYAML's tries regular expressions for most first characters. A value
    whose first character no implicit resolver claims is a string at once (most keys and
    names); other plain values are remembered, as they repeat (ports, `true`, `80`)."""

    # The composer calls these two around every node, for path resolvers; none is set (asserted
    # below), so they need do nothing, and built-in callables that do nothing cost less than
    # PyYAML's Python methods (2.6 million calls at 30,000 files).
    descend_resolver = staticmethod(operator.is_)  # (parent, index): the answer is ignored
    ascend_resolver = staticmethod(tuple)  # (): the answer is ignored

    def resolve(self, kind: Any, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is not yaml.ScalarNode:
            return _MAP if kind is yaml.MappingNode else _SEQ
        if not implicit[0] or (value and value[0] not in _RESOLVED_FIRST):
            return _STR
        tag = _resolved.get(value)
        if tag is None:
            tag = str(super().resolve(kind, value, implicit))
            if len(value) <= _MEMO_VALUE_CHARS:
                if len(_resolved) >= _MEMO_SIZE:
                    _resolved.clear()
                _resolved[value] = tag
        return tag


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
# First characters some implicit resolver (int, float, bool, null, merge...) looks at; no
# resolver looks at every value (that would be the key None), and no path resolver is set.
_RESOLVED_FIRST = frozenset(k for k in _Loader.yaml_implicit_resolvers if k is not None)
assert None not in _Loader.yaml_implicit_resolvers and not _Loader.yaml_path_resolvers
assert (_Loader.DEFAULT_SCALAR_TAG, _Loader.DEFAULT_MAPPING_TAG) == (_STR, _MAP)
assert _Loader.DEFAULT_SEQUENCE_TAG == _SEQ
_resolved: dict[str, str] = {}
_MEMO_VALUE_CHARS = 64
_MEMO_SIZE = 10_000


def _no_timestamps(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _no_timestamps)


# YAML aliases let a few bytes expand into billions of nodes ("billion laughs") or into a cycle;
# Kubernetes objects are far below these limits.
MAX_NODES_PER_DOCUMENT = 200_000
MAX_DEPTH = 100


def _check_size(node: yaml.Node) -> str | None:
    """Why a composed document is too large to construct once its aliases are expanded."""
    count = 0
    stack: list[tuple[yaml.Node, int]] = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        count += 1
        if count > MAX_NODES_PER_DOCUMENT:
            return f"document expands to more than {MAX_NODES_PER_DOCUMENT} nodes (YAML aliases?)"
        if depth > MAX_DEPTH:
            return f"document is nested more than {MAX_DEPTH} levels deep"
        if isinstance(current, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
    return None


class _Unusual(Exception):
    """The document needs PyYAML's own constructor: a tag, key or size the fast path leaves to
    it (merge keys, non-string keys, explicit tags, too many nodes or levels)."""


# Scalars built by the loader's own constructors (exactly what PyYAML would build).
_SCALARS: dict[str, Callable[[Any, yaml.Node], Any]] = {
    tag: _Loader.yaml_constructors[tag]
    for tag in (
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    )
}
_intern = sys.intern
_ScalarNode = yaml.ScalarNode
# Plain scalars other than strings, built: (tag, text) -> (value, its key in `shared`).
_SCALAR_VALUES: dict[tuple[str, str], tuple[Any, Any]] = {}


class _FastBuilder:
    """Builds the frozen document straight from the composed nodes, in one walk.

    PyYAML's constructor builds mutable dicts and lists through several Python calls per node,
    then `freeze` walks the result again to copy it; at 30,000 files that was most of the load.
    This walk builds `FrozenDict`s and tuples directly. Equal values are built once: strings are
    interned, and an immutable mapping or sequence equal to one already built (in `shared`,
    which a caller may keep across the files of one load) is that one (the same `services` and
    `conditions` repeat in route after route, the same ports in Service after Service). It
    handles what Kubernetes objects are made of (mappings with string keys, sequences, plain
    scalars) and raises `_Unusual` for anything else, which then takes PyYAML's path unchanged;
    so does a document over the size limits, whose check then reports it as before."""

    __slots__ = ("_count", "_loader", "_shared")

    def __init__(self, loader: Any, shared: dict[Any, Any]) -> None:
        self._loader = loader
        self._count = 0
        self._shared = shared

    def build(self, node: yaml.Node, depth: int) -> tuple[Any, Any]:
        """The value of `node` and its key in `shared`: the value itself for a string, else a
        tuple that tells types apart (1, 1.0 and true are equal in Python, not in YAML)."""
        self._count += 1
        if self._count > MAX_NODES_PER_DOCUMENT or depth > MAX_DEPTH:
            raise _Unusual
        tag = node.tag
        kind = node.__class__
        if kind is _ScalarNode:
            if tag == _STR:
                text = _intern(node.value)
                return text, text
            return self._scalar(node, tag)
        if kind is yaml.MappingNode and tag == _MAP:
            return self._mapping(node, depth)
        if kind is yaml.SequenceNode and tag == _SEQ:
            return self._sequence(node, depth)
        raise _Unusual

    def _scalar(self, node: yaml.Node, tag: str) -> tuple[Any, Any]:
        """A plain scalar other than a string (a port, `true`, `null`): built once per text
        and tag, as they repeat."""
        found = _SCALAR_VALUES.get((tag, node.value))
        if found is not None:
            return found
        construct = _SCALARS.get(tag)
        if construct is None:
            raise _Unusual
        value = construct(self._loader, node)
        # repr: -0.0 equals 0.0.
        found = value, (value.__class__, repr(value) if isinstance(value, float) else value)
        if len(node.value) <= _MEMO_VALUE_CHARS:
            if len(_SCALAR_VALUES) >= _MEMO_SIZE:
                _SCALAR_VALUES.clear()
            _SCALAR_VALUES[(tag, node.value)] = found
        return found

    def _mapping(self, node: yaml.Node, depth: int) -> tuple[Any, Any]:
        data: dict[str, Any] = {}
        key_parts: list[Any] = [_MAP]
        # The node count and depth checks of `build`, and its string case, inline: most
        # values are strings, and a call per value was a good part of the walk.
        depth += 1
        if depth > MAX_DEPTH and node.value:
            raise _Unusual
        for key, value in node.value:
            # Only string keys: `freeze` turns others into text after PyYAML merged equal keys
            # (1 and true are one key to it), and `<<` merges are PyYAML's to expand.
            if key.tag != _STR or key.__class__ is not _ScalarNode:
                raise _Unusual
            name = _intern(key.value)
            if value.__class__ is _ScalarNode and value.tag == _STR:
                self._count += 2
                text = data[name] = _intern(value.value)
                key_parts += (name, text)
                continue
            self._count += 1
            data[name], value_key = self.build(value, depth)
            key_parts += (name, value_key)
        if self._count > MAX_NODES_PER_DOCUMENT:
            raise _Unusual
        return self._share(tuple(key_parts), data, frozen_dict)

    def _sequence(self, node: yaml.Node, depth: int) -> tuple[Any, Any]:
        items: list[Any] = []
        key_parts: list[Any] = [_SEQ]
        depth += 1
        if depth > MAX_DEPTH and node.value:
            raise _Unusual
        for child in node.value:
            if child.__class__ is _ScalarNode and child.tag == _STR:
                self._count += 1
                text = _intern(child.value)
                items.append(text)
                key_parts.append(text)
                continue
            item, item_key = self.build(child, depth)
            items.append(item)
            key_parts.append(item_key)
        if self._count > MAX_NODES_PER_DOCUMENT:
            raise _Unusual
        return self._share(tuple(key_parts), items, tuple)

    def _share(
        self, key: tuple[Any, ...], parts: Any, make: Callable[[Any], Any]
    ) -> tuple[Any, Any]:
        # A mapping that repeats a key is not what its key says (the last value won): it is
        # never shared, and neither is what holds it (a key equal to no other).
        if key[0] == _MAP and len(key) != 2 * len(parts) + 1:
            return make(parts), object()
        value = self._shared.get(key)
        if value is None:
            value = make(parts)
            self._shared[key] = value
        return value, key


def _construct(loader: Any, node: yaml.Node, shared: dict[Any, Any]) -> tuple[Any, bool]:
    """The document of `node` and whether it is already frozen; raises `_TooLarge`."""
    try:
        return _FastBuilder(loader, shared).build(node, 1)[0], True
    except _Unusual:
        pass
    too_large = _check_size(node)
    if too_large is not None:
        raise _TooLarge(too_large)
    return loader.construct_document(node), False


class _TooLarge(Exception):
    pass


def parse_text(text: str, source: str, shared: dict[Any, Any] | None = None) -> ParseResult:
    """The objects and problems of one file's text. Values equal to one in `shared` (given to
    the parse of every file of a load, then dropped) are that one: see `_FastBuilder`."""
    docs: list[tuple[Any, int, bool]] = []
    if shared is None:
        shared = {}
    try:
        loader = _Loader(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                line = node.start_mark.line + 1
                try:
                    doc, frozen = _construct(loader, node, shared)
                except _TooLarge as err:
                    problem = SourceProblem(source, line, str(err), severity="unreadable")
                    return ParseResult((), (problem,), failed=True)
                docs.append((doc, line, frozen))
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = f"cannot parse YAML: {err.problem or err.context or 'syntax error'}"
        problem = SourceProblem(source, line, reason, severity="unreadable")
        return ParseResult((), (problem,), failed=True)
    except yaml.YAMLError as err:
        problem = SourceProblem(source, None, f"cannot parse YAML: {err}", severity="unreadable")
        return ParseResult((), (problem,), failed=True)

    objects: list[KubeObject] = []
    problems: list[SourceProblem] = []
    for doc, line, frozen in docs:
        if doc is None:
            continue
        if _not_an_object(doc):
            problems.append(SourceProblem(source, line, NOT_AN_OBJECT, severity="warning"))
            continue
        _collect(doc, _Where(source, line, frozen), objects, problems)
    return ParseResult(tuple(objects), tuple(problems))


NOT_AN_OBJECT = (
    "not a Kubernetes object (no apiVersion or kind): skipped; --exclude the file to silence this"
)


def _not_an_object(doc: Any) -> bool:
    """A top-level document that does not even try to be an object (a List is one)."""
    if not isinstance(doc, Mapping):
        return True
    return "apiVersion" not in doc and "kind" not in doc


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a document starts, and whether `_FastBuilder` already froze it."""

    source: str
    line: int
    frozen: bool


def _collect(
    doc: Any,
    where: _Where,
    objects: list[KubeObject],
    problems: list[SourceProblem],
) -> None:
    source, line = where.source, where.line
    if not isinstance(doc, Mapping):
        problems.append(SourceProblem(source, line, "document is not an object (a mapping)"))
        return
    kind = doc.get("kind")
    api_version = doc.get("apiVersion")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in doc):
        items = doc.get("items")
        # A tuple when the fast path froze the document.
        if not isinstance(items, list | tuple):
            problems.append(SourceProblem(source, line, "kind List: items must be a list"))
            return
        for item in items:
            _collect(item, where, objects, problems)
        return
    if not isinstance(api_version, str) or not api_version:
        problems.append(SourceProblem(source, line, "apiVersion is missing or not a string"))
        return
    if not isinstance(kind, str) or not kind:
        problems.append(SourceProblem(source, line, "kind is missing or not a string"))
        return
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping):
        problems.append(
            SourceProblem(source, line, f"{kind}: metadata is missing or not a mapping")
        )
        return
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        problems.append(SourceProblem(source, line, f"{kind}: metadata.name is missing"))
        return
    namespace = metadata.get("namespace", DEFAULT_NAMESPACE)
    if namespace is None:
        namespace = DEFAULT_NAMESPACE
    if not isinstance(namespace, str):
        problems.append(
            SourceProblem(source, line, "metadata.namespace is not a string", f"{kind} {name}")
        )
        return
    namespace = namespace or DEFAULT_NAMESPACE
    objects.append(
        KubeObject(
            api_version=api_version,
            kind=kind,
            namespace=namespace,
            name=name,
            raw=_raw(doc, metadata, namespace, where.frozen),
            origin=Origin(source, line),
        )
    )


def _raw(doc: Mapping[Any, Any], metadata: Mapping[Any, Any], namespace: str, frozen: bool) -> Any:
    """The object's frozen content, its namespace filled in."""
    if frozen and metadata.get("namespace") == namespace:
        return doc  # what the lines below would build: equal in every part, type and order
    raw = dict(doc)
    if frozen:
        # Already frozen with string keys: only the two changed mappings are new.
        raw["metadata"] = frozen_dict({**metadata, "namespace": namespace})
        return frozen_dict(raw)
    raw["metadata"] = {**metadata, "namespace": namespace}
    return freeze(raw)

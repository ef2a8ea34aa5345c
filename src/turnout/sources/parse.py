"""Turns YAML/JSON text into objects, reporting every problem with its file and line.

Multi-document YAML and `kind: List` both work. A document that is not a Kubernetes object at all
(neither apiVersion nor kind: a `kustomization.yaml`, Helm `values.yaml`, a list of strings) is
skipped with a warning; one that is an object but malformed (apiVersion without kind, no name, a
field of the wrong type at the top) becomes an error `SourceProblem`. The other documents of the
file are kept. A file that does not parse at all yields only a problem, so
the caller can keep the file's last good objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from turnout.objects import DEFAULT_NAMESPACE, KubeObject, Origin, freeze
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
    """SafeLoader that keeps timestamps as strings (Kubernetes treats them as RFC 3339 text)."""


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


def parse_text(text: str, source: str) -> ParseResult:
    docs: list[tuple[Any, int]] = []
    try:
        loader = _Loader(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                line = node.start_mark.line + 1
                too_large = _check_size(node)
                if too_large is not None:
                    problem = SourceProblem(source, line, too_large, severity="unreadable")
                    return ParseResult((), (problem,), failed=True)
                docs.append((loader.construct_document(node), line))
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
    for doc, line in docs:
        if doc is None:
            continue
        if _not_an_object(doc):
            problems.append(SourceProblem(source, line, NOT_AN_OBJECT, severity="warning"))
            continue
        _collect(doc, source, line, objects, problems)
    return ParseResult(tuple(objects), tuple(problems))


NOT_AN_OBJECT = (
    "not a Kubernetes object (no apiVersion or kind): skipped; --exclude the file to silence this"
)


def _not_an_object(doc: Any) -> bool:
    """A top-level document that does not even try to be an object (a List is one)."""
    if not isinstance(doc, Mapping):
        return True
    return "apiVersion" not in doc and "kind" not in doc


def _collect(
    doc: Any,
    source: str,
    line: int,
    objects: list[KubeObject],
    problems: list[SourceProblem],
) -> None:
    if not isinstance(doc, Mapping):
        problems.append(SourceProblem(source, line, "document is not an object (a mapping)"))
        return
    kind = doc.get("kind")
    api_version = doc.get("apiVersion")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in doc):
        items = doc.get("items")
        if not isinstance(items, list):
            problems.append(SourceProblem(source, line, "kind List: items must be a list"))
            return
        for item in items:
            _collect(item, source, line, objects, problems)
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
    raw = dict(doc)
    raw["metadata"] = {**metadata, "namespace": namespace or DEFAULT_NAMESPACE}
    objects.append(
        KubeObject(
            api_version=api_version,
            kind=kind,
            namespace=namespace or DEFAULT_NAMESPACE,
            name=name,
            raw=freeze(raw),
            origin=Origin(source, line),
        )
    )

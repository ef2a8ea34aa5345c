"""The CRD schemas in deploy/ and the dialects' readers agree, both ways.

Every field a reader reads (recorded over all fixtures, conformance cases, case modules and objects
built from the tables) is in the dialect's field table with the same type and bounds, and every
field of the table is read: where a reader checks an object's keys, the keys it accepts are
exactly the table's."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.cases import health_port, httpproxy_policies, oidc
from turnout.dialects import fields as reader_fields
from turnout.dialects.contour import schema as contour_schema
from turnout.dialects.contour_route import schema as route_schema
from turnout.dialects.contour_route.spec import parse_route
from turnout.dialects.httpproxy import schema as httpproxy_schema
from turnout.dialects.httpproxy.extension_service import read_extension
from turnout.dialects.httpproxy.spec import parse_proxy
from turnout.dialects.ingressroute import schema as ingressroute_schema
from turnout.dialects.ingressroute.spec import parse_ingressroute
from turnout.dialects.openapi import Field, paths, string
from turnout.dialects.routegroup import schema as routegroup_schema
from turnout.dialects.routegroup.spec import BackendType, parse_routegroup
from turnout.graph.secret_data import delegation_permitted
from turnout.objects import KubeObject
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

ROOT = Path(__file__).resolve().parents[2]
INDEX = re.compile(r"\[\d+\]")


@dataclass(frozen=True)
class Dialect:
    api_version: str
    kind: str
    spec: Field
    read: Callable[[KubeObject], object]


DIALECTS = (
    Dialect("projectcontour.io/v1", "HTTPProxy", httpproxy_schema.SPEC, parse_proxy),
    Dialect(
        "projectcontour.io/v1alpha1",
        "ExtensionService",
        httpproxy_schema.EXTENSION_SERVICE_SPEC,
        read_extension,
    ),
    Dialect(
        "contour.heptio.com/v1beta1", "IngressRoute", ingressroute_schema.SPEC, parse_ingressroute
    ),
    Dialect("contour.heptio.com/v1alpha1", "Route", route_schema.SPEC, parse_route),
    Dialect("zalando.org/v1", "RouteGroup", routegroup_schema.SPEC, parse_routegroup),
)


@dataclass
class Read:
    """What the readers did at one field path."""

    types: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)  # the keys an object there may have
    bounds: set[tuple[int | None, int | None]] = field(default_factory=set)


Recorded = dict[str, Read]


_ACCESSORS = ("check_fields", "mapping", "optional_integer", "string", "boolean", "sequence")
_TYPE_OF = {"string": "string", "boolean": "boolean", "sequence": "array"}


def _reader_classes(cls: type) -> Iterator[type]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _reader_classes(sub)


def _recording(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """Wraps the accessors of `FieldReader` and of every reader subclass that overrides one."""
    reads: Recorded = defaultdict(Read)

    def at(path: str) -> Read:
        return reads[INDEX.sub("[]", path)]

    def note(name: str, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if name == "check_fields":
            at(a[1]).types.add("object")
            at(a[1]).keys.update(a[2], *a[3:], *kw.values())
        elif name == "mapping":
            at(a[1]).types.add("object")
        elif name == "optional_integer":
            args = dict(zip(("required", "minimum", "maximum"), a[3:], strict=False)) | kw
            at(f"{a[2]}.{a[1]}").types.add("integer")
            at(f"{a[2]}.{a[1]}").bounds.add((args.get("minimum"), args.get("maximum")))
        else:
            at(f"{a[2]}.{a[1]}").types.add(_TYPE_OF[name])

    def wrapped(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def accessor(self: Any, *a: Any, **kw: Any) -> Any:
            note(name, a, kw)
            return fn(self, *a, **kw)

        return accessor

    for cls in set(_reader_classes(reader_fields.FieldReader)):
        for name in _ACCESSORS:
            if name in vars(cls):
                monkeypatch.setattr(cls, name, wrapped(vars(cls)[name], name))
    return reads


# --- the corpus -----------------------------------------------------------------------------------


def _fixture_objects() -> Iterator[KubeObject]:
    for base in ("tests/fixtures", "tests/conformance"):
        for path in sorted((ROOT / base).rglob("*.yaml")):
            yield from parse_text(path.read_text(), str(path)).objects


def _case_objects() -> Iterator[KubeObject]:
    modules: tuple[ModuleType, ...] = (health_port, httpproxy_policies, oidc)
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, str) and "apiVersion" in value:
                yield from parse_text(value, f"{module.__name__}.{name}").objects
    rng = random.Random(12)
    for fuzz in (False, True):
        for _ in range(200):
            route = httpproxy_policies.random_route(rng, fuzz)
            yield _object("projectcontour.io/v1", "HTTPProxy", {"routes": [route]})


def _object(api_version: str, kind: str, spec: Any) -> KubeObject:
    text = yaml.safe_dump(
        {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    )
    return parse_text(text, "table").objects[0]


def example(f: Field) -> Any:
    """A value of `f`'s type with every field set."""
    if f.type == "array":
        return [example(Field("", f.items or "string", fields=f.fields))]
    if f.type in ("object", "opaque"):
        if f.items == "string":
            return {"k": "v"}
        return {c.name: example(c) for c in f.fields}
    if f.type == "integer":
        return f.minimum if f.minimum is not None else 1
    if f.type == "boolean":
        return True
    if f.type == "int-or-string":
        return 80
    return f.enum[0] if f.enum else "/x"


def only(f: Field, path: tuple[str, ...]) -> Any:
    """A value of `f` with only the field at `path` (and what leads to it) set."""
    if not path:
        return example(f)
    child = f.child(path[0])
    assert child is not None
    value = only(child, path[1:])
    if f.type == "array":
        return [{child.name: value}]
    return {child.name: value}


def _table_objects(d: Dialect) -> Iterator[KubeObject]:
    yield _object(d.api_version, d.kind, example(d.spec))
    for p, _ in paths(d.spec):
        names = tuple(n for n in p.replace("[]", "").split(".")[1:])
        yield _object(d.api_version, d.kind, only(d.spec, names))


@pytest.fixture(scope="module")
def corpus() -> list[KubeObject]:
    return [*_fixture_objects(), *_case_objects()]


def _read_all(d: Dialect, objects: list[KubeObject]) -> Recorded:
    with pytest.MonkeyPatch.context() as monkeypatch:
        reads = _recording(monkeypatch)
        for obj in [*objects, *_table_objects(d)]:
            if (obj.api_version, obj.kind) == (d.api_version, d.kind):
                d.read(obj)
    return reads


@pytest.fixture(scope="module")
def reads(corpus: list[KubeObject]) -> dict[str, Recorded]:
    return {d.kind: _read_all(d, corpus) for d in DIALECTS}


# --- the checks -----------------------------------------------------------------------------------


def _table(spec: Field) -> dict[str, Field]:
    """Every field path of the table that the reader reads (not what lies in an opaque field)."""
    return dict(paths(spec))


def _schema_type(f: Field) -> set[str]:
    return {"int-or-string": {"integer", "string"}}.get(f.type, {f.type})


def unknown_to_the_table(d: Dialect, reads: Recorded) -> list[str]:
    """Fields the reader reads that the table lacks or types otherwise."""
    table = _table(d.spec)
    out = []
    for path, read in reads.items():
        f = table.get(path)
        if f is None:
            out.append(f"{path}: not in the table")
            continue
        allowed = _schema_type(f) | ({"object"} if f.type == "opaque" else set())
        if not read.types <= allowed:
            out.append(f"{path}: read as {sorted(read.types)}, the table says {f.type}")
        if f.type == "object" and read.keys and read.keys != {c.name for c in f.fields}:
            out.append(f"{path}: keys {sorted(read.keys)}, the table's differ")
        for bounds in read.bounds - {(None, None)}:
            if bounds != (f.minimum, f.maximum):
                out.append(f"{path}: bounds {bounds}, the table's {(f.minimum, f.maximum)}")
    return out


def unread(d: Dialect, reads: Recorded) -> list[str]:
    """Fields of the table no reader takes."""
    accepted = {f"{p}.{k}" for p, r in reads.items() for k in r.keys}
    return [p for p in _table(d.spec) if p != "spec" and p.removesuffix("[]") not in accepted]


@pytest.mark.parametrize("d", DIALECTS, ids=lambda d: d.kind)
def test_every_field_the_reader_reads_is_in_the_table(
    d: Dialect, reads: dict[str, Recorded]
) -> None:
    assert len(reads[d.kind]) > 5, "the reader read nothing"
    assert unknown_to_the_table(d, reads[d.kind]) == []


@pytest.mark.parametrize("d", DIALECTS, ids=lambda d: d.kind)
def test_every_field_of_the_table_is_read(d: Dialect, reads: dict[str, Recorded]) -> None:
    assert unread(d, reads[d.kind]) == []


def _without(f: Field, name: str) -> Field:
    return replace(f, fields=tuple(_without(c, name) for c in f.fields if c.name != name))


def test_a_field_missing_from_the_table_or_one_too_many_is_caught(
    corpus: list[KubeObject], reads: dict[str, Recorded]
) -> None:
    route = next(d for d in DIALECTS if d.kind == "Route")
    short = replace(route, spec=_without(route.spec, "weight"))
    assert "spec.routes[].upstreams[].weight: not in the table" in unknown_to_the_table(
        short, reads["Route"]
    )
    extra = replace(route, spec=replace(route.spec, fields=(*route.spec.fields, string("port"))))
    assert unread(extra, _read_all(extra, corpus)) == ["spec.port"]


def _delegation(spec: Any) -> KubeObject:
    raw = {"metadata": {"name": "d", "namespace": "certs"}, "spec": spec}
    text = yaml.safe_dump(
        {"apiVersion": "projectcontour.io/v1", "kind": "TLSCertificateDelegation"} | raw
    )
    return parse_text(text, "delegation").objects[0]


def test_the_delegation_table_is_what_the_secret_reader_reads() -> None:
    table = contour_schema.DELEGATION_SPEC
    full = {"delegations": [{"secretName": "s", "targetNamespaces": ["app"]}]}
    assert set(example(table)["delegations"][0]) == set(full["delegations"][0])
    assert delegation_permitted(Snapshot.of([_delegation(full)]), "certs", "s", "app")
    for key in full["delegations"][0]:
        partial = {"delegations": [{k: v for k, v in full["delegations"][0].items() if k != key}]}
        assert not delegation_permitted(Snapshot.of([_delegation(partial)]), "certs", "s", "app")


def test_the_routegroup_backend_type_enum_is_every_type_the_reader_takes() -> None:
    assert tuple(t.value for t in BackendType) == routegroup_schema.BACKEND_TYPES

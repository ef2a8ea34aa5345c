"""Declarative field tables of the custom resources turnout reads, and their OpenAPI v3 schema.

Each dialect states its API's fields once, in its `schema.py`, with these builders; the CRDs in
`deploy/` are rendered from the tables (`turnout manifests`), and a test records every field the
dialect's reader reads over all fixtures and checks it against the table both ways, so the schema
the API server enforces and the fields turnout reads cannot drift apart. List lengths come from
the same caps the readers enforce (`fields.list_cap`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from turnout.dialects.fields import list_cap

FieldType = Literal["string", "integer", "boolean", "object", "array", "opaque", "int-or-string"]


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its type, and for an object (or a list of objects) its own fields."""

    name: str
    type: FieldType
    fields: tuple[Field, ...] = ()
    # The type of each entry of an array: "string", "integer" or "object" (then `fields`).
    items: FieldType | None = None
    required: bool = False
    enum: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    max_items: int | None = None
    description: str = ""

    def child(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


def string(
    name: str, *, required: bool = False, enum: tuple[str, ...] = (), description: str = ""
) -> Field:
    return Field(name, "string", required=required, enum=enum, description=description)


def integer(
    name: str,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    required: bool = False,
    description: str = "",
) -> Field:
    return Field(
        name, "integer", required=required, minimum=minimum, maximum=maximum,
        description=description,
    )  # fmt: skip


def int_or_string(name: str, *, required: bool = False, description: str = "") -> Field:
    return Field(name, "int-or-string", required=required, description=description)


def boolean(name: str, *, description: str = "") -> Field:
    return Field(name, "boolean", description=description)


def obj(name: str, *fields: Field, required: bool = False, description: str = "") -> Field:
    return Field(name, "object", fields=fields, required=required, description=description)


def string_map(name: str, *, description: str = "") -> Field:
    """An object whose keys are free and whose values are strings (labels, context entries)."""
    return Field(name, "object", items="string", description=description)


def opaque(name: str, *, description: str = "") -> Field:
    """A field turnout knows but refuses or ignores: the API takes it, turnout reads no deeper."""
    return Field(name, "opaque", description=description)


def opaque_list(name: str, *, description: str = "") -> Field:
    """A list turnout knows but refuses or ignores: its entries are kept as written."""
    return Field(name, "array", items="opaque", max_items=list_cap(name), description=description)


def objects(
    name: str,
    *fields: Field,
    required: bool = False,
    max_items: int | None = None,
    description: str = "",
) -> Field:
    cap = list_cap(name) if max_items is None else max_items
    return Field(
        name, "array", fields=fields, items="object", required=required, max_items=cap,
        description=description,
    )  # fmt: skip


def strings(
    name: str, *, required: bool = False, max_items: int | None = None, description: str = ""
) -> Field:
    cap = list_cap(name) if max_items is None else max_items
    return Field(
        name, "array", items="string", required=required, max_items=cap, description=description
    )


def integers(name: str, *, max_items: int | None = None, description: str = "") -> Field:
    cap = list_cap(name) if max_items is None else max_items
    return Field(name, "array", items="integer", max_items=cap, description=description)


def paths(field: Field, prefix: str = "") -> Iterator[tuple[str, Field]]:
    """Every field under `field` by path as the readers write it, list entries as `[]`
    (`spec.routes[].services[].name`); `field` itself first."""
    here = f"{prefix}.{field.name}" if prefix else field.name
    yield here, field
    inner = f"{here}[]" if field.type == "array" else here
    if field.type == "array" and field.items == "object":
        yield inner, Field(field.name, "object", fields=field.fields)
    for f in field.fields:
        yield from paths(f, inner)


def openapi(field: Field) -> dict[str, Any]:
    """The OpenAPI v3 (structural) schema of `field`."""
    out: dict[str, Any] = {}
    if field.description:
        out["description"] = field.description
    if field.type == "array":
        item = Field("", field.items or "string", fields=field.fields)
        out.update(type="array", items=openapi(item))
        if field.max_items is not None:
            out["maxItems"] = field.max_items
    elif field.type == "object":
        out.update(_object(field))
    elif field.type == "opaque":
        out.update({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    elif field.type == "int-or-string":
        out["x-kubernetes-int-or-string"] = True
    else:
        out["type"] = field.type
        if field.enum:
            out["enum"] = list(field.enum)
        if field.minimum is not None:
            out["minimum"] = field.minimum
        if field.maximum is not None:
            out["maximum"] = field.maximum
    return out


def _object(field: Field) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    if field.items == "string":
        out["additionalProperties"] = {"type": "string"}
    if field.fields:
        out["properties"] = {f.name: openapi(f) for f in field.fields}
        required = [f.name for f in field.fields if f.required]
        if required:
            out["required"] = required
    return out


@dataclass(frozen=True, slots=True)
class Column:
    """One `kubectl get` column of a CRD (`additionalPrinterColumns`)."""

    name: str
    json_path: str
    description: str = ""
    type: str = "string"

    def manifest(self) -> dict[str, str]:
        out = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        return out


def known(field: Field, path: str) -> frozenset[str]:
    """The names of the fields of the object at `path` (as `paths` writes it): the keys a reader
    built on this table accepts there."""
    found = dict(paths(field)).get(path)
    if found is None:
        raise KeyError(path)
    return frozenset(f.name for f in found.fields)

"""An object turnout reads without an error is one its CRD admits, unchanged: the schema in deploy/
is never stricter than the reader, and the API server prunes none of the fields turnout reads.

The API server's checks of a structural schema (type, properties and pruning of unknown fields,
required, enum, bounds, maxItems, int-or-string, preserve-unknown-fields) are applied here by a
small validator to every fixture object of the CRD kinds."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import httpproxy_policies
from turnout.dialects.contour_route.spec import parse_route
from turnout.dialects.httpproxy.extension_service import read_extension
from turnout.dialects.httpproxy.spec import parse_proxy
from turnout.dialects.ingressroute.spec import parse_ingressroute
from turnout.dialects.routegroup.spec import parse_routegroup
from turnout.objects import KubeObject, thaw
from turnout.sources.parse import parse_text

ROOT = Path(__file__).resolve().parents[2]


def _errors_free(problems: Any) -> bool:
    return not any(not p.warning for p in problems)


READERS: dict[tuple[str, str], Callable[[KubeObject], bool]] = {
    ("projectcontour.io/v1", "HTTPProxy"): lambda o: _errors_free(parse_proxy(o).problems),
    ("projectcontour.io/v1alpha1", "ExtensionService"): lambda o: _errors_free(
        read_extension(o)[1]
    ),
    ("contour.heptio.com/v1beta1", "IngressRoute"): lambda o: parse_ingressroute(o).valid,
    ("contour.heptio.com/v1alpha1", "Route"): lambda o: parse_route(o).valid,
    ("zalando.org/v1", "RouteGroup"): lambda o: parse_routegroup(o).valid,
}


def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for doc in yaml.safe_load_all((ROOT / "deploy" / "00-crds.yaml").read_text()):
        spec = doc["spec"]
        (version,) = spec["versions"]
        key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
        out[key] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return out


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def violations(schema: dict[str, Any], value: Any, path: str) -> Iterator[str]:
    """What the API server would refuse (or prune) in `value`."""
    if schema.get("x-kubernetes-int-or-string"):
        if not (_TYPES["integer"](value) or _TYPES["string"](value)):
            yield f"{path}: must be an integer or a string"
        return
    if not _TYPES[schema["type"]](value):
        yield f"{path}: must be of type {schema['type']}"
        return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{path}: must be one of {schema['enum']}"
    if schema.get("minimum") is not None and value < schema["minimum"]:
        yield f"{path}: below {schema['minimum']}"
    if schema.get("maximum") is not None and value > schema["maximum"]:
        yield f"{path}: above {schema['maximum']}"
    if schema["type"] == "array":
        if len(value) > schema["maxItems"]:
            yield f"{path}: more than {schema['maxItems']} items"
        for i, item in enumerate(value):
            yield from violations(schema["items"], item, f"{path}[{i}]")
    if schema["type"] == "object":
        yield from _object_violations(schema, value, path)


def _object_violations(schema: dict[str, Any], value: dict[str, Any], path: str) -> Iterator[str]:
    for name in schema.get("required", []):
        if name not in value:
            yield f"{path}.{name}: required"
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if item is None:
            continue  # the API server drops nulls of fields that are not nullable
        if key in properties:
            yield from violations(properties[key], item, f"{path}.{key}")
        elif extra is not None:
            yield from violations(extra, item, f"{path}.{key}")
        else:
            yield f"{path}.{key}: pruned (not in the schema)"


def _objects() -> Iterator[KubeObject]:
    texts = [
        (str(path), path.read_text())
        for base in ("tests/fixtures", "tests/conformance", "examples")
        for path in sorted((ROOT / base).rglob("*.yaml"))
    ]
    # Random routes built only of values that compile (tests/cases/httpproxy_policies.py).
    rng = random.Random(7)
    for i in range(300):
        route = httpproxy_policies.random_route(rng, fuzz=False)
        proxy = {"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy"}
        proxy |= {"metadata": {"name": f"p{i}"}, "spec": {"routes": [route]}}
        texts.append((f"random-{i}", yaml.safe_dump(proxy)))
    for source, text in texts:
        for obj in parse_text(text, source).objects:
            if (obj.api_version, obj.kind) in READERS:
                yield obj


def test_every_object_turnout_reads_without_error_is_admitted_unchanged() -> None:
    schemas = _schemas()
    checked = 0
    refused = []
    for obj in _objects():
        if obj.spec is None or not READERS[obj.api_version, obj.kind](obj):
            continue
        checked += 1
        schema = schemas[obj.api_version, obj.kind]
        found = list(violations(schema, thaw(obj.spec), "spec"))
        if found:
            refused.append(f"{obj.origin}: {obj.kind} {obj.namespace}/{obj.name}: {found}")
    assert checked > 100
    assert refused == []


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"virtualhost": {"fqdn": 7}}, "spec.virtualhost.fqdn: must be of type string"),
        ({"routes": [{"servicez": []}]}, "spec.routes[0].servicez: pruned (not in the schema)"),
        ({"routes": [{}] * 257}, "spec.routes: more than 256 items"),
        ({"routes": [{"services": [{"port": 80}]}]}, "spec.routes[0].services[0].name: required"),
    ],
)
def test_the_validator_refuses_what_the_api_server_would(spec: Any, problem: str) -> None:
    schema = _schemas()["projectcontour.io/v1", "HTTPProxy"]
    assert problem in list(violations(schema, spec, "spec"))

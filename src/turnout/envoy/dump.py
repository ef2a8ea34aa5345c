"""Envoy resources as Envoy's own JSON, grouped by xDS type, with key material redacted: what
`turnout translate` prints and the admin API serves at /debug/xds.

Redaction: the value of every field that holds key material (`private_key`, `password`,
`generic_secret`, `session_ticket_keys`, `private_key_provider`), in any resource, becomes
`"[redacted]"`, except `filename` and `environment_variable`, which say where the key is, not
what it is. Certificates, CA bundles and CRLs are public and stay, so a served chain can be
compared with the one expected.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format

from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    SECRET_TYPE,
    EnvoyResources,
)

REDACTED = "[redacted]"

# The names `--type` and `?type=` take, in the order they are shown.
TYPE_URLS = {
    "listeners": LISTENER_TYPE,
    "routes": ROUTE_TYPE,
    "clusters": CLUSTER_TYPE,
    "endpoints": ENDPOINT_TYPE,
    "secrets": SECRET_TYPE,
    "scoped_routes": SCOPED_ROUTE_TYPE,
}
# Shown under `all` only when there are some (`--scoped-routes-min-hosts`).
_OPTIONAL = frozenset({"scoped_routes"})
ALL = "all"
TYPE_CHOICES = (*TYPE_URLS, ALL)

KEY_FIELDS = frozenset(
    {"private_key", "password", "generic_secret", "session_ticket_keys", "private_key_provider"}
)
# Inside a key field: where the key is kept, which is no secret and helps debugging.
KEY_LOCATIONS = frozenset({"filename", "environment_variable"})


def resources_document(resources: EnvoyResources, type_name: str = ALL) -> dict[str, Any]:
    """`{type: {typeUrl, resources: [...]}}` for every type (or only `type_name`), each resource
    as Envoy's JSON with proto field names. Raises ValueError for an unknown type name."""
    if type_name not in TYPE_CHOICES:
        raise ValueError(f"unknown type {type_name!r}: expected one of {', '.join(TYPE_CHOICES)}")
    by_url = resources.by_type()
    chosen = (
        tuple(n for n in TYPE_URLS if n not in _OPTIONAL or by_url[TYPE_URLS[n]])
        if type_name == ALL
        else (type_name,)
    )
    return {
        name: {
            "typeUrl": TYPE_URLS[name],
            "resources": [redact(_to_dict(m)) for m in by_url[TYPE_URLS[name]]],
        }
        for name in chosen
    }


def render(document: dict[str, Any], fmt: str) -> str:
    """`document` as JSON (`fmt` "json") or YAML, ending in a newline."""
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False, default_flow_style=False))


def _to_dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


def redact(value: Any, inside_key: bool = False) -> Any:
    """`value` with the key material in it replaced by REDACTED (see the module doc)."""
    if isinstance(value, dict):
        return {
            k: v if inside_key and k in KEY_LOCATIONS else redact(v, inside_key or k in KEY_FIELDS)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v, inside_key) for v in value]
    return REDACTED if inside_key else value

"""Checks over translated protobuf messages that several translation tests share."""

from __future__ import annotations

from typing import Any

from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from google.protobuf import descriptor_pool, message_factory


def deprecated_fields(message: Any, path: str = "") -> list[str]:
    """Every deprecated field set anywhere in `message`, looking inside `Any`s too."""
    found: list[str] = []
    if message.DESCRIPTOR.full_name == "google.protobuf.Any":
        desc = descriptor_pool.Default().FindMessageTypeByName(message.TypeName())
        inner = message_factory.GetMessageClass(desc)()
        message.Unpack(inner)
        return deprecated_fields(inner, path)
    for field, value in message.ListFields():
        here = f"{path}.{field.name}"
        if field.GetOptions().deprecated:
            found.append(here)
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            values = list(value.values())
        elif field.is_repeated:
            values = list(value)
        else:
            values = [value]
        for v in values:
            if hasattr(v, "DESCRIPTOR"):
                found.extend(deprecated_fields(v, here))
    return found


def chain_hcm(chain: Any) -> Any:
    (flt,) = chain.filters
    hcm = hcm_pb2.HttpConnectionManager()
    assert flt.typed_config.Unpack(hcm)
    return hcm

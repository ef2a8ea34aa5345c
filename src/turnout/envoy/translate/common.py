"""Small helpers shared by the translation modules."""

from __future__ import annotations

from typing import Any

from envoy.config.core.v3 import config_source_pb2
from google.protobuf import any_pb2, duration_pb2


def pack(message: Any) -> Any:
    """Wraps a message in `google.protobuf.Any` with deterministic bytes (maps sorted)."""
    packed = any_pb2.Any()
    packed.Pack(message, deterministic=True)
    return packed


def ads_config_source() -> Any:
    """`{ads: {}, resource_api_version: V3}`: every dynamic resource comes over one ADS stream."""
    source = config_source_pb2.ConfigSource()
    source.ads.SetInParent()
    source.resource_api_version = config_source_pb2.V3
    return source


def duration(seconds: float) -> Any:
    d = duration_pb2.Duration()
    # Rounded to whole nanoseconds so float noise never changes the serialized bytes.
    d.FromNanoseconds(round(seconds * 1_000_000_000))
    return d

"""HTTPProxy's `rateLimitPolicy.global` (virtual host and routes): the descriptors Envoy sends to
the operator's rate limit service (`--rate-limit-service`), as Contour's
`GlobalRateLimitPolicy` defines them.

Reading (`read_global`, from `vhost_policies`' reader) checks the CRD's rules: at least one
descriptor, at least one entry per descriptor, exactly one kind per entry (`remoteAddress`,
`requestHeader {headerName, descriptorKey}`, `requestHeaderValueMatch {headers, value,
expectMatch}`, `genericKey {key, value}`), and the header operators Contour takes there
(`present`, `notpresent`, `contains`, `notcontains`, `exact`, `notexact`). It yields the graph's
`GlobalRateLimit` directly: nothing in it depends on other objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.dialects.httpproxy.upstream import Reader
from turnout.graph.model import (
    DescriptorEntry,
    GenericKeyEntry,
    GlobalRateLimit,
    HeaderMatch,
    HeaderValueMatchEntry,
    RateLimitDescriptor,
    RemoteAddressEntry,
    RequestHeaderEntry,
    StringMatchKind,
)

# The flag a user must give before a global policy can work; statuses name it.
SERVICE_FLAG = "--rate-limit-service"

_GLOBAL_FIELDS = frozenset({"disabled", "descriptors"})
_ENTRY_KINDS = ("remoteAddress", "requestHeader", "requestHeaderValueMatch", "genericKey")
_HEADER_FIELDS = frozenset(
    {"name", "present", "notpresent", "contains", "notcontains", "exact", "notexact"}
    | {"ignoreCase", "treatMissingAsEmpty"}
)


def read_global(r: Reader, value: Any, path: str) -> GlobalRateLimit | None:
    """`rateLimitPolicy.global` at `path`: `disabled: true` wins over descriptors (Contour)."""
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _GLOBAL_FIELDS)
    if r.boolean(m, "disabled", path):
        return GlobalRateLimit(disabled=True)
    descriptors: list[RateLimitDescriptor] = []
    items = r.items(m, "descriptors", path)
    if not items:
        r.error(f"{path}.descriptors: at least one descriptor is required")
    for where, item in items:
        descriptor = _descriptor(r, item, where)
        if descriptor is not None:
            descriptors.append(descriptor)
    return GlobalRateLimit(descriptors=tuple(descriptors))


def _descriptor(r: Reader, value: Any, path: str) -> RateLimitDescriptor | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, frozenset({"entries"}))
    items = r.items(m, "entries", path)
    if not items:
        r.error(f"{path}.entries: at least one entry is required")
        return None
    entries = [_entry(r, item, where) for where, item in items]
    if any(e is None for e in entries):
        return None
    return RateLimitDescriptor(tuple(e for e in entries if e is not None))


def _entry(r: Reader, value: Any, path: str) -> DescriptorEntry | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, frozenset(_ENTRY_KINDS))
    kinds = [k for k in _ENTRY_KINDS if m.get(k) is not None]
    if len(kinds) != 1:
        r.error(
            f"{path}: exactly one of {', '.join(_ENTRY_KINDS)} must be set, got "
            f"{', '.join(kinds) or 'none'}"
        )
        return None
    kind = kinds[0]
    where = f"{path}.{kind}"
    body = r.mapping(m[kind], where)
    if body is None:
        return None
    if kind == "remoteAddress":
        r.check_fields(body, where, frozenset())
        return RemoteAddressEntry()
    if kind == "genericKey":
        r.check_fields(body, where, frozenset({"key", "value"}))
        value_ = r.string(body, "value", where, required=True)
        key = r.string(body, "key", where) or "generic_key"
        return GenericKeyEntry(value=value_, key=key) if value_ else None
    if kind == "requestHeader":
        return _request_header(r, body, where)
    return _header_value_match(r, body, where)


def _request_header(r: Reader, m: Mapping[str, Any], path: str) -> DescriptorEntry | None:
    r.check_fields(m, path, frozenset({"headerName", "descriptorKey"}))
    name = r.string(m, "headerName", path, required=True)
    key = r.string(m, "descriptorKey", path, required=True)
    if not name or not key:
        return None
    return RequestHeaderEntry(header_name=name.lower(), descriptor_key=key)


def _header_value_match(r: Reader, m: Mapping[str, Any], path: str) -> DescriptorEntry | None:
    r.check_fields(m, path, frozenset({"headers", "value", "expectMatch"}))
    value = r.string(m, "value", path, required=True)
    headers: list[HeaderMatch] = []
    items = r.items(m, "headers", path)
    if not items:
        r.error(f"{path}.headers: at least one header is required")
    for where, item in items:
        header = _header(r, item, where)
        if header is None:
            return None
        headers.append(header)
    if not value or not headers:
        return None
    # `expectMatch` defaults to true (the CRD's default).
    expect = m.get("expectMatch") is None or r.boolean(m, "expectMatch", path)
    return HeaderValueMatchEntry(value=value, headers=tuple(headers), expect_match=expect)


def _header(r: Reader, value: Any, path: str) -> HeaderMatch | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _HEADER_FIELDS)
    name = r.string(m, "name", path, required=True).lower()
    ignore_case = r.boolean(m, "ignoreCase", path)
    missing_empty = r.boolean(m, "treatMissingAsEmpty", path)
    found: list[HeaderMatch] = []
    if r.boolean(m, "present", path):
        found.append(HeaderMatch(name, StringMatchKind.PRESENT))
    if r.boolean(m, "notpresent", path):
        found.append(HeaderMatch(name, StringMatchKind.PRESENT, invert=True))
    for key, kind, invert in (
        ("contains", StringMatchKind.CONTAINS, False),
        ("notcontains", StringMatchKind.CONTAINS, True),
        ("exact", StringMatchKind.EXACT, False),
        ("notexact", StringMatchKind.EXACT, True),
    ):
        text = r.string(m, key, path)
        if text:
            found.append(
                HeaderMatch(
                    name,
                    kind,
                    text,
                    invert=invert,
                    ignore_case=ignore_case,
                    treat_missing_as_empty=missing_empty and invert,
                )
            )
    if not name:
        return None
    if len(found) != 1:
        r.error(
            f"{path}: exactly one of present, notpresent, contains, notcontains, exact, "
            f"notexact must be set, got {len(found)}"
        )
        return None
    return found[0]


def missing_service_message(where: str) -> str:
    """The status message of a global policy while no rate limit service is configured."""
    return (
        f"{where} needs a global rate limit service: start turnout with "
        f"{SERVICE_FLAG} HOST:PORT (the operator's service speaking Envoy's rate limit gRPC "
        "API), or use rateLimitPolicy.local"
    )

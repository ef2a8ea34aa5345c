"""Hostname rules of the Gateway API (reference notes §2.1, the `hostnames` concept page).

A wildcard is only the leftmost label `*.` and matches one or more labels: `*.example.com`
matches `a.example.com` and `a.b.example.com`, never `example.com`. No hostname (None) matches
everything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


def _suffix(wildcard: str) -> str:
    return wildcard[1:]  # ".example.com"


def covers(pattern: str | None, hostname: str) -> bool:
    """Whether every name `hostname` (precise or wildcard) stands for is matched by `pattern`."""
    if pattern is None or pattern == hostname:
        return True
    if not pattern.startswith("*."):
        return False
    return hostname.endswith(_suffix(pattern)) and len(hostname) > len(_suffix(pattern))


def intersect(listener: str | None, route: str | None) -> str | None:
    """The names both a listener hostname and a route hostname match, as one hostname (the more
    specific of the two), or None when they share none. Both None gives "*"."""
    if listener is None:
        return route if route is not None else "*"
    if route is None:
        return listener
    if covers(listener, route):
        return route
    if covers(route, listener):
        return listener
    return None


def route_hostnames(listener: str | None, hostnames: Iterable[str]) -> tuple[str, ...]:
    """The hostnames a route serves on a listener: each route hostname intersected with the
    listener's, the ones that do not intersect dropped; a route without hostnames serves the
    listener's ("*" when it has none). Empty: the route and the listener share no name."""
    names = [h.lower() for h in hostnames]
    if not names:
        return (listener if listener is not None else "*",)
    out: dict[str, None] = {}
    for name in names:
        hit = intersect(listener, name)
        if hit is not None:
            out[hit] = None
    return tuple(out)


def specificity(hostname: str | None) -> tuple[int, int]:
    """Orders listener hostnames for picking the listener a request belongs to: a precise name
    beats any wildcard, a longer wildcard beats a shorter one, and no hostname comes last."""
    if hostname is None or hostname == "*":
        return (0, 0)
    if hostname.startswith("*."):
        return (1, len(hostname))
    return (2, len(hostname))


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def hostname_problem(hostname: str) -> str | None:
    """Why `hostname` is not a Gateway API `Hostname` (the CRD's pattern
    `^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`, at most 253
    characters, "IPs are not allowed"), or None when it is one. A single label (`localhost`) is
    a hostname. Letters are compared lower-cased, as turnout reads hostnames case-insensitively."""
    name = hostname.lower()
    if not name:
        return "is empty"
    if len(name) > 253:
        return f"is {len(name)} characters long; a hostname has at most 253"
    labels = name.split(".")
    if labels[0] == "*":
        labels = labels[1:]
        if not labels:
            return "is a lone `*`; a wildcard is a leftmost `*.` label followed by a DNS name"
    if not all(_LABEL.fullmatch(label) and len(label) <= 63 for label in labels):
        return (
            "is not a DNS name (labels of letters, digits and `-`; a wildcard only as the "
            "leftmost `*.` label; no port, no trailing dot)"
        )
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return None
    return "is an IP address; a hostname must be a DNS name"


def _proper_suffixes(hostname: str) -> list[str]:
    """The names after each label but the last: `a.b.com` and `*.b.com` give `b.com`, `com`."""
    labels = hostname.split(".")
    return [".".join(labels[i:]) for i in range(1, len(labels))]


def wider_patterns(hostname: str) -> list[str]:
    """Every hostname pattern that covers `hostname` (a precise name, a wildcard or "*" for no
    hostname) other than itself, most specific first: `a.b.com` gives `*.b.com`, `*.com`, `*`.
    Only these can be wider, so a lookup per pattern replaces a scan of all hostnames."""
    out = [f"*.{suffix}" for suffix in _proper_suffixes(hostname)]
    out = [p for p in out if p != hostname]
    if hostname != "*":
        out.append("*")
    return out


def _intersects(a: str, b: str) -> bool:
    return intersect(None if a == "*" else a, None if b == "*" else b) is not None


_Entry = tuple[int, str, T]  # (insertion sequence, hostname, value)


class HostnameIndex(Generic[T]):
    """Values by hostname ("*" for none), answering which value, first added, has a hostname
    intersecting a given one, with a few dictionary lookups instead of a scan."""

    def __init__(self) -> None:
        self._exact: dict[str, _Entry[T]] = {}
        # proper suffix -> the first entry whose hostname ends with it (a wildcard `*.suffix`
        # covers exactly those)
        self._by_suffix: dict[str, _Entry[T]] = {}
        self._oldest: _Entry[T] | None = None

    def add(self, seq: int, hostname: str, value: T) -> None:
        entry = (seq, hostname, value)
        self._exact.setdefault(hostname, entry)
        if self._oldest is None:
            self._oldest = entry
        for suffix in _proper_suffixes(hostname):
            self._by_suffix.setdefault(suffix, entry)

    def first_intersecting(self, hostname: str) -> _Entry[T] | None:
        if hostname == "*":
            return self._oldest
        candidates = [self._exact.get(p) for p in (hostname, *wider_patterns(hostname))]
        if hostname.startswith("*."):
            candidates.append(self._by_suffix.get(hostname[2:]))
        found = [c for c in candidates if c is not None]
        return min(found, key=lambda e: e[0]) if found else None


class ServedKinds(Generic[T]):
    """The hostnames routes of several kinds serve on one listener, in the order added."""

    def __init__(self) -> None:
        self._by_kind: dict[str, HostnameIndex[T]] = {}
        self._seq = 0

    def add(self, kind: str, hostname: str, value: T) -> None:
        self._by_kind.setdefault(kind, HostnameIndex()).add(self._seq, hostname, value)
        self._seq += 1

    def first_clash(self, kind: str, hostnames: Sequence[str]) -> tuple[str, T, str] | None:
        """The first added (hostname, value) of another kind than `kind` whose hostname
        intersects one of `hostnames`, with the first of `hostnames` it intersects."""
        found = [
            entry
            for other, index in self._by_kind.items()
            if other != kind
            for hostname in hostnames
            if (entry := index.first_intersecting(hostname)) is not None
        ]
        if not found:
            return None
        _, theirs, value = min(found, key=lambda e: e[0])
        hostname = next(h for h in hostnames if _intersects(theirs, h))
        return theirs, value, hostname

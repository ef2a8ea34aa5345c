"""Hostname rules of the Gateway API (reference notes §2.1, the `hostnames` concept page).

A wildcard is only the leftmost label `*.` and matches one or more labels: `*.example.com`
matches `a.example.com` and `a.b.example.com`, never `example.com`. No hostname (None) matches
everything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable


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
    out: list[str] = []
    for name in names:
        hit = intersect(listener, name)
        if hit is not None and hit not in out:
            out.append(hit)
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

"""HTTPProxy `spec.tcpproxy` as typed records, read like the rest of the spec (`spec.py`, which
imports this module); `tcpproxy.py` compiles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.dialects.httpproxy.health_check import warn_tcp_health_ports
from turnout.dialects.httpproxy.service_spec import ServiceSpec, read_service
from turnout.dialects.httpproxy.upstream import WarningReader

TCPPROXY_FIELDS = frozenset(
    {"loadBalancerPolicy", "services", "include", "includes", "healthCheckPolicy"}
)
_INCLUDE_FIELDS = frozenset({"name", "namespace"})
_LB_FIELDS = frozenset({"strategy", "requestHashPolicies"})
_HEALTH_FIELDS = frozenset(
    {"intervalSeconds", "timeoutSeconds", "unhealthyThresholdCount", "healthyThresholdCount"}
)


@dataclass(frozen=True, slots=True)
class TCPIncludeSpec:
    name: str
    namespace: str  # "" means the including proxy's namespace
    field: str


@dataclass(frozen=True, slots=True)
class TCPHealthCheckSpec:
    """0 means "Contour's default" for every number."""

    interval_seconds: int = 0
    timeout_seconds: int = 0
    unhealthy_threshold: int = 0
    healthy_threshold: int = 0


@dataclass(frozen=True, slots=True)
class TCPProxySpec:
    services: tuple[ServiceSpec, ...] = ()
    include: TCPIncludeSpec | None = None
    strategy: str = ""
    health_check: TCPHealthCheckSpec | None = None


def read_tcpproxy(r: WarningReader, value: Any, path: str) -> TCPProxySpec | None:
    """Reads `spec.tcpproxy` (`tcpproxy.py` compiles it); errors name the field."""
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, TCPPROXY_FIELDS)
    services = tuple(
        svc for where, item in r.items(m, "services", path) if (svc := read_service(r, item, where))
    )
    warn_tcp_health_ports(r, services, checked=m.get("healthCheckPolicy") is not None)
    include: TCPIncludeSpec | None = None
    for key in ("includes", "include"):  # the singular wins (Contour #2218)
        if m.get(key) is not None:
            include = _include(r, m[key], f"{path}.{key}") or include
    strategy = ""
    if m.get("loadBalancerPolicy") is not None:
        where = f"{path}.loadBalancerPolicy"
        lb = r.mapping(m["loadBalancerPolicy"], where)
        if lb is not None:
            r.check_fields(lb, where, _LB_FIELDS)
            strategy = r.string(lb, "strategy", where)
            r.items(lb, "requestHashPolicies", where)  # type-checked; never used for TCP
    health: TCPHealthCheckSpec | None = None
    if m.get("healthCheckPolicy") is not None:
        where = f"{path}.healthCheckPolicy"
        hm = r.mapping(m["healthCheckPolicy"], where)
        if hm is not None:
            r.check_fields(hm, where, _HEALTH_FIELDS)
            values = [max(r.integer(hm, key, where), 0) for key in _HEALTH_KEYS]
            health = TCPHealthCheckSpec(*values)
    return TCPProxySpec(services=services, include=include, strategy=strategy, health_check=health)


_HEALTH_KEYS = (
    "intervalSeconds",
    "timeoutSeconds",
    "unhealthyThresholdCount",
    "healthyThresholdCount",
)


def _include(r: WarningReader, value: Any, path: str) -> TCPIncludeSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _INCLUDE_FIELDS)
    return TCPIncludeSpec(
        name=r.string(m, "name", path, required=True),
        namespace=r.string(m, "namespace", path),
        field=path,
    )

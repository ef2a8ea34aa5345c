"""HTTPProxy `services[]`, of a route or of a tcpproxy, as a typed record.

A module of its own: `spec.py` reads the services of routes, `tcpproxy_spec.py` those of a
tcpproxy, and `tcpproxy_spec.py` cannot import `spec.py` (which imports it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.httpproxy.health_check import SERVICE_FIELDS as HEALTH_SERVICE_FIELDS
from turnout.dialects.httpproxy.health_check import read_health_port
from turnout.dialects.httpproxy.route_policies import (
    NO_SERVICE_POLICIES,
    SERVICE_POLICY_FIELDS,
    ServicePolicySpec,
    read_service_policies,
)
from turnout.dialects.httpproxy.upstream import (
    NO_SERVICE_UPSTREAM,
    SERVICE_FIELDS,
    ServiceUpstream,
    WarningReader,
    read_service_upstream,
)

# Fields of a service Contour supports that turnout ignores with a warning, or refuses.
_IGNORED: frozenset[str] = frozenset()
_REFUSED: frozenset[str] = frozenset()
_SERVICE_FIELDS = (
    frozenset({"name", "port", "weight", "protocol", "mirror"})
    | SERVICE_FIELDS
    | SERVICE_POLICY_FIELDS
    | HEALTH_SERVICE_FIELDS
)


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    port: int
    weight: int = 0  # 0 means unset, as in Contour (uint32 with omitempty)
    protocol: str = ""
    mirror: bool = False
    field: str = ""
    # validation, slowStartPolicy (`upstream.py`)
    upstream: ServiceUpstream = NO_SERVICE_UPSTREAM
    # requestHeadersPolicy, responseHeadersPolicy, cookieRewritePolicies (`route_policies.py`)
    backend_policies: ServicePolicySpec = NO_SERVICE_POLICIES
    health_port: int = 0  # 0: unset (`health_check.py`)
    # The fields written (not null), for rules that depend on what is set (`tcp_route.py`).
    fields: frozenset[str] = frozenset()


def read_service(r: WarningReader, value: Any, path: str) -> ServiceSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _SERVICE_FIELDS, _IGNORED, _REFUSED)
    name = r.string(m, "name", path, required=True)
    # The range (1-65535) is checked while compiling, with Contour's own message.
    port = r.integer(m, "port", path, required=True)
    weight = r.integer(m, "weight", path)
    if weight < 0:
        r.error(f"{path}.weight: must be greater than or equal to 0, got {weight}")
        weight = 0
    return ServiceSpec(
        name=name,
        port=port,
        weight=weight,
        protocol=r.string(m, "protocol", path),
        mirror=r.boolean(m, "mirror", path),
        # One string per path (`spec.routes[0].services[0]`), not one per object that has it.
        field=sys.intern(path),
        upstream=read_service_upstream(r, m, path),
        backend_policies=read_service_policies(r, m, path),
        health_port=read_health_port(r, m, path),
        fields=written(m),
    )


# Equal key sets, shared: every route and service of 10,000 objects keeps one (about 20 MiB when
# each had its own), and they are few: the schema's field combinations people write. Bounded,
# so that odd objects cannot grow it without end.
_SHARED_KEY_SETS: dict[frozenset[str], frozenset[str]] = {}
_SHARED_KEY_SETS_MAX = 4096


def written(m: Mapping[str, Any]) -> frozenset[str]:
    """The keys of `m` set to something (not null); an equal set written before is that one."""
    keys = frozenset(k for k, v in m.items() if isinstance(k, str) and v is not None)
    shared = _SHARED_KEY_SETS.get(keys)
    if shared is not None:
        return shared
    if len(_SHARED_KEY_SETS) < _SHARED_KEY_SETS_MAX:
        _SHARED_KEY_SETS[keys] = keys
    return keys

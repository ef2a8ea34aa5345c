"""Reading a RouteGroup (`zalando.org/v1`): the CRD's schema and Skipper's validator.

A RouteGroup that fails either is not served at all, as in Skipper (whose data client drops the
whole RouteGroup on a validation error). Every problem names the field it is about and, where
Skipper has one, says it in Skipper's words (`definitions/routegroupvalidator.go`,
`definitions/routegroups.go`) without its "error in route group ns/name:" prefix, which the
status of the object itself does not need.

Unknown fields are errors: `kubectl apply` validates strictly against the CRD's structural schema
(the default since Kubernetes 1.27), and a misspelled key (`backend:` for `backends:`, `method:`
for `methods:`, as seed 003 writes them) would otherwise silently send traffic elsewhere.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from turnout.dialects.condition_status import ACCEPTED as ACCEPTED
from turnout.dialects.condition_status import RESOLVED_REFS as RESOLVED_REFS
from turnout.dialects.condition_status import Problem as Problem
from turnout.dialects.fields import (
    FieldReader,
    backends_over_problem,
    describe,
    total_routes_problem,
)
from turnout.dialects.openapi import known
from turnout.dialects.routegroup.schema import SPEC
from turnout.objects import KubeObject
from turnout.store import Snapshot

API_VERSION = "zalando.org/v1"
KIND = "RouteGroup"
GROUP = "zalando.org"
CLASS_ANNOTATION = "zalando.org/routegroup.class"


# The CRD's enums (zalando.org_routegroups.yaml).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE")
ALGORITHMS = (
    "roundRobin",
    "random",
    "consistentHash",
    "powerOfRandomNChoices",
    "weightedRoundRobin",
    "leastRequests",
)
# The CRD's host pattern: lower-case DNS names, no wildcard, no port.
HOST_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_HOST_LENGTH = 255


def _class_pattern(routegroup_class: str) -> re.Pattern[str]:
    """A pattern that is not a valid regular expression matches itself literally."""
    try:
        return re.compile(routegroup_class)
    except re.error:
        return re.compile(re.escape(routegroup_class))


def routegroups_of_class(snapshot: Snapshot, routegroup_class: str | None) -> list[KubeObject]:
    """The snapshot's RouteGroups that a `routegroup_class` pattern selects (None: all). A
    RouteGroup without the class annotation is always selected, as in Skipper; a pattern that is
    not a valid regular expression matches itself literally."""
    if routegroup_class is None:
        return list(snapshot.kind(GROUP, KIND))
    pattern = _class_pattern(routegroup_class)
    return [
        obj
        for obj in snapshot.kind(GROUP, KIND)
        if not (cls := obj.annotations.get(CLASS_ANNOTATION)) or pattern.search(str(cls))
    ]


def routegroups_of_other_classes(
    snapshot: Snapshot, routegroup_class: str
) -> list[tuple[KubeObject, str]]:
    """The RouteGroups `routegroups_of_class` leaves out, each with the reason."""
    pattern = _class_pattern(routegroup_class)
    return [
        (
            obj,
            f"annotation {CLASS_ANNOTATION} {str(cls)!r} does not match turnout's RouteGroup "
            f"class {routegroup_class!r}",
        )
        for obj in snapshot.kind(GROUP, KIND)
        if (cls := obj.annotations.get(CLASS_ANNOTATION)) and not pattern.search(str(cls))
    ]


class BackendType(enum.Enum):
    SERVICE = "service"
    SHUNT = "shunt"
    LOOPBACK = "loopback"
    DYNAMIC = "dynamic"
    LB = "lb"
    NETWORK = "network"
    # Documented by Skipper, accepted by its code, missing from the CRD's enum.
    FORWARD = "forward"


@dataclass(frozen=True, slots=True)
class BackendSpec:
    name: str
    type: BackendType
    field: str  # spec.backends[i]
    service_name: str = ""
    service_port: int = 0
    address: str = ""
    algorithm: str = ""
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BackendRef:
    name: str
    weight: int  # 0 when unset, as Skipper reads it
    field: str


@dataclass(frozen=True, slots=True)
class RouteSpec:
    index: int
    field: str  # spec.routes[i]
    path: str = ""
    path_subtree: str = ""
    path_regexp: str = ""
    methods: tuple[str, ...] = ()  # upper case, unique, in order
    predicates: tuple[str, ...] = ()
    filters: tuple[str, ...] = ()
    backends: tuple[BackendRef, ...] = ()  # empty: the default backends


@dataclass(frozen=True, slots=True)
class TLSSpec:
    hosts: tuple[str, ...]
    secret_name: str
    field: str


@dataclass(frozen=True, slots=True)
class RouteGroupSpec:
    hosts: tuple[str, ...] = ()
    backends: tuple[BackendSpec, ...] = ()
    default_backends: tuple[BackendRef, ...] = ()
    routes: tuple[RouteSpec, ...] = ()
    tls: tuple[TLSSpec, ...] = ()

    def backend(self, name: str) -> BackendSpec | None:
        for b in self.backends:
            if b.name == name:
                return b
        return None


@dataclass
class ParsedRouteGroup:
    obj: KubeObject
    spec: RouteGroupSpec
    problems: list[Problem] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.obj.namespace, self.obj.name)

    @property
    def valid(self) -> bool:
        return not any(not p.warning for p in self.problems)


# The keys each object may have: the CRD's field table (schema.py), so reader and schema agree.
_SPEC_FIELDS = known(SPEC, "spec")
_BACKEND_FIELDS = known(SPEC, "spec.backends[]")
_REF_FIELDS = known(SPEC, "spec.defaultBackends[]")
_ROUTE_FIELDS = known(SPEC, "spec.routes[]")
_TLS_FIELDS = known(SPEC, "spec.tls[]")

# Keys seed 003 (and people used to its draft) write that the shipped CRD spells otherwise.
_HINTS = {
    ("route", "backend"): "routes name their backends in `backends`, a list of "
    "{backendName, weight}",
    ("route", "method"): "the field is `methods`",
    ("backend", "default"): "default backends are listed in spec.defaultBackends",
    ("backend", "weight"): "weights belong to backend references (spec.defaultBackends[] or "
    "spec.routes[].backends[])",
}


class _Reader(FieldReader):
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.seen: set[Problem] = set()  # `problems` as a set: a repeat is cheap to skip
        self.what = "spec"

    def field_error(self, where: str, message: str) -> None:
        self.error("InvalidField", f"{where}: {message}")

    def error(self, reason: str, message: str, type_: str = ACCEPTED) -> None:
        problem = Problem(type_, reason, message)
        if problem not in self.seen:
            self.seen.add(problem)
            self.problems.append(problem)

    def fields(self, m: Mapping[str, Any], path: str, known: frozenset[str], what: str) -> None:
        self.what = what  # which hints apply to the unknown keys of `m`
        self.check_fields(m, path, known)

    def unknown_field(self, where: str, key: str) -> None:
        hint = _HINTS.get((self.what, key))
        self.error(
            "UnknownField", f'{where}: unknown field "{key}"' + (f"; {hint}" if hint else "")
        )

    def strings(self, m: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        out: list[str] = []
        for where, item in self.items(m, key, path):
            if isinstance(item, str):
                out.append(item)
            else:
                self.field_error(where, f"must be a string, got {describe(item)}")
        return tuple(out)


def parse_routegroup(obj: KubeObject) -> ParsedRouteGroup:
    """The RouteGroup's spec and every problem the CRD schema or Skipper's validator finds."""
    r = _Reader()
    raw = obj.raw.get("spec")
    if raw is None:
        r.error("SpecMissing", "spec: route group without spec")
        return ParsedRouteGroup(obj, RouteGroupSpec(), r.problems)
    spec = r.mapping(raw, "spec")
    if spec is None:
        return ParsedRouteGroup(obj, RouteGroupSpec(), r.problems)
    r.fields(spec, "spec", _SPEC_FIELDS, "spec")
    for key in ("hosts", "routes"):
        # The CRD's minItems 1 (the API server refuses the object): absent is what means none.
        value = spec.get(key)
        if isinstance(value, (list, tuple)) and not value:
            r.field_error(
                f"spec.{key}", f"Invalid value: 0: spec.{key} in body should have at least 1 items"
            )
    hosts = _hosts(r, spec)
    backends = _backends(r, spec)
    # Every declared name, valid or not: a reference to a backend already reported is not
    # reported again as unknown.
    names = {
        str(b.get("name"))
        for b in (r.sequence(spec, "backends", "spec") or ())[: r.list_cap("backends")]
        if isinstance(b, Mapping) and b.get("name")
    }
    default_backends = _refs(r, spec, "defaultBackends", "spec", names)
    has_default = bool(r.sequence(spec, "defaultBackends", "spec"))
    routes: list[RouteSpec] = []
    for i, (where, item) in enumerate(r.items(spec, "routes", "spec")):
        route = _route(r, i, where, item, names, has_default)
        if route is not None:
            routes.append(route)
    if not has_default and not r.sequence(spec, "routes", "spec"):
        r.error("BackendReferenceMissing", "spec: missing backend reference")
    # Each route is served on every host, once per method: within their caps, hosts and routes
    # still multiply to a quarter of a million routes.
    per_host = sum(max(1, len(route.methods)) for route in routes) or 1
    over = total_routes_problem(max(1, len(hosts)) * per_host, "hosts x routes x methods")
    if over is not None:
        r.error("TooManyRoutes", f"spec: {over}")
    # Without routes, the default backends make the one route.
    refs = sum(len(route.backends or default_backends) for route in routes)
    refs = refs if routes else len(default_backends)
    too_many = backends_over_problem(refs, "backends (a route's or the default ones)")
    if too_many is not None:
        r.error("TooManyRoutes", f"spec.routes: {too_many}")
    tls = tuple(_tls(r, where, item) for where, item in r.items(spec, "tls", "spec"))
    parsed = RouteGroupSpec(
        hosts=hosts,
        backends=backends,
        default_backends=default_backends,
        routes=tuple(routes),
        tls=tuple(t for t in tls if t is not None),
    )
    return ParsedRouteGroup(obj, parsed, r.problems)


def _hosts(r: _Reader, spec: Mapping[str, Any]) -> tuple[str, ...]:
    hosts: list[str] = []
    for i, host in enumerate(r.strings(spec, "hosts", "spec")):
        where = f"spec.hosts[{i}]"
        if host in hosts:
            r.error("DuplicateHost", f'{where}: duplicate host "{host}"')
            continue
        problem = host_problem(host)
        if problem is not None:
            r.error("InvalidHost", f"{where}: {problem}")
            continue
        hosts.append(host)
    return tuple(hosts)


def host_problem(host: str) -> str | None:
    if len(host) > MAX_HOST_LENGTH:
        return f'host "{host[:40]}..." is longer than {MAX_HOST_LENGTH} characters'
    if not HOST_PATTERN.match(host):
        return (
            f'host "{host}" does not match {HOST_PATTERN.pattern} (a lower-case DNS name, '
            "without wildcard or port)"
        )
    return None


def _backends(r: _Reader, spec: Mapping[str, Any]) -> tuple[BackendSpec, ...]:
    entries = r.items(spec, "backends", "spec")
    if not entries:
        r.error("BackendMissing", "spec.backends: route group without backend")
        return ()
    out: list[BackendSpec] = []
    seen: set[str] = set()
    for where, item in entries:
        m = r.mapping(item, where)
        if m is None:
            continue
        r.fields(m, where, _BACKEND_FIELDS, "backend")
        name = r.string(m, "name", where)
        if not name:
            r.error("BackendNameMissing", f"{where}.name: unnamed backend")
            continue
        if name in seen:
            r.error("DuplicateBackend", f"{where}.name: backends with duplicate name: {name}")
            continue
        seen.add(name)
        backend = _backend(r, m, where, name)
        if backend is not None:
            out.append(backend)
    return tuple(out)


def _backend(r: _Reader, m: Mapping[str, Any], where: str, name: str) -> BackendSpec | None:
    type_name = r.string(m, "type", where)
    try:
        type_ = BackendType(type_name or "service")
    except ValueError:
        r.error(
            "BackendTypeNotValid",
            f'{where}.type: invalid backend: {name}, unsupported backend type "{type_name}"',
        )
        return None
    algorithm = r.string(m, "algorithm", where)
    if algorithm and algorithm not in ALGORITHMS:
        r.error(
            "AlgorithmNotValid",
            f'{where}.algorithm: invalid backend: {name}, unsupported algorithm "{algorithm}"',
        )
        return None
    address = r.string(m, "address", where)
    service_name = r.string(m, "serviceName", where)
    port_value = m.get("servicePort")
    service_port = 0
    if port_value is not None:
        if isinstance(port_value, bool) or not isinstance(port_value, int):
            r.field_error(
                f"{where}.servicePort",
                f"must be an integer (RouteGroups name service ports by number), got "
                f"{describe(port_value)}",
            )
            return None
        service_port = port_value
    endpoints = r.strings(m, "endpoints", where)
    if type_ is BackendType.NETWORK and not address:
        r.error(
            "AddressMissing",
            f"{where}.address: invalid backend: {name}, address missing in backend: {name}",
        )
        return None
    if type_ is BackendType.SERVICE and not service_name:
        r.error(
            "ServiceNameMissing",
            f"{where}.serviceName: invalid backend: {name}, service name missing in backend: "
            f"{name}",
        )
        return None
    if type_ is BackendType.SERVICE and not 0 < service_port <= 65535:
        r.error(
            "ServicePortNotValid",
            f"{where}.servicePort: invalid backend: {name}, invalid service port in backend: "
            f"{name}, {service_port}",
        )
        return None
    if type_ is BackendType.LB and not endpoints:
        r.error(
            "EndpointsMissing",
            f"{where}.endpoints: invalid backend: {name}, missing LB endpoints in backend: {name}",
        )
        return None
    if type_ is BackendType.NETWORK:
        problem = network_address_problem(address)
        if problem is not None:
            r.error("AddressNotValid", f"{where}.address: {problem}")
            return None
    return BackendSpec(
        name=name,
        type=type_,
        field=where,
        service_name=service_name,
        service_port=service_port,
        address=address,
        algorithm=algorithm,
        endpoints=endpoints,
    )


def go_url_error(url: str, error: ValueError) -> str:
    """Go's `url.Parse` error for what Python's `urlsplit` refused, where Go words it."""
    text = str(error)
    if text == "Invalid IPv6 URL":
        return f"parse {go_quote(url)}: missing ']' in host"
    if text.startswith("Port could not be cast to integer value"):
        port = urlsplit(url).netloc.rpartition("@")[2].partition(":")[2]
        return f"parse {go_quote(url)}: invalid port {go_quote(':' + port)} after host"
    return text


def go_quote(value: str) -> str:
    """Go's `%q` for the strings that reach a message."""
    out = ['"']
    for c in value:
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def network_address_problem(address: str) -> str | None:
    """Skipper's check of a `network` address: scheme://host[:port], no path and no query."""
    try:
        url = urlsplit(address)
        url.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as e:
        return f"failed to parse backend address {go_quote(address)}: {go_url_error(address, e)}"
    if url.path or url.query or not url.scheme or not url.netloc:
        return f'backend address "{address}" does not match scheme://host format'
    return None


def _refs(
    r: _Reader,
    m: Mapping[str, Any],
    key: str,
    path: str,
    names: set[str],
    route_index: int | None = None,
) -> tuple[BackendRef, ...]:
    # Skipper wraps a route's errors: "invalid route at 2, invalid backend reference: x".
    at = f"invalid route at {route_index}, " if route_index is not None else ""
    out: list[BackendRef] = []
    seen: set[str] = set()
    for where, item in r.items(m, key, path):
        ref = r.mapping(item, where)
        if ref is None:
            continue
        r.fields(ref, where, _REF_FIELDS, "ref")
        name = r.string(ref, "backendName", where)
        if name in seen:
            r.error(
                "DuplicateBackendReference", f"{where}: {at}duplicate backend reference: {name}"
            )
            continue
        seen.add(name)
        if not name:
            r.error(
                "BackendReferenceNotValid", f"{where}.backendName: {at}unnamed backend reference"
            )
            continue
        if name not in names:
            r.error(
                "BackendReferenceNotValid",
                f"{where}.backendName: {at}invalid backend reference: {name}",
            )
            continue
        weight_value = ref.get("weight")
        weight = 0
        if weight_value is not None:
            if isinstance(weight_value, bool) or not isinstance(weight_value, int):
                r.field_error(
                    f"{where}.weight", f"must be an integer, got {describe(weight_value)}"
                )
                continue
            if weight_value < 0:
                r.error(
                    "WeightNotValid",
                    f"{where}.weight: {at}invalid weight in backend: {name}, {weight_value}",
                )
                continue
            weight = weight_value
        out.append(BackendRef(name, weight, where))
    return tuple(out)


def _route(
    r: _Reader, i: int, where: str, item: Any, names: set[str], has_default: bool
) -> RouteSpec | None:
    if item is None:
        r.error("RouteNotValid", f"{where}: invalid route at {i}, invalid route spec")
        return None
    m = r.mapping(item, where)
    if m is None:
        return None
    r.fields(m, where, _ROUTE_FIELDS, "route")
    before = len(r.problems)
    backends = _refs(r, m, "backends", where, names, i)
    if not has_default and not r.sequence(m, "backends", where):
        r.error(
            "BackendReferenceMissing",
            f"{where}.backends: invalid route at {i}, missing backend reference",
        )
    path = r.string(m, "path", where)
    path_subtree = r.string(m, "pathSubtree", where)
    if path and path_subtree:
        r.error(
            "PathNotValid",
            f"{where}: invalid route at {i}, path and path subtree in the same route",
        )
    methods: list[str] = []
    for j, method in enumerate(r.strings(m, "methods", where)):
        if not method:
            r.error("MethodNotValid", f"{where}.methods[{j}]: invalid route at {i}, invalid method")
        elif method not in METHODS:
            # Skipper itself would upper-case it and take anything; the CRD's enum refuses it.
            r.error(
                "MethodNotValid",
                f'{where}.methods[{j}]: Unsupported value: "{method}": supported values: '
                + ", ".join(f'"{x}"' for x in METHODS),
            )
        elif method not in methods:
            methods.append(method)
    route = RouteSpec(
        index=i,
        field=where,
        path=path,
        path_subtree=path_subtree,
        path_regexp=r.string(m, "pathRegexp", where),
        methods=tuple(methods),
        predicates=r.strings(m, "predicates", where),
        filters=r.strings(m, "filters", where),
        backends=backends,
    )
    return route if len(r.problems) == before else None


def _tls(r: _Reader, where: str, item: Any) -> TLSSpec | None:
    m = r.mapping(item, where)
    if m is None:
        return None
    r.fields(m, where, _TLS_FIELDS, "tls")
    hosts = r.strings(m, "hosts", where)
    if not hosts:
        r.field_error(f"{where}.hosts", "required field is missing")
    for j, host in enumerate(hosts):
        problem = host_problem(host)
        if problem is not None:
            r.error("InvalidHost", f"{where}.hosts[{j}]: {problem}")
    secret = r.string(m, "secretName", where, required=True)
    return TLSSpec(hosts, secret, where)

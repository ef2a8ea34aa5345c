"""The Ingress spec (`networking.k8s.io/v1`) as typed records, read defensively.

The Kubernetes API server validates an Ingress before any controller sees it (types, unknown
fields with kubectl's default strict validation, required fields, hostnames, path syntax, backend
shape). turnout also reads plain files, so the reader does that job: whatever the API server would
refuse becomes a `Problem` that names the field, and an Ingress with such a problem is refused
whole (it could not exist in a cluster), like an HTTPProxy that fails its CRD schema. Nothing here
raises, whatever the YAML holds.

What the API server admits but turnout cannot serve (a regex RE2 rejects, a `resource` backend, a
`?` in a `Prefix` path) is not the reader's business: the processor reports it per path.

Values follow Go's `omitempty` semantics where the API does: an empty string means "not set".
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.condition_status import ACCEPTED as ACCEPTED
from turnout.dialects.condition_status import RESOLVED_REFS as RESOLVED_REFS
from turnout.dialects.condition_status import Problem as Problem
from turnout.dialects.fields import (
    LIST_CAPS,
    FieldReader,
    describe,
    list_length,
    total_routes_problem,
)
from turnout.objects import KubeObject

GROUP = "networking.k8s.io"
API_VERSION = "networking.k8s.io/v1"
KIND = "Ingress"
CLASS_KIND = "IngressClass"

EXACT = "Exact"
PREFIX = "Prefix"
IMPLEMENTATION_SPECIFIC = "ImplementationSpecific"
PATH_TYPES = (EXACT, PREFIX, IMPLEMENTATION_SPECIFIC)

FIELD_NOT_VALID = "FieldNotValid"

# apimachinery's validation patterns.
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_IANA_SVC_NAME = re.compile(r"[-a-z0-9]+")
# Path checks of the API server for Exact and Prefix paths.
_INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_PATH_SUFFIXES = ("/..", "/.")

_SPEC_FIELDS = frozenset({"ingressClassName", "defaultBackend", "rules", "tls"})
_BACKEND_FIELDS = frozenset({"service", "resource"})
_SERVICE_FIELDS = frozenset({"name", "port"})
_PORT_FIELDS = frozenset({"name", "number"})
_RESOURCE_FIELDS = frozenset({"apiGroup", "kind", "name"})
_RULE_FIELDS = frozenset({"host", "http"})
_HTTP_FIELDS = frozenset({"paths"})
_PATH_FIELDS = frozenset({"path", "pathType", "backend"})
_TLS_FIELDS = frozenset({"hosts", "secretName"})


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """`IngressBackend`. `resource` is set for a `resource` backend, which turnout cannot serve."""

    field: str
    service: str = ""
    port: int | str = 0  # a number, or a port name
    resource: str = ""  # "Kind name" of a resource backend


@dataclass(frozen=True, slots=True)
class PathSpec:
    path: str
    path_type: str
    backend: BackendSpec
    field: str  # e.g. spec.rules[0].http.paths[1]


@dataclass(frozen=True, slots=True)
class RuleSpec:
    host: str  # lower case; "" for a rule without host
    paths: tuple[PathSpec, ...]
    field: str


@dataclass(frozen=True, slots=True)
class TLSSpec:
    hosts: tuple[str, ...]  # lower case
    secret_name: str
    field: str


@dataclass(frozen=True, slots=True)
class IngressSpec:
    default_backend: BackendSpec | None = None
    rules: tuple[RuleSpec, ...] = ()
    tls: tuple[TLSSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class ParsedIngress:
    obj: KubeObject
    spec: IngressSpec
    problems: tuple[Problem, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.obj.namespace, self.obj.name)

    @property
    def admitted(self) -> bool:
        """False when the API server would have refused the object."""
        return not any(not p.warning for p in self.problems)


def dns1123_subdomain_error(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        )
    return None


def host_error(host: str) -> str | None:
    """The API server's checks on `rules[].host` and `tls[].hosts[]` (after lower-casing)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return "must be a DNS name, not an IP address"
    if "*" in host:
        if not host.startswith("*.") or dns1123_subdomain_error(host[2:]) is not None:
            return (
                "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS "
                "subdomain, which must consist of lower case alphanumeric characters, '-' or '.' "
                "and end with an alphanumeric character"
            )
        return None
    return dns1123_subdomain_error(host)


def _port_name_error(name: str) -> str | None:
    """apimachinery's IsValidPortName (an IANA_SVC_NAME)."""
    if len(name) > 15:
        return "must be no more than 15 characters"
    if not _IANA_SVC_NAME.fullmatch(name):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if "--" in name:
        return "must not contain consecutive hyphens"
    if not any("a" <= c <= "z" for c in name):
        return "must contain at least one letter (a-z)"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with a hyphen"
    return None


def path_syntax_error(path: str, path_type: str) -> str | None:
    """The API server's checks on `paths[].path` for its path type."""
    if path_type == IMPLEMENTATION_SPECIFIC:
        if path and not path.startswith("/"):
            return "must be an absolute path"
        return None
    if not path.startswith("/"):
        return "must be an absolute path"
    for seq in _INVALID_PATH_SEQUENCES:
        if seq in path:
            return f"must not contain '{seq}'"
    for suffix in _INVALID_PATH_SUFFIXES:
        if path.endswith(suffix):
            return f"cannot end with '{suffix}'"
    return None


class _Reader(FieldReader):
    """Reads fields with their types checked; every problem is recorded with its field path."""

    refuses_whole_object = True

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def error(self, message: str) -> None:
        self.problems.append(Problem(ACCEPTED, FIELD_NOT_VALID, message))

    def field_error(self, where: str, message: str) -> None:
        self.error(f"{where}: {message}")


def parse_ingress(obj: KubeObject) -> ParsedIngress:
    """Reads `obj` into an `IngressSpec`; never raises, whatever the object holds."""
    r = _Reader()
    raw = obj.spec
    if raw is None:
        r.error("spec: either `defaultBackend` or `rules` must be specified")
        return ParsedIngress(obj, IngressSpec(), tuple(r.problems))
    spec = r.mapping(raw, "spec")
    if spec is None:
        return ParsedIngress(obj, IngressSpec(), tuple(r.problems))
    r.check_fields(spec, "spec", _SPEC_FIELDS)
    class_name = r.string(spec, "ingressClassName", "spec")
    if class_name and (err := dns1123_subdomain_error(class_name)) is not None:
        r.error(f"spec.ingressClassName: {err}")

    default_backend: BackendSpec | None = None
    if spec.get("defaultBackend") is not None:
        default_backend = _backend(r, spec["defaultBackend"], "spec.defaultBackend")
    rules: tuple[RuleSpec, ...] = ()
    over = _total_paths_problem(spec)
    if over is not None:
        # Each rule's paths are within their cap, but together they would make too many routes;
        # the object is refused, so none is read.
        r.field_error("spec.rules", over)
    else:
        rules = tuple(
            rule for p, v in r.items(spec, "rules", "spec") if (rule := _rule(r, v, p)) is not None
        )
    if spec.get("defaultBackend") is None and not spec.get("rules"):
        r.error("spec: either `defaultBackend` or `rules` must be specified")
    tls = tuple(t for p, v in r.items(spec, "tls", "spec") if (t := _tls(r, v, p)) is not None)
    return ParsedIngress(obj, IngressSpec(default_backend, rules, tls), tuple(r.problems))


def _total_paths_problem(spec: Mapping[str, Any]) -> str | None:
    rules = spec.get("rules")
    if not isinstance(rules, tuple | list) or len(rules) > LIST_CAPS["rules"]:
        return None  # not a list, or over its own cap: reported as such
    counts = [list_length(rule, "http", "paths") for rule in rules]
    if any(count > LIST_CAPS["paths"] for count in counts):
        return None  # a list over its own cap is reported as such
    return total_routes_problem(sum(counts), "paths over all rules")


def _backend(r: _Reader, value: Any, path: str) -> BackendSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _BACKEND_FIELDS)
    has_service = m.get("service") is not None
    has_resource = m.get("resource") is not None
    if has_service and has_resource:
        r.error(f"{path}: cannot set both resource and service backends")
        return None
    if has_resource:
        return _resource(r, m["resource"], path)
    if not has_service:
        r.error(f"{path}: resource or service backend is required")
        return None
    where = f"{path}.service"
    svc = r.mapping(m["service"], where)
    if svc is None:
        return None
    r.check_fields(svc, where, _SERVICE_FIELDS)
    before = len(r.problems)
    name = r.string(svc, "name", where)
    if not name:
        if len(r.problems) == before:
            r.error(f"{where}.name: required field is missing")
    elif len(name) > 63 or not _DNS1035_LABEL.fullmatch(name):
        r.error(
            f"{where}.name: a DNS-1035 label must consist of lower case alphanumeric characters "
            "or '-', start with an alphabetic character, and end with an alphanumeric character"
        )
    port = _port(r, svc.get("port"), f"{where}.port", where)
    return BackendSpec(field=path, service=name, port=port)


def _port(r: _Reader, value: Any, path: str, parent: str) -> int | str:
    if value is None:
        r.error(f"{parent}: port name or number is required")
        return 0
    m = r.mapping(value, path)
    if m is None:
        return 0
    r.check_fields(m, path, _PORT_FIELDS)
    before = len(r.problems)
    name = r.string(m, "name", path)
    number = r.integer(m, "number", path)
    if len(r.problems) != before:
        return 0
    if name and number:
        r.error(f"{parent}: cannot set both port name & port number")
        return 0
    if name:
        if (err := _port_name_error(name)) is not None:
            r.error(f"{path}.name: {err}")
            return 0
        return name
    if number:
        if not 1 <= number <= 65535:
            r.error(f"{path}.number: must be between 1 and 65535, inclusive")
            return 0
        return number
    r.error(f"{parent}: port name or number is required")
    return 0


def _resource(r: _Reader, value: Any, path: str) -> BackendSpec | None:
    where = f"{path}.resource"
    m = r.mapping(value, where)
    if m is None:
        return None
    r.check_fields(m, where, _RESOURCE_FIELDS)
    r.string(m, "apiGroup", where)
    kind = r.string(m, "kind", where)
    name = r.string(m, "name", where)
    if not kind:
        r.error(f"{where}.kind: required field is missing")
    if not name:
        r.error(f"{where}.name: required field is missing")
    return BackendSpec(field=path, resource=f"{kind} {name}")


def _rule(r: _Reader, value: Any, path: str) -> RuleSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _RULE_FIELDS)
    # Hostnames are case-insensitive; the API server only admits lower case, turnout lower-cases.
    host = r.string(m, "host", path).lower()
    if host and (err := host_error(host)) is not None:
        r.error(f"{path}.host: {err}")
    paths: list[PathSpec] = []
    if m.get("http") is not None:
        where = f"{path}.http"
        http = r.mapping(m["http"], where)
        if http is not None:
            r.check_fields(http, where, _HTTP_FIELDS)
            before = len(r.problems)
            items = r.items(http, "paths", where)
            if not items and len(r.problems) == before:
                r.error(f"{where}.paths: required value")
            for p, v in items:
                parsed = _path(r, v, p)
                if parsed is not None:
                    paths.append(parsed)
    return RuleSpec(host=host, paths=tuple(paths), field=path)


def _path(r: _Reader, value: Any, path: str) -> PathSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _PATH_FIELDS)
    before = len(r.problems)
    value_path = r.string(m, "path", path)
    path_type = r.string(m, "pathType", path)
    if len(r.problems) != before:
        return None
    if not path_type:
        r.error(f"{path}.pathType: pathType must be specified")
        return None
    if path_type not in PATH_TYPES:
        r.error(
            f'{path}.pathType: Unsupported value: "{path_type}": supported values: '
            '"Exact", "ImplementationSpecific", "Prefix"'
        )
        return None
    if (err := path_syntax_error(value_path, path_type)) is not None:
        r.error(f"{path}.path: {err}")
        return None
    if m.get("backend") is None:
        r.error(f"{path}.backend: required field is missing")
        return None
    backend = _backend(r, m["backend"], f"{path}.backend")
    if backend is None:
        return None
    return PathSpec(path=value_path, path_type=path_type, backend=backend, field=path)


def _tls(r: _Reader, value: Any, path: str) -> TLSSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _TLS_FIELDS)
    hosts: list[str] = []
    for p, v in r.items(m, "hosts", path):
        if not isinstance(v, str):
            r.error(f"{p}: must be a string, got {describe(v)}")
            continue
        host = v.lower()
        if (err := host_error(host)) is not None:
            r.error(f"{p}: {err}")
            continue
        hosts.append(host)
    secret = r.string(m, "secretName", path)
    if secret and (err := dns1123_subdomain_error(secret)) is not None:
        r.error(f"{path}.secretName: {err}")
    return TLSSpec(hosts=tuple(hosts), secret_name=secret, field=path)

"""The IngressRoute spec as typed records, read defensively from whatever YAML a user wrote.

Contour's CRD schema would have rejected many objects before Contour saw them; turnout also reads
plain files, so the reader does that job: a field of the wrong type, an unknown field or a missing
required field is an error that names the field, never an exception. The reader also runs every
check that depends on the object alone (Contour's own messages where Contour had one), so that the
processor only has to look at what depends on other objects.

Two versions are read. `contour.heptio.com/v1beta1` is what Contour shipped; `v1alpha1` is the
shape seed 000 writes, where a route names its upstreams under `service:` (a list, or a single
mapping). `aliases` (seed 000) is read in both.

Values follow Go's `omitempty` semantics as Contour saw them: an empty string, `false`, `0` and
`null` all mean "not set".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.dialects.fields import (
    MAX_DURATION_SECONDS,
    MAX_UINT32,
    FieldReader,
    describe,
    go_duration_seconds,
    total_backends_problem,
)
from turnout.dialects.ingressroute.schema import SPEC
from turnout.dialects.ingressroute.upstream import ValidationSpec, read_validation
from turnout.dialects.openapi import known
from turnout.graph.model import PathRewrite, RetryPolicy, RoutePolicies, Timeouts
from turnout.objects import KubeObject

GROUP = "contour.heptio.com"
KIND = "IngressRoute"
V1BETA1 = "contour.heptio.com/v1beta1"
V1ALPHA1 = "contour.heptio.com/v1alpha1"

# Reasons. Contour's IngressRoute status had only a description; turnout adds a reason to each
# entry of its `errors`/`warnings` lists so that tools need not parse messages.
FIELD_NOT_VALID = "FieldNotValid"
FIELD_NOT_SUPPORTED = "FieldNotSupported"
POLICY_NOT_VALID = "PolicyNotValid"
NOTHING_DEFINED = "NothingDefined"
FQDN_NOT_SPECIFIED = "FQDNNotSpecified"
FQDN_WILDCARD = "FQDNWildcard"
FQDN_NOT_VALID = "FQDNNotValid"
DUPLICATE_HOSTNAME = "DuplicateHostname"
NO_ACTION = "NoAction"
SERVICE_PORT_INVALID = "ServicePortInvalid"
WEIGHT_INVALID = "WeightInvalid"
UNKNOWN_STRATEGY = "UnknownStrategy"
STRATEGY_REPLACED = "StrategyReplaced"
TLS_VERSION_REPLACED = "TLSVersionReplaced"

# `spec.tcpproxy` (`tcpproxy.py` compiles it).
TCPPROXY_FIELDS = known(SPEC, "spec.tcpproxy")
SERVICES_AND_DELEGATE = "ServicesAndDelegate"
TLS_MUST_BE_CONFIGURED = "TLSMustBeConfigured"
IGNORED_FIELD = "IgnoredField"

# A lower-case DNS name. Contour v1.0 only refused blank names and `*`; turnout also refuses
# what is not a hostname at all (a port, a path, spaces), which Envoy would route oddly.
HOSTNAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

NO_POLICIES = RoutePolicies()

# Load-balancing strategies. Contour v1.0 knew these three besides RoundRobin (any other value
# meant RoundRobin); the v0.x releases also took RingHash and Maglev.
STRATEGIES = ("RoundRobin", "WeightedLeastRequest", "Random", "Cookie")
# Without a hash policy (IngressRoute has no way to set one) Envoy's ring-hash and Maglev
# balancers hash nothing and pick a random endpoint for every request.
HASHLESS_STRATEGIES = ("RingHash", "Maglev")


@dataclass(frozen=True, slots=True)
class Problem:
    """One status entry: an error (the object is rejected) or a warning."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class HealthCheckSpec:
    """`services[].healthCheck`; 0 means "Contour's default" for every number."""

    path: str
    host: str = ""
    interval_seconds: int = 0
    timeout_seconds: int = 0
    unhealthy_threshold: int = 0
    healthy_threshold: int = 0


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    port: int
    weight: int = 0  # 0 means unset, as in Contour
    strategy: str = ""  # already mapped to one of STRATEGIES, or "" for the default
    health_check: HealthCheckSpec | None = None
    field: str = ""
    validation: ValidationSpec | None = None  # upstream.py


@dataclass(frozen=True, slots=True)
class DelegateSpec:
    name: str
    namespace: str  # "" means the delegating object's namespace
    field: str


@dataclass(frozen=True, slots=True)
class RouteSpec:
    match: str
    services: tuple[ServiceSpec, ...]
    delegate: DelegateSpec | None
    permit_insecure: bool
    field: str
    # enableWebsockets, prefixRewrite, timeoutPolicy, retryPolicy; the Cookie strategy's hash
    # policy is added by the processor, which knows the services.
    policies: RoutePolicies = NO_POLICIES


@dataclass(frozen=True, slots=True)
class TLSSpec:
    secret_name: str  # "name" or "namespace/name" (with a TLSCertificateDelegation)
    min_version: str = "1.2"  # "1.2" | "1.3"
    passthrough: bool = False  # only without secret_name (`tcpproxy.py`)


@dataclass(frozen=True, slots=True)
class VirtualHostSpec:
    # Lower-cased hostnames that passed every check; empty when the fqdn did not.
    hostnames: tuple[str, ...]
    tls: TLSSpec | None


@dataclass(frozen=True, slots=True)
class TCPProxySpec:
    services: tuple[ServiceSpec, ...] = ()
    delegate: DelegateSpec | None = None


@dataclass(frozen=True, slots=True)
class IngressRouteSpec:
    virtualhost: VirtualHostSpec | None
    routes: tuple[RouteSpec, ...] = ()
    tcpproxy: TCPProxySpec | None = None  # `tcpproxy.py`


@dataclass(frozen=True, slots=True)
class ParsedIngressRoute:
    obj: KubeObject
    spec: IngressRouteSpec
    problems: tuple[Problem, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.obj.namespace, self.obj.name)

    @property
    def is_root(self) -> bool:
        return self.spec.virtualhost is not None

    @property
    def valid(self) -> bool:
        """False when anything in the object itself is wrong: seed 000 rejects it whole."""
        return not any(not p.warning for p in self.problems)

    def delegate_key(self, delegate: DelegateSpec) -> tuple[str, str]:
        return (delegate.namespace or self.obj.namespace, delegate.name)


# --- field tables -------------------------------------------------------------------------------

# The keys each object may have come from the CRD's field table (schema.py), so that reader and
# schema cannot disagree.
_SPEC_FIELDS = known(SPEC, "spec")
_VHOST_FIELDS = known(SPEC, "spec.virtualhost")
_TLS_FIELDS = known(SPEC, "spec.virtualhost.tls")
# Route policies, applied as Contour v1.0 did (`_policies`).
_POLICY_FIELDS = ("enableWebsockets", "prefixRewrite", "timeoutPolicy", "retryPolicy")
_ROUTE_FIELDS = known(SPEC, "spec.routes[]") - frozenset(_POLICY_FIELDS)
_SERVICE_FIELDS = known(SPEC, "spec.routes[].services[]")
# Nothing refused any more: upstream `validation` is read by `upstream.py`.
_REFUSED_SERVICE: frozenset[str] = frozenset()
_HEALTH_FIELDS = known(SPEC, "spec.routes[].services[].healthCheck")
_DELEGATE_FIELDS = known(SPEC, "spec.routes[].delegate")


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple)


def _unset(value: Any) -> bool:
    """Go's omitempty view of a value: null, false, 0, "" and empty collections are not set."""
    if value is None or value is False or value == "":
        return True
    if isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return True
    return isinstance(value, Mapping | list | tuple) and not value


def hostname_error(value: str, field: str) -> tuple[str, str] | None:
    """(reason, message) when `value` cannot be a root's hostname, in Contour's words."""
    if not value.strip():
        return FQDN_NOT_SPECIFIED, f"{field} must be specified"
    if "*" in value:
        return FQDN_WILDCARD, f'{field} "{value}" cannot use wildcards'
    if not HOSTNAME.fullmatch(value.lower()):
        return FQDN_NOT_VALID, (
            f'{field} "{value}" is not a valid hostname: it must be DNS labels of letters, '
            "digits and hyphens, separated by dots"
        )
    return None


class _Reader(FieldReader):
    """Reads fields with their types checked; every problem is recorded with its field path."""

    refuses_whole_object = True

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def error(self, message: str, reason: str = FIELD_NOT_VALID) -> None:
        self.problems.append(Problem(reason, message))

    def warn(self, message: str, reason: str) -> None:
        self.problems.append(Problem(reason, message, warning=True))

    def field_error(self, where: str, message: str) -> None:
        self.error(f"{where}: {message}")

    def refused_field(self, where: str) -> None:
        self.error(f"{where} is not yet supported by turnout", FIELD_NOT_SUPPORTED)

    def is_set(self, value: Any) -> bool:
        return not _unset(value)

    def is_list(self, value: Any) -> bool:
        return _is_list(value)

    def string_problem(self, value: str) -> str | None:
        problem = super().string_problem(value)
        if problem is None and any(c in value for c in "\x00\r\n"):
            # Hostnames, paths and header values with these would make Envoy reject the config.
            return "must not contain NUL, CR or LF"
        return problem


def parse_ingressroute(obj: KubeObject) -> ParsedIngressRoute:
    """Reads `obj` into an `IngressRouteSpec`; never raises, whatever the object holds."""
    r = _Reader()
    raw = obj.spec
    if raw is None:
        r.error("spec: required field is missing")
        return ParsedIngressRoute(obj, IngressRouteSpec(virtualhost=None), tuple(r.problems))
    spec = r.mapping(raw, "spec")
    if spec is None:
        return ParsedIngressRoute(obj, IngressRouteSpec(virtualhost=None), tuple(r.problems))
    r.check_fields(spec, "spec", _SPEC_FIELDS)

    virtualhost: VirtualHostSpec | None = None
    if spec.get("virtualhost") is not None:
        virtualhost = _virtualhost(r, spec["virtualhost"])
    alpha = obj.api_version == V1ALPHA1
    over = total_backends_problem(spec.get("routes"), "services")
    if over is not None:
        r.field_error("spec.routes", over)  # the object is refused: its routes are not read
    routes = tuple(
        route
        for path, value in (() if over else r.items(spec, "routes", "spec"))
        if (route := _route(r, value, path, alpha)) is not None
    )
    routes_value = spec.get("routes")
    tcpproxy: TCPProxySpec | None = None
    if spec.get("tcpproxy") is not None:
        # With a tcpproxy, routes are optional (Contour v1.0's CRD).
        tcpproxy = read_tcpproxy(r, spec["tcpproxy"], "spec.tcpproxy")
        if virtualhost is not None and virtualhost.tls is None:
            tls_must_be_configured(r)
    elif routes_value is None or (_is_list(routes_value) and not routes_value):
        # Seed 000: "routes must _always_ be present and non empty".
        r.error("spec.routes must be present and non empty", NOTHING_DEFINED)
    _weights_sum(r, routes)
    return ParsedIngressRoute(
        obj,
        IngressRouteSpec(virtualhost=virtualhost, routes=routes, tcpproxy=tcpproxy),
        tuple(r.problems),
    )


def _virtualhost(r: _Reader, value: Any) -> VirtualHostSpec:
    path = "spec.virtualhost"
    m = r.mapping(value, path)
    if m is None:
        return VirtualHostSpec(hostnames=(), tls=None)
    r.check_fields(m, path, _VHOST_FIELDS)
    before = len(r.problems)
    hostnames: list[str] = []
    fqdn = m.get("fqdn")
    if fqdn is not None and not isinstance(fqdn, str):
        r.error(f"{path}.fqdn: must be a string, got {describe(fqdn)}")
    else:
        problem = hostname_error(fqdn or "", "Spec.VirtualHost.Fqdn")
        if problem is not None:
            r.error(problem[1], problem[0])
        else:
            hostnames.append(str(fqdn).lower())
    for where, alias in r.items(m, "aliases", path):
        if not isinstance(alias, str):
            r.error(f"{where}: must be a string, got {describe(alias)}")
            continue
        problem = hostname_error(alias, "Spec.VirtualHost.Aliases")
        if problem is not None:
            r.error(problem[1], problem[0])
        elif alias.lower() in hostnames:
            r.warn(f'{where}: hostname "{alias}" is already listed', DUPLICATE_HOSTNAME)
        else:
            hostnames.append(alias.lower())
    # A root serves (and claims) its hostnames only when every one of them is valid.
    valid = not any(not p.warning for p in r.problems[before:])
    tls: TLSSpec | None = None
    if m.get("tls") is not None:
        tls = _tls(r, m["tls"], f"{path}.tls")
    return VirtualHostSpec(hostnames=tuple(hostnames) if valid else (), tls=tls)


def _tls(r: _Reader, value: Any, path: str) -> TLSSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _TLS_FIELDS)
    passthrough = r.boolean(m, "passthrough", path)
    secret = r.string(m, "secretName", path, required=not passthrough)
    if passthrough and secret:
        # Contour v1.0: passthrough applies only without a secretName.
        r.warn(f"{path}.passthrough is ignored: secretName terminates TLS", "PassthroughIgnored")
    elif passthrough:
        return TLSSpec(secret_name="", passthrough=True)
    version = r.string(m, "minimumProtocolVersion", path)
    min_version = "1.2"
    if version == "1.3":
        min_version = "1.3"
    elif version not in ("", "1.2"):
        # Contour v1.0 fell back to TLS 1.1 for any other value; TLS 1.0 and 1.1 are deprecated
        # (RFC 8996) and turnout never offers them.
        r.warn(
            f'{path}.minimumProtocolVersion: "{version}" is not supported; using "1.2"',
            TLS_VERSION_REPLACED,
        )
    return TLSSpec(secret_name=secret, min_version=min_version) if secret else None


def _route(r: _Reader, value: Any, path: str, alpha: bool) -> RouteSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    known = _ROUTE_FIELDS | {"service"} if alpha else _ROUTE_FIELDS
    r.check_fields(m, path, known | frozenset(_POLICY_FIELDS))
    match = r.string(m, "match", path, required=True)
    label = f'route "{match}"'  # Contour's prefix for route messages, with what the user wrote
    if match and not match.startswith("/"):
        r.error(f'{path}.match: must start with "/", got "{match}"')
        match = ""

    service_items = r.items(m, "services", path)
    if alpha and m.get("service") is not None:
        if m.get("services") is not None:
            r.error(f"{path}: service and services cannot both be set")
        single = m["service"]
        if isinstance(single, Mapping):
            service_items = [(f"{path}.service", single)]
        else:
            service_items = r.items(m, "service", path)
    services = tuple(
        svc for where, item in service_items if (svc := _service(r, item, where, label))
    )
    delegate: DelegateSpec | None = None
    if m.get("delegate") is not None:
        delegate = _delegate(r, m["delegate"], f"{path}.delegate")
    has_services = m.get("services") is not None or (alpha and m.get("service") is not None)
    if service_items and m.get("delegate") is not None:
        r.error(
            f"{label}: cannot specify services and delegate in the same route",
            SERVICES_AND_DELEGATE,
        )
    elif not has_services and m.get("delegate") is None:
        r.warn(f"{label}: has neither services nor delegate and serves nothing", NO_ACTION)
    policies = _policies(r, m, path)
    return RouteSpec(
        match=match,
        services=services,
        delegate=delegate,
        permit_insecure=r.boolean(m, "permitInsecure", path),
        field=path,
        policies=policies,
    )


def _service(r: _Reader, value: Any, path: str, label: str) -> ServiceSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _SERVICE_FIELDS, _REFUSED_SERVICE)
    name = r.string(m, "name", path, required=True)
    port = r.integer(m, "port", path, required=True)
    port_set = isinstance(m.get("port"), int) and not isinstance(m["port"], bool)
    if port_set and not 1 <= port <= 65535:
        r.error(
            f'{label}: service "{name}": port must be in the range 1-65535',
            SERVICE_PORT_INVALID,
        )
    weight = r.integer(m, "weight", path)
    if weight < 0:
        r.error(
            f'{label}: service "{name}": weight must be greater than or equal to zero',
            WEIGHT_INVALID,
        )
        weight = 0
    elif weight > MAX_UINT32:
        r.error(f'{label}: service "{name}": weight must be at most {MAX_UINT32}', WEIGHT_INVALID)
        weight = 0
    strategy = r.string(m, "strategy", path)
    if strategy in HASHLESS_STRATEGIES:
        r.warn(
            f'{path}.strategy: "{strategy}" has no hash policy in an IngressRoute, so Envoy picks '
            'a random endpoint for each request; turnout uses "Random"',
            STRATEGY_REPLACED,
        )
        strategy = "Random"
    elif strategy and strategy not in STRATEGIES:
        r.warn(
            f'{path}.strategy: unknown strategy "{strategy}"; using "RoundRobin", as Contour does',
            UNKNOWN_STRATEGY,
        )
        strategy = ""
    health: HealthCheckSpec | None = None
    if m.get("healthCheck") is not None:
        health = _health_check(r, m["healthCheck"], f"{path}.healthCheck")
    return ServiceSpec(
        name=name,
        port=port,
        weight=weight,
        strategy="" if strategy == "RoundRobin" else strategy,
        health_check=health,
        field=path,
        validation=read_validation(r, m, path),
    )


def _health_check(r: _Reader, value: Any, path: str) -> HealthCheckSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _HEALTH_FIELDS)
    return HealthCheckSpec(
        # Envoy refuses a health check without a path.
        path=r.string(m, "path", path, required=True),
        host=r.string(m, "host", path),
        interval_seconds=r.integer(
            m, "intervalSeconds", path, minimum=0, maximum=MAX_DURATION_SECONDS
        ),
        timeout_seconds=r.integer(
            m, "timeoutSeconds", path, minimum=0, maximum=MAX_DURATION_SECONDS
        ),
        unhealthy_threshold=r.integer(
            m, "unhealthyThresholdCount", path, minimum=0, maximum=MAX_UINT32
        ),
        healthy_threshold=r.integer(
            m, "healthyThresholdCount", path, minimum=0, maximum=MAX_UINT32
        ),
    )


def _delegate(r: _Reader, value: Any, path: str) -> DelegateSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _DELEGATE_FIELDS)
    return DelegateSpec(
        name=r.string(m, "name", path, required=True),
        namespace=r.string(m, "namespace", path),
        field=path,
    )


def read_tcpproxy(r: _Reader, value: Any, path: str) -> TCPProxySpec | None:
    """Reads `spec.tcpproxy` (`tcpproxy.py` compiles it)."""
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, TCPPROXY_FIELDS)
    services = []
    for where, item in r.items(m, "services", path):
        svc = _service(r, item, where, "tcpproxy")
        if svc is None:
            continue
        if svc.health_check is not None:
            r.warn(
                f"{where}.healthCheck: an HTTP health check cannot check a TCP service; ignored",
                IGNORED_FIELD,
            )
        if svc.strategy == "Cookie":
            r.warn(
                f'{where}.strategy: "Cookie" needs an HTTP request to hash; using "RoundRobin"',
                IGNORED_FIELD,
            )
        services.append(svc)
    delegate = _delegate(r, m["delegate"], f"{path}.delegate") if m.get("delegate") else None
    if services and delegate is not None:
        r.error(
            "tcpproxy: cannot specify services and delegate in the same tcpproxy",
            SERVICES_AND_DELEGATE,
        )
    return TCPProxySpec(services=tuple(services), delegate=delegate)


def tls_must_be_configured(r: _Reader) -> None:
    """A root with a tcpproxy but no TLS: nothing to route the stream by."""
    r.error(
        "tcpproxy requires tls.passthrough or tls.secretName on the virtualhost",
        TLS_MUST_BE_CONFIGURED,
    )


def _policies(r: _Reader, m: Mapping[str, Any], path: str) -> RoutePolicies:
    """Route policies as Contour v1.0 applied them (`internal/dag/builder.go`): websockets, a
    prefix rewrite without the `/foo` + `/foo/` split HTTPProxy later added, `timeoutPolicy.request`
    as the response timeout, and retries on 5xx with `count` at least 1."""
    rewrite = r.string(m, "prefixRewrite", path)
    if rewrite and not rewrite.startswith("/"):
        # Envoy would send a request path without its leading slash upstream.
        r.error(f'{path}.prefixRewrite: must start with "/", got "{rewrite}"')
        rewrite = ""
    timeouts: Timeouts | None = None
    if m.get("timeoutPolicy") is not None:
        where = f"{path}.timeoutPolicy"
        tm = r.mapping(m["timeoutPolicy"], where)
        if tm is not None:
            r.check_fields(tm, where, frozenset({"request"}))
            response = _timeout(r, tm, "request", where)
            timeouts = Timeouts(response_s=response) if response is not None else None
    retry: RetryPolicy | None = None
    if m.get("retryPolicy") is not None:
        where = f"{path}.retryPolicy"
        rm = r.mapping(m["retryPolicy"], where)
        if rm is not None:
            r.check_fields(rm, where, frozenset({"count", "perTryTimeout"}))
            count = r.integer(rm, "count", where, minimum=0, maximum=MAX_UINT32)
            retry = RetryPolicy(
                count=max(1, count), per_try_timeout_s=_per_try_timeout(r, rm, where)
            )
    return RoutePolicies(
        timeouts=timeouts,
        retry=retry,
        path_rewrite=PathRewrite(prefix=rewrite) if rewrite else None,
        websockets=r.boolean(m, "enableWebsockets", path),
    )


def _timeout(r: _Reader, m: Mapping[str, Any], key: str, path: str) -> float | None:
    """Contour v1.0's `parseTimeout`: "" is Envoy's default (None), "infinity" disables the
    timeout (0), and so does anything that is not a positive duration (with a warning here)."""
    value = r.string(m, key, path)
    if not value:
        return None
    if value == "infinity":
        return 0.0
    seconds = go_duration_seconds(value)
    if seconds is None or seconds < 0:
        r.warn(
            f'{path}.{key}: "{value}" is not a duration (such as "30s" or "1m30s") or '
            '"infinity"; treated as "infinity", as Contour did',
            POLICY_NOT_VALID,
        )
        return 0.0
    return seconds or None


def _per_try_timeout(r: _Reader, m: Mapping[str, Any], path: str) -> float | None:
    """Contour v1.0 ignored a per-try timeout it could not parse (Envoy's default applies)."""
    value = r.string(m, "perTryTimeout", path)
    if not value:
        return None
    seconds = go_duration_seconds(value)
    if seconds is None or seconds < 0:
        r.warn(
            f'{path}.perTryTimeout: "{value}" is not a duration (such as "150ms"); ignored, as '
            "Contour did",
            POLICY_NOT_VALID,
        )
        return None
    return seconds or None


def _weights_sum(r: _Reader, routes: Sequence[RouteSpec]) -> None:
    for route in routes:
        if sum(s.weight for s in route.services) > MAX_UINT32:
            r.error(
                f'route "{route.match}": the sum of service weights must not exceed {MAX_UINT32}',
                WEIGHT_INVALID,
            )

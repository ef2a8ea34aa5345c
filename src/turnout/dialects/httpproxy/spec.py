"""The HTTPProxy spec as typed records, read defensively from whatever YAML a user wrote.

The Kubernetes API server validates an HTTPProxy against its CRD schema before Contour ever sees
it; turnout also reads plain files, so the reader does that job: a field of the wrong type, an
unknown field (kubectl's default `--validate=strict` rejects those too) or a missing required field
becomes a `SpecError` that names the field, and never an exception. Fields that Contour supports but
turnout does not implement yet are sorted into two groups: those whose absence only loses a feature
are ignored with a warning, and those that protect something (TLS, authorization) are
errors, because serving the routes without them would expose what the user meant to protect.
TLS (`virtualhost.tls`: termination, passthrough, client validation and the fallback certificate)
and `tcpproxy` are read here with the readers of `tls_options.py` and `tcpproxy_spec.py`, services
with `service_spec.py`.

Values follow Go's `omitempty` semantics as Contour sees them: an empty string, `false`, `0` and
`null` all mean "not set" (except in turnout's own `cookie`/`userAgent` shorthands, where an empty
value is an error). A flag that Contour drops silently because the operator beside it cannot use it
(`ignoreCase` on a regex, `treatMissingAsEmpty` on a positive match) is read and warned about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.fields import FieldReader, describe, total_backends_problem
from turnout.dialects.httpproxy.authorization import (
    AuthorizationSpec,
    AuthPolicySpec,
    read_auth_policy,
    read_authorization,
)
from turnout.dialects.httpproxy.health_check import ROUTE_FIELDS as HEALTH_ROUTE_FIELDS
from turnout.dialects.httpproxy.health_check import (
    HealthCheckPolicySpec,
    read_route_health_check,
)
from turnout.dialects.httpproxy.jwt import ROUTE_FIELDS as JWT_ROUTE_FIELDS
from turnout.dialects.httpproxy.jwt import VHOST_FIELDS as JWT_VHOST_FIELDS
from turnout.dialects.httpproxy.jwt import JWTPolicySpec, JWTProviderSpec
from turnout.dialects.httpproxy.jwt import read_policy as read_jwt_policy
from turnout.dialects.httpproxy.jwt import read_providers as read_jwt_providers
from turnout.dialects.httpproxy.problem import Problem as Problem
from turnout.dialects.httpproxy.route_policies import (
    NO_ROUTE_POLICIES,
    ROUTE_POLICY_FIELDS,
    RoutePolicySpec,
)
from turnout.dialects.httpproxy.route_policies import (
    read_route_policies as read_traffic_policies,
)
from turnout.dialects.httpproxy.service_spec import ServiceSpec as ServiceSpec
from turnout.dialects.httpproxy.service_spec import read_service, written

# Status strings, re-exported for the modules that read them here.
from turnout.dialects.httpproxy.status_names import FIELD_NOT_SUPPORTED as FIELD_NOT_SUPPORTED
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD as IGNORED_FIELD
from turnout.dialects.httpproxy.status_names import INCLUDE_ERROR as INCLUDE_ERROR
from turnout.dialects.httpproxy.status_names import ORPHANED as ORPHANED
from turnout.dialects.httpproxy.status_names import ROOT_NAMESPACE_ERROR as ROOT_NAMESPACE_ERROR
from turnout.dialects.httpproxy.status_names import ROUTE_ERROR as ROUTE_ERROR
from turnout.dialects.httpproxy.status_names import SERVICE_ERROR as SERVICE_ERROR
from turnout.dialects.httpproxy.status_names import SPEC_ERROR as SPEC_ERROR
from turnout.dialects.httpproxy.status_names import TLS_ERROR as TLS_ERROR
from turnout.dialects.httpproxy.status_names import VIRTUAL_HOST_ERROR as VIRTUAL_HOST_ERROR
from turnout.dialects.httpproxy.tcpproxy_spec import TCPProxySpec, read_tcpproxy
from turnout.dialects.httpproxy.tls_options import ClientValidationSpec, read_client_validation
from turnout.dialects.httpproxy.upstream import (
    NO_ROUTE_UPSTREAM,
    ROUTE_FIELDS,
    RouteUpstream,
    read_route_upstream,
)
from turnout.dialects.httpproxy.vhost_policies import (
    NO_POLICIES,
    FilterPolicySpec,
    read_route_policies,
    read_virtualhost_policies,
)
from turnout.dialects.httpproxy.vhost_policies import ROUTE_FIELDS as FILTER_ROUTE_FIELDS
from turnout.dialects.httpproxy.vhost_policies import VHOST_FIELDS as FILTER_VHOST_FIELDS
from turnout.objects import FrozenDict, KubeObject

API_VERSION = "projectcontour.io/v1"
GROUP = "projectcontour.io"
KIND = "HTTPProxy"

# turnout's reasons for what the CRD schema would have rejected (Contour never sees such objects).
FIELD_NOT_VALID = "FieldNotValid"

# The seed 001 shorthands are turnout's: `cookie`, and `userAgent` or seed 001's `user-agent`.
COOKIE_FIELD = "cookie"
USER_AGENT_FIELD = "userAgent"
USER_AGENT_SEED_FIELD = "user-agent"
COOKIE_HEADER = "cookie"
USER_AGENT_HEADER = "user-agent"


# Operator names in the order Contour's messages list them; they are also the record's fields.
HEADER_OPERATORS = (
    "present",
    "notpresent",
    "contains",
    "notcontains",
    "exact",
    "notexact",
    "regex",
)
QUERY_OPERATORS = ("exact", "prefix", "suffix", "regex", "contains", "present")


def _set_fields(record: object, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if getattr(record, name)]


@dataclass(frozen=True, slots=True)
class HeaderCondition:
    """`conditions[].header`. Field names follow the CRD; equality is Contour's struct equality."""

    name: str
    present: bool = False
    notpresent: bool = False
    contains: str = ""
    notcontains: str = ""
    exact: str = ""
    notexact: str = ""
    regex: str = ""
    ignore_case: bool = False
    treat_missing_as_empty: bool = False

    def operators(self) -> list[str]:
        """The match operators that are set; the CRD allows exactly one."""
        return _set_fields(self, HEADER_OPERATORS)


@dataclass(frozen=True, slots=True)
class QueryCondition:
    """`conditions[].queryParameter`."""

    name: str
    exact: str = ""
    prefix: str = ""
    suffix: str = ""
    regex: str = ""
    contains: str = ""
    ignore_case: bool = False
    present: bool = False

    def operators(self) -> list[str]:
        """The match operators that are set; Contour allows exactly one."""
        return _set_fields(self, QUERY_OPERATORS)


@dataclass(frozen=True, slots=True)
class MatchCondition:
    """One entry of `conditions`. `field` is where it was written, for messages.

    `cookie` and `user_agent` are turnout's extensions from seed 001 (`cookie: user=test`,
    `userAgent: Chrome`): a header condition on `cookie` or `user-agent` that contains the value.
    """

    prefix: str = ""
    exact: str = ""
    regex: str = ""
    header: HeaderCondition | None = None
    query: QueryCondition | None = None
    field: str = ""
    cookie: str = ""
    user_agent: str = ""

    def headers(self) -> list[HeaderCondition]:
        """Every header condition this entry sets: `header`, then the shorthands."""
        out = [self.header] if self.header is not None else []
        if self.cookie:
            out.append(HeaderCondition(name=COOKIE_HEADER, contains=self.cookie))
        if self.user_agent:
            out.append(HeaderCondition(name=USER_AGENT_HEADER, contains=self.user_agent))
        return out


@dataclass(frozen=True, slots=True)
class RedirectSpec:
    scheme: str = ""
    hostname: str = ""
    port: int = 0
    status_code: int = 0
    path: str | None = None
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class DirectResponseSpec:
    status_code: int
    body: str = ""


@dataclass(frozen=True, slots=True)
class RouteSpec:
    conditions: tuple[MatchCondition, ...]
    services: tuple[ServiceSpec, ...]
    redirect: RedirectSpec | None
    direct_response: DirectResponseSpec | None
    field: str
    permit_insecure: bool = False
    # rateLimitPolicy, ipAllowPolicy, ipDenyPolicy (`vhost_policies.py`)
    filter_policies: FilterPolicySpec = NO_POLICIES
    # failurePolicy (`upstream.py`)
    upstream: RouteUpstream = NO_ROUTE_UPSTREAM
    # timeouts, retries, headers, rewrites, websockets, cookies, hashing (`route_policies.py`)
    route_policies: RoutePolicySpec = NO_ROUTE_POLICIES
    # healthCheckPolicy (`health_check.py`)
    health_check: HealthCheckPolicySpec | None = None
    auth_policy: AuthPolicySpec | None = None  # `authorization.py`
    jwt_policy: JWTPolicySpec | None = None  # jwtVerificationPolicy (`jwt.py`)
    # The fields written (not null), for rules that depend on what is set (`tcp_route.py`).
    fields: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class IncludeSpec:
    name: str
    namespace: str  # "" means the including proxy's namespace
    conditions: tuple[MatchCondition, ...]
    field: str


@dataclass(frozen=True, slots=True)
class TLSSpec:
    """`virtualhost.tls`. Versions are kept as written; the processor applies Contour's defaults."""

    secret_name: str = ""
    minimum_protocol_version: str = ""
    maximum_protocol_version: str = ""
    passthrough: bool = False
    client_validation: ClientValidationSpec | None = None  # `tls_options.py`
    enable_fallback_certificate: bool = False


@dataclass(frozen=True, slots=True)
class VirtualHostSpec:
    # None when the field has the wrong type (already reported); "" when it is missing.
    fqdn: str | None
    tls: TLSSpec | None = None
    # corsPolicy, rateLimitPolicy, ipAllowPolicy, ipDenyPolicy (`vhost_policies.py`)
    filter_policies: FilterPolicySpec = NO_POLICIES
    authorization: AuthorizationSpec | None = None  # `authorization.py`
    jwt_providers: tuple[JWTProviderSpec, ...] = ()  # `jwt.py`

    @property
    def terminates_tls(self) -> bool:
        """Whether the host wants TLS terminated with its own certificate (and so an HTTPS
        virtual host next to its HTTP one)."""
        return self.tls is not None and bool(self.tls.secret_name) and not self.tls.passthrough


@dataclass(frozen=True, slots=True)
class ProxySpec:
    virtualhost: VirtualHostSpec | None
    routes: tuple[RouteSpec, ...] = ()
    includes: tuple[IncludeSpec, ...] = ()
    tcpproxy: TCPProxySpec | None = None  # `tcpproxy_spec.py`, compiled by `tcpproxy.py`


@dataclass(frozen=True, slots=True)
class ParsedProxy:
    obj: KubeObject
    spec: ProxySpec
    problems: tuple[Problem, ...]
    # (namespace, name): made once, the include walk looks it up at every step.
    key: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.obj.namespace, self.obj.name))

    @property
    def is_root(self) -> bool:
        return self.spec.virtualhost is not None

    @property
    def schema_valid(self) -> bool:
        """False when the object would not have been admitted, or uses a refused field."""
        return not any(not p.warning for p in self.problems)


# --- field tables -------------------------------------------------------------------------------
# Fields Contour supports that turnout ignores with a warning: without them the routes still go
# where the user sent them, only a feature is missing.
_IGNORED_SPEC: frozenset[str] = frozenset()
_IGNORED_VHOST: frozenset[str] = frozenset()
_IGNORED_ROUTE: frozenset[str] = frozenset()
# Fields whose absence would weaken what the user asked for: the object is refused instead.
_REFUSED_SPEC: frozenset[str] = frozenset()
_REFUSED_VHOST: frozenset[str] = frozenset()
# What to use instead of a refused field, in its message.
_INSTEAD: dict[str, str] = {}
_REFUSED_ROUTE: frozenset[str] = frozenset()

_SPEC_FIELDS = frozenset({"virtualhost", "routes", "includes", "ingressClassName", "tcpproxy"})
_VHOST_FIELDS = frozenset({"fqdn", "tls", "authorization"}) | FILTER_VHOST_FIELDS | JWT_VHOST_FIELDS
_TLS_FIELDS = frozenset(
    {
        "secretName",
        "minimumProtocolVersion",
        "maximumProtocolVersion",
        "passthrough",
        "enableFallbackCertificate",
        "clientValidation",
    }
)
_ROUTE_FIELDS = ROUTE_FIELDS | frozenset(
    {
        "conditions",
        "services",
        "requestRedirectPolicy",
        "directResponsePolicy",
        "permitInsecure",
        "authPolicy",
    }
)
_ROUTE_FIELDS |= ROUTE_POLICY_FIELDS
_ROUTE_FIELDS |= FILTER_ROUTE_FIELDS
_ROUTE_FIELDS |= HEALTH_ROUTE_FIELDS
_ROUTE_FIELDS |= JWT_ROUTE_FIELDS
_INCLUDE_FIELDS = frozenset({"name", "namespace", "conditions"})
_CONDITION_FIELDS = frozenset(
    {
        "prefix",
        "exact",
        "regex",
        "header",
        "queryParameter",
        COOKIE_FIELD,
        USER_AGENT_FIELD,
        USER_AGENT_SEED_FIELD,
    }
)
_HEADER_FIELDS = frozenset({"name", *HEADER_OPERATORS, "ignoreCase", "treatMissingAsEmpty"})
_QUERY_FIELDS = frozenset({"name", *QUERY_OPERATORS, "ignoreCase"})
_REDIRECT_FIELDS = frozenset({"scheme", "hostname", "port", "statusCode", "path", "prefix"})
_DIRECT_FIELDS = frozenset({"statusCode", "body"})

_REDIRECT_SCHEMES = ("http", "https")
_REDIRECT_CODES = (301, 302, 303, 307, 308)


class _Reader(FieldReader):
    """Reads fields with their types checked; every problem is recorded with its field path."""

    refuses_whole_object = True

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def error(self, message: str, reason: str = FIELD_NOT_VALID) -> None:
        self.problems.append(Problem(SPEC_ERROR, reason, message))

    def field_error(self, where: str, message: str) -> None:
        self.error(f"{where}: {message}")

    def refused_field(self, where: str) -> None:
        instead = _INSTEAD.get(where.rpartition(".")[2])
        hint = f"; instead, {instead}" if instead else ""
        self.error(f"{where} is not supported by turnout yet{hint}", FIELD_NOT_SUPPORTED)

    def ignored_field(self, where: str) -> None:
        self.problems.append(
            Problem(
                SPEC_ERROR,
                IGNORED_FIELD,
                f'ignoring field "{where}"; not supported by turnout yet',
                warning=True,
            )
        )

    def is_list(self, value: Any) -> bool:
        return isinstance(value, tuple | list) or not (
            isinstance(value, str | bytes) or not isinstance(value, Sequence)
        )

    def mapping(self, value: Any, path: str) -> dict[str, Any] | None:
        # A plain dict: objects arrive as FrozenDicts, whose inherited Mapping.get is slow, and
        # the reader looks up many absent keys.
        if isinstance(value, FrozenDict | dict | Mapping):  # cheap exact types first
            return dict(value)
        self.field_error(path, f"must be an object, got {describe(value)}")
        return None


# Routes read without a problem, by (the identity of the raw route, its field path): `RouteMemo`.
RouteMemo = dict[tuple[int, str], tuple[Any, "RouteSpec"]]


def parse_proxy(obj: KubeObject, memo: RouteMemo | None = None) -> ParsedProxy:
    """Reads `obj` into a `ProxySpec`; never raises, whatever the object holds.

    `memo` (one per load of many proxies, then dropped) shares the routes of equal raw routes
    at the same place: the files source builds equal mappings once, so route after route of
    thousands of proxies is the very same mapping, read once here."""
    r = _Reader()
    if obj.api_version != API_VERSION:
        r.error(f"apiVersion {obj.api_version} is not served; HTTPProxy is {API_VERSION}")
    raw = obj.spec
    if raw is None:
        return ParsedProxy(obj, ProxySpec(virtualhost=None), tuple(r.problems))
    spec = r.mapping(raw, "spec")
    if spec is None:
        return ParsedProxy(obj, ProxySpec(virtualhost=None), tuple(r.problems))
    r.check_fields(spec, "spec", _SPEC_FIELDS, _IGNORED_SPEC, _REFUSED_SPEC)

    virtualhost: VirtualHostSpec | None = None
    if spec.get("virtualhost") is not None:
        virtualhost = _virtualhost(r, spec["virtualhost"])
    over = total_backends_problem(spec.get("routes"), "services")
    if over is not None:
        r.field_error("spec.routes", over)  # the proxy is refused: its routes are not read
    routes = (
        ()
        if over
        else tuple(_read_route(r, v, p, memo) for p, v in r.items(spec, "routes", "spec"))
    )
    includes = tuple(_include(r, v, p) for p, v in r.items(spec, "includes", "spec"))
    # Only its type is checked here: `classes.serves` already selected the proxy by its class.
    r.string(spec, "ingressClassName", "spec")
    return ParsedProxy(
        obj,
        ProxySpec(
            virtualhost=virtualhost,
            routes=tuple(x for x in routes if x is not None),
            includes=tuple(x for x in includes if x is not None),
            tcpproxy=read_tcpproxy(r, spec["tcpproxy"], "spec.tcpproxy")
            if spec.get("tcpproxy") is not None
            else None,
        ),
        tuple(r.problems),
    )


def _virtualhost(r: _Reader, value: Any) -> VirtualHostSpec:
    path = "spec.virtualhost"
    m = r.mapping(value, path)
    if m is None:
        return VirtualHostSpec(fqdn=None)
    r.check_fields(m, path, _VHOST_FIELDS, _IGNORED_VHOST, _REFUSED_VHOST)
    tls = _tls(r, m["tls"], f"{path}.tls") if m.get("tls") is not None else None
    filter_policies = read_virtualhost_policies(r, m, path)
    auth = None
    if m.get("authorization") is not None:
        auth = read_authorization(r, m["authorization"], f"{path}.authorization")
    jwt_providers = read_jwt_providers(r, m, path)
    fqdn = m.get("fqdn")
    if fqdn is not None and not isinstance(fqdn, str):
        r.error(f"{path}.fqdn: must be a string, got {describe(fqdn)}")
        fqdn = None
    else:
        fqdn = fqdn or ""
    return VirtualHostSpec(
        fqdn=fqdn,
        tls=tls,
        filter_policies=filter_policies,
        authorization=auth,
        jwt_providers=jwt_providers,
    )


def _tls(r: _Reader, value: Any, path: str) -> TLSSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _TLS_FIELDS)
    # Combinations (passthrough with secretName, fallback with client validation...) are
    # Contour's TLS errors, reported by the processor.
    return TLSSpec(
        secret_name=r.string(m, "secretName", path),
        minimum_protocol_version=r.string(m, "minimumProtocolVersion", path),
        maximum_protocol_version=r.string(m, "maximumProtocolVersion", path),
        passthrough=r.boolean(m, "passthrough", path),
        client_validation=read_client_validation(
            r, m["clientValidation"], f"{path}.clientValidation"
        )
        if m.get("clientValidation") is not None
        else None,
        enable_fallback_certificate=r.boolean(m, "enableFallbackCertificate", path),
    )


def _conditions(r: _Reader, m: Mapping[str, Any], path: str) -> tuple[MatchCondition, ...]:
    out: list[MatchCondition] = []
    for p, v in r.items(m, "conditions", path):
        cm = r.mapping(v, p)
        if cm is None:
            continue
        r.check_fields(cm, p, _CONDITION_FIELDS)
        header: HeaderCondition | None = None
        if cm.get("header") is not None:
            header = _header(r, cm["header"], f"{p}.header")
        query: QueryCondition | None = None
        if cm.get("queryParameter") is not None:
            query = _query(r, cm["queryParameter"], f"{p}.queryParameter")
        out.append(
            MatchCondition(
                prefix=r.string(cm, "prefix", p),
                exact=r.string(cm, "exact", p),
                regex=r.string(cm, "regex", p),
                header=header,
                query=query,
                field=p,
                cookie=_shorthand(r, cm, COOKIE_FIELD, p),
                user_agent=_user_agent(r, cm, p),
            )
        )
    return tuple(out)


def _shorthand(r: _Reader, m: Mapping[str, Any], key: str, path: str) -> str:
    """A seed 001 shorthand's value. An empty one is refused rather than read as "not set": the
    condition would then silently match every request."""
    if key not in m:
        return ""
    before = len(r.problems)
    value = r.string(m, key, path)
    if len(r.problems) == before and not value:
        r.error(f"{path}.{key}: must not be empty")
    return value


def _user_agent(r: _Reader, m: Mapping[str, Any], path: str) -> str:
    if USER_AGENT_FIELD in m and USER_AGENT_SEED_FIELD in m:
        r.error(f"{path}: set {USER_AGENT_FIELD} or {USER_AGENT_SEED_FIELD}, not both")
        return ""
    key = USER_AGENT_SEED_FIELD if USER_AGENT_SEED_FIELD in m else USER_AGENT_FIELD
    return _shorthand(r, m, key, path)


def _header_name(r: _Reader, m: Mapping[str, Any], path: str) -> str:
    name = r.string(m, "name", path, required=True)
    # Envoy's HTTP_HEADER_NAME rule (non-strict) refuses NUL, CR and LF in a header name.
    if any(c in name for c in "\x00\r\n"):
        r.error(f"{path}.name: must not contain NUL, CR or LF")
        return ""
    return name


def _header(r: _Reader, value: Any, path: str) -> HeaderCondition | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _HEADER_FIELDS)
    header = HeaderCondition(
        name=_header_name(r, m, path),
        present=r.boolean(m, "present", path),
        notpresent=r.boolean(m, "notpresent", path),
        contains=r.string(m, "contains", path),
        notcontains=r.string(m, "notcontains", path),
        exact=r.string(m, "exact", path),
        notexact=r.string(m, "notexact", path),
        regex=r.string(m, "regex", path),
        ignore_case=r.boolean(m, "ignoreCase", path),
        treat_missing_as_empty=r.boolean(m, "treatMissingAsEmpty", path),
    )
    ops = header.operators()
    if len(ops) == 1:
        # Contour drops these flags without a word where Envoy's matcher cannot use them; a user
        # who set one expects it to work, so say that it does not.
        if header.ignore_case and ops[0] in _HEADER_OPS_WITHOUT_IGNORE_CASE:
            _no_effect(r, f"{path}.ignoreCase", ops[0])
        if header.treat_missing_as_empty and ops[0] not in _HEADER_OPS_WITH_MISSING_AS_EMPTY:
            _no_effect(r, f"{path}.treatMissingAsEmpty", ops[0])
    return header


# Contour's `headerMatchConditions` keeps ignoreCase for (not)contains and (not)exact only, and
# treatMissingAsEmpty for the negative string matches only (the CRD says so for the latter).
_HEADER_OPS_WITHOUT_IGNORE_CASE = frozenset({"present", "notpresent", "regex"})
_HEADER_OPS_WITH_MISSING_AS_EMPTY = frozenset({"notcontains", "notexact"})
# Contour's `queryParameterMatchConditions` keeps ignoreCase for all but regex and present.
_QUERY_OPS_WITHOUT_IGNORE_CASE = frozenset({"regex", "present"})


def _no_effect(r: _Reader, where: str, operator: str) -> None:
    r.problems.append(
        Problem(
            SPEC_ERROR,
            IGNORED_FIELD,
            f"ignoring field \"{where}\"; it has no effect on '{operator}' conditions",
            warning=True,
        )
    )


def _query(r: _Reader, value: Any, path: str) -> QueryCondition | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _QUERY_FIELDS)
    query = QueryCondition(
        # Envoy's QueryParameterMatcher requires a non-empty name.
        name=_header_name(r, m, path),
        exact=r.string(m, "exact", path),
        prefix=r.string(m, "prefix", path),
        suffix=r.string(m, "suffix", path),
        regex=r.string(m, "regex", path),
        contains=r.string(m, "contains", path),
        ignore_case=r.boolean(m, "ignoreCase", path),
        present=r.boolean(m, "present", path),
    )
    ops = query.operators()
    if len(ops) == 1 and query.ignore_case and ops[0] in _QUERY_OPS_WITHOUT_IGNORE_CASE:
        _no_effect(r, f"{path}.ignoreCase", ops[0])
    return query


def _read_route(r: _Reader, value: Any, path: str, memo: RouteMemo | None) -> RouteSpec | None:
    """`_route`, from `memo` when the same raw route at the same path was read without a
    problem: a route is a function of those two (its problems are its only other output)."""
    if memo is None:
        return _route(r, value, path)
    key = (id(value), path)
    hit = memo.get(key)
    if hit is not None and hit[0] is value:  # the value is held, so its id is not reused
        return hit[1]
    before = len(r.problems)
    route = _route(r, value, path)
    if route is not None and len(r.problems) == before:
        memo[key] = (value, route)
    return route


def _route(r: _Reader, value: Any, path: str) -> RouteSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _ROUTE_FIELDS, _IGNORED_ROUTE, _REFUSED_ROUTE)
    # Fields are read in the CRD's order so that problems are listed as the user wrote them.
    conditions = _conditions(r, m, path)
    services: list[ServiceSpec] = []
    for p, v in r.items(m, "services", path):
        svc = read_service(r, v, p)
        if svc is not None:
            services.append(svc)
    redirect: RedirectSpec | None = None
    if m.get("requestRedirectPolicy") is not None:
        redirect = _redirect(r, m["requestRedirectPolicy"], f"{path}.requestRedirectPolicy")
    direct: DirectResponseSpec | None = None
    if m.get("directResponsePolicy") is not None:
        direct = _direct(r, m["directResponsePolicy"], f"{path}.directResponsePolicy")
    return RouteSpec(
        conditions=conditions,
        services=tuple(services),
        redirect=redirect,
        direct_response=direct,
        field=path,
        permit_insecure=r.boolean(m, "permitInsecure", path),
        filter_policies=read_route_policies(r, m, path),
        upstream=read_route_upstream(r, m, path),
        route_policies=read_traffic_policies(r, m, path),
        health_check=read_route_health_check(r, m, path, services),
        auth_policy=read_auth_policy(r, m["authPolicy"], f"{path}.authPolicy")
        if m.get("authPolicy") is not None
        else None,
        jwt_policy=read_jwt_policy(r, m, path),
        fields=written(m),
    )


def _redirect(r: _Reader, value: Any, path: str) -> RedirectSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _REDIRECT_FIELDS)
    scheme = r.string(m, "scheme", path)
    if scheme and scheme not in _REDIRECT_SCHEMES:
        r.error(f'{path}.scheme: must be one of "http", "https", got "{scheme}"')
    port = r.integer(m, "port", path)
    if port and not 1 <= port <= 65535:
        r.error(f"{path}.port: must be in the range 1-65535, got {port}")
    code = r.integer(m, "statusCode", path)
    if code and code not in _REDIRECT_CODES:
        r.error(f"{path}.statusCode: must be one of 301, 302, 303, 307, 308, got {code}")
    return RedirectSpec(
        scheme=scheme,
        hostname=r.string(m, "hostname", path),
        port=port,
        status_code=code,
        path=r.string(m, "path", path) if m.get("path") is not None else None,
        prefix=r.string(m, "prefix", path) if m.get("prefix") is not None else None,
    )


def _direct(r: _Reader, value: Any, path: str) -> DirectResponseSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _DIRECT_FIELDS)
    before = len(r.problems)
    code = r.integer(m, "statusCode", path, required=True)
    if len(r.problems) == before and not 200 <= code <= 599:
        r.error(f"{path}.statusCode: must be in the range 200-599, got {code}")
    return DirectResponseSpec(status_code=code, body=r.string(m, "body", path))


def _include(r: _Reader, value: Any, path: str) -> IncludeSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _INCLUDE_FIELDS)
    return IncludeSpec(
        name=r.string(m, "name", path, required=True),
        namespace=r.string(m, "namespace", path),
        conditions=_conditions(r, m, path),
        field=path,
    )

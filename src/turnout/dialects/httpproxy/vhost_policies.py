"""HTTPProxy's virtual-host and filter policies: `virtualhost.corsPolicy`, `rateLimitPolicy.local`
(on the virtual host and on routes) and `ipAllowPolicy`/`ipDenyPolicy` (on both).

Two steps, like the rest of the dialect:
- *reading* (`read_virtualhost_policies`, `read_route_policies`, called by `spec.py`'s reader):
  the CRD's own checks (types, required fields, enums, patterns), reported as `SpecError`s that
  name the field;
- *compiling* (`vhost_ip_conflict`, `compile_vhost_policies`, `compile_route_rate_limit`,
  `compile_route_ip_filter`, called by the processor at the points where Contour's processor
  checks them): Contour's validation with Contour's condition types, reasons and messages, into
  the graph's `CorsPolicy`, `IPFilter` and `LocalRateLimit`.

Where Contour would accept a policy that cannot work, turnout refuses it instead (each is noted
where it happens): a rate-limit status Envoy cannot send, more than 10 response headers, a
header value with a line break, a CORS regex too large for Envoy's RE2 limit, and any invalid
CIDR (Contour drops the rule and keeps serving unless it was the last one in the list; without
the rule a deny list would let in an address the user meant to keep out).

Global rate limiting (`global`, read by `global_rate_limit.py`) asks the rate limit service the
operator runs (`--rate-limit-service`); without one, a policy with descriptors is an error naming
the flag, and `global: {disabled: true}` on a route (nothing to opt out of) is ignored with a
warning.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnout.dialects.fields import MAX_UINT32, NANOS_PER_SECOND, parse_go_duration
from turnout.dialects.httpproxy.global_rate_limit import missing_service_message, read_global
from turnout.dialects.httpproxy.route_policies import (
    canonical_header_key,
    escape_header_value,
    header_name_problem,
)
from turnout.dialects.httpproxy.status_names import (
    IGNORED_FIELD,
    ROUTE_ERROR,
    SPEC_ERROR,
    VIRTUAL_HOST_ERROR,
)
from turnout.dialects.httpproxy.upstream import Reader
from turnout.graph.model import (
    ANY_ORIGIN,
    CorsPolicy,
    ExactOrigin,
    GlobalRateLimit,
    HeaderValue,
    IPFilter,
    IPFilterSource,
    IPRule,
    LocalRateLimit,
    OriginMatch,
    RegexOrigin,
    Route,
    VirtualHost,
    VirtualHostPolicies,
)
from turnout.graph.regex import regex_error

# Keys these policies add to `spec.virtualhost` and to `spec.routes[]`.
VHOST_FIELDS = frozenset({"corsPolicy", "rateLimitPolicy", "ipAllowPolicy", "ipDenyPolicy"})
ROUTE_FIELDS = frozenset({"rateLimitPolicy", "ipAllowPolicy", "ipDenyPolicy"})

# Contour's condition types and the reasons used here.
CORS_ERROR = "CORSError"
IP_FILTER_ERROR = "IPFilterError"

_CORS_FIELDS = frozenset(
    {
        "allowCredentials",
        "allowOrigin",
        "allowMethods",
        "allowHeaders",
        "exposeHeaders",
        "maxAge",
        "allowPrivateNetwork",
    }
)
_RATE_LIMIT_FIELDS = frozenset({"local", "global"})
_LOCAL_FIELDS = frozenset(
    {"requests", "unit", "burst", "responseStatusCode", "responseHeadersToAdd"}
)
_HEADER_FIELDS = frozenset({"name", "value"})
_IP_FIELDS = frozenset({"source", "cidr"})
_IP_SOURCES = {"Peer": IPFilterSource.PEER, "Remote": IPFilterSource.REMOTE}

# The CRD's pattern for `CORSHeaderValue` (methods and header names): an HTTP token, so no value
# can smuggle a "," into the comma-joined lists Envoy sends.
_CORS_TOKEN = re.compile(r"[a-zA-Z0-9!#$%&'*+.^_`|~-]+")
_UNITS = {"second": 1, "minute": 60, "hour": 3600}
# Envoy's `LocalRateLimit.response_headers_to_add` takes at most 10 entries.
_MAX_RATE_LIMIT_HEADERS = 10
# The statuses from 400 to 599 in Envoy's `StatusCode` enum, the only ones a rate-limited
# request can be answered with (`envoy/type/v3/http_status.proto`, `defined_only`); Envoy would
# reject the whole route table for any other.
_RATE_LIMIT_STATUSES = frozenset(
    {*range(400, 418), *range(421, 425), 426, 428, 429, 431, *range(500, 509), 510, 511}
)


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """A status sub-condition for the processor to record."""

    type: str
    reason: str
    message: str
    warning: bool = False


# --- the spec as written ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CorsSpec:
    allow_origin: tuple[str, ...] = ()
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: str = ""
    allow_credentials: bool = False
    allow_private_network: bool = False


@dataclass(frozen=True, slots=True)
class HeaderSpec:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class LocalRateLimitSpec:
    requests: int = 0
    unit: str = ""
    burst: int = 0
    response_status_code: int = 0  # 0: Envoy's default, 429
    response_headers: tuple[HeaderSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class IPRuleSpec:
    source: str  # "Peer" | "Remote" (checked by the reader)
    cidr: str


@dataclass(frozen=True, slots=True)
class FilterPolicySpec:
    """The policies of one virtual host or one route, as written. `cors` is virtual-host only."""

    cors: CorsSpec | None = None
    rate_limit: LocalRateLimitSpec | None = None
    ip_allow: tuple[IPRuleSpec, ...] = ()
    ip_deny: tuple[IPRuleSpec, ...] = ()
    # `rateLimitPolicy.global` (descriptors, or `disabled`) and where it was written.
    global_policy: GlobalRateLimit | None = None
    global_at: str = ""


NO_POLICIES = FilterPolicySpec()


# --- reading ------------------------------------------------------------------------------------


def read_virtualhost_policies(r: Reader, m: Mapping[str, Any], path: str) -> FilterPolicySpec:
    """The policies of `spec.virtualhost` (`m`, at `path`)."""
    cors = None
    if m.get("corsPolicy") is not None:
        cors = _cors(r, m["corsPolicy"], f"{path}.corsPolicy")
    return _filters(r, m, path, cors)


def read_route_policies(r: Reader, m: Mapping[str, Any], path: str) -> FilterPolicySpec:
    """The policies of one `spec.routes[]` entry (`m`, at `path`)."""
    return _filters(r, m, path, None)


def _filters(r: Reader, m: Mapping[str, Any], path: str, cors: CorsSpec | None) -> FilterPolicySpec:
    rate_limit: LocalRateLimitSpec | None = None
    global_policy: GlobalRateLimit | None = None
    global_at = ""
    if m.get("rateLimitPolicy") is not None:
        where = f"{path}.rateLimitPolicy"
        rl = r.mapping(m["rateLimitPolicy"], where)
        if rl is not None:
            r.check_fields(rl, where, _RATE_LIMIT_FIELDS)
            if rl.get("local") is not None:
                rate_limit = _local(r, rl["local"], f"{where}.local")
            if rl.get("global") is not None:
                global_at = f"{where}.global"
                global_policy = read_global(r, rl["global"], global_at)
    return FilterPolicySpec(
        cors=cors,
        rate_limit=rate_limit,
        ip_allow=_ip_rules(r, m, "ipAllowPolicy", path),
        ip_deny=_ip_rules(r, m, "ipDenyPolicy", path),
        global_policy=global_policy,
        global_at=global_at,
    )


def _cors(r: Reader, value: Any, path: str) -> CorsSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _CORS_FIELDS)
    return CorsSpec(
        allow_origin=_strings(r, m, "allowOrigin", path),
        allow_methods=_strings(r, m, "allowMethods", path, _CORS_TOKEN),
        allow_headers=_strings(r, m, "allowHeaders", path, _CORS_TOKEN),
        expose_headers=_strings(r, m, "exposeHeaders", path, _CORS_TOKEN),
        max_age=r.string(m, "maxAge", path),
        allow_credentials=r.boolean(m, "allowCredentials", path),
        allow_private_network=r.boolean(m, "allowPrivateNetwork", path),
    )


def _strings(
    r: Reader, m: Mapping[str, Any], key: str, path: str, pattern: re.Pattern[str] | None = None
) -> tuple[str, ...]:
    out: list[str] = []
    for where, item in r.items(m, key, path):
        if not isinstance(item, str):
            r.error(f"{where}: must be a string, got {_describe(item)}")
            continue
        if pattern is not None and not pattern.fullmatch(item):
            r.error(f"{where}: must match {pattern.pattern}, got {item!r}")
            continue
        out.append(item)
    return tuple(out)


def _local(r: Reader, value: Any, path: str) -> LocalRateLimitSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _LOCAL_FIELDS)
    requests = r.integer(m, "requests", path)
    if requests > MAX_UINT32:
        r.error(f"{path}.requests: must be at most {MAX_UINT32}, got {requests}")
    burst = r.integer(m, "burst", path)
    if not 0 <= burst <= MAX_UINT32:
        r.error(f"{path}.burst: must be in the range 0-{MAX_UINT32}, got {burst}")
        burst = 0
    code = r.integer(m, "responseStatusCode", path)
    if code and not 400 <= code <= 599:
        r.error(f"{path}.responseStatusCode: must be in the range 400-599, got {code}")
        code = 0
    headers: list[HeaderSpec] = []
    for where, item in r.items(m, "responseHeadersToAdd", path):
        hm = r.mapping(item, where)
        if hm is None:
            continue
        r.check_fields(hm, where, _HEADER_FIELDS)
        headers.append(
            HeaderSpec(
                name=r.string(hm, "name", where, required=True),
                value=r.string(hm, "value", where, required=True),
            )
        )
    return LocalRateLimitSpec(
        requests=requests,
        unit=r.string(m, "unit", path),
        burst=burst,
        response_status_code=code,
        response_headers=tuple(headers),
    )


def _ip_rules(r: Reader, m: Mapping[str, Any], key: str, path: str) -> tuple[IPRuleSpec, ...]:
    out: list[IPRuleSpec] = []
    for where, item in r.items(m, key, path):
        rm = r.mapping(item, where)
        if rm is None:
            continue
        r.check_fields(rm, where, _IP_FIELDS)
        source = r.string(rm, "source", where, required=True)
        cidr = r.string(rm, "cidr", where, required=True)
        if source and source not in _IP_SOURCES:
            r.error(f'{where}.source: must be one of "Peer", "Remote", got "{source}"')
            continue
        if source and cidr:
            out.append(IPRuleSpec(source, cidr))
    return tuple(out)


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return "null" if value is None else type(value).__name__


# --- compiling (Contour's checks) ---------------------------------------------------------------


def vhost_ip_conflict(spec: FilterPolicySpec) -> PolicyProblem | None:
    """Contour checks this one early, before TLS and before walking the includes."""
    if spec.ip_allow and spec.ip_deny:
        # Contour's message, misspelling included, so that tools matching on it keep working.
        return PolicyProblem(
            IP_FILTER_ERROR,
            "IncompatibleIPAddressFilters",
            "Spec.VirtualHost.IPAllowFilterPolicy and Spec.VirtualHost.IPDepnyFilterPolicy "
            "cannot both be defined.",
        )
    return None


def compile_vhost_policies(
    spec: FilterPolicySpec, rate_limit_service: bool = False
) -> tuple[VirtualHostPolicies | None, list[PolicyProblem]]:
    """The virtual host's policies, or None with the errors that drop the whole host (CORS, then
    the rate limits, then the IP filter: Contour's order). `rate_limit_service`: whether a
    global rate limit service is configured."""
    problems: list[PolicyProblem] = []
    cors = None
    if spec.cors is not None:
        cors_or_error = _cors_policy(spec.cors)
        if isinstance(cors_or_error, str):
            problems.append(
                PolicyProblem(
                    CORS_ERROR, "PolicyDidNotParse", f"Spec.VirtualHost.CORSPolicy: {cors_or_error}"
                )
            )
            return None, problems
        cors = cors_or_error
    rate_limit = None
    if spec.rate_limit is not None:
        limit_or_error = _rate_limit(spec.rate_limit)
        if isinstance(limit_or_error, str):
            problems.append(
                PolicyProblem(
                    VIRTUAL_HOST_ERROR,
                    "RateLimitPolicyNotValid",
                    f"Spec.VirtualHost.RateLimitPolicy is invalid: {limit_or_error}",
                )
            )
            return None, problems
        rate_limit = limit_or_error
    global_policy, global_problems = _vhost_global(spec, rate_limit_service)
    problems.extend(global_problems)
    if has_errors(global_problems):
        return None, problems
    ip_filter, ip_problems, last_error = _ip_filter(spec.ip_allow, spec.ip_deny)
    problems.extend(ip_problems)
    if last_error:
        problems.append(
            PolicyProblem(
                IP_FILTER_ERROR,
                "IPFilterPolicyNotValid",
                "Spec.VirtualHost.IPAllowFilterPolicy or Spec.VirtualHost.IPDenyFilterPolicy is "
                f"invalid: {last_error}",
            )
        )
        return None, problems
    return VirtualHostPolicies(
        cors=cors, ip_filter=ip_filter, rate_limit=rate_limit, global_rate_limit=global_policy
    ), problems


def compile_route_rate_limit(
    spec: FilterPolicySpec,
) -> tuple[LocalRateLimit | None, list[PolicyProblem]]:
    """The route's own rate limit; an error drops every route of the proxy (Contour)."""
    problems: list[PolicyProblem] = []
    if spec.rate_limit is None:
        return None, problems
    limit_or_error = _rate_limit(spec.rate_limit)
    if isinstance(limit_or_error, str):
        problems.append(
            PolicyProblem(
                ROUTE_ERROR,
                "RateLimitPolicyNotValid",
                f"route.rateLimitPolicy is invalid: {limit_or_error}",
            )
        )
        return None, problems
    return limit_or_error, problems


def compile_route_ip_filter(
    spec: FilterPolicySpec,
) -> tuple[IPFilter | None, list[PolicyProblem]]:
    """The route's own IP filter (it replaces the virtual host's); any error drops every route of
    the proxy."""
    if spec.ip_allow and spec.ip_deny:
        return None, [
            PolicyProblem(
                IP_FILTER_ERROR,
                "IncompatibleIPAddressFilters",
                "cannot specify both `ipAllowPolicy` and `ipDenyPolicy`",
            )
        ]
    ip_filter, problems, _ = _ip_filter(spec.ip_allow, spec.ip_deny)
    return ip_filter, problems


def has_errors(problems: list[PolicyProblem]) -> bool:
    return any(not p.warning for p in problems)


def compile_route_global(
    spec: FilterPolicySpec, rate_limit_service: bool
) -> tuple[GlobalRateLimit | None, list[PolicyProblem]]:
    """The route's global rate limit (its descriptors replace the virtual host's; `disabled`
    opts it out of them); an error drops every route of the proxy, like a bad local limit."""
    policy = spec.global_policy
    if policy is None:
        return None, []
    if rate_limit_service:
        return policy, []
    if policy.disabled:
        return None, [
            _ignored(spec.global_at, "turnout has no global rate limit policy to disable")
        ]
    message = missing_service_message("route.rateLimitPolicy.global")
    return None, [PolicyProblem(ROUTE_ERROR, "RateLimitPolicyNotValid", message)]


def _vhost_global(
    spec: FilterPolicySpec, rate_limit_service: bool
) -> tuple[GlobalRateLimit | None, list[PolicyProblem]]:
    policy = spec.global_policy
    if policy is None:
        return None, []
    if policy.disabled:
        # Contour reads `disabled` on routes only.
        return None, [_ignored(spec.global_at, "disabled opts a route out, not a virtual host")]
    if rate_limit_service:
        return policy, []
    message = missing_service_message("Spec.VirtualHost.RateLimitPolicy.Global")
    return None, [PolicyProblem(VIRTUAL_HOST_ERROR, "RateLimitPolicyNotValid", message)]


def _ignored(where: str, why: str) -> PolicyProblem:
    return PolicyProblem(
        SPEC_ERROR, IGNORED_FIELD, f'ignoring field "{where}"; {why}', warning=True
    )


# --- CORS ---------------------------------------------------------------------------------------


def _cors_policy(spec: CorsSpec) -> CorsPolicy | str:
    """Contour's `toCORSPolicy`: the policy, or the error text."""
    if not spec.allow_origin:
        return "invalid allowed origin configuration with length 0"
    origins: list[OriginMatch] = []
    for origin in spec.allow_origin:
        match = _allow_origin(origin)
        if match is None:
            return (
                f"invalid allowed origin {_go_quote(origin)}: allowed origin is invalid exact "
                "match and invalid regex match"
            )
        origins.append(match)
    if not spec.allow_methods:
        return "invalid allowed methods configuration with length 0"
    max_age: int | None = None
    if spec.max_age:
        try:
            nanoseconds = parse_go_duration(spec.max_age)
        except ValueError as err:
            return f"unable to parse timeout string {_go_quote(spec.max_age)}: {err}"
        if nanoseconds < 0:
            return f"invalid max age value {_go_quote(spec.max_age)}"
        # Go's "%.0f": round half to even, as Python's round().
        max_age = round(nanoseconds / NANOS_PER_SECOND)
    return CorsPolicy(
        allow_origins=tuple(origins),
        allow_methods=spec.allow_methods,
        allow_headers=spec.allow_headers,
        expose_headers=spec.expose_headers,
        max_age_s=max_age,
        allow_credentials=spec.allow_credentials,
        allow_private_network=spec.allow_private_network,
    )


# Go's url.Parse of `scheme://authority`: what Contour takes for an exact origin.
_ORIGIN = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)")
_HOST_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%]+")


def _allow_origin(origin: str) -> OriginMatch | None:
    """`*`, an exact origin (`scheme://host[:port]`, as written), or an RE2 regex
    (Contour's rule: anything that is not exactly a scheme and a host is a regex). None when it
    is neither."""
    if origin == "*":
        return ANY_ORIGIN
    m = _ORIGIN.fullmatch(origin)
    # Go lower-cases the scheme and splits off user info, so either makes the URL differ from
    # what was written, and Contour then reads the origin as a regex.
    if (
        m is not None
        and m.group(1) == m.group(1).lower()
        and m.group(2)
        and "@" not in m.group(2)
        and _HOST_CHARS.fullmatch(m.group(2))
    ):
        return ExactOrigin(origin)
    # Contour compiles the regex with Go; Envoy also refuses programs above its size limit.
    if regex_error(origin) is not None:
        return None
    return RegexOrigin(origin)


# --- local rate limits --------------------------------------------------------------------------


def _rate_limit(spec: LocalRateLimitSpec) -> LocalRateLimit | str:
    """Contour's `localRateLimitPolicy`: the limit, or the error text."""
    if spec.requests <= 0:
        return f"invalid requests value {spec.requests} in local rate limit policy"
    unit = _UNITS.get(spec.unit)
    if unit is None:
        return f"invalid unit {_go_quote(spec.unit)} in local rate limit policy"
    if spec.requests + spec.burst > MAX_UINT32:
        # Contour adds them as uint32 and silently wraps around to a tiny bucket.
        return f"requests + burst must be at most {MAX_UINT32} in local rate limit policy"
    code = spec.response_status_code
    if code and code not in _RATE_LIMIT_STATUSES:
        return (
            f"invalid response status code {code} in local rate limit policy: Envoy can only "
            "send the statuses of its StatusCode enum"
        )
    headers: list[HeaderValue] = []
    seen: set[str] = set()
    for header in spec.response_headers:
        key = canonical_header_key(header.name)
        if key in seen:
            return f"duplicate header addition: {_go_quote(key)}"
        problem = header_name_problem(key)
        if problem is not None:
            return f"invalid header name {_go_quote(key)}: [{problem}]"
        if any(c in header.value for c in "\x00\r\n"):
            return f"invalid header value for {_go_quote(key)}: must not contain NUL, CR or LF"
        seen.add(key)
        # No Contour variables here (`%CONTOUR_NAMESPACE%` is for route headers only).
        headers.append(HeaderValue(key, escape_header_value(header.value, {})))
    if len(headers) > _MAX_RATE_LIMIT_HEADERS:
        return (
            f"at most {_MAX_RATE_LIMIT_HEADERS} responseHeadersToAdd are supported, "
            f"got {len(headers)}"
        )
    return LocalRateLimit(
        requests=spec.requests,
        unit_s=unit,
        burst=spec.burst,
        status=code or 429,
        response_headers=tuple(headers),
    )


# --- IP filters ---------------------------------------------------------------------------------


def _ip_filter(
    allow: tuple[IPRuleSpec, ...], deny: tuple[IPRuleSpec, ...]
) -> tuple[IPFilter | None, list[PolicyProblem], str]:
    """Contour's `toIPFilterRules` for one of the two lists (the caller rules out both): the
    filter, or None with an `InvalidCIDR` error per bad rule and the last parse error."""
    rules_spec = allow or deny
    if not rules_spec:
        return None, [], ""
    rules: list[IPRule] = []
    problems: list[PolicyProblem] = []
    last_error = ""
    for spec in rules_spec:
        network, error = _parse_cidr(spec.cidr)
        if error:
            problems.append(
                PolicyProblem(
                    IP_FILTER_ERROR, "InvalidCIDR", f"{spec.cidr} failed to parse: {error}"
                )
            )
            last_error = error
            continue
        rules.append(IPRule(cidr=network, source=_IP_SOURCES[spec.source]))
    if problems:
        return None, problems, last_error
    return IPFilter(allow=bool(allow), rules=tuple(rules)), [], ""


def _parse_cidr(cidr: str) -> tuple[str, str]:
    """(network, "") for a CIDR or bare address, as Go's `net.ParseCIDR` reads it after Contour
    appended /32 or /128 to a bare address (host bits cleared: `10.1.2.3/8` is `10.0.0.0/8`);
    ("", Go's error text) when it does not parse."""
    text = cidr
    if "/" not in text:
        text += "/128" if ":" in text else "/32"
    error = f"invalid CIDR address: {text}"
    address, _, length = text.partition("/")
    # Go takes decimal prefix lengths only, and no zone or netmask form.
    if not (length.isascii() and length.isdigit()) or "%" in address:
        return "", error
    try:
        network = ipaddress.ip_network(f"{address}/{int(length)}", strict=False)
    except ValueError:
        return "", error
    return str(network), ""


# --- Go's formats -------------------------------------------------------------------------------


def _go_quote(value: str) -> str:
    """Go's `%q` for the strings that reach a message."""
    out = ['"']
    for c in value:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


# --- applying the results -----------------------------------------------------------------------


class StatusSink(Protocol):
    def add_error(self, type_: str, reason: str, message: str) -> None: ...

    def add_warning(self, type_: str, reason: str, message: str) -> None: ...


def report(status: StatusSink, problems: list[PolicyProblem]) -> bool:
    """Records `problems` on a proxy's status; True when one of them is an error."""
    for p in problems:
        if p.warning:
            status.add_warning(p.type, p.reason, p.message)
        else:
            status.add_error(p.type, p.reason, p.message)
    return has_errors(problems)


def with_route_filters(
    route: Route,
    ip_filter: IPFilter | None,
    rate_limit: LocalRateLimit | None,
    global_rate_limit: GlobalRateLimit | None = None,
) -> Route:
    """`route` with its own IP filter and rate limits (each replaces the virtual host's)."""
    if ip_filter is None and rate_limit is None and global_rate_limit is None:
        return route
    policies = dataclasses.replace(
        route.policies,
        ip_filter=ip_filter,
        rate_limit=rate_limit,
        global_rate_limit=global_rate_limit,
    )
    return dataclasses.replace(route, policies=policies)


def with_vhost_policies(
    vhosts: list[tuple[str, VirtualHost]], policies: VirtualHostPolicies
) -> list[tuple[str, VirtualHost]]:
    """The root's virtual hosts (HTTP, and HTTPS for a TLS host) with its policies. The plain-HTTP
    host of a TLS root gets them too, as in Contour: its redirects are rate limited and filtered
    like the routes they stand for."""
    if policies == VirtualHostPolicies():
        return vhosts
    return [(listener, dataclasses.replace(vh, policies=policies)) for listener, vh in vhosts]

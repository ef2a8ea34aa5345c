"""HTTPProxy route and service policies -> the graph's `RoutePolicies` and `BackendPolicies`.

Two phases, like the rest of the dialect:

- reading (`read_route_policies`, `read_service_policies`, called by `spec.py`): types, required
  fields and the CRD's enums and patterns, reported as `SpecError`/`FieldNotValid` with the field
  path. A proxy with such an error would not have been admitted by the API server.
- compiling (`route_settings`, `path_rewrite`, `backend_policies`, `mirror_percent`, called by
  `processor.py`): Contour's own checks (`internal/dag/policy.go`, `httpproxy_processor.go`) with
  its condition types, reasons and messages, in Contour's order. Each error drops every route of
  the proxy, as Contour's `computeRoutes` does by returning nil.

What each field becomes, and where turnout differs from Contour, is in docs/policies.md ("Route
policies"). In short, beyond Contour:

- seed 001's `timeoutPolicy.request` is read as `response` (both at once is an error);
- a negative duration is refused (`TimeoutPolicyNotValid`) instead of reaching Envoy, which would
  reject the whole route table;
- `Host` set to exactly `%REQ(header)%` in a route's request policy rewrites the Host from that
  request header (`host_rewrite_header`); any other `%` in a Host value is refused;
- removing `Host` is refused (Envoy forbids it and would reject the route table);
- an unparsable `perTryTimeout` still means Envoy's default, but with a warning;
- `count: -1` really disables retries (`num_retries: 0`; Contour leaves the field unset, which
  Envoy reads as one retry);
- `retriableStatusCodes` without `retriable-status-codes` in `retryOn` do nothing, as in Contour
  (Envoy only looks at them under that condition), but with a warning saying so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from turnout.dialects.contour.session_affinity import SESSION_AFFINITY_COOKIE
from turnout.dialects.fields import (
    MAX_UINT32,
    NANOS_PER_SECOND,
    parse_go_duration,
    time_quote,
)
from turnout.dialects.httpproxy.status_names import (
    IGNORED_FIELD,
    ROUTE_ERROR,
    SERVICE_ERROR,
    SPEC_ERROR,
)
from turnout.dialects.httpproxy.upstream import WarningReader as Reader
from turnout.graph.model import (
    BackendPolicies,
    CookieRewrite,
    CrossSchemeRedirect,
    HashPolicy,
    HashSource,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    InternalRedirectPolicy,
    LoadBalancerStrategy,
    PathMatch,
    PathMatchKind,
    PathRewrite,
    RetryPolicy,
    Route,
    RouteMatch,
    RoutePolicies,
    Timeouts,
)

# Contour's condition types and reasons used here.
PREFIX_REPLACE_ERROR = "PrefixReplaceError"
REQUEST_HEADERS_POLICY_INVALID = "RequestHeadersPolicyInvalid"
ROUTE_RESPONSE_HEADERS_POLICY_INVALID = "ResponseHeaderPolicyInvalid"  # sic: Contour's route reason
SERVICE_RESPONSE_HEADERS_POLICY_INVALID = "ResponseHeadersPolicyInvalid"
COOKIE_REWRITE_POLICIES_INVALID = "CookieRewritePoliciesInvalid"
TIMEOUT_POLICY_NOT_VALID = "TimeoutPolicyNotValid"
MUST_HAVE_PREFIX = "MustHavePrefix"
DUPLICATE_REPLACEMENT = "DuplicateReplacement"
AMBIGUOUS_REPLACEMENT = "AmbiguousReplacement"


ROUTE_POLICY_FIELDS = frozenset(
    {
        "enableWebsockets",
        "timeoutPolicy",
        "retryPolicy",
        "loadBalancerPolicy",
        "pathRewritePolicy",
        "requestHeadersPolicy",
        "responseHeadersPolicy",
        "cookieRewritePolicies",
        "internalRedirectPolicy",
    }
)
SERVICE_POLICY_FIELDS = frozenset(
    {"requestHeadersPolicy", "responseHeadersPolicy", "cookieRewritePolicies"}
)

# The CRD's `RetryOn` enum (the HTTP and gRPC conditions Contour lets through to Envoy).
RETRY_ON = (
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "envoy-ratelimited",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
)
RETRIABLE_STATUS_CODES = "retriable-status-codes"
SAME_SITE = ("Strict", "Lax", "None")
DEFAULT_RETRY_ON = "5xx"
# The CRD's enums of `internalRedirectPolicy`.
INTERNAL_REDIRECT_CODES = (301, 302, 303, 307, 308)
CROSS_SCHEME = {c.value: c for c in CrossSchemeRedirect}

# The CRD's patterns for cookie rewrite fields (`apis/projectcontour/v1/httpproxy.go`).
_COOKIE_NAME = re.compile(r"[^()<>@,;:\\\"/\[\]?={} \t\x7f\x00-\x1f]+")
_COOKIE_PATH = re.compile(r"[^;\x7f\x00-\x1f]+")
_COOKIE_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_COOKIE_MAX = 4096


class Status(Protocol):
    """What `status.ProxyStatusAccessor` offers the compile functions here."""

    def add_error(self, type_: str, reason: str, message: str) -> None: ...

    def add_warning(self, type_: str, reason: str, message: str) -> None: ...


# --- the spec ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderValueSpec:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class HeadersPolicySpec:
    set: tuple[HeaderValueSpec, ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CookieRewriteSpec:
    """`cookieRewritePolicies[]`; None: the attribute is left as the upstream wrote it."""

    name: str
    path: str | None = None
    domain: str | None = None
    secure: bool | None = None
    same_site: str | None = None


@dataclass(frozen=True, slots=True)
class TimeoutPolicySpec:
    """Durations as written: "" unset, a Go duration, or "infinity"/"infinite"."""

    response: str = ""
    idle: str = ""
    idle_connection: str = ""


@dataclass(frozen=True, slots=True)
class RetryPolicySpec:
    count: int = 1  # the CRD's default
    per_try_timeout: str = ""
    retry_on: tuple[str, ...] = ()
    retriable_status_codes: tuple[int, ...] = ()
    field: str = ""


@dataclass(frozen=True, slots=True)
class RequestHashPolicySpec:
    terminal: bool = False
    header_name: str | None = None  # headerHashOptions.headerName, when headerHashOptions is set
    parameter_name: str | None = None  # queryParameterHashOptions.parameterName, likewise
    hash_source_ip: bool = False


@dataclass(frozen=True, slots=True)
class LoadBalancerPolicySpec:
    strategy: str = ""
    request_hash_policies: tuple[RequestHashPolicySpec, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplacePrefixSpec:
    prefix: str  # "" is the default replacement, for whatever prefix the route has
    replacement: str


@dataclass(frozen=True, slots=True)
class RoutePolicySpec:
    websockets: bool = False
    timeout: TimeoutPolicySpec | None = None
    retry: RetryPolicySpec | None = None
    load_balancer: LoadBalancerPolicySpec | None = None
    replace_prefix: tuple[ReplacePrefixSpec, ...] = ()
    request_headers: HeadersPolicySpec | None = None
    response_headers: HeadersPolicySpec | None = None
    cookie_rewrites: tuple[CookieRewriteSpec, ...] = ()
    # Only the CRD's checks apply (Contour has none of its own), so it is read as the graph's.
    internal_redirect: InternalRedirectPolicy | None = None


@dataclass(frozen=True, slots=True)
class ServicePolicySpec:
    request_headers: HeadersPolicySpec | None = None
    response_headers: HeadersPolicySpec | None = None
    cookie_rewrites: tuple[CookieRewriteSpec, ...] = ()


NO_ROUTE_POLICIES = RoutePolicySpec()
NO_SERVICE_POLICIES = ServicePolicySpec()


# --- reading -------------------------------------------------------------------------------------


def read_route_policies(r: Reader, m: Mapping[str, Any], path: str) -> RoutePolicySpec:
    """The policy fields of `spec.routes[i]` (`m`), in the CRD's order."""
    timeout = None
    if m.get("timeoutPolicy") is not None:
        timeout = _timeout_policy(r, m["timeoutPolicy"], f"{path}.timeoutPolicy")
    retry = None
    if m.get("retryPolicy") is not None:
        retry = _retry_policy(r, m["retryPolicy"], f"{path}.retryPolicy")
    lb = None
    if m.get("loadBalancerPolicy") is not None:
        lb = _load_balancer_policy(r, m["loadBalancerPolicy"], f"{path}.loadBalancerPolicy")
    replace_prefix: tuple[ReplacePrefixSpec, ...] = ()
    if m.get("pathRewritePolicy") is not None:
        replace_prefix = _path_rewrite_policy(
            r, m["pathRewritePolicy"], f"{path}.pathRewritePolicy"
        )
    internal_redirect = None
    if m.get("internalRedirectPolicy") is not None:
        internal_redirect = _internal_redirect_policy(
            r, m["internalRedirectPolicy"], f"{path}.internalRedirectPolicy"
        )
    service = read_service_policies(r, m, path)
    return RoutePolicySpec(
        websockets=r.boolean(m, "enableWebsockets", path),
        timeout=timeout,
        retry=retry,
        load_balancer=lb,
        replace_prefix=replace_prefix,
        request_headers=service.request_headers,
        response_headers=service.response_headers,
        cookie_rewrites=service.cookie_rewrites,
        internal_redirect=internal_redirect,
    )


def read_service_policies(r: Reader, m: Mapping[str, Any], path: str) -> ServicePolicySpec:
    """`requestHeadersPolicy`, `responseHeadersPolicy`, `cookieRewritePolicies` of `m` (a route or
    a service)."""
    request = response = None
    if m.get("requestHeadersPolicy") is not None:
        request = _headers_policy(r, m["requestHeadersPolicy"], f"{path}.requestHeadersPolicy")
    if m.get("responseHeadersPolicy") is not None:
        response = _headers_policy(r, m["responseHeadersPolicy"], f"{path}.responseHeadersPolicy")
    cookies = tuple(
        c
        for p, v in r.items(m, "cookieRewritePolicies", path)
        if (c := _cookie_rewrite(r, v, p)) is not None
    )
    return ServicePolicySpec(request, response, cookies)


def _header_value_string(r: Reader, m: Mapping[str, Any], key: str, path: str) -> str:
    before = len(r.problems)
    value = r.string(m, key, path, required=True)
    # Envoy refuses these in header names and values (and would reject the route table).
    if len(r.problems) == before and any(c in value for c in "\x00\r\n"):
        r.error(f"{path}.{key}: must not contain NUL, CR or LF")
        return ""
    return value


def _headers_policy(r: Reader, value: Any, path: str) -> HeadersPolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, frozenset({"set", "remove"}))
    entries = []
    for p, v in r.items(m, "set", path):
        hm = r.mapping(v, p)
        if hm is None:
            continue
        r.check_fields(hm, p, frozenset({"name", "value"}))
        entries.append(
            HeaderValueSpec(
                _header_value_string(r, hm, "name", p), _header_value_string(r, hm, "value", p)
            )
        )
    removes = []
    for p, v in r.items(m, "remove", path):
        if not isinstance(v, str) or not v:
            r.error(f"{p}: must be a non-empty string")
            continue
        removes.append(v)
    return HeadersPolicySpec(tuple(entries), tuple(removes))


def _optional_bool(r: Reader, m: Mapping[str, Any], key: str, path: str) -> bool | None:
    # A *bool in Contour: an explicit `false` means something (remove the attribute).
    if m.get(key) is None:
        return None
    return r.boolean(m, key, path)


def _cookie_value(r: Reader, m: Mapping[str, Any], key: str, path: str) -> str | None:
    if m.get(key) is None:
        return None
    where = f"{path}.{key}"
    vm = r.mapping(m[key], where)
    if vm is None:
        return None
    r.check_fields(vm, where, frozenset({"value"}))
    before = len(r.problems)
    value = r.string(vm, "value", where, required=True)
    if len(r.problems) > before:
        return None
    pattern = _COOKIE_PATH if key == "pathRewrite" else _COOKIE_DOMAIN
    if len(value) > _COOKIE_MAX or not pattern.fullmatch(value):
        r.error(f'{where}.value: "{value}" is not a valid cookie {key.removesuffix("Rewrite")}')
        return None
    return value


def _cookie_rewrite(r: Reader, value: Any, path: str) -> CookieRewriteSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(
        m, path, frozenset({"name", "pathRewrite", "domainRewrite", "secure", "sameSite"})
    )
    before = len(r.problems)
    name = r.string(m, "name", path, required=True)
    if len(r.problems) == before and (len(name) > _COOKIE_MAX or not _COOKIE_NAME.fullmatch(name)):
        r.error(f'{path}.name: "{name}" is not a valid cookie name')
    same_site: str | None = None
    if m.get("sameSite") is not None:
        same_site = r.string(m, "sameSite", path)
        if same_site not in SAME_SITE:
            r.error(f'{path}.sameSite: must be one of "Strict", "Lax", "None", got "{same_site}"')
            same_site = None
    return CookieRewriteSpec(
        name=name,
        path=_cookie_value(r, m, "pathRewrite", path),
        domain=_cookie_value(r, m, "domainRewrite", path),
        secure=_optional_bool(r, m, "secure", path),
        same_site=same_site,
    )


def _timeout_policy(r: Reader, value: Any, path: str) -> TimeoutPolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, frozenset({"response", "idle", "idleConnection", "request"}))
    response = r.string(m, "response", path)
    request = r.string(m, "request", path)  # seed 001's name for the same timeout
    if response and request:
        r.error(f"{path}: set response or request (seed 001's name for it), not both")
    return TimeoutPolicySpec(
        response=response or request,
        idle=r.string(m, "idle", path),
        idle_connection=r.string(m, "idleConnection", path),
    )


def _retry_policy(r: Reader, value: Any, path: str) -> RetryPolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(
        m, path, frozenset({"count", "perTryTimeout", "retryOn", "retriableStatusCodes"})
    )
    count = 1
    if m.get("count") is not None:
        before = len(r.problems)
        count = r.integer(m, "count", path)
        if len(r.problems) > before:
            count = 1
        elif not -1 <= count <= MAX_UINT32:
            r.error(f"{path}.count: must be in the range -1-{MAX_UINT32}, got {count}")
            count = 1
    retry_on = []
    for p, v in r.items(m, "retryOn", path):
        if not isinstance(v, str) or v not in RETRY_ON:
            got = f'"{v}"' if isinstance(v, str) else repr(v)
            r.error(f"{p}: must be one of {', '.join(RETRY_ON)}, got {got}")
        else:
            retry_on.append(v)
    codes = []
    for p, v in r.items(m, "retriableStatusCodes", path):
        if isinstance(v, bool) or not isinstance(v, int) or not 100 <= v <= 599:
            r.error(f"{p}: must be an HTTP status code (100-599), got {v!r}")
        else:
            codes.append(v)
    return RetryPolicySpec(
        count=count,
        per_try_timeout=r.string(m, "perTryTimeout", path),
        retry_on=tuple(retry_on),
        retriable_status_codes=tuple(codes),
        field=path,
    )


def _internal_redirect_policy(r: Reader, value: Any, path: str) -> InternalRedirectPolicy | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(
        m,
        path,
        frozenset(
            {
                "maxInternalRedirects",
                "redirectResponseCodes",
                "allowCrossSchemeRedirect",
                "denyRepeatedRouteRedirect",
            }
        ),
    )
    limit = 0
    if m.get("maxInternalRedirects") is not None:
        before = len(r.problems)
        limit = r.integer(m, "maxInternalRedirects", path)
        if len(r.problems) == before and not 0 <= limit <= MAX_UINT32:
            r.error(
                f"{path}.maxInternalRedirects: must be in the range 0-{MAX_UINT32}, got {limit}"
            )
        if len(r.problems) > before:
            limit = 0
    codes = []
    for p, v in r.items(m, "redirectResponseCodes", path):
        if type(v) is not int or v not in INTERNAL_REDIRECT_CODES:
            allowed = ", ".join(map(str, INTERNAL_REDIRECT_CODES))
            r.error(f"{p}: must be one of {allowed}, got {v!r}")
        else:
            codes.append(v)
    cross = CrossSchemeRedirect.NEVER  # the CRD's default
    if m.get("allowCrossSchemeRedirect") is not None:
        before = len(r.problems)
        text = r.string(m, "allowCrossSchemeRedirect", path)
        if len(r.problems) == before and text not in CROSS_SCHEME:
            r.error(
                f'{path}.allowCrossSchemeRedirect: must be one of "Always", "Never", "SafeOnly", '
                f'got "{text}"'
            )
        cross = CROSS_SCHEME.get(text, cross)
    return InternalRedirectPolicy(
        # 0 is unset in Contour, which Envoy reads as its default of one redirect.
        max_redirects=limit or None,
        response_codes=tuple(codes),
        cross_scheme=cross,
        deny_repeated_route=r.boolean(m, "denyRepeatedRouteRedirect", path),
    )


def _load_balancer_policy(r: Reader, value: Any, path: str) -> LoadBalancerPolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, frozenset({"strategy", "requestHashPolicies"}))
    policies = []
    for p, v in r.items(m, "requestHashPolicies", path):
        hm = r.mapping(v, p)
        if hm is None:
            continue
        r.check_fields(
            hm,
            p,
            frozenset(
                {"terminal", "headerHashOptions", "queryParameterHashOptions", "hashSourceIP"}
            ),
        )
        policies.append(
            RequestHashPolicySpec(
                terminal=r.boolean(hm, "terminal", p),
                header_name=_hash_option(r, hm, "headerHashOptions", "headerName", p),
                parameter_name=_hash_option(r, hm, "queryParameterHashOptions", "parameterName", p),
                hash_source_ip=r.boolean(hm, "hashSourceIP", p),
            )
        )
    return LoadBalancerPolicySpec(r.string(m, "strategy", path), tuple(policies))


def _hash_option(r: Reader, m: Mapping[str, Any], key: str, name: str, path: str) -> str | None:
    if m.get(key) is None:
        return None
    where = f"{path}.{key}"
    om = r.mapping(m[key], where)
    if om is None:
        return None
    r.check_fields(om, where, frozenset({name}))
    # An empty name is Contour's own "ignoring invalid ..." warning, not a schema error.
    return r.string(om, name, where)


def _path_rewrite_policy(r: Reader, value: Any, path: str) -> tuple[ReplacePrefixSpec, ...]:
    m = r.mapping(value, path)
    if m is None:
        return ()
    r.check_fields(m, path, frozenset({"replacePrefix"}))
    out = []
    for p, v in r.items(m, "replacePrefix", path):
        pm = r.mapping(v, p)
        if pm is None:
            continue
        r.check_fields(pm, p, frozenset({"prefix", "replacement"}))
        out.append(
            ReplacePrefixSpec(
                prefix=r.string(pm, "prefix", p),
                replacement=_header_value_string(r, pm, "replacement", p),
            )
        )
    return tuple(out)


# --- timeouts ------------------------------------------------------------------------------------


def timeout_setting(text: str) -> float | None:
    """Contour's `timeout.Parse`: "" and any zero duration are Envoy's default (None),
    "infinity"/"infinite" disable the timeout (0), anything else is seconds. Raises ValueError with
    Contour's message; a negative duration is refused too."""
    if not text:
        return None
    if text in ("infinity", "infinite"):
        return 0.0
    try:
        nanos = parse_go_duration(text)
    except ValueError as err:
        raise ValueError(
            f"unable to parse timeout string {time_quote(text.encode())}: {err}"
        ) from None
    if nanos < 0:
        raise ValueError(
            f"unable to parse timeout string {time_quote(text.encode())}: must not be negative"
        )
    return nanos / NANOS_PER_SECOND if nanos else None


# --- compiling -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouteSettings:
    """What a route's policies compile to: the graph's route policies, and what its clusters
    need (the load-balancing strategy and the idle connection timeout are cluster settings)."""

    policies: RoutePolicies
    lb_strategy: LoadBalancerStrategy = LoadBalancerStrategy.ROUND_ROBIN
    idle_connection_timeout_s: float | None = None


class _Invalid(Exception):
    pass


_LB_STRATEGIES = {
    "WeightedLeastRequest": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
    "Random": LoadBalancerStrategy.RANDOM,
    "Cookie": LoadBalancerStrategy.COOKIE,
    "RequestHash": LoadBalancerStrategy.REQUEST_HASH,
}


def route_settings(spec: RoutePolicySpec, namespace: str, st: Status) -> RouteSettings | None:
    """The route's policies, or None with the error reported (Contour's order: request headers,
    response headers, cookie rewrites, timeouts; hash policies only warn)."""
    dynamic = {"CONTOUR_NAMESPACE": namespace}
    try:
        request, host = _headers(spec.request_headers, dynamic, allow_host=True, route=True)
    except _Invalid as err:
        st.add_error(ROUTE_ERROR, REQUEST_HEADERS_POLICY_INVALID, f"{err} on request headers")
        return None
    try:
        response, _ = _headers(spec.response_headers, dynamic, allow_host=False, route=True)
    except _Invalid as err:
        st.add_error(
            ROUTE_ERROR, ROUTE_RESPONSE_HEADERS_POLICY_INVALID, f"{err} on response headers"
        )
        return None
    try:
        cookies = _cookie_rewrites(spec.cookie_rewrites)
    except _Invalid as err:
        st.add_error(
            ROUTE_ERROR, COOKIE_REWRITE_POLICIES_INVALID, f"{err} on route cookie rewrite rules"
        )
        return None
    timeouts: Timeouts | None = None
    idle_connection: float | None = None
    if spec.timeout is not None:
        try:
            timeouts, idle_connection = _timeouts(spec.timeout)
        except _Invalid as err:
            st.add_error(
                ROUTE_ERROR, TIMEOUT_POLICY_NOT_VALID, f"route.timeoutPolicy failed to parse: {err}"
            )
            return None
    hashes, strategy = _hash_policies(spec.load_balancer, st)
    policies = RoutePolicies(
        timeouts=timeouts,
        retry=_retry(spec.retry, st),
        request_headers=request,
        response_headers=response,
        host_rewrite=host,
        websockets=spec.websockets,
        cookie_rewrites=cookies,
        hash_policies=hashes,
        internal_redirect=spec.internal_redirect,
    )
    return RouteSettings(policies, strategy, idle_connection)


def _timeouts(spec: TimeoutPolicySpec) -> tuple[Timeouts | None, float | None]:
    settings = []
    for what, text in (
        ("response", spec.response),
        ("idle", spec.idle),
        ("idle connection", spec.idle_connection),
    ):
        try:
            settings.append(timeout_setting(text))
        except ValueError as err:
            raise _Invalid(f"error parsing {what} timeout: {err}") from None
    response, idle, idle_connection = settings
    timeouts = None
    if response is not None or idle is not None:
        timeouts = Timeouts(response_s=response, idle_s=idle)
    return timeouts, idle_connection


def _retry(spec: RetryPolicySpec | None, st: Status) -> RetryPolicy | None:
    if spec is None:
        return None
    # Contour: -1 disables retries, 0 (or unset) is Envoy's default of one.
    count = 0 if spec.count == -1 else max(spec.count, 1)
    per_try: float | None = None
    if spec.per_try_timeout:
        try:
            nanos = parse_go_duration(spec.per_try_timeout)
        except ValueError as err:
            nanos = 0
            st.add_warning(
                SPEC_ERROR,
                IGNORED_FIELD,
                f'ignoring field "{spec.field}.perTryTimeout": {err}; using Envoy\'s default',
            )
        if nanos < 0:
            st.add_warning(
                SPEC_ERROR,
                IGNORED_FIELD,
                f'ignoring field "{spec.field}.perTryTimeout": must not be negative; using '
                "Envoy's default",
            )
        elif nanos > 0:
            per_try = nanos / NANOS_PER_SECOND
    if spec.retriable_status_codes and RETRIABLE_STATUS_CODES not in spec.retry_on:
        # Contour passes the codes to Envoy all the same, where they do nothing; say so.
        st.add_warning(
            SPEC_ERROR,
            IGNORED_FIELD,
            f'ignoring field "{spec.field}.retriableStatusCodes": the codes are only retried when '
            f'"{spec.field}.retryOn" includes "{RETRIABLE_STATUS_CODES}"',
        )
    return RetryPolicy(
        count=count,
        per_try_timeout_s=per_try,
        retry_on=spec.retry_on or (DEFAULT_RETRY_ON,),
        retriable_status_codes=spec.retriable_status_codes,
    )


def _hash_policies(
    spec: LoadBalancerPolicySpec | None, st: Status
) -> tuple[tuple[HashPolicy, ...], LoadBalancerStrategy]:
    """Contour's `loadBalancerRequestHashPolicies`: invalid entries are ignored with a warning,
    and RequestHash without a valid one falls back to RoundRobin."""
    if spec is None:
        return (), LoadBalancerStrategy.ROUND_ROBIN
    strategy = _LB_STRATEGIES.get(spec.strategy, LoadBalancerStrategy.ROUND_ROBIN)
    if strategy is LoadBalancerStrategy.COOKIE:
        cookie = HashPolicy(
            HashSource.COOKIE, SESSION_AFFINITY_COOKIE, cookie_ttl_s=0.0, cookie_path="/"
        )
        return (cookie,), strategy
    if strategy is not LoadBalancerStrategy.REQUEST_HASH:
        return (), strategy
    out: list[HashPolicy] = []
    source_ip = False
    headers: set[str] = set()
    params: set[str] = set()

    def ignore(message: str) -> None:
        st.add_warning(SPEC_ERROR, IGNORED_FIELD, message)

    for h in spec.request_hash_policies:
        attributes = (
            int(h.hash_source_ip)
            + int(h.header_name is not None)
            + int(h.parameter_name is not None)
        )
        if attributes != 1:
            ignore(
                "ignoring invalid request hash policy, must set exactly one of hashSourceIP or "
                "headerHashOptions or queryParameterHashOptions"
            )
            continue
        if h.hash_source_ip:
            if source_ip:
                ignore(
                    "ignoring invalid request hash policy, hashSourceIP specified multiple times"
                )
                continue
            source_ip = True
            out.append(HashPolicy(HashSource.SOURCE_IP, terminal=h.terminal))
        elif h.header_name is not None:
            name = canonical_header_key(h.header_name)
            problem = header_name_problem(name)
            if problem is not None:
                ignore(
                    "ignoring invalid header hash policy options with invalid header name "
                    f'"{name}": [{problem}]'
                )
                continue
            if name in headers:
                ignore(
                    "ignoring invalid header hash policy options with duplicated header name "
                    + name
                )
                continue
            headers.add(name)
            out.append(HashPolicy(HashSource.HEADER, name, terminal=h.terminal))
        else:
            assert h.parameter_name is not None
            # Contour lower-cases query parameter names ("everyone assumes" they ignore case).
            param = h.parameter_name.lower()
            if not param:
                ignore(
                    "ignoring invalid query parameter hash policy options with an invalid empty "
                    "query parameter name"
                )
                continue
            if param in params:
                ignore(
                    "ignoring invalid query parameter hash policy options with duplicated query "
                    "parameter name " + param
                )
                continue
            params.add(param)
            out.append(HashPolicy(HashSource.QUERY, param, terminal=h.terminal))
    if not out:
        ignore(
            "ignoring invalid request hash policy options, setting load balancer strategy to "
            "default RoundRobin"
        )
        return (), LoadBalancerStrategy.ROUND_ROBIN
    return tuple(out), strategy


# --- headers -------------------------------------------------------------------------------------

# RFC 7230 token characters: Go's `validHeaderFieldByte`.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Kubernetes' `IsHTTPHeaderName`.
_HTTP_HEADER_NAME = re.compile(r"[-A-Za-z0-9]+")
_HTTP_HEADER_NAME_MESSAGE = (
    "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', "
    "regex used for validation is '[-A-Za-z0-9]+')"
)


def canonical_header_key(name: str) -> str:
    """Go's `http.CanonicalHeaderKey`: `x-foo` -> `X-Foo`; a name with a character that is not a
    token character is returned as it is."""
    if not name or any(c not in _TOKEN for c in name):
        return name
    out = []
    upper = True
    for c in name:
        out.append(c.upper() if upper else c.lower())
        upper = c == "-"
    return "".join(out)


def header_name_problem(name: str) -> str | None:
    return None if _HTTP_HEADER_NAME.fullmatch(name) else _HTTP_HEADER_NAME_MESSAGE


# Envoy's header formatters that Contour lets through unescaped in header values.
_ENVOY_VARIABLES = (
    "DOWNSTREAM_REMOTE_ADDRESS",
    "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_LOCAL_ADDRESS",
    "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_LOCAL_PORT",
    "DOWNSTREAM_LOCAL_URI_SAN",
    "DOWNSTREAM_PEER_URI_SAN",
    "DOWNSTREAM_LOCAL_SUBJECT",
    "DOWNSTREAM_PEER_SUBJECT",
    "DOWNSTREAM_PEER_ISSUER",
    "DOWNSTREAM_TLS_SESSION_ID",
    "DOWNSTREAM_TLS_CIPHER",
    "DOWNSTREAM_TLS_VERSION",
    "DOWNSTREAM_PEER_FINGERPRINT_256",
    "DOWNSTREAM_PEER_FINGERPRINT_1",
    "DOWNSTREAM_PEER_SERIAL",
    "DOWNSTREAM_PEER_CERT",
    "DOWNSTREAM_PEER_CERT_V_START",
    "DOWNSTREAM_PEER_CERT_V_END",
    "HOSTNAME",
    "PROTOCOL",
    "UPSTREAM_REMOTE_ADDRESS",
    "RESPONSE_FLAGS",
    "RESPONSE_CODE_DETAILS",
)
# `%REQ(name)%`, `%REQ(name?alternative)%`, with an optional `:max-length`.
_REQ_VARIABLE = re.compile(r"%(%REQ\(:?[\w-]+(\?:?[\w-]+)?\)(:\d+)?%)%", re.ASCII)
_HOST_FROM_HEADER = re.compile(r"%REQ\(([A-Za-z0-9-]+)\)%")


def escape_header_value(value: str, dynamic: Mapping[str, str]) -> str:
    """Contour's `escapeHeaderValue`: every `%` is escaped for Envoy (`%%`), except around
    Contour's own variables (replaced by their value) and Envoy's known formatters."""
    if "%" not in value:
        return value
    escaped = value.replace("%", "%%")
    for name, replacement in dynamic.items():
        escaped = escaped.replace(f"%%{name}%%", replacement)
    for name in _ENVOY_VARIABLES:
        escaped = escaped.replace(f"%%{name}%%", f"%{name}%")
    return _REQ_VARIABLE.sub(r"\1", escaped)


def _headers(
    spec: HeadersPolicySpec | None,
    dynamic: Mapping[str, str],
    *,
    allow_host: bool,
    route: bool,
) -> tuple[HeaderPolicy | None, HostRewrite | None]:
    """Contour's `headersPolicyRoute`; raises `_Invalid` with Contour's message."""
    if spec is None:
        return None, None
    sets: dict[str, HeaderValue] = {}
    host: HostRewrite | None = None
    for entry in spec.set:
        key = canonical_header_key(entry.name)
        if key in sets or (key == "Host" and host is not None):
            raise _Invalid(f'duplicate header addition: "{key}"')
        if key == "Host":
            if not allow_host:
                raise _Invalid(f'rewriting "{key}" header is not supported')
            host = _host_rewrite(entry.value, route)
            continue
        problem = header_name_problem(key)
        if problem is not None:
            raise _Invalid(f'invalid set header "{key}": [{problem}]')
        sets[key] = HeaderValue(key, escape_header_value(entry.value, dynamic))
    removes: list[str] = []
    for name in spec.remove:
        key = canonical_header_key(name)
        if key in removes:
            raise _Invalid(f'duplicate header removal: "{key}"')
        problem = header_name_problem(key)
        if problem is not None:
            raise _Invalid(f'invalid remove header "{key}": [{problem}]')
        if key == "Host":
            # Envoy refuses to remove Host and would reject the whole route table.
            raise _Invalid(f'removing "{key}" header is not supported')
        removes.append(key)
    if not sets and not removes:
        return None, host
    # Contour sorts the names to remove (a set); sets stay in the order written.
    return HeaderPolicy(set=tuple(sets.values()), remove=tuple(sorted(removes))), host


def _host_rewrite(value: str, route: bool) -> HostRewrite:
    m = _HOST_FROM_HEADER.fullmatch(value)
    if m is not None and route:
        return HostRewrite(from_header=m.group(1).lower())
    if "%" in value:
        where = "a route" if route else "a service"
        raise _Invalid(
            f'rewriting "Host" header to "{value}" is not supported for {where}: the value must '
            "be a hostname" + (", or exactly %REQ(header-name)%" if route else "")
        )
    return HostRewrite(literal=value)


def _cookie_rewrites(specs: Sequence[CookieRewriteSpec]) -> tuple[CookieRewrite, ...]:
    """Contour's `cookieRewritePolicies`; raises `_Invalid` with Contour's message."""
    out: list[CookieRewrite] = []
    names: set[str] = set()
    for spec in specs:
        if spec.name in names:
            raise _Invalid(f'duplicate cookie rewrite rule for cookie "{spec.name}"')
        names.add(spec.name)
        if (spec.path, spec.domain, spec.secure, spec.same_site) == (None, None, None, None):
            raise _Invalid(f'no attributes rewritten for cookie "{spec.name}"')
        out.append(
            CookieRewrite(
                name=spec.name,
                path=spec.path,
                domain=spec.domain,
                secure=spec.secure,
                same_site=spec.same_site,
            )
        )
    return tuple(out)


# --- services ------------------------------------------------------------------------------------


def backend_policies(
    spec: ServicePolicySpec, namespace: str, service: str, port: int, st: Status
) -> tuple[bool, BackendPolicies | None]:
    """(ok, policies) of one service of a route; not ok with the error reported (Contour's
    service loop: request headers, response headers, then cookie rewrites)."""
    dynamic = {
        "CONTOUR_NAMESPACE": namespace,
        "CONTOUR_SERVICE_NAME": service,
        "CONTOUR_SERVICE_PORT": str(port),
    }
    try:
        request, host = _headers(spec.request_headers, dynamic, allow_host=True, route=False)
    except _Invalid as err:
        st.add_error(SERVICE_ERROR, REQUEST_HEADERS_POLICY_INVALID, f"{err} on request headers")
        return False, None
    try:
        response, _ = _headers(spec.response_headers, dynamic, allow_host=False, route=False)
    except _Invalid as err:
        st.add_error(
            SERVICE_ERROR, SERVICE_RESPONSE_HEADERS_POLICY_INVALID, f"{err} on response headers"
        )
        return False, None
    try:
        cookies = _cookie_rewrites(spec.cookie_rewrites)
    except _Invalid as err:
        st.add_error(
            ROUTE_ERROR, COOKIE_REWRITE_POLICIES_INVALID, f"{err} on service cookie rewrite rules"
        )
        return False, None
    policies = BackendPolicies(request, response, host, cookies)
    return True, None if policies == BackendPolicies() else policies


def mirror_percent(weight: int) -> float:
    """A mirror service's `weight` is the share of requests mirrored; 0 (or unset) means all, so
    a mirror can only be switched off by removing `mirror: true` (Contour's rule)."""
    return 100.0 if weight <= 0 else float(min(weight, 100))


# --- prefix rewriting ----------------------------------------------------------------------------


def path_rewrite(
    spec: Sequence[ReplacePrefixSpec], path: PathMatch, st: Status
) -> tuple[bool, PathRewrite | None]:
    """(ok, rewrite) for `pathRewritePolicy.replacePrefix` on a route whose merged path is `path`;
    not ok with the error reported. The entry whose `prefix` is the routing prefix wins, else the
    one without a prefix; with neither the path is kept."""
    if not spec:
        return True, None
    if path.kind not in (PathMatchKind.PREFIX, PathMatchKind.SEGMENT_PREFIX):
        st.add_error(
            PREFIX_REPLACE_ERROR,
            MUST_HAVE_PREFIX,
            "cannot specify prefix replacements without a prefix condition",
        )
        return False, None
    seen: set[str] = set()
    for entry in spec:
        if entry.prefix in seen:
            if entry.prefix:
                st.add_error(
                    PREFIX_REPLACE_ERROR,
                    DUPLICATE_REPLACEMENT,
                    f"duplicate replacement prefix '{entry.prefix}'",
                )
            else:
                st.add_error(
                    PREFIX_REPLACE_ERROR, AMBIGUOUS_REPLACEMENT, "ambiguous prefix replacement"
                )
            return False, None
        seen.add(entry.prefix)
    for entry in spec:
        if entry.prefix and entry.prefix == path.value:
            return True, PathRewrite(prefix=entry.replacement)
    for entry in spec:
        if not entry.prefix:
            return True, PathRewrite(prefix=entry.replacement)
    return True, None


def expand_prefix_rewrites(routes: Sequence[Route]) -> list[tuple[int, Route]]:
    """Contour's `expandPrefixMatches`, for the routes one proxy gathered (its own and its
    includes'): each output route with the index of the input it came from.

    Envoy replaces the matched prefix as a string, so a route on `/foo` rewritten to `/` sends
    `/foo/v1` upstream as `//v1`, and one on `/foo/` rewritten to `/bar` sends `/foo/x` as
    `/barx`. A prefix that is the only route of its slash-insensitive group and has a rewrite is
    therefore split: `/foo` rewritten without a trailing slash, and `/foo/` rewritten with one.
    A group that already routes both forms is left as written."""
    groups: dict[str, list[int]] = {}
    for i, route in enumerate(routes):
        path = route.match.path
        if path.kind is not PathMatchKind.PREFIX:
            continue
        key = path.value if path.value == "/" else path.value.rstrip("/")
        groups.setdefault(key, []).append(i)
    out = [(i, route) for i, route in enumerate(routes)]
    for prefix, members in groups.items():
        if len(members) != 1 or prefix == "/":
            continue
        i = members[0]
        route = routes[i]
        rewrite = route.policies.path_rewrite
        if rewrite is None or rewrite.prefix is None:
            continue
        base = rewrite.prefix.rstrip("/")
        out[i] = (i, _with_prefix(route, prefix, base or "/"))
        out.append((i, _with_prefix(route, prefix + "/", base + "/")))
    return out


def _with_prefix(route: Route, prefix: str, replacement: str) -> Route:
    assert route.policies.path_rewrite is not None
    return replace(
        route,
        match=RouteMatch(
            path=PathMatch(PathMatchKind.PREFIX, prefix),
            headers=route.match.headers,
            query=route.match.query,
        ),
        policies=replace(
            route.policies, path_rewrite=replace(route.policies.path_rewrite, prefix=replacement)
        ),
    )

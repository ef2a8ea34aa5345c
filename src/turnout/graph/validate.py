"""The safety net between the dialects and the Envoy translator: Envoy's limits, enforced per piece.

Dialects validate what their users write, each in its own API's words. This module is the net
under all of them: `enforce_envoy_limits(graph)` checks every value the translator will emit
against what Envoy 1.40 accepts, and confines what fails to the object that wrote it, so that the
promise "bad input never changes another object's routing" holds whatever a dialect misses. A
value that slipped through would otherwise make `translate()` raise (no configuration for anyone)
or make Envoy NACK the shared RouteConfiguration, CDS or LDS update (no change for anyone).

What an offending piece becomes:
- a **route** whose match is invalid is left out (its match cannot be expressed, so it cannot
  even answer); a route whose action or policies are invalid answers `DirectResponse(500)` with
  the same match, so its requests do not fall through to someone else's route;
- a **virtual host** whose own fields are invalid (hostname, TLS references, policies) is left
  out of its listener, and so is a later one repeating a domain of its route configuration;
- a **cluster** loses the endpoints Envoy would refuse; a cluster whose settings are invalid is
  left out, and the routes that forward or mirror to it answer 500;
- a **TCP proxy** with an invalid SNI name, TLS reference or cluster is left out.
Everything else is returned unchanged (the same objects, so the cost of the net is only the
checks). Each problem names the object, the field and Envoy's limit, and `compile_snapshot`
reports it as an error.

The limits, with where Envoy states them (PGV rules in the v3 API unless said otherwise):
- strings travel as protobuf `string`: valid UTF-8;
- `RouteMatch`: `path`/`prefix` start with `/` (turnout's rule: Envoy accepts others but they
  never match) and hold no CR, LF or NUL; `path_separated_prefix` matches `^[^?#]+[^?#/]$`;
  `safe_regex`, and every other regex, compiles with RE2 and has a program size of at most 100
  (`re2.max_program_size.error_level`) as Envoy counts it (`graph.regex.envoy_program_size`);
- `HeaderMatcher.name`: 1+ characters, no CR/LF/NUL (`HTTP_HEADER_NAME`, not strict); header
  values to match hold no CR/LF/NUL (a request cannot carry them); `StringMatcher` `prefix`,
  `suffix`, `contains` and `safe_regex.regex` are not empty;
- `QueryParameterMatcher.name`: 1 to 1024 bytes;
- `WeightedCluster.ClusterWeight.weight` is a uint32 and the weights of a route sum to at most
  4294967295 (`RouteEntryImplBase`); every cluster a route names exists (Envoy's
  `validate_clusters`), except `INVALID_BACKEND`, which is meant not to (its share answers 500);
- `DirectResponseAction.status` in [200, 600); a body is at most 64 KiB (turnout's bound: Envoy
  takes any size once `max_direct_response_body_size_bytes` is raised, which would let one object
  grow everybody's RouteConfiguration);
- `RedirectAction` `host_redirect`, `path_redirect`, `prefix_rewrite`: no CR/LF/NUL
  (`HTTP_HEADER_VALUE`, not strict); a scheme is an RFC 3986 scheme; a port is 1 to 65535;
- `VirtualHost.domains`: no CR/LF/NUL; turnout requires DNS labels of letters, digits, `-` and
  `_` (at most 63 characters each, 253 in all), with `*` only as the whole first label or the
  whole name, which is also what HTTPS `server_names` accept (no partial wildcards); domains are
  unique per RouteConfiguration, case-insensitively; a one-label wildcard's `:authority` regex
  must fit RE2's limit;
- `HeaderValue` (header changes, rate-limit responses): name 1 to 16384 bytes without
  CR/LF/NUL, value at most 16384 bytes without CR/LF/NUL; `:`-prefixed names and `host` may not
  be added, set or removed; a `%` in a value starts `%%` or a known `%COMMAND%` (an unknown one
  is "Not supported field in StreamInfo");
- `HostRewrite` literal, `PathRewrite` prefix, full path and substitution: no CR/LF/NUL; a
  rewrite regex compiles within RE2's limit;
- durations (timeouts, retries, HTTP and TCP health checks, outlier detection, slow start, cookie
  TTLs, connection timeouts): finite, not negative, at most 9223372035 s (Envoy converts them to
  int64 nanoseconds and refuses larger ones as "Duration out-of-range");
- uint32 counts (retries, thresholds, rate limits, retriable statuses) in [0, 4294967295];
  percentages in [0, 100]; a rate limit's status a defined `envoy.type.v3.StatusCode` >= 400;
- `HttpHealthCheck.path`/`host`: no control character but tab (`HTTP_HEADER_VALUE`, strict);
- endpoints: an IP address (EDS resolves nothing) and a port in [1, 65535];
- `UpstreamTlsContext.sni` and subject names: no CR/LF/NUL; a TLS secret or fallback certificate
  a virtual host or TCP proxy names exists in the graph (SDS would otherwise hold the whole
  listener's update until Envoy stops waiting for the secret); a DNS cluster's port is 1 to 65535;
- CIDR ranges parse as IP networks; flags are booleans and match kinds members of their enums
  (protobuf refuses anything else, which would cost the route in translation).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import attrgetter

from turnout.graph.evaluate import (
    effective_forward,
    wildcard_authority_regex,
)
from turnout.graph.host_routes import PER_ROUTE_MIN_ROUTES, IdsMemo, ids_of, route_diff
from turnout.graph.memo import IdentityMemo
from turnout.graph.model import (
    COMPRESSIBLE_TYPES,
    INVALID_BACKEND,
    BackendPolicies,
    Cluster,
    Compression,
    CookieRewrite,
    CorsPolicy,
    CrossSchemeRedirect,
    DescriptorEntry,
    DirectResponse,
    Endpoint,
    ExactOrigin,
    ExternalAuthorization,
    Forward,
    GenericKeyEntry,
    GlobalRateLimit,
    HashPolicy,
    HashSource,
    HeaderMatch,
    HeaderPolicy,
    HeaderValue,
    HeaderValueMatchEntry,
    HostnameMatch,
    HostRewrite,
    InternalRedirectPolicy,
    IPFilter,
    JwtValidation,
    Listener,
    LocalRateLimit,
    PathMatchKind,
    QueryMatch,
    Redirect,
    RegexOrigin,
    RequestHeaderEntry,
    Route,
    RouteAuthorization,
    RouteMatch,
    RoutePolicies,
    RoutingGraph,
    StringMatchKind,
    TCPProxy,
    TLSSecret,
    TLSTermination,
    VirtualHost,
    VirtualHostPolicies,
)
from turnout.graph.regex import ENVOY_MAX_PROGRAM_SIZE, envoy_program_size, regex_error
from turnout.objects import ObjectRef
from turnout.store import Snapshot, SourceProblem

UINT32_MAX = 2**32 - 1
MAX_DURATION_S = 9_223_372_035
MAX_QUERY_NAME_BYTES = 1024
MAX_HEADER_BYTES = 16384
MAX_DIRECT_RESPONSE_BODY_BYTES = 64 * 1024
MAX_HOSTNAME_LENGTH = 253
INVALID_ROUTE_STATUS = 500

# envoy.type.v3.StatusCode values at or above 400 (a local rate limit's status must be one).
_DEFINED_ERROR_STATUSES = frozenset(
    {400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417}
    | {421, 422, 423, 424, 426, 428, 429, 431}
    | {500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511}
)

# Envoy's substitution commands accepted in header values (each checked against Envoy 1.40).
_HEADER_COMMANDS = frozenset(
    (
        "REQ", "RESP", "START_TIME", "PROTOCOL", "UPSTREAM_PROTOCOL", "HOSTNAME",
        "DOWNSTREAM_REMOTE_ADDRESS", "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
        "DOWNSTREAM_REMOTE_PORT", "DOWNSTREAM_DIRECT_REMOTE_ADDRESS",
        "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT", "DOWNSTREAM_DIRECT_REMOTE_PORT",
        "DOWNSTREAM_LOCAL_ADDRESS", "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
        "DOWNSTREAM_LOCAL_PORT",
        "DOWNSTREAM_LOCAL_URI_SAN", "DOWNSTREAM_PEER_URI_SAN", "DOWNSTREAM_LOCAL_SUBJECT",
        "DOWNSTREAM_PEER_SUBJECT", "DOWNSTREAM_PEER_ISSUER", "DOWNSTREAM_TLS_SESSION_ID",
        "DOWNSTREAM_TLS_CIPHER", "DOWNSTREAM_TLS_VERSION", "DOWNSTREAM_PEER_FINGERPRINT_256",
        "DOWNSTREAM_PEER_FINGERPRINT_1", "DOWNSTREAM_PEER_SERIAL", "DOWNSTREAM_PEER_CERT",
        "DOWNSTREAM_PEER_CERT_V_START", "DOWNSTREAM_PEER_CERT_V_END", "REQUESTED_SERVER_NAME",
        "UPSTREAM_REMOTE_ADDRESS", "UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT", "UPSTREAM_REMOTE_PORT",
        "UPSTREAM_LOCAL_ADDRESS", "UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT", "UPSTREAM_LOCAL_PORT",
        "UPSTREAM_HOST", "UPSTREAM_CLUSTER", "UPSTREAM_TRANSPORT_FAILURE_REASON", "RESPONSE_CODE",
        "RESPONSE_FLAGS", "RESPONSE_CODE_DETAILS", "ROUTE_NAME", "VIRTUAL_CLUSTER_NAME",
        "CONNECTION_ID", "STREAM_ID", "DYNAMIC_METADATA", "UPSTREAM_METADATA", "CLUSTER_METADATA",
        "FILTER_STATE", "ENVIRONMENT", "UNIQUE_ID", "BYTES_RECEIVED", "BYTES_SENT", "DURATION",
        "REQUEST_DURATION", "RESPONSE_DURATION",
    )
)  # fmt: skip
# Envoy's own grammar for a command (substitution_formatter): NAME, optional (args), optional :N.
_COMMAND = re.compile(r"%([A-Z0-9_]+)(\([^)]*\))?(:[0-9]+)?%")

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*", re.IGNORECASE)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
# Control characters but tab: what a strict HTTP_HEADER_VALUE refuses.
_STRICT_VALUE_REFUSED = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_SAME_SITE = frozenset({"Strict", "Lax", "None"})


@dataclass(frozen=True, slots=True)
class GraphProblem:
    """A value Envoy would refuse, the object that wrote it and what became of the piece."""

    object: ObjectRef
    field: str  # the route's source field, or which part of a virtual host / cluster
    reason: str

    def to_source_problem(self, snapshot: Snapshot | None = None) -> SourceProblem:
        obj = snapshot.get_ref(self.object) if snapshot is not None else None
        where = f"{self.field}: " if self.field else ""
        return SourceProblem(
            source=obj.origin.source if obj is not None else "<graph>",
            line=obj.origin.line if obj is not None else None,
            reason=where + self.reason,
            object=str(self.object),
            severity="error",
        )


def source_problems(
    problems: Iterable[GraphProblem], snapshot: Snapshot | None = None
) -> tuple[SourceProblem, ...]:
    return tuple(p.to_source_problem(snapshot) for p in problems)


# --- value checks: each returns why Envoy refuses the value, or None ----------------------------


def _text(value: object) -> str | None:
    # The checks run on every route of every compile: the common case (an ASCII str) first.
    if type(value) is str and value.isascii():
        return None
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    return None


def _no_crlf(value: object) -> str | None:
    """HTTP_HEADER_VALUE / HTTP_HEADER_NAME as Envoy checks them without `strict`."""
    if type(value) is str and value.isascii() and _clean(value):
        return None
    problem = _text(value)
    if problem is None and ("\r" in value or "\n" in value or "\x00" in value):  # type: ignore[operator]
        return "holds CR, LF or NUL, which Envoy refuses in this field"
    return problem


def _clean(value: str) -> bool:
    return "\r" not in value and "\n" not in value and "\x00" not in value


def _header_name(value: object) -> str | None:
    if type(value) is str and value and value.isascii() and _clean(value):
        return None
    problem = _no_crlf(value)
    if problem is None and not value:
        return "is empty; Envoy requires a header name"
    return problem


def _int_in(value: object, low: int, high: int) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"is a {type(value).__name__}, not an integer"
    if not low <= value <= high:
        return f"is {value}, outside Envoy's range [{low}, {high}]"
    return None


def _integer(value: object) -> str | None:
    return _int_in(value, -(2**63), 2**63)


def _uint32(value: object) -> str | None:
    return _int_in(value, 0, UINT32_MAX)


def _duration(value: object) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"is a {type(value).__name__}, not a number of seconds"
    if not math.isfinite(value) or value < 0:
        return f"is {value}; Envoy needs a finite duration that is not negative"
    if value > MAX_DURATION_S:
        return f"is {value} s, above Envoy's limit of {MAX_DURATION_S} s"
    return None


def _percent(value: object) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"is a {type(value).__name__}, not a number"
    if not (math.isfinite(value) and 0 <= value <= 100):
        return f"is {value}, outside [0, 100]"
    return None


@lru_cache(maxsize=8192)
def _regex(pattern: str) -> str | None:
    if not pattern:
        return "is an empty regex; Envoy requires at least one character"
    # Syntax only: the size is reported below in this net's own wording.
    problem = regex_error(pattern, max_program_size=1 << 62)
    if problem is not None:
        return problem
    size = envoy_program_size(pattern)
    if size > ENVOY_MAX_PROGRAM_SIZE:
        return f"has an RE2 program size of {size}, above Envoy's limit of {ENVOY_MAX_PROGRAM_SIZE}"
    return None


def _regex_value(value: object) -> str | None:
    if not isinstance(value, str):
        return _text(value)
    return _text(value) or _regex(value)


def _header_value(value: object) -> str | None:
    problem = _no_crlf(value)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    if len(value.encode()) > MAX_HEADER_BYTES:
        return f"is longer than Envoy's limit of {MAX_HEADER_BYTES} bytes"
    pos = value.find("%")
    while pos >= 0:
        if value.startswith("%%", pos):
            pos = value.find("%", pos + 2)
            continue
        command = _COMMAND.match(value, pos)
        if command is None:
            return (
                f"has a '%' at position {pos} that starts no %COMMAND%; Envoy refuses it "
                "(write a literal % as %%)"
            )
        if command.group(1) not in _HEADER_COMMANDS:
            return f"uses %{command.group(1)}%, which Envoy does not know"
        pos = value.find("%", command.end())
    return None


def _first(*checks: tuple[str, Callable[[], str | None]]) -> str | None:
    for where, check in checks:
        problem = check()
        if problem is not None:
            return f"{where} {problem}"
    return None


def hostname_problem(hostname: object) -> str | None:
    """Why `hostname` cannot be a virtual host's domain (or an SNI name), or None."""
    problem = _no_crlf(hostname)
    if problem is not None:
        return problem
    assert isinstance(hostname, str)
    if hostname == "*":
        return None
    if len(hostname) > MAX_HOSTNAME_LENGTH or not _HOSTNAME.fullmatch(hostname):
        return (
            "is not a DNS name (labels of letters, digits, '-' and '_', at most 63 characters "
            f"each and {MAX_HOSTNAME_LENGTH} in all, '*' only as the whole first label)"
        )
    return None


# --- routes --------------------------------------------------------------------------------------


def _path_match_problem(match: RouteMatch) -> str | None:
    path = match.path
    value = path.value
    if not isinstance(path.kind, PathMatchKind):
        return f"path match kind {path.kind!r} is not one the translator knows"
    if path.kind is PathMatchKind.REGEX:
        problem = _regex_value(value)
        return None if problem is None else f"path regex {problem}"
    problem = _no_crlf(value)
    if problem is None and not value.startswith("/"):
        problem = "does not start with '/'"
    if problem is None and path.kind is PathMatchKind.SEGMENT_PREFIX:
        stripped = value.rstrip("/")
        if stripped and ("?" in stripped or "#" in stripped):
            problem = "holds '?' or '#', which Envoy's path_separated_prefix refuses"
    return None if problem is None else f"path {path.kind.value} {value!r} {problem}"


def _flags(*values: object) -> str | None:
    # Protobuf takes only real booleans; an int here would fail the whole route in translation.
    for value in values:
        if type(value) is not bool:
            return f"has a {type(value).__name__} where a flag (true/false) belongs"
    return None


def _string_match_problem(kind: StringMatchKind, value: object, crlf: bool) -> str | None:
    if not isinstance(kind, StringMatchKind):
        return f"has the match kind {kind!r}, which the translator does not know"
    if kind is StringMatchKind.PRESENT:
        return None
    if kind is StringMatchKind.REGEX:
        return _regex_value(value)
    if kind is StringMatchKind.RANGE:
        return _range_value(value)
    problem = _no_crlf(value) if crlf else _text(value)
    if problem is None and kind is not StringMatchKind.EXACT and not value:
        return f"is empty; Envoy requires a non-empty {kind.value} value"
    return problem


def _range_value(value: object) -> str | None:
    # Envoy's Int64Range: two int64s, start inclusive, end exclusive.
    problem = _text(value)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    start, sep, end = value.partition(",")
    try:
        low, high = int(start), int(end)
    except ValueError:
        return f"{value!r} is not a range 'start,end' of integers"
    if not sep or not -(2**63) <= low < high < 2**63:
        return f"{value!r} is not a range 'start,end' of int64 with start < end"
    return None


def _header_match_problem(i: int, h: HeaderMatch) -> str | None:
    problem = _header_name(h.name)
    if problem is not None:
        return f"headers[{i}].name {problem}"
    problem = _string_match_problem(h.kind, h.value, True) or _flags(
        h.invert, h.ignore_case, h.treat_missing_as_empty
    )
    return None if problem is None else f"headers[{i}] ({h.name!r}) value {problem}"


def _query_name(name: object) -> str | None:
    problem = _text(name)
    if problem is None:
        assert isinstance(name, str)
        size = len(name.encode())
        if not 1 <= size <= MAX_QUERY_NAME_BYTES:
            return f"is {size} bytes; Envoy allows 1 to {MAX_QUERY_NAME_BYTES}"
    return problem


def _query_match_problem(i: int, q: QueryMatch) -> str | None:
    problem = _query_name(q.name)
    if problem is not None:
        return f"query[{i}].name {problem}"
    if q.kind is StringMatchKind.RANGE:
        return f"query[{i}] ({q.name!r}) is a range match, which Envoy has for headers only"
    problem = _string_match_problem(q.kind, q.value, False) or _flags(q.ignore_case)
    return None if problem is None else f"query[{i}] ({q.name!r}) value {problem}"


def match_problem(match: RouteMatch) -> str | None:
    """Why Envoy would refuse this match, or None."""
    problem = _path_match_problem(match)
    if problem is not None:
        return problem
    fraction = match.runtime_fraction
    if fraction is not None and (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not 0.0 <= fraction <= 1.0
    ):
        return f"runtime fraction {fraction!r} is not a number from 0 to 1"
    for i, h in enumerate(match.headers):
        problem = _header_match_problem(i, h)
        if problem is not None:
            return problem
    for i, q in enumerate(match.query):
        problem = _query_match_problem(i, q)
        if problem is not None:
            return problem
    return None


def _forward_problem(action: Forward, clusters: Container[str]) -> str | None:
    for i, wc in enumerate(action.clusters):
        problem = None if type(wc.weight) is int else _integer(wc.weight)
        if problem is not None:
            return f"backend {i} ({wc.cluster!r}) weight {problem}"
    effective = effective_forward(action)
    for name, _ in effective:
        # The invalid backend is no cluster by design: its share answers 500 (model.py).
        if name not in clusters and name != INVALID_BACKEND:
            return f"backend cluster {name!r} is not a usable cluster"
    if len(effective) > 1:
        # A single backend is sent as a plain cluster, so its weight never reaches Envoy.
        for name, weight in effective:
            if weight > UINT32_MAX:
                return (
                    f"backend {name!r} weight {weight} exceeds Envoy's limit of {UINT32_MAX} "
                    "(uint32)"
                )
        total = sum(w for _, w in effective)
        if total > UINT32_MAX:
            return f"backend weights sum to {total}, above Envoy's limit of {UINT32_MAX} (uint32)"
    for i, wc in enumerate(action.clusters):
        if wc.policies is not None:
            problem = _backend_policies_problem(wc.policies)
            if problem is not None:
                return f"backend {i} ({wc.cluster!r}) {problem}"
    return None


def _compression_problem(c: Compression | None) -> str | None:
    if c is None or tuple(c.content_types) == COMPRESSIBLE_TYPES:
        return None
    # The types belong to the listener's compressor filter, shared by every route.
    return f"compression content types {list(c.content_types)} are not the compressor's"


def _direct_problem(action: DirectResponse) -> str | None:
    problem = _int_in(action.status, 200, 599)
    if problem is not None:
        return f"direct response status {problem}"
    for i, hv in enumerate(action.headers):
        problem = _header_value_problem(f"direct response header[{i}]", hv)
        if problem is not None:
            return problem
    problem = _text(action.body)
    if problem is None and len(action.body.encode()) > MAX_DIRECT_RESPONSE_BODY_BYTES:
        problem = f"is longer than turnout's limit of {MAX_DIRECT_RESPONSE_BODY_BYTES} bytes"
    return None if problem is None else f"direct response body {problem}"


def _optional(value: object, check: Callable[[object], str | None]) -> str | None:
    return None if value is None else check(value)


def _redirect_problem(action: Redirect) -> str | None:
    def scheme(value: object) -> str | None:
        problem = _text(value)
        if problem is None and isinstance(value, str) and value and not _SCHEME.fullmatch(value):
            return "is not a URI scheme"
        return problem

    def port(value: object) -> str | None:
        return None if value == 0 else _int_in(value, 1, 65535)

    return _first(
        ("redirect scheme", lambda: _optional(action.scheme, scheme)),
        ("redirect hostname", lambda: _optional(action.hostname, _no_crlf)),
        ("redirect port", lambda: _optional(action.port, port)),
        ("redirect path", lambda: _optional(action.path, _no_crlf)),
        ("redirect prefix", lambda: _optional(action.prefix, _no_crlf)),
        ("redirect query", lambda: _optional(action.query_suffix, _no_crlf)),
    )


def _header_policy_problem(where: str, policy: HeaderPolicy | None) -> str | None:
    if policy is None:
        return None
    for kind, values in (("set", policy.set), ("add", policy.add)):
        for i, hv in enumerate(values):
            problem = _header_value_problem(f"{where}.{kind}[{i}]", hv)
            if problem is not None:
                return problem
    for i, name in enumerate(policy.remove):
        problem = _modifiable_header(name)
        if problem is not None:
            return f"{where}.remove[{i}] {problem}"
    return None


def _modifiable_header(name: object) -> str | None:
    problem = _header_name(name)
    if problem is None:
        assert isinstance(name, str)
        if len(name.encode()) > MAX_HEADER_BYTES:
            return f"is longer than Envoy's limit of {MAX_HEADER_BYTES} bytes"
        if name.startswith(":") or name.lower() == "host":
            return f"is {name!r}: Envoy refuses to change ':'-prefixed headers and host"
    return problem


def _header_value_problem(where: str, hv: HeaderValue) -> str | None:
    return _first(
        (f"{where}.name", lambda: _modifiable_header(hv.name)),
        (f"{where} ({hv.name!r}) value", lambda: _header_value(hv.value)),
    )


def _host_rewrite_problem(rewrite: HostRewrite | None) -> str | None:
    if rewrite is None:
        return None
    return _first(
        ("host rewrite", lambda: _optional(rewrite.literal, _no_crlf)),
        ("host rewrite header", lambda: _optional(rewrite.from_header, _header_name)),
    )


def _same_site(value: object) -> str | None:
    return None if value in _SAME_SITE else f"is {value!r}, not Strict, Lax or None"


def _cookie_name(value: object) -> str | None:
    problem = _header_name(value)
    if problem is None and isinstance(value, str) and any(ch in value for ch in ";=, \t"):
        return "is not a cookie name"
    return problem


def _cookie_problem(rewrites: Sequence[CookieRewrite]) -> str | None:
    for i, c in enumerate(rewrites):
        for what, value, check in (
            ("name", c.name, _cookie_name),
            ("path", c.path, _no_crlf),
            ("domain", c.domain, _no_crlf),
            ("sameSite", c.same_site, _same_site),
            ("secure", c.secure, _flags),
        ):
            problem = _optional(value, check)
            if problem is not None:
                return f"cookie rewrite[{i}] {what} {problem}"
    return None


def _backend_policies_problem(p: BackendPolicies) -> str | None:
    return (
        _header_policy_problem("request headers", p.request_headers)
        or _header_policy_problem("response headers", p.response_headers)
        or _host_rewrite_problem(p.host_rewrite)
        or _cookie_problem(p.cookie_rewrites)
        or (_direct_problem(p.direct_response) if p.direct_response is not None else None)
    )


def _ip_filter_problem(f: IPFilter | None) -> str | None:
    if f is None:
        return None
    if _flags(f.allow) is not None:
        return f"ip filter allow {_flags(f.allow)}"
    for i, rule in enumerate(f.rules):
        try:
            ipaddress.ip_network(rule.cidr, strict=False)
        except (ValueError, TypeError):
            return f"ip filter rule[{i}] {rule.cidr!r} is not a CIDR range"
    return None


def _global_rate_limit_problem(policy: GlobalRateLimit | None) -> str | None:
    """Envoy's rules for rate limit actions: non-empty keys, values and header names."""
    if policy is None:
        return None
    for i, descriptor in enumerate(policy.descriptors):
        if not descriptor.entries:
            return f"global rate limit descriptor[{i}] has no entries"
        for j, entry in enumerate(descriptor.entries):
            problem = _descriptor_entry_problem(entry)
            if problem is not None:
                return f"global rate limit descriptor[{i}].entries[{j}] {problem}"
    return None


def _descriptor_entry_problem(entry: DescriptorEntry) -> str | None:
    if isinstance(entry, RequestHeaderEntry):
        return _first(
            ("header name", lambda: _header_name(entry.header_name)),
            ("descriptor key", lambda: _non_empty(entry.descriptor_key)),
        )
    if isinstance(entry, GenericKeyEntry):
        return _first(
            ("key", lambda: _non_empty(entry.key)), ("value", lambda: _non_empty(entry.value))
        )
    if isinstance(entry, HeaderValueMatchEntry):
        if not entry.headers:
            return "has no headers to match"
        for i, h in enumerate(entry.headers):
            problem = _header_match_problem(i, h)
            if problem is not None:
                return problem
        return _first(("value", lambda: _non_empty(entry.value)))
    return None


def _non_empty(value: str) -> str | None:
    return _text(value) or (None if value else "is empty")


def _rate_limit_problem(rl: LocalRateLimit | None) -> str | None:
    if rl is None:
        return None
    problem = _first(
        ("rate limit requests", lambda: _int_in(rl.requests, 1, UINT32_MAX)),
        ("rate limit burst", lambda: _int_in(rl.burst, 0, UINT32_MAX)),
        ("rate limit unit", lambda: _duration(rl.unit_s)),
    )
    if problem is not None:
        return problem
    if rl.requests + rl.burst > UINT32_MAX:
        return f"rate limit requests + burst exceed Envoy's limit of {UINT32_MAX} (uint32)"
    if rl.unit_s <= 0:
        return "rate limit unit must be longer than 0 s"
    if rl.status not in _DEFINED_ERROR_STATUSES:
        return f"rate limit status {rl.status!r} is not an HTTP error status Envoy defines"
    for i, hv in enumerate(rl.response_headers):
        problem = _header_value_problem(f"rate limit response header[{i}]", hv)
        if problem is not None:
            return problem
    return None


def _hash_problem(i: int, h: HashPolicy) -> str | None:
    where = f"hash policy[{i}]"
    if h.source is HashSource.HEADER:
        problem = _header_name(h.name)
    elif h.source in (HashSource.COOKIE, HashSource.QUERY):
        problem = _header_name(h.name)  # min_len 1, and no CR/LF/NUL to be safe in a header
    else:
        problem = None
    if problem is None:
        problem = _flags(h.terminal)
    if problem is not None:
        return f"{where} name {problem}"
    return _first(
        (f"{where} cookie TTL", lambda: _optional(h.cookie_ttl_s, _duration)),
        (f"{where} cookie path", lambda: _optional(h.cookie_path, _no_crlf)),
    )


def _jwt_problem(j: JwtValidation | None) -> str | None:
    if j is None:
        return None
    problem = _first(
        ("JWT issuer", lambda: _optional(j.issuer, _no_crlf)),
        ("JWKS timeout", lambda: _duration(j.timeout_s)),
        ("JWKS cache duration", lambda: _duration(j.cache_s)),
    )
    for i, audience in enumerate(j.audiences):
        found = _no_crlf(audience)
        problem = problem or (f"JWT audience[{i}] {found}" if found is not None else None)
    # A missing CA bundle fails closed in the translator, as for clusters.
    for i, name in enumerate(j.validation.subject_names if j.validation is not None else ()):
        found = _no_crlf(name) or ("is empty" if not name else None)
        problem = problem or (f"JWKS subject name[{i}] {found}" if found is not None else None)
    if problem is None and j.issuer == "":
        problem = "JWT issuer is empty"
    if problem is not None:
        return problem
    problem = _no_crlf(j.jwks_uri)
    if problem is None and any(c.isspace() or not c.isprintable() for c in j.jwks_uri):
        problem = "holds spaces or control characters"
    endpoint = j.jwks_endpoint() if problem is None else None
    if problem is None and endpoint is None:
        problem = "is not an absolute http(s) URL with a host"
    if problem is None and endpoint is not None:
        _, host, port = endpoint
        if not 1 <= port <= 65535:
            problem = f"has port {port}, outside [1, 65535]"
        elif not _is_ip(host):
            problem = hostname_problem(host)
            if problem is None and "*" in host:
                problem = "has a wildcard host"
    return f"JWKS URI {j.jwks_uri!r} {problem}" if problem is not None else None


# Envoy ignores any other code in `redirect_response_codes`; one here is a dialect's bug.
_INTERNAL_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})


def _internal_redirect_problem(r: InternalRedirectPolicy | None) -> str | None:
    if r is None:
        return None
    problem = _first(
        ("internal redirect limit", lambda: _optional(r.max_redirects, _uint32)),
        ("internal redirect deny repeated route", lambda: _flags(r.deny_repeated_route)),
    )
    if problem is not None:
        return problem
    if not isinstance(r.cross_scheme, CrossSchemeRedirect):
        return f"internal redirect cross scheme {r.cross_scheme!r} is not a CrossSchemeRedirect"
    for i, code in enumerate(r.response_codes):
        if type(code) is not int or code not in _INTERNAL_REDIRECT_CODES:
            return f"internal redirect code[{i}] {code!r} is not one of 301, 302, 303, 307, 308"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def policies_problem(p: RoutePolicies, clusters: Container[str]) -> str | None:
    """Why Envoy would refuse the route's policies, or None."""
    problem = _flags(p.websockets)
    if problem is not None:
        return f"websockets {problem}"
    t = p.timeouts
    if t is not None:
        problem = _first(
            ("response timeout", lambda: _optional(t.response_s, _duration)),
            ("idle timeout", lambda: _optional(t.idle_s, _duration)),
            ("backend request timeout", lambda: _optional(t.backend_request_s, _duration)),
        )
        if problem is not None:
            return problem
    r = p.retry
    if r is not None:
        problem = _first(
            ("retry count", lambda: _int_in(r.count, 0, UINT32_MAX)),
            ("retry per-try timeout", lambda: _optional(r.per_try_timeout_s, _duration)),
        )
        if problem is not None:
            return problem
        for i, cond in enumerate(r.retry_on):
            problem = _no_crlf(cond)
            if problem is None and (not cond or "," in cond):
                problem = "is not one retry condition"
            if problem is not None:
                return f"retry on[{i}] {problem}"
        for i, code in enumerate(r.retriable_status_codes):
            problem = _int_in(code, 0, UINT32_MAX)
            if problem is not None:
                return f"retriable status[{i}] {problem}"
    problem = (
        _header_policy_problem("request headers", p.request_headers)
        or _header_policy_problem("response headers", p.response_headers)
        or _host_rewrite_problem(p.host_rewrite)
        or _cors_problem(p.cors)
        or _compression_problem(p.compression)
        or _jwt_problem(p.jwt)
        or _internal_redirect_problem(p.internal_redirect)
        or _route_authorization_problem(p.authorization)
    )
    if problem is not None:
        return problem
    pr = p.path_rewrite
    if pr is not None:
        problem = _first(
            ("path rewrite prefix", lambda: _optional(pr.prefix, _no_crlf)),
            ("path rewrite full path", lambda: _optional(pr.full_path, _no_crlf)),
            ("path rewrite regex", lambda: _optional(pr.regex, _regex_value)),
            ("path rewrite substitution", lambda: _optional(pr.substitution, _no_crlf)),
        )
        if problem is not None:
            return problem
        if pr.regex is not None and pr.substitution is None:
            return "path rewrite regex has no substitution"
    for i, m in enumerate(p.mirrors):
        if m.cluster not in clusters:
            return f"mirror[{i}] cluster {m.cluster!r} is not a usable cluster"
        problem = _percent(m.percent)
        if problem is not None:
            return f"mirror[{i}] percent {problem}"
    for i, h in enumerate(p.hash_policies):
        problem = _hash_problem(i, h)
        if problem is not None:
            return problem
    return (
        _cookie_problem(p.cookie_rewrites)
        or _ip_filter_problem(p.ip_filter)
        or _rate_limit_problem(p.rate_limit)
        or _global_rate_limit_problem(p.global_rate_limit)
    )


def action_problem(route: Route, clusters: Container[str]) -> str | None:
    action = route.action
    if isinstance(action, Forward):
        problem = _forward_problem(action, clusters)
    elif isinstance(action, DirectResponse):
        problem = _direct_problem(action)
    elif isinstance(action, Redirect):
        problem = _redirect_problem(action)
    else:
        problem = f"action {type(action).__name__} is not one the translator knows"
    if problem is not None:
        return problem
    if route.policies != _NO_POLICIES:
        return policies_problem(route.policies, clusters)
    return None


_NO_POLICIES = RoutePolicies()


def _route_name_problem(route: Route) -> str | None:
    ref = route.source.object
    for part in (ref.kind, ref.namespace, ref.name, route.source.field):
        if type(part) is not str or not part.isascii():
            problem = _text(part)
            if problem is not None:
                return f"the route's name (from its source) {problem}"
    return None


# --- virtual hosts, TCP proxies, clusters ---------------------------------------------------------


def _tls_problem(tls: TLSTermination | None, g: _Context) -> str | None:
    if tls is None:
        return None
    if tls.secret not in g.secrets:
        return f"TLS secret {tls.secret!r} is not in the graph (SDS would never deliver it)"
    if tls.fallback_secret is not None and tls.fallback_secret not in g.secrets:
        return f"fallback certificate {tls.fallback_secret!r} is not in the graph"
    # A client validation bundle that is missing needs no check here: the translator fails
    # closed on it (`without_unvalidatable`), which refuses the clients and NACKs nothing.
    return None


def _cors_problem(cors: CorsPolicy | None) -> str | None:
    if cors is None:
        return None
    problem = _flags(cors.allow_credentials, cors.allow_private_network)
    if problem is not None:
        return f"CORS policy {problem}"
    for i, origin in enumerate(cors.allow_origins):
        if isinstance(origin, RegexOrigin):
            problem = _regex_value(origin.pattern)
        elif isinstance(origin, ExactOrigin):
            problem = _no_crlf(origin.origin)
        else:
            problem = f"is a {type(origin).__name__}, not an ExactOrigin or a RegexOrigin"
        if problem is not None:
            return f"CORS allowOrigin[{i}] {problem}"
    for what, values in (
        ("allowMethods", cors.allow_methods),
        ("allowHeaders", cors.allow_headers),
        ("exposeHeaders", cors.expose_headers),
    ):
        for i, value in enumerate(values):
            problem = _no_crlf(value)
            if problem is not None:
                return f"CORS {what}[{i}] {problem}"
    if cors.max_age_s is not None:
        problem = _int_in(cors.max_age_s, 0, 2**63 - 1)
        if problem is not None:
            return f"CORS maxAge {problem}"
    return None


def _vhost_policies_problem(p: VirtualHostPolicies, clusters: Container[str]) -> str | None:
    return (
        _cors_problem(p.cors)
        or _ip_filter_problem(p.ip_filter)
        or _rate_limit_problem(p.rate_limit)
        or _global_rate_limit_problem(p.global_rate_limit)
        or _authorization_problem(p.authorization, clusters)
    )


def _authorization_problem(a: ExternalAuthorization | None, clusters: Container[str]) -> str | None:
    """The gRPC service's cluster must exist (or every request of the host fails), its timeout
    is a duration, and `BufferSettings.max_request_bytes` a uint32 above 0."""
    if a is None:
        return None
    if a.cluster not in clusters:
        return f"authorization cluster {a.cluster!r} is not a usable cluster"
    body = a.with_request_body
    return _first(
        ("authorization fail open", lambda: _flags(a.fail_open)),
        ("authorization response timeout", lambda: _optional(a.response_timeout_s, _duration)),
        (
            "authorization max request bytes",
            lambda: None if body is None else _int_in(body.max_request_bytes, 1, UINT32_MAX),
        ),
        (
            "authorization body flags",
            lambda: (
                None if body is None else _flags(body.allow_partial_message, body.pack_as_bytes)
            ),
        ),
    )


def _route_authorization_problem(a: RouteAuthorization | None) -> str | None:
    """Context extensions are protobuf strings."""
    if a is None:
        return None
    problem = _flags(a.disabled)
    if problem is not None:
        return f"authorization disabled {problem}"
    for key, value in a.context:
        problem = _text(key) or _text(value)
        if problem is not None:
            return f"authorization context {key!r} {problem}"
    return None


def virtual_host_problem(vh: VirtualHost, g: _Context) -> str | None:
    """Why Envoy would refuse the virtual host itself (not its routes), or None."""
    problem = _text(vh.name)
    if problem is None and not vh.name:
        problem = "is empty"
    if problem is not None:
        return f"virtual host name {problem}"
    problem = hostname_problem(vh.hostname)
    if problem is not None:
        return f"hostname {vh.hostname!r} {problem}"
    # The chain's server name ("*": the chain without server names).
    problem = hostname_problem(vh.sni) if vh.sni is not None else None
    if problem is not None:
        return f"SNI name {vh.sni!r} {problem}"
    one_label = vh.hostname_match is HostnameMatch.WILDCARD_ONE_LABEL
    # The :authority regex goes on each route, so a host without routes never emits it.
    if one_label and vh.routes and vh.hostname.startswith("*."):
        size_problem = _regex(wildcard_authority_regex(vh.hostname))
        if size_problem is not None:
            return (
                f"hostname {vh.hostname!r} is too long for a one-label wildcard: the "
                f":authority regex it needs {size_problem}"
            )
    problem = _tls_problem(vh.tls, g)
    if problem is None and vh.policies != _NO_VHOST_POLICIES:
        problem = _vhost_policies_problem(vh.policies, g.clusters)
    return problem


_NO_VHOST_POLICIES = VirtualHostPolicies()


def _tcp_problem(proxy: TCPProxy, g: _Context) -> str | None:
    if proxy.hostname:
        problem = hostname_problem(proxy.hostname)
        if problem is None and proxy.hostname == "*":
            problem = "is no SNI name"
        if problem is not None:
            return f"SNI name {proxy.hostname!r} {problem}"
    for i, wc in enumerate(proxy.clusters):
        problem = _integer(wc.weight)
        if problem is not None:
            return f"backend {i} ({wc.cluster!r}) weight {problem}"
        if wc.weight > 0 and wc.cluster not in g.clusters and wc.cluster != INVALID_BACKEND:
            return f"backend {i} cluster {wc.cluster!r} is not a usable cluster"
    weights = [wc.weight for wc in proxy.clusters if wc.weight > 0]
    if len(weights) > 1 and (max(weights) > UINT32_MAX or sum(weights) > UINT32_MAX):
        return f"backend weights exceed Envoy's limit of {UINT32_MAX} (uint32)"
    return _tls_problem(proxy.tls, g)


def endpoint_problem(ep: Endpoint) -> str | None:
    try:
        ipaddress.ip_address(ep.address)
    except (ValueError, TypeError):
        return f"endpoint address {ep.address!r} is not an IP address (EDS resolves no names)"
    problem = _int_in(ep.port, 1, 65535)
    if problem is None and ep.health_port != 0:
        # 0 means "the traffic port"; anything else goes to health_check_config.port_value.
        health = _int_in(ep.health_port, 1, 65535)
        if health is not None:
            return f"endpoint {ep.address} health port {health}"
    return None if problem is None else f"endpoint {ep.address} port {problem}"


def _dns_problem(c: Cluster) -> str | None:
    """Why Envoy would refuse a DNS cluster's name or ports, or None."""
    if c.dns_name is None:
        return None
    problem = _no_crlf(c.dns_name)
    if problem is None and (not c.dns_name or any(ch.isspace() for ch in c.dns_name)):
        problem = "is not a DNS name"
    if problem is None:
        # The Service port becomes the DNS cluster's endpoint port.
        port_problem = _int_in(c.port, 1, 65535)
        problem = None if port_problem is None else f"port {port_problem}"
    if problem is None and c.health_port:
        # ...and its health port the endpoint's health_check_config.port_value.
        health_problem = _int_in(c.health_port, 1, 65535)
        problem = None if health_problem is None else f"health port {health_problem}"
    return None if problem is None else f"DNS name {problem}"


def _health_problem(c: Cluster) -> str | None:
    """Why Envoy would refuse a cluster's health checks or outlier detection, or None."""
    hc = c.health_check
    if hc is not None:

        def strict(value: object) -> str | None:
            problem = _text(value)
            if problem is None and isinstance(value, str) and _STRICT_VALUE_REFUSED.search(value):
                return "holds a control character, which Envoy refuses here"
            return problem

        problem = _first(
            ("health check path", lambda: strict(hc.path)),
            ("health check host", lambda: strict(hc.host)),
            ("health check interval", lambda: _duration(hc.interval_s)),
            ("health check timeout", lambda: _duration(hc.timeout_s)),
            ("health check unhealthy threshold", lambda: _integer(hc.unhealthy_threshold)),
            ("health check healthy threshold", lambda: _integer(hc.healthy_threshold)),
        )  # fmt: skip
        if problem is not None:
            return problem
        for i, pair in enumerate(hc.expected_statuses):
            if len(pair) != 2 or any(_integer(v) for v in pair):
                return f"health check expected status range[{i}] is not two integers"
    tcp = c.tcp_health_check
    if tcp is not None:
        problem = _first(
            ("TCP health check interval", lambda: _duration(tcp.interval_s)),
            ("TCP health check timeout", lambda: _duration(tcp.timeout_s)),
            ("TCP health check unhealthy threshold", lambda: _integer(tcp.unhealthy_threshold)),
            ("TCP health check healthy threshold", lambda: _integer(tcp.healthy_threshold)),
        )
        if problem is not None:
            return problem
    od = c.outlier_detection
    if od is not None:
        problem = _first(
            ("outlier detection consecutive 5xx", lambda: _uint32(od.consecutive_5xx)),
            ("outlier detection consecutive gateway errors",
             lambda: _optional(od.consecutive_gateway_errors, _uint32)),
            ("outlier detection interval", lambda: _duration(od.interval_s)),
            ("outlier detection ejection time", lambda: _duration(od.base_ejection_time_s)),
            ("outlier detection max ejection percent", lambda: _percent(od.max_ejection_percent)),
        )  # fmt: skip
        if problem is not None:
            return problem
    return None


def _validation_problem(c: Cluster) -> str | None:
    """Why Envoy would refuse a cluster's upstream TLS validation, or None."""
    v = c.validation
    if v is not None:
        if v.system_trust_store and v.ca_secret:
            return "upstream validation names both a CA bundle and the system trust store"
        # A missing CA bundle needs no check: the translator pins an impossible key instead, so
        # the upstream fails closed without a NACK.
        for i, name in enumerate(v.subject_names):
            problem = _no_crlf(name)
            if problem is None and not name:
                problem = "is empty"
            if problem is not None:
                return f"upstream validation subject name[{i}] {problem}"
        for i, uri in enumerate(v.subject_uris):
            problem = _no_crlf(uri)
            if problem is None and not uri:
                problem = "is empty"
            if problem is not None:
                return f"upstream validation subject URI[{i}] {problem}"
        # An SNI longer than Envoy's 255 bytes is passed over by the translator, not sent.
        problem = _optional(v.sni, _no_crlf)
        if problem is not None:
            return f"upstream SNI {problem}"
    return None


def _balancing_problem(c: Cluster) -> str | None:
    """Why Envoy would refuse a cluster's hash balance factor or slow start, or None."""
    if c.hash_balance_factor is not None:
        problem = _int_in(c.hash_balance_factor, 100, UINT32_MAX)
        if problem is not None:
            return f"hash balance factor {problem}"
    s = c.slow_start
    if s is not None:
        problem = _first(
            ("slow start window", lambda: _duration(s.window_s)),
            ("slow start min weight percent", lambda: _int_in(s.min_weight_percent, 0, 100)),
        )
        if problem is not None:
            return problem
        if not (isinstance(s.aggression, int | float) and math.isfinite(s.aggression)):
            return "slow start aggression is not a finite number"
        if s.aggression <= 0:
            return "slow start aggression must be greater than 0"
    return None


def cluster_problem(c: Cluster) -> str | None:
    """Why Envoy would refuse the cluster's settings (endpoints aside), or None."""
    problem = _text(c.name)
    if problem is None and not c.name:
        problem = "is empty"
    if problem is not None:
        return f"cluster name {problem}"
    problem = _dns_problem(c) or _first(
        ("connect timeout", lambda: _optional(c.connect_timeout_s, _duration)),
        ("idle connection timeout", lambda: _optional(c.idle_connection_timeout_s, _duration)),
    )
    if problem is not None:
        return problem
    return _health_problem(c) or _validation_problem(c) or _balancing_problem(c)


# --- the pass ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Context:
    clusters: Container[str]  # usable cluster names
    secrets: Container[str]


class _Asked:
    """A set of names that records the names looked up in it: what a virtual host's check read
    of the graph's clusters and secrets, so that its memo stays valid while those answers do."""

    __slots__ = ("asked", "names")

    def __init__(self, names: AbstractSet[str], asked: set[str]) -> None:
        self.names = names
        self.asked = asked

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.asked.add(name)
        return name in self.names


@dataclass(frozen=True, slots=True)
class ClusterCheck:
    """`cluster_problem` of a cluster, or the cluster without the endpoints Envoy refuses and a
    problem for each: a pure function of the cluster."""

    problem: str | None
    cluster: Cluster
    problems: tuple[GraphProblem, ...]


@dataclass(frozen=True, slots=True)
class VirtualHostCheck:
    """A virtual host's own problem, or the host with its routes checked and their problems;
    `asked`: the cluster and secret names the check looked up."""

    problem: str | None
    vhost: VirtualHost
    problems: tuple[GraphProblem, ...]
    asked: frozenset[str]


class LimitsMemo:
    """What `enforce_envoy_limits` keeps across compiles: checks by the identity of the cluster
    or virtual host, and the usable names they were made against."""

    def __init__(self) -> None:
        self.clusters = IdentityMemo[Cluster, ClusterCheck]()
        self.vhosts = IdentityMemo[VirtualHost, VirtualHostCheck]()
        self.names: frozenset[str] = frozenset()


def _service_ref(c: Cluster) -> ObjectRef:
    return ObjectRef("", "Service", str(c.namespace), str(c.service))


def check_cluster(c: Cluster) -> ClusterCheck:
    problem = cluster_problem(c)
    if problem is not None:
        return ClusterCheck(problem, c, ())
    problems: list[GraphProblem] = []
    good = []
    for ep in c.endpoints:
        ep_problem = endpoint_problem(ep)
        if ep_problem is None:
            good.append(ep)
        else:
            problems.append(GraphProblem(_service_ref(c), "endpoints", f"{ep_problem}; left out"))
    if len(good) != len(c.endpoints):
        c = dataclasses.replace(c, endpoints=tuple(good))
    return ClusterCheck(None, c, tuple(problems))


def _check_clusters(
    graph: RoutingGraph, problems: list[GraphProblem], memo: LimitsMemo
) -> tuple[tuple[Cluster, ...], bool]:
    kept: list[Cluster] = []
    seen: set[str] = set()
    changed = False
    for c in graph.clusters:
        check = memo.clusters.get(c)
        if check is None:
            check = memo.clusters.put(c, check_cluster(c))
        problem = check.problem
        if problem is None and c.name in seen:
            problem = f"cluster {c.name!r} is listed twice (Envoy refuses duplicate clusters)"
        if problem is not None:
            problems.append(
                GraphProblem(_service_ref(c), "", f"{problem}; the cluster is left out and "
                             "the routes that use it answer 500")
            )  # fmt: skip
            changed = True
            continue
        seen.add(c.name)
        problems.extend(check.problems)
        changed = changed or check.cluster is not c
        kept.append(check.cluster)
    return tuple(kept), changed


class _Routes:
    """Checks routes once each: a Route object shared by several listeners is one check. The
    names each check looked up go to `asked` every time the route is asked about."""

    def __init__(self, ctx: _Context, asked: set[str]) -> None:
        self._clusters = _names(ctx.clusters)
        self._asked = asked
        self._done: dict[int, tuple[Route, _RouteCheck]] = {}
        # A match shared by several routes (a Gateway API route made once per listener port)
        # is checked once: by identity, as `_done`.
        self._matches: dict[int, tuple[RouteMatch, str | None]] = {}

    def check(self, route: Route, problems: list[GraphProblem]) -> Route | None:
        """`route` itself, its 500 replacement, or None when it is left out; its problem goes
        to `problems` (each time: a virtual host's problems stand on their own)."""
        found = self.verdict(route)
        self._asked.update(found.asked)
        if found.problem is not None:
            problems.append(found.problem)
        return found.route

    def verdict(self, route: Route) -> _RouteCheck:
        """`route`'s check, made once per compile."""
        hit = self._done.get(id(route))
        if hit is None or hit[0] is not route:
            hit = self._done[id(route)] = (route, self._check(route))
        return hit[1]

    def _match_problem(self, match: RouteMatch) -> str | None:
        hit = self._matches.get(id(match))
        if hit is not None and hit[0] is match:
            return hit[1]
        problem = match_problem(match)
        self._matches[id(match)] = (match, problem)
        return problem

    def _check(self, route: Route) -> _RouteCheck:
        source = route.source
        problem = _route_name_problem(route) or self._match_problem(route.match)
        if problem is not None:
            reason = f"{problem}; the route is left out"
            return _RouteCheck(None, GraphProblem(source.object, source.field, reason))
        asked: set[str] = set()
        problem = action_problem(route, _Asked(self._clusters, asked))
        if problem is None:
            return _RouteCheck(route, None, frozenset(asked))
        reason = f"{problem}; the route answers {INVALID_ROUTE_STATUS} instead"
        replaced = Route(route.match, DirectResponse(INVALID_ROUTE_STATUS), source)
        return _RouteCheck(
            replaced, GraphProblem(source.object, source.field, reason), frozenset(asked)
        )


@dataclass(frozen=True, slots=True)
class _RouteCheck:
    route: Route | None
    problem: GraphProblem | None
    asked: frozenset[str] = frozenset()


class _Hosts:
    """Checks virtual hosts, by identity through the memo while the names a check looked up
    are usable exactly as before (`changed`: the names usable then or now, not both)."""

    def __init__(
        self,
        g: _Context,
        memo: LimitsMemo,
        changed: frozenset[str],
        ids: IdsMemo | None = None,
    ) -> None:
        self._ids = ids
        self._asked: set[str] = set()
        recording = _Context(
            _Asked(_names(g.clusters), self._asked), _Asked(_names(g.secrets), self._asked)
        )
        self._g = recording
        self._routes = _Routes(g, self._asked)
        self._memo = memo.vhosts
        self._changed = changed

    def check(self, vh: VirtualHost) -> VirtualHostCheck:
        hit = self._memo.get(vh)
        if hit is not None and (not self._changed or hit.asked.isdisjoint(self._changed)):
            return hit
        return self._memo.put(vh, self.whole(vh))

    def whole(self, vh: VirtualHost) -> VirtualHostCheck:
        """The check of `vh` and of every one of its routes, kept by no memo."""
        self._asked.clear()
        problem = virtual_host_problem(vh, self._g)
        problems: list[GraphProblem] = []
        out = vh
        if problem is None:
            checked = [self._routes.check(r, problems) for r in vh.routes]
            if any(new is not old for new, old in zip(checked, vh.routes, strict=True)):
                out = dataclasses.replace(vh, routes=tuple(r for r in checked if r is not None))
        return VirtualHostCheck(problem, out, tuple(problems), frozenset(self._asked))

    def patch(self, vh: VirtualHost, kept: HostVerdicts) -> VirtualHostCheck:
        """`check(vh)` from the route verdicts `kept` holds for its host (patched: the routes
        added, removed, or that asked about a name usable then or now, not both)."""
        self._asked.clear()
        problem = virtual_host_problem(vh, self._g)
        asked = frozenset(self._asked)
        if problem is not None:
            kept.clear()
            return VirtualHostCheck(problem, vh, (), asked)
        kept.patch(vh.routes, (self._routes, self._ids), self._changed)
        if kept.out is vh.routes:
            out = vh
        elif kept.made is not None and kept.made[0] is vh and kept.made[1].routes is kept.out:
            out = kept.made[1]
        else:
            out = dataclasses.replace(vh, routes=kept.out)
        kept.made = (vh, out)
        return VirtualHostCheck(None, out, kept.problems, kept.joined(asked))


def _flip(names: set[str], name: str) -> None:
    if name in names:
        names.remove(name)
    else:
        names.add(name)


_ROUTE = attrgetter("route")
_PROBLEM = attrgetter("problem")


class HostVerdicts:
    """One virtual host's route checks kept across compiles by the route's identity, with the
    names each looked up (`askers`) and how many were replaced or have a problem, so that the
    checked route tuple and its problems are rebuilt only when a verdict changed."""

    __slots__ = ("altered", "asked", "askers", "faulty", "flipped", "joins", "made", "out",
                 "problems", "routes", "verdicts")  # fmt: skip

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.verdicts: dict[int, _RouteCheck] = {}
        self.askers: dict[str, set[int]] = {}
        self.altered = 0  # distinct routes whose verdict is not the route itself
        self.faulty = 0  # distinct routes with a problem
        self.routes: tuple[Route, ...] | None = None  # the tuple `out` was made from
        self.out: tuple[Route, ...] = ()
        self.problems: tuple[GraphProblem, ...] = ()
        self.asked: frozenset[str] = frozenset()
        self.made: tuple[VirtualHost, VirtualHost] | None = None
        self.flipped: set[str] = set()  # names that entered or left `askers` in this patch
        # The host's own names asked, `asked`, and their union as last made.
        self.joins: tuple[frozenset[str], frozenset[str], frozenset[str]] | None = None

    def joined(self, host: frozenset[str]) -> frozenset[str]:
        """`host | self.asked`, the very same set while both are."""
        if not host:
            return self.asked
        joins = self.joins
        if joins is None or joins[0] != host or joins[1] is not self.asked:
            joins = self.joins = (host, self.asked, host | self.asked)
        return joins[2]

    def patch(
        self,
        routes: tuple[Route, ...],
        checker: tuple[_Routes, IdsMemo | None],
        flipped: frozenset[str],
    ) -> None:
        redo: set[int] = set()
        # The smaller side: a first compile flips every name, and each host asks about few.
        askers = self.askers
        names = flipped if len(flipped) <= len(askers) else [n for n in askers if n in flipped]
        for name in names:
            redo.update(askers.get(name, ()))
        added, removed = route_diff(self.routes or (), routes, checker[1])
        if not (redo or added or removed) and routes is self.routes:
            return
        for route in removed:
            self._forget(id(route))
        ids = ids_of(routes, checker[1]) if redo else {}
        for i in [i for i in redo if i in ids]:  # not `intersection`: it walks `ids`
            self._forget(i)
            self._keep(i, checker[0].verdict(ids[i]))
        for route in added:
            self._keep(id(route), checker[0].verdict(route))
        self.out, self.problems = routes, ()
        if self.altered or self.faulty:
            checks = list(map(self.verdicts.__getitem__, map(id, routes)))
            if self.altered:
                self.out = tuple(filter(None, map(_ROUTE, checks)))
            self.problems = tuple(filter(None, map(_PROBLEM, checks)))
        if self.flipped or self.routes is None:
            self.asked = frozenset(self.askers)
            self.flipped.clear()
        self.routes = routes

    def _forget(self, i: int) -> None:
        check = self.verdicts.pop(i)
        for name in check.asked:
            users = self.askers[name]
            users.discard(i)
            if not users:
                del self.askers[name]
                _flip(self.flipped, name)
        self.altered -= check.route is None or id(check.route) != i
        self.faulty -= check.problem is not None

    def _keep(self, i: int, check: _RouteCheck) -> None:
        self.verdicts[i] = check
        for name in check.asked:
            users = self.askers.get(name)
            if users is None:
                users = self.askers[name] = set()
                _flip(self.flipped, name)
            users.add(i)
        self.altered += check.route is None or id(check.route) != i
        self.faulty += check.problem is not None


def _names(names: Container[str]) -> AbstractSet[str]:
    return names if isinstance(names, AbstractSet) else frozenset()


def _check_listener(
    lst: Listener, ctx: _Context, hosts: _Hosts, problems: list[GraphProblem]
) -> Listener:
    vhosts: list[VirtualHost] = []
    domains: dict[str, VirtualHost] = {}
    changed = False
    for vh in lst.virtual_hosts:
        check = hosts.check(vh)
        problem = check.problem
        if problem is None:
            first = domains.get(vh.hostname.lower())
            if first is not None:
                problem = (
                    f"hostname {vh.hostname!r} is already served on listener {lst.name} by "
                    f"{first.owner} (Envoy refuses a repeated domain)"
                )
        if problem is not None:
            problems.append(
                GraphProblem(vh.owner, f"virtual host {vh.hostname!r}",
                             f"{problem}; the virtual host is left out of listener {lst.name}")
            )  # fmt: skip
            changed = True
            continue
        domains[vh.hostname.lower()] = vh
        problems.extend(check.problems)
        changed = changed or check.vhost is not vh
        vhosts.append(check.vhost)
    proxies, proxies_changed = _check_proxies(lst, ctx, problems)
    if not changed and not proxies_changed:
        return lst
    return dataclasses.replace(lst, virtual_hosts=tuple(vhosts), tcp_proxies=proxies)


def _check_proxies(
    lst: Listener, ctx: _Context, problems: list[GraphProblem]
) -> tuple[tuple[TCPProxy, ...], bool]:
    proxies: list[TCPProxy] = []
    snis: set[str] = set()
    changed = False
    for proxy in lst.tcp_proxies:
        problem = _tcp_problem(proxy, ctx)
        if problem is None and proxy.hostname.lower() in snis:
            problem = f"SNI name {proxy.hostname!r} is already routed on listener {lst.name}"
        if problem is not None:
            problems.append(
                GraphProblem(proxy.owner, f"TCP proxy {proxy.hostname!r}",
                             f"{problem}; the TCP proxy is left out of listener {lst.name}")
            )  # fmt: skip
            changed = True
            continue
        snis.add(proxy.hostname.lower())
        proxies.append(proxy)
    return tuple(proxies), changed


def enforce_envoy_limits(
    graph: RoutingGraph, memo: LimitsMemo | None = None
) -> tuple[RoutingGraph, tuple[GraphProblem, ...]]:
    """`graph` without the pieces Envoy would refuse, and a problem for each; see the module
    docstring. Pure: the same graph gives the same result, and an acceptable graph comes back
    as the very same object. `memo`: the checks of the compile before, reused for the very
    same clusters and virtual hosts (`LimitsMemo`)."""
    memo = LimitsMemo() if memo is None else memo
    # One call per compile: what the compile before did not use is forgotten.
    memo.clusters.age()
    memo.vhosts.age()
    problems: list[GraphProblem] = []
    clusters, clusters_changed = _check_clusters(graph, problems, memo)
    ctx = _Context(
        clusters=frozenset(c.name for c in clusters),
        secrets=frozenset(s.name for s in graph.secrets),
    )
    names = frozenset((*_names(ctx.clusters), *_names(ctx.secrets)))
    # Made anew: a symmetric difference keeps the table of its 10,000-name operand, and
    # `isdisjoint` walks that table whole for every host.
    hosts = _Hosts(ctx, memo, frozenset(list(memo.names ^ names)))
    memo.names = names
    listeners = tuple(_check_listener(lst, ctx, hosts, problems) for lst in graph.listeners)
    listeners_changed = any(
        new is not old for new, old in zip(listeners, graph.listeners, strict=True)
    )
    if not clusters_changed and not listeners_changed:
        return graph, ()
    out = dataclasses.replace(graph, listeners=listeners, clusters=clusters)
    return out, tuple(dict.fromkeys(problems))


# --- the pass, patched from the compile before ---------------------------------------------------


class ListenerLimits:
    """One listener's checks of the compile before, by virtual host name: each host's check,
    what it came to (None: left out), its problems, who asked which name, the hostnames."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.checks: dict[str, tuple[VirtualHost, VirtualHostCheck]] = {}
        self.out: dict[str, VirtualHost | None] = {}
        self.problems: dict[str, tuple[GraphProblem, ...]] = {}
        self.altered: set[str] = set()
        self.asked_by: dict[str, set[str]] = {}
        self.domains: dict[str, int] = {}
        self.last: tuple[Listener, Listener] | None = None
        # The last compile walked this listener whole (two hosts of one hostname).
        self.walked = False
        self.dups = 0  # hostnames of more than one host that has no problem of its own
        # The names the last compile checked again; None: all (what `_hold_owned_hosts` reads).
        self.rechecked: set[str] | None = None
        self.verdicts: dict[str, HostVerdicts] = {}  # each host's route checks


class PatchedLimits:
    """`patch_envoy_limits`' state: the clusters' checks by name and each listener's."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.clusters: dict[str, tuple[Cluster, ClusterCheck]] = {}
        self.cluster_out: dict[str, Cluster] = {}
        self.cluster_problems: dict[str, tuple[GraphProblem, ...]] = {}
        self.cluster_altered: set[str] = set()
        self.listeners: dict[str, ListenerLimits] = {}
        # The usable names: clusters the net kept, TLS Secrets (of `secrets`).
        self.usable: set[str] = set()
        self.secrets: tuple[TLSSecret, ...] | None = None
        self.secret_names: frozenset[str] = frozenset()
        self.hosts = LimitsMemo()

    def rechecked(self) -> dict[str, set[str] | None]:
        """Per listener, the virtual host names the last compile checked again (None: all)."""
        return {name: state.rechecked for name, state in self.listeners.items()}


def patch_envoy_limits(
    graph: RoutingGraph,
    kept: PatchedLimits,
    hosts_changed: set[tuple[str, str]] | None,
    clusters_changed: set[str] | None,
    cluster_names: Sequence[str],
    by_name: Mapping[str, Cluster],
    hosts: Mapping[str, Mapping[str, VirtualHost]] | None = None,
    ids: IdsMemo | None = None,
) -> tuple[RoutingGraph, tuple[GraphProblem, ...]]:
    """`enforce_envoy_limits(graph)`, redoing only the clusters `clusters_changed` names, the
    virtual hosts `hosts_changed` names and those whose check asked about a cluster or Secret
    name usable then or now, not both (None: everything, the state is made anew). A host of
    `PER_ROUTE_MIN_ROUTES` routes or more checked again keeps its routes' verdicts by the
    route's identity (`HostVerdicts`): only the routes added, or that asked about such a name,
    are checked; a smaller host is checked whole.
    `cluster_names`: the names of `graph.clusters`, in order (they are unique), `by_name`
    the clusters by name; `hosts`: each listener's virtual hosts by name, when the caller has
    them; `ids`: the route tuples' `ids_of`, shared with the compile's other stages."""
    ids = IdsMemo() if ids is None else ids
    if hosts_changed is None or clusters_changed is None:
        kept.reset()
        clusters_changed = set(cluster_names)
    problems: list[GraphProblem] = []
    clusters = _patch_clusters(graph, kept, clusters_changed, (cluster_names, by_name), problems)
    asked = _usable_changed(graph, kept, clusters_changed)
    ctx = _Context(clusters=kept.usable, secrets=kept.secret_names)
    kept.hosts.vhosts.age()
    checker = _Hosts(ctx, kept.hosts, asked, ids)
    listeners = []
    for lst in graph.listeners:
        state = kept.listeners.setdefault(lst.name, ListenerLimits())
        dirty = None if hosts_changed is None else {n for ln, n in hosts_changed if ln == lst.name}
        named = None if hosts is None else hosts.get(lst.name)
        listeners.append(
            _patch_listener(lst, named, state, dirty, asked, ctx, (checker, ids), problems)
        )
    for name in kept.listeners.keys() - {lst.name for lst in graph.listeners}:
        del kept.listeners[name]
    same = all(new is old for new, old in zip(listeners, graph.listeners, strict=True))
    if clusters is graph.clusters and same:
        return graph, ()
    out = dataclasses.replace(graph, listeners=tuple(listeners), clusters=clusters)
    return out, tuple(dict.fromkeys(problems))


_NAME = attrgetter("name")


def _usable_changed(
    graph: RoutingGraph, kept: PatchedLimits, clusters_changed: set[str]
) -> frozenset[str]:
    """The cluster and Secret names usable then or now, not both; `kept.usable` and
    `kept.secret_names` patched to now (a cluster is usable unless the net left it out)."""
    flipped: set[str] = set()
    for name in clusters_changed:
        if name in kept.cluster_out:
            if name not in kept.usable:
                kept.usable.add(name)
                flipped.add(name)
        elif name in kept.usable:
            kept.usable.discard(name)
            flipped.add(name)
    if graph.secrets is not kept.secrets:
        names = frozenset(map(_NAME, graph.secrets))
        flipped.update(names ^ kept.secret_names)
        kept.secrets, kept.secret_names = graph.secrets, names
    return frozenset(flipped)


def _patch_clusters(
    graph: RoutingGraph,
    kept: PatchedLimits,
    changed: set[str],
    named: tuple[Sequence[str], Mapping[str, Cluster]],
    problems: list[GraphProblem],
) -> tuple[Cluster, ...]:
    names, by_name = named
    for name in changed:
        c = by_name.get(name)
        kept.cluster_problems.pop(name, None)
        kept.cluster_altered.discard(name)
        if c is None:
            kept.clusters.pop(name, None)
            kept.cluster_out.pop(name, None)
            continue
        hit = kept.clusters.get(name)
        check = hit[1] if hit is not None and hit[0] is c else check_cluster(c)
        kept.clusters[name] = (c, check)
        if check.problem is not None:
            reason = (
                f"{check.problem}; the cluster is left out and the routes that use it answer 500"
            )
            kept.cluster_problems[name] = (GraphProblem(_service_ref(c), "", reason),)
            kept.cluster_out.pop(name, None)
            kept.cluster_altered.add(name)
            continue
        if check.problems:
            kept.cluster_problems[name] = check.problems
        if check.cluster is not c:
            kept.cluster_altered.add(name)
        kept.cluster_out[name] = check.cluster
    found = map(kept.cluster_problems.__getitem__, sorted(kept.cluster_problems))
    problems.extend(chain.from_iterable(found))
    if not kept.cluster_altered:
        return graph.clusters
    return tuple(filter(None, map(kept.cluster_out.get, names)))


def _patch_listener(
    lst: Listener,
    named: Mapping[str, VirtualHost] | None,
    state: ListenerLimits,
    dirty: set[str] | None,
    asked: frozenset[str],
    ctx: _Context,
    checker: tuple[_Hosts, IdsMemo],
    problems: list[GraphProblem],
) -> Listener:
    hosts, ids = checker
    by_name = named
    if dirty is None or state.walked:
        state.reset()
        by_name = {vh.name: vh for vh in lst.virtual_hosts}
        dirty = set(by_name)
    else:
        state.rechecked = dirty  # with the names asked, below: the same set
    for name in asked:
        dirty.update(state.asked_by.get(name, ()))
    if dirty:
        if by_name is None:
            by_name = dict(zip(map(_NAME, lst.virtual_hosts), lst.virtual_hosts, strict=True))
        for name in dirty:
            _patch_host(state, name, by_name.get(name), (hosts, ids), lst.name)
    if state.dups:
        # Two hosts of one hostname (in other cases): the first in order wins, so walk them all.
        state.walked, state.rechecked = True, None
        return _check_listener(lst, ctx, hosts, problems)
    for name in sorted(state.problems):
        problems.extend(state.problems[name])
    proxy_problems: list[GraphProblem] = []
    proxies, proxies_changed = _check_proxies(lst, ctx, proxy_problems)
    problems.extend(proxy_problems)
    if not state.altered and not proxies_changed:
        return lst
    if not dirty and not proxies_changed and state.last is not None and state.last[0] is lst:
        return state.last[1]
    vhosts = tuple(filter(None, map(state.out.__getitem__, map(_NAME, lst.virtual_hosts))))
    out = dataclasses.replace(lst, virtual_hosts=vhosts, tcp_proxies=proxies)
    state.last = (lst, out)
    return out


def _patch_host(
    state: ListenerLimits,
    name: str,
    vh: VirtualHost | None,
    hosts: tuple[_Hosts, IdsMemo],
    listener: str,
) -> None:
    old = state.checks.pop(name, None)
    before: frozenset[str] = frozenset()
    if old is not None:
        before = old[1].asked
        if old[1].problem is None:
            state.dups -= _count(state.domains, old[0].hostname.lower(), -1)
    state.problems.pop(name, None)
    state.altered.discard(name)
    state.out.pop(name, None)
    check = None
    if vh is None:
        state.verdicts.pop(name, None)
    elif len(vh.routes) < PER_ROUTE_MIN_ROUTES:
        # Checked whole: its route verdicts (`HostVerdicts`, about 2.7 KB for a host of five
        # routes) would save next to nothing.
        state.verdicts.pop(name, None)
        check = hosts[0].whole(vh)
        state.checks[name] = (vh, check)
    else:
        verdicts = state.verdicts.get(name)
        if verdicts is None:
            verdicts = state.verdicts[name] = HostVerdicts()
        check = hosts[0].patch(vh, verdicts)
        state.checks[name] = (vh, check)
    now = frozenset() if check is None else check.asked
    # Only the names asked then or now, not both: a big host asks thousands (the very same
    # set while none entered or left).
    if before is not now:
        for asked in before - now:
            users = state.asked_by[asked]
            users.discard(name)
            if not users:
                del state.asked_by[asked]
        for asked in now - before:
            state.asked_by.setdefault(asked, set()).add(name)
    if vh is None or check is None:
        return
    if check.problem is not None:
        reason = f"{check.problem}; the virtual host is left out of listener {listener}"
        state.problems[name] = (GraphProblem(vh.owner, f"virtual host {vh.hostname!r}", reason),)
        state.out[name] = None
        state.altered.add(name)
        return
    state.dups += _count(state.domains, vh.hostname.lower(), 1)
    if check.problems:
        state.problems[name] = check.problems
    if check.vhost is not vh:
        state.altered.add(name)
    state.out[name] = check.vhost


def _count(counts: dict[str, int], key: str, step: int) -> int:
    """Counts `key` up or down; 1 when it went from one to two or from two to one."""
    left = counts.get(key, 0) + step
    if left:
        counts[key] = left
    else:
        del counts[key]
    return 1 if (left, step) in ((2, 1), (1, -1)) else 0

"""Reading HTTPRoute and GRPCRoute rules: the field reader, the value rules the CRDs enforce (their
OpenAPI patterns and CEL rules, apis/v1/httproute_types.go and shared_types.go), and the filters.

A route read from a file never went through the API server, so every rule the CRD would have
enforced is checked here; a route that breaks one is what the API server would have refused, and
is rejected whole (`Accepted=False`, reason `UnsupportedValue`, the message naming the field).
Values the API allows but turnout (or Envoy) cannot serve, such as a regex RE2 refuses, are
reported the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.fields import FieldReader, describe
from turnout.dialects.gatewayapi.conditions import (
    ACCEPTED,
    INVALID_KIND,
    RESOLVED_REFS,
    UNSUPPORTED_VALUE,
    RouteProblem,
)
from turnout.graph.model import (
    ANY_ORIGIN,
    CorsPolicy,
    ExactOrigin,
    HeaderMatch,
    HeaderPolicy,
    HeaderValue,
    OriginMatch,
    QueryMatch,
    RegexOrigin,
    StringMatchKind,
)
from turnout.graph.regex import escape, regex_error

# Filter types (HTTPRouteFilterType, GRPCRouteFilterType).
REQUEST_HEADER_MODIFIER = "RequestHeaderModifier"
RESPONSE_HEADER_MODIFIER = "ResponseHeaderModifier"
REQUEST_MIRROR = "RequestMirror"
REQUEST_REDIRECT = "RequestRedirect"
URL_REWRITE = "URLRewrite"
CORS = "CORS"
EXTENSION_REF = "ExtensionRef"
EXTERNAL_AUTH = "ExternalAuth"

# Each filter type's own field (`type: RequestRedirect` goes with `requestRedirect: {...}`).
FILTER_FIELDS = {
    REQUEST_HEADER_MODIFIER: "requestHeaderModifier",
    RESPONSE_HEADER_MODIFIER: "responseHeaderModifier",
    REQUEST_MIRROR: "requestMirror",
    REQUEST_REDIRECT: "requestRedirect",
    URL_REWRITE: "urlRewrite",
    CORS: "cors",
    EXTENSION_REF: "extensionRef",
    EXTERNAL_AUTH: "externalAuth",
}

# HTTPHeaderName: RFC 7230 token characters.
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
# HTTPPathMatch / HTTPPathModifier values (CEL on HTTPPathMatch).
_PATH_CHARS = re.compile(r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|%[0-9a-fA-F]{2})+$")
# PreciseHostname.
_PRECISE_HOSTNAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Duration (GEP-2257): 1 to 4 of <1..5 digits><h|m|s|ms>.
_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
_DURATION_PART = re.compile(r"([0-9]{1,5})(ms|h|m|s)")
_DURATION_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}

# The API's limits on list sizes and string lengths.
MAX_HEADER_VALUE = 4096
MAX_QUERY_VALUE = 1024
MAX_PATH = 1024
MAX_HEADER_NAME = 256
MAX_HOSTNAME = 253
MAX_MATCH_ITEMS = 16


class SpecReader(FieldReader):
    """A lenient reader whose problems are route problems: structural ones reject the route
    (`Accepted=False`, `UnsupportedValue`), reference ones only mark it (`ResolvedRefs=False`)."""

    refuses_whole_object = True

    def __init__(self) -> None:
        self.problems: list[RouteProblem] = []

    @property
    def rejected(self) -> bool:
        return self.rejected_since(0)

    def rejected_since(self, before: int) -> bool:
        """Whether a problem reported after the first `before` ones rejects the route."""
        return any(p.condition == ACCEPTED for p in self.problems[before:])

    def field_error(self, where: str, message: str) -> None:
        self.problems.append(RouteProblem(ACCEPTED, UNSUPPORTED_VALUE, f"{where}: {message}"))

    def refused_field(self, where: str) -> None:
        self.field_error(where, "is not supported by turnout")

    def ignored_field(self, where: str) -> None:  # pragma: no cover - no ignored fields
        self.field_error(where, "is ignored by turnout")

    def unresolved(self, reason: str, message: str) -> None:
        self.problems.append(RouteProblem(RESOLVED_REFS, reason, message))

    def add(self, problem: RouteProblem) -> None:
        self.problems.append(problem)

    def enum(
        self, m: Mapping[str, Any], key: str, path: str, allowed: Sequence[str], default: str
    ) -> str | None:
        """The value of an enum field (its default when unset); None when it is not one of
        `allowed` (reported)."""
        value = m.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.field_error(f"{path}.{key}", f"must be a string, got {describe(value)}")
            return None
        if value not in allowed:
            choices = ", ".join(allowed)
            self.field_error(f"{path}.{key}", f'unsupported value "{value}" (one of: {choices})')
            return None
        return value

    def list_items(
        self, m: Mapping[str, Any], key: str, path: str, maximum: int
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """(path, entry) for each object of the list at `key`, at most `maximum` entries."""
        out: list[tuple[str, Mapping[str, Any]]] = []
        for where, item in self.items(m, key, path, maximum):
            entry = self.mapping(item, where)
            if entry is not None:
                out.append((where, entry))
        return out


# --- values --------------------------------------------------------------------------------------


def parse_duration(value: str) -> float | None:
    """A Gateway API Duration in seconds (`1h30m`, `500ms`, `0s`), or None when it is malformed."""
    if not _DURATION.fullmatch(value):
        return None
    return sum(int(n) * _DURATION_UNIT_S[unit] for n, unit in _DURATION_PART.findall(value))


def path_value_problem(value: str) -> str | None:
    """Why `value` cannot be an Exact/PathPrefix path or a path modifier (the CRD's CEL rules)."""
    if len(value) > MAX_PATH:
        return f"must be at most {MAX_PATH} characters"
    if not value.startswith("/"):
        return "must be an absolute path (start with '/')"
    for bad in ("//", "/./", "/../", "%2f", "%2F", "#"):
        if bad in value:
            return f"must not contain '{bad}'"
    if value.endswith("/..") or value.endswith("/."):
        return "must not end with '/..' or '/.'"
    if not _PATH_CHARS.fullmatch(value):
        return "must only contain valid characters (RFC 3986 path characters or %XX escapes)"
    return None


def precise_hostname_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > MAX_HOSTNAME:
        return f"must be at most {MAX_HOSTNAME} characters"
    if not _PRECISE_HOSTNAME.fullmatch(value):
        return "must be a precise hostname (lower-case RFC 1123 labels, no wildcard)"
    return None


def check_rule_names(r: SpecReader, rules: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """HTTPRoute and GRPCRoute rule names (`spec.rules[].name`, GEP-995): a SectionName (lower-case
    RFC 1123 labels joined by dots, 1 to 253 characters), unique within the route, as the CRD and
    its CEL rule require. A name only labels its rule (for policies and status), so it changes
    no routing; a bad one rejects the route as the API server would have refused it."""
    first: dict[str, str] = {}
    for where, rule in rules:
        name = r.string(rule, "name", where)
        if "name" not in rule or not isinstance(rule.get("name"), str):
            continue
        if not name:
            r.field_error(f"{where}.name", "must not be empty")
        elif len(name) > MAX_HOSTNAME:
            r.field_error(f"{where}.name", f"must be at most {MAX_HOSTNAME} characters")
        elif not _PRECISE_HOSTNAME.fullmatch(name):
            r.field_error(
                f"{where}.name",
                f"{name!r} must be lower-case RFC 1123 labels (a-z, 0-9, '-') joined by '.'",
            )
        elif name in first:
            r.field_error(f"{where}.name", f"{name!r} is already the name of {first[name]}")
        else:
            first[name] = where


def header_name_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > MAX_HEADER_NAME:
        return f"must be at most {MAX_HEADER_NAME} characters"
    if not _HEADER_NAME.fullmatch(value):
        return "must be an HTTP header name (RFC 7230 token characters)"
    return None


def header_value_problem(value: str, maximum: int = MAX_HEADER_VALUE) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > maximum:
        return f"must be at most {maximum} characters"
    if any(c in value for c in "\r\n\0"):
        return "must not contain CR, LF or NUL"
    return None


def envoy_literal(value: str) -> str:
    """`value` as a literal in an Envoy header value, where `%` starts a substitution."""
    return value.replace("%", "%%")


# --- header and query matches --------------------------------------------------------------------


def _read_name_value_matches(
    r: SpecReader,
    m: Mapping[str, Any],
    field_name: str,
    path: str,
    max_value: int,
    key: Callable[[str], str],
) -> list[tuple[str, StringMatchKind, str]]:
    """The (name, kind, value) of each valid entry of the list of {type, name, value} matches
    `field_name`, the first entry of a `key`ed name only; invalid entries are field errors."""
    out: list[tuple[str, StringMatchKind, str]] = []
    seen: set[str] = set()
    for where, item in r.list_items(m, field_name, path, MAX_MATCH_ITEMS):
        r.check_fields(item, where, frozenset({"type", "name", "value"}))
        kind = r.enum(item, "type", where, ("Exact", "RegularExpression"), "Exact")
        name = r.string(item, "name", where, required=True)
        value = r.string(item, "value", where, required=True)
        if name and (problem := header_name_problem(name)) is not None:
            r.field_error(f"{where}.name", problem)
            continue
        if not name or kind is None:
            continue
        if value and (problem := header_value_problem(value, max_value)) is not None:
            r.field_error(f"{where}.value", problem)
            continue
        if kind == "RegularExpression" and (problem := regex_error(value)) is not None:
            r.field_error(f"{where}.value", problem)
            continue
        keyed = key(name)
        if keyed in seen:
            continue
        seen.add(keyed)
        string_kind = StringMatchKind.EXACT if kind == "Exact" else StringMatchKind.REGEX
        out.append((keyed, string_kind, value))
    return out


def read_header_matches(r: SpecReader, m: Mapping[str, Any], path: str) -> tuple[HeaderMatch, ...]:
    """`headers` of an HTTPRouteMatch or GRPCRouteMatch. Names are case-insensitive and only the
    first of several entries with one name counts (HTTPHeaderMatch doc)."""
    found = _read_name_value_matches(r, m, "headers", path, MAX_HEADER_VALUE, str.lower)
    return tuple(HeaderMatch(name, kind, value) for name, kind, value in found)


def read_query_matches(r: SpecReader, m: Mapping[str, Any], path: str) -> tuple[QueryMatch, ...]:
    """`queryParams` of an HTTPRouteMatch. Names are case-sensitive; the first entry of a name
    counts."""
    found = _read_name_value_matches(r, m, "queryParams", path, MAX_QUERY_VALUE, str)
    return tuple(QueryMatch(name, kind, value) for name, kind, value in found)


# --- filters -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderChanges:
    """An HTTPHeaderFilter: the graph's header policy, and `Host` set through it (Envoy changes
    the Host only by a host rewrite)."""

    policy: HeaderPolicy
    host: str | None = None


def read_header_filter(
    r: SpecReader, value: Any, path: str, *, request: bool
) -> HeaderChanges | None:
    """`set`/`add`/`remove` of an HTTPHeaderFilter. "Only one action for a given header name is
    permitted": a name used twice (in any of the three lists, case-insensitively) is refused."""
    m = r.mapping(value, path)
    if m is None:
        return None
    before = len(r.problems)
    r.check_fields(m, path, frozenset({"set", "add", "remove"}))
    seen: set[str] = set()
    host: str | None = None
    lists: dict[str, list[HeaderValue]] = {"set": [], "add": []}
    for key in ("set", "add"):
        for where, h in r.list_items(m, key, path, MAX_MATCH_ITEMS):
            r.check_fields(h, where, frozenset({"name", "value"}))
            name = r.string(h, "name", where, required=True)
            text = r.string(h, "value", where, required=True)
            if not name:
                continue
            if (problem := header_name_problem(name)) is not None:
                r.field_error(f"{where}.name", problem)
                continue
            if text and (problem := header_value_problem(text)) is not None:
                r.field_error(f"{where}.value", problem)
                continue
            if not _first_use(r, seen, name, f"{where}.name"):
                continue
            if name.lower() == "host":
                if not request or key != "set":
                    r.field_error(
                        f"{where}.name", f'turnout cannot {key} the "{name}" header (only set it)'
                    )
                    continue
                host = text
                continue
            lists[key].append(HeaderValue(name, envoy_literal(text)))
    remove: list[str] = []
    names = r.capped(r.sequence(m, "remove", path) or (), f"{path}.remove", MAX_MATCH_ITEMS)
    for i, name in enumerate(names):
        where = f"{path}.remove[{i}]"
        if not isinstance(name, str):
            r.field_error(where, f"must be a string, got {describe(name)}")
            continue
        if (problem := header_name_problem(name)) is not None:
            r.field_error(where, problem)
            continue
        if not _first_use(r, seen, name, where):
            continue
        if name.lower() == "host":
            r.field_error(where, f'turnout cannot remove the "{name}" header')
            continue
        remove.append(name)
    if len(r.problems) != before:
        return None
    return HeaderChanges(
        HeaderPolicy(set=tuple(lists["set"]), add=tuple(lists["add"]), remove=tuple(remove)),
        host,
    )


def _first_use(r: SpecReader, seen: set[str], name: str, where: str) -> bool:
    lowered = name.lower()
    if lowered in seen:
        r.field_error(where, f'header "{name}" is changed more than once in this filter')
        return False
    seen.add(lowered)
    return True


@dataclass(frozen=True, slots=True)
class PathModifier:
    """HTTPPathModifier: `ReplaceFullPath` or `ReplacePrefixMatch` with its value."""

    full: bool
    value: str


def read_path_modifier(r: SpecReader, value: Any, path: str) -> PathModifier | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, frozenset({"type", "replaceFullPath", "replacePrefixMatch"}))
    kind = r.enum(m, "type", path, ("ReplaceFullPath", "ReplacePrefixMatch"), "")
    if not kind:
        if kind == "":
            r.field_error(f"{path}.type", "required field is missing")
        return None
    full = kind == "ReplaceFullPath"
    key = "replaceFullPath" if full else "replacePrefixMatch"
    other = "replacePrefixMatch" if full else "replaceFullPath"
    if m.get(other) is not None:
        r.field_error(f"{path}.{other}", f"must not be set when type is {kind}")
        return None
    if m.get(key) is None:
        r.field_error(f"{path}.{key}", f"must be set when type is {kind}")
        return None
    before = len(r.problems)
    text = r.string(m, key, path)
    if len(r.problems) != before:
        return None
    # An empty ReplacePrefixMatch strips the prefix (the spec's table); a full path cannot be empty.
    problem = path_value_problem(text) if text or full else None
    if problem is not None:
        r.field_error(f"{path}.{key}", problem)
        return None
    return PathModifier(full, text)


@dataclass(frozen=True, slots=True)
class RedirectSpec:
    """HTTPRequestRedirectFilter as written; the Location rules are applied per listener."""

    scheme: str | None = None
    hostname: str | None = None
    port: int | None = None
    path: PathModifier | None = None
    status: int = 302


REDIRECT_SCHEMES = ("http", "https")
REDIRECT_CODES = (301, 302, 303, 307, 308)


def read_redirect(r: SpecReader, value: Any, path: str) -> RedirectSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    before = len(r.problems)
    r.check_fields(m, path, frozenset({"scheme", "hostname", "path", "port", "statusCode"}))
    scheme = r.enum(m, "scheme", path, REDIRECT_SCHEMES, "")
    hostname = r.string(m, "hostname", path)
    if hostname and (problem := precise_hostname_problem(hostname)) is not None:
        r.field_error(f"{path}.hostname", problem)
    port = r.optional_integer(m, "port", path, minimum=1, maximum=65535)
    status = r.optional_integer(m, "statusCode", path)
    if status is not None and status not in REDIRECT_CODES:
        codes = ", ".join(str(c) for c in REDIRECT_CODES)
        r.field_error(f"{path}.statusCode", f"unsupported value {status} (one of: {codes})")
    modifier = read_path_modifier(r, m["path"], f"{path}.path") if "path" in m else None
    if len(r.problems) != before:
        return None
    return RedirectSpec(
        scheme=scheme or None,
        hostname=hostname or None,
        port=port,
        path=modifier,
        status=status if status is not None else 302,
    )


@dataclass(frozen=True, slots=True)
class RewriteSpec:
    hostname: str | None = None
    path: PathModifier | None = None


def read_rewrite(r: SpecReader, value: Any, path: str) -> RewriteSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    before = len(r.problems)
    r.check_fields(m, path, frozenset({"hostname", "path"}))
    hostname = r.string(m, "hostname", path)
    if hostname and (problem := precise_hostname_problem(hostname)) is not None:
        r.field_error(f"{path}.hostname", problem)
    modifier = read_path_modifier(r, m["path"], f"{path}.path") if "path" in m else None
    if len(r.problems) != before:
        return None
    return RewriteSpec(hostname=hostname or None, path=modifier)


@dataclass(frozen=True, slots=True)
class MirrorSpec:
    """HTTPRequestMirrorFilter: the backendRef as written, and the share mirrored in percent."""

    ref: Mapping[str, Any]
    field: str  # the backendRef's field path
    percent: float


def read_mirror(r: SpecReader, value: Any, path: str) -> MirrorSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    before = len(r.problems)
    r.check_fields(m, path, frozenset({"backendRef", "percent", "fraction"}))
    ref = m.get("backendRef")
    if ref is None:
        r.field_error(f"{path}.backendRef", "required field is missing")
    elif not isinstance(ref, Mapping):
        r.field_error(f"{path}.backendRef", f"must be an object, got {describe(ref)}")
    percent = 100.0
    if m.get("percent") is not None and m.get("fraction") is not None:
        r.field_error(path, "only one of percent or fraction may be specified")
    elif m.get("percent") is not None:
        percent = float(r.integer(m, "percent", path, minimum=0, maximum=100))
    elif m.get("fraction") is not None:
        fraction = r.mapping(m["fraction"], f"{path}.fraction")
        if fraction is not None:
            where = f"{path}.fraction"
            r.check_fields(fraction, where, frozenset({"numerator", "denominator"}))
            numerator = r.integer(fraction, "numerator", where, required=True, minimum=0)
            denominator = r.optional_integer(fraction, "denominator", where, minimum=1)
            denominator = 100 if denominator is None else denominator
            if numerator > denominator:
                r.field_error(where, "numerator must be less than or equal to denominator")
            else:
                percent = numerator * 100.0 / denominator
    if len(r.problems) != before or not isinstance(ref, Mapping):
        return None
    return MirrorSpec(ref, f"{path}.backendRef", percent)


# CORSOrigin: `<scheme>://<host>(:<port>)`, the host possibly starting with a `*` wildcard.
_CORS_ORIGIN = re.compile(
    r"^(?P<scheme>https?)://(?P<host>(\*\.)?[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\*)"
    r"(?P<port>:[0-9]{1,5})?$"
)
_CORS_DEFAULT_MAX_AGE = 5
MAX_CORS_ORIGINS = 64
MAX_CORS_METHODS = 9
MAX_CORS_HEADERS = 64
CORS_METHODS = ("*", "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


def cors_origin(origin: str) -> OriginMatch | None:
    """A CORSOrigin as a `CorsPolicy` origin (`*`, an exact origin, or a regex for a wildcard
    host: `*` is a greedy match to the left, dots included); None when it is not an origin."""
    if origin == "*":
        return ANY_ORIGIN
    m = _CORS_ORIGIN.fullmatch(origin)
    if m is None:
        return None
    if "*" not in m.group("host"):
        return ExactOrigin(origin.lower())
    scheme, host, port = m.group("scheme"), m.group("host"), m.group("port") or ""
    # Origins are compared without case, as browsers send scheme and host in lower case.
    return RegexOrigin(f"(?i){escape(scheme)}://.+{escape(host[1:] + port)}")


def read_cors(r: SpecReader, value: Any, path: str) -> CorsPolicy | None:
    """HTTPCORSFilter as Envoy's CORS policy for the route.

    Envoy answers preflights itself and adds the headers to actual responses, echoing the
    request's Origin (never `*`). With `allowCredentials` the spec forbids `*` in the response
    headers: `allowMethods: ["*"]` is then sent as the list of every method (which holds the
    requested one); `allowHeaders: ["*"]` cannot be expanded and is sent as written (browsers then
    refuse a credentialed preflight that asks for headers; list them instead)."""
    m = r.mapping(value, path)
    if m is None:
        return None
    before = len(r.problems)
    r.check_fields(
        m,
        path,
        frozenset(
            {
                "allowOrigins",
                "allowCredentials",
                "allowMethods",
                "allowHeaders",
                "exposeHeaders",
                "maxAge",
            }
        ),
    )
    origins = _cors_list(r, m, "allowOrigins", path, MAX_CORS_ORIGINS)
    methods = _cors_list(r, m, "allowMethods", path, MAX_CORS_METHODS)
    allow_headers = _cors_list(r, m, "allowHeaders", path, MAX_CORS_HEADERS)
    expose_headers = _cors_list(r, m, "exposeHeaders", path, MAX_CORS_HEADERS)
    credentials = r.boolean(m, "allowCredentials", path)
    max_age = r.optional_integer(m, "maxAge", path, minimum=1, maximum=2**31 - 1)
    converted: list[OriginMatch] = []
    for i, origin in enumerate(origins):
        out = cors_origin(origin)
        if out is None:
            r.field_error(
                f"{path}.allowOrigins[{i}]",
                f'"{origin}" is not an origin (<http|https>://<host>[:<port>], or "*")',
            )
        else:
            converted.append(out)
    for i, method in enumerate(methods):
        if method not in CORS_METHODS:
            r.field_error(f"{path}.allowMethods[{i}]", f'unsupported value "{method}"')
    for key, names in (("allowHeaders", allow_headers), ("exposeHeaders", expose_headers)):
        for i, name in enumerate(names):
            if name != "*" and (problem := header_name_problem(name)) is not None:
                r.field_error(f"{path}.{key}[{i}]", problem)
    for key, values in (("allowOrigins", origins), ("allowMethods", methods)):
        if "*" in values and len(values) > 1:
            r.field_error(f"{path}.{key}", f"{key} cannot contain '*' alongside other values")
    if len(r.problems) != before:
        return None
    if credentials and methods == ["*"]:
        methods = list(CORS_METHODS[1:])
    return CorsPolicy(
        allow_origins=tuple(converted),
        allow_methods=tuple(methods),
        allow_headers=tuple(allow_headers),
        expose_headers=tuple(expose_headers),
        max_age_s=max_age if max_age is not None else _CORS_DEFAULT_MAX_AGE,
        allow_credentials=credentials,
    )


def _cors_list(r: SpecReader, m: Mapping[str, Any], key: str, path: str, maximum: int) -> list[str]:
    values = r.capped(r.sequence(m, key, path) or (), f"{path}.{key}", maximum)
    out: dict[str, None] = {}
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value:
            r.field_error(
                f"{path}.{key}[{i}]", f"must be a non-empty string, got {describe(value)}"
            )
        else:
            out[value] = None
    return list(out)


@dataclass(frozen=True, slots=True)
class FilterSet:
    """The filters of a rule or of a backendRef, read and checked; one field per filter type."""

    request_headers: HeaderChanges | None = None
    response_headers: HeaderChanges | None = None
    redirect: RedirectSpec | None = None
    rewrite: RewriteSpec | None = None
    mirrors: tuple[MirrorSpec, ...] = ()
    cors: CorsPolicy | None = None
    # Set when an ExtensionRef names a filter turnout does not know: the spec says such a filter
    # must not be skipped, so requests it would have handled get an error response.
    unresolved_extension: bool = False
    types: tuple[str, ...] = field(default=())


# Filter types a rule may use once only (CEL on HTTPRouteRule.filters).
_ONCE = frozenset(
    {REQUEST_HEADER_MODIFIER, RESPONSE_HEADER_MODIFIER, REQUEST_REDIRECT, URL_REWRITE, CORS}
)


def read_filters(
    r: SpecReader,
    m: Mapping[str, Any],
    path: str,
    *,
    allowed: Sequence[str],
    unsupported: Mapping[str, str] | None = None,
) -> FilterSet:
    """The `filters` list at `m`. `allowed`: the filter types this place takes (others are
    refused as UnsupportedValue); `unsupported`: types the API allows here but turnout does not
    implement, with why."""
    unsupported = unsupported or {}
    found: dict[str, Any] = {}
    mirrors: list[MirrorSpec] = []
    types: list[str] = []
    unresolved_extension = False
    for where, f in r.list_items(m, "filters", path, MAX_MATCH_ITEMS):
        kind = r.string(f, "type", where, required=True)
        if not kind:
            continue
        if kind not in allowed:
            r.field_error(f"{where}.type", f'unsupported filter type "{kind}"')
            continue
        if kind in unsupported:
            r.field_error(f"{where}.type", unsupported[kind])
            continue
        own = FILTER_FIELDS[kind]
        r.check_fields(f, where, frozenset({"type", *FILTER_FIELDS.values()}))
        for other in FILTER_FIELDS.values():
            if other != own and f.get(other) is not None:
                r.field_error(f"{where}.{other}", f"must not be set when type is {kind}")
        if f.get(own) is None:
            r.field_error(f"{where}.{own}", f"must be set when type is {kind}")
            continue
        if kind in _ONCE and kind in found:
            r.field_error(f"{where}.type", f"the {kind} filter may be used only once per rule")
            continue
        types.append(kind)
        value = f[own]
        if kind == REQUEST_HEADER_MODIFIER:
            found[kind] = read_header_filter(r, value, f"{where}.{own}", request=True)
        elif kind == RESPONSE_HEADER_MODIFIER:
            found[kind] = read_header_filter(r, value, f"{where}.{own}", request=False)
        elif kind == REQUEST_REDIRECT:
            found[kind] = read_redirect(r, value, f"{where}.{own}")
        elif kind == URL_REWRITE:
            found[kind] = read_rewrite(r, value, f"{where}.{own}")
        elif kind == CORS:
            found[kind] = read_cors(r, value, f"{where}.{own}")
        elif kind == REQUEST_MIRROR:
            mirror = read_mirror(r, value, f"{where}.{own}")
            if mirror is not None:
                mirrors.append(mirror)
        elif kind == EXTENSION_REF:
            unresolved_extension |= _extension_ref(r, value, f"{where}.{own}")
    if REQUEST_REDIRECT in found and URL_REWRITE in found:
        r.field_error(
            f"{path}.filters", "may not contain both RequestRedirect and URLRewrite filters"
        )
    return FilterSet(
        request_headers=found.get(REQUEST_HEADER_MODIFIER),
        response_headers=found.get(RESPONSE_HEADER_MODIFIER),
        redirect=found.get(REQUEST_REDIRECT),
        rewrite=found.get(URL_REWRITE),
        mirrors=tuple(mirrors),
        cors=found.get(CORS),
        unresolved_extension=unresolved_extension,
        types=tuple(types),
    )


def _extension_ref(r: SpecReader, value: Any, path: str) -> bool:
    """Checks an ExtensionRef (a LocalObjectReference); turnout implements no extension filter,
    so a well-formed one is an unresolved reference (`ResolvedRefs=False`, `InvalidKind`)."""
    m = r.mapping(value, path)
    if m is None:
        return False
    r.check_fields(m, path, frozenset({"group", "kind", "name"}))
    group = r.string(m, "group", path)
    kind = r.string(m, "kind", path, required=True)
    name = r.string(m, "name", path, required=True)
    if not kind or not name:
        return False
    gk = f"{group}/{kind}" if group else kind
    r.unresolved(
        INVALID_KIND,
        f"{path}: filter {gk} {name} is not a kind turnout implements; "
        "requests this filter would handle are answered 500",
    )
    return True

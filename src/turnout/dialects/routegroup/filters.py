"""Skipper filters (eskip `Call`s) -> the graph's route policies, action and upstream settings.

Skipper runs a route's filters in order on the request and in reverse on the response; Envoy
applies a route's header changes as one set, so a later filter on the same header wins here as it
would in Skipper. Every filter of the list below is translated (or refused with the reason when a
form of it cannot be expressed); any other name is a problem naming it, never dropped.

| filter | graph | fidelity |
|---|---|---|
| `setRequestHeader`, `appendRequestHeader`, `dropRequestHeader` | request header policy | native |
| `setResponseHeader`, `appendResponseHeader`, `dropResponseHeader` | response headers | native |
| `setRequestHeader("Host", h)` | host rewrite | native |
| `modPath(/re/, "repl")` | regex path rewrite (`$1` -> `\\1`) | native |
| `setPath("/p")` | full path rewrite | native |
| `redirectTo(code[, "location"])` | redirect (the query merged by a Lua script) | native |
| `status(code)`, `inlineContent(body[, type])` | direct response | native (shunt) |
| `preserveHost("true"/"false")` | `preserve_host` | native |
| `tee("url")` | mirror to the URL's cluster | approximated |
| `compress()` | gzip compression | approximated |
| `corsOrigin(origins...)` | route CORS policy | approximated |
| `ratelimit(n, "period"[, status])` | local rate limit | approximated |
| `clusterRatelimit`, `clusterClientRatelimit` | global rate limit | approximated |
| `backendTimeout("d")` | route timeout | native |
| `fadeIn("d"[, exponent])` | cluster slow start | approximated |
| `consistentHashKey("${request...}")` | hash policy | native for header/cookie/query/source |
| `consistentHashBalanceFactor(f)` | cluster hash balance factor | native |
| `consecutiveBreaker(n[, "timeout"])` | outlier detection | approximated |
| `jwtValidation("issuer")` | JWT validation (Envoy's jwt_authn) | approximated |
| `responseCookie(name, value[, maxAge])` | `Set-Cookie` response header | approximated |
| `requestCookie(name, value)` | `Cookie` request header | native |

Approximations (the user-facing list is in docs/dialects/routegroup.md):

- header values: in request headers Skipper's `${request.header.X}`, `${request.method}`,
  `${request.host}` and `${request.clientIP}` become Envoy's `%REQ(X)%`, `%REQ(:METHOD)%`,
  `%REQ(:AUTHORITY)%` and `%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%`, marked
  `when_resolved` so that, as in Skipper, a header whose placeholder comes out empty is left
  as the request has it (the translator runs such headers in a Lua script). A templated set
  after another change of the same header drops that change when the placeholder is empty
  (Skipper would keep it). Other placeholders, and any in response headers or the Host, are
  refused; a `%` is escaped for Envoy's own substitutions;
- tee: Envoy mirrors to a cluster and appends `-shadow` to the mirrored Host; the path rewriting
  form `tee(url, /re/, "repl")` is refused;
- compress: gzip only (Skipper also deflate and brotli), Envoy's minimum of 30 bytes and
  Skipper's default MIME types; compress with a level or MIME types is refused (Envoy fixes
  both in the listener, for every route);
- corsOrigin: `corsOrigin()` sets `Access-Control-Allow-Origin: *` on every response, as Skipper
  does; with origins, Envoy's CORS filter echoes a listed Origin as Skipper does, but also
  answers preflight requests (Skipper passes them on), and it is refused on routes that answer
  themselves (the CORS filter skips them);
- ratelimit: a token bucket of `n` tokens refilled every period, shared by the route in this
  Envoy (Skipper: a sliding window per Skipper instance); the period must be whole seconds;
- clusterRatelimit, clusterClientRatelimit: with `--rate-limit-service`, the route asks the
  operator's rate limit service about the descriptor `generic_key=<group>` (per client: followed
  by `remote_address`, or by one entry per header of the comma-separated list, keyed by the
  header's lower-case name); the service's own configuration holds the limit (`n` per `period`
  is checked, not sent), and a limited request gets 429. Without the flag they are refused; on a
  shunt route (Envoy asks the service only for forwarded requests) and with a status code other
  than 429 (Envoy's ratelimit filter answers one status for every route) too;
- fadeIn: Envoy's slow start (round robin and least request clusters) ramps weights, starting at
  1 %, with aggression 1/exponent, per cluster (Skipper per route);
- consecutiveBreaker: Envoy ejects the failing endpoint for the timeout instead of answering 503
  for it; half-open requests and the idle TTL have no counterpart and are refused when given;
- responseCookie: `name=value; Path=/; HttpOnly` (and `Max-Age`) without Skipper's Domain (the
  request host minus its first label, which Envoy cannot compute) and without "change-only";
- jwtValidation: Skipper fetches `<issuer>/.well-known/openid-configuration` when it creates the
  filter and validates tokens with the keys at its `jwks_uri`. turnout's control plane does the
  discovery outside the compile (turnout.sources.oidc) and hands the answers in as
  `CompileOptions.issuer_discovery`; a route whose issuer has no answer yet, or whose discovery
  failed, answers 503 and never reaches its backend (`unavailable`). Envoy checks the token's
  `iss` against the issuer (Skipper does not: golang-jwt v4 checks only exp/nbf/iat) and allows
  60 s of clock skew; `sub` must be a non-empty string (Skipper: any string).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import re2

from turnout.compile_inputs import IssuerDiscovery
from turnout.dialects.fields import LIST_CAPS, go_duration_seconds
from turnout.dialects.routegroup.eskip import (
    Arg,
    Call,
    EskipError,
    number_arg,
    parse_filters,
    string_arg,
)
from turnout.dialects.routegroup.predicates import CallProblem
from turnout.dialects.routegroup.spec import routegroups_of_class
from turnout.graph.model import (
    COMPRESSIBLE_TYPES,
    BackendPolicies,
    Compression,
    CorsPolicy,
    DirectResponse,
    ExactOrigin,
    GenericKeyEntry,
    GlobalRateLimit,
    HashPolicy,
    HashSource,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    JwtValidation,
    LocalRateLimit,
    Mirror,
    OutlierDetection,
    PathRewrite,
    RateLimitDescriptor,
    Redirect,
    RemoteAddressEntry,
    RequestHeaderEntry,
    RoutePolicies,
    SlowStart,
    Timeouts,
)
from turnout.graph.regex import regex_error
from turnout.store import Snapshot

__all__ = [
    "SUPPORTED_FILTERS",
    "FilterTranslation",
    "Unavailable",
    "jwt_issuers",
    "routegroup_issuers",
    "translate_filters",
]


@dataclass(frozen=True, slots=True)
class FilterTranslation:
    policies: RoutePolicies
    backend_policies: BackendPolicies | None  # always None: every filter here fits the route
    action: DirectResponse | Redirect | None  # the route answers itself
    upstream: Mapping[str, object]  # UpstreamSettings fields (slow_start, outlier_detection, ...)
    preserve_host: bool  # preserveHost("true") was the last word
    problems: tuple[CallProblem, ...]
    # Filters that are valid but cannot work yet (jwtValidation before its issuer's discovery
    # answered, or after it failed): the route must answer 503 instead of its action.
    unavailable: tuple[Unavailable, ...] = ()


@dataclass(frozen=True, slots=True)
class Unavailable:
    name: str  # the filter
    index: int  # its position in the calls
    reason: str  # a condition reason: IssuerDiscoveryPending, IssuerDiscoveryFailed
    message: str


SUPPORTED_FILTERS = (
    "setRequestHeader",
    "appendRequestHeader",
    "dropRequestHeader",
    "setResponseHeader",
    "appendResponseHeader",
    "dropResponseHeader",
    "modPath",
    "setPath",
    "redirectTo",
    "status",
    "inlineContent",
    "preserveHost",
    "tee",
    "compress",
    "corsOrigin",
    "ratelimit",
    "clusterRatelimit",
    "clusterClientRatelimit",
    "backendTimeout",
    "fadeIn",
    "consistentHashKey",
    "consistentHashBalanceFactor",
    "consecutiveBreaker",
    "responseCookie",
    "requestCookie",
    "jwtValidation",
)


# Where the supported filters are listed: a status names this rather than the list, which grows.
SUPPORTED_LIST = "docs/dialects/routegroup.md"

# Refused with a reason of their own rather than "not supported".
_REFUSED: dict[str, str] = {}

_REDIRECT_CODES = frozenset((301, 302, 303, 307, 308))
_INVALID = "invalid filter parameters"


@dataclass(frozen=True, slots=True)
class NotMirrorable:
    """Why a `tee` URL cannot be a mirror cluster."""

    reason: str


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_TEMPLATE = re.compile(r"\$\{[^}]*\}")


class _Refused(Exception):
    pass


@dataclass
class _Headers:
    set: dict[str, HeaderValue] = field(default_factory=dict)
    add: list[HeaderValue] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)

    def do_set(self, name: str, value: str, when_resolved: bool = False) -> None:
        key = name.lower()
        self.add = [h for h in self.add if h.name.lower() != key]
        self.remove = [r for r in self.remove if r != key]
        self.set[key] = HeaderValue(name, value, when_resolved)

    def do_add(self, name: str, value: str, when_resolved: bool = False) -> None:
        key = name.lower()
        self.remove = [r for r in self.remove if r != key]
        self.add.append(HeaderValue(name, value, when_resolved))

    def do_remove(self, name: str) -> None:
        key = name.lower()
        self.set.pop(key, None)
        self.add = [h for h in self.add if h.name.lower() != key]
        if key not in self.remove:
            self.remove.append(key)

    def policy(self) -> HeaderPolicy | None:
        if not (self.set or self.add or self.remove):
            return None
        return HeaderPolicy(tuple(self.set.values()), tuple(self.add), tuple(self.remove))


@dataclass
class _State:
    mirror_cluster: Callable[[str], str | NotMirrorable | None] | None
    shunt: bool | None
    discovery: Callable[[str], IssuerDiscovery | None] | None = None
    jwt: JwtValidation | None = None
    jwt_issuer: str | None = None
    unavailable: Unavailable | None = None
    request: _Headers = field(default_factory=_Headers)
    response: _Headers = field(default_factory=_Headers)
    host: HostRewrite | None = None
    path: PathRewrite | None = None
    mirrors: list[Mirror] = field(default_factory=list)
    redirect: Redirect | None = None
    status: int | None = None
    content: tuple[str, str | None] | None = None
    preserve_host: bool = False
    compression: Compression | None = None
    cors: CorsPolicy | None = None
    cors_index: int = -1
    index: int = -1  # the filter being translated
    rate_limit: LocalRateLimit | None = None
    rate_limit_service: bool = False  # --rate-limit-service is set
    global_descriptors: list[RateLimitDescriptor] = field(default_factory=list)
    timeout_s: float | None = None
    hash_policies: list[HashPolicy] = field(default_factory=list)
    upstream: dict[str, object] = field(default_factory=dict)


def translate_filters(
    calls: Sequence[Call],
    *,
    mirror_cluster: Callable[[str], str | NotMirrorable | None] | None = None,
    shunt: bool | None = None,
    discovery: Callable[[str], IssuerDiscovery | None] | None = None,
    rate_limit_service: bool = False,
) -> FilterTranslation:
    """The graph policies of a route's filter chain, with a problem for each filter that cannot
    be installed (the others are still translated, so every problem is reported at once).

    `mirror_cluster` gives the cluster a `tee` URL copies requests to (None or NotMirrorable: it
    cannot be one).
    `shunt`: whether the route's backend is `<shunt>`; False refuses `status()` without
    `inlineContent` (Envoy cannot replace an upstream response's status), None assumes a shunt.
    `discovery` gives what OpenID discovery answered for an issuer (None: no answer yet).
    `rate_limit_service`: whether a global rate limit service is configured (clusterRatelimit).
    """
    state = _State(mirror_cluster, shunt, discovery)
    state.rate_limit_service = rate_limit_service
    problems, unavailable, status_index = _run_handlers(state, calls)
    action = _action(state)
    if (
        isinstance(action, DirectResponse)
        and state.content is None
        and shunt is False
        and status_index >= 0
    ):
        problems.append(
            CallProblem(
                "status",
                status_index,
                "filter status: on a route that forwards to a backend it replaces the "
                "backend's status, which Envoy cannot do; it is supported with <shunt> or "
                "inlineContent",
            )
        )
        action = None
    if state.cors is not None and (isinstance(action, DirectResponse) or shunt is True):
        problems.append(
            CallProblem(
                "corsOrigin",
                state.cors_index,
                "filter corsOrigin: with a list of origins it is not supported on a route that "
                "answers itself (<shunt>, status or inlineContent): Envoy's CORS filter only "
                'acts on forwarded responses; corsOrigin() (always "*") is',
            )
        )
        state.cors = None
    response = state.response.policy()
    if isinstance(action, DirectResponse) and response is not None:
        # Envoy adds route response headers to forwarded responses only; a direct response
        # carries its own.
        action = replace(action, headers=(*action.headers, *response.set, *response.add))
        response = None
    policies = _route_policies(state, response, jwt_available=not unavailable)
    return FilterTranslation(
        policies=policies,
        backend_policies=None,
        action=action,
        upstream=dict(state.upstream),
        preserve_host=state.preserve_host,
        problems=tuple(problems),
        unavailable=tuple(unavailable),
    )


def _run_handlers(
    state: _State, calls: Sequence[Call]
) -> tuple[list[CallProblem], list[Unavailable], int]:
    """Runs each filter's handler on `state`: the problems of the filters that cannot be
    installed, the filters waiting for an outside answer, and the index of `status()` (-1)."""
    unavailable: list[Unavailable] = []
    problems: list[CallProblem] = []
    status_index = -1
    for index, call in enumerate(calls):
        handler = _HANDLERS.get(call.name)
        if handler is None:
            reason = _REFUSED.get(call.name)
            if reason is None:
                message = (
                    f"filter {call.name} is not supported: turnout translates only filters "
                    f"Envoy can express, listed in {SUPPORTED_LIST}"
                )
            else:
                message = f"filter {call.name} is not supported: {reason}"
            problems.append(CallProblem(call.name, index, message))
            continue
        state.unavailable = None
        state.index = index
        try:
            handler(state, call)
        except _Refused as err:
            problems.append(CallProblem(call.name, index, f"filter {call.name}: {err}"))
            continue
        if state.unavailable is not None:
            unavailable.append(replace(state.unavailable, index=index))
        if call.name == "status":
            status_index = index
    return problems, unavailable, status_index


def _route_policies(
    state: _State, response: HeaderPolicy | None, *, jwt_available: bool
) -> RoutePolicies:
    """The route policies the handlers gathered in `state`."""
    return RoutePolicies(
        timeouts=Timeouts(response_s=state.timeout_s) if state.timeout_s is not None else None,
        request_headers=state.request.policy(),
        response_headers=response,
        host_rewrite=state.host,
        path_rewrite=state.path,
        mirrors=tuple(state.mirrors),
        rate_limit=state.rate_limit,
        global_rate_limit=(
            GlobalRateLimit(tuple(state.global_descriptors)) if state.global_descriptors else None
        ),
        hash_policies=tuple(state.hash_policies),
        cors=state.cors,
        compression=state.compression,
        jwt=state.jwt if jwt_available else None,
    )


def _action(state: _State) -> DirectResponse | Redirect | None:
    if state.redirect is not None:
        return state.redirect
    if state.content is not None:
        body, content_type = state.content
        headers = (HeaderValue("content-type", content_type),) if content_type else ()
        return DirectResponse(state.status or 200, body, headers)
    if state.status is not None:
        return DirectResponse(state.status)
    return None


# --- arguments -----------------------------------------------------------------------------------


def _strings(call: Call, count: int) -> list[str]:
    values = [string_arg(a) for a in call.args]
    if len(values) != count or any(v is None for v in values):
        what = "1 string argument" if count == 1 else f"{count} string arguments"
        raise _Refused(f"{_INVALID}: expects {what}")
    return [v for v in values if v is not None]


def _integer(arg: Arg, what: str, low: int, high: int) -> int:
    n = number_arg(arg)
    if n is None or not n.is_integer() or not low <= n <= high:
        raise _Refused(f"{_INVALID}: {what} must be an integer from {low} to {high}")
    return int(n)


def _duration(arg: Arg, what: str, *, milliseconds: bool = False) -> float:
    """A duration argument: a Go duration string, or (`milliseconds`) a number of ms."""
    if milliseconds:
        n = number_arg(arg)
        if n is not None:
            if n < 0:
                raise _Refused(f"{_INVALID}: {what} must not be negative")
            return n / 1000
    text = string_arg(arg)
    seconds = go_duration_seconds(text) if text is not None else None
    if seconds is None:
        raise _Refused(f'{_INVALID}: {what} {arg!r} is not a duration like "10s" or "1m"')
    if seconds < 0:
        raise _Refused(f"{_INVALID}: {what} must not be negative")
    return seconds


def _literal_value(value: str) -> str:
    if _TEMPLATE.search(value):
        raise _Refused(
            f"the template {_TEMPLATE.search(value).group(0)!r} is not supported: "  # type: ignore[union-attr]
            "turnout sets header values literally"
        )
    if any(c in value for c in "\x00\r\n"):
        raise _Refused(f"{_INVALID}: the value holds a control character Envoy refuses")
    return value.replace("%", "%%")  # a literal % for Envoy's header formatter


# Skipper's template placeholders that Envoy's header formatter has, for request header values.
_PLACEHOLDERS = {
    "${request.method}": "%REQ(:METHOD)%",
    "${request.host}": "%REQ(:AUTHORITY)%",
    # Skipper's clientIP is the connection's peer (net.SplitHostPort(r.RemoteAddr)).
    "${request.clientIP}": "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%",
}
_HEADER_PLACEHOLDER = re.compile(r"\$\{request\.header\.([^}]*)\}")


def _templated_value(value: str) -> str:
    """A request header value with Skipper's `${...}` placeholders as Envoy's substitutions
    where Envoy has them (`${request.header.X}`, `${request.method}`, `${request.host}`,
    `${request.clientIP}`); any other placeholder is refused by name."""
    if any(c in value for c in "\x00\r\n"):
        raise _Refused(f"{_INVALID}: the value holds a control character Envoy refuses")
    out: list[str] = []
    pos = 0
    for m in _TEMPLATE.finditer(value):
        out.append(value[pos : m.start()].replace("%", "%%"))
        placeholder = m.group(0)
        header = _HEADER_PLACEHOLDER.fullmatch(placeholder)
        if header is not None and re.fullmatch(r"[A-Za-z0-9_-]+", header.group(1)):
            out.append(f"%REQ({header.group(1)})%")
        elif placeholder in _PLACEHOLDERS:
            out.append(_PLACEHOLDERS[placeholder])
        else:
            raise _Refused(
                f"the template {placeholder!r} is not supported: Envoy's header formatter has "
                "no equivalent (supported: ${request.header.<name>}, ${request.method}, "
                "${request.host}, ${request.clientIP})"
            )
        pos = m.end()
    out.append(value[pos:].replace("%", "%%"))
    return "".join(out)


def _header_name(name: str) -> str:
    if not _TOKEN.fullmatch(name):
        raise _Refused(f"{_INVALID}: {name!r} is not a header name")
    return name


# --- headers -------------------------------------------------------------------------------------


def _set_request_header(state: _State, call: Call) -> None:
    name, value = _strings(call, 2)
    name = _header_name(name)
    if name.lower() == "host":
        # Skipper sends this Host upstream (SetOutgoingHost); Envoy rewrites Host for that.
        state.host = HostRewrite(literal=_literal_value(value).replace("%%", "%"))
        state.preserve_host = False
        return
    # Skipper leaves the header alone when a placeholder comes out empty (ApplyContext's ok).
    templated = _TEMPLATE.search(value) is not None
    value = _templated_value(value)
    if call.name == "setRequestHeader":
        state.request.do_set(name, value, templated)
    else:
        state.request.do_add(name, value, templated)


def _drop_request_header(state: _State, call: Call) -> None:
    (name,) = _strings(call, 1)
    if name.lower() == "host":
        raise _Refused("dropping the Host header is not supported (HTTP/1.1 requires it)")
    state.request.do_remove(_header_name(name))


def _response_header_name(name: str) -> str:
    if name.lower() == "host":
        raise _Refused("changing a Host response header is not supported: Envoy refuses it")
    return _header_name(name)


def _set_response_header(state: _State, call: Call) -> None:
    name, value = _strings(call, 2)
    name = _response_header_name(name)
    value = _literal_value(value)
    if call.name == "setResponseHeader":
        state.response.do_set(name, value)
    else:
        state.response.do_add(name, value)


def _drop_response_header(state: _State, call: Call) -> None:
    (name,) = _strings(call, 1)
    state.response.do_remove(_response_header_name(name))


def _request_cookie(state: _State, call: Call) -> None:
    name, value = _strings(call, 2)
    _cookie_parts(name, value)
    # A cookie header of its own: Envoy joins repeated headers with ",", which would not parse.
    state.request.do_add("cookie", _literal_value(f"{name}={value}"))


def _response_cookie(state: _State, call: Call) -> None:
    if not 2 <= len(call.args) <= 4:
        raise _Refused(f"{_INVALID}: expects a name, a value and an optional max age")
    name, value = string_arg(call.args[0]), string_arg(call.args[1])
    if name is None or value is None:
        raise _Refused(f"{_INVALID}: the cookie name and value must be strings")
    _cookie_parts(name, value)
    parts = [f"{name}={value}", "Path=/"]
    if len(call.args) >= 3:
        max_age = number_arg(call.args[2])
        if max_age is None:
            raise _Refused(f"{_INVALID}: the max age must be a number of seconds")
        if max_age > 0:
            parts.append(f"Max-Age={int(max_age)}")
        elif max_age < 0:
            parts.append("Max-Age=0")
    if len(call.args) == 4:
        raise _Refused(
            'the "change-only" form is not supported: it needs the request\'s cookie compared '
            "with the value on every response"
        )
    parts.append("HttpOnly")
    state.response.do_add("Set-Cookie", _literal_value("; ".join(parts)))


def _cookie_parts(name: str, value: str) -> None:
    if not _TOKEN.fullmatch(name):
        raise _Refused(f"{_INVALID}: {name!r} is not a cookie name")
    if any(c in value for c in ';,"\\ \x00\r\n\t'):
        raise _Refused(f"{_INVALID}: {value!r} is not a plain cookie value")


# --- paths, redirects and direct responses -------------------------------------------------------


def _go_replacement(repl: str) -> str:
    """Go's ReplaceAllString template (`$1`, `${1}`, `$$`) as an RE2 substitution (`\\1`)."""
    out: list[str] = []
    i = 0
    while i < len(repl):
        c = repl[i]
        if c == "\\":
            out.append("\\\\")
        elif c == "$":
            m = re.match(r"\$(?:\{([0-9]+)\}|([0-9]+))", repl[i:])
            if repl.startswith("$$", i):
                out.append("$")
                i += 2
                continue
            if m is None:
                raise _Refused(f"{_INVALID}: only numbered groups ($1, ${{1}}) can be replaced")
            group = int(m.group(1) or m.group(2))
            if group > 9:
                raise _Refused(f"{_INVALID}: RE2 substitutions go up to \\9")
            out.append(f"\\{group}")
            i += m.end()
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _mod_path(state: _State, call: Call) -> None:
    if len(call.args) != 2:
        raise _Refused(f"{_INVALID}: expects a regexp and a replacement")
    pattern, repl = string_arg(call.args[0]), string_arg(call.args[1])
    if pattern is None or repl is None:
        raise _Refused(f"{_INVALID}: expects a regexp and a replacement string")
    problem = regex_error(pattern)
    if problem is not None:
        raise _Refused(f"the regexp {pattern!r}: {problem}")
    groups = int(re2.compile(pattern).groups)
    substitution = _go_replacement(repl)
    for m in re.finditer(r"\\([0-9])", substitution.replace("\\\\", "")):
        if int(m.group(1)) > groups:
            # Go replaces a missing group by ""; RE2 refuses the substitution.
            raise _Refused(
                f"{_INVALID}: the replacement names group {m.group(1)}, the regexp has {groups}"
            )
    state.path = PathRewrite(regex=pattern, substitution=substitution)


def _set_path(state: _State, call: Call) -> None:
    (path,) = _strings(call, 1)
    if _TEMPLATE.search(path):
        raise _Refused("path templates (${...}) are not supported")
    if not path.startswith("/") or any(c in path for c in "?#\x00\r\n"):
        raise _Refused(f"{_INVALID}: {path!r} is not an absolute path")
    state.path = PathRewrite(full_path=path.replace("\\", "\\\\"))


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_URL_HOST = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]<>\"%\x80-\U0010ffff]*")


def go_url_problem(text: str) -> str | None:
    """Why Go's url.Parse refuses `text` (the cases a location can meet), or None."""
    if any(c < " " or c == "\x7f" for c in text):
        return "net/url: invalid control character in URL"
    rest = text.split("#", 1)[0]
    head, colon, tail = rest.partition(":")
    if colon and not head:
        return "missing protocol scheme"
    if colon and _URL_SCHEME.fullmatch(head):
        rest = tail
    elif ":" in rest.split("/", 1)[0].split("?", 1)[0]:
        return "first path segment in URL cannot contain colon"
    if rest.startswith("//"):
        authority = re.split(r"[/?]", rest[2:], maxsplit=1)[0]
        host = authority.rpartition("@")[2]
        if not _URL_HOST.fullmatch(host):
            bad = next(c for c in host if not _URL_HOST.fullmatch(c))
            return f"invalid character {bad!r} in host name"
        if not host.startswith("["):
            _, colon, port = host.rpartition(":")
            if colon and not port.isdigit() and port:
                return f"invalid port {':' + port!r} after host"
    return None


def _redirect_to(state: _State, call: Call) -> None:
    if len(call.args) not in (1, 2):
        raise _Refused(f"{_INVALID}: expects a status code and an optional location")
    code = _integer(call.args[0], "the status code", 100, 599)
    if code not in _REDIRECT_CODES:
        raise _Refused(f"status {code} is not a redirect Envoy sends (301, 302, 303, 307, 308)")
    location = ""
    if len(call.args) == 2:
        text = string_arg(call.args[1])
        if text is None:
            raise _Refused(f"{_INVALID}: the location must be a string")
        location = text
    problem = go_url_problem(location)
    if problem is not None:
        raise _Refused(f"{_INVALID}: {location!r} is not a URL ({problem})")
    try:
        url = urlsplit(location)
        port = url.port
    except ValueError:
        raise _Refused(f"{_INVALID}: {location!r} is not a URL") from None
    if url.fragment or url.username or url.password:
        raise _Refused(f"a location with user info or a fragment is not supported: {location!r}")
    # Skipper fills what the location leaves out from the request, except the scheme, which
    # is https when the location has none (the request URL of a server has no scheme), and
    # appends the location's query to the request's (`?<request>&<location>`).
    state.redirect = Redirect(
        scheme=(url.scheme or "https").lower(),
        hostname=url.hostname or None,
        port=port,
        path=url.path or None,
        status=code,
        query_suffix=url.query or None,
    )


def _status(state: _State, call: Call) -> None:
    if len(call.args) != 1:
        raise _Refused(f"{_INVALID}: expects a status code")
    state.status = _integer(call.args[0], "the status code", 200, 599)


def _inline_content(state: _State, call: Call) -> None:
    if len(call.args) not in (1, 2):
        raise _Refused(f"{_INVALID}: expects the content and an optional content type")
    body = string_arg(call.args[0])
    content_type = string_arg(call.args[1]) if len(call.args) == 2 else None
    if body is None or (len(call.args) == 2 and content_type is None):
        raise _Refused(f"{_INVALID}: the content and its type must be strings")
    # Without a type Skipper sniffs one (http.DetectContentType); inline content is text.
    content_type = _literal_value(content_type) if content_type else _sniffed_type(body)
    state.content = (body, content_type)


def _sniffed_type(body: str) -> str:
    stripped = body.lstrip("\t\n\x0c\r ").lower()
    if stripped.startswith(("<!doctype html", "<html", "<head", "<body", "<p", "<div", "<h1")):
        return "text/html; charset=utf-8"
    return "text/plain; charset=utf-8"


def _preserve_host(state: _State, call: Call) -> None:
    (value,) = _strings(call, 1)
    if value not in ("true", "false"):
        raise _Refused(f'{_INVALID}: expects "true" or "false"')
    state.preserve_host = value == "true"
    if state.preserve_host:
        state.host = None


# --- traffic -------------------------------------------------------------------------------------


def _tee(state: _State, call: Call) -> None:
    if len(call.args) == 3:
        raise _Refused("tee with a path rewrite is not supported: Envoy mirrors requests unchanged")
    (url,) = _strings(call, 1)
    cluster = state.mirror_cluster(url) if state.mirror_cluster is not None else None
    if cluster is None:
        raise _Refused(f"{_INVALID}: {url!r} is not a backend URL (scheme://host[:port])")
    if isinstance(cluster, NotMirrorable):
        raise _Refused(f"{_INVALID}: {cluster.reason}")
    state.mirrors.append(Mirror(cluster))


def _compress(state: _State, call: Call) -> None:
    if call.args:
        raise _Refused(
            "a compression level or MIME types are not supported: Envoy's compressor fixes "
            "them for every route; compress() uses Skipper's defaults"
        )
    state.compression = Compression(content_types=COMPRESSIBLE_TYPES)


def _cors_origin(state: _State, call: Call) -> None:
    origins: list[ExactOrigin] = []
    for arg in call.args:
        origin = string_arg(arg)
        if origin is None or not origin:
            raise _Refused(f"{_INVALID}: the origins must be non-empty strings")
        origins.append(ExactOrigin(origin))
    if not origins:
        # Skipper always sets `*` here; Envoy's CORS filter would echo the request's Origin and
        # skip responses the route answers itself, so a plain response header is the exact form.
        state.response.do_set("Access-Control-Allow-Origin", "*")
        state.cors = None
        return
    state.cors = CorsPolicy(allow_origins=tuple(origins))
    state.cors_index = state.index


def _ratelimit(state: _State, call: Call) -> None:
    if len(call.args) not in (2, 3):
        raise _Refused(f"{_INVALID}: expects a number of requests, a period and a status")
    requests = _integer(call.args[0], "the number of requests", 1, 2**32 - 1)
    period = _duration(call.args[1], "the period")
    if period < 1 or not float(period).is_integer():
        raise _Refused(f"the period {period:g}s is not supported: it must be whole seconds")
    status = 429
    if len(call.args) == 3:
        status = _integer(call.args[2], "the status code", 400, 599)
    state.rate_limit = LocalRateLimit(requests=requests, unit_s=int(period), status=status)


def _cluster_ratelimit(state: _State, call: Call) -> None:
    """`clusterRatelimit(group, n, period[, status])`: the group's descriptor."""
    group = _cluster_group(state, call, 4)
    if len(call.args) == 4 and _integer(call.args[3], "the status code", 400, 599) != 429:
        raise _Refused(
            "a status code other than 429 is not supported: Envoy's ratelimit filter answers "
            "one status for every route"
        )
    state.global_descriptors.append(RateLimitDescriptor((GenericKeyEntry(group),)))


def _cluster_client_ratelimit(state: _State, call: Call) -> None:
    """`clusterClientRatelimit(group, n, period[, headers])`: the group's descriptor per client,
    the client being its address or the values of the comma-separated headers."""
    group = _cluster_group(state, call, 4)
    client: tuple[RemoteAddressEntry | RequestHeaderEntry, ...] = (RemoteAddressEntry(),)
    if len(call.args) == 4:
        text = string_arg(call.args[3])
        names = [n.strip() for n in (text or "").split(",")]
        if text is None or not all(_TOKEN.fullmatch(n) for n in names):
            raise _Refused(f"{_INVALID}: the headers must be a comma-separated list of names")
        client = tuple(RequestHeaderEntry(n.lower(), n.lower()) for n in names)
    state.global_descriptors.append(RateLimitDescriptor((GenericKeyEntry(group), *client)))


def _cluster_group(state: _State, call: Call, max_args: int) -> str:
    """The group of a cluster rate limit, its other arguments checked."""
    if not state.rate_limit_service:
        raise _Refused(
            "needs a global rate limit service shared by every proxy: start turnout with "
            "--rate-limit-service HOST:PORT (the operator's service speaking Envoy's rate limit "
            "gRPC API)"
        )
    if not 3 <= len(call.args) <= max_args:
        raise _Refused(f"{_INVALID}: expects a group, a number of requests and a period")
    group = string_arg(call.args[0])
    if not group:
        raise _Refused(f"{_INVALID}: the group must be a non-empty string")
    _integer(call.args[1], "the number of requests", 1, 2**32 - 1)
    if _duration(call.args[2], "the period") <= 0:
        raise _Refused(f"{_INVALID}: the period must be positive")
    if state.shunt is True:
        raise _Refused(
            "is not supported on a shunt route: Envoy asks the rate limit service "
            "about forwarded requests only"
        )
    return group


def _backend_timeout(state: _State, call: Call) -> None:
    if len(call.args) != 1:
        raise _Refused(f"{_INVALID}: expects one duration")
    state.timeout_s = _duration(call.args[0], "the timeout")


def _fade_in(state: _State, call: Call) -> None:
    if len(call.args) not in (1, 2):
        raise _Refused(f"{_INVALID}: expects a duration and an optional exponent")
    window = _duration(call.args[0], "the duration", milliseconds=True)
    if window <= 0:
        raise _Refused(f"{_INVALID}: the duration must be positive")
    exponent = 1.0
    if len(call.args) == 2:
        n = number_arg(call.args[1])
        if n is None or not n > 0:
            raise _Refused(f"{_INVALID}: the exponent must be a positive number")
        exponent = n
    # Skipper's share is (age / duration) ** exponent, Envoy's time_factor ** (1 / aggression).
    state.upstream["slow_start"] = SlowStart(window, aggression=1 / exponent, min_weight_percent=1)


_HASH_KEYS = (
    (re.compile(r"\$\{request\.header\.([^}]+)\}"), HashSource.HEADER),
    (re.compile(r"\$\{request\.cookie\.([^}]+)\}"), HashSource.COOKIE),
    (re.compile(r"\$\{request\.query\.([^}]+)\}"), HashSource.QUERY),
)


def _consistent_hash_key(state: _State, call: Call) -> None:
    (key,) = _strings(call, 1)
    if key in ("${request.clientIP}", "${request.source}", "${request.sourceFromLast}"):
        state.hash_policies = [HashPolicy(HashSource.SOURCE_IP)]
        return
    for pattern, source in _HASH_KEYS:
        m = pattern.fullmatch(key)
        if m is not None:
            name = m.group(1).lower() if source is HashSource.HEADER else m.group(1)
            state.hash_policies = [HashPolicy(source, name)]
            return
    raise _Refused(
        f"the key {key!r} is not supported: Envoy hashes one request header, cookie, query "
        "parameter or the client address (${request.header.X}, ${request.cookie.X}, "
        "${request.query.X}, ${request.clientIP})"
    )


def _consistent_hash_balance_factor(state: _State, call: Call) -> None:
    if len(call.args) != 1:
        raise _Refused(f"{_INVALID}: expects one number")
    factor = number_arg(call.args[0])
    if factor is None or factor < 1:
        raise _Refused(f"{_INVALID}: the balance factor must be at least 1")
    # Envoy's hash_balance_factor is a percentage (150 = 1.5), at least 100.
    state.upstream["hash_balance_factor"] = min(round(factor * 100), 2**32 - 1)


def _consecutive_breaker(state: _State, call: Call) -> None:
    if not 1 <= len(call.args) <= 4:
        raise _Refused(f"{_INVALID}: expects failures and an optional timeout")
    failures = _integer(call.args[0], "the number of failures", 1, 2**32 - 1)
    timeout = 60.0  # Skipper's default breaker timeout
    if len(call.args) >= 2:
        timeout = _duration(call.args[1], "the timeout", milliseconds=True)
        if timeout <= 0:
            raise _Refused(f"{_INVALID}: the timeout must be positive")
    if len(call.args) >= 3:
        raise _Refused(
            "half-open requests and the idle TTL are not supported: Envoy's outlier detection "
            "ejects an endpoint for the timeout and then sends it traffic again"
        )
    state.upstream["outlier_detection"] = OutlierDetection(
        consecutive_5xx=failures,
        interval_s=1.0,
        base_ejection_time_s=timeout,
        max_ejection_percent=100,
    )


# --- authentication ------------------------------------------------------------------------------


def routegroup_issuers(snapshot: Snapshot, routegroup_class: str | None = None) -> tuple[str, ...]:
    """The issuers the snapshot's RouteGroups (of `routegroup_class`, as the dialect selects
    them; None: all) name in `jwtValidation` filters, sorted: what the control plane's OpenID
    discovery must look up before the compile can use them. Reads the filter strings only (a
    filter that does not parse names nothing)."""
    found: set[str] = set()
    for obj in routegroups_of_class(snapshot, routegroup_class):
        spec = obj.spec
        routes = spec.get("routes") if isinstance(spec, Mapping) else None
        if not isinstance(routes, Sequence) or isinstance(routes, str):
            continue
        for route in routes[: LIST_CAPS["routes"]]:
            filters = route.get("filters") if isinstance(route, Mapping) else None
            if not isinstance(filters, Sequence) or isinstance(filters, str):
                continue
            for text in filters[: LIST_CAPS["filters"]]:
                if not isinstance(text, str) or "jwtValidation" not in text:
                    continue
                try:
                    found.update(jwt_issuers(parse_filters(text)))
                except EskipError:
                    continue
    return tuple(sorted(found))


def jwt_issuers(calls: Sequence[Call]) -> list[str]:
    """The issuers the `jwtValidation` filters among `calls` name (what discovery must look up)."""
    out: dict[str, None] = {}  # ordered, and linear however many calls
    for call in calls:
        if call.name == "jwtValidation" and len(call.args) == 1:
            issuer = string_arg(call.args[0])
            if issuer is not None and issuer_problem(issuer) is None:
                out[issuer] = None
    return list(out)


def issuer_problem(issuer: str) -> str | None:
    """Why `issuer` cannot be discovered (Skipper GETs `issuer + "/.well-known/..."`), or None."""
    try:
        url = urlsplit(issuer)
        url.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        return f"{issuer!r} is not a URL"
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"{issuer!r} is not an http(s) URL with a host"
    if url.query or url.fragment or url.username or url.password:
        return f"{issuer!r} has a query, fragment or user info; an issuer URL has none"
    if any(c.isspace() or not c.isprintable() for c in issuer):
        return f"{issuer!r} holds spaces or control characters"
    return None


def _jwt_validation(state: _State, call: Call) -> None:
    (issuer,) = _strings(call, 1)
    problem = issuer_problem(issuer)
    if problem is not None:
        raise _Refused(f"{_INVALID}: {problem}")
    if state.jwt_issuer is not None and state.jwt_issuer != issuer:
        raise _Refused(
            f"a second issuer ({issuer!r} after {state.jwt_issuer!r}) is not supported: "
            "a token would have to be signed by keys of both"
        )
    state.jwt_issuer = issuer
    found = state.discovery(issuer) if state.discovery is not None else None
    if found is None or (found.jwks_uri is None and found.error is None):
        state.unavailable = Unavailable(
            call.name,
            0,
            "IssuerDiscoveryPending",
            f"filter {call.name}: OpenID discovery of issuer {issuer!r} has not answered yet",
        )
        return
    if found.jwks_uri is None:
        state.unavailable = Unavailable(
            call.name,
            0,
            "IssuerDiscoveryFailed",
            f"filter {call.name}: OpenID discovery of issuer {issuer!r} failed: {found.error}",
        )
        return
    state.jwt = JwtValidation(issuer=issuer, jwks_uri=found.jwks_uri)


_HANDLERS: dict[str, Callable[[_State, Call], None]] = {
    "setRequestHeader": _set_request_header,
    "appendRequestHeader": _set_request_header,
    "dropRequestHeader": _drop_request_header,
    "setResponseHeader": _set_response_header,
    "appendResponseHeader": _set_response_header,
    "dropResponseHeader": _drop_response_header,
    "modPath": _mod_path,
    "setPath": _set_path,
    "redirectTo": _redirect_to,
    "status": _status,
    "inlineContent": _inline_content,
    "preserveHost": _preserve_host,
    "tee": _tee,
    "compress": _compress,
    "corsOrigin": _cors_origin,
    "ratelimit": _ratelimit,
    "clusterRatelimit": _cluster_ratelimit,
    "clusterClientRatelimit": _cluster_client_ratelimit,
    "backendTimeout": _backend_timeout,
    "fadeIn": _fade_in,
    "consistentHashKey": _consistent_hash_key,
    "consistentHashBalanceFactor": _consistent_hash_balance_factor,
    "consecutiveBreaker": _consecutive_breaker,
    "responseCookie": _response_cookie,
    "requestCookie": _request_cookie,
    "jwtValidation": _jwt_validation,
}

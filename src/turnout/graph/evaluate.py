"""The evaluator: graph + request -> decision, with the reason each earlier route was passed over.

It is the executable meaning of the graph, and it follows what Envoy 1.40 does with the
translator's configuration, so differential tests can hold Envoy to it
(`tests/e2e/test_differential.py`). A request is taken through these steps:

1. **The request target as the client sent it** (`Request.path`, path and query).
   - A character outside printable ASCII (control characters, space, DEL, anything non-ASCII)
     is answered 400: Envoy's HTTP/1 codec refuses it in the request line. Clients
     percent-encode such characters; `explain` users should too.
   - A target that does not start with `/` is answered 400, as Envoy answers `\\a` or `*`
     (absolute-form URLs, which Envoy does take, are not modelled: the evaluator answers 400).
   - A `#` anywhere is answered 400: Envoy refuses a fragment in `:path`.
2. **Path normalisation**, on the part before the first `?`, as the HTTP connection manager
   configured with `PathNormalization` (`paths`, the translator's `TranslateOptions.paths`) does
   it, in Envoy's order (`ConnectionManagerUtility::maybeNormalizePath`):
   - escaped slashes: unless `KEEP_UNCHANGED`, `%2F`, `%2f`, `%5C`, `%5c` are decoded
     (`unescape_slashes`); when there was one, `REJECT_REQUEST` answers 400 and
     `UNESCAPE_AND_REDIRECT` answers 307 with the fully normalised path (and the query) as
     `Location`, after the steps below (a gRPC request would get grpc-status 13 instead: not
     modelled);
   - `normalize_path: true`: Envoy canonicalises with its snapshot of Chromium's URL path
     canonicaliser (`PathUtil::canonicalPath`); `normalize_path` below is a port of it:
     - `\\` becomes `/`;
     - dot segments are removed as RFC 3986 5.2.4 says, `%2e`/`%2E` counting as a dot, and `..`
       never climbs above the root (`/../a` is `/a`; `/a/.` is `/a/`);
     - percent-encoded unreserved characters (letters, digits, `-`, `_`, `~`) are decoded;
       every other escape stays exactly as written, hex case included (`%2F` kept here);
     - `"`, `<`, `>`, `^`, `` ` ``, `{`, `|`, `}` are percent-encoded (upper-case hex);
     - a `%` that starts no valid escape stays, except that an escape it would form with
       characters decoded after it is written `%25...` (`/%%300` is `/%2500`);
     - `%00` is answered 400;
     - letter case is never changed (`/ADMIN` is not `/admin`);
   - `merge_slashes` (unless turned off): runs of `/` become one, as `PathUtil::mergeSlashes`
     does (split at `/` dropping empty pieces, joined, with the leading and trailing `/` kept).
   The query string is passed on exactly as sent.
3. **Virtual host.** One trailing dot of the Host's name is removed (`strip_trailing_host_dot`;
   the raw `:authority` seen by header and wildcard matches loses it too), the Host is
   lower-cased and everything after its last `:` removed (outside `[...]`;
   `ignore_port_in_host_matching`), then: the exact domain, else the longest `*`-suffix
   wildcard with at least one character in place of `*`, else `*`. Among repeated domains the
   first one counts, as in the translator.
4. **Route**, the first in the graph's order that matches:
   - path matches see the normalised path without the query: exact, string prefix, segment
     prefix (`/a` matches `/a` and `/a/...`), RE2 regex over the whole path;
   - a one-label wildcard host (`*.example.com`, HostnameMatch.WILDCARD_ONE_LABEL) also needs
     the raw `:authority` to match the regex the translator adds (`wildcard_authority_regex`);
   - headers as Envoy's `HeaderUtility::matchHeaders`: a header sent several times matches
     when any one of its values does (an inverted condition when none does; the values are not
     joined with `,`); a missing header fails unless `treat_missing_as_empty`, and satisfies
     only an inverted `present`; `:method`, `:authority` (raw Host) and `:path` (normalised,
     with the query) are available;
   - a route with a runtime fraction matches when the request's draw (`Request.draw`, one per
     request, shared by every route as Envoy's random value is) is below it; without a draw only
     a fraction of 1 matches;
   - a range header match reads the value as an integer (Envoy's `SimpleAtoi`);
   - query parameters: the raw query is split at `&`, each piece at its first `=` (no `=`: the
     value is ""); **nothing is decoded**, so `x=a+b`, `x=a%20b` and a condition on `a b` are
     three different values, and names are compared raw too; the first occurrence of a name
     counts.
5. **Action.** A Forward whose effective clusters (`effective_forward`: weight > 0, a repeated
   cluster's weights summed) are none answers 503, as the translator emits it. The weighted share
   of `INVALID_BACKEND` (a backend that did not resolve) answers the Forward's
   `invalid_backend_status` (500, or 503 for gRPC): `status` is that when it is the only
   effective cluster, `invalid_share` gives its fraction of a mixed split and `invalid_status`
   what that fraction answers.
6. **Policies before the action** (`graph.policy_answers`): the HTTP filters Envoy runs between
   the route and the router, in the translator's order: a CORS preflight from an allowed origin
   answered 200, an IP allow/deny list answering 403 (the connection's address is
   `Request.client_address`, the X-Forwarded-For one follows `num_trusted_hops`), a local rate
   limit that may answer 429, a JWT validation answering 401 without a Bearer token (and unless
   the token verifies). `Decision.policy_answers` holds them; a definite one is the status.

**Server name.** On a TLS listener a request may carry the SNI its connection was made with
(`Request.sni`): the filter chain that SNI selects (`graph.sni.select_sni`) has a route table of
its own (`graph.sni.chain_table`), and the Host is looked up there, among the chain's hosts and
the domains it answers 421 (misdirected: a Host another chain serves). Without `sni` the SNI is
assumed to equal the Host, and the Host is looked up among all the listener's hosts.

Not modelled: headers Envoy adds or rewrites before routing (`x-forwarded-*`, `x-request-id`,
`x-envoy-*`) and `:scheme`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import re2

from turnout.compile_inputs import (
    DEFAULT_PATH_NORMALIZATION,
    EscapedSlashes,
    ListenerProtocol,
    PathNormalization,
)
from turnout.graph.model import (
    INVALID_BACKEND,
    DirectResponse,
    ExternalAuthorization,
    Forward,
    HeaderMatch,
    HostnameMatch,
    Listener,
    PathMatchKind,
    QueryMatch,
    Redirect,
    Route,
    RouteMatch,
    RoutingGraph,
    StringMatchKind,
    VirtualHost,
    invalid_backend_status,
)
from turnout.graph.policy_answers import (
    DEFAULT_CLIENT_ADDRESS,
    PolicyAnswer,
    PolicyContext,
    answer_policies,
    deciding_answer,
)
from turnout.graph.regex import ENVOY_MAX_PROGRAM_SIZE, envoy_program_size, envoy_regex
from turnout.graph.sni import MISDIRECTED_STATUS, chain_table

T = TypeVar("T")

# What a route answers when it has nowhere to send traffic (every weight is zero, or none).
NO_BACKEND_STATUS = 503

# What Envoy answers to a request it refuses before routing (codec error, fragment, %00).
BAD_REQUEST_STATUS = 400

# What Envoy answers to a path with an escaped slash under UNESCAPE_AND_REDIRECT.
TEMPORARY_REDIRECT_STATUS = 307


@dataclass(frozen=True, slots=True)
class Request:
    host: str
    path: str = "/"  # the request target as sent: path and query string
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    listener: str = "ingress_http"
    # The request's random value in [0, 1) that routes with a runtime fraction compare with
    # (Envoy draws one per request). None: a draw no fraction below 1 takes.
    draw: float | None = None
    # The server name of the TLS connection the request came on (None: the Host's own name).
    sni: str | None = None
    # The address the connection comes from (what `Peer` IP filters see).
    client_address: str = DEFAULT_CLIENT_ADDRESS

    def header_values(self, name: str) -> list[str]:
        name = name.lower()
        if name == ":method":
            return [self.method]
        if name == ":authority":
            return [self.host]
        if name == ":path":
            return [self.path]
        return [v for k, v in self.headers if k.lower() == name]

    @property
    def path_only(self) -> str:
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.path.split("?", 1)[1] if "?" in self.path else ""


@dataclass(frozen=True, slots=True)
class Miss:
    route: Route
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    listener: Listener | None
    virtual_host: VirtualHost | None
    route: Route | None
    passed_over: tuple[Miss, ...] = field(default=())
    # Set when Envoy answers without a route of the graph (400 for a malformed path, 307 for an
    # escaped slash it redirects, 421 for a Host the connection's server name does not serve);
    # `route` is then None.
    rejected_status: int | None = None
    rejected_reason: str = ""
    # The redirect's target when `rejected_status` is Envoy's escaped-slash redirect.
    location: str | None = None
    # What the policy filters answer before the route's action, in Envoy's filter order, ending
    # with the first definite answer (`graph.policy_answers`).
    policy_answers: tuple[PolicyAnswer, ...] = ()

    @property
    def policy_answer(self) -> PolicyAnswer | None:
        """The policy answer that counts: the definite one, else the first conditional one."""
        return deciding_answer(self.policy_answers)

    @property
    def definite_policy_answer(self) -> PolicyAnswer | None:
        answer = self.policy_answer
        return answer if answer is not None and answer.definite else None

    @property
    def status(self) -> int:
        """The status Envoy answers with, or 200 for a forward to at least one cluster."""
        if self.rejected_status is not None:
            return self.rejected_status
        if self.definite_policy_answer is not None:
            return self.definite_policy_answer.status
        if self.route is None:
            return 404
        action = self.route.action
        if isinstance(action, DirectResponse):
            return action.status
        if isinstance(action, Redirect):
            return action.status
        if isinstance(action, Forward):
            effective = effective_forward(action)
            if not effective:
                return NO_BACKEND_STATUS
            if all(name == INVALID_BACKEND for name, _ in effective):
                return invalid_backend_status(action.invalid_backend_status)
        return 200

    @property
    def invalid_status(self) -> int | None:
        """What the chosen Forward's share of an invalid backend answers (None: not a Forward)."""
        if self.route is None or not isinstance(self.route.action, Forward):
            return None
        return invalid_backend_status(self.route.action.invalid_backend_status)

    @property
    def invalid_share(self) -> float:
        """The fraction of the chosen Forward's requests answered 500 for an invalid backend."""
        if self.route is None or not isinstance(self.route.action, Forward):
            return 0.0
        effective = effective_forward(self.route.action)
        total = sum(w for _, w in effective)
        invalid = sum(w for name, w in effective if name == INVALID_BACKEND)
        return invalid / total if total else 0.0

    @property
    def answered_shares(self) -> tuple[tuple[int, float], ...]:
        """(status, fraction of the chosen Forward's requests) for each share that answers
        itself (`BackendPolicies.direct_response`) instead of forwarding."""
        if self.route is None or not isinstance(self.route.action, Forward):
            return ()
        forward = self.route.action
        total = sum(w for _, w in effective_forward(forward))
        return tuple(
            (wc.policies.direct_response.status, wc.weight / total)
            for wc in forward.clusters
            if total and wc.weight > 0 and wc.policies and wc.policies.direct_response
        )

    @property
    def clusters(self) -> tuple[tuple[str, int], ...]:
        """The chosen Forward's clusters as the graph lists them (zero weights included)."""
        if self.route is not None and isinstance(self.route.action, Forward):
            return tuple((c.cluster, c.weight) for c in self.route.action.clusters)
        return ()


def effective_forward(action: Forward) -> tuple[tuple[str, int], ...]:
    """The clusters a Forward really sends to, in the graph's order: weight-0 entries dropped and
    a cluster listed twice given the sum of its weights. Empty: the route answers 503.

    The translator emits exactly this (a plain cluster for one entry, weighted clusters for more),
    so the evaluator and Envoy cannot disagree on what a split means.
    """
    weights: dict[str, int] = {}
    for wc in action.clusters:
        if wc.weight > 0:
            weights[wc.cluster] = weights.get(wc.cluster, 0) + wc.weight
    return tuple(weights.items())


# --- the request target ------------------------------------------------------------------------

# Chromium's kPathCharLookup, as Envoy's snapshot has it (source/common/chromium_url).
_SPECIAL, _ESCAPE_BIT, _UNESCAPE, _INVALID_BIT = 1, 2, 4, 8
_ESCAPE, _INVALID = _ESCAPE_BIT | _SPECIAL, _INVALID_BIT | _SPECIAL


def _path_char_table() -> bytes:
    table = bytearray(256)  # 0: copied as is
    for c in range(0x01, 0x21):
        table[c] = _ESCAPE
    for c in range(0x7F, 0x100):
        table[c] = _ESCAPE
    for c in b'"#%<>?\\^`{|}':
        table[c] = _ESCAPE
    for c in b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_~":
        table[c] = _UNESCAPE
    table[ord(".")] = _SPECIAL
    table[0] = _INVALID
    return bytes(table)


_PATH_CHARS = _path_char_table()
_SLASH, _BACKSLASH, _DOT, _PERCENT = 0x2F, 0x5C, 0x2E, 0x25
_HEX = b"0123456789abcdefABCDEF"


def _is_dot(spec: bytes, i: int, end: int) -> int:
    if spec[i] == _DOT:
        return 1
    if spec[i] == _PERCENT and i + 3 <= end and spec[i + 1] == ord("2") and spec[i + 2] in b"eE":
        return 3
    return 0


def _decode_escaped(spec: bytes | bytearray, i: int, end: int) -> int | None:
    """The byte `%XY` at `i` stands for, or None when it is no valid escape."""
    if i + 3 > end or spec[i + 1] not in _HEX or spec[i + 2] not in _HEX:
        return None
    return int(bytes(spec[i + 1 : i + 3]), 16)


_CUR, _UP, _NOT_A_DIRECTORY = 0, 1, 2


def _classify_after_dot(spec: bytes, after: int, end: int) -> tuple[int, int]:
    if after == end:
        return _CUR, 0
    if spec[after] in (_SLASH, _BACKSLASH):
        return _CUR, 1
    second = _is_dot(spec, after, end)
    if second:
        after_second = after + second
        if after_second == end:
            return _UP, second
        if spec[after_second] in (_SLASH, _BACKSLASH):
            return _UP, second + 1
    return _NOT_A_DIRECTORY, 0


def _back_up_to_previous_slash(begin: int, out: bytearray) -> None:
    i = len(out) - 1
    if i == begin:
        return
    i -= 1
    while out[i] != _SLASH and i > begin:
        i -= 1
    del out[i + 1 :]


def _check_for_nested_escapes(spec: bytes, nxt: int, end: int, pct: int, out: bytearray) -> None:
    # An invalid `%` followed by characters just decoded may now read as a valid escape
    # (`%%30` + `0`); Chromium then writes that `%` as `%25` so a second pass cannot decode it.
    length = len(out)
    last = out[-1]
    append_next = pct == length - 2
    if append_next:
        if nxt == end or spec[nxt] >= 0x80:
            return
        out.append(spec[nxt])
    if _decode_escaped(out, pct, len(out)) is not None:
        if not append_next:
            out.append(out[pct + 1])
        out[pct + 1] = ord("2")
        out[pct + 2] = ord("5")
        out.append(last)
    elif append_next:
        del out[length:]


def normalize_path(path: str) -> str | None:
    """The path (without query) as Envoy's `normalize_path` leaves it, or None for a 400.

    A port of Chromium's `CanonicalizePath` in the snapshot Envoy carries; see the module
    docstring for what it does.
    """
    spec = path.encode("utf-8", "replace")
    end = len(spec)
    out = bytearray()
    if not spec or spec[0] not in (_SLASH, _BACKSLASH):
        out.append(_SLASH)
    begin = 0
    last_invalid_percent = -(1 << 30)
    ok = True
    i = 0
    while i < end:
        ch = spec[i]
        flags = _PATH_CHARS[ch]
        if not flags & _SPECIAL:
            out.append(ch)
        elif dot := _is_dot(spec, i, end):
            if len(out) > begin and out[-1] == _SLASH:
                kind, consumed = _classify_after_dot(spec, i + dot, end)
                if kind == _NOT_A_DIRECTORY:
                    out.append(_DOT)
                    i += dot - 1
                else:
                    if kind == _UP:
                        _back_up_to_previous_slash(begin, out)
                    i += dot + consumed - 1
            else:
                out.append(_DOT)
                i += dot - 1
        elif ch == _BACKSLASH:
            out.append(_SLASH)
        elif ch == _PERCENT:
            value = _decode_escaped(spec, i, end)
            if value is None:
                last_invalid_percent = len(out)
                out.append(_PERCENT)
            else:
                i += 2
                value_flags = _PATH_CHARS[value]
                if value_flags & _UNESCAPE:
                    out.append(value)
                    if last_invalid_percent >= len(out) - 3:
                        _check_for_nested_escapes(spec, i + 1, end, last_invalid_percent, out)
                else:
                    out += spec[i - 2 : i + 1]
                    if value_flags & _INVALID_BIT:
                        ok = False
        else:
            out += b"%%%02X" % ch
            if flags & _INVALID_BIT:
                ok = False
        i += 1
    return out.decode("latin-1") if ok else None


def _target_problem(target: str) -> str | None:
    if not target.isascii() or not target.isprintable() or " " in target:
        return "the request target holds a character Envoy's HTTP/1 codec refuses"
    if not target.startswith("/"):
        return "the request target does not start with '/', which Envoy refuses"
    if "#" in target:
        return "the path holds a fragment (#), which Envoy refuses"
    return None


def query_params(query: str) -> list[tuple[str, str]]:
    """Envoy's `QueryParamsMulti::parseQueryString` without decoding: raw names and values."""
    out: list[tuple[str, str]] = []
    for piece in query.split("&"):
        if piece:
            name, _, value = piece.partition("=")
            out.append((name, value))
    return out


# --- virtual hosts -------------------------------------------------------------------------------


def _strip_port(host: str) -> str:
    """Envoy's `ignore_port_in_host_matching`: drop everything after the last `:` unless it lies
    inside an IPv6 literal's brackets (`HeaderUtility::getPortStart`)."""
    host = host.lower()
    colon = host.rfind(":")
    if colon < 0 or host.rfind("]") > colon:
        return host
    return host[:colon]


def select_virtual_host(listener: Listener, host: str) -> VirtualHost | None:
    """Envoy's order: exact domain, then the longest `*suffix` wildcard, then `*`."""
    return select_domain([(vh.hostname, vh) for vh in listener.virtual_hosts], host)


def select_domain(domains: Sequence[tuple[str, T]], host: str) -> T | None:
    """What Envoy picks for `host` among `(domain, value)` pairs of one route table: the exact
    domain, then the longest `*suffix` wildcard, then `*`; the first of equals."""
    host = _strip_port(host)
    best: T | None = None
    best_len = -1
    catch_all: T | None = None
    found_catch_all = False
    for domain, value in domains:
        name = domain.lower()
        if name == "*":
            if not found_catch_all:
                catch_all, found_catch_all = value, True
        elif name.startswith("*"):
            suffix = name[1:]
            if host.endswith(suffix) and len(host) > len(suffix) and len(suffix) > best_len:
                best, best_len = value, len(suffix)
        elif name == host:
            return value
    return best if best_len >= 0 else catch_all


_PORT_SUFFIX = "(:[0-9]+)?"


def wildcard_authority_regex(hostname: str) -> str:
    """A regex for an authority with exactly one label in place of `*` in `hostname`, and any port.

    Envoy's `*.example.com` domain matches any number of labels, so for a one-label wildcard the
    translator adds this as an `:authority` match to each route (Contour's
    `wildcardDomainHeaderMatch`), and the evaluator applies the same regex. Host matching is
    case-insensitive, so the regex is too.

    The readable form spells the suffix out. Its RE2 program grows with the suffix length, and
    Envoy rejects programs above 100, so for long suffixes it falls back to counting labels: the
    route only ever sees hosts that selected this virtual host, so they already end in the suffix,
    and the label count alone tells one label from several. When neither fits Envoy's limit,
    `graph.validate` drops the virtual host.
    """
    suffix = hostname[1:]
    spelled = "(?i)[^.:]+" + str(re2.escape(suffix)) + _PORT_SUFFIX
    counted = f"[^.:]+(\\.[^.:]+){{{suffix.count('.')}}}" + _PORT_SUFFIX
    for candidate in (spelled, counted):
        if envoy_program_size(candidate) <= ENVOY_MAX_PROGRAM_SIZE:
            return candidate
    return counted if envoy_program_size(counted) < envoy_program_size(spelled) else spelled


def _authority_fits(vh: VirtualHost, host: str) -> bool:
    if vh.hostname_match is not HostnameMatch.WILDCARD_ONE_LABEL or not vh.hostname.startswith(
        "*."
    ):
        return True
    return _regex_matches(wildcard_authority_regex(vh.hostname), host)


# --- routes --------------------------------------------------------------------------------------


def _string_match(kind: StringMatchKind, expected: str, actual: str, ignore_case: bool) -> bool:
    if kind is StringMatchKind.RANGE:
        return _in_range(expected, actual)
    if kind is StringMatchKind.REGEX:
        return _regex_matches(expected, actual)
    if ignore_case:
        expected, actual = expected.lower(), actual.lower()
    if kind is StringMatchKind.EXACT:
        return actual == expected
    if kind is StringMatchKind.PREFIX:
        return actual.startswith(expected)
    if kind is StringMatchKind.SUFFIX:
        return actual.endswith(expected)
    if kind is StringMatchKind.CONTAINS:
        return expected in actual
    return True  # PRESENT


_RANGE_VALUE = re2.compile(r"[+-]?[0-9]+")


def _in_range(expected: str, actual: str) -> bool:
    # Envoy's range_match reads the value with absl::SimpleAtoi into an int64 (surrounding
    # whitespace and a sign allowed); a value that does not parse never matches.
    start, _, end = expected.partition(",")
    text = actual.strip(" \t\n\v\f\r")
    if _RANGE_VALUE.fullmatch(text) is None:
        return False
    value = int(text)
    if not -(2**63) <= value < 2**63:
        return False
    return int(start) <= value < int(end)


def _regex_matches(pattern: str, value: str) -> bool:
    # Envoy runs its Latin-1 program over the value's bytes, so `.` is one byte, not one character.
    return envoy_regex(pattern).fullmatch(value.encode("utf-8")) is not None


def header_matches(m: HeaderMatch, request: Request) -> bool:
    """Envoy's HeaderUtility::matchHeaders, including its rules for a missing header."""
    values = request.header_values(m.name)
    if not values and not m.treat_missing_as_empty:
        # A missing header only satisfies "present: false" (or an inverted "present").
        return m.kind is StringMatchKind.PRESENT and m.invert
    if m.kind is StringMatchKind.PRESENT:
        matched = bool(values)
    else:
        # A header sent several times matches when one of its values does (Envoy 1.40 no longer
        # matches the comma-joined string: `x-a: a` twice is exact "a", never "a,a").
        # `treat_missing_as_empty`: a missing header is matched as one empty value.
        matched = any(_string_match(m.kind, m.value, v, m.ignore_case) for v in values or [""])
    return matched != m.invert


def query_matches(m: QueryMatch, request: Request) -> bool:
    values = [v for k, v in query_params(request.query) if k == m.name]
    if not values:
        return False
    if m.kind is StringMatchKind.PRESENT:
        return True
    return _string_match(m.kind, m.value, values[0], m.ignore_case)


def path_matches(match: RouteMatch, path: str) -> bool:
    p = match.path
    if p.kind is PathMatchKind.EXACT:
        return path == p.value
    if p.kind is PathMatchKind.PREFIX:
        return path.startswith(p.value)
    if p.kind is PathMatchKind.SEGMENT_PREFIX:
        prefix = p.value.rstrip("/")
        return prefix == "" or path == prefix or path.startswith(prefix + "/")
    return _regex_matches(p.value, path)


def route_miss_reason(route: Route, request: Request, vh: VirtualHost) -> str | None:
    """Why `route` does not match `request` (already normalised), or None when it matches."""
    path = request.path_only
    fraction = route.match.runtime_fraction
    if fraction is not None and not _drawn(fraction, request.draw):
        if request.draw is None:
            return f"no random draw given, and the fraction {fraction} is below 1"
        return f"the request's random value {request.draw} is not below the fraction {fraction}"
    if not path_matches(route.match, path):
        p = route.match.path
        return f"path {path!r} does not match {p.kind.value} {p.value!r}"
    if not _authority_fits(vh, request.host):
        return f"host {request.host!r} has more than one label in place of '*'"
    for h in route.match.headers:
        if not header_matches(h, request):
            neg = "not " if h.invert else ""
            what = "present" if h.kind is StringMatchKind.PRESENT else f"{h.kind.value} {h.value!r}"
            return f"header {h.name!r} is not {neg}{what}"
    for q in route.match.query:
        if not query_matches(q, request):
            what = "present" if q.kind is StringMatchKind.PRESENT else f"{q.kind.value} {q.value!r}"
            return f"query parameter {q.name!r} is not {what}"
    return None


def _drawn(fraction: float, draw: float | None) -> bool:
    # Envoy compares the random value modulo a million with the numerator over a million.
    numerator = round(min(max(fraction, 0.0), 1.0) * 1_000_000)
    if draw is None:
        return numerator >= 1_000_000
    return int(min(max(draw, 0.0), 1.0) * 1_000_000) < numerator


@dataclass(frozen=True, slots=True)
class Refusal:
    """What Envoy answers before routing: 400, or 307 to `location` for an escaped slash."""

    status: int
    reason: str
    location: str | None = None


def unescape_slashes(path: str) -> str:
    """`path` with `%2F`/`%2f` decoded to `/` and `%5C`/`%5c` to `\\`, as Envoy's
    `PathUtil::unescapeSlashes` does (one replacement pass per spelling, in this order)."""
    for escaped, plain in (("%2F", "/"), ("%2f", "/"), ("%5C", "\\"), ("%5c", "\\")):
        path = path.replace(escaped, plain)
    return path


def merge_slashes(path: str) -> str:
    """`path` with runs of `/` merged, as Envoy's `PathUtil::mergeSlashes` does it."""
    if "//" not in path:
        return path
    prefix = "/" if path.startswith("/") else ""
    suffix = "/" if path.endswith("/") else ""
    return prefix + "/".join(p for p in path.split("/") if p) + suffix


def normalize_request(
    request: Request, paths: PathNormalization = DEFAULT_PATH_NORMALIZATION
) -> Request | Refusal:
    """`request` with its path as Envoy routes on it, or what Envoy answers instead."""
    problem = _target_problem(request.path)
    if problem is not None:
        return Refusal(BAD_REQUEST_STATUS, problem)
    host = strip_trailing_host_dot(request.host)
    if host != request.host:
        request = dataclasses.replace(request, host=host)
    path, sep, query = request.path.partition("?")
    unescaped = path
    if paths.escaped_slashes is not EscapedSlashes.KEEP_UNCHANGED:
        unescaped = unescape_slashes(path)
    escaped = unescaped != path
    if escaped and paths.escaped_slashes is EscapedSlashes.REJECT_REQUEST:
        return Refusal(BAD_REQUEST_STATUS, "the path holds an escaped slash (%2F or %5C)")
    normalized = normalize_path(unescaped)
    if normalized is None:
        return Refusal(
            BAD_REQUEST_STATUS,
            "the path holds an encoded NUL (%00), which path normalisation refuses",
        )
    if paths.merge_slashes:
        normalized = merge_slashes(normalized)
    target = normalized + sep + query
    if escaped and paths.escaped_slashes is EscapedSlashes.UNESCAPE_AND_REDIRECT:
        reason = f"the path holds an escaped slash (%2F or %5C): redirected to {target}"
        return Refusal(TEMPORARY_REDIRECT_STATUS, reason, target)
    if normalized == path:
        return request
    return dataclasses.replace(request, path=target)


def strip_trailing_host_dot(host: str) -> str:
    """The Host without one trailing dot on its name, the port kept (`a.example.com.:8080` is
    `a.example.com:8080`), as the HCM's `strip_trailing_host_dot` does before any routing."""
    colon = host.rfind(":")
    if colon < 0 or host.rfind("]") > colon:
        return host[:-1] if host.endswith(".") else host
    name, port = host[:colon], host[colon:]
    return name[:-1] + port if name.endswith(".") else host


def evaluate(
    graph: RoutingGraph,
    request: Request,
    paths: PathNormalization = DEFAULT_PATH_NORMALIZATION,
    num_trusted_hops: int = 0,
) -> Decision:
    """What Envoy does with `request`; `paths` and `num_trusted_hops` are the translator's
    `TranslateOptions.paths` and `.num_trusted_hops`."""
    listener = next((lst for lst in graph.listeners if lst.name == request.listener), None)
    if listener is None:
        return Decision(None, None, None)
    normalized = normalize_request(request, paths)
    if isinstance(normalized, Refusal):
        return Decision(
            listener, None, None, (), normalized.status, normalized.reason, normalized.location
        )
    if normalized.sni is not None and listener.protocol in _TLS_PROTOCOLS:
        chosen = _select_on_chain(listener, normalized.sni, normalized.host)
        if isinstance(chosen, Decision):
            return chosen
        vh = chosen
    else:
        vh = select_virtual_host(listener, normalized.host)
    if vh is None:
        return Decision(listener, None, None)
    misses: list[Miss] = []
    for route in vh.routes:
        reason = route_miss_reason(route, normalized, vh)
        if reason is None:
            context = PolicyContext(normalized, vh, route, num_trusted_hops)
            return Decision(
                listener, vh, route, tuple(misses), policy_answers=answer_policies(context)
            )
        misses.append(Miss(route, reason))
    return Decision(listener, vh, None, tuple(misses))


_TLS_PROTOCOLS = (ListenerProtocol.HTTPS, ListenerProtocol.TLS_PASSTHROUGH)


def _select_on_chain(listener: Listener, sni: str, host: str) -> VirtualHost | Decision | None:
    """The virtual host the route table of the chain `sni` selects gives `host`, or Envoy's
    answer when that is no host of the graph: 421 for a misdirected Host."""
    table = chain_table(listener, sni)
    if table is None:
        return Decision(
            listener, None, None, rejected_reason=f"no HTTP filter chain takes server name {sni!r}"
        )
    # The 421 virtual host is no host of the graph: its domains stand for themselves.
    entries: list[tuple[str, VirtualHost | str]] = [(vh.hostname, vh) for vh in table.hosts]
    entries.extend((domain, domain) for domain in table.misdirected)
    chosen = select_domain(entries, host)
    if isinstance(chosen, str):
        reason = f"misdirected: the connection's server name {sni!r} does not serve Host {host!r}"
        return Decision(listener, None, None, (), MISDIRECTED_STATUS, reason)
    return chosen


def make_request(
    host: str,
    path: str = "/",
    method: str = "GET",
    headers: Sequence[tuple[str, str]] | dict[str, str] = (),
    listener: str = "ingress_http",
    sni: str | None = None,
    client_address: str = DEFAULT_CLIENT_ADDRESS,
) -> Request:
    pairs = tuple(headers.items()) if isinstance(headers, dict) else tuple(headers)
    return Request(
        host=host,
        path=path,
        method=method.upper(),
        headers=pairs,
        listener=listener,
        sni=sni,
        client_address=client_address,
    )


def authorization_check(decision: Decision) -> ExternalAuthorization | None:
    """The external authorization the chosen route's request goes through first, if any: the
    answer then depends on the authorization server, which the evaluator cannot ask."""
    vh, route = decision.virtual_host, decision.route
    if vh is None or route is None or vh.policies.authorization is None:
        return None
    own = route.policies.authorization
    return None if own is not None and own.disabled else vh.policies.authorization

"""Skipper predicates (eskip `Call`s) -> the graph's route match.

Every predicate of the list below is translated; any other name is a problem naming it, never
dropped. Arguments are checked as Skipper's predicate specs check them (count and types; a regexp
argument is a string, as in Skipper), and regexes as Envoy will compile them (RE2, program size).

| predicate | graph | fidelity |
|---|---|---|
| `Path(p)` | exact path; `:name`, final `*name` (a non-empty rest) -> path regex | native |
| `PathSubtree(p)` | segment prefix | native |
| `PathRegexp(re)` | path regex `.*(?:re).*` (RE2 search); with another: `:path` regex | see below |
| `Host(re)` | `:authority` regex `.*(?:re).*` | native |
| `HostAny(h...)` | `:authority` exact alternatives | native |
| `Method(m)` | `:method` exact (the last one counts, as in Skipper) | native |
| `Methods(m...)` | `:method` regex of the upper-cased methods | native |
| `Header(k, v)` | header exact (a repeated name: the last value counts) | native |
| `HeaderRegexp(k, re)` | header regex `.*(?:re).*` | native |
| `Cookie(name, re)` | `cookie` header regex around `name=` | approximated |
| `QueryParam(k[, re])` | query present / regex | approximated |
| `Source`, `SourceFromLast`, `ClientIP` | address header regexes (IPv4 only) | approximated |
| `Traffic(p)` | route fraction p | native |
| `Traffic(p, cookie, group)` | cookie = group, or no cookie and fraction p | approximated |
| `TrafficSegment(min, max)` | fraction max, after the lower segments | native (gap: refused) |
| `ContentLengthBetween(min, max)` | `content-length` range [min, max) | native |
| `Weight(n)`, `True()` | priority only | native |
| `False()` | the route never matches | native |

Notes on the approximations (docs/dialects/routegroup.md has the user-facing version):

- Paths are matched as Envoy normalises them (percent-escapes of reserved characters stay
  encoded), Skipper matches the decoded path.
- Several path conditions (a Path or PathSubtree and a PathRegexp, or two PathRegexps): Envoy has
  one path matcher per route, so the others become regexes on `:path`, which carries the query
  string; a regex ending in `$` is rewritten to end at the `?` too. `Path(literal)` with a
  PathRegexp is decided here instead (the regex either finds the literal path or never will).
- Header, HeaderRegexp: a header sent on several lines matches when one line does, in Envoy 1.40
  as in Skipper; only headers Envoy stores inline (X-Forwarded-For, ...) arrive joined with `,`.
- Cookie: the value regex is searched in the text after `name=` up to the next `;`; a `.` in it
  can still run past that `;`. Skipper parses the header and looks at the first cookie of that
  name only.
- QueryParam: Envoy compares the first occurrence of the parameter, undecoded; Skipper any
  occurrence, decoded.
- Source / SourceFromLast / ClientIP: Envoy's RouteMatch has no client address, so the headers
  Envoy sets before routing are matched instead (the HTTP connection manager has
  `use_remote_address`). ClientIP (the peer) is `x-envoy-external-address`, which Envoy sets to
  the peer address (with `--num-trusted-hops` above 0: to the client address the trusted proxies
  report) and overwrites on every request from outside; on the second hop of a `loopback` (the
  peer is OWN_HOP_SOURCE_ADDRESS) it is the client the first hop sent in
  LOOPBACK_CLIENT_HEADER. X-Forwarded-For is what the client sent followed by one
  entry Envoy appended (the peer, or Envoy's own address for a loopback peer): Source (the first
  entry sent, else the peer) is its first entry when it has two or more, else the peer;
  SourceFromLast (the last entry sent, else the peer) the one before the last, else the peer.
  Addresses are matched as text by a regex generated from the CIDRs (IPv4 only; an IPv6 network
  cannot be matched reliably as text and is refused); entries with a port are not recognised
  (nor are they by Skipper).
- Traffic: Envoy draws one random number per request and compares every route's fraction with
  it, Skipper draws per predicate. Several Traffic predicates on one route multiply. Ordering the
  routes so that the shared draw gives the same split is the dialect's job (weighted backends
  use weighted clusters). The sticky form compares the cookie as `Cookie` does.
- ContentLengthBetween(0, max) also matches a request without Content-Length and without
  Transfer-Encoding (Go reads its length as 0); a chunked request never matches, as in Skipper.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import re2

from turnout.compile_inputs import OWN_HOP_SOURCE_ADDRESS
from turnout.dialects.routegroup.eskip import Call, number_arg, string_arg
from turnout.graph.evaluate import normalize_path
from turnout.graph.model import (
    HeaderMatch,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    RouteMatch,
    StringMatchKind,
)
from turnout.graph.regex import escape, regex_error

__all__ = [
    "SUPPORTED_PREDICATES",
    "CallProblem",
    "MatchTranslation",
    "MatchVariant",
    "cidr_regex",
    "translate_predicates",
    "wildcard_path_regex",
]


@dataclass(frozen=True, slots=True)
class CallProblem:
    """A predicate or filter that cannot be installed: `index` is its position in the list the
    translation was given, `message` says why and names it."""

    name: str
    index: int
    message: str


@dataclass(frozen=True, slots=True)
class MatchVariant:
    """One alternative of a route's match: its extra header conditions and its fraction."""

    headers: tuple[HeaderMatch, ...] = ()
    fraction: float | None = None


@dataclass(frozen=True, slots=True)
class MatchTranslation:
    path: PathMatch | None  # None: any path
    headers: tuple[HeaderMatch, ...]
    query: tuple[QueryMatch, ...]
    # The share of requests the route takes (Traffic, TrafficSegment(0, max)); None: all.
    fraction: float | None
    # The route matches when any variant does (on top of the conditions above): the dialect
    # emits one graph route per variant, in this order, with the same action. Usually one.
    variants: tuple[MatchVariant, ...]
    # Skipper's leaf weight: +1 per Method/Host/PathRegexp/distinct Header name/other predicate,
    # + n per Weight(n), 0 for Path, PathSubtree and TrafficSegment.
    weight: int
    never: bool  # False(), an empty Traffic share, or a literal Path its PathRegexp cannot find
    # The Path/PathSubtree argument: the route's place in Skipper's path tree (None: root leaf).
    tree_path: str | None
    problems: tuple[CallProblem, ...]
    tree_subtree: bool = False  # tree_path is a PathSubtree's (else a Path's)
    # `fraction` includes a Traffic(p) share: Skipper draws anew for it, while every
    # TrafficSegment of a request compares one draw.
    traffic_drawn: bool = False
    # TrafficSegment(min, max)'s min: `fraction` is max, which selects [min, max) only after the
    # routes of the segments below min (see priority.Priority.segment_start).
    segment_start: float = 0.0

    def drawn_anew(self) -> tuple[bool, ...]:
        """Per variant (as `route_matches`): whether its fraction comes from a Traffic draw."""
        return tuple(self.traffic_drawn or v.fraction is not None for v in self.variants)

    def route_matches(self) -> tuple[RouteMatch, ...]:
        """The graph matches, one per variant, for routes that keep the translation's order."""
        path = self.path if self.path is not None else PathMatch.prefix("/")
        out: list[RouteMatch] = []
        for v in self.variants:
            out.append(
                RouteMatch(
                    path=path,
                    headers=self.headers + v.headers,
                    query=self.query,
                    runtime_fraction=_times(self.fraction, v.fraction),
                )
            )
        return tuple(out)


SUPPORTED_PREDICATES = (
    "Path",
    "PathSubtree",
    "PathRegexp",
    "Host",
    "HostAny",
    "Method",
    "Methods",
    "Header",
    "HeaderRegexp",
    "Cookie",
    "QueryParam",
    "Source",
    "SourceFromLast",
    "ClientIP",
    "Traffic",
    "TrafficSegment",
    "Weight",
    "True",
    "False",
    "ContentLengthBetween",
)

# Skipper's Methods predicate only takes these.
_METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE")
)
# Skipper's Host: a leading "*." is replaced by this before compiling (eskip.applyPredicates).
_HOST_WILDCARD = "[a-z0-9]+((-[a-z0-9]+)?)*"
_INVALID = "invalid predicate parameters"


class _Refused(Exception):
    pass


def _times(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a * b


def _strings(call: Call, count: int | None = None, minimum: int = 0) -> list[str]:
    values = [string_arg(a) for a in call.args]
    if count is not None and (len(values) != count or None in values):
        raise _Refused(f"{_INVALID}: expects {_count(count, 'string argument')}")
    if len(values) < minimum:
        raise _Refused(f"{_INVALID}: expects at least {_count(minimum, 'string argument')}")
    if any(v is None for v in values):
        raise _Refused(f"{_INVALID}: only string arguments are allowed")
    return [v for v in values if v is not None]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def search_regex(pattern: str) -> str:
    """A full-match RE2 regex matching what `pattern` finds anywhere (Go's MatchString)."""
    return f"(?s:.*)(?:{pattern})(?s:.*)"


def _checked_regex(pattern: str, what: str) -> str:
    problem = regex_error(pattern)
    if problem is not None:
        raise _Refused(f"{what}: {problem}")
    return pattern


def _user_regex(pattern: str) -> str:
    # Skipper compiles with Go's regexp (RE2 syntax); the pattern must compile on its own first,
    # so that a broken one is reported as the user wrote it.
    try:
        re2.compile(pattern, _QUIET)
    except Exception as err:
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise _Refused(f"invalid regular expression {pattern!r}: {detail}") from None
    return pattern


_QUIET = re2.Options()
_QUIET.log_errors = False


# --- paths ---------------------------------------------------------------------------------------


def wildcard_path_regex(path: str) -> str | None:
    """`_wildcard_path_regex` for a path the translation accepted (it does not raise then)."""
    try:
        return _wildcard_path_regex(path)
    except _Refused:
        return None


_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _char_regex(char: str) -> str:
    """What Envoy's normalised path holds for one character of a decoded path.

    Skipper matches the decoded path; Envoy routes on the path as sent, normalised (RFC 3986
    unreserved characters decoded, other escapes kept with the client's hex case, and characters
    that must be escaped, such as non-ASCII and space, escaped in upper case). A character
    other than an unreserved one may therefore arrive escaped in either hex case, or raw where
    normalisation leaves it raw."""
    if char in _UNRESERVED or char == "/":
        return char if char.isalnum() else escape(char)
    escaped = "".join(
        "%" + "".join(f"[{h}{h.lower()}]" if h.isalpha() else h for h in f"{byte:02X}")
        for byte in char.encode("utf-8")
    )
    if char != "%" and normalize_path("/" + char) == "/" + char:
        return f"(?:{escape(char)}|{escaped})"
    return escaped


def _plain(path: str) -> bool:
    """Whether a path literal is one Envoy's normalised path can only hold as written."""
    return all(c in _UNRESERVED or c == "/" for c in path)


def _wildcard_path_regex(path: str) -> str | None:
    """Skipper's `Path("/a/:id/*rest")` as a full-match regex, or None without wildcards and
    without characters a client may send escaped (see `_char_regex`)."""
    segments = path.split("/")
    if not any(s.startswith((":", "*")) for s in segments) and _plain(path):
        return None
    out: list[str] = []
    for i, segment in enumerate(segments):
        if segment.startswith("*"):
            if i != len(segments) - 1:
                raise _Refused(f"{_INVALID}: free wildcard param should be last")
            # "/a/*rest" is the catch-all below "/a/": a non-empty rest ("/a" and "/a/" are
            # other nodes of Skipper's tree).
            return "/".join(out) + "/.+"
        out.append("[^/]+" if segment.startswith(":") else "".join(map(_char_regex, segment)))
    return "/".join(out)


def _query_aware(pattern: str) -> str:
    """`pattern` for a `:path` regex: a final `$` also ends at the query string."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + "(?:[?]|$)"
    return pattern


# --- client addresses ----------------------------------------------------------------------------


def _digits_range(lo: str, hi: str) -> str:
    """A regex for the decimal numbers lo..hi, both of the same length."""
    if lo == hi:
        return lo
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    if lo[0] == hi[0]:
        rest = _digits_range(lo[1:], hi[1:])
        return lo[0] + (rest if rest.isdigit() or "|" not in rest else f"(?:{rest})")
    n = len(lo) - 1
    parts: list[str] = []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * n:
        parts.append(lo[0] + _group(_digits_range(lo[1:], "9" * n)))
        first += 1
    tail = ""
    if hi[1:] != "9" * n:
        tail = hi[0] + _group(_digits_range("0" * n, hi[1:]))
        last -= 1
    if first <= last:
        digit = str(first) if first == last else f"[{first}-{last}]"
        parts.append(digit + ("[0-9]" if n == 1 else f"[0-9]{{{n}}}"))
    if tail:
        parts.append(tail)
    return "|".join(parts)


def _group(pattern: str) -> str:
    return f"(?:{pattern})" if "|" in pattern else pattern


def number_range_regex(lo: int, hi: int) -> str:
    """A regex for the decimal integers lo..hi (inclusive, no leading zeros, 0 <= lo <= hi)."""
    parts: list[str] = []
    start = lo
    while start <= hi:
        width = len(str(start))
        end = min(hi, 10**width - 1)
        parts.append(_digits_range(str(start), str(end)))
        start = end + 1
    return "|".join(parts)


def cidr_regex(network: ipaddress.IPv4Network) -> str:
    """A regex for the dotted-quad text of the addresses in `network`."""
    octets = str(network.network_address).split(".")
    full, rest = divmod(network.prefixlen, 8)
    out = [escape(o) for o in octets[:full]]
    if full < 4:
        low = int(octets[full])
        high = low | (0xFF >> rest)
        out.append("[0-9]{1,3}" if rest == 0 else _group(number_range_regex(low, high)))
        out.extend("[0-9]{1,3}" for _ in range(full + 1, 4))
    return "\\.".join(out)


def _networks(call: Call) -> list[ipaddress.IPv4Network]:
    values = _strings(call)
    networks: list[ipaddress.IPv4Network] = []
    for value in values:
        try:
            if "/" in value:
                network = ipaddress.ip_network(value, strict=False)
            else:
                address = ipaddress.ip_address(value)
                network = ipaddress.ip_network(address)
        except ValueError:
            raise _Refused(f"{_INVALID}: {value!r} is not an IP address or CIDR") from None
        if not isinstance(network, ipaddress.IPv4Network):
            raise _Refused(
                f"IPv6 network {value!r} is not supported: the client address is matched as "
                "X-Forwarded-For text, which cannot be done reliably for IPv6"
            )
        networks.append(network)
    return networks


_ENTRY_SPACE = "[ \\t]*"
# Envoy sets this to the client address it trusts (the peer, with no trusted hops) and removes
# any a client sends.
EXTERNAL_ADDRESS = "x-envoy-external-address"
# The client address a RouteGroup `loopback` hop determined, sent along with the looped request.
# It counts only where the peer is Envoy's own loopback hop (OWN_HOP_SOURCE_ADDRESS), which no
# client connects from, so a client sending it claims nothing; no filter may name it (it holds
# the loop mark's name).
LOOPBACK_CLIENT_HEADER = "x-turnout-loopback-client"


def _address_matches(
    name: str, networks: Sequence[ipaddress.IPv4Network]
) -> tuple[MatchVariant, ...]:
    # Skipper: no argument matches any address.
    ip = "(?:" + "|".join(cidr_regex(n) for n in networks) + ")" if networks else "[^,]*"
    entry = f"{_ENTRY_SPACE}{ip}{_ENTRY_SPACE}"
    peer = HeaderMatch(EXTERNAL_ADDRESS, StringMatchKind.REGEX, entry)
    _checked_regex(entry, "the address regex for these networks")
    if name == "ClientIP":
        # On the second hop of a loop the peer is Envoy itself; the client is the one the first
        # hop saw, as Skipper's in-process loop keeps it.
        own_hop = HeaderMatch(EXTERNAL_ADDRESS, StringMatchKind.EXACT, OWN_HOP_SOURCE_ADDRESS)
        looped = HeaderMatch(LOOPBACK_CLIENT_HEADER, StringMatchKind.REGEX, entry)
        not_own_hop = replace(own_hop, invert=True)
        return (MatchVariant((peer, not_own_hop)), MatchVariant((own_hop, looped)))
    # Source: the first entry the client sent; SourceFromLast: the last one it sent, just before
    # the one Envoy appended.
    sent = f"{entry},.*" if name == "Source" else f"(?:.*,)?{entry},[^,]*"
    _checked_regex(sent, "the X-Forwarded-For regex for these networks")
    # With one entry, X-Forwarded-For holds only what Envoy appended: the client sent none, and
    # Skipper then looks at the peer.
    only_appended = HeaderMatch("x-forwarded-for", StringMatchKind.REGEX, "[^,]*")
    return (
        MatchVariant((HeaderMatch("x-forwarded-for", StringMatchKind.REGEX, sent),)),
        MatchVariant((only_appended, peer)),
    )


# --- cookies -------------------------------------------------------------------------------------


def cookie_regex(name: str, value_pattern: str) -> str:
    """A `cookie` header regex: a cookie `name` whose value `value_pattern` finds (Go search)."""
    body = value_pattern
    head, tail = "[^;]*", "[^;]*"
    if body.startswith("^"):
        body, head = body[1:], ""
    if body.endswith("$") and not body.endswith("\\$"):
        body, tail = body[:-1], ""
    return f'(?:.*;)?{_ENTRY_SPACE}{escape(name)}="?{head}(?:{body}){tail}"?(?:;.*)?'


def _cookie_equals(name: str, value: str) -> HeaderMatch:
    return HeaderMatch("cookie", StringMatchKind.REGEX, cookie_regex(name, f"^{escape(value)}$"))


def _cookie_absent(name: str) -> HeaderMatch:
    return HeaderMatch(
        "cookie",
        StringMatchKind.REGEX,
        f"(?:.*;)?{_ENTRY_SPACE}{escape(name)}=.*",
        invert=True,
        treat_missing_as_empty=True,
    )


# --- the translation -----------------------------------------------------------------------------


@dataclass
class _State:
    tree: tuple[str, str] | None = None  # (name, argument)
    path_regexps: list[str] = field(default_factory=list)
    method: str | None = None
    methods: list[str] | None = None
    headers: dict[str, list[HeaderMatch]] = field(default_factory=dict)
    header_names_exact: set[str] = field(default_factory=set)
    header_names_regexp: set[str] = field(default_factory=set)
    other: list[HeaderMatch] = field(default_factory=list)
    query: list[QueryMatch] = field(default_factory=list)
    fraction: float | None = None
    traffic_drawn: bool = False
    segment_start: float = 0.0
    variants: list[tuple[MatchVariant, ...]] = field(default_factory=list)
    weight: int = 0
    never: bool = False


def translate_predicates(calls: Sequence[Call]) -> MatchTranslation:
    """The graph match of a route's predicates, with a problem for each one that cannot be
    translated (the others are still translated, so every problem is reported at once)."""
    state = _State()
    problems: list[CallProblem] = []
    for index, call in enumerate(calls):
        handler = _HANDLERS.get(call.name)
        if handler is None:
            problems.append(CallProblem(call.name, index, _unsupported(call.name)))
            continue
        try:
            handler(state, call)
            if call.name == "Traffic" and state.segment_start > 0:
                raise _Refused(
                    "cannot be expressed with TrafficSegment(min > 0, max): Envoy draws one "
                    "random value per request and a route compares it with one threshold"
                )
        except _Refused as err:
            problems.append(CallProblem(call.name, index, f"predicate {call.name}: {err}"))
    path: PathMatch | None = None
    path_headers: list[HeaderMatch] = []
    try:
        path, path_headers = _path_conditions(state)
    except _Refused as err:
        problems.append(CallProblem("PathRegexp", _index_of(calls, "PathRegexp"), str(err)))
    headers: list[HeaderMatch] = list(path_headers)
    if state.method is not None:
        headers.append(HeaderMatch(":method", StringMatchKind.EXACT, state.method))
    if state.methods is not None:
        alternatives = "|".join(escape(m) for m in sorted(set(state.methods)))
        headers.append(HeaderMatch(":method", StringMatchKind.REGEX, alternatives))
    for name in sorted(state.headers):
        headers.extend(state.headers[name])
    headers.extend(state.other)
    variants: tuple[MatchVariant, ...] = (MatchVariant(),)
    for options in state.variants:
        variants = tuple(
            MatchVariant(a.headers + b.headers, _times(a.fraction, b.fraction))
            for a in variants
            for b in options
        )
    weight = state.weight
    weight += 1 if state.method is not None else 0
    weight += len(state.path_regexps)
    weight += len(state.header_names_exact) + len(state.header_names_regexp)
    never = state.never or state.fraction == 0.0
    tree_path = state.tree[1] if state.tree is not None else None
    return MatchTranslation(
        path=path,
        headers=tuple(headers),
        query=tuple(state.query),
        fraction=state.fraction,
        variants=variants,
        weight=weight,
        never=never,
        tree_path=tree_path,
        problems=tuple(problems),
        tree_subtree=state.tree is not None and state.tree[0] == "PathSubtree",
        traffic_drawn=state.traffic_drawn,
        segment_start=state.segment_start,
    )


def _index_of(calls: Sequence[Call], name: str) -> int:
    return next((i for i, c in enumerate(calls) if c.name == name), 0)


def _unsupported(name: str) -> str:
    return (
        f"predicate {name} is not supported: turnout translates only predicates Envoy can "
        "express, listed in docs/dialects/routegroup.md"
    )


def _path_conditions(state: _State) -> tuple[PathMatch | None, list[HeaderMatch]]:
    regexps = list(state.path_regexps)
    path: PathMatch | None = None
    if state.tree is not None:
        name, value = state.tree
        if name == "PathSubtree":
            base = _subtree_prefix(value)
            wildcard = _wildcard_path_regex(base) if base else None
            if wildcard is not None:
                path = PathMatch(PathMatchKind.REGEX, wildcard + "(?:/.*)?")
            else:
                path = PathMatch(PathMatchKind.SEGMENT_PREFIX, base or "/")
        else:
            wildcard = _wildcard_path_regex(value)
            if wildcard is None:
                # A literal path: whether each PathRegexp finds it is known now.
                for pattern in regexps:
                    if re2.search(pattern, value) is None:
                        state.never = True
                return PathMatch(PathMatchKind.EXACT, value), []
            path = PathMatch(PathMatchKind.REGEX, wildcard)
    elif regexps:
        first = regexps.pop(0)
        path = PathMatch(PathMatchKind.REGEX, search_regex(first))
        _checked_regex(path.value, f"PathRegexp {first!r} as a path regex")
    if path is not None and path.kind is PathMatchKind.REGEX:
        _checked_regex(path.value, f"the path regex for {path.value!r}")
    headers = []
    for pattern in regexps:
        value = search_regex(_query_aware(pattern))
        _checked_regex(value, f"PathRegexp {pattern!r} as a :path regex")
        headers.append(HeaderMatch(":path", StringMatchKind.REGEX, value))
    return path, headers


def _subtree_prefix(value: str) -> str:
    # PathSubtree("/foo/*rest") is PathSubtree("/foo"); a trailing slash is ignored.
    segments = value.split("/")
    kept: list[str] = []
    for segment in segments:
        if segment.startswith("*"):
            break
        kept.append(segment)
    return "/".join(kept).rstrip("/")


def _tree(state: _State, call: Call) -> None:
    (value,) = _strings(call, 1)
    if not value.startswith("/"):
        raise _Refused(f"{_INVALID}: the path must start with '/'")
    if any(c < " " or c == "\x7f" for c in value):
        # No request path holds one (Go's server and Envoy refuse them), and Envoy refuses it.
        raise _Refused(f"{_INVALID}: the path {value!r} holds a control character")
    if state.tree is not None:
        raise _Refused("multiple tree predicates (Path, PathSubtree) in the route")
    _wildcard_path_regex(value)  # refuses a free wildcard that is not last, as Skipper does
    state.tree = (call.name, value)


def _path_regexp(state: _State, call: Call) -> None:
    (pattern,) = _strings(call, 1)
    state.path_regexps.append(_user_regex(pattern))


def _host(state: _State, call: Call) -> None:
    (pattern,) = _strings(call, 1)
    if pattern.startswith("*."):
        pattern = pattern.replace("*", _HOST_WILDCARD, 1)
    value = _checked_regex(search_regex(_user_regex(pattern)), "the Host regex")
    state.other.append(HeaderMatch(":authority", StringMatchKind.REGEX, value))
    state.weight += 1


def _host_any(state: _State, call: Call) -> None:
    hosts = _strings(call, minimum=1)
    if len(hosts) == 1:
        state.other.append(HeaderMatch(":authority", StringMatchKind.EXACT, hosts[0]))
    else:
        pattern = "|".join(escape(h) for h in hosts)
        _checked_regex(pattern, "the HostAny regex")
        state.other.append(HeaderMatch(":authority", StringMatchKind.REGEX, pattern))
    state.weight += 1


def _method(state: _State, call: Call) -> None:
    (method,) = _strings(call, 1)
    if not method:
        raise _Refused(f"{_INVALID}: empty method")
    state.method = method  # several Method predicates: the last one counts, as in Skipper


def _methods(state: _State, call: Call) -> None:
    if not call.args:
        raise _Refused("at least one method should be specified")
    values = [string_arg(a) for a in call.args]
    if any(v is None for v in values):
        raise _Refused("only string values are allowed")
    methods = [v.upper() for v in values if v is not None]
    for m in methods:
        if m not in _METHODS:
            raise _Refused(f"method: {m} is not allowed")
    state.methods = methods if state.methods is None else [m for m in state.methods if m in methods]
    state.weight += 1


def _header(state: _State, call: Call) -> None:
    name, value = _strings(call, 2)
    key = _header_key(name)
    # Skipper keeps one value per name (the last); other conditions on the name stay.
    kept = [h for h in state.headers.get(key, []) if h.kind is not StringMatchKind.EXACT]
    state.headers[key] = [*kept, HeaderMatch(key, StringMatchKind.EXACT, value)]
    state.header_names_exact.add(key)


def _header_regexp(state: _State, call: Call) -> None:
    name, pattern = _strings(call, 2)
    key = _header_key(name)
    value = _checked_regex(search_regex(_user_regex(pattern)), f"the {name} header regex")
    state.headers.setdefault(key, []).append(HeaderMatch(key, StringMatchKind.REGEX, value))
    state.header_names_regexp.add(key)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _header_key(name: str) -> str:
    if not _TOKEN.fullmatch(name):
        raise _Refused(f"{_INVALID}: {name!r} is not a header name")
    return name.lower()


def _cookie(state: _State, call: Call) -> None:
    name, pattern = _strings(call, 2)
    if not name or any(c in name for c in "=; \t\r\n"):
        raise _Refused(f"{_INVALID}: {name!r} is not a cookie name")
    value = _checked_regex(cookie_regex(name, _user_regex(pattern)), "the cookie regex")
    state.other.append(HeaderMatch("cookie", StringMatchKind.REGEX, value))
    state.weight += 1


def _query_param(state: _State, call: Call) -> None:
    if len(call.args) not in (1, 2):
        raise _Refused(f"{_INVALID}: expects a parameter name and an optional regexp")
    values = _strings(call)
    name = values[0]
    if not name:
        raise _Refused(f"{_INVALID}: empty parameter name")
    if len(values) == 1:
        state.query.append(QueryMatch(name, StringMatchKind.PRESENT))
    else:
        value = _checked_regex(search_regex(_user_regex(values[1])), "the query regex")
        state.query.append(QueryMatch(name, StringMatchKind.REGEX, value))
    state.weight += 1


def _source(state: _State, call: Call) -> None:
    variants = _address_matches(call.name, _networks(call))
    if len(variants) == 1:
        state.other.extend(variants[0].headers)
    else:
        state.variants.append(variants)
    state.weight += 1


def _traffic(state: _State, call: Call) -> None:
    if len(call.args) not in (1, 3):
        raise _Refused(f"{_INVALID}: expects a chance, or a chance, a cookie name and a group")
    chance = number_arg(call.args[0])
    if chance is None or not 0.0 <= chance <= 1.0:
        raise _Refused(f"{_INVALID}: the chance must be a number from 0 to 1")
    state.weight += 1
    if len(call.args) == 1:
        state.fraction = _times(state.fraction, chance)
        state.traffic_drawn = True
        return
    cookie, group = string_arg(call.args[1]), string_arg(call.args[2])
    if cookie is None or group is None:
        raise _Refused(f"{_INVALID}: the cookie name and the group must be strings")
    if not cookie or any(c in cookie for c in "=; \t\r\n"):
        raise _Refused(f"{_INVALID}: {cookie!r} is not a cookie name")
    # The group's cookie decides without a draw; without the cookie the chance does.
    state.variants.append(
        (
            MatchVariant((_cookie_equals(cookie, group),)),
            MatchVariant((_cookie_absent(cookie),), chance),
        )
    )


def _traffic_segment(state: _State, call: Call) -> None:
    if len(call.args) != 2:
        raise _Refused(f"{_INVALID}: expects a minimum and a maximum")
    low, high = number_arg(call.args[0]), number_arg(call.args[1])
    if low is None or high is None or not (0 <= low <= 1 and 0 <= high <= 1) or low > high:
        raise _Refused(f"{_INVALID}: expects 0 <= min <= max <= 1")
    if low > 0 and (state.fraction is not None or state.segment_start > 0):
        raise _Refused(
            f"TrafficSegment({low:g}, {high:g}) cannot be expressed with another Traffic or "
            "TrafficSegment predicate: Envoy draws one random value per request and a route "
            "compares it with one threshold"
        )
    # [min, max) is the threshold max once the routes of the lower segments come first: the
    # dialect orders them by `segment_start` and refuses segments that leave a gap below.
    state.segment_start = max(state.segment_start, low)
    state.never = state.never or low == high
    state.fraction = _times(state.fraction, high)
    # TrafficSegment declares the weight -1, cancelling the +1 of every predicate: 0 in all.


def _weight(state: _State, call: Call) -> None:
    if len(call.args) != 1:
        raise _Refused(f"{_INVALID}: expects one number")
    n = number_arg(call.args[0])
    if n is None or not math.isfinite(n):
        raise _Refused(f"{_INVALID}: expects one number")
    state.weight += int(n)


def _true(state: _State, call: Call) -> None:
    if call.args:
        raise _Refused(f"{_INVALID}: takes no arguments")
    state.weight += 1


def _false(state: _State, call: Call) -> None:
    _true(state, call)
    state.never = True


def _content_length(state: _State, call: Call) -> None:
    if len(call.args) != 2:
        raise _Refused(f"{_INVALID}: expects a minimum and a maximum length")
    low, high = number_arg(call.args[0]), number_arg(call.args[1])
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        raise _Refused(f"{_INVALID}: the lengths must be numbers")
    start, end = int(low), int(high)  # Go's int64(x) truncates
    if start < 0 or end < 0 or start >= end:
        raise _Refused(f"{_INVALID}: expects 0 <= min < max")
    if end >= 2**63:
        raise _Refused(f"{_INVALID}: the lengths must fit an int64")
    state.other.append(HeaderMatch("content-length", StringMatchKind.RANGE, f"{start},{end}"))
    if start == 0:
        # Go reads a request without Content-Length and without a chunked body as length 0.
        no_length = (
            HeaderMatch("content-length", StringMatchKind.PRESENT, invert=True),
            HeaderMatch("transfer-encoding", StringMatchKind.PRESENT, invert=True),
        )
        ranged = state.other.pop()
        state.variants.append((MatchVariant((ranged,)), MatchVariant(no_length)))
    state.weight += 1


_HANDLERS: dict[str, Callable[[_State, Call], None]] = {
    "Path": _tree,
    "PathSubtree": _tree,
    "PathRegexp": _path_regexp,
    "Host": _host,
    "HostAny": _host_any,
    "Method": _method,
    "Methods": _methods,
    "Header": _header,
    "HeaderRegexp": _header_regexp,
    "Cookie": _cookie,
    "QueryParam": _query_param,
    "Source": _source,
    "SourceFromLast": _source,
    "ClientIP": _source,
    "Traffic": _traffic,
    "TrafficSegment": _traffic_segment,
    "Weight": _weight,
    "True": _true,
    "False": _false,
    "ContentLengthBetween": _content_length,
}

"""The evaluator: graph + request -> decision, with the reason each earlier route was passed over.

It follows Envoy's semantics for what the translator emits (virtual host selection, first-match
route order, header/query matcher rules), so differential tests can hold Envoy to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import re2

from turnout.graph.model import (
    DirectResponse,
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
)


@dataclass(frozen=True, slots=True)
class Request:
    host: str
    path: str = "/"
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    listener: str = "ingress_http"

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

    @property
    def status(self) -> int:
        """The status Envoy answers with when the decision is not a forward."""
        if self.route is None:
            return 404
        action = self.route.action
        if isinstance(action, DirectResponse):
            return action.status
        if isinstance(action, Redirect):
            return action.status
        return 200

    @property
    def clusters(self) -> tuple[tuple[str, int], ...]:
        if self.route is not None and isinstance(self.route.action, Forward):
            return tuple((c.cluster, c.weight) for c in self.route.action.clusters)
        return ()


def _strip_port(host: str) -> str:
    host = host.lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end >= 0 else host
    return host.rsplit(":", 1)[0] if ":" in host else host


def select_virtual_host(listener: Listener, host: str) -> VirtualHost | None:
    """Envoy's order: exact domain, then the longest `*.suffix` wildcard, then `*`."""
    host = _strip_port(host)
    best: VirtualHost | None = None
    best_len = -1
    catch_all: VirtualHost | None = None
    for vh in listener.virtual_hosts:
        name = vh.hostname.lower()
        if name == "*":
            catch_all = vh
        elif name.startswith("*"):
            suffix = name[1:]
            if host.endswith(suffix) and len(host) > len(suffix) and len(suffix) > best_len:
                best, best_len = vh, len(suffix)
        elif name == host:
            return vh
    return best or catch_all


def _string_match(kind: StringMatchKind, expected: str, actual: str, ignore_case: bool) -> bool:
    if kind is StringMatchKind.REGEX:
        return _regex(expected).fullmatch(actual) is not None
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


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re2._Regexp:
    return re2.compile(pattern)


def header_matches(m: HeaderMatch, request: Request) -> bool:
    """Envoy's HeaderUtility::matchHeaders, including its rules for a missing header."""
    values = request.header_values(m.name)
    if not values and not m.treat_missing_as_empty:
        # A missing header only satisfies "present: false" (or an inverted "present").
        return m.kind is StringMatchKind.PRESENT and m.invert
    if m.kind is StringMatchKind.PRESENT:
        matched = bool(values)
    else:
        # Envoy matches several values of one header as one comma-joined string.
        matched = _string_match(m.kind, m.value, ",".join(values), m.ignore_case)
    return matched != m.invert


def query_params(query: str) -> list[tuple[str, str]]:
    """Envoy's `QueryParamsMulti::parseQueryString`: split at "&", then at the first "=", and
    nothing decoded (route matching sees `a%2Fb` and `a+b` as written)."""
    out: list[tuple[str, str]] = []
    for param in query.split("&") if query else ():
        name, _, value = param.partition("=")
        out.append((name, value))
    return out


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
    return _regex(p.value).fullmatch(path) is not None


def _host_fits(vh: VirtualHost, host: str) -> bool:
    if vh.hostname_match is not HostnameMatch.WILDCARD_ONE_LABEL:
        return True
    host = _strip_port(host)
    suffix = vh.hostname[1:].lower()
    label = host[: len(host) - len(suffix)] if host.endswith(suffix) else ""
    return bool(label) and "." not in label


def route_miss_reason(route: Route, request: Request, vh: VirtualHost) -> str | None:
    """Why `route` does not match `request`, or None when it matches."""
    path = request.path_only
    if not path_matches(route.match, path):
        p = route.match.path
        return f"path {path!r} does not match {p.kind.value} {p.value!r}"
    if not _host_fits(vh, request.host):
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


def evaluate(graph: RoutingGraph, request: Request) -> Decision:
    listener = next((lst for lst in graph.listeners if lst.name == request.listener), None)
    if listener is None:
        return Decision(None, None, None)
    vh = select_virtual_host(listener, request.host)
    if vh is None:
        return Decision(listener, None, None)
    misses: list[Miss] = []
    for route in vh.routes:
        reason = route_miss_reason(route, request, vh)
        if reason is None:
            return Decision(listener, vh, route, tuple(misses))
        misses.append(Miss(route, reason))
    return Decision(listener, vh, None, tuple(misses))


def make_request(
    host: str,
    path: str = "/",
    method: str = "GET",
    headers: Sequence[tuple[str, str]] | dict[str, str] = (),
    listener: str = "ingress_http",
) -> Request:
    pairs = tuple(headers.items()) if isinstance(headers, dict) else tuple(headers)
    return Request(host=host, path=path, method=method.upper(), headers=pairs, listener=listener)

"""HTTPRoute rules -> graph routes with their precedence keys (apis/v1/httproute_types.go).

`read_httproute` reads one HTTPRoute once and `ReadHTTPRoute.compile` makes its routes for one
listener (the listener's port and scheme only matter to redirects). Every match of every rule
becomes a graph route (matches are ORed, the conditions of one match ANDed); a rule without
matches has the default match, PathPrefix "/".

- **Paths.** Exact is the exact path; PathPrefix is a prefix by path segment (`/v2` matches
  `/v2`, `/v2/` and `/v2/x`, never `/v2x`; a trailing "/" in the value does not count), Envoy's
  `path_separated_prefix`; RegularExpression is RE2 over the whole path.
- **Headers** are matched by lower-cased name (names are case-insensitive) and only the first entry
  of a name counts; **query parameters** by exact name, first entry of a name counting; the
  **method** is an exact `:method` match.
- **Filters** (rule and backendRef level): RequestHeaderModifier and ResponseHeaderModifier (set
  overwrites, add appends, remove removes; `Host` can only be set, as a host rewrite),
  RequestRedirect (the Location rules below), URLRewrite (hostname, ReplaceFullPath,
  ReplacePrefixMatch with the spec's segment semantics), RequestMirror (percent or fraction; a
  mirror whose backendRef does not resolve is left out and reported), ExtensionRef (no extension
  kind exists in turnout: `ResolvedRefs` False `InvalidKind`, and the requests the rule handles
  are answered 500, as the spec requires for an unresolvable filter), CORS (Envoy's CORS filter
  for the route: it answers preflights and adds the headers; a `*` host wildcard in an origin
  matches any labels to its left). At backendRef level the header modifiers and a hostname-only
  URLRewrite are honoured (Envoy has no per-backend path rewrite, redirect or CORS).
- **Backends.** Shares are split by weight; weight 0 gets nothing; a ref that does not resolve
  keeps its share, answered 500 (`INVALID_BACKEND`); a rule whose shares all go nowhere (no
  backendRefs, every weight 0, every ref invalid) answers 500.
- **Timeouts.** `request` is the whole request (Envoy's route timeout), `backendRequest` one
  upstream attempt (per-try timeout); `0s` disables either; backendRequest may not exceed request.

A RequestRedirect rule answers itself: its ResponseHeaderModifier applies to the redirect (Envoy
adds a route's response headers to the redirect it sends). RequestHeaderModifier, RequestMirror
and `timeouts` are accepted, as the spec allows them, and have no effect: no request goes
upstream. A CORS filter is accepted too and has no effect either (see below).

Redirect Location (HTTPRequestRedirectFilter doc): an unset scheme keeps the request's; an unset
hostname keeps the request's Host; with no port, a set scheme means that scheme's well-known port
and an unset scheme the listener's port; a port that is the scheme's default is left out of the
Location where Envoy allows it (with a hostname, or when the request's Host cannot carry another
port).

ReplacePrefixMatch. Envoy replaces the matched prefix as a string, which gives the spec's results
when the replacement is not empty (`/foo` -> `/xyz`: `/foo/bar` -> `/xyz/bar`; a trailing "/" of
the replacement is dropped, `/foo/` -> `/xyz/`). Replacing by "" or "/" would leave `//bar`, so
such a match becomes two graph routes: the exact path, rewritten to "/", and the prefix with its
slash, `/foo/`, replaced by "/" (`/foo/bar` -> `/bar`); both keep the precedence of the match
they came from. On PathPrefix "/" the replacement gets a trailing slash instead (`/bar` ->
`/xyz/bar`).

Problems. A value the CRD would refuse, or one turnout cannot serve, rejects the whole route
(`accepted` False, `Accepted` `UnsupportedValue` naming the field); unresolvable references only
mark it (`ResolvedRefs` False with the spec's reason) and answer 500 for what they would serve.

Where turnout deliberately differs from the spec:
- an invalid rule rejects the whole route instead of being dropped alone (the spec's optional
  `PartiallyInvalid`): the API server would have refused the whole object for the same value;
- a CORS filter on a RequestRedirect rule is not applied: Envoy's CORS filter ignores routes
  that redirect, so neither preflights nor redirects get CORS headers from it (a browser then
  refuses a cross-origin redirect);
- when a redirect must change the port to the scheme's default without changing the hostname,
  the Location carries it (`https://host:443/`): Envoy either writes the port it is given or
  keeps the request's (the spec says SHOULD NOT; the conformance suite accepts both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from turnout.dialects.gatewayapi.backend_refs import resolve_backend_ref
from turnout.dialects.gatewayapi.conditions import RouteProblem
from turnout.dialects.gatewayapi.filters import (
    CORS,
    EXTENSION_REF,
    MAX_PATH,
    REQUEST_HEADER_MODIFIER,
    REQUEST_MIRROR,
    REQUEST_REDIRECT,
    RESPONSE_HEADER_MODIFIER,
    URL_REWRITE,
    FilterSet,
    PathModifier,
    RedirectSpec,
    SpecReader,
    check_rule_names,
    parse_duration,
    path_value_problem,
    read_filters,
    read_header_matches,
    read_query_matches,
)
from turnout.dialects.gatewayapi.precedence import RankedRoute, http_match_key, order_routes
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.graph.dialect import CompileContext
from turnout.graph.model import (
    INVALID_BACKEND,
    BackendPolicies,
    DirectResponse,
    Forward,
    HeaderMatch,
    HostRewrite,
    Mirror,
    PathMatch,
    PathMatchKind,
    PathRewrite,
    QueryMatch,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    StringMatchKind,
    Timeouts,
    WeightedCluster,
)
from turnout.graph.regex import regex_error
from turnout.objects import KubeObject

__all__ = [
    "CompiledRoute",
    "ListenerInfo",
    "RankedRoute",
    "ReadHTTPRoute",
    "compile_httproute",
    "order_routes",
    "read_httproute",
]

# What a rule answers when it has nowhere to send a request (HTTPRouteRule.BackendRefs doc).
NO_BACKEND_STATUS = 500

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
PATH_TYPES = ("Exact", "PathPrefix", "RegularExpression")
MAX_RULES = 16
MAX_MATCHES = 64
MAX_TOTAL_MATCHES = 128
MAX_BACKEND_REFS = 16

HTTP_FILTERS = (
    REQUEST_HEADER_MODIFIER,
    RESPONSE_HEADER_MODIFIER,
    REQUEST_MIRROR,
    REQUEST_REDIRECT,
    URL_REWRITE,
    CORS,
    EXTENSION_REF,
)
_BACKEND_UNSUPPORTED = {
    CORS: "a CORS filter on a backendRef is not supported by turnout (set it on the rule)",
    REQUEST_REDIRECT: "a RequestRedirect filter on a backendRef is not supported by turnout",
    REQUEST_MIRROR: "a RequestMirror filter on a backendRef is not supported by turnout",
}

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class ListenerInfo:
    port: int  # the Gateway listener's port (redirect port rules)
    scheme: str  # "http" | "https"


@dataclass(frozen=True, slots=True)
class CompiledRoute:
    routes: tuple[RankedRoute, ...]
    problems: tuple[RouteProblem, ...]  # ResolvedRefs + Accepted/UnsupportedValue problems
    accepted: bool  # False: the spec says reject the whole route


@dataclass(frozen=True, slots=True)
class _Match:
    """One HTTPRouteMatch, read."""

    field: str
    path: PathMatch
    headers: tuple[HeaderMatch, ...]
    query: tuple[QueryMatch, ...]
    method: str | None

    def route_match(self, path: PathMatch | None = None) -> RouteMatch:
        headers = self.headers
        if self.method is not None:
            headers = (HeaderMatch(":method", StringMatchKind.EXACT, self.method), *headers)
        return RouteMatch(path=path or self.path, headers=headers, query=self.query)


def compile_httproute(
    route: KubeObject, listener: ListenerInfo, ctx: CompileContext, grants: ReferenceGrants
) -> CompiledRoute:
    return read_httproute(route, ctx, grants).compile(listener)


@dataclass(frozen=True, slots=True)
class _ReadRule:
    """One rule with everything but its redirect's Location, which depends on the listener."""

    index: int
    matches: tuple[_Match, ...]
    filters: FilterSet
    redirect: RedirectSpec | None
    action: RouteAction | None
    policies: RoutePolicies
    # Each match as a graph match, and the precedence keys of the routes it becomes (parts), made
    # once: a redirecting rule is made again for each listener port, with the same matches.
    wholes: tuple[RouteMatch, ...]
    keys: tuple[tuple[tuple[object, ...], ...], ...]
    sources: tuple[RouteSource, ...]


@dataclass(frozen=True, slots=True)
class ReadHTTPRoute:
    """An HTTPRoute read once. A route attaches to up to 32 listeners (64 per Gateway): its
    matches, filters and backendRefs are read and resolved once, not once per listener port."""

    route: KubeObject
    rules: tuple[_ReadRule, ...]
    problems: tuple[RouteProblem, ...]
    # The compile for every listener when the route is refused or no rule redirects (then the
    # listener changes nothing).
    same_everywhere: CompiledRoute | None

    def compile(self, listener: ListenerInfo) -> CompiledRoute:
        if self.same_everywhere is not None:
            return self.same_everywhere
        return _compiled(self.route, self.rules, self.problems, listener)


def _compiled(
    route: KubeObject,
    rules: Sequence[_ReadRule],
    problems: tuple[RouteProblem, ...],
    listener: ListenerInfo | None,
) -> CompiledRoute:
    ranked = [r for rule in rules for r in _rule_routes(route, listener, rule)]
    return CompiledRoute(routes=tuple(ranked), problems=problems, accepted=True)


def read_httproute(
    route: KubeObject, ctx: CompileContext, grants: ReferenceGrants
) -> ReadHTTPRoute:
    r = SpecReader()
    spec = r.mapping(route.spec if route.spec is not None else {}, "spec") or {}
    r.check_fields(spec, "spec", frozenset({"parentRefs", "hostnames", "rules"}))
    rules = _rules(r, spec)
    check_rule_names(r, rules)
    total = sum(
        len(m.get("matches") or ()) for _, m in rules if isinstance(m.get("matches"), list | tuple)
    )
    if total > MAX_TOTAL_MATCHES:
        r.field_error("spec.rules", f"may have at most {MAX_TOTAL_MATCHES} matches in total")
        # The API server refuses the route on this count alone: compiling its (up to 1,024)
        # matches would only spend time on an object that serves nothing.
        return _refused(route, tuple(r.problems))
    read = [
        _read_rule(r, route, ctx, grants, i, where, rule) for i, (where, rule) in enumerate(rules)
    ]
    kept = tuple(rule for rule in read if rule is not None)
    problems = tuple(r.problems)
    if r.rejected:
        return _refused(route, problems)
    if any(rule.redirect is not None for rule in kept):
        return ReadHTTPRoute(route, kept, problems, None)
    return ReadHTTPRoute(route, kept, problems, _compiled(route, kept, problems, None))


def _refused(route: KubeObject, problems: tuple[RouteProblem, ...]) -> ReadHTTPRoute:
    refused = CompiledRoute(routes=(), problems=problems, accepted=False)
    return ReadHTTPRoute(route, (), problems, refused)


def _rules(r: SpecReader, spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    if spec.get("rules") is None:
        # The CRD's default: one rule matching every path, with no backends.
        return [("spec.rules[0]", {})]
    return r.list_items(spec, "rules", "spec", MAX_RULES)


# --- rules ---------------------------------------------------------------------------------------


def _read_rule(
    r: SpecReader,
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    index: int,
    where: str,
    rule: Mapping[str, Any],
) -> _ReadRule | None:
    before = len(r.problems)
    r.check_fields(
        rule,
        where,
        frozenset({"name", "matches", "filters", "backendRefs", "timeouts"}),
        refused=frozenset({"retry", "sessionPersistence"}),
    )
    matches = _matches(r, rule, where)
    filters = read_filters(r, rule, where, allowed=HTTP_FILTERS)
    timeouts = _timeouts(r, rule, where)
    refs = r.list_items(rule, "backendRefs", where, MAX_BACKEND_REFS)
    _check_combinations(r, filters, matches, refs, where)
    if r.rejected_since(before):
        return None
    action: RouteAction | None = None
    websockets = False
    # An unresolvable ExtensionRef must not be skipped: it answers even a redirecting rule.
    redirect = filters.redirect if not filters.unresolved_extension else None
    if redirect is None:
        action, websockets = _backends(r, route, ctx, grants, refs, filters)
    mirrors = _mirrors(r, route, ctx, grants, filters)
    policies = rule_policies(filters, timeouts, mirrors, websockets)
    wholes = tuple(m.route_match() for m in matches)
    modifier = redirect.path if redirect is not None else None
    if redirect is None and filters.rewrite is not None:
        modifier = filters.rewrite.path
    keys = tuple(
        tuple(
            http_match_key(
                whole, has_method=m.method is not None, route=route, rule=index, index=j, part=part
            )
            for part in range(_parts(m, modifier))
        )
        for j, (m, whole) in enumerate(zip(matches, wholes, strict=True))
    )
    ref = route.ref
    sources = tuple(RouteSource(ref, m.field) for m in matches)
    return _ReadRule(
        index, tuple(matches), filters, redirect, action, policies, wholes, keys, sources
    )


def _parts(m: _Match, modifier: PathModifier | None) -> int:
    """How many graph routes one match becomes: a ReplacePrefixMatch can split it in two."""
    if modifier is None or modifier.full:
        return 1
    return len(_prefix_replacements(m.path, modifier.value))


def _rule_routes(
    route: KubeObject, listener: ListenerInfo | None, rule: _ReadRule
) -> list[RankedRoute]:
    """The rule's graph routes; `listener` is None only for a rule that does not redirect."""
    out: list[RankedRoute] = []
    redirect: tuple[Redirect, RoutePolicies] | None = None
    if rule.redirect is not None:
        assert listener is not None
        # What Envoy applies to a redirect it answers: the response headers. The rest of the
        # rule's policies act on the upstream request, which a redirect never makes; Envoy's
        # CORS filter skips routes without a route action, so a CORS policy would only mislead.
        policies = RoutePolicies(response_headers=rule.policies.response_headers)
        redirect = (redirect_action(rule.redirect, listener), policies)
    for j, m in enumerate(rule.matches):
        source = rule.sources[j]
        whole = rule.wholes[j]
        if rule.redirect is not None and redirect is not None:
            variants = _redirect_variants(m, whole, rule.redirect, *redirect)
        else:
            variants = _rewrite_variants(m, whole, rule.filters, rule.policies, rule.action)
        # The match as written ranks every graph route it became (a split ReplacePrefixMatch
        # is still one PathPrefix match for the spec's precedence).
        for key, (match, variant_action, variant_policies) in zip(
            rule.keys[j], variants, strict=True
        ):
            out.append(RankedRoute(Route(match, variant_action, source, variant_policies), key))
    return out


def _matches(r: SpecReader, rule: Mapping[str, Any], where: str) -> list[_Match]:
    if rule.get("matches") is None:
        return [_Match(where, PathMatch(PathMatchKind.PREFIX, "/"), (), (), None)]
    items = r.list_items(rule, "matches", where, MAX_MATCHES)
    if not items and r.sequence(rule, "matches", where) is not None:
        # An explicit empty list is the default too (the CRD defaults the field, not its items).
        return [_Match(where, PathMatch(PathMatchKind.PREFIX, "/"), (), (), None)]
    out = []
    for path, m in items:
        match = _match(r, m, path)
        if match is not None:
            out.append(match)
    return out


def _match(r: SpecReader, m: Mapping[str, Any], where: str) -> _Match | None:
    before = len(r.problems)
    r.check_fields(m, where, frozenset({"path", "headers", "queryParams", "method"}))
    path = _path(r, m, where)
    headers = read_header_matches(r, m, where)
    query = read_query_matches(r, m, where)
    method = r.enum(m, "method", where, METHODS, "") or None
    if path is None or len(r.problems) != before:
        return None
    return _Match(where, path, headers, query, method)


def _path(r: SpecReader, m: Mapping[str, Any], where: str) -> PathMatch | None:
    value = m.get("path")
    if value is None:
        return PathMatch(PathMatchKind.PREFIX, "/")
    where = f"{where}.path"
    p = r.mapping(value, where)
    if p is None:
        return None
    r.check_fields(p, where, frozenset({"type", "value"}))
    kind = r.enum(p, "type", where, PATH_TYPES, "PathPrefix")
    text = r.string(p, "value", where) if p.get("value") is not None else "/"
    if kind is None:
        return None
    if kind == "RegularExpression":
        problem = (
            f"must be at most {MAX_PATH} characters" if len(text) > MAX_PATH else regex_error(text)
        )
        if problem is not None:
            r.field_error(f"{where}.value", problem)
            return None
        return PathMatch(PathMatchKind.REGEX, text)
    problem = path_value_problem(text)
    if problem is not None:
        r.field_error(f"{where}.value", problem)
        return None
    if kind == "Exact":
        return PathMatch(PathMatchKind.EXACT, text)
    prefix = text.rstrip("/")
    # "/" matches every path: a plain prefix, which is also what Envoy needs for it.
    return PathMatch(PathMatchKind.SEGMENT_PREFIX, prefix) if prefix else PathMatch.prefix("/")


def _check_combinations(
    r: SpecReader,
    filters: FilterSet,
    matches: Sequence[_Match],
    refs: Sequence[object],
    where: str,
) -> None:
    """The CEL rules on HTTPRouteRule that tie filters to matches and backendRefs."""
    if filters.redirect is not None and refs:
        r.field_error(where, "RequestRedirect filter must not be used together with backendRefs")
    replace_prefix = (filters.redirect is not None and _is_prefix(filters.redirect.path)) or (
        filters.rewrite is not None and _is_prefix(filters.rewrite.path)
    )
    if replace_prefix and (len(matches) != 1 or matches[0].path.kind not in _PREFIX_KINDS):
        r.field_error(
            f"{where}.filters",
            "a ReplacePrefixMatch path modifier needs exactly one match, and it must be a "
            "PathPrefix match",
        )


_PREFIX_KINDS = (PathMatchKind.PREFIX, PathMatchKind.SEGMENT_PREFIX)


def _is_prefix(modifier: PathModifier | None) -> bool:
    return modifier is not None and not modifier.full


def _timeouts(r: SpecReader, rule: Mapping[str, Any], where: str) -> Timeouts | None:
    value = rule.get("timeouts")
    if value is None:
        return None
    where = f"{where}.timeouts"
    t = r.mapping(value, where)
    if t is None:
        return None
    r.check_fields(t, where, frozenset({"request", "backendRequest"}))
    seconds: dict[str, float | None] = {}
    for key in ("request", "backendRequest"):
        text = r.string(t, key, where)
        if not text:
            seconds[key] = None
            continue
        parsed = parse_duration(text)
        if parsed is None:
            r.field_error(
                f"{where}.{key}",
                f'"{text}" is not a duration (1 to 4 of <number><h|m|s|ms>, e.g. "1m30s")',
            )
        seconds[key] = parsed
    request, backend = seconds["request"], seconds["backendRequest"]
    if request is not None and backend is not None and request > 0 and backend > request:
        r.field_error(
            f"{where}.backendRequest",
            "backendRequest timeout cannot be longer than request timeout",
        )
        return None
    if request is None and backend is None:
        return None
    if request is None and backend:
        # Without a request timeout Envoy's default (15s) would cut a longer backendRequest;
        # the one attempt a rule makes is the whole request.
        request = backend
    return Timeouts(response_s=request, backend_request_s=backend)


# --- backends and mirrors ------------------------------------------------------------------------


def _backends(
    r: SpecReader,
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    refs: Sequence[tuple[str, Mapping[str, Any]]],
    rule_filters: FilterSet,
) -> tuple[RouteAction, bool]:
    return compile_backends(
        r,
        route,
        ctx,
        grants,
        refs,
        rule_filters,
        app="http",
        allowed=HTTP_FILTERS,
        unsupported=_BACKEND_UNSUPPORTED,
        status=NO_BACKEND_STATUS,
    )


def compile_backends(
    r: SpecReader,
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    refs: Sequence[tuple[str, Mapping[str, Any]]],
    rule_filters: FilterSet,
    *,
    app: str,
    allowed: Sequence[str],
    unsupported: Mapping[str, str],
    status: int,
) -> tuple[RouteAction, bool]:
    """A rule's action from its backendRefs (each with its own filters), and whether a backend
    asked for WebSocket upgrades. `status` answers when no share reaches a backend."""
    if rule_filters.unresolved_extension:
        return DirectResponse(status), False
    shares: list[WeightedCluster] = []
    websockets = False
    for where, ref in refs:
        backend_filters = read_filters(r, ref, where, allowed=allowed, unsupported=unsupported)
        policies = _backend_policies(r, backend_filters, where)
        resolved = resolve_backend_ref(route, _without_filters(ref), where, ctx, grants, app=app)
        if resolved.problem is not None:
            r.add(resolved.problem)
        websockets |= resolved.websockets
        cluster = resolved.cluster
        if cluster is None or backend_filters.unresolved_extension:
            cluster = INVALID_BACKEND
        live = cluster != INVALID_BACKEND
        shares.append(WeightedCluster(cluster, resolved.weight, policies if live else None))
    return _split(shares, status), websockets


def _without_filters(ref: Mapping[str, Any]) -> Mapping[str, Any]:
    return {k: v for k, v in ref.items() if k != "filters"}


def _split(shares: Sequence[WeightedCluster], status: int) -> RouteAction:
    """A Forward over the shares, or `status` when no share reaches a backend; an invalid
    backend's share inside the split answers `status` too (500 HTTP, 503 gRPC UNAVAILABLE)."""
    live = [s for s in shares if s.weight > 0]
    if not live or all(s.cluster == INVALID_BACKEND for s in live):
        return DirectResponse(status)
    return Forward(tuple(shares), invalid_backend_status=status)


def _backend_policies(r: SpecReader, f: FilterSet, where: str) -> BackendPolicies | None:
    host: str | None = None
    if f.rewrite is not None:
        if f.rewrite.path is not None:
            r.field_error(
                f"{where}.filters",
                "a URLRewrite path on a backendRef is not supported by turnout (only hostname)",
            )
            return None
        host = f.rewrite.hostname
    if host is None and f.request_headers is not None:
        host = f.request_headers.host
    if f.request_headers is None and f.response_headers is None and host is None:
        return None
    return BackendPolicies(
        request_headers=f.request_headers.policy if f.request_headers is not None else None,
        response_headers=f.response_headers.policy if f.response_headers is not None else None,
        host_rewrite=HostRewrite(literal=host) if host is not None else None,
    )


def mirrors_of(
    r: SpecReader,
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    filters: FilterSet,
    app: str,
) -> tuple[Mirror, ...]:
    """The mirrors whose backendRef resolves; the others are reported and left out."""
    out: list[Mirror] = []
    for spec in filters.mirrors:
        resolved = resolve_backend_ref(route, spec.ref, spec.field, ctx, grants, app=app)
        if resolved.problem is not None:
            r.add(resolved.problem)
        if resolved.cluster is None or spec.percent <= 0:
            continue
        out.append(Mirror(resolved.cluster, spec.percent))
    return tuple(out)


def _mirrors(
    r: SpecReader,
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    filters: FilterSet,
) -> tuple[Mirror, ...]:
    return mirrors_of(r, route, ctx, grants, filters, "http")


# --- policies, rewrites and redirects ------------------------------------------------------------


def rule_policies(
    f: FilterSet, timeouts: Timeouts | None, mirrors: tuple[Mirror, ...], websockets: bool
) -> RoutePolicies:
    """The policies of a rule's routes from its filters (a GRPCRoute's too: its filters are a
    subset of these)."""
    host = f.rewrite.hostname if f.rewrite is not None else None
    if host is None and f.request_headers is not None:
        host = f.request_headers.host
    return RoutePolicies(
        timeouts=timeouts,
        request_headers=f.request_headers.policy if f.request_headers is not None else None,
        response_headers=f.response_headers.policy if f.response_headers is not None else None,
        host_rewrite=HostRewrite(literal=host) if host is not None else None,
        mirrors=mirrors,
        websockets=websockets,
        cors=f.cors,
    )


Variant = tuple[RouteMatch, RouteAction, RoutePolicies]


def _rewrite_variants(
    m: _Match, whole: RouteMatch, f: FilterSet, policies: RoutePolicies, action: RouteAction | None
) -> list[Variant]:
    """`whole` is `m.route_match()`, made once."""
    assert action is not None
    modifier = f.rewrite.path if f.rewrite is not None else None
    if modifier is None:
        return [(whole, action, policies)]
    if modifier.full:
        rewrite = PathRewrite(full_path=modifier.value)
        return [(whole, action, replace(policies, path_rewrite=rewrite))]
    out: list[Variant] = []
    for path, prefix in _prefix_replacements(m.path, modifier.value):
        if prefix is None:
            p = policies
        elif path.kind is PathMatchKind.EXACT:
            p = replace(policies, path_rewrite=PathRewrite(full_path=prefix))
        else:
            p = replace(policies, path_rewrite=PathRewrite(prefix=prefix))
        out.append((m.route_match(path), action, p))
    return out


def _prefix_replacements(path: PathMatch, replacement: str) -> list[tuple[PathMatch, str | None]]:
    """ReplacePrefixMatch on a prefix match as (graph path match, Envoy prefix replacement)
    pairs; an EXACT match's replacement is the whole new path, None keeps the path."""
    prefix = path.value.rstrip("/")
    value = replacement.rstrip("/")
    if not prefix:
        return [(path, value + "/" if value else None)]
    if value:
        return [(path, value)]
    return [
        (PathMatch(PathMatchKind.EXACT, prefix), "/"),
        (PathMatch(PathMatchKind.PREFIX, prefix + "/"), "/"),
    ]


def _redirect_variants(
    m: _Match, whole: RouteMatch, spec: RedirectSpec, base: Redirect, policies: RoutePolicies
) -> list[Variant]:
    """`base` is the listener's Location without the path (`redirect_action`)."""
    modifier = spec.path
    if modifier is None:
        return [(whole, base, policies)]
    if modifier.full:
        return [(whole, replace(base, path=modifier.value), policies)]
    out: list[Variant] = []
    for path, prefix in _prefix_replacements(m.path, modifier.value):
        if prefix is None:
            action = base
        elif path.kind is PathMatchKind.EXACT:
            action = replace(base, path=prefix)
        else:
            action = replace(base, prefix=prefix)
        out.append((m.route_match(path), action, policies))
    return out


def redirect_action(spec: RedirectSpec, listener: ListenerInfo) -> Redirect:
    """The Location rules of HTTPRequestRedirectFilter, without the path."""
    scheme = spec.scheme
    final_scheme = scheme or listener.scheme
    if spec.port is not None:
        port = spec.port
    elif scheme is not None:
        port = _DEFAULT_PORTS[scheme]
    else:
        port = listener.port
    port_out: int | None = port
    if port == _DEFAULT_PORTS.get(final_scheme):
        # Envoy writes a port it is given, even the scheme's default. Leave it out where the
        # Location cannot then carry another one: a new hostname has no port, and a request to
        # a listener on the default port carries no other port in its Host.
        same_listener = scheme in (None, listener.scheme) and listener.port == port
        if spec.hostname is not None or same_listener:
            port_out = None
    return Redirect(
        scheme=scheme,
        hostname=spec.hostname,
        port=port_out,
        status=spec.status,
    )

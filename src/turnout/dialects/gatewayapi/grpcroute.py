"""GRPCRoute rules -> graph routes with their precedence keys (apis/v1/grpcroute_types.go).

A gRPC call is an HTTP/2 POST to `/<service>/<method>`, so a method match is a path match:

| `method` | graph path |
|---|---|
| Exact, service and method | exact `/service/method` |
| Exact, service only | prefix `/service/` |
| Exact, method only | regex `/[^/]+/method` |
| RegularExpression | regex `/(?:service)/(?:method)`, an unset part being `[^/]+` |

A match without `method` (or a rule without matches) takes every call. Header matches are as for
HTTPRoute (case-insensitive names, the first entry of a name counting). Filters: the request and
response header modifiers, RequestMirror and ExtensionRef (unresolvable, as for HTTPRoute), at
rule and backendRef level (RequestMirror at rule level only). Backends speak h2c unless a
BackendTLSPolicy makes them TLS (`resolve_backend_ref(..., app="grpc")`).

Calls a rule cannot send anywhere (no backendRefs, all invalid, an unresolvable ExtensionRef) are
answered 503, which gRPC clients read as `UNAVAILABLE`, the status the spec asks for. So is the
share of an invalid backend inside a split (`GRPCRouteRule.BackendRefs`: "`UNAVAILABLE` statuses
MUST be returned for requests that would have otherwise been routed to an invalid backend"): the
route's Forward carries `invalid_backend_status` 503, translated to Envoy's per-route
`cluster_not_found_response_code` SERVICE_UNAVAILABLE.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.gatewayapi.filters import (
    EXTENSION_REF,
    REQUEST_HEADER_MODIFIER,
    REQUEST_MIRROR,
    RESPONSE_HEADER_MODIFIER,
    SpecReader,
    check_rule_names,
    read_filters,
    read_header_matches,
)
from turnout.dialects.gatewayapi.httproute import (
    CompiledRoute,
    ListenerInfo,
    compile_backends,
    mirrors_of,
    rule_policies,
)
from turnout.dialects.gatewayapi.precedence import RankedRoute, grpc_match_key
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.graph.dialect import CompileContext
from turnout.graph.model import (
    HeaderMatch,
    PathMatch,
    PathMatchKind,
    Route,
    RouteMatch,
    RouteSource,
)
from turnout.graph.regex import escape, regex_error
from turnout.objects import KubeObject

__all__ = ["compile_grpcroute"]

# What a rule answers when it has nowhere to send a call: gRPC clients read 503 as UNAVAILABLE.
NO_BACKEND_STATUS = 503

MAX_RULES = 16
MAX_MATCHES = 64
MAX_BACKEND_REFS = 16
MAX_NAME = 1024

GRPC_FILTERS = (REQUEST_HEADER_MODIFIER, RESPONSE_HEADER_MODIFIER, REQUEST_MIRROR, EXTENSION_REF)
_BACKEND_UNSUPPORTED = {
    REQUEST_MIRROR: "a RequestMirror filter on a backendRef is not supported by turnout",
}

# GRPCMethodMatch CEL rules for the Exact type.
_SERVICE = re.compile(r"(?i)^\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$")
_METHOD = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_ANY_SEGMENT = "[^/]+"


@dataclass(frozen=True, slots=True)
class _Match:
    field: str
    path: PathMatch
    headers: tuple[HeaderMatch, ...]
    service: str
    method: str


def compile_grpcroute(
    route: KubeObject, listener: ListenerInfo, ctx: CompileContext, grants: ReferenceGrants
) -> CompiledRoute:
    """`listener` is not used by GRPCRoute (it has no redirects); it keeps the signature of
    `compile_httproute`."""
    r = SpecReader()
    spec = r.mapping(route.spec if route.spec is not None else {}, "spec") or {}
    r.check_fields(spec, "spec", frozenset({"parentRefs", "hostnames", "rules"}))
    ranked: list[RankedRoute] = []
    rules = r.list_items(spec, "rules", "spec", MAX_RULES)
    check_rule_names(r, rules)
    for i, (where, rule) in enumerate(rules):
        ranked.extend(_compile_rule(r, route, ctx, grants, i, where, rule))
    accepted = not r.rejected
    return CompiledRoute(
        routes=tuple(ranked) if accepted else (),
        problems=tuple(r.problems),
        accepted=accepted,
    )


def _compile_rule(
    r: SpecReader,
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    index: int,
    where: str,
    rule: Mapping[str, Any],
) -> list[RankedRoute]:
    before = len(r.problems)
    r.check_fields(
        rule,
        where,
        frozenset({"name", "matches", "filters", "backendRefs"}),
        refused=frozenset({"sessionPersistence"}),
    )
    matches = _matches(r, rule, where)
    filters = read_filters(r, rule, where, allowed=GRPC_FILTERS)
    refs = r.list_items(rule, "backendRefs", where, MAX_BACKEND_REFS)
    if r.rejected_since(before):
        return []
    action, _ = compile_backends(
        r,
        route,
        ctx,
        grants,
        refs,
        filters,
        app="grpc",
        allowed=GRPC_FILTERS,
        unsupported=_BACKEND_UNSUPPORTED,
        status=NO_BACKEND_STATUS,
    )
    mirrors = mirrors_of(r, route, ctx, grants, filters, "grpc")
    policies = rule_policies(filters, None, mirrors, websockets=False)
    out: list[RankedRoute] = []
    for j, m in enumerate(matches):
        match = RouteMatch(path=m.path, headers=m.headers)
        key = grpc_match_key(
            service=m.service,
            method=m.method,
            headers=len(m.headers),
            route=route,
            rule=index,
            index=j,
        )
        source = RouteSource(route.ref, m.field)
        out.append(RankedRoute(Route(match, action, source, policies), key))
    return out


def _matches(r: SpecReader, rule: Mapping[str, Any], where: str) -> list[_Match]:
    every = [_Match(where, PathMatch.prefix("/"), (), "", "")]
    if rule.get("matches") is None:
        return every
    items = r.list_items(rule, "matches", where, MAX_MATCHES)
    if not items and r.sequence(rule, "matches", where) is not None:
        return every
    out = []
    for path, m in items:
        before = len(r.problems)
        r.check_fields(m, path, frozenset({"method", "headers"}))
        method = _method(r, m, path)
        headers = read_header_matches(r, m, path)
        if method is not None and len(r.problems) == before:
            path_match, service, name = method
            out.append(_Match(path, path_match, headers, service, name))
    return out


def _method(r: SpecReader, m: Mapping[str, Any], where: str) -> tuple[PathMatch, str, str] | None:
    """(graph path, service, method) of a GRPCRouteMatch's `method`; None when it is invalid."""
    value = m.get("method")
    if value is None:
        return PathMatch.prefix("/"), "", ""
    where = f"{where}.method"
    mm = r.mapping(value, where)
    if mm is None:
        return None
    r.check_fields(mm, where, frozenset({"type", "service", "method"}))
    kind = r.enum(mm, "type", where, ("Exact", "RegularExpression"), "Exact")
    service = r.string(mm, "service", where)
    method = r.string(mm, "method", where)
    if kind is None:
        return None
    if not service and not method:
        r.field_error(where, "one or both of 'service' or 'method' must be specified")
        return None
    for key, text, pattern in (("service", service, _SERVICE), ("method", method, _METHOD)):
        if not text:
            continue
        if len(text) > MAX_NAME:
            r.field_error(f"{where}.{key}", f"must be at most {MAX_NAME} characters")
            return None
        problem = (
            regex_error(text)
            if kind == "RegularExpression"
            else (None if pattern.fullmatch(text) else f"must match {pattern.pattern}")
        )
        if problem is not None:
            r.field_error(f"{where}.{key}", problem)
            return None
    if kind == "Exact":
        if service and method:
            return PathMatch(PathMatchKind.EXACT, f"/{service}/{method}"), service, method
        if service:
            return PathMatch(PathMatchKind.PREFIX, f"/{service}/"), service, method
        regex = f"/{_ANY_SEGMENT}/{escape(method)}"
    else:
        s = f"(?:{service})" if service else _ANY_SEGMENT
        n = f"(?:{method})" if method else _ANY_SEGMENT
        regex = f"/{s}/{n}"
    problem = regex_error(regex)
    if problem is not None:
        r.field_error(where, f"the path regex {regex!r} it makes: {problem}")
        return None
    return PathMatch(PathMatchKind.REGEX, regex), service, method

"""Graph virtual hosts and routes -> `envoy.config.route.v3` messages.

Every function here is pure. `translate_virtual_host` stands alone so that a later change can
emit one resource per virtual host (VHDS / Delta xDS, design 5a) without touching the rest.
Routes keep exactly the graph's order: the dialects already turned their precedence rules into a
first-match list, and re-sorting here would change what matches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import re2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2

from turnout.graph.model import (
    DirectResponse,
    Forward,
    HeaderMatch,
    HostnameMatch,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Redirect,
    Route,
    RouteSource,
    StringMatchKind,
    VirtualHost,
)

# Envoy rejects a RouteConfiguration whose direct-response bodies exceed this unless
# `max_direct_response_body_size_bytes` is raised (RouteConfiguration docs).
_DEFAULT_MAX_DIRECT_BODY = 4096

# Envoy's default `re2.max_program_size.error_level`: larger regexes are rejected (NACK).
_MAX_REGEX_PROGRAM_SIZE = 100

# Route names only serve tracing a route back to its source; long ones are cut and made unique
# again with a digest so that stats and admin output stay readable.
_MAX_ROUTE_NAME = 200

_REDIRECT_CODES = {
    301: rc.RedirectAction.MOVED_PERMANENTLY,
    302: rc.RedirectAction.FOUND,
    303: rc.RedirectAction.SEE_OTHER,
    307: rc.RedirectAction.TEMPORARY_REDIRECT,
    308: rc.RedirectAction.PERMANENT_REDIRECT,
}

# What a route answers when it has nowhere to send traffic (every weight is zero).
NO_BACKEND_STATUS = 503

_PORT_SUFFIX = "(:[0-9]+)?"


def translate_route_configuration(name: str, virtual_hosts: Iterable[VirtualHost]) -> Any:
    """One RouteConfiguration holding `virtual_hosts` in the given order.

    A virtual host whose hostname was already used (case-insensitively) is dropped: Envoy rejects
    the whole RouteConfiguration on a duplicate domain, and ownership in the graph builder should
    already have made hostnames unique per listener, so this only guards against a builder bug.
    """
    config = route_pb2.RouteConfiguration(name=name, ignore_port_in_host_matching=True)
    seen: set[str] = set()
    max_body = 0
    for vh in virtual_hosts:
        domain = vh.hostname.lower()
        if domain in seen:
            continue
        seen.add(domain)
        config.virtual_hosts.append(translate_virtual_host(vh))
        max_body = max(max_body, _max_direct_body(vh))
    if max_body > _DEFAULT_MAX_DIRECT_BODY:
        config.max_direct_response_body_size_bytes.value = max_body
    return config


def translate_virtual_host(vh: VirtualHost) -> Any:
    """One Envoy VirtualHost (`domains: [hostname]`) with the routes in the graph's order."""
    authority = wildcard_authority_matcher(vh)
    return rc.VirtualHost(
        name=vh.name,
        domains=[vh.hostname],
        routes=[translate_route(route, authority) for route in vh.routes],
    )


def translate_route(route: Route, authority: Any | None = None) -> Any:
    """One Envoy Route. `authority`, when given, is an extra header matcher added first."""
    out = rc.Route(name=route_name(route.source), match=translate_match(route, authority))
    action = route.action
    if isinstance(action, Forward):
        _set_forward(out, action)
    elif isinstance(action, DirectResponse):
        _set_direct_response(out, action)
    elif isinstance(action, Redirect):
        out.redirect.CopyFrom(translate_redirect(action))
    return out


def route_name(source: RouteSource) -> str:
    """`kind/namespace/name/field`, e.g. `HTTPProxy/default/app/spec.routes[1]`."""
    ref = source.object
    name = f"{ref.kind}/{ref.namespace}/{ref.name}/{source.field}"
    if len(name) <= _MAX_ROUTE_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{name[: _MAX_ROUTE_NAME - len(digest) - 1]}~{digest}"


# --- matches -------------------------------------------------------------------------------------


def translate_match(route: Route, authority: Any | None = None) -> Any:
    match = rc.RouteMatch()
    _set_path(match, route.match.path)
    if authority is not None:
        match.headers.append(authority)
    match.headers.extend(translate_header_match(h) for h in route.match.headers)
    match.query_parameters.extend(translate_query_match(q) for q in route.match.query)
    return match


def _set_path(match: Any, path: PathMatch) -> None:
    if path.kind is PathMatchKind.EXACT:
        match.path = path.value
    elif path.kind is PathMatchKind.PREFIX:
        match.prefix = path.value
    elif path.kind is PathMatchKind.SEGMENT_PREFIX:
        # path_separated_prefix must not end with "/" (proto validation); "/" alone means any path.
        prefix = path.value.rstrip("/")
        if prefix:
            match.path_separated_prefix = prefix
        else:
            match.prefix = "/"
    else:
        match.safe_regex.CopyFrom(_regex(path.value))


def translate_header_match(h: HeaderMatch) -> Any:
    out = rc.HeaderMatcher(name=h.name, invert_match=h.invert)
    if h.kind is StringMatchKind.PRESENT:
        # treat_missing_header_as_empty is left out on purpose: Envoy then answers "missing" with
        # `invert`, exactly as the evaluator does for a present match on an absent header.
        out.present_match = True
    else:
        out.string_match.CopyFrom(_string_matcher(h.kind, h.value, h.ignore_case))
        out.treat_missing_header_as_empty = h.treat_missing_as_empty
    return out


def translate_query_match(q: QueryMatch) -> Any:
    out = rc.QueryParameterMatcher(name=q.name)
    if q.kind is StringMatchKind.PRESENT:
        out.present_match = True
    else:
        out.string_match.CopyFrom(_string_matcher(q.kind, q.value, q.ignore_case))
    return out


def _string_matcher(kind: StringMatchKind, value: str, ignore_case: bool) -> Any:
    m = string_pb2.StringMatcher()
    if kind is StringMatchKind.EXACT:
        m.exact = value
    elif kind is StringMatchKind.PREFIX:
        m.prefix = value
    elif kind is StringMatchKind.SUFFIX:
        m.suffix = value
    elif kind is StringMatchKind.CONTAINS:
        m.contains = value
    elif kind is StringMatchKind.REGEX:
        m.safe_regex.CopyFrom(_regex(value))
        return m  # ignore_case has no effect on safe_regex in Envoy; leave it unset
    else:
        raise ValueError(f"no string matcher for {kind}")
    m.ignore_case = ignore_case
    return m


def _regex(pattern: str) -> Any:
    # Only `regex`: the engine comes from the bootstrap (RE2 by default); google_re2 is deprecated.
    return regex_pb2.RegexMatcher(regex=pattern)


def wildcard_authority_matcher(vh: VirtualHost) -> Any | None:
    """For a one-label wildcard (`*.example.com`), an `:authority` matcher allowing one label only.

    Envoy's `*.example.com` domain matches any number of labels, so Contour adds a header match to
    each route (`wildcardDomainHeaderMatch`); turnout does the same. The authority may carry a
    port, and host matching is case-insensitive, so the regex is too.
    """
    if vh.hostname_match is not HostnameMatch.WILDCARD_ONE_LABEL:
        return None
    if not vh.hostname.startswith("*."):
        return None
    out = rc.HeaderMatcher(name=":authority")
    out.string_match.safe_regex.CopyFrom(_regex(wildcard_authority_regex(vh.hostname)))
    return out


def wildcard_authority_regex(hostname: str) -> str:
    """A regex for an authority with exactly one label in place of `*` in `hostname`, and any port.

    The readable form spells the suffix out. Its RE2 program grows with the suffix length, and
    Envoy rejects programs above 100, so for long suffixes it falls back to counting labels: the
    route only ever sees hosts that selected this virtual host, so they already end in the suffix,
    and the label count alone tells one label from several.
    """
    suffix = hostname[1:]
    spelled = "(?i)[^.:]+" + str(re2.escape(suffix)) + _PORT_SUFFIX
    if _program_size(spelled) <= _MAX_REGEX_PROGRAM_SIZE:
        return spelled
    counted = f"[^.:]+(\\.[^.:]+){{{suffix.count('.')}}}" + _PORT_SUFFIX
    # Past both limits (a suffix over ~80 characters *and* 7+ labels) Envoy will NACK the
    # readable form, which at least names the host in the error.
    return counted if _program_size(counted) < _program_size(spelled) else spelled


def _program_size(pattern: str) -> int:
    return int(re2.compile(pattern).programsize)


# --- actions -------------------------------------------------------------------------------------


def _set_forward(out: Any, action: Forward) -> None:
    # Weight-0 backends get no traffic; Envoy would accept them, but leaving them out keeps the
    # split readable and turns an all-zero split (or an empty one) into an explicit 503.
    weights: dict[str, int] = {}
    for wc in action.clusters:
        if wc.weight > 0:
            # A cluster listed twice gets the sum of its weights: the same split, without
            # relying on how Envoy treats repeated names in weighted_clusters.
            weights[wc.cluster] = weights.get(wc.cluster, 0) + wc.weight
    if not weights:
        out.direct_response.status = NO_BACKEND_STATUS
    elif len(weights) == 1:
        out.route.cluster = next(iter(weights))
    else:
        # The dict keeps the graph's order, so the output does not depend on hashing.
        split = out.route.weighted_clusters
        for cluster, weight in weights.items():
            entry = split.clusters.add(name=cluster)
            entry.weight.value = weight


def _set_direct_response(out: Any, action: DirectResponse) -> None:
    # DirectResponseAction.status must lie in [200, 600); anything else would NACK the whole
    # RouteConfiguration, so a bad status from a dialect degrades to a 500 on this route only.
    out.direct_response.status = action.status if 200 <= action.status < 600 else 500
    if action.body:
        out.direct_response.body.inline_string = action.body


def translate_redirect(action: Redirect) -> Any:
    """RedirectAction. `path` wins over `prefix` (they share one oneof); an unknown status is 302.

    Empty strings and port 0 mean "keep the request's value", as unset fields do in Envoy.
    """
    code = _REDIRECT_CODES.get(action.status, rc.RedirectAction.FOUND)
    out = rc.RedirectAction(response_code=code)
    if action.scheme:
        if action.scheme.lower() == "https":
            out.https_redirect = True
        else:
            out.scheme_redirect = action.scheme.lower()
    if action.hostname:
        out.host_redirect = action.hostname
    if action.port:
        out.port_redirect = action.port
    if action.path:
        out.path_redirect = action.path
    elif action.prefix is not None:
        out.prefix_rewrite = action.prefix
    return out


def _max_direct_body(vh: VirtualHost) -> int:
    return max(
        (len(r.action.body.encode()) for r in vh.routes if isinstance(r.action, DirectResponse)),
        default=0,
    )

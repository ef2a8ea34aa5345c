"""Graph virtual hosts and routes -> `envoy.config.route.v3` messages.

Every function here is pure. `translate_virtual_host` stands alone so that a later change can
emit one resource per virtual host (VHDS / Delta xDS, design 5a) without touching the rest.
Routes keep exactly the graph's order: the dialects already turned their precedence rules into a
first-match list, and re-sorting here would change what matches.

Translation is total. `graph.validate.enforce_envoy_limits` keeps values Envoy would reject out of
the graph; should a value still make protobuf raise (a bug, or a graph that bypassed the net),
only that piece is lost: a route that cannot be translated answers 500 with its match kept (or is
left out when even its match cannot be expressed), and a virtual host that cannot be translated is
left out of its RouteConfiguration. Each failure is logged once at ERROR with the route's source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import operator
from collections import OrderedDict
from collections.abc import Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2

from turnout.compile_inputs import DEFAULT_MATCHER_TREE_MIN_ROUTES
from turnout.envoy.translate.http_filters import (
    set_route_filter_configs,
    set_virtual_host_filter_configs,
)
from turnout.envoy.translate.memo import HostPart, HostRoutes, TranslateMemo
from turnout.envoy.translate.path_scopes import EVERYWHERE, path_spot
from turnout.envoy.translate.rate_limit import RATELIMIT_FILTER, opt_out, rate_limits
from turnout.envoy.translate.route_policies import apply_route_policies
from turnout.envoy.translate.route_tree import (
    TreeBook,
    common_start,
    delimited,
    length_delimited,
    patch_tree_book,
    placement,
    tree_book,
    varint,
)
from turnout.graph.evaluate import (
    NO_BACKEND_STATUS,
    effective_forward,
    wildcard_authority_regex,
)
from turnout.graph.model import (
    INVALID_BACKEND,
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
    invalid_backend_status,
)

# Envoy rejects a RouteConfiguration whose direct-response bodies exceed this unless
# `max_direct_response_body_size_bytes` is raised (RouteConfiguration docs).
_DEFAULT_MAX_DIRECT_BODY = 4096

# Route names only serve tracing a route back to its source; long ones are cut and made unique
# again with a digest so that stats and admin output stay readable.
_MAX_ROUTE_NAME = 200

_CLUSTER_NOT_FOUND_CODES = {
    404: rc.RouteAction.NOT_FOUND,
    500: rc.RouteAction.INTERNAL_SERVER_ERROR,
    503: rc.RouteAction.SERVICE_UNAVAILABLE,
}

_REDIRECT_CODES = {
    301: rc.RedirectAction.MOVED_PERMANENTLY,
    302: rc.RedirectAction.FOUND,
    303: rc.RedirectAction.SEE_OTHER,
    307: rc.RedirectAction.TEMPORARY_REDIRECT,
    308: rc.RedirectAction.PERMANENT_REDIRECT,
}

__all__ = [
    "NO_BACKEND_STATUS",
    "PER_ROUTE_MIN_ROUTES",
    "TRANSLATION_FAILED_STATUS",
    "assemble_host",
    "host_frame",
    "host_part",
    "host_route_configuration",
    "log_translation_failure",
    "route_name",
    "route_pieces",
    "route_table_bytes",
    "translate_match",
    "translate_redirect",
    "translate_route",
    "translate_route_configuration",
    "translate_route_guarded",
    "translate_virtual_host",
    "virtual_host_bytes",
    "wildcard_authority_matcher",
    "wildcard_authority_regex",
]

# What a route that could not be translated answers instead.
TRANSLATION_FAILED_STATUS = 500

log = logging.getLogger(__name__)

# A piece that fails to translate fails again on every compile; its error is logged the first
# time only. Bounded, so a long-running process does not grow it without limit.
_LOGGED: OrderedDict[str, None] = OrderedDict()
_LOGGED_MAX = 1024


def log_translation_failure(what: str, err: BaseException) -> None:
    """One ERROR line per distinct failure (`what` names the piece and its source)."""
    key = f"{what}: {type(err).__name__}: {err}"
    if key in _LOGGED:
        _LOGGED.move_to_end(key)
        return
    _LOGGED[key] = None
    if len(_LOGGED) > _LOGGED_MAX:
        _LOGGED.popitem(last=False)
    log.error(
        "cannot translate %s (%s: %s); left out of the Envoy configuration",
        what,
        type(err).__name__,
        err,
    )


def translate_route_configuration(
    name: str,
    virtual_hosts: Iterable[VirtualHost],
    matcher_tree_min_routes: int = DEFAULT_MATCHER_TREE_MIN_ROUTES,
    memo: TranslateMemo | None = None,
    extra: Iterable[Any] = (),
) -> Any:
    """One RouteConfiguration holding `virtual_hosts` in the given order, then the Envoy virtual
    hosts `extra`; a host with at least `matcher_tree_min_routes` routes is a matcher tree
    (`translate_virtual_host`).

    A virtual host whose hostname was already used (case-insensitively) is dropped: Envoy rejects
    the whole RouteConfiguration on a duplicate domain, and ownership in the graph builder should
    already have made hostnames unique per listener, so this only guards against a builder bug.

    The table is assembled on the wire from each host's serialized entry (`host_part`, kept by
    `memo` per host) and parsed once, instead of copying every host's message into it; `memo`
    records those bytes so the xDS server need not serialize the table again.
    """
    virtual_hosts = tuple(virtual_hosts)
    seen: set[str] = set()
    entries: list[bytes] = []
    max_body = 0
    invalid_backend = False
    for vh in virtual_hosts:
        try:
            domain = vh.hostname.lower()
        except Exception as err:
            invalid_backend = invalid_backend or _names_invalid_backend(vh)
            log_translation_failure(f"virtual host {vh.name!r} of {vh.owner}", err)
            continue
        if domain in seen:
            invalid_backend = invalid_backend or _names_invalid_backend(vh)
            continue
        part = host_part(vh, matcher_tree_min_routes, memo)
        invalid_backend = invalid_backend or part.invalid_backend
        if part.entry is None:
            continue
        seen.add(domain)
        entries.append(part.entry)
        max_body = max(max_body, part.max_body)
    entries.extend(
        length_delimited(_VHOSTS_TAG, m.SerializeToString(deterministic=True)) for m in extra
    )
    data = route_table_bytes(name, entries, max_body, invalid_backend)
    config = route_pb2.RouteConfiguration.FromString(data)
    if memo is not None:
        memo.note_encoded(config, data)
    return config


def route_table_bytes(
    name: str,
    entries: list[bytes],
    max_body: int,
    invalid_backend: bool,
    headers_to_remove: tuple[str, ...] = (),
) -> bytes:
    """A RouteConfiguration `name` on the wire holding the `virtual_hosts` entries `entries`
    (each a whole field), sized for direct-response bodies of `max_body` bytes, not checking
    its clusters when a route names the invalid backend, removing `headers_to_remove`."""
    head = route_pb2.RouteConfiguration(name=name)
    tail = route_pb2.RouteConfiguration(
        ignore_port_in_host_matching=True, request_headers_to_remove=headers_to_remove
    )
    if invalid_backend:
        # The invalid backend is a cluster Envoy does not know. RDS tables are not checked
        # against the clusters by default, but inline ones are (`envoy --mode validate`): say it.
        tail.validate_clusters.value = False
    if max_body > _DEFAULT_MAX_DIRECT_BODY:
        tail.max_direct_response_body_size_bytes.value = max_body
    # Deterministic serialization writes fields by number: `name` (1), `virtual_hosts` (2),
    # then the rest, so the parts concatenate to exactly what serializing the whole gives.
    return b"".join(
        (
            head.SerializeToString(deterministic=True),
            *entries,
            tail.SerializeToString(deterministic=True),
        )
    )


def host_route_configuration(
    name: str, vh: VirtualHost, matcher_tree_min_routes: int, memo: TranslateMemo | None = None
) -> Any:
    """The RouteConfiguration `name` holding the one virtual host `vh` (one table per host:
    scoped routes), the very same message as last time when `vh` is the very same object and
    the name the same, so the xDS server sends only the tables of the hosts that changed."""
    if memo is not None and (known := memo.host_tables.get(vh)) is not None and known[0] == name:
        return known[1]
    config = translate_route_configuration(name, (vh,), matcher_tree_min_routes, memo)
    if memo is not None:
        memo.host_tables.put(vh, (name, config))
    return config


# RouteConfiguration.virtual_hosts is field 2, length-delimited: tag byte (2 << 3) | 2.
_VHOSTS_TAG = b"\x12"


def host_part(
    vh: VirtualHost, matcher_tree_min_routes: int, memo: TranslateMemo | None = None
) -> HostPart:
    """What `vh` adds to a RouteConfiguration (see `HostPart`), from `memo` when `vh` is the
    very same object it translated before (the memo is emptied when options change)."""
    if memo is not None and (known := memo.hosts.get(vh)) is not None:
        return known
    try:
        parts, invalid, max_body = _host_wire(vh, matcher_tree_min_routes, memo)
        part = HostPart(b"".join(delimited(_VHOSTS_TAG, parts)), max_body, invalid)
    except Exception as err:
        log_translation_failure(f"virtual host {vh.name!r} of {vh.owner}", err)
        part = HostPart(None, 0, _names_invalid_backend(vh))
    return memo.hosts.put(vh, part) if memo is not None else part


def translate_virtual_host(
    vh: VirtualHost, matcher_tree_min_routes: int = DEFAULT_MATCHER_TREE_MIN_ROUTES
) -> Any:
    """One Envoy VirtualHost (`domains: [hostname]`) with the routes in the graph's order: a
    list, or from `matcher_tree_min_routes` routes (0: never) a matcher tree with the same first
    match for every request (`route_tree`; a tree that would copy routes too often stays a list).

    Raises only when the virtual host itself (name, domain, authority match) cannot be expressed;
    a route that cannot be translated answers 500 instead (see `translate_route_guarded`).
    """
    return rc.VirtualHost.FromString(virtual_host_bytes(vh, matcher_tree_min_routes))


def virtual_host_bytes(
    vh: VirtualHost, matcher_tree_min_routes: int, memo: TranslateMemo | None = None
) -> bytes:
    """`translate_virtual_host(vh, ...)` serialized (deterministically), assembled from each
    route's serialized message (`route_pieces`: kept in `memo` per route for a big host) so that
    a change to one route of a big host translates and serializes that route only."""
    return b"".join(_host_wire(vh, matcher_tree_min_routes, memo)[0])


def _host_wire(
    vh: VirtualHost, matcher_tree_min_routes: int, memo: TranslateMemo | None
) -> tuple[list[bytes], bool, int]:
    """`virtual_host_bytes` in parts to join, whether a route names the invalid backend, and
    the largest direct-response body of the routes (both read from the routes' pieces)."""
    authority = wildcard_authority_matcher(vh)
    every, book = route_pieces(vh, authority, memo)
    invalid = any(map(itemgetter(2), every))
    max_body = max(map(itemgetter(3), every), default=0)
    pieces = list(itertools.compress(every, map(itemgetter(0), every)))
    if memo is not None and len(every) >= PER_ROUTE_MIN_ROUTES:
        # What `http_filters.host_jwts(vh)` gives, from the pieces (one C-speed pass).
        jwts = set(map(itemgetter(4), every))
        jwts.discard(None)
        memo.jwts.put(vh, frozenset(jwts))
    head, rest = host_frame(vh)
    tree = None
    if 0 < matcher_tree_min_routes <= len(pieces):
        book = tree_book(pieces) if book is None else patch_tree_book(book, pieces)
        tree = book.bytes_of()
        if memo is not None and len(vh.routes) >= PER_ROUTE_MIN_ROUTES:
            key = (vh.name, vh.hostname)
            memo.host_routes[key] = dataclasses.replace(memo.host_routes[key], tree=book)
    return assemble_host(head, rest, pieces, tree), invalid, max_body


def host_frame(vh: VirtualHost) -> tuple[bytes, bytes]:
    """What a virtual host's entry holds besides its routes, serialized: its name and domain
    (the fields before the routes) and its own settings (the fields between the routes and the
    matcher). Raises when they cannot be expressed."""
    head = rc.VirtualHost(name=vh.name, domains=[vh.hostname])
    rest = rc.VirtualHost()
    set_virtual_host_filter_configs(rest, vh)
    if vh.policies.global_rate_limit is not None:
        rest.rate_limits.extend(rate_limits(vh.policies.global_rate_limit, translate_header_match))
    numbers = [f.number for f, _ in rest.ListFields()]
    if numbers and not _ROUTES_FIELD < min(numbers) <= max(numbers) < _MATCHER_FIELD:
        raise ValueError(f"virtual host fields {numbers} cannot be assembled around the routes")
    return head.SerializeToString(deterministic=True), rest.SerializeToString(deterministic=True)


def assemble_host(
    head: bytes, rest: bytes, pieces: list[tuple[Any, ...]], tree: list[bytes] | None
) -> list[bytes]:
    """A virtual host on the wire, in parts to join: `host_frame`'s parts around the routes
    `pieces` as a list, or around the matcher `tree` (`TreeBook.bytes_of`) when given."""
    # Deterministic serialization writes fields by number: name (1), domains (2), routes (3),
    # the host's settings (4-20), matcher (21); the parts concatenate to the whole.
    parts = [head]
    if tree is None:
        parts.extend(_ROUTES_TAG + p[0] for p in pieces)
        parts.append(rest)
    else:
        parts.append(rest)
        parts.extend(delimited(_MATCHER_TAG, tree))
    return parts


# VirtualHost.routes (3) and .matcher (21), length-delimited.
_ROUTES_FIELD, _MATCHER_FIELD = 3, 21
_ROUTES_TAG, _MATCHER_TAG = b"\x1a", b"\xaa\x01"

# Below this many routes a host is translated whole: keeping pieces per route costs more than
# it saves.
PER_ROUTE_MIN_ROUTES = 64


def route_pieces(
    vh: VirtualHost, authority: Any | None, memo: TranslateMemo | None = None
) -> tuple[list[tuple[Any, ...]], TreeBook | None]:
    """Per route of `vh`, in order: its serialized message prefixed with its length (None: the
    route cannot be translated at all), its placement in a matcher tree, whether it names the
    invalid backend, the length of its direct-response body, its JWT validation with a
    JWKS endpoint (None: none; `http_filters.host_jwts`), and its path scope placement
    (`path_scopes.path_spot`) with the segments it pins (None: every scope). A big host's
    pieces are kept in `memo` by each route's identity and the host-level context its message
    reads (the authority matcher), so a route kept from the host before is not translated again.
    Also the host's matcher tree as last planned, to patch (None: none kept); the memo keeps
    none until the caller puts the patched one back, so a failure on the way loses nothing."""
    routes = vh.routes
    if memo is None or len(routes) < PER_ROUTE_MIN_ROUTES:
        return [_route_piece(r, authority) for r in routes], None
    key = (vh.name, vh.hostname)
    context = None if authority is None else authority.SerializeToString(deterministic=True)
    known = memo.kept_routes(key)
    book = None if known is None else known.tree
    if known is None or known.authority != context:
        pieces = [_route_piece(r, authority) for r in routes]
    else:
        pieces = _patched_pieces(known, routes, authority)
    memo.host_routes[key] = HostRoutes(context, routes, pieces)
    return pieces, book


def _patched_pieces(
    known: HostRoutes, routes: tuple[Route, ...], authority: Any | None
) -> list[tuple[Any, ...]]:
    """The pieces of `routes`, those of the routes `known` holds kept: the routes between the
    common start and end of the old and new tuples (C-speed identity passes find those ends)
    are looked up by identity, the others translated."""
    old = known.routes
    shorter = min(len(old), len(routes))
    head = common_start(old, routes, shorter)
    tail = min(common_start(reversed(old), reversed(routes), shorter), shorter - head)
    by_id = dict(
        zip(map(id, old[head : len(old) - tail]), known.pieces[head : len(old) - tail], strict=True)
    )
    changed = routes[head : len(routes) - tail]
    middle = list(map(by_id.get, map(id, changed)))
    for i in itertools.compress(range(len(middle)), map(operator.is_, middle, repeat(None))):
        middle[i] = _route_piece(changed[i], authority)
    return [*known.pieces[:head], *middle, *known.pieces[len(old) - tail :]]  # type: ignore[list-item]


def _route_piece(route: Route, authority: Any | None) -> tuple[Any, ...]:
    action = route.action
    invalid = isinstance(action, Forward) and any(
        wc.cluster == INVALID_BACKEND for wc in action.clusters
    )
    body = len(action.body.encode()) if isinstance(action, DirectResponse) else 0
    jwt = route.policies.jwt
    jwt = jwt if jwt is not None and jwt.jwks_endpoint() is not None else None
    message = translate_route_guarded(route, authority)
    if message is None:
        return None, None, invalid, body, jwt, EVERYWHERE, None
    data = message.SerializeToString(deterministic=True)
    spot = path_spot(route.match.path)
    pinned = None if spot is EVERYWHERE else spot[1]
    return varint(len(data)) + data, placement(route.match), invalid, body, jwt, spot, pinned


def translate_route_guarded(route: Route, authority: Any | None = None) -> Any | None:
    """`translate_route`, or when that raises: the same match answering 500, or None when the
    match itself cannot be expressed. Never raises."""
    try:
        return translate_route(route, authority)
    except Exception as err:
        log_translation_failure(f"route {_describe(route.source)}", err)
    try:
        out = rc.Route(name=_safe_route_name(route.source), match=translate_match(route, authority))
    except Exception:
        return None
    out.direct_response.status = TRANSLATION_FAILED_STATUS
    return out


def _describe(source: RouteSource) -> str:
    try:
        return str(source)
    except Exception:
        return repr(source)


def _safe_route_name(source: RouteSource) -> str:
    # A name protobuf refuses (e.g. a lone surrogate) is escaped rather than losing the route.
    try:
        name = route_name(source)
    except Exception:
        name = _describe(source)
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


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
    set_route_filter_configs(out, route, out.name)
    _set_global_rate_limit(out, route)
    apply_route_policies(out, route)
    return out


def _set_global_rate_limit(out: Any, route: Route) -> None:
    policy = route.policies.global_rate_limit
    if policy is None:
        return
    if policy.disabled:
        out.typed_per_filter_config[RATELIMIT_FILTER].CopyFrom(opt_out())
    elif isinstance(route.action, Forward):
        out.route.rate_limits.extend(rate_limits(policy, translate_header_match))


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
    if route.match.runtime_fraction is not None:
        # No runtime key: the share is the graph's, not a runtime override's.
        fraction = match.runtime_fraction.default_value
        fraction.numerator = runtime_fraction_per_million(route.match.runtime_fraction)
        fraction.denominator = percent_pb2.FractionalPercent.MILLION
    return match


def runtime_fraction_per_million(fraction: float) -> int:
    """The numerator (over a million) Envoy compares the request's random value with."""
    return round(min(max(fraction, 0.0), 1.0) * 1_000_000)


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
    if h.kind is StringMatchKind.RANGE:
        start, end = header_range(h.value)
        out.range_match.start = start
        out.range_match.end = end
    elif h.kind is StringMatchKind.PRESENT:
        # treat_missing_header_as_empty is left out on purpose: Envoy then answers "missing" with
        # `invert`, exactly as the evaluator does for a present match on an absent header.
        out.present_match = True
    else:
        out.string_match.CopyFrom(_string_matcher(h.kind, h.value, h.ignore_case))
        out.treat_missing_header_as_empty = h.treat_missing_as_empty
    return out


def header_range(value: str) -> tuple[int, int]:
    """`StringMatchKind.RANGE`'s value "start,end" as integers; raises ValueError otherwise."""
    start, end = value.split(",")
    return int(start), int(end)


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


# --- actions -------------------------------------------------------------------------------------


def _set_forward(out: Any, action: Forward) -> None:
    # Weight-0 backends get no traffic; Envoy would accept them, but leaving them out keeps the
    # split readable and turns an all-zero split (or an empty one) into an explicit 503. A cluster
    # listed twice gets the sum of its weights, without relying on how Envoy treats repeated names
    # in weighted_clusters. The evaluator reads a Forward through the same helper.
    weights = effective_forward(action)
    if not weights:
        out.direct_response.status = NO_BACKEND_STATUS
        return
    if len(weights) == 1:
        out.route.cluster = weights[0][0]
    else:
        split = out.route.weighted_clusters
        for cluster, weight in weights:
            entry = split.clusters.add(name=cluster)
            entry.weight.value = weight
    if any(cluster == INVALID_BACKEND for cluster, _ in weights):
        # The invalid backend's share reaches a cluster Envoy does not know; the router then
        # answers this code: 500 for HTTPRoute, 503 (gRPC UNAVAILABLE) for GRPCRoute.
        out.route.cluster_not_found_response_code = _CLUSTER_NOT_FOUND_CODES[
            invalid_backend_status(action.invalid_backend_status)
        ]


def _set_direct_response(out: Any, action: DirectResponse) -> None:
    # DirectResponseAction.status must lie in [200, 600); anything else would NACK the whole
    # RouteConfiguration, so a bad status from a dialect degrades to a 500 on this route only.
    out.direct_response.status = action.status if 200 <= action.status < 600 else 500
    if action.body:
        out.direct_response.body.inline_string = action.body
    for header in action.headers:
        option = out.response_headers_to_add.add(
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
        )
        option.header.key = header.name
        option.header.value = header.value


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


def _names_invalid_backend(vh: VirtualHost) -> bool:
    return any(
        isinstance(r.action, Forward)
        and any(wc.cluster == INVALID_BACKEND for wc in r.action.clusters)
        for r in vh.routes
    )

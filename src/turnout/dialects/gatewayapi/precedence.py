"""Match precedence of the Gateway API as one sort key per graph route (smaller wins).

HTTPRoute (`HTTPRouteRule.Matches` doc in apis/v1/httproute_types.go): across every rule of every
route attached to a listener, ties going to the next step:

1. an Exact path match;
2. a PathPrefix match with the largest number of characters;
3. a method match;
4. the largest number of header matches;
5. the largest number of query param matches;
6. the oldest route (creationTimestamp);
7. the route first in alphabetical order of "{namespace}/{name}";
8. the first matching rule of the route (list order), and within it the first match.

RegularExpression path precedence is implementation-specific: turnout puts regexes after Exact
and before PathPrefix, longest first (as Envoy Gateway does), since a regex is usually written to
carve an exception out of a prefix. The trailing "/" of a prefix does not count (`/foo/` and
`/foo` match the same requests).

GRPCRoute (`GRPCRouteRule.Matches` doc in apis/v1/grpcroute_types.go): the largest number of
characters in a matching service, then in a matching method, then the most header matches; then
the oldest route, namespace/name and rule order as above.

Hostname specificity (the longest matching non-wildcard hostname first) comes before all of this;
it is decided where routes are merged into virtual hosts, one per hostname.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from turnout.graph.model import PathMatchKind, Route, RouteMatch
from turnout.objects import KubeObject

_PATH_RANK = {
    PathMatchKind.EXACT: 0,
    PathMatchKind.REGEX: 1,
    PathMatchKind.SEGMENT_PREFIX: 2,
    PathMatchKind.PREFIX: 2,
}


# The first element of every key: the spec never orders HTTPRoute matches against GRPCRoute
# matches (only one kind may serve a hostname on a listener), but keys of both stay comparable.
_HTTP, _GRPC = 0, 1


@dataclass(frozen=True, slots=True)
class RankedRoute:
    route: Route  # source = RouteSource(route ref, "spec.rules[i].matches[j]")
    key: tuple[object, ...]  # the spec's precedence, comparable across routes: smaller wins


def route_order(route: KubeObject) -> tuple[object, ...]:
    """Steps 6 and 7: the oldest route first, then namespace/name (`KubeObject.age_key`)."""
    return route.age_key


def http_match_key(
    match: RouteMatch,
    *,
    has_method: bool,
    route: KubeObject,
    rule: int,
    index: int,
    part: int = 0,
) -> tuple[object, ...]:
    """The key of one HTTPRoute match. `has_method`: the match names a method (it is one of the
    header matches in the graph, as `:method`, and does not count as a header here). `part`
    orders the graph routes one match became."""
    path = match.path
    length = (
        len(path.value)
        if path.kind is not PathMatchKind.SEGMENT_PREFIX
        else len(path.value.rstrip("/"))
    )
    headers = len(match.headers) - (1 if has_method else 0)
    return (
        _HTTP,
        _PATH_RANK[path.kind],
        -length,
        0 if has_method else 1,
        -headers,
        -len(match.query),
        route_order(route),
        rule,
        index,
        part,
    )


def grpc_match_key(
    *,
    service: str,
    method: str,
    headers: int,
    route: KubeObject,
    rule: int,
    index: int,
) -> tuple[object, ...]:
    """The key of one GRPCRoute match: `service` and `method` as written (empty when unset)."""
    return (_GRPC, -len(service), -len(method), -headers, route_order(route), rule, index)


def order_routes(routes: Iterable[RankedRoute]) -> tuple[Route, ...]:
    """The routes in first-match order. Keys are unique per (route object, rule, match, part), so
    the order never depends on the input order."""
    return tuple(r.route for r in sorted(routes, key=lambda r: r.key))

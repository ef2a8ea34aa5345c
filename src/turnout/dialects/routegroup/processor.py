"""RouteGroups onto virtual hosts, as Skipper's data client turns them into routes.

Each `routes[i]` becomes one route per method (or one for all methods) whose predicates are, in
Skipper's order, `Path` or `PathSubtree`, `PathRegexp`, `Method` and the route's `predicates`, and
whose filters are the route's `filters`. A RouteGroup without routes gets one route for all paths
of its hosts. Backends are one weighted split per route (Skipper's TrafficSegment semantics: one
draw per request, no effect on priority). Each route is registered on the nodes of Skipper's path
tree it sits on (`priority.tree_nodes`); after ordering, a run of one route's registrations is one
graph route, split only where other routes of the same nodes come between them by weight.

Hosts: every RouteGroup naming a host contributes its routes to it, and all of them are ordered
together by Skipper's priority (`priority.py`), as Skipper's one routing table does. Towards
other dialects, the group of RouteGroups on a host claims it with the age of its oldest member;
when an older object of another kind owns the host, the RouteGroups' routes for it are not served
and their status names the owner. A RouteGroup without hosts serves every host no other object
has (the catch-all virtual host `*`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER, CompileOptions
from turnout.dialects.routegroup import backends as rg_backends
from turnout.dialects.routegroup import predicates as rg_predicates
from turnout.dialects.routegroup.eskip import (
    Call,
    EskipError,
    Position,
    parse_filters,
    parse_predicates,
    string_arg,
)
from turnout.dialects.routegroup.filters import (
    FilterTranslation,
    NotMirrorable,
    translate_filters,
)
from turnout.dialects.routegroup.predicates import (
    CallProblem,
    MatchTranslation,
    translate_predicates,
    wildcard_path_regex,
)
from turnout.dialects.routegroup.priority import (
    Node,
    Priority,
    Segment,
    priority,
    subtree_base,
    tree_nodes,
)
from turnout.dialects.routegroup.spec import (
    ACCEPTED,
    GROUP,
    KIND,
    RESOLVED_REFS,
    BackendRef,
    BackendSpec,
    BackendType,
    ParsedRouteGroup,
    Problem,
    RouteSpec,
    go_quote,
    parse_routegroup,
    routegroups_of_class,
)
from turnout.dialects.routegroup.status import RouteGroupStatus
from turnout.graph.dialect import CompileContext, DialectOutput, HostClaim
from turnout.graph.model import (
    BackendPolicies,
    DirectResponse,
    Endpoint,
    Forward,
    HashPolicy,
    HashSource,
    HeaderMatch,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    LoadBalancerStrategy,
    PathMatch,
    PathMatchKind,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    StringMatchKind,
    TLSTermination,
    UpstreamSettings,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.services import Unresolved
from turnout.objects import KubeObject
from turnout.store import Snapshot

CATCH_ALL = "*"  # the virtual host of RouteGroups without hosts
_BUILTIN = Position(0, 1, 1)

# What a route answers when turnout cannot serve it as written but must not let its requests
# fall through to another route (a filter it cannot apply may be the route's authorization).
REFUSED_STATUS = 500


def _not_valid(message: str) -> bool:
    """Whether a predicate's or filter's problem is an argument Skipper refuses too (its "invalid
    predicate/filter parameters", a regular expression Go cannot compile): a NotValid reason,
    not a NotSupported one."""
    return any(
        phrase in message
        for phrase in (
            "invalid predicate parameters",
            "invalid filter parameters",
            "invalid regular expression",
        )
    )


def _field_of(calls: Sequence[tuple[Call, str]], index: int, default: str) -> str:
    """The field path of the call a problem names, or the route's own where it names none."""
    return calls[index][1] if 0 <= index < len(calls) else default


# --- selection and claims ----------------------------------------------------------------------


def select_routegroups(snapshot: Snapshot, options: CompileOptions) -> list[ParsedRouteGroup]:
    """The RouteGroups of turnout's class, read and validated, sorted by namespace/name (the
    order Skipper's data client gives routes of equal priority)."""
    out: list[ParsedRouteGroup] = []
    for obj in routegroups_of_class(snapshot, options.routegroup_class):
        parsed = parse_routegroup(obj)
        _check_eskip(parsed)
        out.append(parsed)
    out.sort(key=lambda p: p.key)
    return out


def _check_eskip(parsed: ParsedRouteGroup) -> None:
    """Skipper's validator parses every predicate and filter item: each must be one call."""
    for route in parsed.spec.routes:
        for j, text in enumerate(route.predicates):
            where = f"{route.field}.predicates[{j}]"
            problem = _single(text, parse_predicates, "predicate")
            if problem is not None:
                parsed.problems.append(
                    Problem(ACCEPTED, "PredicateNotValid", f"{where}: {problem}")
                )
        for j, text in enumerate(route.filters):
            where = f"{route.field}.filters[{j}]"
            problem = _single(text, parse_filters, "filter")
            if problem is not None:
                parsed.problems.append(Problem(ACCEPTED, "FilterNotValid", f"{where}: {problem}"))


def _single(text: str, parse: Callable[[str], tuple[Call, ...]], what: str) -> str | None:
    try:
        calls = parse(text)
    except EskipError as e:
        return str(e)
    if len(calls) != 1:
        return f"single {what} expected at {go_quote(text)}"
    return None


def _hosts(rg: ParsedRouteGroup) -> tuple[str, ...]:
    return rg.spec.hosts or (CATCH_ALL,)


def _tls_hosts(rg: ParsedRouteGroup) -> set[str]:
    hosts = set(rg.spec.hosts)
    return {h for tls in rg.spec.tls if tls.secret_name for h in tls.hosts if h in hosts}


def routegroup_claims(parsed: Iterable[ParsedRouteGroup]) -> list[HostClaim]:
    """One claim per host by the oldest valid RouteGroup naming it, for the group; on the HTTPS
    listener too when one of them terminates TLS for it."""
    oldest: dict[str, KubeObject] = {}
    tls: set[str] = set()
    for rg in parsed:
        if not rg.valid:
            continue
        for host in _hosts(rg):
            current = oldest.get(host)
            if current is None or rg.obj.age_key < current.age_key:
                oldest[host] = rg.obj
        tls |= _tls_hosts(rg)
    claims = [HostClaim(HTTP_LISTENER, h, o) for h, o in oldest.items()]
    claims.extend(HostClaim(HTTPS_LISTENER, h, o) for h, o in oldest.items() if h in tls)
    return claims


# --- routes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    """One registration of a route on a node of Skipper's path tree."""

    route: Route  # its match has the route's whole path (all of a PathSubtree's nodes)
    priority: Priority
    rg: ParsedRouteGroup
    group: tuple[int, ...] = ()  # the registrations of one graph route share it
    node: Node | None = None  # None: a root leaf
    base: str = ""  # a PathSubtree's base path
    drawn: bool = False  # its fraction is a Traffic draw (not TrafficSegment's shared one)
    segment_start: float = 0.0  # TrafficSegment(min, max)'s min


def _is_routegroup(obj: KubeObject | None) -> bool:
    return obj is not None and obj.group == GROUP and obj.kind == KIND


class _Compiler:
    def __init__(self, snapshot: Snapshot, ctx: CompileContext, parsed: list[ParsedRouteGroup]):
        self.snapshot = snapshot
        self.ctx = ctx
        self.parsed = parsed
        self.status = {rg.key: RouteGroupStatus.with_problems(rg.obj, rg.problems) for rg in parsed}

    def run(self) -> DialectOutput:
        valid = [rg for rg in self.parsed if rg.valid]
        by_host: dict[str, list[_Candidate]] = {}
        members: dict[str, list[ParsedRouteGroup]] = {}
        for position, rg in enumerate(valid):
            candidates = self._routes(rg, position)
            for host in _hosts(rg):
                by_host.setdefault(host, []).extend(candidates)
                members.setdefault(host, []).append(rg)
        vhosts: list[tuple[str, VirtualHost]] = []
        for host in sorted(by_host):
            vhosts.extend(self._host(host, by_host[host], members[host]))
        for rg in valid:
            self._unused_tls(rg)
        addresses = self.ctx.options.load_balancer_addresses
        statuses = tuple(self.status[k].build(addresses) for k in sorted(self.status))
        return DialectOutput(virtual_hosts=tuple(vhosts), statuses=statuses)

    def _routes(self, rg: ParsedRouteGroup, position: int) -> list[_Candidate]:
        spec = rg.spec
        if not spec.routes:
            implicit = RouteSpec(index=0, field="spec.defaultBackends")
            return self._route(rg, implicit, position)
        out: list[_Candidate] = []
        for route in spec.routes:
            out.extend(self._route(rg, route, position))
        return out

    def _route(self, rg: ParsedRouteGroup, route: RouteSpec, position: int) -> list[_Candidate]:
        builtin = _builtin_predicates(route)
        user = _sourced_calls(route.predicates, parse_predicates, f"{route.field}.predicates")
        filter_calls = _sourced_calls(route.filters, parse_filters, f"{route.field}.filters")

        refs = route.backends or rg.spec.default_backends
        backends = [b for b in (rg.spec.backend(ref.name) for ref in refs) if b is not None]
        filters = translate_filters(
            [c for c, _ in filter_calls],
            mirror_cluster=lambda url: self._mirror(rg, url),
            shunt=[b.type for b in backends] == [BackendType.SHUNT],
            discovery=self.ctx.options.discovery,
            rate_limit_service=self.ctx.options.rate_limit_service is not None,
        )
        refused = self._refused(rg, route, backends, filter_calls, filters)

        methods: Sequence[str | None] = route.methods or (None,)
        out: list[_Candidate] = []
        action: RouteAction | None = None
        policies = filters.policies
        for k, method in enumerate(methods):
            calls = list(builtin)
            if method is not None:
                calls.append((Call("Method", (method,), _BUILTIN), f"{route.field}.methods[{k}]"))
            calls.extend(user)
            match = translate_predicates([c for c, _ in calls])
            if match.problems:
                if k == 0:
                    self._predicate_problems(rg, route, calls, match)
                return []
            if match.never:
                continue  # False(): Skipper keeps the route, and it never matches
            if action is None:
                action, policies = self._route_action(rg, route, filters, refused)
            out.extend(_candidates(rg, route, position, k, match, action, policies))
        return out

    def _refused(
        self,
        rg: ParsedRouteGroup,
        route: RouteSpec,
        backends: Sequence[BackendSpec],
        filter_calls: Sequence[tuple[Call, str]],
        filters: FilterTranslation,
    ) -> bool:
        """Report the route's unavailable and unsupported filters and a loopback it may not
        have; whether the route is refused (answers REFUSED_STATUS)."""
        st = self.status[rg.key]
        refused = False
        for u in filters.unavailable:
            # Never unauthenticated: the route answers 503 until its issuer's keys are known.
            where = _field_of(filter_calls, u.index, route.field)
            st.error(
                RESOLVED_REFS,
                u.reason,
                f"{where}: {u.message}; the route answers 503",
            )
        for p in (*filters.problems, *_uninstallable(rg, backends, filter_calls, filters)):
            where = _field_of(filter_calls, p.index, route.field)
            st.error(
                ACCEPTED,
                "FilterNotValid" if _not_valid(p.message) else "FilterNotSupported",
                f"{where}: {p.message}; the route answers {REFUSED_STATUS}",
            )
            refused = True
        shared = self._shared_loop_host(rg, backends)
        if shared is not None:
            st.error(ACCEPTED, "BackendNotSupported", f"{route.field}: {shared}")
            refused = True
        return refused

    def _predicate_problems(
        self,
        rg: ParsedRouteGroup,
        route: RouteSpec,
        calls: Sequence[tuple[Call, str]],
        match: MatchTranslation,
    ) -> None:
        st = self.status[rg.key]
        for p in match.problems:
            where = _field_of(calls, p.index, route.field)
            st.error(
                ACCEPTED,
                "PredicateNotValid" if _not_valid(p.message) else "PredicateNotSupported",
                f"{where}: {p.message}; the route is not served",
            )

    def _route_action(
        self,
        rg: ParsedRouteGroup,
        route: RouteSpec,
        filters: FilterTranslation,
        refused: bool,
    ) -> tuple[RouteAction, RoutePolicies]:
        if refused:
            return DirectResponse(REFUSED_STATUS), filters.policies
        if filters.unavailable:
            return DirectResponse(503), filters.policies
        return self._action(rg, route, filters)

    def _shared_loop_host(
        self, rg: ParsedRouteGroup, backends: Sequence[BackendSpec]
    ) -> str | None:
        """Why a loopback route may not re-enter its hosts: one of them is shared with a
        RouteGroup of another namespace (Skipper merges them), whose routes the looped request
        would reach as a request from Envoy itself, past their ClientIP and Source allow-lists."""
        loop = next((b for b in backends if b.type is BackendType.LOOPBACK), None)
        if loop is None:
            return None
        for host in _hosts(rg):
            other = next(
                (
                    o
                    for o in self.parsed
                    if o.valid and o.obj.namespace != rg.obj.namespace and host in _hosts(o)
                ),
                None,
            )
            if other is not None:
                return (
                    f'the loopback backend "{loop.name}" ({loop.field}) is not supported on host '
                    f'"{host}", which RouteGroup {other.obj.namespace}/{other.obj.name} of another '
                    "namespace also serves: the looped request would reach its routes from Envoy "
                    f"itself; the route answers {REFUSED_STATUS}"
                )
        return None

    def _mirror(self, rg: ParsedRouteGroup, url: str) -> str | NotMirrorable:
        """The cluster a `tee("url")` copies requests to, or why the URL cannot be one."""
        target = rg_backends.parse_target(url, self.ctx.options)
        if isinstance(target, str):
            return NotMirrorable(target)
        settings = UpstreamSettings(protocol=target.protocol)
        name = f"{rg.obj.name}-tee"
        if rg_backends.is_ip(target.host):
            endpoint = Endpoint(target.host, target.port)
            cluster = self.ctx.backends.static(
                rg.obj.namespace, name, target.port, endpoints=(endpoint,), settings=settings
            )
        else:
            cluster = self.ctx.backends.static(
                rg.obj.namespace, name, target.port, dns_name=target.host, settings=settings
            )
        return cluster.name

    def _action(
        self, rg: ParsedRouteGroup, route: RouteSpec, filters: FilterTranslation
    ) -> tuple[RouteAction, RoutePolicies]:
        st = self.status[rg.key]
        policies = filters.policies
        if isinstance(filters.action, Redirect):
            return filters.action, policies  # redirectTo answers without the backend
        refs: Sequence[BackendRef] = route.backends or rg.spec.default_backends
        specs = [(ref, rg.spec.backend(ref.name)) for ref in refs]
        shunts = [ref for ref, b in specs if b is not None and b.type is BackendType.SHUNT]
        if isinstance(filters.action, DirectResponse):
            return filters.action, policies
        if shunts:
            if len(specs) > 1:
                st.error(
                    ACCEPTED,
                    "BackendNotSupported",
                    f"{shunts[0].field}: a shunt backend cannot share a route's traffic with "
                    f"other backends by weight; the route answers {REFUSED_STATUS}",
                )
                return DirectResponse(REFUSED_STATUS), policies
            return DirectResponse(404), policies  # Skipper's <shunt> without a filter answering
        weighted = self._weighted(rg, route, specs, filters)
        if isinstance(weighted, DirectResponse):
            return weighted, policies
        clusters, empty, hashed = weighted
        if clusters and empty == len(clusters):
            # Skipper's route for a Service without endpoints: status(502) -> inlineContent.
            return _NO_ENDPOINTS, policies
        if hashed and not policies.hash_policies:
            # Skipper hashes on the client address unless consistentHashKey says otherwise.
            policies = dataclasses.replace(
                policies, hash_policies=(HashPolicy(HashSource.SOURCE_IP),)
            )
        return Forward(tuple(clusters)), policies

    def _weighted(
        self,
        rg: ParsedRouteGroup,
        route: RouteSpec,
        specs: Sequence[tuple[BackendRef, BackendSpec | None]],
        filters: FilterTranslation,
    ) -> DirectResponse | tuple[list[WeightedCluster], int, bool]:
        """The route's weighted clusters, how many have no endpoints and whether one hashes;
        or the answer of a backend that cannot be resolved."""
        all_zero = all(ref.weight == 0 for ref, _ in specs)
        clusters: list[WeightedCluster] = []
        empty = 0
        hashed = False
        for ref, backend in specs:
            if backend is None:  # validation made sure it exists
                continue
            result = rg_backends.resolve(
                self.snapshot,
                self.ctx.backends,
                rg.obj.namespace,
                rg.obj.name,
                rg.obj.annotations,
                backend,
                filters.upstream,
                self.ctx.options,
            )
            if isinstance(result, rg_backends.Failure):
                self.status[rg.key].error(
                    result.type, result.reason, f"{route.field}: {result.message}"
                )
                return DirectResponse(result.status)
            if result is None:
                continue
            empty += result.no_endpoints
            hashed |= result.cluster.lb_strategy is LoadBalancerStrategy.REQUEST_HASH
            weight = 1 if all_zero else ref.weight
            clusters.append(
                WeightedCluster(result.cluster.name, weight, _backend_policies(result, filters))
            )
        return clusters, empty, hashed

    # --- one host ------------------------------------------------------------------------------

    def _host(
        self, host: str, candidates: list[_Candidate], members: list[ParsedRouteGroup]
    ) -> list[tuple[str, VirtualHost]]:
        owner = self.ctx.ownership.owner(HTTP_LISTENER, host)
        if owner is None or not _is_routegroup(owner):
            what = str(owner.ref) if owner is not None else "another object"
            for rg in members:
                where = (
                    f"spec.hosts[{rg.spec.hosts.index(host)}]"
                    if host in rg.spec.hosts
                    else "spec.hosts"
                )
                self.status[rg.key].error(
                    ACCEPTED,
                    "HostnameConflict",
                    f'{where}: host "{host}" is already owned by {what}; this RouteGroup\'s '
                    "routes for it are not served",
                )
            return []
        sorted_candidates = sorted(candidates, key=lambda c: c.priority)
        merged = self._tiled_segments(merge_registrations(sorted_candidates))
        self._shadowed(host, merged)
        ordered = chained_fractions([r for _, r in merged], [c.drawn for c, _ in merged])
        for c in candidates:
            self.status[c.rg.key].served = True
        out: list[tuple[str, VirtualHost]] = [
            (HTTP_LISTENER, VirtualHost(name=host, hostname=host, routes=ordered, owner=owner.ref))
        ]
        tls = self._tls(host, members)
        if tls is not None:
            out.append(
                (
                    HTTPS_LISTENER,
                    VirtualHost(name=host, hostname=host, routes=ordered, owner=owner.ref, tls=tls),
                )
            )
        return out

    def _tiled_segments(
        self, merged: list[tuple[_Candidate, Route]]
    ) -> list[tuple[_Candidate, Route]]:
        """Without the routes of TrafficSegment(min, max) whose min is above where the lower
        segments of the same match end: with one draw per request the route's threshold max
        would also take the gap below min, which Skipper leaves to other routes."""
        ends: dict[RouteMatch, float] = {}
        out: list[tuple[_Candidate, Route]] = []
        refused: set[tuple[str, str]] = set()
        for candidate, route in merged:
            rest = dataclasses.replace(route.match, runtime_fraction=None)
            end = ends.get(rest, 0.0)
            if candidate.segment_start > end + 1e-9:
                key = (str(candidate.rg.key), route.source.field)
                if key not in refused:
                    refused.add(key)
                    self.status[candidate.rg.key].error(
                        ACCEPTED,
                        "PredicateNotSupported",
                        f"{route.source.field}: predicate TrafficSegment: its segment starts at "
                        f"{candidate.segment_start:g}, but the segments of routes with the same "
                        f"other predicates end at {end:g}: Envoy draws one random value per "
                        "request, and only segments that tile [0, max) from 0 can share it; the "
                        "route is not served",
                    )
                continue
            fraction = route.match.runtime_fraction
            if candidate.drawn or fraction is None:
                ends[rest] = 1.0 if fraction is None else end
            else:
                ends[rest] = max(end, fraction)
            out.append((candidate, route))
        return out

    def _shadowed(self, host: str, ordered: list[tuple[_Candidate, Route]]) -> None:
        """Warns about routes that an earlier route with the very same match hides: Skipper
        calls the choice between them unspecified; here the earlier one takes every request."""
        first: dict[RouteMatch, Route] = {}
        for c, route in ordered:
            match = route.match
            if match.runtime_fraction is not None:
                continue
            earlier = first.setdefault(match, route)
            if earlier is route or earlier.source == route.source:
                continue
            by = earlier.source
            self.status[c.rg.key].warning(
                "RouteShadowed",
                f'{route.source.field}: every request it matches on host "{host}" goes to '
                f"{by.object} {by.field}, which "
                "matches the same requests and comes first",
            )

    def _tls(self, host: str, members: list[ParsedRouteGroup]) -> TLSTermination | None:
        """The first usable Secret among the members' `tls` entries for the host (oldest
        RouteGroup first); later entries naming another Secret are reported."""
        chosen: tuple[str, ParsedRouteGroup, str] | None = None  # (secret name, rg, field)
        for rg in sorted(members, key=lambda r: r.obj.age_key):
            st = self.status[rg.key]
            for tls in rg.spec.tls:
                if host not in tls.hosts or host not in rg.spec.hosts:
                    continue
                if chosen is not None:
                    if (chosen[1].obj.namespace, chosen[2]) != (rg.obj.namespace, tls.secret_name):
                        st.warning(
                            "CertificateConflict",
                            f'{tls.field}: host "{host}" already uses Secret '
                            f'"{chosen[1].obj.namespace}/{chosen[2]}" from '
                            f"{chosen[1].obj.ref}; this entry is ignored for it",
                        )
                    continue
                result = self.ctx.secrets.tls_secret(
                    rg.obj.namespace, tls.secret_name, for_namespace=rg.obj.namespace
                )
                if isinstance(result, Unresolved):
                    st.error(
                        RESOLVED_REFS,
                        result.reason,
                        f'{tls.field}.secretName: {result.message}; host "{host}" is not served '
                        "over HTTPS by this entry",
                    )
                    continue
                chosen = (result.name, rg, tls.secret_name)
        if chosen is None:
            return None
        https_owner = self.ctx.ownership.owner(HTTPS_LISTENER, host)
        if https_owner is not None and not _is_routegroup(https_owner):
            for rg in members:
                self.status[rg.key].error(
                    ACCEPTED,
                    "HostnameConflict",
                    f'spec.tls: host "{host}" is already owned on the HTTPS listener by '
                    f"{https_owner.ref}; this RouteGroup's routes for it are not served "
                    "over HTTPS",
                )
            return None
        return TLSTermination(secret=chosen[0])

    def _unused_tls(self, rg: ParsedRouteGroup) -> None:
        for tls in rg.spec.tls:
            for j, host in enumerate(tls.hosts):
                if host not in rg.spec.hosts:
                    # Skipper intersects tls hosts with spec.hosts and logs the rest.
                    self.status[rg.key].warning(
                        "TLSHostNotInHosts",
                        f'{tls.field}.hosts[{j}]: host "{host}" is not in spec.hosts; the entry '
                        "does nothing for it",
                    )


# Filters that act on the upstream request or the backend's endpoints: on a route that answers
# itself Envoy installs nothing for them (a mirror is part of forwarding in Envoy).
_UPSTREAM_FILTERS = {
    "tee": "Envoy mirrors only requests it forwards",
    "fadeIn": "there are no backend endpoints to fade in",
    "consecutiveBreaker": "there are no backend endpoints to break the circuit of",
    "backendTimeout": "there is no backend request to time out",
    "consistentHashKey": "there are no backend endpoints to choose by hash",
    "consistentHashBalanceFactor": "there are no backend endpoints to choose by hash",
}
# Cluster settings the loopback cluster (turnout's own listener) does not take.
_ENDPOINT_FILTERS = ("fadeIn", "consecutiveBreaker", "consistentHashBalanceFactor")
# Envoy's slow start exists for these balancers only.
_SLOW_START_STRATEGIES = (
    LoadBalancerStrategy.ROUND_ROBIN,
    LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
)


def _builtin_predicates(route: RouteSpec) -> list[tuple[Call, str]]:
    """The predicates of a route's `path`, `pathSubtree` and `pathRegexp`, in Skipper's order."""
    builtin: list[tuple[Call, str]] = []
    if route.path:
        builtin.append((Call("Path", (route.path,), _BUILTIN), f"{route.field}.path"))
    elif route.path_subtree:
        builtin.append(
            (Call("PathSubtree", (route.path_subtree,), _BUILTIN), f"{route.field}.pathSubtree")
        )
    if route.path_regexp:
        builtin.append(
            (Call("PathRegexp", (route.path_regexp,), _BUILTIN), f"{route.field}.pathRegexp")
        )
    return builtin


def _sourced_calls(
    texts: Sequence[str], parse: Callable[[str], tuple[Call, ...]], field: str
) -> list[tuple[Call, str]]:
    """The calls of each of `texts`, each with the field it was written in (`field[j]`)."""
    calls: list[tuple[Call, str]] = []
    for j, text in enumerate(texts):
        for call in parse(text):
            calls.append((call, f"{field}[{j}]"))
    return calls


def _candidates(
    rg: ParsedRouteGroup,
    route: RouteSpec,
    position: int,
    k: int,
    match: MatchTranslation,
    action: RouteAction,
    policies: RoutePolicies,
) -> list[_Candidate]:
    """The registrations of one method's route (`k`) on the nodes of Skipper's path tree."""
    nodes: tuple[tuple[Node | None, tuple[Segment, ...] | None], ...] = ((None, None),)
    base = ""
    if match.tree_path is not None:
        nodes = tree_nodes(match.tree_path, match.tree_subtree)
        base = subtree_base(match.tree_path) if match.tree_subtree else ""
    source = RouteSource(rg.obj.ref, route.field)
    drawn = match.drawn_anew()
    out: list[_Candidate] = []
    for v, route_match in enumerate(match.route_matches()):
        graph_routes = _graph_routes(route_match, action, source, policies)
        for n, graph_route in enumerate(graph_routes):
            group = (position, route.index, k, v, n)
            for node, key in nodes:
                order = priority(key, match.weight, (position, route.index, k), match.segment_start)
                out.append(
                    _Candidate(
                        graph_route,
                        order,
                        rg,
                        group,
                        node,
                        base,
                        drawn[v],
                        match.segment_start,
                    )
                )
    return out


def _graph_routes(
    route_match: RouteMatch, action: RouteAction, source: RouteSource, policies: RoutePolicies
) -> list[Route]:
    """A route match's graph routes: a looping one's "max loopbacks" route, then the route."""
    graph_routes: list[Route] = []
    if _loops(action):
        # A request this route already sent round once: Skipper's "max loopbacks".
        looped = dataclasses.replace(
            route_match,
            headers=(
                *route_match.headers,
                HeaderMatch(rg_backends.LOOPBACK_HEADER, StringMatchKind.PRESENT),
            ),
        )
        limit = DirectResponse(rg_backends.LOOPBACK_LIMIT_STATUS, "max loopbacks reached")
        graph_routes.append(Route(looped, limit, source, policies))
    graph_routes.append(Route(route_match, action, source, policies))
    return graph_routes


def _backend_policies(
    result: rg_backends.Upstream, filters: FilterTranslation
) -> BackendPolicies | None:
    """A resolved backend's own policies: the loop mark, its no-endpoints answer, its Host."""
    backend_policies = filters.backend_policies
    if result.loopback:
        backend_policies = _with_loopback_mark(backend_policies)
    if result.no_endpoints:
        # Skipper's route for this backend answers 502 itself; so does its share here
        # (all shares empty: the whole route, below).
        backend_policies = dataclasses.replace(
            backend_policies or BackendPolicies(), direct_response=_NO_ENDPOINTS
        )
    if result.host_rewrite is not None and not filters.preserve_host:
        backend_policies = dataclasses.replace(
            backend_policies or BackendPolicies(),
            host_rewrite=HostRewrite(literal=result.host_rewrite),
        )
    return backend_policies


def _uninstallable(
    rg: ParsedRouteGroup,
    backends: Sequence[BackendSpec],
    filter_calls: Sequence[tuple[Call, str]],
    filters: FilterTranslation,
) -> list[CallProblem]:
    """Filters translated on their own that the route's backends or action leave with nothing
    to act on in Envoy: refused rather than silently dropped."""
    answers = _answers_itself(backends, filters)
    refused = {p.index for p in filters.problems}
    out = _call_problems(backends, filter_calls, refused, answers)
    if answers is not None:
        return out
    loopbacks = [b for b in backends if b.type is BackendType.LOOPBACK]
    if loopbacks:
        skipped = refused | {p.index for p in out}
        out.extend(_loop_escapes(filter_calls, skipped, loopbacks[0]))
    host_filter = _host_filter(filter_calls)
    if loopbacks and host_filter >= 0 and host_filter not in refused:
        out.extend(_foreign_loop_host(rg, loopbacks[0], filter_calls, host_filter, filters))
    preserve = _preserve_host_problem(backends, filter_calls, filters)
    if preserve is not None:
        out.append(preserve)
    return out


def _answers_itself(backends: Sequence[BackendSpec], filters: FilterTranslation) -> str | None:
    """What answers the route without a backend, if something does (for the refusals)."""
    if backends and all(b.type is BackendType.SHUNT for b in backends):
        return "its backend is <shunt>"
    if isinstance(filters.action, Redirect):
        return "redirectTo"
    if isinstance(filters.action, DirectResponse):
        return "status and inlineContent"
    return None


def _call_problems(
    backends: Sequence[BackendSpec],
    filter_calls: Sequence[tuple[Call, str]],
    refused: set[int],
    answers: str | None,
) -> list[CallProblem]:
    """Each filter not refused already that names the loop mark, acts upstream of a route
    that answers itself, or has nothing to act on with the route's backends."""
    out: list[CallProblem] = []
    for index, (call, _) in enumerate(filter_calls):
        name = call.name
        if index in refused:
            continue
        if _names_loop_mark(call):
            out.append(
                CallProblem(
                    name,
                    index,
                    f"filter {name} is not supported with the header "
                    f'"{rg_backends.LOOPBACK_HEADER}": turnout marks looped requests with it to '
                    "stop them after one loop, and a route may not read or change the mark",
                )
            )
            continue
        if answers is not None:
            if name in _UPSTREAM_FILTERS:
                out.append(
                    CallProblem(
                        name,
                        index,
                        f"filter {name} is not supported on this route: it answers itself "
                        f"({answers}) and {_UPSTREAM_FILTERS[name]}",
                    )
                )
            continue
        problem = _backend_problem(name, index, backends)
        if problem is not None:
            out.append(problem)
    return out


def _preserve_host_problem(
    backends: Sequence[BackendSpec],
    filter_calls: Sequence[tuple[Call, str]],
    filters: FilterTranslation,
) -> CallProblem | None:
    """The last `preserveHost("false")` (unless a later preserveHost undid it), which Envoy
    cannot honour for Service and lb backends."""
    preserve_false = -1
    for index, (call, _) in enumerate(filter_calls):
        if call.name == "preserveHost":
            preserve_false = index if call.args == ("false",) else -1
    if preserve_false < 0 or filters.policies.host_rewrite is not None:
        return None
    kept = [b for b in backends if b.type in (BackendType.SERVICE, BackendType.LB)]
    if not kept:
        return None
    b = kept[0]
    return CallProblem(
        "preserveHost",
        preserve_false,
        f'filter preserveHost("false") is not supported with the {b.type.value} '
        f'backend "{b.name}" ({b.field}): turnout sends the client\'s Host to '
        "Service and lb endpoints (Skipper's -proxy-preserve-host), and Envoy cannot "
        "send the chosen endpoint's address instead",
    )


def _backend_problem(name: str, index: int, backends: Sequence[BackendSpec]) -> CallProblem | None:
    """Why filter `name` has nothing to act on with one of the route's backends, if it has not:
    endpoint filters on a loopback, fadeIn with a balancing Envoy has no slow start for."""
    for b in backends:
        if name in _ENDPOINT_FILTERS and b.type is BackendType.LOOPBACK:
            return CallProblem(
                name,
                index,
                f'filter {name} is not supported with the loopback backend "{b.name}" '
                f"({b.field}): its requests go back to turnout's own listener, which "
                "has no endpoints of the backend's to apply it to",
            )
        strategy = rg_backends.LB_STRATEGIES.get(b.algorithm)
        if (
            name == "fadeIn"
            and b.type in (BackendType.SERVICE, BackendType.LB, BackendType.NETWORK)
            and strategy not in _SLOW_START_STRATEGIES
        ):
            return CallProblem(
                name,
                index,
                f'filter fadeIn is not supported with backend "{b.name}" ({b.field}): '
                f"Envoy has slow start only for round robin and least request "
                f'balancing, not for algorithm "{b.algorithm}"',
            )
    return None


def _loop_escapes(
    filter_calls: Sequence[tuple[Call, str]], skipped: set[int], loopback: BackendSpec
) -> list[CallProblem]:
    """The filters (not already refused, `skipped`) that would let a looped request leave the
    RouteGroup's own hosts."""
    out: list[CallProblem] = []
    for index, (call, _) in enumerate(filter_calls):
        escape = _loop_escape(call) if index not in skipped else None
        if escape is not None:
            out.append(
                CallProblem(
                    call.name,
                    index,
                    f"filter {call.name} is not supported with the loopback backend "
                    f'"{loopback.name}" ({loopback.field}): {escape}',
                )
            )
    return out


def _names_loop_mark(call: Call) -> bool:
    return any(rg_backends.LOOPBACK_HEADER in (string_arg(arg) or "").lower() for arg in call.args)


# Request headers the second hop of a loop takes for the client's address or for Envoy's own
# instructions: a request from 127.0.0.1 is internal to Envoy, so it trusts them.
_FORWARDING_HEADERS = ("forwarded", "x-real-ip")
_FORWARDING_PREFIXES = ("x-forwarded-", "x-envoy-")
# What may follow the leading "/" of a path the second hop reads as origin-form.
_ORIGIN_PATH = re.compile(r"/[^\x00-\x20\x7f#]*")


def _loop_escape(call: Call) -> str | None:
    """Why a filter on a loopback route could let the looped request leave the RouteGroup's own
    hosts or pass for another client, or None. The second hop parses the request line again: a
    path that does not start with "/" is absolute-form, and Envoy takes the authority from it;
    and it comes from 127.0.0.1, so Envoy trusts its X-Forwarded-For and x-envoy-* headers."""
    args = [string_arg(arg) for arg in call.args]
    if call.name in ("setRequestHeader", "appendRequestHeader", "dropRequestHeader") and args:
        header = (args[0] or "").lower()
        if header in _FORWARDING_HEADERS or header.startswith(_FORWARDING_PREFIXES):
            return (
                f'the looped request comes from Envoy itself, which trusts "{args[0]}" on it; '
                "a loopback route may not change the client's forwarding headers"
            )
    if call.name == "modPath" and len(args) == 2:
        replacement = args[1]
        if replacement is None or not _ORIGIN_PATH.fullmatch(replacement):
            return (
                "the looped request line would carry a path that may not start with a literal "
                '"/" (the replacement must start with "/" and hold no space or control '
                "character): Envoy reads any other request target as an absolute URI and takes "
                "its host from it, which could leave this RouteGroup's hosts"
            )
    if call.name == "setPath" and args and (args[0] is None or not _ORIGIN_PATH.fullmatch(args[0])):
        return (
            'the looped request line would carry a path that does not start with "/", which '
            "Envoy reads as an absolute URI with a host of its own"
        )
    return None


def _host_filter(filter_calls: Sequence[tuple[Call, str]]) -> int:
    """The index of the last filter that sets the Host header; -1 when none does."""
    found = -1
    for index, (call, _) in enumerate(filter_calls):
        if call.name in ("setRequestHeader", "appendRequestHeader") and call.args:
            if isinstance(call.args[0], str) and call.args[0].lower() == "host":
                found = index
        elif call.name == "preserveHost" and call.args == ("true",):
            found = -1
    return found


def _foreign_loop_host(
    rg: ParsedRouteGroup,
    loopback: BackendSpec,
    filter_calls: Sequence[tuple[Call, str]],
    index: int,
    filters: FilterTranslation,
) -> list[CallProblem]:
    """A loopback route re-enters Envoy with the Host it sends; with another tenant's host it would
    reach that tenant's routes as a request from Envoy itself (past their ClientIP and Source
    allow-lists), so it may only name this RouteGroup's own hosts."""
    rewrite = filters.policies.host_rewrite
    literal = rewrite.literal if rewrite is not None else None
    if literal is None:
        return []
    name = literal.lower().rstrip(".")
    host = name.rpartition(":")[0] if name.rpartition(":")[2].isdigit() else name
    if host in rg.spec.hosts:
        return []
    call = filter_calls[index][0]
    own = ", ".join(rg.spec.hosts) if rg.spec.hosts else "none: it serves every other host"
    return [
        CallProblem(
            call.name,
            index,
            f'filter {call.name}: with the loopback backend "{loopback.name}" ({loopback.field}) '
            f'the request would re-enter turnout for host "{literal}", which is not one of this '
            f"RouteGroup's hosts ({own}); a loopback may only route again within its own hosts",
        )
    ]


def merge_registrations(ordered: Sequence[_Candidate]) -> list[tuple[_Candidate, Route]]:
    """The graph routes of registrations in first-match order: a run of one route's
    registrations becomes one graph route where one path match covers the run's nodes."""
    out: list[tuple[_Candidate, Route]] = []
    i = 0
    while i < len(ordered):
        first = ordered[i]
        j = i + 1
        while j < len(ordered) and ordered[j].group == first.group and ordered[j].rg is first.rg:
            j += 1
        nodes = {c.node for c in ordered[i:j]}
        route = first.route
        for path in _run_paths(route.match.path, nodes, first.base):
            out.append((first, dataclasses.replace(route, match=_with_path(route.match, path))))
        i = j
    return out


def _with_path(match: RouteMatch, path: PathMatch) -> RouteMatch:
    return match if match.path == path else dataclasses.replace(match, path=path)


def _run_paths(whole: PathMatch, nodes: set[Node | None], base: str) -> list[PathMatch]:
    """The path matches of a run of one route's registrations on `nodes`."""
    if None in nodes or Node.PATH in nodes:
        return [whole]
    if Node.SLASH in nodes and Node.CATCH_ALL in nodes and (Node.BASE in nodes or not base):
        return [whole]  # all of a PathSubtree's nodes
    regex = wildcard_path_regex(base) if base else None

    def exact(suffix: str) -> PathMatch:
        if regex is not None:
            return PathMatch(PathMatchKind.REGEX, regex + re.escape(suffix))
        return PathMatch(PathMatchKind.EXACT, base + suffix)

    def below() -> PathMatch:
        # The catch-all takes a non-empty rest. A prefix that also takes `base/` is the same:
        # the route's own `base/` registration always comes before its catch-all one.
        if regex is not None:
            return PathMatch(PathMatchKind.REGEX, regex + "/.*")
        return PathMatch(PathMatchKind.PREFIX, base + "/")

    out: list[PathMatch] = []
    if Node.BASE in nodes:
        out.append(exact(""))
    if Node.CATCH_ALL in nodes:
        out.append(below())
    elif Node.SLASH in nodes:
        out.append(exact("/"))
    return out


def chained_fractions(
    routes: Sequence[Route], drawn: Sequence[bool] | None = None
) -> tuple[Route, ...]:
    """The runtime fractions of routes in first-match order, for Envoy's one draw per request.

    Skipper draws a new random number for every Traffic predicate it evaluates (`drawn`, the
    default), but compares one draw per request with every TrafficSegment. For routes that differ
    only in their fraction, the share each takes under Skipper's draws is what is left times its
    chance: a Traffic(f) route takes f of what the earlier ones left, a TrafficSegment(0, m)
    route what its segment holds beyond the earlier segments'. With one draw, a route takes its
    share when its threshold is the sum of the shares so far."""
    # Per match: (the threshold so far, the chance that every earlier Traffic draw missed, the
    # end of the earlier segments).
    state: dict[RouteMatch, tuple[float, float, float]] = {}
    out: list[Route] = []
    for i, route in enumerate(routes):
        fraction = route.match.runtime_fraction
        rest = dataclasses.replace(route.match, runtime_fraction=None)
        before, left, taken = state.get(rest, (0.0, 1.0, 0.0))
        if fraction is None:
            state[rest] = (1.0, 0.0, taken)
            out.append(route)
            continue
        if drawn is None or drawn[i]:
            threshold = before + left * (1.0 - taken) * fraction
            state[rest] = (threshold, left * (1.0 - fraction), taken)
        else:
            if left == 1.0:
                threshold = max(before, fraction)  # segments of the one draw: no arithmetic
            else:
                threshold = before + left * max(0.0, fraction - taken)
            state[rest] = (threshold, left, max(taken, fraction))
        if threshold != fraction:
            route = dataclasses.replace(
                route, match=dataclasses.replace(route.match, runtime_fraction=threshold)
            )
        out.append(route)
    return tuple(out)


def _loops(action: RouteAction) -> bool:
    return isinstance(action, Forward) and any(
        wc.policies is not None
        and wc.policies.request_headers is not None
        and any(h.name == rg_backends.LOOPBACK_HEADER for h in wc.policies.request_headers.set)
        for wc in action.clusters
    )


# What Skipper's route for a Service without endpoints answers: status(502) -> inlineContent.
_NO_ENDPOINTS = DirectResponse(502, "no endpoints")


def _with_loopback_mark(policies: BackendPolicies | None) -> BackendPolicies:
    policies = policies or BackendPolicies()
    headers = policies.request_headers or HeaderPolicy()
    mark = HeaderValue(rg_backends.LOOPBACK_HEADER, "1")
    # The client address as the first hop determined it, in place of whatever X-Forwarded-For
    # the route's filters or the client left: with --num-trusted-hops 1 the second hop takes it
    # for the client; with 0 (or more than 1) it takes the peer, 127.0.0.1.
    client = HeaderValue("x-forwarded-for", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%")
    # ClientIP on the second hop reads it (only there: see rg_predicates.LOOPBACK_CLIENT_HEADER).
    looped = HeaderValue(
        rg_predicates.LOOPBACK_CLIENT_HEADER, "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
    )
    kept = tuple(h for h in headers.set if h.name.lower() != "x-forwarded-for")
    return dataclasses.replace(
        policies, request_headers=dataclasses.replace(headers, set=(*kept, mark, client, looped))
    )


def compile_routegroups(
    snapshot: Snapshot, ctx: CompileContext, parsed: list[ParsedRouteGroup] | None = None
) -> DialectOutput:
    if parsed is None:
        parsed = select_routegroups(snapshot, ctx.options)
    return _Compiler(snapshot, ctx, parsed).run()

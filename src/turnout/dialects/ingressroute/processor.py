"""IngressRoute roots, delegation and routes, following seed 000 and Contour v1.0's builder.

One `_Compiler` lives for one compile. It walks the delegation graph depth-first from every root
that owns its hostnames and fills a status accessor per object as it goes.

What an error costs (docs/dialects/ingressroute.md, "Errors and what they cost"):

- anything wrong in an object itself (its fields, a port, a Service it names, its TLS secret,
  its hostname) rejects the whole object, as seed 000's validation rule 1 says: none of its
  routes are served, and a root then has no virtual host;
- a delegated object whose routes leave the delegated prefix is rejected under that parent (seed
  000's rule 2; Contour reports it on the child);
- a delegation that cannot be followed (missing target, a root as target, a cycle) is reported on
  the object that wrote it and costs only the delegated prefix, which answers 502, as does the
  prefix of a delegated object that is rejected. An object is never taken down whole by what
  another object does, so that no tenant can break the routes of the one that delegated to it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cmp_to_key

from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER, CompileOptions
from turnout.dialects.contour.health_check import contour_http_health_check
from turnout.dialects.contour.order import compare_routes
from turnout.dialects.contour.session_affinity import SESSION_AFFINITY_COOKIE
from turnout.dialects.ingressroute.spec import (
    GROUP,
    KIND,
    HealthCheckSpec,
    ParsedIngressRoute,
    RouteSpec,
    ServiceSpec,
    parse_ingressroute,
)
from turnout.dialects.ingressroute.status import (
    DELEGATION_ORDER,
    NAMESPACE_ORDER,
    OWNERSHIP_ORDER,
    SERVICE_ORDER,
    TLS_ORDER,
    StatusAccessor,
)
from turnout.dialects.ingressroute.tcpproxy import TCPInputs, compile_tcpproxies
from turnout.dialects.ingressroute.upstream import (
    IGNORED_VALIDATION,
    TLS_UPSTREAM_VALIDATION,
    annotated_protocol,
    upstream_validation,
    validation_error_message,
)
from turnout.dialects.tls_vhosts import SecureRoute, tls_virtual_hosts
from turnout.graph.dialect import CompileContext, DialectOutput
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Forward,
    HashPolicy,
    HashSource,
    HTTPHealthCheck,
    LoadBalancerStrategy,
    PathMatch,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    TCPProxy,
    TLSTermination,
    UpstreamSettings,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.services import ServicePort, Unresolved, external_name_phrase, find_service_port
from turnout.objects import KubeObject, ObjectRef
from turnout.store import Snapshot

_STRATEGIES = {
    "": LoadBalancerStrategy.ROUND_ROBIN,
    "WeightedLeastRequest": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
    "Random": LoadBalancerStrategy.RANDOM,
    "Cookie": LoadBalancerStrategy.COOKIE,
}

Key = tuple[str, str]


def parse_all(snapshot: Snapshot) -> dict[Key, ParsedIngressRoute]:
    """Both versions share one namespace/name space: the store keeps one object per key."""
    return {(o.namespace, o.name): parse_ingressroute(o) for o in snapshot.kind(GROUP, KIND)}


def root_allowed(namespace: str, options: CompileOptions) -> bool:
    return not options.root_namespaces or namespace in options.root_namespaces


def claimed_hostnames(ir: ParsedIngressRoute, options: CompileOptions) -> list[tuple[str, str]]:
    """(listener, hostname) pairs a root claims: every valid hostname (fqdn and aliases) on the
    HTTP listener, and on the HTTPS listener too when it terminates TLS. A root outside the root
    namespaces, or with any invalid hostname, claims nothing and so cannot block a legitimate one.
    """
    vh = ir.spec.virtualhost
    if vh is None or not root_allowed(ir.obj.namespace, options):
        return []
    listeners = (HTTP_LISTENER, HTTPS_LISTENER) if vh.tls is not None else (HTTP_LISTENER,)
    return [(listener, host) for host in vh.hostnames for listener in listeners]


def contained(match: str, prefix: str) -> bool:
    """Whether a delegated route stays inside the delegated prefix.

    Contour's `matchesPathPrefix` is segment-aware: `/foo` holds `/foo` and `/foo/bar`, not
    `/foobar`. One addition: below a prefix that ends in `/`, a route must also start with the
    prefix as a string, or `/foo` under `/foo/` would route `/foobar`, which was never delegated.
    """
    if not match:
        return False
    with_slash = match if match.endswith("/") else match + "/"
    parent = prefix if prefix.endswith("/") else prefix + "/"
    if not with_slash.startswith(parent):
        return False
    return not prefix.endswith("/") or match.startswith(prefix)


@dataclass(frozen=True, slots=True)
class _Candidate:
    route: Route
    permit_insecure: bool
    key: Key  # whose status hears about a replaced duplicate


@dataclass(frozen=True, slots=True)
class _LocalRoute:
    spec: RouteSpec
    forward: Forward | None  # None for a delegation (or a route without services)


class _BudgetExceeded(Exception):
    """The walk from one root went over a budget; the message says which."""


class _Compiler:
    def __init__(
        self, snapshot: Snapshot, ctx: CompileContext, parsed: dict[Key, ParsedIngressRoute]
    ) -> None:
        self.snapshot = snapshot
        self.ctx = ctx
        self.irs = parsed
        self.status: dict[Key, StatusAccessor] = {}
        for key, ir in parsed.items():
            accessor = StatusAccessor(ir.obj, is_root=ir.is_root)
            for problem in ir.problems:
                accessor.add(problem)
            self.status[key] = accessor
        # The routes of each object with its Services resolved, computed the first time a walk
        # reaches it; None when the object is rejected.
        self.local: dict[Key, list[_LocalRoute] | None] = {}
        # Service lookups by (namespace, name, port); many routes name the same Service.
        self.ports: dict[tuple[str, str, int], tuple[KubeObject | None, ServicePort | None]] = {}
        self.budget = 0
        self.walked: set[tuple[str, str]] = set()  # the routes the current root's walk reached

    def run(self) -> DialectOutput:
        vhosts: list[tuple[str, VirtualHost]] = []
        self.tcp_proxies: list[tuple[str, TCPProxy]] = []  # filled by `_root`
        for key in sorted(self.irs):
            ir = self.irs[key]
            if ir.is_root:
                vhosts.extend(self._root(ir))
        self._orphans()
        statuses = tuple(self.status[k].build() for k in sorted(self.status))
        return DialectOutput(
            virtual_hosts=tuple(vhosts), statuses=statuses, tcp_proxies=tuple(self.tcp_proxies)
        )

    # --- roots ---------------------------------------------------------------------------------

    def _root(self, ir: ParsedIngressRoute) -> list[tuple[str, VirtualHost]]:
        st = self.status[ir.key]
        vh = ir.spec.virtualhost
        assert vh is not None
        if not root_allowed(ir.obj.namespace, self.ctx.options):
            st.error(
                NAMESPACE_ORDER,
                "RootNotAllowedInNamespace",
                "root IngressRoute cannot be defined in this namespace",
            )
            return []
        if not vh.hostnames:
            return []  # the reader reported why
        if not self._owns_hostnames(ir):
            return []
        if not ir.valid:
            return []
        tls: TLSTermination | None = None
        if vh.tls is not None and not vh.tls.passthrough:
            tls = self._tls(ir)
            if tls is None:
                return []
        if ir.spec.tcpproxy is not None:
            # The hostnames' HTTPS side is the TCP proxy (`tcpproxy.py`); the routes, as in
            # Contour v1.0, are then served on plain HTTP as they are.
            inputs = TCPInputs(self.snapshot, self.ctx, self.irs, self.status)
            proxies = compile_tcpproxies(inputs, ir, vh.hostnames, tls)
            if proxies is None:
                return []
            self.tcp_proxies.extend((HTTPS_LISTENER, p) for p in proxies)
            tls = None

        # Delegation graphs with shared children grow exponentially in the number of paths
        # through them: a tenant must not stall every compile with one (Contour has no limit).
        limit = self.ctx.options.max_include_revisits
        self.budget, self.walked = limit, set()
        try:
            candidates = self._walk(ir, None, ())
        except _BudgetExceeded:
            st.error(
                DELEGATION_ORDER,
                "DelegationGraphTooLarge",
                f"the delegation graph of this root walks IngressRoutes it already walked on "
                f"another path, for more than {limit} objects and routes "
                "(--max-include-revisits); none of its routes are served",
            )
            return []
        if not candidates:
            return []  # as in Contour, a virtual host without routes is left out
        ordered = sorted(self._dedupe(candidates), key=cmp_to_key(_compare_candidates))
        routes = tuple(c.route for c in ordered)
        out: list[tuple[str, VirtualHost]] = []
        for host in vh.hostnames:
            if tls is None:
                out.append(
                    (
                        HTTP_LISTENER,
                        VirtualHost(name=host, hostname=host, routes=routes, owner=ir.obj.ref),
                    )
                )
            else:
                out.extend(
                    tls_virtual_hosts(
                        hostname=host,
                        owner=ir.obj.ref,
                        routes=[SecureRoute(c.route, c.permit_insecure) for c in ordered],
                        tls=tls,
                        disable_permit_insecure=self.ctx.options.disable_permit_insecure,
                    )
                )
        return out

    def _owns_hostnames(self, ir: ParsedIngressRoute) -> bool:
        """turnout's ownership rule (docs/architecture.md, "Compiling"): the oldest claimant of a
        hostname on a listener keeps it; a root that lost any of its hostnames is rejected
        whole."""
        st = self.status[ir.key]
        owns = True
        for listener, host in claimed_hostnames(ir, self.ctx.options):
            owner = self.ctx.ownership.owner(listener, host)
            if owner is None or owner.ref == ir.obj.ref:
                continue
            owns = False
            assert ir.spec.virtualhost is not None
            what = "fqdn" if host == ir.spec.virtualhost.hostnames[0] else "alias"
            st.error(
                OWNERSHIP_ORDER,
                "DuplicateVhost",
                f'{what} "{host}" is already owned by {owner.ref}',
            )
        return owns

    def _tls(self, ir: ParsedIngressRoute) -> TLSTermination | None:
        st = self.status[ir.key]
        vh = ir.spec.virtualhost
        assert vh is not None and vh.tls is not None
        written = vh.tls.secret_name
        namespace, _, name = written.rpartition("/")
        result = self.ctx.secrets.tls_secret(
            namespace or ir.obj.namespace, name, for_namespace=ir.obj.namespace
        )
        if isinstance(result, Unresolved):
            # Contour v1.0's messages; turnout adds the reason a Secret is unusable.
            if result.reason == "DelegationNotPermitted":
                message = f"{written}: certificate delegation not permitted"
            elif result.reason == "SecretNotFound":
                message = f"TLS Secret [{written}] not found or is malformed"
            else:
                message = f"TLS Secret [{written}] not found or is malformed: {result.message}"
            st.error(TLS_ORDER, result.reason, message)
            return None
        return TLSTermination(secret=result.name, min_version=vh.tls.min_version)

    def _dedupe(self, candidates: list[_Candidate]) -> list[_Candidate]:
        """Contour keys a virtual host's routes by their match, so a later route with the same
        match replaces an earlier one; turnout does the same, and says so."""
        kept: dict[RouteMatch, _Candidate] = {}
        for c in candidates:
            prev = kept.get(c.route.match)
            src = c.route.source
            # One route reached through two delegations only replaces itself.
            itself = prev is not None and (prev.route.source.object, prev.route.source.field) == (
                src.object,
                src.field,
            )
            if prev is not None and not itself:
                self.status[prev.key].warn(
                    "DuplicateMatch",
                    f'{prev.route.source.field} (match "{prev.route.match.path.value}") is '
                    f"replaced by {src.field} of IngressRoute "
                    f"{src.object.namespace}/{src.object.name}, which has the same match",
                )
            kept[c.route.match] = c
        return list(kept.values())

    # --- the delegation walk -------------------------------------------------------------------

    def _walk(
        self,
        ir: ParsedIngressRoute,
        prefix: str | None,
        visited: tuple[ParsedIngressRoute, ...],
    ) -> list[_Candidate] | None:
        """Routes of `ir` and everything it delegates to, when delegated `prefix` (None for a
        root); None when `ir` is rejected here."""
        local = self._local(ir)
        if local is None:
            return None
        if prefix is not None:
            st = self.status[ir.key]
            outside = [r for r in ir.spec.routes if not contained(r.match, prefix)]
            for route in outside:
                st.error(
                    DELEGATION_ORDER,
                    "PathPrefixMismatch",
                    f'the path prefix "{route.match}" does not match the parent\'s path prefix '
                    f'"{prefix}"',
                )
            if outside:
                return None
        if ir.key in self.walked:
            # An IngressRoute walked again costs its routes again: that, not distinct objects
            # (each bounded by its own caps), is what grows without bound.
            self.budget -= 1 + len(local)
            if self.budget < 0:
                raise _BudgetExceeded
        self.walked.add(ir.key)
        visited = (*visited, ir)
        via = tuple(v.obj.ref for v in visited[:-1])
        out: list[_Candidate] = []
        for entry in local:
            route = entry.spec
            if route.delegate is not None:
                out.extend(self._delegate(ir, route, visited, via))
            elif entry.forward is not None:
                source = RouteSource(ir.obj.ref, route.field, via)
                match = RouteMatch(path=PathMatch.prefix(route.match))
                built = Route(match, entry.forward, source, _route_policies(route))
                out.append(_Candidate(built, route.permit_insecure, ir.key))
        return out

    def _delegate(
        self,
        ir: ParsedIngressRoute,
        route: RouteSpec,
        visited: tuple[ParsedIngressRoute, ...],
        via: tuple[ObjectRef, ...],
    ) -> list[_Candidate]:
        st = self.status[ir.key]
        assert route.delegate is not None
        key = ir.delegate_key(route.delegate)
        dest = self.irs.get(key)
        if dest is None:
            # Contour v1.0 ignored a missing target silently; the space then fell through to
            # the parent's shorter routes.
            st.error(
                DELEGATION_ORDER,
                "DelegateNotFound",
                f'route "{route.match}": delegate {key[0]}/{key[1]} not found',
            )
            return [self._bad_gateway(ir, route, via)]
        if dest.is_root:
            st.error(
                DELEGATION_ORDER,
                "RootDelegatesToRoot",
                "root ingressroute cannot delegate to another root ingressroute",
            )
            return [self._bad_gateway(ir, route, via)]
        if any(v.key == key for v in visited):
            chain = " -> ".join(f"{v.obj.namespace}/{v.obj.name}" for v in (*visited, dest))
            st.error(
                DELEGATION_ORDER,
                "DelegationCycle",
                f"route creates a delegation cycle: {chain}",
            )
            return [self._bad_gateway(ir, route, via)]
        self.status[key].connect(ir.obj.namespace, ir.obj.name, route.match)
        routes = self._walk(dest, route.match, visited)
        if routes is None:
            return [self._bad_gateway(ir, route, via)]
        return routes

    def _bad_gateway(
        self, ir: ParsedIngressRoute, route: RouteSpec, via: tuple[ObjectRef, ...]
    ) -> _Candidate:
        """A 502 for a delegated prefix that has nobody to serve it, so that its requests do not
        fall through to a shorter route of the parent that was never meant for them."""
        source = RouteSource(ir.obj.ref, route.field, via)
        match = RouteMatch(path=PathMatch.prefix(route.match))
        return _Candidate(Route(match, DirectResponse(502), source), route.permit_insecure, ir.key)

    # --- an object's own routes ----------------------------------------------------------------

    def _local(self, ir: ParsedIngressRoute) -> list[_LocalRoute] | None:
        if ir.key in self.local:
            return self.local[ir.key]
        result: list[_LocalRoute] | None = None
        if ir.valid:
            result = []
            for route in ir.spec.routes:
                forward: Forward | None = None
                if route.services and route.delegate is None:
                    forward = self._forward(ir, route)
                    if forward is None:
                        result = None
                        continue  # every missing Service is reported, not only the first
                if result is not None:
                    result.append(_LocalRoute(route, forward))
        self.local[ir.key] = result
        return result

    def _forward(self, ir: ParsedIngressRoute, route: RouteSpec) -> Forward | None:
        """Weighted clusters: an even split when no weight is set, 0 for the unweighted services
        when some are (Contour's `weightedClusters`)."""
        clusters: list[tuple[Cluster, int]] = []
        failed = False
        for svc in route.services:
            cluster = self._cluster(ir, svc, route.match)
            if cluster is None:
                failed = True
            else:
                clusters.append((cluster, svc.weight))
        if failed:
            return None
        total = sum(w for _, w in clusters)
        return Forward(tuple(WeightedCluster(c.name, w if total else 1) for c, w in clusters))

    def _cluster(
        self, ir: ParsedIngressRoute, svc: ServiceSpec, route_match: str = "/"
    ) -> Cluster | None:
        """The cluster for a Service in the object's own namespace (seed 000: an IngressRoute
        only dispatches to Services in its namespace); None, reported, when it cannot be used."""
        st = self.status[ir.key]
        namespace = ir.obj.namespace
        key = (namespace, svc.name, svc.port)
        if key not in self.ports:
            found = self.snapshot.get("", "Service", namespace, svc.name)
            self.ports[key] = (found, find_service_port(found, svc.port) if found else None)
        service, port = self.ports[key]
        if service is None or port is None:
            st.error(
                SERVICE_ORDER,
                "ServiceUnresolvedReference",
                f"Service [{svc.name}:{svc.port}] is invalid or missing",
            )
            return None
        refused = self.ctx.backends.refusal(service)
        if refused is not None:
            # Contour later refused ExternalName Services by default (GHSA-5ph6-qq5x-7jwc: they
            # can point Envoy at anything, its own admin port included); the resolver decides.
            st.error(
                SERVICE_ORDER,
                "ServiceUnresolvedReference",
                f"Service [{svc.name}:{svc.port}] {external_name_phrase(refused)}",
            )
            return None
        settings = UpstreamSettings(
            protocol=annotated_protocol(service.annotations, port.name, port.port),
            lb_strategy=_STRATEGIES.get(svc.strategy, LoadBalancerStrategy.ROUND_ROBIN),
            health_check=_health_check(svc.health_check),
        )
        if svc.validation is not None:
            validation = upstream_validation(
                svc.validation, settings.protocol, namespace, self.ctx.secrets.ca_bundles
            )
            if isinstance(validation, Unresolved):
                st.error(
                    SERVICE_ORDER,
                    TLS_UPSTREAM_VALIDATION,
                    validation_error_message(route_match, svc.name),
                )
                return None
            if validation is None:
                st.warn(
                    IGNORED_VALIDATION,
                    f'ignoring field "{svc.validation.field}"; it only applies to Services whose '
                    "port is annotated upstream-protocol.tls or upstream-protocol.h2",
                )
            settings = dataclasses.replace(settings, validation=validation)
        result = self.ctx.backends.service(namespace, svc.name, svc.port, settings=settings)
        if isinstance(result, Unresolved):
            st.error(
                SERVICE_ORDER,
                "ServiceUnresolvedReference",
                f"Service [{svc.name}:{svc.port}] is invalid or missing",
            )
            return None
        return result

    # --- orphans -------------------------------------------------------------------------------

    def _orphans(self) -> None:
        """Objects without a virtualhost that no walk reached are orphaned. `lastParent` names an
        IngressRoute that delegates to the object but is not itself served (the compile keeps no
        history, so this is the parent that would connect it, not the last one that did)."""
        parents: dict[Key, list[Key]] = {}
        for key, ir in self.irs.items():
            for route in ir.spec.routes:
                if route.delegate is not None:
                    target = ir.delegate_key(route.delegate)
                    if target != key:
                        parents.setdefault(target, []).append(key)
        for key, ir in self.irs.items():
            st = self.status[key]
            if ir.is_root or st.reached:
                continue
            candidates = sorted(parents.get(key, ()))
            if candidates:
                st.last_parent = candidates[0]


def _compare_candidates(a: _Candidate, b: _Candidate) -> int:
    """Contour's route order (a stable sort keeps full ties in walk order)."""
    return compare_routes(a.route, b.route)


def _route_policies(route: RouteSpec) -> RoutePolicies:
    """The route's own policies, plus Contour v1.0's session affinity: a route with a `Cookie`
    service hashes on the `X-Contour-Session-Affinity` cookie, which Envoy sets (a session cookie
    for `/`) when the request has none."""
    if not any(svc.strategy == "Cookie" for svc in route.services):
        return route.policies
    cookie = HashPolicy(
        HashSource.COOKIE, SESSION_AFFINITY_COOKIE, cookie_ttl_s=0.0, cookie_path="/"
    )
    return dataclasses.replace(route.policies, hash_policies=(cookie,))


def _health_check(spec: HealthCheckSpec | None) -> HTTPHealthCheck | None:
    """Contour v1.0's `ingressrouteHealthCheckPolicy`: the same check, and the same defaults
    for fields left at 0, as HTTPProxy's `healthCheckPolicy`."""
    if spec is None:
        return None
    return contour_http_health_check(
        spec.path,
        spec.host,
        spec.interval_seconds,
        spec.timeout_seconds,
        spec.unhealthy_threshold,
        spec.healthy_threshold,
    )


def compile_ingressroutes(
    snapshot: Snapshot,
    ctx: CompileContext,
    parsed: dict[Key, ParsedIngressRoute] | None = None,
) -> DialectOutput:
    """`parsed` may carry `parse_all(snapshot)` from the claims phase, to read objects once."""
    return _Compiler(snapshot, ctx, parse_all(snapshot) if parsed is None else parsed).run()

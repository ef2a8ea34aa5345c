"""HTTPProxy roots, includes and routes, following Contour's `HTTPProxyProcessor`.

One `_Compiler` lives for one compile (like Contour's processor, whose fields are reset after each
run): it walks the include graph depth-first from each root that owns its hostname, and fills a
status accessor per proxy as it goes. With the compile memo, only the roots a change can affect
are walked (`root_index.py`), and the output of the compile before is patched for them.

Error granularity is Contour's: an invalid include is skipped (a missing or root target also gets
a 502 route for the include's space), an invalid route drops every route of its proxy, including
what that proxy gathered from its includes, and an unresolved Service only turns its route into
a 503. A TLS error (a missing, malformed or undelegated Secret, an invalid version range) drops the
whole root: its host is served neither over HTTPS nor over plain HTTP. Other proxies are never
affected.

A root with `virtualhost.tls.secretName` becomes two virtual hosts (`tls_virtual_hosts`): its
routes on the HTTPS listener, and on the HTTP listener the same routes answering 301 to HTTPS,
except those with `permitInsecure` (unless the installation disables permitInsecure). A root with
`tcpproxy` (or `tls.passthrough`) keeps only the HTTP half: its HTTPS side is a TCP proxy
(`tcpproxy.py`). A root whose only route sends to seed 001's `protocol: tcp` services is a TCP
proxy with no HTTP half (`tcp_route.py`). Client validation and the fallback certificate are in
`tls_options.py`.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import cast

from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER, CompileOptions
from turnout.dialects.contour.names import namespaced_name
from turnout.dialects.contour.order import sorted_headers, sorted_queries
from turnout.dialects.httpproxy import (
    authorization,
    health_check,
    jwt,
    route_order,
    route_policies,
    tcp_route,
    tls_options,
    upstream,
    vhost_policies,
)
from turnout.dialects.httpproxy.classes import serves
from turnout.dialects.httpproxy.conditions import (
    IncludeKey,
    header_conditions_error,
    include_conditions_error,
    include_identical,
    include_key,
    merge_headers,
    merge_path,
    merge_query,
    path_conditions_error,
    query_conditions_error,
)
from turnout.dialects.httpproxy.extension_service import (
    ExtensionCluster,
    compile_extension_services,
)
from turnout.dialects.httpproxy.pieces import Pieces, in_order
from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.recording import (
    PROXY_KIND,
    SECRET_KINDS,
    SERVICE_KIND,
    Accessors,
    Changed,
    Key,
    ProxyReads,
    Reached,
    Recorder,
    RecordingBackends,
    RecordingSecrets,
    ServiceReads,
    SubKey,
    Trace,
    reached_of,
    replay_walks,
    units,
)
from turnout.dialects.httpproxy.root_index import RootIndex, moved_statuses, problems_by_proxy
from turnout.dialects.httpproxy.route_order import Candidate, RouteOrder
from turnout.dialects.httpproxy.spec import (
    GROUP,
    INCLUDE_ERROR,
    KIND,
    ORPHANED,
    ROOT_NAMESPACE_ERROR,
    ROUTE_ERROR,
    SERVICE_ERROR,
    SPEC_ERROR,
    TLS_ERROR,
    VIRTUAL_HOST_ERROR,
    IncludeSpec,
    MatchCondition,
    ParsedProxy,
    RouteSpec,
    ServiceSpec,
    TLSSpec,
    parse_proxy,
)
from turnout.dialects.httpproxy.status import ORPHANED_MESSAGE, ProxyStatusAccessor
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD
from turnout.dialects.httpproxy.tcpproxy import (
    PASSTHROUGH,
    TCPPROXY_ERROR,
    Passthrough,
    TCPInputs,
    compile_tcpproxy,
)
from turnout.dialects.tls_vhosts import SecureRoute, tls_virtual_hosts
from turnout.graph.dialect import CompileContext, DialectOutput, OwnershipMemo
from turnout.graph.host_routes import IdsMemo
from turnout.graph.memo import Delta
from turnout.graph.model import (
    BackendPolicies,
    Cluster,
    DirectResponse,
    ExternalAuthorization,
    Forward,
    HostnameMatch,
    LoadBalancerStrategy,
    Mirror,
    PathMatch,
    PathMatchKind,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    TCPProxy,
    TLSTermination,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.regex import regex_error
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver, ServicePort, Unresolved, find_service_port
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot

# The CRD's pattern for `virtualhost.fqdn`: a bare `*` is not a hostname.
FQDN_PATTERN = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# Contour's `annotation.TLSVersion`: any other value means the default.
_TLS_VERSIONS = ("1.2", "1.3")
DEFAULT_MIN_TLS_VERSION = "1.2"
DEFAULT_MAX_TLS_VERSION = "1.3"


def parse_all(snapshot: Snapshot, options: CompileOptions) -> dict[tuple[str, str], ParsedProxy]:
    """The HTTPProxies of turnout's class, read, in key order; the others are not turnout's to
    look at. (The dialect patches these from the compile before's, `parsed.py`.)"""
    return {
        (o.namespace, o.name): parse_proxy(o)
        for o in snapshot.kind(GROUP, KIND)
        if serves(o, options)
    }


def root_allowed(namespace: str, options: CompileOptions) -> bool:
    return not options.root_namespaces or namespace in options.root_namespaces


def claimed_hostname(proxy: ParsedProxy, options: CompileOptions) -> str | None:
    """The hostname a root may claim: a valid fqdn, in a namespace where roots are allowed.

    A root that fails either check claims nothing, so it cannot block a valid root (Contour groups
    roots by fqdn before checking the namespace)."""
    vh = proxy.spec.virtualhost
    if vh is None or not vh.fqdn:
        return None
    host = vh.fqdn.lower()
    if not FQDN_PATTERN.fullmatch(host):
        return None
    if not root_allowed(proxy.obj.namespace, options):
        return None
    return host


def claimed_listeners(proxy: ParsedProxy) -> tuple[str, ...]:
    """The listeners a root's hostname is claimed on: HTTPS too when it terminates TLS or passes
    it through."""
    vh = proxy.spec.virtualhost
    passthrough = vh is not None and vh.tls is not None and vh.tls.passthrough
    if vh is not None and (vh.terminates_tls or passthrough):
        return (HTTP_LISTENER, HTTPS_LISTENER)
    return (HTTP_LISTENER,)


class _BudgetExceeded(Exception):
    """The walk from one root went over a budget; the message says which."""


@dataclass(frozen=True, slots=True)
class _SubEntry:
    """An included proxy's routes under one chain (`SubKey`), what computing them did, and the
    entries of its own includes (for the next walk of this subtree)."""

    proxy: ParsedProxy
    trace: Trace
    result: list[Candidate] | None
    children: dict[SubKey, _SubEntry]


@dataclass(frozen=True, slots=True)
class _RootEntry:
    """A root's virtual hosts and TCP proxies, what computing them did (and its problems per
    proxy), and its walk's subtrees (for the next recompile of this root)."""

    proxy: ParsedProxy
    trace: Trace
    vhosts: tuple[tuple[str, VirtualHost], ...]
    tcp: tuple[tuple[str, TCPProxy], ...]
    subtrees: dict[SubKey, _SubEntry]
    problems: dict[Key, tuple[Problem, ...]]
    order: RouteOrder | None  # its routes' order, to patch (`route_order.py`)


# A proxy's status with what it was built from: the object, its errors and warnings.
_StatusEntry = tuple[KubeObject, tuple[Problem, ...], tuple[Problem, ...], ObjectStatus]


# An include's conditions checked: the error to report, or what `include_identical` compares.
_IncludeCheck = tuple[tuple[str, str, str] | None, IncludeKey | None]


def _include_check(conds: tuple[MatchCondition, ...]) -> _IncludeCheck:
    """The checks of an include's own conditions, in Contour's order."""
    err = include_conditions_error(conds) or path_conditions_error(conds)
    if err is not None:
        return (INCLUDE_ERROR, "PathMatchConditionsNotValid", f"include: {err}"), None
    err = header_conditions_error(conds)
    if err is not None:
        return (ROUTE_ERROR, "HeaderMatchConditionsNotValid", err), None
    err = query_conditions_error(conds)
    if err is not None:
        return (ROUTE_ERROR, "QueryParameterMatchConditionsNotValid", err), None
    return None, include_key(conds)


@dataclass
class _Memo:
    """What one compile keeps for the next (a stage of `CompileMemo`): every root's entry, the
    index of what they read (`root_index.py`), and the output pieces in key order (statuses of
    every proxy; virtual hosts and TCP proxies of the roots that have some)."""

    ready: bool = False
    roots: dict[Key, _RootEntry] = field(default_factory=dict)
    index: RootIndex = field(default_factory=RootIndex)
    statuses: dict[Key, _StatusEntry] = field(default_factory=dict)
    out: dict[Key, ObjectStatus] = field(default_factory=dict)
    vhosts: Pieces[tuple[str, VirtualHost]] = field(default_factory=Pieces)
    tcp: Pieces[tuple[str, TCPProxy]] = field(default_factory=Pieces)
    extensions: dict[tuple[str, str], ExtensionCluster] | None = None
    # Each proxy's include checks (`_include_check`), while it is the same object.
    includes: dict[Key, tuple[ParsedProxy, tuple[_IncludeCheck, ...]]] = field(default_factory=dict)

    def reset(self) -> None:
        """Forgets everything (the run compiles every root)."""
        self.ready, self.roots, self.index = False, {}, RootIndex()
        self.statuses, self.out, self.vhosts, self.tcp = {}, {}, Pieces(), Pieces()
        self.extensions, self.includes = None, {}


def _changed(delta: Delta, extensions_changed: bool) -> Changed:
    proxies, services = set(), set()
    for ref in delta.refs:
        if (ref.group, ref.kind) == PROXY_KIND:
            proxies.add((ref.namespace, ref.name))
        elif (ref.group, ref.kind) == SERVICE_KIND:
            services.add((ref.namespace, ref.name))
    secrets = not delta.kinds.isdisjoint(SECRET_KINDS)
    return Changed(frozenset(proxies), frozenset(services), secrets, extensions_changed)


class _Compiler:
    def __init__(
        self,
        snapshot: Snapshot,
        ctx: CompileContext,
        parsed: dict[tuple[str, str], ParsedProxy] | None = None,
        patched: bool = False,
    ) -> None:
        self.snapshot = snapshot
        self.patched = patched and parsed is not None
        self.proxies = parse_all(snapshot, ctx.options) if parsed is None else parsed
        # Everything a root's compile reads or does goes through a recording wrapper, so that
        # the next compile can replay it while none of its inputs changed (`recording.py`).
        self.recorder = Recorder()
        self.lookup = ProxyReads(self.proxies, self.recorder)
        self.status = Accessors(self.proxies, self.recorder)
        self.reached = Reached(self.recorder)
        self.real = ctx
        self.extensions = compile_extension_services(snapshot, ctx.backends, ctx.secrets.ca_bundles)
        backends = RecordingBackends(ctx.backends, self.recorder)
        secrets = RecordingSecrets(ctx.secrets, self.recorder)
        self.ctx = dataclasses.replace(
            ctx,
            backends=cast(BackendResolver, backends),
            secrets=cast(SecretResolver, secrets),
        )
        self.services = ServiceReads(snapshot, self.recorder)
        self.tcp_inputs = TCPInputs(
            snapshot, self.ctx, self.lookup, self.status, self.reached, self.services.get
        )
        self.budget = 0
        self.walked: set[tuple[str, str]] = set()  # the proxies the current root's walk reached
        # The last include chain a subtree was looked up under, with its proxies' keys.
        self.chain: tuple[tuple[ParsedProxy, ...], tuple[Key, ...]] = ((), ())
        self.jwt_default = ""  # the default JWT provider of the root being walked
        # Service ports by (namespace, name, port); many routes name the same Service.
        self.ports: dict[tuple[str, str, int], ServicePort | None] = {}
        # Per-route work that reported nothing, by its inputs (`_RouteWork`).
        self.work = _RouteWork()
        self.memo = ctx.memo.stage("httpproxy:compile", _Memo)
        self.changed = _changed(ctx.memo.delta, self.memo.extensions != self.extensions.valid)
        # The subtree entries of the proxy being walked, of the compile before and of this one.
        self.old_scope: dict[SubKey, _SubEntry] = {}
        self.new_scope: dict[SubKey, _SubEntry] = {}
        # The route order of the root being compiled, of the compile before and of this one.
        self.old_order: RouteOrder | None = None
        self.new_order: RouteOrder | None = None

    def run(self) -> DialectOutput:
        """Recompiles the roots a change can affect (all of them without a compile before) and
        patches the output of the compile before for them: every other root's virtual hosts,
        TCP proxies, problems and reached proxies stand as they are (`root_index.py`)."""
        memo = self.memo
        self.tcp_proxies: list[tuple[str, TCPProxy]] = []  # filled by `_root`
        if memo.ready and self.patched and not self.real.memo.delta.everything:
            roots: list[Key] = sorted(self._affected())
            touched = set(self.changed.proxies)  # the proxies whose status may change
            for key in touched:
                memo.includes.pop(key, None)
        else:
            memo.reset()
            roots = [key for key, proxy in self.proxies.items() if proxy.is_root]
            touched = set(self.proxies)
        for key in roots:
            self._patch_root(key, touched)
        memo.vhosts.finish(self.proxies)  # in key order
        memo.tcp.finish(self.proxies)
        self._patch_statuses(touched)
        memo.ready, memo.extensions = True, self.extensions.valid
        return DialectOutput(
            virtual_hosts=tuple(memo.vhosts.flat),
            statuses=(*memo.out.values(), *self.extensions.statuses),
            tcp_proxies=tuple(memo.tcp.flat),
        )

    def _affected(self) -> set[Key]:
        """The roots a change can affect: those changed, and those whose reads it hits."""
        changed, memo = self.changed, self.memo
        out = memo.index.affected(changed, self.real.ownership.owners, self._moved_hosts())
        for key in changed.proxies:
            proxy = self.proxies.get(key)
            if key in memo.roots or (proxy is not None and proxy.is_root):
                out.add(key)
        return out

    def _moved_hosts(self) -> Collection[tuple[str, str]] | None:
        """The (listener, hostname)s whose owner changed since the compile before, when the
        graph builder says (else the index looks up every hostname a root read)."""
        return self.real.memo.stage("ownership", OwnershipMemo).changed

    def _patch_root(self, key: Key, touched: set[Key]) -> None:
        """Compiles root `key` again (or drops it), adding to `touched` the proxies whose status
        its old or new work reaches."""
        memo = self.memo
        old = memo.roots.pop(key, None)
        proxy = self.proxies.get(key)
        if proxy is None or not proxy.is_root:
            if old is not None:
                memo.index.remove(key, old.trace, old.problems)
                touched.update(old.problems, reached_of(old.trace))
            memo.vhosts.set(key, ())
            memo.tcp.set(key, ())
            return
        entry = memo.roots[key] = self._kept_root(proxy, old)
        if old is None:
            memo.index.add(key, entry.trace, entry.problems)
            touched.update(entry.problems, reached_of(entry.trace))
        elif entry is not old:
            # By differences: a root that reads thousands of proxies changed a few of them.
            was, now = (old.trace, old.problems), (entry.trace, entry.problems)
            reached = memo.index.replace(key, was, now)
            touched.update(moved_statuses(old.problems, entry.problems, reached))
        memo.vhosts.set(key, entry.vhosts)
        memo.tcp.set(key, entry.tcp)

    def _patch_statuses(self, touched: set[Key]) -> None:
        """The statuses of `touched` made again; the very same object as the compile before's
        when its object and problems are the same."""
        memo = self.memo
        gained = False
        for key in touched:
            proxy = self.proxies.get(key)
            if proxy is None:
                memo.statuses.pop(key, None)
                memo.out.pop(key, None)
                continue
            acc = self._accessor(proxy)
            errors, warnings = tuple(acc.errors), tuple(acc.warnings)
            entry = memo.statuses.get(key)
            if entry is None or not (
                entry[0] is proxy.obj and entry[1] == errors and entry[2] == warnings
            ):
                entry = memo.statuses[key] = (proxy.obj, errors, warnings, acc.build())
            gained = gained or key not in memo.out
            memo.out[key] = entry[3]
        if gained:
            memo.out = in_order(self.proxies, memo.out)

    def _accessor(self, proxy: ParsedProxy) -> ProxyStatusAccessor:
        """A proxy's problems as a full compile reports them: its own, then each root's in the
        compile's (key) order, then orphaned when no root reaches it."""
        acc = ProxyStatusAccessor(proxy.obj)
        for problem in proxy.problems:
            acc.add(problem)
        key, index = proxy.key, self.memo.index
        for root in sorted(index.problems.get(key, ())):
            for problem in self.memo.roots[root].problems[key]:
                acc.add(problem)
        # An object that fails the schema would not exist in Kubernetes: "invalid" with its
        # field errors says more than "orphaned" (and whether it is a root is unknowable).
        if not proxy.is_root and key not in index.reached and proxy.schema_valid:
            acc.add_error(ORPHANED, "Orphaned", ORPHANED_MESSAGE)
        return acc

    # --- what the compile before kept ----------------------------------------------------------

    def _fresh(self, trace: Trace) -> bool:
        """Whether nothing `trace` read changed since it was recorded."""
        if self.changed.stale(trace):
            return False
        owners = self.real.ownership.owners
        return all(
            owners.get(host) is owner
            for unit in units(trace)
            for host, owner in unit.owners.items()
        )

    def _replay(self, trace: Trace) -> None:
        """Does again what `trace` recorded, as part of the trace being recorded, if any."""
        for key, problem in trace.statuses:
            self.status[key].apply(problem)
        # What it reached is in the trace (the orphan rule reads the index of the traces).
        current = self.recorder.current
        if current is not None:
            current.merge(trace)

    def _kept_root(self, proxy: ParsedProxy, old: _RootEntry | None) -> _RootEntry:
        """`_root`, or what it gave the compile before while nothing it read changed."""
        if old is not None and old.proxy is proxy and self._fresh(old.trace):
            return old
        self.old_scope = old.subtrees if old is not None else {}
        self.new_scope = {}
        self.old_order, self.new_order = (old.order if old is not None else None), None
        tcp_before = len(self.tcp_proxies)
        trace = self.recorder.push(parts=True)
        try:
            vhosts = self._root(proxy)
        finally:
            self.recorder.pop(trace)
        tcp = tuple(self.tcp_proxies[tcp_before:])
        subtrees, problems = self.new_scope, problems_by_proxy(trace)
        order, self.old_order, self.new_order = self.new_order, None, None
        return _RootEntry(proxy, trace, tuple(vhosts), tcp, subtrees, problems, order)

    def _kept_routes(
        self,
        child: ParsedProxy,
        conds: tuple[MatchCondition, ...],
        visited: tuple[ParsedProxy, ...],
    ) -> list[Candidate] | None:
        """`_routes` of an included proxy, or what it gave under the same chain in this root's
        compile before while nothing it read changed and replaying its walk keeps within the
        revisit budget (else the walk runs, to stop where a full compile stops)."""
        chain = self.chain
        if chain[0] is not visited:  # the includes of one proxy share their chain
            chain = self.chain = (visited, tuple(v.key for v in visited))
        key: SubKey = (child.key, conds, chain[1], self.jwt_default)
        old = self.old_scope.get(key)
        if old is not None and old.proxy is child and not self.changed.stale(old.trace):
            walk = replay_walks(old.trace, self.budget, self.walked)
            if walk is not None:
                self.budget = walk.budget
                self.walked |= walk.walked
                self._replay(old.trace)
                self.new_scope[key] = old  # with its own includes' entries
                return old.result
        outer_old, outer_new = self.old_scope, self.new_scope
        self.old_scope, self.new_scope = (old.children if old is not None else {}), {}
        trace = self.recorder.push()
        trace.proxies.add(child.key)
        try:
            result = self._routes(child, conds, visited)
        finally:
            self.recorder.pop(trace)
            children = self.new_scope
            self.old_scope, self.new_scope = outer_old, outer_new
        outer_new[key] = _SubEntry(child, trace, result, children)
        return result

    # --- roots ---------------------------------------------------------------------------------

    def _root(self, proxy: ParsedProxy) -> list[tuple[str, VirtualHost]]:
        """The (listener, virtual host) pairs of a root; none when it is not served."""
        st = self.status[proxy.key]
        vh = proxy.spec.virtualhost
        assert vh is not None
        host = self._root_host(proxy)
        if host is None or not self._root_spec_ok(proxy):
            return []
        spec = proxy.spec
        tls: TLSTermination | None = None
        passthrough = False
        if vh.tls is not None:
            outcome = self._tls(proxy, vh.tls)
            if outcome is None:
                return []
            passthrough = isinstance(outcome, Passthrough)
            tls = outcome if isinstance(outcome, TLSTermination) else None
        auth = self._authorization(proxy) if tls is not None else None
        if auth is False:
            return []
        vhost_jwt = jwt.compile_providers(
            vh.jwt_providers, proxy.obj.namespace, self.ctx.secrets.ca_bundles
        )
        if not isinstance(vhost_jwt, jwt.VhostJwt):
            st.add_error(*vhost_jwt)
            return []
        self.jwt_default = vhost_jwt.default
        if tcp_route.tcp_routes(proxy):
            # Seed 001's `protocol: tcp`: the whole hostname is a TCP proxy, with no HTTP routes
            # left to serve (`tcp_route.py`); an error leaves the root unserved.
            tcp = tcp_route.compile_tcp_route(self.tcp_inputs, proxy, host, tls, passthrough)
            if tcp is not None:
                self.tcp_proxies.append((HTTPS_LISTENER, tcp))
            return []
        if spec.tcpproxy is not None:
            # The hostname's HTTPS side is the TCP proxy (`tcpproxy.py`); an error there leaves
            # the root unserved, as in Contour.
            tcp = compile_tcpproxy(self.tcp_inputs, proxy, host, tls, passthrough)
            if tcp is None:
                return []
            self.tcp_proxies.append((HTTPS_LISTENER, tcp))

        # Include graphs with shared children grow exponentially in the number of paths through
        # them: a tenant must not stall every compile with one (Contour has no such limit).
        limit = self.ctx.options.max_include_revisits
        self.budget, self.walked = limit, set()
        try:
            parts = self._walk(proxy, (), ())
        except _BudgetExceeded:
            st.add_error(
                INCLUDE_ERROR,
                "IncludeGraphTooLarge",
                f"the include graph of this root walks HTTPProxies it already walked on another "
                f"path, for more than {limit} proxies and routes (--max-include-revisits); none "
                "of its routes are served",
            )
            return []
        # After the routes, as in Contour, whose errors come first; an error drops the host.
        policies, problems = vhost_policies.compile_vhost_policies(
            vh.filter_policies, self.ctx.options.rate_limit_service is not None
        )
        if vhost_policies.report(st, problems) or policies is None:
            return []
        if parts is None or not any(parts):
            return []  # Contour prunes virtual hosts without routes
        order = self._ordered(st, parts, vhost_jwt)
        if order is None:
            return []
        kept = order.order
        routes = route_order.routes_tuple(order, self.real.memo.stage("route-ids", IdsMemo))
        hostname_match = (
            HostnameMatch.WILDCARD_ONE_LABEL if host.startswith("*.") else HostnameMatch.EXACT
        )
        if tls is None and not passthrough:
            vhost = VirtualHost(host, host, routes, proxy.obj.ref, hostname_match)
            return vhost_policies.with_vhost_policies([(HTTP_LISTENER, vhost)], policies)
        # Deduplication made matches unique, so the match finds a route's own flag.
        permit = {c.route.match: c.permit_insecure for c in kept}
        secure = tls_virtual_hosts(
            hostname=host,
            owner=proxy.obj.ref,
            routes=[SecureRoute(r, permit[r.match]) for r in routes],
            tls=tls or TLSTermination(secret=""),
            disable_permit_insecure=self.ctx.options.disable_permit_insecure,
            hostname_match=hostname_match,
        )
        if isinstance(auth, ExternalAuthorization) and vh.authorization is not None:
            secure = _with_authorization(secure, auth, vh.authorization, kept)
        if passthrough or spec.tcpproxy is not None:
            # Over TLS the hostname is TCP-proxied (or passed through); its routes only answer
            # plain HTTP, redirecting to HTTPS unless they permit insecure traffic (Contour).
            secure = [(lst, v) for lst, v in secure if lst == HTTP_LISTENER]
        return vhost_policies.with_vhost_policies(secure, policies)

    def _root_host(self, proxy: ParsedProxy) -> str | None:
        """The root's hostname if it may have it (valid, its namespace may hold roots, it owns
        the name on every listener it needs); None with the error reported."""
        st = self.status[proxy.key]
        vh = proxy.spec.virtualhost
        assert vh is not None
        if vh.fqdn is None:
            return None  # the field has the wrong type; the reader reported it
        if not vh.fqdn.strip():
            st.add_error(
                VIRTUAL_HOST_ERROR, "FQDNNotSpecified", "Spec.VirtualHost.Fqdn must be specified"
            )
            return None
        host = vh.fqdn.lower()
        if not FQDN_PATTERN.fullmatch(host):
            st.add_error(
                VIRTUAL_HOST_ERROR,
                "FQDNNotValid",
                f'Spec.VirtualHost.Fqdn "{vh.fqdn}" is not a valid hostname: it must be lower-case '
                'DNS labels, optionally after "*." for exactly one label',
            )
            return None
        if not root_allowed(proxy.obj.namespace, self.ctx.options):
            st.add_error(
                ROOT_NAMESPACE_ERROR,
                "RootProxyNotAllowedInNamespace",
                "root HTTPProxy cannot be defined in this namespace",
            )
            return None
        trace = self.recorder.current
        for listener in claimed_listeners(proxy):
            owner = self.ctx.ownership.owner(listener, host)
            if trace is not None:
                trace.owners[(listener, host)] = owner
            if owner is not None and owner.ref != proxy.obj.ref:
                # turnout's ownership rule: the oldest root keeps the hostname
                # (docs/architecture.md). A TLS host needs both listeners; half a host is not
                # served.
                st.add_error(
                    VIRTUAL_HOST_ERROR,
                    "DuplicateVhost",
                    f'fqdn "{host}" is already owned by {owner.kind} '
                    f"{owner.namespace}/{owner.name}",
                )
                return None
        return host

    def _root_spec_ok(self, proxy: ParsedProxy) -> bool:
        """Whether the root's spec may be served at all, in Contour's order of checks; False
        with the error reported."""
        st = self.status[proxy.key]
        vh = proxy.spec.virtualhost
        assert vh is not None
        if not proxy.schema_valid:
            return False
        if not proxy.spec.routes and not proxy.spec.includes and not proxy.spec.tcpproxy:
            st.add_error(
                SPEC_ERROR,
                "NothingDefined",
                "HTTPProxy.Spec must have at least one Route, Include, or a TCPProxy",
            )
            return False
        if vh.authorization is not None and vh.authorization.name and vh.tls is None:
            st.add_error(*authorization.not_permitted())
            return False
        if vh.jwt_providers and not vh.terminates_tls:
            st.add_error(*jwt.not_permitted())
            return False
        # Contour checks this one before TLS and before following the includes.
        conflict = vhost_policies.vhost_ip_conflict(vh.filter_policies)
        return conflict is None or not vhost_policies.report(st, [conflict])

    def _authorization(self, proxy: ParsedProxy) -> ExternalAuthorization | bool | None:
        """The root's external authorization, None without one, False with an error reported."""
        vh = proxy.spec.virtualhost
        if vh is None or vh.authorization is None or not vh.authorization.name:
            return None
        trace = self.recorder.current
        if trace is not None:
            trace.extension_reads = True
        out = authorization.compile_authorization(
            vh.authorization, proxy.obj.namespace, self.extensions.valid
        )
        if isinstance(out, ExternalAuthorization):
            return out
        self.status[proxy.key].add_error(*out)
        return False

    def _tls(self, proxy: ParsedProxy, tls: TLSSpec) -> TLSTermination | Passthrough | None:
        """The root's TLS termination (with its fallback certificate and client validation,
        `tls_options.py`), `PASSTHROUGH`, or None with the error reported (Contour's checks, in
        Contour's order, except that delegation is checked before the Secret is read: a proxy
        must not learn whether a Secret it may not use exists)."""
        st = self.status[proxy.key]
        if tls.passthrough and tls.enable_fallback_certificate:
            tls_options.fallback_and_passthrough(st)  # reported, and the fallback ignored
        if tls.secret_name and tls.passthrough:
            st.add_error(
                TLS_ERROR,
                "TLSConfigNotValid",
                "Spec.VirtualHost.TLS: both Passthrough and SecretName were specified",
            )
            return None
        if tls.passthrough:
            if tls.client_validation is not None:
                tls_options.passthrough_with_client_validation(st)
                return None
            return PASSTHROUGH
        if not tls.secret_name:
            st.add_error(
                TLS_ERROR,
                "TLSConfigNotValid",
                "Spec.VirtualHost.TLS: neither Passthrough nor SecretName were specified",
            )
            return None
        namespace, name = namespaced_name(tls.secret_name, proxy.obj.namespace)
        secret = self.ctx.secrets.tls_secret(namespace, name, for_namespace=proxy.obj.namespace)
        if isinstance(secret, Unresolved):
            if secret.reason == "DelegationNotPermitted":
                st.add_error(
                    TLS_ERROR,
                    "DelegationNotPermitted",
                    f'Spec.VirtualHost.TLS Secret "{tls.secret_name}" certificate delegation '
                    "not permitted",
                )
            else:
                st.add_error(
                    TLS_ERROR,
                    "SecretNotValid",
                    f'Spec.VirtualHost.TLS Secret "{tls.secret_name}" is invalid: {secret.message}',
                )
            return None
        low = _tls_version(tls.minimum_protocol_version, DEFAULT_MIN_TLS_VERSION)
        high = _tls_version(tls.maximum_protocol_version, DEFAULT_MAX_TLS_VERSION)
        if high < low:
            st.add_error(
                TLS_ERROR,
                "TLSConfigNotValid",
                "Spec.Virtualhost.TLS the minimum protocol version is greater than the maximum "
                "protocol version",
            )
            return None
        return tls_options.extend_termination(
            self.ctx,
            st,
            proxy.obj.namespace,
            TLSTermination(secret=secret.name, min_version=low, max_version=high),
            tls.client_validation,
            tls.enable_fallback_certificate,
        )

    def _ordered(
        self, st: ProxyStatusAccessor, parts: list[list[Candidate]], vhost_jwt: jwt.VhostJwt
    ) -> RouteOrder | None:
        """The root's routes deduplicated and in first-match order, patched from the compile
        before's when it can be (`route_order.py`); None with Contour's `JWTProviderNotDefined`
        when a route names a provider the root does not define.

        Contour keys a virtual host's routes by their conditions, so a later route with the same
        conditions replaces an earlier one; turnout does the same, and says so."""
        old, own = self.old_order, parts[-1]
        if old is not None and len(old.parts) == len(parts) and old.parts[-1] == own:
            parts[-1] = own = old.parts[-1]  # the root's own routes, the very same objects
        if any(c.route.policies.path_rewrite is not None for c in own):
            parts = [_expanded(list(itertools.chain.from_iterable(parts)), own)]
        order = route_order.patch(old, parts, vhost_jwt) if old is not None else None
        if order is None:
            order = route_order.build(parts, vhost_jwt)
        for prev, c in order.replacements:
            src = c.route.source
            self.status[prev.proxy].add_warning(
                ROUTE_ERROR,
                "DuplicateMatchConditions",
                f"{prev.route.source.field} has the same match conditions as "
                f"{src.field} of {src.object.kind} {src.object.namespace}/{src.object.name}, "
                "which replaces it",
            )
        if order.undefined:
            st.add_error(*jwt.undefined_provider(order.undefined))
            return None
        self.new_order = order
        return order

    # --- the include walk ----------------------------------------------------------------------

    def _routes(
        self,
        proxy: ParsedProxy,
        conds: tuple[MatchCondition, ...],
        visited: tuple[ParsedProxy, ...],
    ) -> list[Candidate] | None:
        """Routes of `proxy` and everything it includes, under the chain's conditions `conds`;
        None when an error drops them all."""
        parts = self._walk(proxy, conds, visited)
        if parts is None:
            return None
        return _expanded(list(itertools.chain.from_iterable(parts)), parts[-1])

    def _walk(
        self,
        proxy: ParsedProxy,
        conds: tuple[MatchCondition, ...],
        visited: tuple[ParsedProxy, ...],
    ) -> list[list[Candidate]] | None:
        """`_routes` in parts, before Contour's prefix split: each include's routes, then the
        proxy's own."""
        st = self.status[proxy.key]
        if any(v.key == proxy.key for v in visited):
            chain = " -> ".join(f"{v.obj.namespace}/{v.obj.name}" for v in (*visited, proxy))
            st.add_error(
                INCLUDE_ERROR, "IncludeCreatesCycle", f"include creates an include cycle: {chain}"
            )
            return None
        trace = self.recorder.current
        if trace is not None:
            trace.walks.append((proxy.key, 1 + len(proxy.spec.routes)))
        if proxy.key in self.walked:
            # A proxy walked again costs its routes again: that, not distinct proxies (each
            # bounded by its own caps), is what grows without bound.
            self.budget -= 1 + len(proxy.spec.routes)
            if self.budget < 0:
                raise _BudgetExceeded
        self.walked.add(proxy.key)
        if not proxy.schema_valid:
            return None
        visited = (*visited, proxy)
        via = tuple(v.obj.ref for v in visited[:-1])
        seen: set[IncludeKey] = set()
        parts = [
            self._include(proxy, i, conds, visited, via, seen)
            for i in range(len(proxy.spec.includes))
        ]
        own: list[Candidate] = []
        for route in proxy.spec.routes:
            candidate = self._route(proxy, route, conds, via)
            if candidate is None:
                return None
            own.append(candidate)
        parts.append(own)
        return parts

    def _include_checks(self, proxy: ParsedProxy) -> tuple[_IncludeCheck, ...]:
        """`_include_check` of each include of `proxy`, kept while it is the same object."""
        found = self.memo.includes.get(proxy.key)
        if found is not None and found[0] is proxy:
            return found[1]
        checks = tuple(_include_check(inc.conditions) for inc in proxy.spec.includes)
        self.memo.includes[proxy.key] = (proxy, checks)
        return checks

    def _include(
        self,
        proxy: ParsedProxy,
        index: int,
        conds: tuple[MatchCondition, ...],
        visited: tuple[ParsedProxy, ...],
        via: tuple[ObjectRef, ...],
        seen: set[IncludeKey],
    ) -> list[Candidate]:
        inc = proxy.spec.includes[index]
        st = self.status[proxy.key]
        namespace = inc.namespace or proxy.obj.namespace
        error, key = self._include_checks(proxy)[index]
        if error is not None:
            st.add_error(*error)
            return []
        if include_identical(key, seen):
            st.add_error(
                INCLUDE_ERROR,
                "DuplicateMatchConditions",
                "duplicate conditions defined on an include",
            )
            return []
        child = self.lookup.find((namespace, inc.name))
        if child is None:
            st.add_error(
                INCLUDE_ERROR, "IncludeNotFound", f"include {namespace}/{inc.name} not found"
            )
            return self._bad_gateway(proxy, inc, conds, via)
        if child.is_root:
            st.add_error(
                INCLUDE_ERROR,
                "RootIncludesRoot",
                f"root httpproxy cannot include another root httpproxy ({namespace}/{inc.name})",
            )
            return self._bad_gateway(proxy, inc, conds, via)
        routes = self._kept_routes(child, (*conds, *inc.conditions), visited)
        self.reached.add(child.key)
        return routes or []

    def _bad_gateway(
        self,
        proxy: ParsedProxy,
        inc: IncludeSpec,
        conds: tuple[MatchCondition, ...],
        via: tuple[ObjectRef, ...],
    ) -> list[Candidate]:
        """A 502 for the space a broken include would have served, so requests there do not fall
        through to a shorter route. The space is the whole chain's conditions; Contour uses only
        the include's own conditions, which put the 502 outside the delegated space."""
        if not inc.conditions:
            return []
        merged = (*conds, *inc.conditions)
        match = RouteMatch(
            path=merge_path(merged),
            headers=sorted_headers(merge_headers(merged)),
            query=sorted_queries(merge_query(merged)),
        )
        source = RouteSource(proxy.obj.ref, inc.field, via)
        return [Candidate(Route(match, DirectResponse(502), source), proxy.key)]

    # --- routes and services -------------------------------------------------------------------

    def _route(
        self,
        proxy: ParsedProxy,
        route: RouteSpec,
        conds: tuple[MatchCondition, ...],
        via: tuple[ObjectRef, ...],
    ) -> Candidate | None:
        st = self.status[proxy.key]
        match = self._match(proxy, route, conds)
        if match is None:
            return None
        path = match.path
        settings = self._settings(route.route_policies, proxy.obj.namespace, st)
        if settings is None:
            return None
        rate_limit, problems = vhost_policies.compile_route_rate_limit(route.filter_policies)
        global_limit, global_problems = vhost_policies.compile_route_global(
            route.filter_policies, self.ctx.options.rate_limit_service is not None
        )
        if vhost_policies.report(st, problems + global_problems):
            return None
        redirect = route.redirect
        if redirect is not None and redirect.path is not None and redirect.prefix is not None:
            st.add_error(
                ROUTE_ERROR,
                "RequestRedirectPolicy",
                "route.requestRedirectPolicy is invalid: "
                "cannot specify both redirect path and redirect prefix",
            )
            return None

        ok, path_rewrite = route_policies.path_rewrite(
            route.route_policies.replace_prefix, path, st
        )
        if not ok:
            return None
        invalid = health_check.route_health_check_error(route.health_check)
        if invalid is not None:
            st.add_error(*invalid)
            return None

        action: RouteAction
        policies = RoutePolicies()
        if route.services:
            forward = self._forward(proxy, route, settings)
            if forward is None:
                return None
            action, mirrors = forward
            policies = settings.policies
            if policies.path_rewrite != path_rewrite or policies.mirrors != mirrors:
                policies = dataclasses.replace(policies, path_rewrite=path_rewrite, mirrors=mirrors)
        elif redirect is not None:
            action = Redirect(
                scheme=redirect.scheme or None,
                hostname=redirect.hostname or None,
                port=redirect.port or None,
                path=redirect.path,
                prefix=redirect.prefix,
                status=redirect.status_code or 302,
            )
        else:
            assert route.direct_response is not None
            action = DirectResponse(route.direct_response.status_code, route.direct_response.body)

        built = Route(match, action, RouteSource(proxy.obj.ref, route.field, via), policies)
        provider = jwt.route_provider(route.jwt_policy, self.jwt_default)
        if not isinstance(provider, str):
            st.add_error(*provider)
            return None
        ip_filter, problems = vhost_policies.compile_route_ip_filter(route.filter_policies)
        if vhost_policies.report(st, problems):
            return None
        built = vhost_policies.with_route_filters(built, ip_filter, rate_limit, global_limit)
        built = self._failure_policy(proxy, route, built)
        return Candidate(built, proxy.key, route.permit_insecure, route.auth_policy, provider)

    def _match(
        self, proxy: ParsedProxy, route: RouteSpec, conds: tuple[MatchCondition, ...]
    ) -> RouteMatch | None:
        """The route's match under its include chain's conditions (`_route_conditions`); the
        same route under the same chain (proxies share equal routes) is checked once."""
        key = (id(route), conds)
        hit = self.work.matches.get(key)
        if hit is not None and hit[0] is route:  # the route is held: its id is not reused
            return hit[1]
        st = self.status[proxy.key]
        adds = st.adds
        matched = self._route_conditions(proxy, route, conds)
        if matched is None:
            return None
        merged, path = matched
        match = RouteMatch(
            path=path,
            headers=sorted_headers(merge_headers(merged)),
            query=sorted_queries(merge_query(merged)),
        )
        if st.adds == adds:
            self.work.matches[key] = (route, match)
        return match

    def _settings(
        self, spec: route_policies.RoutePolicySpec, namespace: str, st: ProxyStatusAccessor
    ) -> route_policies.RouteSettings | None:
        """`route_policies.route_settings`, once per policies and (when its header values can
        name it) namespace."""
        named = spec.request_headers is not None or spec.response_headers is not None
        key = (id(spec), namespace if named else "")
        hit = self.work.settings.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
        adds = st.adds
        settings = route_policies.route_settings(spec, namespace, st)
        if settings is not None and st.adds == adds:
            self.work.settings[key] = (spec, settings)
        return settings

    def _route_conditions(
        self, proxy: ParsedProxy, route: RouteSpec, conds: tuple[MatchCondition, ...]
    ) -> tuple[tuple[MatchCondition, ...], PathMatch] | None:
        """The route's conditions merged with its include chain's, and the path match they make,
        checked in Contour's order; None with the error reported."""
        st = self.status[proxy.key]
        actions = (
            int(bool(route.services))
            + int(route.redirect is not None)
            + int(route.direct_response is not None)
        )
        if actions != 1:
            st.add_error(
                ROUTE_ERROR,
                "RouteActionCountNotValid",
                "must set exactly one of route.services or route.requestRedirectPolicy "
                "or route.directResponsePolicy",
            )
            return None
        err = path_conditions_error(route.conditions)
        if err is not None:
            st.add_error(ROUTE_ERROR, "PathMatchConditionsNotValid", f"route: {err}")
            return None
        misplaced = tcp_route.misplaced_tcp_service(route)
        if misplaced is not None:
            st.add_error(TCPPROXY_ERROR, tcp_route.TCP_ROUTE_NOT_VALID, misplaced)
            return None
        merged = (*conds, *route.conditions)
        err = header_conditions_error(merged)
        if err is not None:
            st.add_error(ROUTE_ERROR, "HeaderMatchConditionsNotValid", err)
            return None
        err = query_conditions_error(merged)
        if err is not None:
            st.add_error(ROUTE_ERROR, "QueryParameterMatchConditionsNotValid", err)
            return None
        path = merge_path(merged)
        if path.kind is PathMatchKind.REGEX:
            # Each regex was checked alone; the merged one can still be too large for Envoy.
            err = regex_error(path.value)
            if err is not None:
                st.add_error(
                    ROUTE_ERROR,
                    "PathMatchConditionsNotValid",
                    f"route: supplied regex: {path.value} invalid. error: {route.field}: {err}",
                )
                return None
        return merged, path

    def _failure_policy(self, proxy: ParsedProxy, route: RouteSpec, built: Route) -> Route:
        """failurePolicy's retries (`upstream.py`); its passive health check is on the clusters."""
        warning = upstream.failure_policy_warning(route.upstream)
        if warning is not None:
            self.status[proxy.key].add_warning(*warning)
        if not isinstance(built.action, Forward):
            return built
        policies = upstream.with_failure_retry(built.policies, route.upstream)
        if policies is built.policies:
            return built
        return dataclasses.replace(built, policies=policies)

    def _forward(
        self, proxy: ParsedProxy, route: RouteSpec, settings: route_policies.RouteSettings
    ) -> tuple[Forward | DirectResponse, tuple[Mirror, ...]] | None:
        """Weighted clusters for the route's services: an even split when no weight is set, and
        0 for the unweighted ones when some are. No resolvable service gives a 503. Also the
        route's mirror, which never takes part in the split."""
        st = self.status[proxy.key]
        clusters: list[tuple[Cluster, int, BackendPolicies | None]] = []
        mirrors: list[Mirror] = []
        for svc in route.services:
            if not 1 <= svc.port <= 65535:
                st.add_error(
                    SERVICE_ERROR,
                    "ServicePortInvalid",
                    f'service "{svc.name}": port must be in the range 1-65535',
                )
                return None
            found = self._backend(proxy, svc, route, settings)
            if found is None:
                return None
            resolved, backend = found
            if isinstance(resolved, Unresolved):
                continue
            if svc.mirror:
                if mirrors:
                    st.add_error(
                        SERVICE_ERROR,
                        "OnlyOneMirror",
                        "only one service per route may be nominated as mirror",
                    )
                    return None
                mirrors.append(Mirror(resolved.name, route_policies.mirror_percent(svc.weight)))
                continue
            clusters.append((resolved, svc.weight, backend))
        if not clusters:
            return DirectResponse(503), tuple(mirrors)
        total = sum(w for _, w, _ in clusters)
        forward = Forward(
            tuple(WeightedCluster(c.name, w if total else 1, b) for c, w, b in clusters)
        )
        return forward, tuple(mirrors)

    def _backend(
        self,
        proxy: ParsedProxy,
        svc: ServiceSpec,
        route: RouteSpec,
        settings: route_policies.RouteSettings,
    ) -> tuple[Cluster | Unresolved, BackendPolicies | None] | None:
        """A service's cluster (`_resolve`) and backend policies; None when an error drops the
        proxy's routes. What a Service port with the same settings gave without a word is kept:
        routes after routes name the same one. A kept answer still records the Service read."""
        namespace = proxy.obj.namespace
        # The records by identity (hashing them was most of the cost): unset ones are the
        # shared defaults, and equal routes are one object (`spec.parse_proxy`).
        parts = (svc.upstream, svc.backend_policies, route.upstream, route.health_check)
        key = (
            namespace,
            svc.name,
            svc.port,
            svc.protocol,
            svc.health_port,
            id(svc.upstream),
            id(svc.backend_policies),
            id(route.upstream),
            id(route.health_check),
            id(settings.lb_strategy),
            settings.idle_connection_timeout_s,
        )
        hit = self.work.backends.get(key)
        trace = self.recorder.current
        if hit is not None and hit[0] == parts:  # held: their ids are not reused
            # The reads, recorded in the current trace: the Service, and the Secrets (CA
            # bundles of upstream validation) when making the answer read some.
            self.services.get(namespace, svc.name)
            if hit[2] and trace is not None:
                trace.secret_reads = True
            return hit[1]
        st = self.status[proxy.key]
        adds = st.adds
        # Whether this answer reads Secrets, apart from what the trace read before it.
        read_secrets = trace is not None and trace.secret_reads
        if trace is not None:
            trace.secret_reads = False
        answer = self._backend_answer(proxy, svc, route, settings, st)
        # Unknown without a trace: a hit then records a read, which is only coarser.
        reads = trace is None or trace.secret_reads
        if trace is not None:
            trace.secret_reads = read_secrets or reads
        if answer is not None and st.adds == adds:
            self.work.backends[key] = (parts, answer, reads)
        return answer

    def _backend_answer(
        self,
        proxy: ParsedProxy,
        svc: ServiceSpec,
        route: RouteSpec,
        settings: route_policies.RouteSettings,
        st: ProxyStatusAccessor,
    ) -> tuple[Cluster | Unresolved, BackendPolicies | None] | None:
        resolved = self._resolve(
            proxy, svc, route, settings.lb_strategy, settings.idle_connection_timeout_s
        )
        if resolved is None:
            return None
        backend: BackendPolicies | None = None
        if not isinstance(resolved, Unresolved):
            ok, backend = route_policies.backend_policies(
                svc.backend_policies, proxy.obj.namespace, svc.name, svc.port, st
            )
            if not ok:
                return None
        return resolved, backend

    def _resolve(
        self,
        proxy: ParsedProxy,
        svc: ServiceSpec,
        route: RouteSpec,
        lb_strategy: LoadBalancerStrategy = LoadBalancerStrategy.ROUND_ROBIN,
        idle_connection_timeout_s: float | None = None,
    ) -> Cluster | Unresolved | None:
        """The cluster for a service reference; Unresolved (reported) when it does not exist, None
        when an error drops the proxy's routes. Services are only looked up in the proxy's own
        namespace, as in Contour."""
        st = self.status[proxy.key]
        namespace = proxy.obj.namespace
        key = (namespace, svc.name, svc.port)
        service = self.services.get(namespace, svc.name)  # recorded for every root that reads it
        if key not in self.ports:
            self.ports[key] = find_service_port(service, svc.port) if service else None
        port = self.ports[key]
        detail = ""
        if service is None:
            detail = f'service "{namespace}/{svc.name}" not found'
        elif port is None:
            detail = f'port "{svc.port}" on service "{namespace}/{svc.name}" not matched'
        else:
            # ExternalName Services: the resolver decides, with Contour's messages.
            refused = self.ctx.backends.refusal(service)
            detail = refused.message if refused is not None else ""
        if detail:
            st.add_error(
                SERVICE_ERROR,
                "ServiceUnresolvedReference",
                f"Spec.Routes unresolved service reference: {detail}",
            )
            return Unresolved("ServiceUnresolvedReference", detail)
        assert service is not None and port is not None
        settings = upstream.service_settings(
            service=service,
            port=port,
            name=svc.name,
            requested_port=svc.port,
            protocol=svc.protocol,
            upstream=svc.upstream,
            route=route.upstream,
            lb_strategy=lb_strategy,
            ca_bundles=self.ctx.secrets.ca_bundles,
            namespace=namespace,
        )
        if isinstance(settings, tuple):
            st.add_error(*settings)
            return None
        if idle_connection_timeout_s is not None:
            # The route's timeoutPolicy.idleConnection is a setting of its clusters.
            settings = dataclasses.replace(
                settings, idle_connection_timeout_s=idle_connection_timeout_s
            )
        settings = health_check.with_health_check(
            settings, route.health_check, svc.port, svc.health_port
        )
        if upstream.validation_ignored(svc.upstream, settings):
            st.add_warning(
                SPEC_ERROR,
                IGNORED_FIELD,
                f'ignoring field "{svc.field}.validation"; it only applies to the tls and h2 '
                "protocols",
            )
        result = self.ctx.backends.service(namespace, svc.name, svc.port, settings=settings)
        if isinstance(result, Unresolved):
            st.add_error(
                SERVICE_ERROR,
                "ServiceUnresolvedReference",
                f"Spec.Routes unresolved service reference: {result.message}",
            )
        return result


class _RouteWork:
    """Per-route work that is a function of its inputs when it reported nothing, kept for one
    compile by those inputs: the match of a route under an include chain, by the route's
    identity (`spec.parse_proxy` shares equal routes) and the chain's conditions; route
    settings by the policies' identity; a service's cluster and backend policies by what they
    are made of (the Service port, its settings, the namespace)."""

    __slots__ = ("backends", "matches", "settings")

    def __init__(self) -> None:
        self.matches: dict[
            tuple[int, tuple[MatchCondition, ...]], tuple[RouteSpec, RouteMatch]
        ] = {}
        self.settings: dict[
            tuple[int, str], tuple[route_policies.RoutePolicySpec, route_policies.RouteSettings]
        ] = {}
        # ... -> (the records by identity, the answer, whether making it read Secrets)
        self.backends: dict[
            tuple[object, ...],
            tuple[tuple[object, ...], tuple[Cluster | Unresolved, BackendPolicies | None], bool],
        ] = {}


def _expanded(out: list[Candidate], own: list[Candidate]) -> list[Candidate]:
    """Contour splits rewritten prefixes into `/foo` and `/foo/` per proxy, over all the routes
    it gathered. Only its own routes can be split here: an included route was split (or found
    its slash twin) at its own proxy, and a group with two members is never split again, so
    the includes' routes are left as they are, the very same candidates."""
    if not any(c.route.policies.path_rewrite is not None for c in own):
        return out
    expanded = route_policies.expand_prefix_rewrites([c.route for c in out])
    return [
        out[i] if r is out[i].route else dataclasses.replace(out[i], route=r) for i, r in expanded
    ]


def _with_authorization(
    vhosts: list[tuple[str, VirtualHost]],
    auth: ExternalAuthorization,
    spec: authorization.AuthorizationSpec,
    kept: list[Candidate],
) -> list[tuple[str, VirtualHost]]:
    """The HTTPS host checks requests with `auth`, each route with its own setting. The plain-HTTP
    host has no check, as in Contour: its routes redirect to HTTPS unless they permit insecure
    traffic."""
    own = {c.route.match: c.auth_policy for c in kept}
    out: list[tuple[str, VirtualHost]] = []
    for listener, vh in vhosts:
        if listener == HTTPS_LISTENER:
            routes = tuple(
                dataclasses.replace(
                    r,
                    policies=dataclasses.replace(
                        r.policies,
                        authorization=authorization.route_authorization(
                            spec.policy, own.get(r.match)
                        ),
                    ),
                )
                for r in vh.routes
            )
            policies = dataclasses.replace(vh.policies, authorization=auth)
            vh = dataclasses.replace(vh, routes=routes, policies=policies)
        out.append((listener, vh))
    return out


def _tls_version(value: str, default: str) -> str:
    return value if value in _TLS_VERSIONS else default


def compile_httpproxies(
    snapshot: Snapshot,
    ctx: CompileContext,
    parsed: dict[tuple[str, str], ParsedProxy] | None = None,
    *,
    patched: bool = False,
) -> DialectOutput:
    """`parsed` may carry the proxies the claims phase read (`parse_all(snapshot, ctx.options)`,
    in key order), to read objects once; `patched`: they are those of the compile before, read
    again only where the memo's delta says (else every root compiles again)."""
    return _Compiler(snapshot, ctx, parsed, patched).run()

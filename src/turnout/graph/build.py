"""Builds the routing graph from a store snapshot: ownership across dialects, then each dialect.

A pure function: the same snapshot and options give the same graph and statuses.
"""

from __future__ import annotations

import dataclasses
import difflib
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter

from turnout.compile_inputs import (
    HTTP_LISTENER,
    HTTPS_LISTENER,
    CompileOptions,
    ListenerDecl,
    ListenerProtocol,
)
from turnout.graph.attribution import WriterIndex, cluster_writers
from turnout.graph.dialect import (
    CompileContext,
    Dialect,
    DialectOutput,
    HostClaim,
    Ownership,
    OwnershipMemo,
    RecordedOwnership,
    ownership_from_claims,
)
from turnout.graph.host_routes import IdsMemo
from turnout.graph.memo import CompileMemo, IdentityMemo
from turnout.graph.model import (
    HostnameMatch,
    Listener,
    RouteSource,
    RoutingGraph,
    TCPProxy,
    VirtualHost,
)
from turnout.graph.secret_data import DELEGATION_KINDS
from turnout.graph.secrets import SecretBook, SecretResolver
from turnout.graph.served import (
    ClusterStage,
    Hints,
    HostNames,
    Hosts,
    ListenerHosts,
    basis_of,
    clusters_of,
    dialect_hosts,
    dns_names_of,
    forbidden_of,
    host_names,
    merge_hints,
    merge_hosts,
    ordered_hosts,
    positions_of,
    served_clusters,
)
from turnout.graph.services import (
    BackendResolver,
    ClusterBook,
    ForbiddenEndpoint,
    ResolverUse,
    ServiceBackend,
    SliceIndex,
    endpoint_reserved_ports,
    endpoint_sources,
    slice_index,
)
from turnout.graph.status_fold import fold_findings as fold_findings
from turnout.graph.status_fold import sorted_statuses
from turnout.graph.validate import (
    GraphProblem,
    PatchedLimits,
    hostname_problem,
    patch_envoy_limits,
    source_problems,
)
from turnout.objects import KubeObject, ObjectRef, group_of
from turnout.status.model import Finding, IgnoredObject, ObjectStatus
from turnout.store import Change, Snapshot, SourceProblem

_NAME = attrgetter("name")

# Reasons of the findings folded into statuses after the dialects ran.
ENVOY_LIMIT = "EnvoyLimit"
ENDPOINT_REFUSED = "EndpointRefused"


@dataclass(frozen=True, slots=True)
class CompileResult:
    graph: RoutingGraph
    statuses: tuple[ObjectStatus, ...]
    problems: tuple[SourceProblem, ...]
    # The DNS names of the served upstreams, refused ones included: the controller resolves them
    # for the next compile's `CompileOptions.dns_answers` (a refused name must stay tracked).
    dns_names: tuple[str, ...] = ()
    # The objects turnout leaves alone (another class or controller, a kind it does not read),
    # with the reason; they have no status.
    ignored: tuple[IgnoredObject, ...] = ()
    # The objects refused before any dialect read them, each with an error problem (a kind
    # turnout reads at another apiVersion, a misspelled kind); they have no status either.
    rejected: tuple[ObjectRef, ...] = ()
    # The (namespace, Service) pairs whose endpoints some routing decision read
    # (`BackendResolver.endpoints`): an EndpointSlice change of one of them recompiles all.
    endpoint_dependent_services: frozenset[tuple[str, str]] = frozenset()
    # What the endpoints fast path (`graph.endpoint_update`) starts from; None: it cannot.
    endpoint_basis: EndpointBasis | None = None


@dataclass(frozen=True, slots=True)
class EndpointBasis:
    """The parts of a compile an EndpointSlice change can alter, kept apart so that the
    endpoints fast path redoes only them: the served clusters made from Service ports (before
    endpoints), the ports no endpoint may use, the statuses before findings were folded in,
    and the findings and problems the endpoint stage and the Envoy-limits net made.
    `forbidden_problems` holds one problem per `forbidden` entry, in the same order."""

    backends: Mapping[tuple[str, str], tuple[ServiceBackend, ...]]  # by (namespace, Service)
    slices: Mapping[tuple[str, str], Sequence[KubeObject]]  # `index_endpoint_slices`
    positions: Mapping[str, int]  # each cluster's place in `graph.clusters`
    reserved: Mapping[int, str]
    statuses: tuple[ObjectStatus, ...]
    limit_findings: tuple[Finding, ...]
    endpoint_findings: tuple[Finding, ...]
    forbidden: tuple[ForbiddenEndpoint, ...]
    forbidden_problems: tuple[SourceProblem, ...]
    head_problems: tuple[SourceProblem, ...]
    tail_problems: tuple[SourceProblem, ...]


# Core kinds that every dialect may consume.
CORE_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("v1", "Service"),
        ("v1", "Endpoints"),
        ("v1", "Secret"),
        ("v1", "ConfigMap"),  # CA bundles of Gateway API BackendTLSPolicies
        ("v1", "Namespace"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
    }
)


@dataclass(frozen=True, slots=True)
class KindCheck:
    """What `check_kinds` found: the snapshot without the objects no dialect may read, the
    problems, the objects of kinds turnout does not read (ignored) and those it refused with an
    error (a kind it reads at another apiVersion, a misspelled kind of a group it reads)."""

    snapshot: Snapshot
    problems: tuple[SourceProblem, ...]
    ignored: tuple[IgnoredObject, ...]
    rejected: tuple[ObjectRef, ...]


def _timestamp_problem(obj: KubeObject) -> SourceProblem | None:
    if not obj.creation_timestamp or obj.created_at is not None:
        return None
    return SourceProblem(
        obj.origin.source,
        obj.origin.line,
        f"metadata.creationTimestamp {obj.creation_timestamp!r} is not an RFC 3339 "
        "time; the object counts as the newest when hostnames are shared",
        f"{obj.kind} {obj.namespace}/{obj.name}",
        severity="warning",
    )


# How close a kind must be to one turnout reads in its group to be taken for a misspelling of it:
# a typo of one letter in a kind of eight passes, a real kind turnout does not read (UDPRoute
# beside TCPRoute, NetworkPolicy beside Ingress) does not.
MISSPELLING_CUTOFF = 0.8


def misspelled_kind(kind: str, group_kinds: Iterable[str]) -> str | None:
    """The kind among `group_kinds` that `kind` is a misspelling of, if one is close enough."""
    by_lower = {k.lower(): k for k in group_kinds}
    close = difflib.get_close_matches(kind.lower(), by_lower, n=1, cutoff=MISSPELLING_CUTOFF)
    return by_lower[close[0]] if close else None


@dataclass(frozen=True, slots=True)
class _ObjectCheck:
    """What `check_kinds` makes of one object: a pure function of it and the kinds read."""

    stamp: SourceProblem | None = None
    problem: SourceProblem | None = None
    ignored: IgnoredObject | None = None
    rejected: bool = False


_KNOWN = _ObjectCheck()


class KindsMemo:
    """`check_kinds` per object, for one set of kinds read: the objects whose check is not
    `_KNOWN` by ref (with the object), and the last answer."""

    def __init__(self) -> None:
        self.known: frozenset[tuple[str, str]] = frozenset()
        self.special: dict[ObjectRef, tuple[KubeObject, _ObjectCheck]] = {}
        self.last: KindCheck | None = None


def check_kinds(
    snapshot: Snapshot, known: frozenset[tuple[str, str]], memo: CompileMemo | None = None
) -> KindCheck:
    """Reports objects turnout does not read, and drops those whose kind turnout reads at another
    apiVersion (e.g. `projectcontour.io/v2 HTTPProxy`) so no dialect misreads them. A kind
    turnout does not read is an error when it is close to a kind turnout reads in its group (a
    typo must fail CI: `HTTPProxxy`), else a warning, and the object is listed as ignored (a
    Deployment in the same directory). `memo`: only the objects the delta names are checked
    again; the others' answers are those of the compile before."""
    memo = CompileMemo() if memo is None else memo
    kept = memo.stage("kinds", KindsMemo)
    tables = _kind_tables(known)
    if kept.known != known or kept.last is None or memo.delta.everything:
        kept.known, kept.special = known, {}
        for each in snapshot.objects:
            check = _check_object(each, known, *tables)
            if check is not _KNOWN:
                kept.special[each.ref] = (each, check)
        return _kinds_answer(snapshot, kept, snapshot.objects)
    changed = False
    for ref in memo.delta.refs:
        obj = snapshot.get_ref(ref)
        check = _KNOWN if obj is None else _check_object(obj, known, *tables)
        if check is not _KNOWN and obj is not None:
            kept.special[ref] = (obj, check)
            changed = True
        elif kept.special.pop(ref, None) is not None:
            changed = True
    if not changed and len(kept.special) < 2 and not kept.last.rejected:
        kept.last = dataclasses.replace(kept.last, snapshot=snapshot)
        return kept.last
    return _kinds_answer(snapshot, kept, None)


def _kind_tables(
    known: frozenset[tuple[str, str]],
) -> tuple[dict[tuple[str, str], list[str]], dict[str, list[str]]]:
    by_group_kind: dict[tuple[str, str], list[str]] = {}
    by_group: dict[str, list[str]] = {}
    for api_version, kind in known:
        by_group_kind.setdefault((group_of(api_version), kind), []).append(api_version)
        by_group.setdefault(group_of(api_version), []).append(kind)
    return by_group_kind, by_group


def _kinds_answer(
    snapshot: Snapshot, kept: KindsMemo, ordered: Sequence[KubeObject] | None
) -> KindCheck:
    """The answer from the checks kept, in the snapshot's order (`ordered`: the objects with a
    check to report, in that order; None: found by one C-speed pass over the snapshot)."""
    if ordered is None:
        # The snapshot's objects: a store may hand over an equal object for an unchanged one.
        for ref, (_, check) in list(kept.special.items()):
            now = snapshot.get_ref(ref)
            if now is None:
                del kept.special[ref]
            else:
                kept.special[ref] = (now, check)
        wanted = {id(obj) for obj, _ in kept.special.values()}
        ordered = [obj for obj, _ in kept.special.values()]
        if len(wanted) > 1:
            # The snapshot's order, at C speed: a new partition may come before an old one.
            ids = map(id, snapshot.objects)
            ordered = list(compress(snapshot.objects, map(wanted.__contains__, ids)))
    problems: list[SourceProblem] = []
    ignored: list[IgnoredObject] = []
    rejected: list[ObjectRef] = []
    for one in ordered:
        hit = kept.special.get(one.ref)
        if hit is None or hit[0] is not one:
            continue
        check = hit[1]
        problems.extend(p for p in (check.stamp, check.problem) if p is not None)
        if check.ignored is not None:
            ignored.append(check.ignored)
        if check.rejected:
            rejected.append(one.ref)
    if rejected:
        dropped = set(rejected)
        kept_objects = [o for o in snapshot.objects if o.ref not in dropped]
        snapshot = Snapshot.of(kept_objects, snapshot.problems)
    kept.last = KindCheck(snapshot, tuple(problems), tuple(ignored), tuple(rejected))
    return kept.last


def _check_object(
    obj: KubeObject,
    known: frozenset[tuple[str, str]],
    by_group_kind: Mapping[tuple[str, str], list[str]],
    by_group: Mapping[str, list[str]],
) -> _ObjectCheck:
    stamp = _timestamp_problem(obj)
    if (obj.api_version, obj.kind) in known:
        return _KNOWN if stamp is None else _ObjectCheck(stamp)
    served = by_group_kind.get((obj.group, obj.kind))
    where = (obj.origin.source, obj.origin.line, f"{obj.kind} {obj.namespace}/{obj.name}")
    if served is not None:
        reason = (
            f"apiVersion {obj.api_version!r} is not supported for kind {obj.kind}; "
            f"turnout reads {', '.join(sorted(served))}"
        )
    elif (meant := misspelled_kind(obj.kind, by_group.get(obj.group, ()))) is not None:
        reason = (
            f"kind {obj.kind} is not a kind of {obj.group or 'v1'} that turnout reads; "
            f"did you mean {meant}?"
        )
    else:
        reason = f"kind {obj.kind} of apiVersion {obj.api_version!r} is not read by turnout"
        problem = SourceProblem(*where[:2], f"{reason}; ignored", where[2], severity="warning")
        return _ObjectCheck(stamp, problem, IgnoredObject.of(obj, reason))
    return _ObjectCheck(stamp, SourceProblem(*where[:2], reason, where[2]), rejected=True)


def build_graph(
    snapshot: Snapshot,
    options: CompileOptions,
    dialects: Sequence[Dialect],
    memo: CompileMemo | None = None,
    changes: Iterable[Change] | None = None,
) -> CompileResult:
    """The graph, statuses and problems of `snapshot` as `dialects` read it.

    `memo`: what the compile before kept (`graph/memo.py`), so that this one redoes only what
    changed since (`changes`, when the caller knows them); the result is the same either way."""
    memo = CompileMemo() if memo is None else memo
    memo.begin(snapshot, options, changes)
    known = CORE_KINDS.union(*(d.kinds for d in dialects))
    kinds = check_kinds(snapshot, known, memo)
    snapshot = kinds.snapshot
    claims: list[HostClaim] = []
    for dialect in dialects:
        claims.extend(dialect_claims(dialect, snapshot, options, memo))
    ownership = ownership_from_claims(claims, memo)
    backends = BackendResolver(
        snapshot,
        enable_external_name_service=options.enable_external_name_service,
        book=memo.stage("clusters", ClusterBook),
        slices=slice_index(snapshot, _changed_slices(memo), memo.stage("slices", SliceIndex)),
    )
    secrets = SecretResolver(snapshot, memo.stage("secrets", SecretBook))
    ctx = CompileContext(options, ownership, backends, secrets, memo)

    outputs = _dialect_outputs(dialects, snapshot, ctx)
    per_dialect, per_hints, statuses = outputs.hosts, outputs.hints, outputs.statuses
    tcp_proxies, declared = outputs.tcp_proxies, outputs.declared

    hosts = merge_hosts(per_dialect, (HTTP_LISTENER, HTTPS_LISTENER))
    names = _listener_names(hosts, tcp_proxies, declared, options)
    ordered = ordered_hosts({n: hosts.get(n, {}) for n in names}, merge_hints(per_hints), memo)
    listeners = _same_listeners(_listeners(ordered, tcp_proxies, declared, options), memo)
    named = host_names(listeners, memo)
    reserved = endpoint_reserved_ports(options, declared.values())
    served = served_clusters(named.clusters, backends, snapshot, reserved, options, memo)
    forbidden = forbidden_of(served)
    statuses = sorted_statuses(statuses, memo)
    graph, limit_problems = _checked_graph(listeners, named, served, secrets, memo)
    limits = memo.stage("limits", PatchedLimits)
    graph = _hold_owned_hosts(graph, ownership, memo, limits.rechecked())
    basis = EndpointBasis(
        backends=basis_of(served),
        slices=backends.endpoint_slices(),
        positions=positions_of(served, graph.clusters),
        reserved=reserved,
        statuses=tuple(statuses),
        limit_findings=tuple(_limit_findings(limit_problems)),
        endpoint_findings=endpoint_findings(forbidden, graph, memo),
        forbidden=forbidden,
        forbidden_problems=forbidden_problems(
            forbidden, snapshot, backends.endpoint_slices(), memo
        ),
        head_problems=(*snapshot.problems, *kinds.problems),
        tail_problems=source_problems(limit_problems, snapshot),
    )
    memo.stage("route-ids", IdsMemo).end()
    return CompileResult(
        graph=graph,
        statuses=fold_findings(
            statuses, (*basis.limit_findings, *basis.endpoint_findings), snapshot, memo
        ),
        problems=(*basis.head_problems, *basis.forbidden_problems, *basis.tail_problems),
        dns_names=dns_names_of(served),
        ignored=_ignored(kinds.ignored, dialects, snapshot, options, memo),
        rejected=kinds.rejected,
        endpoint_dependent_services=backends.endpoint_dependent(),
        endpoint_basis=basis,
    )


@dataclass(frozen=True, slots=True)
class _Outputs:
    """The dialects' outputs together: their hosts by listener and name (with the names that
    may have changed), statuses, TCP proxies and declared listeners."""

    hosts: list[Hosts]
    hints: list[Hints]
    statuses: list[ObjectStatus]
    tcp_proxies: dict[str, dict[str, TCPProxy]]
    declared: dict[str, ListenerDecl]


def _dialect_outputs(
    dialects: Sequence[Dialect], snapshot: Snapshot, ctx: CompileContext
) -> _Outputs:
    out = _Outputs([], [], [], {}, {})
    for dialect in dialects:
        found = dialect_output(dialect, snapshot, ctx)
        out.statuses.extend(found.statuses)
        for decl in found.listeners:
            out.declared.setdefault(decl.name, decl)
        # Ownership guarantees one vhost per (listener, hostname); a dialect that emits a
        # second one has a bug, and the first one stays in force.
        hosts, hints = dialect_hosts(dialect.name, found.virtual_hosts, ctx.memo)
        out.hosts.append(hosts)
        out.hints.append(hints)
        for listener, proxy in found.tcp_proxies:
            out.tcp_proxies.setdefault(listener, {}).setdefault(proxy.name, proxy)
    return out


def _checked_graph(
    listeners: Sequence[Listener],
    named: HostNames,
    served: ClusterStage,
    secrets: SecretResolver,
    memo: CompileMemo,
) -> tuple[RoutingGraph, tuple[GraphProblem, ...]]:
    """The graph of the served pieces through the net under every dialect: what Envoy would
    refuse is confined to the object that wrote it (`patch_envoy_limits`)."""
    hosts = memo.stage("listener-hosts", ListenerHosts)
    graph = RoutingGraph(
        listeners=tuple(listeners),
        clusters=clusters_of(served),
        secrets=secrets.used_secrets(set(named.secrets.counts)),
        ca_bundles=secrets.used_ca_bundles(
            set(chain(named.ca_bundles.counts, served.ca_bundles.counts))
        ),
    )
    limits = memo.stage("limits", PatchedLimits)
    return patch_envoy_limits(
        graph,
        limits,
        hosts.changed,
        served.changed,
        served.names,
        served.final,
        hosts.hosts(),
        memo.stage("route-ids", IdsMemo),
    )


class DialectMemo:
    """A dialect's claims and output from the compile before, with what it read of ownership
    and what it asked the resolvers: what `dialect_claims` and `dialect_output` reuse for a
    dialect that is not incremental."""

    def __init__(self) -> None:
        self.claims: tuple[HostClaim, ...] | None = None
        self.output: DialectOutput | None = None
        self.ownership: RecordedOwnership | None = None
        self.use = ResolverUse()


def _reads(dialect: Dialect) -> frozenset[tuple[str, str]]:
    """The (group, kind)s a dialect may read: its own, the core kinds, and the delegations
    the shared `SecretResolver` reads for any dialect (an Ingress's Secret in another
    namespace, an HTTPProxy's named by a `contour.heptio.com` delegation)."""
    own = frozenset((group_of(v), k) for v, k in (*dialect.kinds, *CORE_KINDS))
    return own.union(DELEGATION_KINDS)


def dialect_claims(
    dialect: Dialect, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo
) -> tuple[HostClaim, ...]:
    """The dialect's claims; those of the compile before while nothing it reads changed."""
    if dialect.incremental:
        return tuple(dialect.claims(snapshot, options, memo))
    kept = memo.stage(f"dialect:{dialect.name}", DialectMemo)
    if kept.claims is None or memo.delta.touches(_reads(dialect)):
        kept.claims = tuple(dialect.claims(snapshot, options))
        kept.output = None
    return kept.claims


def dialect_output(dialect: Dialect, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
    """The dialect's output; that of the compile before while nothing it reads changed and
    every owner it asked about is still the same object."""
    if dialect.incremental:
        return dialect.compile(snapshot, ctx)
    kept = ctx.memo.stage(f"dialect:{dialect.name}", DialectMemo)
    if (
        kept.output is not None
        and kept.ownership is not None
        and kept.ownership.same_answers(ctx.ownership)
    ):
        ctx.backends.replay(kept.use)
        return kept.output
    recorded = RecordedOwnership(ctx.ownership.owners)
    # What the resolver decided for this dialect that no cluster name says, replayed on reuse.
    kept.use = ResolverUse()
    ctx.backends.record(kept.use)
    try:
        kept.output = dialect.compile(snapshot, dataclasses.replace(ctx, ownership=recorded))
    finally:
        ctx.backends.record(None)
    kept.ownership = recorded
    return kept.output


def _listener_names(
    vhosts: Mapping[str, Mapping[str, VirtualHost]],
    tcp_proxies: Mapping[str, Mapping[str, TCPProxy]],
    declared: Mapping[str, ListenerDecl],
    options: CompileOptions,
) -> list[str]:
    """`ingress_http` always, `ingress_https` when something is served over TLS, then every
    declared listener not on the shared ports."""
    names = [HTTP_LISTENER]
    if vhosts.get(HTTPS_LISTENER) or tcp_proxies.get(HTTPS_LISTENER):
        names.append(HTTPS_LISTENER)
    shared = (options.http_port, options.https_port)
    names.extend(n for n, decl in declared.items() if decl.port not in shared)
    return names


def _listeners(
    vhosts: Mapping[str, tuple[VirtualHost, ...]],
    tcp_proxies: dict[str, dict[str, TCPProxy]],
    declared: dict[str, ListenerDecl],
    options: CompileOptions,
) -> list[Listener]:
    """The listeners of `_listener_names` (`vhosts`' keys), each with its hosts (in name
    order, as `ordered_hosts` gives them) and TCP proxies in name order; sorted by name."""
    listeners = []
    for name, own_vhosts in vhosts.items():
        decl = declared.get(name)
        if name == HTTP_LISTENER:
            port, protocol = options.http_port, ListenerProtocol.HTTP
        elif name == HTTPS_LISTENER:
            port, protocol = options.https_port, ListenerProtocol.HTTPS
        else:
            assert decl is not None
            port, protocol = decl.port, decl.protocol
        own_tcp = tcp_proxies.get(name, {}) if name != HTTP_LISTENER else {}
        listeners.append(
            Listener(
                name=name,
                address=options.address,
                port=port,
                protocol=protocol,
                virtual_hosts=own_vhosts,
                tcp_proxies=tuple(own_tcp[k] for k in sorted(own_tcp)),
            )
        )
    listeners.sort(key=lambda lst: lst.name)
    return listeners


def _changed_slices(memo: CompileMemo) -> list[tuple[str, str]] | None:
    """The EndpointSlices (namespace, name) changed since the compile before; None: any."""
    if memo.delta.everything:
        return None
    return [
        (r.namespace, r.name)
        for r in memo.delta.refs
        if (r.group, r.kind) == ("discovery.k8s.io", "EndpointSlice")
    ]


def _identical(a: Sequence[object], b: Sequence[object]) -> bool:
    """Whether two sequences hold the very same objects, in the same order."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class ListenersMemo:
    """The listeners of the compile before, by name (`_same_listeners`)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Listener] = {}


def _same_listeners(listeners: list[Listener], memo: CompileMemo) -> list[Listener]:
    """`listeners`, each replaced by the compile before's listener of that name when it holds
    the very same virtual hosts and TCP proxies (and is otherwise equal), so that what comes
    after can keep its work by identity."""
    kept = memo.stage("listeners", ListenersMemo)
    out: list[Listener] = []
    for lst in listeners:
        old = kept.by_name.get(lst.name)
        if (
            old is not None
            # `ordered_hosts` hands over the very same tuple while no host of it changed.
            and old.virtual_hosts is lst.virtual_hosts
            and _identical(old.tcp_proxies, lst.tcp_proxies)
            and (old.address, old.port, old.protocol) == (lst.address, lst.port, lst.protocol)
        ):
            lst = old
        out.append(lst)
    kept.by_name = {lst.name: lst for lst in out}
    return out


class IgnoredMemo:
    """Each dialect's `ignored` answer, by dialect name, kept while none of its kinds changed;
    for a dialect that is `ignored_per_object`, by ref, patched for the refs that changed."""

    def __init__(self) -> None:
        self.by_dialect: dict[str, tuple[IgnoredObject, ...]] = {}
        self.by_ref: dict[str, dict[ObjectRef, IgnoredObject]] = {}


def _ignored(
    unknown: Iterable[IgnoredObject],
    dialects: Sequence[Dialect],
    snapshot: Snapshot,
    options: CompileOptions,
    memo: CompileMemo | None = None,
) -> tuple[IgnoredObject, ...]:
    memo = CompileMemo() if memo is None else memo
    kept = memo.stage("ignored", IgnoredMemo)
    out = [*unknown]
    for d in dialects:
        found = kept.by_dialect.get(d.name)
        if found is None or memo.delta.everything:
            found = tuple(d.ignored(snapshot, options))
            if d.ignored_per_object:
                kept.by_ref[d.name] = {i.ref: i for i in found}
        elif memo.delta.touches(_reads(d)):
            found = _ignored_again(d, snapshot, options, memo, kept)
        kept.by_dialect[d.name] = found
        out.extend(found)
    out.sort(key=lambda i: (i.ref.group, i.ref.kind, i.ref.namespace, i.ref.name))
    return tuple(out)


def _ignored_again(
    d: Dialect, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo, kept: IgnoredMemo
) -> tuple[IgnoredObject, ...]:
    """`d.ignored`: all again, or for a dialect that is `ignored_per_object` its answer before
    patched for the objects of its kinds that changed."""
    if not d.ignored_per_object:
        return tuple(d.ignored(snapshot, options))
    by_ref = kept.by_ref[d.name]
    own = {(group_of(v), k) for v, k in d.kinds}
    changed = False
    for ref in memo.delta.refs:
        if (ref.group, ref.kind) not in own:
            continue
        obj = snapshot.get_ref(ref)
        found = None if obj is None else d.ignored_object(obj, options)
        if found is not None:
            by_ref[ref] = found
            changed = True
        elif by_ref.pop(ref, None) is not None:
            changed = True
    if not changed:
        return kept.by_dialect[d.name]
    return tuple(by_ref[r] for r in sorted(by_ref))


def _hold_owned_hosts(
    graph: RoutingGraph,
    ownership: Ownership,
    memo: CompileMemo | None = None,
    rechecked: Mapping[str, set[str] | None] | None = None,
) -> RoutingGraph:
    """`graph` with a virtual host without routes (Envoy answers 404) for every hostname owned
    on a plain HTTP listener that has none: the owner's root was invalid, or the safety net left
    its virtual host out.

    Without it, the owner's requests (cookies and credentials included) would fall to another
    namespace's host-less `*` virtual host (an Ingress without host, a RouteGroup without hosts).
    Contour lets them fall; turnout serves many tenants from one Envoy, so an owned name stays
    the owner's even while it serves nothing. 404 is what Envoy answers for a host it does not
    serve. HTTPS listeners need no such hold: each TLS host is a filter chain chosen by SNI, and
    a host without one never reaches another host's routes.

    `memo`: the hosts held before are patched for the hostnames whose owner changed
    (`OwnershipMemo.changed`) and, per listener, the names the Envoy-limits net checked again
    (`rechecked`; None: all)."""
    memo = CompileMemo() if memo is None else memo
    kept = memo.stage("held", HeldMemo)
    owner_changed = memo.stage("ownership", OwnershipMemo).changed
    if memo.delta.everything or rechecked is None:
        owner_changed = None
    walked: dict[str, list[tuple[str, KubeObject]]] | None = None
    held_by: dict[str, dict[str, VirtualHost]] = {}
    listeners: list[Listener] = []
    for lst in graph.listeners:
        if lst.protocol is not ListenerProtocol.HTTP:
            listeners.append(lst)
            continue
        before = kept.held.get(lst.name)
        again = None if rechecked is None else rechecked.get(lst.name)
        if owner_changed is None or before is None or again is None:
            if walked is None:
                walked = _owned_by_listener(ownership)
            held = _held_walk(lst, walked.get(lst.name, ()), kept)
        else:
            candidates = {h for name, h in owner_changed if name == lst.name}
            held = _held_patch(lst, before, candidates.union(again), ownership, kept)
        held_by[lst.name] = held
        if held:
            lst = _with_held(lst, tuple(map(held.__getitem__, sorted(held))), kept)
        listeners.append(lst)
    kept.held = held_by
    kept.listeners, kept.used_listeners = kept.used_listeners, {}
    if all(new is old for new, old in zip(listeners, graph.listeners, strict=True)):
        return graph
    return dataclasses.replace(graph, listeners=tuple(listeners))


def _owned_by_listener(ownership: Ownership) -> dict[str, list[tuple[str, KubeObject]]]:
    by_listener: dict[str, list[tuple[str, KubeObject]]] = {}
    for (listener, hostname), owner in ownership.owners.items():
        by_listener.setdefault(listener, []).append((hostname, owner))
    return by_listener


def _held_walk(
    lst: Listener, owned: Iterable[tuple[str, KubeObject]], kept: HeldMemo
) -> dict[str, VirtualHost]:
    served = set(map(_NAME, lst.virtual_hosts))
    return {
        hostname: _held_host(hostname, owner, kept)
        for hostname, owner in owned
        if hostname != "*" and hostname not in served and hostname_problem(hostname) is None
    }


def _held_patch(
    lst: Listener,
    before: dict[str, VirtualHost],
    candidates: Iterable[str],
    ownership: Ownership,
    kept: HeldMemo,
) -> dict[str, VirtualHost]:
    """`before` with each candidate hostname held again or released; whether a name is served
    is found by bisection (a listener's hosts are in name order before any is held)."""
    held = dict(before)
    hosts = lst.virtual_hosts
    for hostname in candidates:
        held.pop(hostname, None)
        owner = ownership.owners.get((lst.name, hostname))
        if owner is None or hostname == "*" or hostname_problem(hostname) is not None:
            continue
        i = bisect_left(hosts, hostname, key=_NAME)
        if i < len(hosts) and hosts[i].name == hostname:
            continue
        held[hostname] = _held_host(hostname, owner, kept)
    return held


class HeldMemo:
    """The held virtual hosts of the compile before by listener and hostname, and the listeners
    they were added to (by the listener's identity)."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, VirtualHost]] = {}
        self.listeners: dict[int, tuple[Listener, tuple[VirtualHost, ...], Listener]] = {}
        self.used_listeners: dict[int, tuple[Listener, tuple[VirtualHost, ...], Listener]] = {}


def _held_host(hostname: str, owner: KubeObject, kept: HeldMemo) -> VirtualHost:
    for held in kept.held.values():
        vh = held.get(hostname)
        if vh is not None and vh.owner == owner.ref:
            return vh
    match = HostnameMatch.WILDCARD_ANY_LABELS
    if not hostname.startswith("*."):
        match = HostnameMatch.EXACT
    return VirtualHost(
        name=hostname, hostname=hostname, routes=(), owner=owner.ref, hostname_match=match
    )


def _with_held(lst: Listener, held: tuple[VirtualHost, ...], kept: HeldMemo) -> Listener:
    hit = kept.listeners.get(id(lst))
    if hit is None or hit[0] is not lst or not _identical(hit[1], held):
        vhosts = sorted((*lst.virtual_hosts, *held), key=_NAME)
        hit = (lst, held, dataclasses.replace(lst, virtual_hosts=tuple(vhosts)))
    kept.used_listeners[id(lst)] = hit
    return hit[2]


def _limit_findings(problems: Iterable[GraphProblem]) -> list[Finding]:
    return [Finding(p.object, p.field, ENVOY_LIMIT, p.reason) for p in problems]


def endpoint_findings(
    forbidden: Sequence[ForbiddenEndpoint],
    graph: RoutingGraph,
    memo: CompileMemo | None = None,
) -> tuple[Finding, ...]:
    """A refused endpoint, on every object whose routes send to its cluster (the Service has no
    status of its own)."""
    if not forbidden:
        return ()
    names = {f.cluster.name for f in forbidden}
    if memo is None:
        users = cluster_writers(graph, only=names)
    else:
        users = memo.stage("writer-index", WriterIndex).writers(graph, names)
    kept: RefusalFindings = (CompileMemo() if memo is None else memo).stage(
        "refusal-findings", IdentityMemo
    )
    out: dict[Finding, None] = {}
    for f in forbidden:
        sources = users.get(f.cluster.name, ())
        hit = kept.get(f)
        if hit is None or hit[0] != sources:
            hit = kept.put(f, (sources, _refusal_findings(f, sources)))
        out.update(dict.fromkeys(hit[1]))
    return tuple(out)


RefusalFindings = IdentityMemo[
    ForbiddenEndpoint, tuple[tuple[RouteSource, ...], tuple[Finding, ...]]
]


def _refusal_findings(f: ForbiddenEndpoint, sources: Iterable[RouteSource]) -> tuple[Finding, ...]:
    ep = f.endpoint
    message = (
        f"endpoint {ep.address}:{ep.port} of Service {f.cluster.namespace}/"
        f"{f.cluster.service}: {f.reason}; the endpoint is left out"
    )
    return tuple(Finding(s.object, s.field, ENDPOINT_REFUSED, message) for s in sources)


def forbidden_problems(
    forbidden: Iterable[ForbiddenEndpoint],
    snapshot: Snapshot,
    slices: Mapping[tuple[str, str], Sequence[KubeObject]] | None = None,
    memo: CompileMemo | None = None,
) -> tuple[SourceProblem, ...]:
    """One error per endpoint left out, on the Service (or the RouteGroup backend) whose
    cluster listed it, naming the EndpointSlices or Endpoints that wrote it (`slices`: the
    snapshot's `index_endpoint_slices`, when the caller has it). `memo`: each problem kept
    while the refusal, the Service, its slices and its Endpoints are the very same objects."""
    kept: ForbiddenProblems = (CompileMemo() if memo is None else memo).stage(
        "forbidden-problems", IdentityMemo
    )
    out: list[SourceProblem] = []
    for f in forbidden:
        c = f.cluster
        service = snapshot.get("", "Service", c.namespace, c.service)
        own = tuple(slices.get((c.namespace, c.service), ())) if slices is not None else None
        endpoints = snapshot.get("", "Endpoints", c.namespace, c.service)
        hit = kept.get(f)
        if (
            hit is None
            or own is None
            or hit[0] is not service
            or hit[2] is not endpoints
            or not _identical(hit[1], own)
        ):
            problem = _forbidden_problem(f, service, snapshot, slices)
            hit = kept.put(f, (service, own or (), endpoints, problem))
        out.append(hit[3])
    return tuple(out)


ForbiddenProblems = IdentityMemo[
    ForbiddenEndpoint,
    tuple[KubeObject | None, tuple[KubeObject, ...], KubeObject | None, SourceProblem],
]


def _forbidden_problem(
    f: ForbiddenEndpoint,
    service: KubeObject | None,
    snapshot: Snapshot,
    slices: Mapping[tuple[str, str], Sequence[KubeObject]] | None,
) -> SourceProblem:
    c, ep = f.cluster, f.endpoint
    sources = endpoint_sources(snapshot, c.namespace, c.service, ep.address, slices)
    via = f" (listed by {', '.join(sources)})" if sources and service is not None else ""
    what = "Service" if service is not None else "backend"
    return SourceProblem(
        service.origin.source if service is not None else "<graph>",
        service.origin.line if service is not None else None,
        f"endpoint {ep.address}:{ep.port}{via}: {f.reason}; the endpoint is left out",
        f"{what} {c.namespace}/{c.service}",
    )

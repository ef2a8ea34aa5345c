"""The served pieces after the dialects, patched from the compile before per key.

`build_graph` assembles the listeners from the dialects' virtual hosts, then finds the clusters
they use, their endpoints, the endpoints no tenant may use, and the TLS Secrets and CA bundles
named. Each step keeps its last result keyed by (listener, virtual host name) or by cluster name
and redoes only the keys whose inputs are not the very same objects (`replaced_keys`, the
`Delta`); a result that is a union over pieces (the clusters used, the names of Secrets and CA
bundles) is kept as reference counts, so that a name leaves the union when its last user goes.
What stays linear per change is C-speed: `replaced_keys`, dict copies, `map` over kept dicts.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from typing import TypeVar

from turnout.compile_inputs import CompileOptions
from turnout.graph.attribution import route_clusters
from turnout.graph.host_routes import IdsMemo, NameCounts
from turnout.graph.memo import CompileMemo, replaced_keys, replaced_places
from turnout.graph.model import INVALID_BACKEND, Cluster, Listener, VirtualHost
from turnout.graph.services import (
    BackendResolver,
    BookEntry,
    ForbiddenEndpoint,
    ServiceBackend,
    drop_forbidden_endpoints,
    resolve_endpoints,
)
from turnout.graph.tls_refs import (
    cluster_ca_names,
    route_ca_names,
    termination_ca_names,
    termination_secret_names,
    vhost_secret_names,
)
from turnout.objects import KubeObject
from turnout.store import Snapshot

T = TypeVar("T")
HostKey = tuple[str, str]  # (listener, virtual host name)
Hosts = dict[str, dict[str, VirtualHost]]  # listener -> name -> virtual host

_NAME = attrgetter("name")
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


# Per listener, the names whose virtual host may differ from the compile before's; None: any.
Hints = dict[str, set[str]] | None


class DialectHosts:
    """Each dialect's virtual hosts by listener and name, with the pairs they were read from
    and whether those held each (listener, name) once."""

    def __init__(self) -> None:
        self.by_dialect: dict[str, tuple[tuple[tuple[str, VirtualHost], ...], Hosts, bool]] = {}


def dialect_hosts(
    name: str, pairs: tuple[tuple[str, VirtualHost], ...], memo: CompileMemo
) -> tuple[Hosts, Hints]:
    """One dialect's (listener, virtual host) pairs by listener and name, the first of a name
    winning (ownership allows one; a second is a dialect's bug), and the names that may have
    changed: the pairs of the compile before patched at the places that are not the very same
    pair (an incremental dialect hands back the same pairs for what did not change)."""
    kept = memo.stage("dialect-hosts", DialectHosts)
    hit = kept.by_dialect.get(name)
    if hit is not None and hit[0] is pairs:
        return hit[1], {}
    if hit is not None and hit[2] and len(hit[0]) == len(pairs) and not memo.delta.everything:
        patched = _patch_pairs(hit[0], hit[1], pairs)
        if patched is not None:
            kept.by_dialect[name] = (pairs, patched[0], True)
            return patched
    out: Hosts = {}
    listeners = set(map(_FIRST, pairs))
    if len(listeners) == 1:
        vhosts = list(map(_SECOND, pairs))
        vhosts.reverse()  # a dict keeps the last value given for a key: the first pair wins
        out[listeners.pop()] = dict(zip(map(_NAME, vhosts), vhosts, strict=True))
    else:
        for listener, vhost in pairs:
            out.setdefault(listener, {}).setdefault(vhost.name, vhost)
    once = sum(map(len, out.values())) == len(pairs)
    kept.by_dialect[name] = (pairs, out, once)
    return out, None


def _patch_pairs(
    before: tuple[tuple[str, VirtualHost], ...],
    hosts: Hosts,
    pairs: tuple[tuple[str, VirtualHost], ...],
) -> tuple[Hosts, dict[str, set[str]]] | None:
    """`hosts` (of `before`, each name once) patched for the places where `pairs` differs;
    None: a name given twice now (the whole is read again). Copies the dicts it changes."""
    places = replaced_places(before, pairs)
    out = dict(hosts)
    hints: dict[str, set[str]] = {}
    for i in places:
        listener, vh = before[i]
        if out[listener] is hosts[listener]:
            out[listener] = dict(hosts[listener])
        del out[listener][vh.name]
        hints.setdefault(listener, set()).add(vh.name)
    for i in places:
        listener, vh = pairs[i]
        found = out.get(listener)
        if found is None:
            found = out[listener] = {}
        elif found is hosts.get(listener):
            found = out[listener] = dict(found)
        if vh.name in found:
            return None
        found[vh.name] = vh
        hints.setdefault(listener, set()).add(vh.name)
    return {k: v for k, v in out.items() if v}, hints


def merge_hosts(per_dialect: Sequence[Hosts], listeners: Iterable[str]) -> Hosts:
    """The dialects' hosts by listener, the first dialect winning a name; a listener only one
    dialect serves is that dialect's very dict (never changed in place)."""
    out: Hosts = {name: {} for name in listeners}
    copied: set[str] = set()
    for hosts in reversed(per_dialect):
        for listener, by_name in hosts.items():
            found = out.get(listener)
            if not found:
                out[listener] = by_name
            else:
                if listener not in copied:
                    found = out[listener] = dict(found)
                    copied.add(listener)
                found.update(by_name)
    return out


def merge_hints(per_dialect: Sequence[Hints]) -> Hints:
    """The dialects' hints together; None when one of them does not know."""
    out: dict[str, set[str]] = {}
    for hints in per_dialect:
        if hints is None:
            return None
        for listener, names in hints.items():
            out.setdefault(listener, set()).update(names)
    return out


# One listener's hosts: by name, their names in order, the virtual hosts in that order.
OrderedHosts = tuple[dict[str, VirtualHost], list[str], tuple[VirtualHost, ...]]


class ListenerHosts:
    """Each listener's hosts of the compile before: by name, their names in order, the tuple."""

    def __init__(self) -> None:
        self.by_listener: dict[
            str, tuple[dict[str, VirtualHost], list[str], tuple[VirtualHost, ...]]
        ]
        self.by_listener = {}
        # The (listener, name)s whose virtual host the last compile changed; None: all.
        self.changed: set[HostKey] | None = None

    def hosts(self) -> dict[str, dict[str, VirtualHost]]:
        """Each listener's virtual hosts by name, as the last compile ordered them."""
        return {name: found[0] for name, found in self.by_listener.items()}


def ordered_hosts(
    hosts: Hosts, hints: Hints, memo: CompileMemo
) -> dict[str, tuple[VirtualHost, ...]]:
    """Each listener's virtual hosts in name order: the very same tuple while none changed,
    else the compile before's order patched for the names added and removed (among `hints`,
    when known)."""
    kept = memo.stage("listener-hosts", ListenerHosts)
    changed: set[HostKey] | None = None if memo.delta.everything else set()
    out: dict[str, tuple[VirtualHost, ...]] = {}
    by_listener = {}
    for listener, now in hosts.items():
        old = kept.by_listener.get(listener)
        if old is None or changed is None:
            names = sorted(now)
            found = (now, names, tuple(map(now.__getitem__, names)))
            if changed is not None:
                changed.update((listener, n) for n in names)
        else:
            if hints is None:
                replaced = replaced_keys(old[0], now)
            else:
                before = old[0]
                maybe = hints.get(listener, ())
                replaced = {n for n in maybe if before.get(n) is not now.get(n)}
            found = _patched_hosts(old, now, replaced)
            changed.update((listener, n) for n in replaced)
        by_listener[listener] = found
        out[listener] = found[2]
    if changed is not None:
        for listener, old in kept.by_listener.items():
            if listener not in hosts:
                changed.update((listener, n) for n in old[0])
    kept.by_listener, kept.changed = by_listener, changed
    return out


def _patched_hosts(
    old: OrderedHosts, now: dict[str, VirtualHost], replaced: set[str]
) -> OrderedHosts:
    before, names, vhosts = old
    if not replaced:
        return (now, names, vhosts)
    names = list(names)
    for name in replaced:
        if name not in now:
            del names[bisect_left(names, name)]
        elif name not in before:
            insort(names, name)
    return (now, names, tuple(map(now.__getitem__, names)))


class Counted:
    """A union over keyed pieces as reference counts: each key's names, each name's count, and
    the names that entered or left the union since `flipped` was last emptied."""

    def __init__(self) -> None:
        self.by_key: dict[object, frozenset[str]] = {}
        self.counts: dict[str, int] = {}
        self.flipped: set[str] = set()

    def put(self, key: object, names: frozenset[str] | None) -> None:
        """`key`'s names are now `names` (None: the key is gone)."""
        old = self.by_key.pop(key, frozenset())
        if old is names or old == names:
            if names:
                self.by_key[key] = names
            return
        new = names or frozenset()
        # Only the names that differ: a big host's thousands of names mostly stay.
        for name in old - new:
            left = self.counts[name] - 1
            if left:
                self.counts[name] = left
            else:
                del self.counts[name]
                self.flipped ^= {name}
        if names:
            self.by_key[key] = names
            for name in names - old:
                count = self.counts.get(name, 0)
                self.counts[name] = count + 1
                if not count:
                    self.flipped ^= {name}


class HostNames:
    """What the virtual hosts and TCP proxies name, counted: clusters, TLS Secrets, CA bundles
    (TCP proxies by (listener, name), walked every compile: they are few). `routes`: per
    (listener, host), the clusters and CA bundles its routes name, counted per route."""

    def __init__(self) -> None:
        self.clusters = Counted()
        self.secrets = Counted()
        self.ca_bundles = Counted()
        self.proxies: set[tuple[str, str, str]] = set()
        self.routes: dict[HostKey, tuple[NameCounts, NameCounts]] = {}


def host_names(listeners: Sequence[Listener], memo: CompileMemo) -> HostNames:
    """The clusters the virtual hosts and TCP proxies send to, the TLS Secrets and the CA
    bundles they name (the clusters' own CA bundles aside), counted: each virtual host's names
    are counted again only when it changed (`ListenerHosts.changed`), its routes' names patched
    from the routes added and removed (`host_routes.NameCounts`)."""
    kept = memo.stage("host-names", HostNames)
    hosts = memo.stage("listener-hosts", ListenerHosts)
    changed = hosts.changed
    kept.secrets.flipped.clear()  # only the clusters' are read (`served_clusters`)
    kept.ca_bundles.flipped.clear()
    if changed is None:
        kept.clusters, kept.secrets, kept.ca_bundles = Counted(), Counted(), Counted()
        kept.proxies, kept.routes = set(), {}
        changed = {(lst, name) for lst, found in hosts.by_listener.items() for name in found[0]}
    ids = memo.stage("route-ids", IdsMemo)
    for key in changed:
        found = hosts.by_listener.get(key[0])
        vh = None if found is None else found[0].get(key[1])
        if vh is None:
            kept.routes.pop(key, None)
            kept.clusters.put(key, None)
            kept.secrets.put(key, None)
            kept.ca_bundles.put(key, None)
            continue
        counted = kept.routes.get(key)
        if counted is None:
            counted = kept.routes[key] = (NameCounts(), NameCounts())
        clusters = counted[0].patch(vh.routes, route_clusters, ids)
        if vh.policies.authorization is not None:
            clusters = clusters | {vh.policies.authorization.cluster}
        kept.clusters.put(key, clusters)
        kept.secrets.put(key, vhost_secret_names(vh))
        cas = counted[1].patch(vh.routes, route_ca_names, ids)
        if vh.tls is not None:
            cas = cas | termination_ca_names(vh.tls)
        kept.ca_bundles.put(key, cas)
    proxies: set[tuple[str, str, str]] = set()
    for lst in listeners:
        for proxy in lst.tcp_proxies:
            at = ("tcp", lst.name, proxy.name)
            proxies.add(at)
            tls = proxy.tls
            kept.clusters.put(at, frozenset(wc.cluster for wc in proxy.clusters))
            kept.secrets.put(at, None if tls is None else termination_secret_names(tls))
            kept.ca_bundles.put(at, None if tls is None else termination_ca_names(tls))
    for at in kept.proxies - proxies:
        kept.clusters.put(at, None)
        kept.secrets.put(at, None)
        kept.ca_bundles.put(at, None)
    kept.proxies = proxies
    return kept


# One served cluster: its book entry, the slices and Endpoints its endpoints were read from, the
# cluster with endpoints, whether it is turnout's own, and the cluster without the endpoints no
# tenant may use with what was dropped.
ClusterRecord = tuple[
    BookEntry,
    tuple[KubeObject, ...],
    KubeObject | None,
    Cluster,
    bool,
    Cluster,
    tuple[ForbiddenEndpoint, ...],
]


class ClusterStage:
    """The served clusters of the compile before by name, with the indexes that say which to
    redo: by Service, and the (counted) CA bundles they name."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.records: dict[str, ClusterRecord] = {}
        self.names: list[str] = []
        self.final: dict[str, Cluster] = {}
        self.by_service: dict[tuple[str, str], set[str]] = {}
        self.backends: dict[tuple[str, str], dict[str, ServiceBackend]] = {}
        self.basis: dict[tuple[str, str], tuple[ServiceBackend, ...]] = {}
        self.forbidden: dict[str, tuple[ForbiddenEndpoint, ...]] = {}
        self.dns: dict[str, str] = {}
        self.ca_bundles = Counted()
        # Names used without a cluster (no record): asked again every compile, they are few.
        self.missing: set[str] = set()
        self.own: frozenset[str] = frozenset()
        self.reserved: Mapping[int, str] | None = None
        self.slices: Mapping[tuple[str, str], Sequence[KubeObject]] = {}
        # The names whose cluster (after the forbidden endpoints) the last compile changed.
        self.changed: set[str] = set()
        self.clusters: tuple[Cluster, ...] | None = None  # `clusters_of`
        self.basis_copy: dict[tuple[str, str], tuple[ServiceBackend, ...]] | None = None
        self.positions: tuple[tuple[Cluster, ...], dict[str, int]] | None = None


def served_clusters(
    names: Counted,
    resolver: BackendResolver,
    snapshot: Snapshot,
    reserved: Mapping[int, str],
    options: CompileOptions,
    memo: CompileMemo,
) -> ClusterStage:
    """The clusters `used` names with their endpoints, less those no tenant may use
    (`resolve_endpoints`, `drop_forbidden_endpoints`); the book (`ClusterBook`) for the next
    compile. Redone: the names used or unused since, made during this compile, of a Service,
    EndpointSlice or Endpoints the delta names, or turnout's own since."""
    kept = memo.stage("served-clusters", ClusterStage)
    slices = resolver.endpoint_slices()
    own = resolver.own_clusters()
    used = names.counts  # INVALID_BACKEND aside: a share answered 500, never a cluster
    if memo.delta.everything or kept.reserved != reserved:
        # Every name again (the book stays: it is the compile before's, read by `entry`).
        dirty = set(chain(used, kept.records))
        kept.reset()
    else:
        dirty = set(names.flipped)
        dirty.update(kept.missing)
        dirty.update(name for name in resolver.made() if name in used)
        dirty.update(own ^ kept.own)
        for service in _touched_services(memo, kept.slices, slices):
            dirty.update(kept.by_service.get(service, ()))
    names.flipped.clear()
    dirty.discard(INVALID_BACKEND)
    kept.own, kept.reserved, kept.slices = own, dict(reserved), slices
    kept.changed = set()
    touched: set[tuple[str, str]] = set()
    for name in dirty:
        record = _record(name, name in used, resolver, snapshot, slices, kept, reserved, options)
        _store(kept, name, record, touched)
        if record is not None:
            resolver.book.entries[name] = record[0]
            kept.missing.discard(name)
        else:
            resolver.book.entries.pop(name, None)
            if name in used:
                kept.missing.add(name)
            else:
                kept.missing.discard(name)
    if touched:
        kept.basis_copy = None
    for service in touched:
        found = kept.backends.get(service)
        if found:
            kept.basis[service] = tuple(map(found.__getitem__, sorted(found)))
        else:
            kept.backends.pop(service, None)
            kept.basis.pop(service, None)
    return kept


def _touched_services(
    memo: CompileMemo,
    before: Mapping[tuple[str, str], Sequence[KubeObject]],
    now: Mapping[tuple[str, str], Sequence[KubeObject]],
) -> set[tuple[str, str]]:
    """The Services (namespace, name) whose object, Endpoints or EndpointSlices changed."""
    found = {
        (r.namespace, r.name)
        for r in memo.delta.refs
        if r.group == "" and r.kind in ("Service", "Endpoints")
    }
    if any(r.kind == "EndpointSlice" for r in memo.delta.refs):
        found.update(replaced_keys(before, now))  # the slice index's lists, by identity
    return found


def _record(
    name: str,
    used: bool,
    resolver: BackendResolver,
    snapshot: Snapshot,
    slices: Mapping[tuple[str, str], Sequence[KubeObject]],
    kept: ClusterStage,
    reserved: Mapping[int, str],
    options: CompileOptions,
) -> ClusterRecord | None:
    entry = resolver.entry(name) if used else None
    if entry is None:
        return None
    old = kept.records.get(name)
    own: tuple[KubeObject, ...] = ()
    eps: KubeObject | None = None
    resolved = entry.cluster
    if entry.backend is not None:
        key = entry.backend.service
        own = tuple(slices.get(key, ()))
        eps = None if own else snapshot.get("", "Endpoints", *key)
        if (
            old is not None
            and old[0].cluster is entry.cluster
            and old[2] is eps
            and len(old[1]) == len(own)
            and all(a is b for a, b in zip(old[1], own, strict=True))
        ):
            resolved = old[3]
        else:
            resolved = resolve_endpoints(entry.backend, snapshot, slices)
    exempt = name in kept.own
    if old is not None and old[3] is resolved and old[4] is exempt:
        return (entry, own, eps, resolved, exempt, old[5], old[6])
    (dropped,), forbidden = drop_forbidden_endpoints((resolved,), reserved, options, kept.own)
    return (entry, own, eps, resolved, exempt, dropped, forbidden)


def _store(
    kept: ClusterStage, name: str, record: ClusterRecord | None, touched: set[tuple[str, str]]
) -> None:
    old = kept.records.pop(name, None)
    if old is not None:
        service = (old[0].cluster.namespace, old[0].cluster.service)
        kept.by_service[service].discard(name)
        if old[0].backend is not None:
            kept.backends[old[0].backend.service].pop(name, None)
            touched.add(old[0].backend.service)
    if record is None:
        if old is not None:
            del kept.names[bisect_left(kept.names, name)]
            del kept.final[name]
            kept.changed.add(name)
        kept.forbidden.pop(name, None)
        kept.dns.pop(name, None)
        kept.ca_bundles.put(name, None)
        return
    entry, cluster = record[0], record[5]
    if old is None:
        insort(kept.names, name)
    if old is None or old[5] is not cluster:
        kept.changed.add(name)
    kept.records[name] = record
    kept.final[name] = cluster
    kept.by_service.setdefault((entry.cluster.namespace, entry.cluster.service), set()).add(name)
    if entry.backend is not None:
        kept.backends.setdefault(entry.backend.service, {})[name] = entry.backend
        touched.add(entry.backend.service)
    _put_or_pop(kept.forbidden, name, record[6])
    _put_or_pop(kept.dns, name, record[3].dns_name)
    kept.ca_bundles.put(name, cluster_ca_names(cluster))


def _put_or_pop(d: dict[str, T], key: str, value: T | None) -> None:
    if value:
        d[key] = value
    else:
        d.pop(key, None)


def clusters_of(kept: ClusterStage) -> tuple[Cluster, ...]:
    """The served clusters, in name order: the same tuple while none changed."""
    if kept.changed or kept.clusters is None:
        kept.clusters = tuple(map(kept.final.__getitem__, kept.names))
    return kept.clusters


def forbidden_of(kept: ClusterStage) -> tuple[ForbiddenEndpoint, ...]:
    """The endpoints left out, by cluster name."""
    return tuple(chain.from_iterable(map(kept.forbidden.__getitem__, sorted(kept.forbidden))))


def dns_names_of(kept: ClusterStage) -> tuple[str, ...]:
    """`services.dns_names` of the served clusters (with the names refused)."""
    return tuple(sorted(set(kept.dns.values())))


def basis_of(kept: ClusterStage) -> dict[tuple[str, str], tuple[ServiceBackend, ...]]:
    """The Service backends by (namespace, Service), for `EndpointBasis`: a copy (a basis
    handed out is never changed), the same one while no Service's backends changed."""
    if kept.basis_copy is None:
        kept.basis_copy = dict(kept.basis)
    return kept.basis_copy


def positions_of(kept: ClusterStage, clusters: tuple[Cluster, ...]) -> dict[str, int]:
    """Each cluster's place in `clusters` (the graph's), the same dict for the same tuple."""
    if kept.positions is None or kept.positions[0] is not clusters:
        places = dict(zip(map(_NAME, clusters), range(len(clusters)), strict=True))
        kept.positions = (clusters, places)
    return kept.positions[1]

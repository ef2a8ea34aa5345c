"""Which objects wrote a piece of the graph: where a problem found after the dialects ran (a
refused endpoint, Envoy rejecting a resource) is reported, on the object a user reads.

Clusters are written by the routes and TCP proxies that send to them; TLS Secrets by the
virtual hosts and TCP proxies that terminate with them. Each writer is a `RouteSource`: the
object and the field (`spec.routes[2]`; `spec` for a whole virtual host or TCP proxy).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from itertools import count

from turnout.graph.memo import IdentityMemo
from turnout.graph.model import (
    Forward,
    Route,
    RouteSource,
    RoutingGraph,
    TCPProxy,
    VirtualHost,
)
from turnout.status.model import Finding

Writers = Mapping[str, tuple[RouteSource, ...]]


def cluster_writers(
    graph: RoutingGraph,
    memo: IdentityMemo[VirtualHost, Writers] | None = None,
    only: Container[str] | None = None,
) -> Writers:
    """Cluster name -> the routes (and TCP proxies, and hosts with an authorization server)
    that send to it or mirror to it. `memo`: each virtual host's writers by its identity;
    `only`: these clusters' writers only."""
    # Dicts as ordered sets: one object's thousands of routes to one Service stay linear.
    found: dict[str, dict[RouteSource, None]] = {}
    for lst in graph.listeners:
        for vh in lst.virtual_hosts:
            own = memo.get(vh) if memo is not None else None
            if own is None:
                own = vhost_writers(vh)
                if memo is not None:
                    memo.put(vh, own)
            for cluster, sources in own.items():
                if only is not None and cluster not in only:
                    continue
                known = found.get(cluster)
                if known is None:
                    found[cluster] = dict.fromkeys(sources)
                else:
                    known.update(dict.fromkeys(sources))
        for proxy in lst.tcp_proxies:
            for wc in proxy.clusters:
                if only is None or wc.cluster in only:
                    found.setdefault(wc.cluster, {})[RouteSource(proxy.owner, "spec")] = None
    return {name: tuple(sources) for name, sources in found.items()}


class WriterIndex:
    """`cluster_writers` kept per virtual host, patched from the hosts that are not the very
    same objects since the last call (found at C speed): a refused endpoint's writers are
    looked up and put in walk order, not walked for over every host."""

    def __init__(self) -> None:
        self.hosts: dict[int, tuple[VirtualHost, Writers]] = {}  # by the host's id
        self.users: dict[str, dict[int, None]] = {}  # cluster -> ids of the hosts naming it

    def writers(self, graph: RoutingGraph, only: Iterable[str]) -> Writers:
        """`cluster_writers(graph, only=only)`, for the clusters that have writers."""
        hosts = [lst.virtual_hosts for lst in graph.listeners]
        places = [dict(zip(map(id, vhosts), count())) for vhosts in hosts]
        if list(map(len, places)) != list(map(len, hosts)):
            return cluster_writers(graph, only=set(only))  # a host listed twice: walk
        self._sync(graph)
        tcp = [_tcp_writers(lst.tcp_proxies) for lst in graph.listeners]
        out: dict[str, tuple[RouteSource, ...]] = {}
        for cluster in only:
            # In the walk's order: per listener, its hosts in place order, then TCP proxies.
            entries: list[tuple[int, int, int, tuple[RouteSource, ...]]] = []
            users = self.users.get(cluster, {})
            for li, at in enumerate(places):
                entries += [(li, 0, at[k], self.hosts[k][1][cluster]) for k in users if k in at]
                entries += [(li, 1, j, (source,)) for j, source in tcp[li].get(cluster, ())]
            entries.sort(key=_walk_place)
            found: dict[RouteSource, None] = {}
            for entry in entries:
                found.update(dict.fromkeys(entry[3]))
            if found:
                out[cluster] = tuple(found)
        return out

    def _sync(self, graph: RoutingGraph) -> None:
        current: dict[int, VirtualHost] = {}
        for lst in graph.listeners:
            current.update(zip(map(id, lst.virtual_hosts), lst.virtual_hosts, strict=True))
        for key in self.hosts.keys() - current.keys():
            for cluster in self.hosts.pop(key)[1]:
                users = self.users[cluster]
                del users[key]
                if not users:
                    del self.users[cluster]
        for key in current.keys() - self.hosts.keys():
            own = vhost_writers(current[key])
            self.hosts[key] = (current[key], own)
            for cluster in own:
                self.users.setdefault(cluster, {})[key] = None


def _walk_place(entry: tuple[int, int, int, tuple[RouteSource, ...]]) -> tuple[int, int, int]:
    return entry[:3]


def _tcp_writers(proxies: Iterable[TCPProxy]) -> dict[str, list[tuple[int, RouteSource]]]:
    """Cluster -> (place, writer) of the TCP proxies of one listener sending to it."""
    out: dict[str, list[tuple[int, RouteSource]]] = {}
    for j, proxy in enumerate(proxies):
        for wc in proxy.clusters:
            out.setdefault(wc.cluster, []).append((j, RouteSource(proxy.owner, "spec")))
    return out


def vhost_writers(vh: VirtualHost) -> Writers:
    """`cluster_writers` of one virtual host, in the order it names them."""
    found: dict[str, dict[RouteSource, None]] = {}
    # An authorization server's cluster is used by the virtual host, not by a route.
    if vh.policies.authorization is not None:
        found[vh.policies.authorization.cluster] = {RouteSource(vh.owner, "spec"): None}
    # A route object listed twice (a Gateway API route on many hosts) is walked once.
    walked: set[int] = set()
    for route in vh.routes:
        if id(route) in walked:
            continue
        walked.add(id(route))
        for cluster in route_clusters(route):
            found.setdefault(cluster, {})[route.source] = None
    return {name: tuple(sources) for name, sources in found.items()}


def route_clusters(route: Route) -> dict[str, None]:
    """The clusters a route sends or mirrors to, each once, in the order it names them."""
    names: dict[str, None] = {}
    if isinstance(route.action, Forward):
        names.update(dict.fromkeys(wc.cluster for wc in route.action.clusters))
    names.update(dict.fromkeys(mirror.cluster for mirror in route.policies.mirrors))
    return names


def secret_writers(graph: RoutingGraph) -> Mapping[str, tuple[RouteSource, ...]]:
    """TLS Secret name (SDS) -> the owners of the hosts and TCP proxies that serve it."""
    found: dict[str, dict[RouteSource, None]] = {}
    for lst in graph.listeners:
        holders = [(vh.tls, vh.owner) for vh in lst.virtual_hosts]
        holders += [(proxy.tls, proxy.owner) for proxy in lst.tcp_proxies]
        for tls, owner in holders:
            if tls is None:
                continue
            for name in (tls.secret, tls.fallback_secret):
                if name is None:
                    continue
                found.setdefault(name, {})[RouteSource(owner, "spec")] = None
    return {name: tuple(sources) for name, sources in found.items()}


# The reason of a finding made from Envoy refusing a resource.
REJECTED_BY_ENVOY = "RejectedByEnvoy"


def rejection_findings(
    graph: RoutingGraph, rejections: Iterable[tuple[str, str, str]]
) -> tuple[Finding, ...]:
    """Findings for resources Envoy refused, `(type, name, message)` with the xDS type's short
    name ("cluster", "secret", ...), on the objects that wrote each: a cluster's routes, a
    Secret's hosts. Listeners and route configurations are shared by many objects; the dialect
    that declared a listener reports its own (Gateway `Programmed`), readiness the rest."""
    rejections = list(rejections)
    if not rejections:
        # The controller asks after every Envoy answer: no walk of the graph when none refused.
        return ()
    writers = {"cluster": cluster_writers(graph), "secret": secret_writers(graph)}
    found: dict[Finding, None] = {}
    for type_, name, message in rejections:
        for source in writers.get(type_, {}).get(name, ()):
            text = f"Envoy refused {type_} {name}: {message}"
            found[Finding(source.object, source.field, REJECTED_BY_ENVOY, text)] = None
    return tuple(found)

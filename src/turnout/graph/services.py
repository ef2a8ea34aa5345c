"""Core kinds every dialect consumes: Services, EndpointSlices and Endpoints become clusters.

`BackendResolver` is created per compile. Dialects ask it for a Service port; it answers with a
cluster (creating the record once) or with the reason the reference cannot be resolved. The
graph serves the clusters its routes name (`BackendResolver.entry`, patched per name by
`graph.served.served_clusters`): those asked for during this compile, and those a piece reused
from the compile before names, from the `ClusterBook` the compile memo carries (a record is a
function of its name and its Service object).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from turnout.graph.memo import IdentityCache
from turnout.graph.model import Cluster, Endpoint, UpstreamProtocol, UpstreamSettings
from turnout.objects import KubeObject
from turnout.store import Snapshot

if TYPE_CHECKING:
    from turnout.compile_inputs import CompileOptions, ListenerDecl

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    port: int
    target_port: int | str | None
    protocol: str  # TCP | UDP | SCTP
    app_protocol: str | None


@dataclass(frozen=True, slots=True)
class Unresolved:
    """Why a backend reference could not be turned into a cluster."""

    reason: str  # a short CamelCase reason, e.g. ServiceNotFound, ServicePortNotFound
    message: str


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _port(value: Any) -> int | None:
    """A TCP port, or None: core objects are read leniently, and a value Envoy would reject
    must never reach the graph (one bad EndpointSlice must not break every listener)."""
    port = _int(value)
    return port if port is not None and 1 <= port <= 65535 else None


def _seq(value: Any) -> tuple[Any, ...]:
    """A list field of a core object, or () when it is absent or not a list."""
    return tuple(value) if isinstance(value, tuple | list) else ()


def _ip(value: Any) -> str | None:
    """An IP address in canonical form, or None (EDS endpoints must be IP addresses)."""
    if not isinstance(value, str):
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def service_ports(service: KubeObject) -> list[ServicePort]:
    spec = service.spec if isinstance(service.spec, Mapping) else {}
    # Kept by the raw list's identity: the files source builds equal lists once, so Service
    # after Service holds the very same `ports` (and each is read for every route naming it).
    return list(_PORTS(spec.get("ports")))


def _service_ports(raw: Any) -> list[ServicePort]:
    ports: list[ServicePort] = []
    for p in _seq(raw):
        if not isinstance(p, Mapping):
            continue
        port = _port(p.get("port"))
        if port is None:
            continue
        target = p.get("targetPort")
        target_port: int | str | None = (
            target if isinstance(target, str) and target else _port(target)
        )
        ports.append(
            ServicePort(
                name=str(p.get("name") or ""),
                port=port,
                target_port=target_port,
                protocol=str(p.get("protocol") or "TCP"),
                app_protocol=str(p["appProtocol"]) if p.get("appProtocol") else None,
            )
        )
    return ports


_PORTS: IdentityCache[Any, tuple[ServicePort, ...]] = IdentityCache(
    lambda raw: tuple(_service_ports(raw))
)


def find_service_port(service: KubeObject, port: int | str) -> ServicePort | None:
    for sp in service_ports(service):
        if (isinstance(port, int) and sp.port == port) or (
            isinstance(port, str) and sp.name == port
        ):
            return sp
    return None


def _ready(endpoint: Mapping[str, Any]) -> bool:
    conditions = endpoint.get("conditions")
    if not isinstance(conditions, Mapping):
        return True
    # An unset `ready` means ready (EndpointSlice API). A terminating endpoint is not ready for
    # new traffic, even when `serving` is still true.
    if conditions.get("terminating") is True:
        return False
    return conditions.get("ready") is not False


def index_endpoint_slices(
    snapshot: Snapshot, services: Collection[tuple[str, str]] | None = None
) -> dict[tuple[str, str], list[KubeObject]]:
    """EndpointSlices by (namespace, service name), in namespace/name order, built once per
    compile; with `services`, only theirs."""
    index: dict[tuple[str, str], list[KubeObject]] = {}
    for eps in snapshot.kind("discovery.k8s.io", "EndpointSlice"):
        service = eps.labels.get(SERVICE_NAME_LABEL)
        if isinstance(service, str) and service:
            key = (eps.namespace, service)
            if services is None or key in services:
                index.setdefault(key, []).append(eps)
    return index


class SliceIndex:
    """`index_endpoint_slices` of the compile before and which key lists each slice, for
    `slice_index`."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, str], list[KubeObject]] | None = None
        self.where: dict[tuple[str, str], tuple[str, str]] = {}


def slice_index(
    snapshot: Snapshot, changed: Iterable[tuple[str, str]] | None, kept: SliceIndex
) -> dict[tuple[str, str], list[KubeObject]]:
    """`index_endpoint_slices(snapshot)`, updated from the compile before's for the
    EndpointSlices (namespace, name) `changed` since; None: built anew. A new dict, and new
    lists where something changed: the compile before's result may still be read."""
    if changed is None or kept.index is None:
        kept.index = index_endpoint_slices(snapshot)
        kept.where = {(e.namespace, e.name): k for k, lst in kept.index.items() for e in lst}
        return kept.index
    changed = list(changed)
    if not changed:
        return kept.index  # never changed in place: patches go to a copy
    index, where = dict(kept.index), dict(kept.where)
    touched: set[tuple[str, str]] = set()
    for namespace, name in changed:
        old = where.pop((namespace, name), None)
        if old is not None:
            index[old] = [e for e in index[old] if e.name != name]
            touched.add(old)
        eps = snapshot.get("discovery.k8s.io", "EndpointSlice", namespace, name)
        service = eps.labels.get(SERVICE_NAME_LABEL) if eps is not None else None
        if eps is not None and isinstance(service, str) and service:
            key = where[(namespace, name)] = (namespace, service)
            index[key] = [*index.get(key, ()), eps]
            touched.add(key)
    for key in touched:
        if index[key]:
            index[key].sort(key=lambda e: e.name)
        else:
            del index[key]
    kept.index, kept.where = index, where
    return index


def service_endpoints(
    snapshot: Snapshot,
    service: KubeObject,
    sp: ServicePort,
    slices_index: Mapping[tuple[str, str], Sequence[KubeObject]] | None = None,
    health: ServicePort | None = None,
) -> tuple[Endpoint, ...]:
    """Ready endpoints of a Service port, from EndpointSlices, else from Endpoints.

    With `health` (another port of the Service), each endpoint's `health_port` is that port's
    target in the same slice (or subset). A slice that does not list it borrows the one another
    slice gives (Contour uses a single health port for the whole cluster); when no slice lists
    it, health checks stay on the traffic port, as in Contour."""
    return endpoints_of(snapshot, service.namespace, service.name, sp, slices_index, health)


def endpoints_of(
    snapshot: Snapshot,
    namespace: str,
    name: str,
    sp: ServicePort,
    slices_index: Mapping[tuple[str, str], Sequence[KubeObject]] | None = None,
    health: ServicePort | None = None,
) -> tuple[Endpoint, ...]:
    """`service_endpoints` of the Service `namespace`/`name`."""
    if slices_index is None:
        slices_index = index_endpoint_slices(snapshot)
    found: list[tuple[str, int, int | None]] = []
    slices = slices_index.get((namespace, name), [])
    if slices:
        # By name: where two slices list one address and port, the first one's health port wins.
        for eps in sorted(slices, key=lambda e: e.name):
            target = _slice_port(eps, sp)
            if target is None:
                continue
            health_target = _slice_port(eps, health) if health is not None else None
            for ep in _seq(eps.raw.get("endpoints")):
                if not isinstance(ep, Mapping) or not _ready(ep):
                    continue
                for addr in _seq(ep.get("addresses")):
                    ip = _ip(addr)
                    if ip is not None:
                        found.append((ip, target, health_target))
        return _with_health_ports(found)
    endpoints = snapshot.get("", "Endpoints", namespace, name)
    if endpoints is not None:
        for subset in _seq(endpoints.raw.get("subsets")):
            if not isinstance(subset, Mapping):
                continue
            target = _subset_port(subset, sp)
            if target is None:
                continue
            health_target = _subset_port(subset, health) if health is not None else None
            for addr in _seq(subset.get("addresses")):
                ip = _ip(addr.get("ip")) if isinstance(addr, Mapping) else None
                if ip is not None:
                    found.append((ip, target, health_target))
    return _with_health_ports(found)


def _with_health_ports(found: list[tuple[str, int, int | None]]) -> tuple[Endpoint, ...]:
    """Endpoints, sorted and unique by address and port (the first health target listed for
    one wins: one address and port is one upstream host); a missing health target borrows the
    smallest one found."""
    known = sorted({h for _, _, h in found if h is not None})
    fallback = known[0] if known else 0
    out: dict[tuple[str, int], Endpoint] = {}
    for ip, port, h in found:
        out.setdefault((ip, port), Endpoint(ip, port, fallback if h is None else h))
    return tuple(sorted(out.values()))


def _slice_port(eps: KubeObject, sp: ServicePort) -> int | None:
    ports = [p for p in _seq(eps.raw.get("ports")) if isinstance(p, Mapping)]
    for p in ports:
        if str(p.get("name") or "") == sp.name:
            return _port(p.get("port"))
    # A slice written by hand (standalone mode) may name no ports: then the target port is the
    # Service's numeric targetPort, or its port.
    if not ports:
        return sp.target_port if isinstance(sp.target_port, int) else sp.port
    return None


def _subset_port(subset: Mapping[str, Any], sp: ServicePort) -> int | None:
    ports = [p for p in _seq(subset.get("ports")) if isinstance(p, Mapping)]
    for p in ports:
        if str(p.get("name") or "") == sp.name:
            return _port(p.get("port"))
    if len(ports) == 1 and not sp.name:
        return _port(ports[0].get("port"))
    return None


def cluster_name(namespace: str, service: str, port: int, settings: UpstreamSettings) -> str:
    """`ns/service/port/<10 hex>`: readable, and distinct for distinct upstream settings."""
    digest = hashlib.sha1(repr(settings).encode()).hexdigest()[:10]
    return f"{namespace}/{service}/{port}/{digest}"


# Why an ExternalName Service is refused (`Unresolved.reason`); each dialect words it its own way.
EXTERNAL_NAME_NOT_ENABLED = "ExternalNameNotEnabled"
EXTERNAL_NAME_LOCALHOST = "ExternalNameLocalhost"
EXTERNAL_NAME_INVALID = "ExternalNameInvalid"

# Contour's blocklist (`internal/dag/dag.go`), compared without case or a trailing dot as DNS
# does. It is no guarantee: an IP literal or any other name can still lead to loopback, which is
# why ExternalName Services stay off unless the installation turns them on.
_LOCALHOST_NAMES = frozenset({"localhost", "localhost.localdomain", "local.projectcontour.io"})


_DNS_NAME = re.compile(r"[a-z0-9_]([-a-z0-9_]*[a-z0-9])?(\.[a-z0-9_]([-a-z0-9_]*[a-z0-9])?)*")


def _dns_name(name: str) -> bool:
    """A DNS name (RFC 1123 labels, as Kubernetes validates `externalName`) or an IP address."""
    if _ip(name) is not None:
        return True
    return len(name) <= 253 and _DNS_NAME.fullmatch(name) is not None


def is_external_name(service: KubeObject) -> bool:
    spec = service.spec if isinstance(service.spec, Mapping) else {}
    return spec.get("type") == "ExternalName"


def external_name(service: KubeObject) -> str | None:
    """The DNS name of an ExternalName Service (lower case, no trailing dot); None otherwise."""
    if not is_external_name(service):
        return None
    name = service.spec.get("externalName") if isinstance(service.spec, Mapping) else None
    if not isinstance(name, str) or not name.strip(". "):
        return None
    return name.strip().rstrip(".").lower()


def external_name_phrase(refused: Unresolved) -> str:
    """How dialects other than HTTPProxy word a refused ExternalName Service, after its name."""
    if refused.reason == EXTERNAL_NAME_LOCALHOST:
        return "is an ExternalName service that points to localhost, which is not allowed"
    if refused.reason == EXTERNAL_NAME_INVALID:
        return "is an ExternalName service without a valid externalName"
    return (
        "is an ExternalName service, which turnout routes to only with "
        "--enable-external-name-service"
    )


@dataclass(frozen=True, slots=True)
class ServiceBackend:
    """Where an EDS cluster's endpoints come from: a Service port (and the port whose target
    on each endpoint takes the health checks). `cluster` is the cluster without endpoints."""

    cluster: Cluster
    port: ServicePort
    health: ServicePort | None

    @property
    def service(self) -> tuple[str, str]:
        return (self.cluster.namespace, self.cluster.service)


def resolve_endpoints(
    backend: ServiceBackend,
    snapshot: Snapshot,
    slices_index: Mapping[tuple[str, str], Sequence[KubeObject]] | None = None,
) -> Cluster:
    """The endpoint stage, for one cluster: its ready endpoints from the EndpointSlices (or
    Endpoints) of `snapshot`. The full compile and the endpoints fast path both run it."""
    c = backend.cluster
    found = endpoints_of(
        snapshot, c.namespace, c.service, backend.port, slices_index, backend.health
    )
    return replace(c, endpoints=found) if found else c


class BackendResolver:
    """Resolves Service references into clusters for one compile; collects the clusters used.

    It owns the ExternalName decision for every dialect: refused unless
    `enable_external_name_service`, and never to a name Contour knows as localhost; an accepted
    one becomes a DNS cluster (`Cluster.dns_name`) on the Service port.

    The clusters a dialect gets carry no endpoints: a Service's endpoints change all the time,
    and routing must not depend on them unnoticed. `clusters()` resolves them after the
    dialects ran (`resolve_endpoints`). A dialect whose routing does depend on whether a Service
    has endpoints asks `endpoints`, which answers and records the Service
    (`endpoint_dependent`): an EndpointSlice change of that Service recompiles everything.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        enable_external_name_service: bool = False,
        book: ClusterBook | None = None,
        slices: dict[tuple[str, str], list[KubeObject]] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._book = ClusterBook() if book is None else book
        self._clusters: dict[str, Cluster] = {}
        self._backends: dict[str, ServiceBackend] = {}
        self._services: dict[str, KubeObject | None] = {}
        self._resolved: dict[str, Cluster] = {}
        self._dependent: set[tuple[str, str]] = set()
        self._slices = index_endpoint_slices(snapshot) if slices is None else slices
        self._external_names = enable_external_name_service
        self._own: set[str] = set()
        self._ports: dict[tuple[str, str, int | str], tuple[KubeObject, ServicePort] | Unresolved]
        self._ports = {}
        self._scope: ResolverUse | None = None

    def record(self, use: ResolverUse | None) -> None:
        """Notes what the following calls decide that no cluster name says (the Services whose
        endpoints were read, turnout's own clusters) in `use` as well; None: stop."""
        self._scope = use

    def replay(self, use: ResolverUse) -> None:
        """What a reused piece of the compile before decided (`record`), as if asked again."""
        self._dependent |= use.dependent
        self._own |= use.own

    def refusal(self, service: KubeObject) -> Unresolved | None:
        """Why `service` cannot be routed to as such (today: an ExternalName Service that is not
        allowed), or None. Messages are Contour's; dialects may word their own from `reason`."""
        if not is_external_name(service):
            return None
        ref = f"{service.namespace}/{service.name}"
        name = external_name(service)
        if not self._external_names:
            return Unresolved(
                EXTERNAL_NAME_NOT_ENABLED,
                f"{ref} is an ExternalName service, these are not currently enabled. "
                "See the config.enableExternalNameService config file setting",
            )
        if name is None:
            return Unresolved(
                EXTERNAL_NAME_INVALID, f"{ref} is an ExternalName service without an externalName"
            )
        if not _dns_name(name):
            # The API server would have refused it; Envoy would refuse the whole cluster update.
            return Unresolved(
                EXTERNAL_NAME_INVALID,
                f'{ref} is an ExternalName service whose externalName "{name}" is not a DNS name',
            )
        if name in _LOCALHOST_NAMES:
            return Unresolved(
                EXTERNAL_NAME_LOCALHOST,
                f"{ref} is an ExternalName service that points to localhost, this is not allowed",
            )
        return None

    def service_port(
        self, namespace: str, name: str, port: int | str
    ) -> tuple[KubeObject, ServicePort] | Unresolved:
        """The Service and its port, for dialects that choose upstream settings from them (the
        Gateway API reads `appProtocol` first); the reasons are those of `service`."""
        # Thousands of routes of one object name the same Service port: its ports are read once.
        key = (namespace, name, port)
        found = self._ports.get(key)
        if found is None:
            found = self._ports[key] = self._service_port(namespace, name, port)
        return found

    def _service_port(
        self, namespace: str, name: str, port: int | str
    ) -> tuple[KubeObject, ServicePort] | Unresolved:
        svc = self._snapshot.get("", "Service", namespace, name)
        if svc is None:
            return Unresolved("ServiceNotFound", f'service "{namespace}/{name}" not found')
        sp = find_service_port(svc, port)
        if sp is None:
            return Unresolved(
                "ServicePortNotFound", f'service "{namespace}/{name}": port "{port}" not found'
            )
        return svc, sp

    def service(
        self,
        namespace: str,
        name: str,
        port: int | str,
        protocol: UpstreamProtocol = UpstreamProtocol.HTTP,
        settings: UpstreamSettings | None = None,
    ) -> Cluster | Unresolved:
        """The cluster for a Service port. `settings` (every `UpstreamSettings` field) defaults to
        plain settings with `protocol`; when given, its protocol wins."""
        settings = settings or UpstreamSettings(protocol=protocol)
        found = self.service_port(namespace, name, port)
        if isinstance(found, Unresolved):
            return found
        svc, sp = found
        refused = self.refusal(svc)
        if refused is not None:
            return refused
        health: ServicePort | None = None
        wanted = settings.health_port
        if wanted is not None and wanted != sp.port:
            health = find_service_port(svc, wanted)
            if health is None:
                return Unresolved(
                    "ServicePortNotFound",
                    f'service "{namespace}/{name}": health port "{wanted}" not found',
                )
        cname = cluster_name(namespace, name, sp.port, settings)
        cluster = self._clusters.get(cname)
        entry = self._book.entries.get(cname) if cluster is None else None
        if entry is not None and entry.service is svc:
            # The record is a function of its name and the Service: the very same object.
            cluster = self._clusters[cname] = entry.cluster
            self._services[cname] = svc
            if entry.backend is not None:
                self._backends[cname] = entry.backend
        if cluster is None:
            dns_name = external_name(svc)
            cluster = _cluster(
                cname,
                namespace,
                name,
                sp.port,
                settings,
                endpoints=(),
                dns_name=dns_name,
                health_port=None if health is None else health.port,
            )
            self._clusters[cname] = cluster
            self._services[cname] = svc
            # An ExternalName Service has no endpoints: Envoy resolves the name and connects
            # to the Service port, as Contour does.
            if dns_name is None:
                self._backends[cname] = ServiceBackend(cluster, sp, health)
        return cluster

    def endpoints(self, cluster: Cluster) -> tuple[Endpoint, ...]:
        """The ready endpoints of `cluster`, for a dialect whose routing depends on them
        (RouteGroup's answer for a Service without endpoints); records the Service as
        endpoint-dependent. Endpoints turnout refuses are still counted here: they are
        dropped after the dialects, and the cluster then answers 503."""
        backend = self._backends.get(cluster.name)
        if backend is None and cluster.name not in self._clusters:
            # A cluster a reused piece kept from the compile before: its book entry, while valid.
            entry = self.entry(cluster.name)
            if entry is not None and entry.backend is not None:
                self._clusters[cluster.name] = entry.cluster
                self._services[cluster.name] = entry.service
                backend = self._backends[cluster.name] = entry.backend
        if backend is None:
            return cluster.endpoints
        self._dependent.add(backend.service)
        if self._scope is not None:
            self._scope.dependent.add(backend.service)
        return self._resolve(cluster.name).endpoints

    def endpoint_dependent(self) -> frozenset[tuple[str, str]]:
        """The (namespace, Service) pairs whose endpoints some routing decision read."""
        return frozenset(self._dependent)

    def endpoint_slices(self) -> Mapping[tuple[str, str], Sequence[KubeObject]]:
        """The EndpointSlices of the snapshot by (namespace, Service) (`index_endpoint_slices`)."""
        return self._slices

    def _resolve(self, name: str) -> Cluster:
        found = self._resolved.get(name)
        if found is None:
            found = resolve_endpoints(self._backends[name], self._snapshot, self._slices)
            self._resolved[name] = found
        return found

    def static(
        self,
        namespace: str,
        name: str,
        port: int,
        *,
        endpoints: tuple[Endpoint, ...] = (),
        dns_name: str | None = None,
        settings: UpstreamSettings | None = None,
        own: bool = False,
        source_address: str | None = None,
    ) -> Cluster:
        """A cluster of fixed IP endpoints, or of one DNS name resolved by Envoy (RouteGroup `lb`
        and `network` backends). `name` stands where a Service name would; the endpoints are part
        of the cluster's identity, so two backends of one name never share a cluster.

        `own`: turnout's own upstream (RouteGroup `loopback`: Envoy's HTTP listener), exempt
        from `drop_forbidden_endpoints`; never for an address a tenant wrote. `source_address`:
        the local address Envoy connects from."""
        settings = settings or UpstreamSettings()
        endpoints = tuple(sorted(set(endpoints)))
        identity: tuple[object, ...] = (settings, endpoints, dns_name)
        if source_address is not None:
            identity = (*identity, source_address)
        digest = hashlib.sha1(repr(identity).encode()).hexdigest()[:10]
        cname = f"{namespace}/{name}/{port}/{digest}"
        cluster = self._clusters.get(cname)
        entry = self._book.entries.get(cname) if cluster is None else None
        if entry is not None and entry.service is None:
            cluster = self._clusters[cname] = entry.cluster
            self._services[cname] = None
        if cluster is None:
            cluster = _cluster(
                cname, namespace, name, port, settings, endpoints=endpoints, dns_name=dns_name
            )
            if source_address is not None:
                cluster = replace(cluster, source_address=source_address)
            self._clusters[cname] = cluster
            self._services[cname] = None
        if own:
            self._own.add(cname)
            if self._scope is not None:
                self._scope.own.add(cname)
        return cluster

    def clusters(self) -> tuple[Cluster, ...]:
        """Every cluster, with the endpoints of the Service ones resolved: the endpoint stage,
        run once the dialects are done."""
        return tuple(
            self._resolve(k) if k in self._backends else self._clusters[k]
            for k in sorted(self._clusters)
        )

    def used(self, names: Collection[str]) -> tuple[tuple[Cluster, ServiceBackend | None], ...]:
        """The clusters named `names` (in name order) with their Service backends, endpoints
        not resolved: those made during this compile, and those the compile before made for
        pieces reused whole (`ClusterBook`: valid while their Service is the same object).
        Keeps them in the book for the next compile."""
        out: list[tuple[Cluster, ServiceBackend | None]] = []
        kept: dict[str, BookEntry] = {}
        for name in sorted(names):
            entry = self.entry(name)
            if entry is not None:
                kept[name] = entry
                out.append((entry.cluster, entry.backend))
        self._book.entries = kept
        return tuple(out)

    def made(self) -> Collection[str]:
        """The names of the clusters asked for (or taken from the book) during this compile:
        with the Services the delta names, all whose `entry` may differ from the book's."""
        return self._clusters.keys()

    @property
    def book(self) -> ClusterBook:
        return self._book

    def entry(self, name: str) -> BookEntry | None:
        """The cluster `name` as this compile serves it (without endpoints): made during this
        compile, else the book's while its Service is the same (or an equal) object."""
        cluster = self._clusters.get(name)
        if cluster is not None:
            return BookEntry(cluster, self._backends.get(name), self._services[name])
        entry = self._book.entries.get(name)
        if entry is None or entry.service is None:
            return entry
        c = entry.cluster
        # Equal counts as the same: a store may hand over an equal object for an unchanged one
        # (`changed_objects`), and the record reads nothing but the Service.
        now = self._snapshot.get("", "Service", c.namespace, c.service)
        return entry if now is entry.service or now == entry.service else None

    def own_clusters(self) -> frozenset[str]:
        """The names of turnout's own clusters (see `static`)."""
        return frozenset(self._own)


@dataclass(frozen=True, slots=True)
class BookEntry:
    """A cluster as a resolver made it (without endpoints), its Service backend, and the
    Service object it was read from (None: a static cluster, a pure function of its name)."""

    cluster: Cluster
    backend: ServiceBackend | None
    service: KubeObject | None


class ClusterBook:
    """The clusters the compile before served, by name: what a piece reused whole (a dialect's
    output, a virtual host) names without asking the resolver again (`BackendResolver.used`)."""

    def __init__(self) -> None:
        self.entries: dict[str, BookEntry] = {}


@dataclass(slots=True)
class ResolverUse:
    """What one piece of a compile decided through the resolver that no cluster name records:
    the Services whose endpoints it read, turnout's own clusters it asked for."""

    dependent: set[tuple[str, str]] = field(default_factory=set)
    own: set[str] = field(default_factory=set)


def _cluster(
    name: str,
    namespace: str,
    service: str,
    port: int,
    settings: UpstreamSettings,
    *,
    endpoints: tuple[Endpoint, ...],
    dns_name: str | None,
    health_port: int | None = None,
) -> Cluster:
    """A cluster with the connection settings of `settings` (its `health_port` is the port the
    caller resolved, not the settings' own)."""
    return Cluster(
        name=name,
        namespace=namespace,
        service=service,
        port=port,
        protocol=settings.protocol,
        endpoints=endpoints,
        lb_strategy=settings.lb_strategy,
        health_check=settings.health_check,
        outlier_detection=settings.outlier_detection,
        validation=settings.validation,
        slow_start=settings.slow_start,
        connect_timeout_s=settings.connect_timeout_s,
        idle_connection_timeout_s=settings.idle_connection_timeout_s,
        tcp_health_check=settings.tcp_health_check,
        hash_balance_factor=settings.hash_balance_factor,
        health_port=health_port,
        dns_name=dns_name,
    )


def endpoint_reserved_ports(
    options: CompileOptions, listeners: Iterable[ListenerDecl] = ()
) -> dict[int, str]:
    """The ports on this host no backend may point at, with what each one is: turnout's and
    Envoy's own (`options.reserved_ports`), the shared HTTP and HTTPS listeners and every
    Gateway listener of this compile (a backend there re-enters the public listener from
    127.0.0.1)."""
    reserved = dict(options.reserved_ports)
    reserved.setdefault(options.http_port, "--http-port")
    reserved.setdefault(options.https_port, "--https-port")
    for decl in sorted(listeners, key=lambda d: (d.port, d.name)):
        reserved.setdefault(decl.port, f"listener {decl.name}")
    return reserved


def own_addresses(options: CompileOptions) -> frozenset[str]:
    """This host's addresses, canonical: the listeners' `address` and every interface's."""
    found = (_canonical(a) for a in (options.address, *options.local_addresses))
    return frozenset(a for a in found if a is not None)


def _canonical(address: str) -> str | None:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


@functools.lru_cache(maxsize=4096)
def _address_facts(address: str) -> tuple[str, bool, bool, bool] | None:
    """An address's canonical form and whether it is unspecified, link-local or loopback;
    None when it is no IP address. Kept: every compile asks again for every endpoint."""
    canonical = _canonical(address)
    if canonical is None:
        return None
    ip = ipaddress.ip_address(canonical)
    return canonical, ip.is_unspecified, ip.is_link_local, ip.is_loopback


def forbidden_endpoint(
    address: str,
    port: int,
    reserved: Mapping[int, str],
    own: str | Collection[str] | None,
) -> str | None:
    """Why no tenant's backend may be this IP address and port; None when it may.

    One Envoy serves every tenant, so a backend may not be Envoy's or turnout's own interfaces:
    a reserved port (`reserved`: turnout's admin and xDS ports, Envoy's admin port, where POST
    /quitquitquit stops Envoy, and every listener port, which would re-enter the public listener
    from this host and pass source-address policies meant for the host itself) on a loopback,
    unspecified or any of this host's own addresses (`own`: `own_addresses`); nor, whatever the
    port, a link-local address (cloud metadata services live at 169.254.169.254) or an
    unspecified one (0.0.0.0 and :: reach this host). Other loopback ports stay allowed:
    standalone turnout runs its backends there. DNS names: see `forbidden_dns_name`.
    """
    facts = _address_facts(address)
    if facts is None:
        return None
    canonical, unspecified, link_local, loopback = facts
    if unspecified:
        return "the unspecified address reaches this host, which is not allowed"
    if link_local:
        return "link-local addresses (cloud metadata services) are not allowed"
    what = reserved.get(port)
    if what is None:
        return None
    mine = {own} if isinstance(own, str) else set(own or ())
    if loopback or canonical in {_canonical(a) for a in mine}:
        return (
            f"port {port} on this host is turnout's or Envoy's own ({what}), which is not allowed"
        )
    return None


def forbidden_dns_name(
    name: str, port: int, reserved: Mapping[int, str], options: CompileOptions | None
) -> str | None:
    """Why no tenant's upstream may be this DNS name and port; None when it may.

    Envoy resolves the name, and any name can be made to resolve to this host: a reserved port
    is refused whatever the name resolves to now. Beyond that, the answer turnout found
    (`options.dns_answers`) must not be loopback, link-local, unspecified or one of this host's
    addresses, on any port, as Contour's localhost names are refused. A name without an answer
    yet is let through; see docs/policies.md for what remains (DNS rebinding between checks).
    `options` None: the port alone (a dialect checking early leaves the answer to the graph,
    which keeps tracking the name of a cluster it refuses). An IP address written where a name
    goes resolves to itself: it is held to the endpoint rule (`forbidden_endpoint`), like the
    same address in an EndpointSlice."""
    if _canonical(name) is not None:
        own = own_addresses(options) if options is not None else ()
        return forbidden_endpoint(name, port, reserved, own)
    what = reserved.get(port)
    if what is not None:
        return (
            f"port {port} is turnout's or Envoy's own on this host ({what}); a DNS name can "
            "resolve to this host, so no DNS-named backend may use that port"
        )
    if options is None:
        return None
    answer = options.dns_answer(name)
    own = own_addresses(options)
    for address in answer.addresses if answer is not None else ():
        canonical = _canonical(address)
        if canonical is None:
            continue
        ip = ipaddress.ip_address(canonical)
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or canonical in own:
            return (
                f'"{name}" resolves to {address}, which is this host, a link-local or an '
                "unspecified address; a DNS-named backend may not lead there"
            )
    return None


def endpoint_sources(
    snapshot: Snapshot,
    namespace: str,
    service: str,
    address: str,
    slices_index: Mapping[tuple[str, str], Sequence[KubeObject]] | None = None,
) -> list[str]:
    """The EndpointSlices (or the Endpoints) of a Service that list `address`, as "Kind name";
    `slices_index`: `index_endpoint_slices` of `snapshot`, when the caller has it."""
    slices: Iterable[KubeObject] = (
        snapshot.kind("discovery.k8s.io", "EndpointSlice")
        if slices_index is None
        else slices_index.get((namespace, service), ())
    )
    found = [
        f"EndpointSlice {namespace}/{eps.name}"
        for eps in slices
        if eps.namespace == namespace
        and eps.labels.get(SERVICE_NAME_LABEL) == service
        and any(
            _ip(a) == address
            for ep in _seq(eps.raw.get("endpoints"))
            if isinstance(ep, Mapping)
            for a in _seq(ep.get("addresses"))
        )
    ]
    if found:
        return sorted(found)
    endpoints = snapshot.get("", "Endpoints", namespace, service)
    if endpoints is not None:
        return [f"Endpoints {namespace}/{service}"]
    return []


@dataclass(frozen=True, slots=True)
class ForbiddenEndpoint:
    """An endpoint left out of a cluster, and why."""

    cluster: Cluster
    endpoint: Endpoint
    reason: str


def drop_forbidden_endpoints(
    clusters: tuple[Cluster, ...],
    reserved: Mapping[int, str],
    options: CompileOptions,
    exempt: frozenset[str] = frozenset(),
) -> tuple[tuple[Cluster, ...], tuple[ForbiddenEndpoint, ...]]:
    """The clusters without the endpoints `forbidden_endpoint` refuses, and what was dropped.

    It runs on the assembled graph, so it covers every dialect (EndpointSlices and Endpoints
    are tenant-written, and every dialect's Service backends come from them) and knows every
    listener port of the compile. A cluster left with no endpoint answers 503, as a Service
    without ready endpoints does; so does a DNS cluster whose name `forbidden_dns_name` refuses
    (its "endpoint" is the name and port). `exempt`: turnout's own clusters, by name."""
    own = own_addresses(options)
    kept: list[Cluster] = []
    dropped: list[ForbiddenEndpoint] = []
    for c in clusters:
        if c.name in exempt:
            kept.append(c)
            continue
        if c.dns_name is not None:
            reason = _dns_refusal(c, c.dns_name, reserved, options)
            if reason is not None:
                dropped.append(ForbiddenEndpoint(c, Endpoint(c.dns_name, c.port), reason))
                c = replace(c, dns_name=None, endpoints=())
            kept.append(c)
            continue
        good: list[Endpoint] = []
        for ep in c.endpoints:
            reason = forbidden_endpoint(ep.address, ep.port, reserved, own)
            if reason is None and ep.health_port:
                # Health checks are requests too, with a path the tenant chooses.
                reason = forbidden_endpoint(ep.address, ep.health_port, reserved, own)
            if reason is None:
                good.append(ep)
            else:
                dropped.append(ForbiddenEndpoint(c, ep, reason))
        if len(good) != len(c.endpoints):
            c = replace(c, endpoints=tuple(good))
        kept.append(c)
    return tuple(kept), tuple(dropped)


def _dns_refusal(
    c: Cluster, name: str, reserved: Mapping[int, str], options: CompileOptions
) -> str | None:
    reason = forbidden_dns_name(name, c.port, reserved, options)
    if reason is None and c.health_port:
        reason = forbidden_dns_name(name, c.health_port, reserved, options)
    return reason


def dns_names(clusters: Iterable[Cluster]) -> tuple[str, ...]:
    """The DNS names Envoy would resolve for `clusters`, sorted: what the controller resolves."""
    return tuple(sorted({c.dns_name for c in clusters if c.dns_name is not None}))

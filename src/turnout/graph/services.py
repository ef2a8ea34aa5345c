"""Core kinds every dialect consumes: Services, EndpointSlices and Endpoints become clusters.

`BackendResolver` is created per compile. Dialects ask it for a Service port; it answers with a
cluster (creating the record once) or with the reason the reference cannot be resolved.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.graph.model import Cluster, Endpoint, UpstreamProtocol, UpstreamSettings
from turnout.objects import KubeObject
from turnout.store import Snapshot

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
    ports: list[ServicePort] = []
    for p in _seq(spec.get("ports")):
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


def index_endpoint_slices(snapshot: Snapshot) -> dict[tuple[str, str], list[KubeObject]]:
    """EndpointSlices by (namespace, service name), built once per compile."""
    index: dict[tuple[str, str], list[KubeObject]] = {}
    for eps in snapshot.kind("discovery.k8s.io", "EndpointSlice"):
        service = eps.labels.get(SERVICE_NAME_LABEL)
        if isinstance(service, str) and service:
            index.setdefault((eps.namespace, service), []).append(eps)
    return index


def service_endpoints(
    snapshot: Snapshot,
    service: KubeObject,
    sp: ServicePort,
    slices_index: Mapping[tuple[str, str], list[KubeObject]] | None = None,
) -> tuple[Endpoint, ...]:
    """Ready endpoints of a Service port, from EndpointSlices, else from Endpoints."""
    if slices_index is None:
        slices_index = index_endpoint_slices(snapshot)
    found: set[Endpoint] = set()
    slices = slices_index.get((service.namespace, service.name), [])
    if slices:
        for eps in slices:
            target = _slice_port(eps, sp)
            if target is None:
                continue
            for ep in _seq(eps.raw.get("endpoints")):
                if not isinstance(ep, Mapping) or not _ready(ep):
                    continue
                for addr in _seq(ep.get("addresses")):
                    ip = _ip(addr)
                    if ip is not None:
                        found.add(Endpoint(ip, target))
        return tuple(sorted(found))
    endpoints = snapshot.get("", "Endpoints", service.namespace, service.name)
    if endpoints is not None:
        for subset in _seq(endpoints.raw.get("subsets")):
            if not isinstance(subset, Mapping):
                continue
            target = _subset_port(subset, sp)
            if target is None:
                continue
            for addr in _seq(subset.get("addresses")):
                ip = _ip(addr.get("ip")) if isinstance(addr, Mapping) else None
                if ip is not None:
                    found.add(Endpoint(ip, target))
    return tuple(sorted(found))


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


class BackendResolver:
    """Resolves Service references into clusters for one compile; collects the clusters used."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._clusters: dict[str, Cluster] = {}
        self._slices = index_endpoint_slices(snapshot)

    def service(
        self,
        namespace: str,
        name: str,
        port: int | str,
        protocol: UpstreamProtocol = UpstreamProtocol.HTTP,
        settings: UpstreamSettings | None = None,
    ) -> Cluster | Unresolved:
        """The cluster for a Service port. `settings` (LB strategy, health check) defaults to
        plain settings with `protocol`; when given, its protocol wins."""
        settings = settings or UpstreamSettings(protocol=protocol)
        svc = self._snapshot.get("", "Service", namespace, name)
        if svc is None:
            return Unresolved("ServiceNotFound", f'service "{namespace}/{name}" not found')
        sp = find_service_port(svc, port)
        if sp is None:
            return Unresolved(
                "ServicePortNotFound", f'service "{namespace}/{name}": port "{port}" not found'
            )
        cname = cluster_name(namespace, name, sp.port, settings)
        cluster = self._clusters.get(cname)
        if cluster is None:
            cluster = Cluster(
                name=cname,
                namespace=namespace,
                service=name,
                port=sp.port,
                protocol=settings.protocol,
                lb_strategy=settings.lb_strategy,
                health_check=settings.health_check,
                endpoints=service_endpoints(self._snapshot, svc, sp, self._slices),
            )
            self._clusters[cname] = cluster
        return cluster

    def clusters(self) -> tuple[Cluster, ...]:
        return tuple(self._clusters[k] for k in sorted(self._clusters))

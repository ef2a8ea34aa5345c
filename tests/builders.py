"""Builders for the Kubernetes objects and snapshots the tests compile.

Each builder writes the object exactly as the API server would hand it over (apiVersion, kind,
metadata, then the body), so that a test states only what it is about. Dialect test modules
keep thin wrappers with their own defaults (namespace, apiVersion) on top of these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from turnout.objects import KubeObject, Origin, freeze, thaw
from turnout.store import Snapshot

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ENDPOINT_SLICE_API = "discovery.k8s.io/v1"


def kube_object(
    api_version: str,
    kind: str,
    name: str,
    namespace: str = "default",
    *,
    spec: Any = None,
    created: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    origin: Origin | None = None,
    **body: Any,
) -> KubeObject:
    """An object from its parts: `spec` when given, and any other top-level field in `body`
    (`data`, `ports`, ...). `created` is the creationTimestamp; empty means none."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if created:
        meta["creationTimestamp"] = created
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    raw: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}
    if spec is not None:
        raw["spec"] = spec
    if origin is None:
        return KubeObject(api_version, kind, namespace, name, freeze(raw))
    return KubeObject(api_version, kind, namespace, name, freeze(raw), origin)


def from_dict(raw: Mapping[str, Any], origin: Origin | None = None) -> KubeObject:
    """An object from a whole manifest (apiVersion, kind and metadata read from it)."""
    meta = raw.get("metadata") or {}
    args = (raw["apiVersion"], raw["kind"], meta.get("namespace", ""), meta["name"], freeze(raw))
    return KubeObject(*args) if origin is None else KubeObject(*args, origin)


def service(
    name: str,
    namespace: str = "default",
    port: int = 80,
    *,
    port_name: str | None = None,
    app_protocol: str | None = None,
    **port_fields: Any,
) -> KubeObject:
    """A Service with one port (`port_fields` are further fields of that port)."""
    entry: dict[str, Any] = {"port": port}
    if port_name is not None:
        entry["name"] = port_name
    if app_protocol is not None:
        entry["appProtocol"] = app_protocol
    entry.update(port_fields)
    return kube_object("v1", "Service", name, namespace, spec={"ports": [entry]})


def endpoint_slice(
    service_name: str,
    addresses: Sequence[str],
    namespace: str = "default",
    *,
    name: str | None = None,
    ports: Sequence[tuple[str | None, int]] = ((None, 80),),
) -> KubeObject:
    """An IPv4 EndpointSlice of `service_name` with one endpoint holding `addresses`; `ports` are
    (name, port) pairs, a None name leaving the port unnamed."""
    port_list = [{"port": p} if n is None else {"name": n, "port": p} for n, p in ports]
    return kube_object(
        ENDPOINT_SLICE_API,
        "EndpointSlice",
        name or f"{service_name}-1",
        namespace,
        labels={SERVICE_NAME_LABEL: service_name},
        addressType="IPv4",
        ports=port_list,
        endpoints=[{"addresses": list(addresses)}],
    )


def secret(
    name: str,
    namespace: str = "default",
    data: Mapping[str, str] | None = None,
    *,
    secret_type: str = "Opaque",
) -> KubeObject:
    """A Secret whose `data` values are already base64."""
    return kube_object("v1", "Secret", name, namespace, type=secret_type, data=dict(data or {}))


def namespace(name: str, labels: Mapping[str, str] | None = None) -> KubeObject:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    raw = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    return KubeObject("v1", "Namespace", "", name, freeze(raw))


def snapshot(*objects: KubeObject | Iterable[KubeObject]) -> Snapshot:
    """A snapshot of the objects given, single or in lists."""
    flat: list[KubeObject] = []
    for item in objects:
        flat.extend([item] if isinstance(item, KubeObject) else item)
    return Snapshot.of(flat)


def to_yaml(obj: KubeObject) -> str:
    """The object as one YAML document, for tests that feed manifests as text."""
    return str(yaml.safe_dump(thaw(obj.raw), sort_keys=False))

"""An object as the API server sends it -> the `KubeObject` the store keeps.

What the compile does not read and what changes without the object's meaning changing is dropped
before the store, so that turnout's own status write (which changes `status`,
`metadata.resourceVersion` and `metadata.managedFields`) does not look like a change and compile
again: the controller skips a snapshot whose content did not change.

Secrets and ConfigMaps hold far more than routing needs (service-account tokens, Helm releases of
megabytes, registry credentials). Only the keys a routing object can use are kept, and only for
the Secret types the compile accepts them from (`graph/secret_data.py`, `graph/ca_bundles.py`):
`tls.crt`, `tls.key`, `ca.crt`, `crl.pem` of `kubernetes.io/tls`, `Opaque` or untyped Secrets,
and `ca.crt` of ConfigMaps. Everything else (other keys, the data of other Secret types, and the
`kubectl.kubernetes.io/last-applied-configuration` annotation, which repeats the data in clear)
is dropped, so the object still exists for the compile to name in a status ("has no tls.crt"),
memory stays bounded by metadata, and no credential turnout does not need sits in its memory, in
`/status`, or in a heap dump.

One status is kept: `status.loadBalancer` of the Envoy Service (`--envoy-service`), whose
addresses Ingress, RouteGroup and Gateway statuses name. Only that Service's, so a load balancer
changing elsewhere compiles nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.objects import DEFAULT_NAMESPACE, KubeObject, ObjectRef, Origin, freeze
from turnout.sources.kubernetes.kinds import ApiResource

SECRET_KEYS = frozenset({"tls.crt", "tls.key", "ca.crt", "crl.pem"})
SECRET_TYPES = frozenset({"", "Opaque", "kubernetes.io/tls"})
CONFIG_MAP_KEYS = frozenset({"ca.crt"})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Metadata that changes when nothing the compile reads changed (a status write bumps them).
_VOLATILE_METADATA = ("managedFields", "resourceVersion")


def origin_of(kind: str, namespace: str, name: str) -> Origin:
    return Origin(f"k8s://{kind}/{namespace}/{name}")


def _metadata(raw: Mapping[str, Any], sensitive: bool) -> dict[str, Any]:
    meta = raw.get("metadata")
    out = (
        {k: v for k, v in meta.items() if k not in _VOLATILE_METADATA}
        if isinstance(meta, Mapping)
        else {}
    )
    annotations = out.get("annotations")
    if sensitive and isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        out["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return out


def _kept(data: Any, keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in keys} if isinstance(data, Mapping) else {}


def _load_balancer_kept(
    raw: Mapping[str, Any], resource: ApiResource, keep: ObjectRef | None
) -> dict[str, Any] | None:
    """`{"loadBalancer": ...}` when `raw` is the Service `keep` names; None otherwise."""
    if keep is None or (resource.group, resource.kind) != (keep.group, keep.kind):
        return None
    ref = ref_of(raw, resource)
    status = raw.get("status")
    if ref != keep or not isinstance(status, Mapping):
        return None
    lb = status.get("loadBalancer")
    return {"loadBalancer": lb} if isinstance(lb, Mapping) else None


def _trimmed(raw: Mapping[str, Any], resource: ApiResource) -> dict[str, Any]:
    if resource.group == "" and resource.kind == "Secret":
        kind_of = raw.get("type")
        usable = kind_of is None or kind_of in SECRET_TYPES
        body = {k: v for k, v in raw.items() if k not in ("data", "stringData", "metadata")}
        body["data"] = _kept(raw.get("data"), SECRET_KEYS) if usable else {}
        body["metadata"] = _metadata(raw, sensitive=True)
        return body
    if resource.group == "" and resource.kind == "ConfigMap":
        body = {k: v for k, v in raw.items() if k not in ("data", "binaryData", "metadata")}
        body["data"] = _kept(raw.get("data"), CONFIG_MAP_KEYS)
        body["metadata"] = _metadata(raw, sensitive=True)
        return body
    body = {k: v for k, v in raw.items() if k not in ("status", "metadata")}
    body["metadata"] = _metadata(raw, sensitive=False)
    return body


def to_object(
    raw: Mapping[str, Any], resource: ApiResource, keep_status_of: ObjectRef | None = None
) -> KubeObject | None:
    """None for something that is not an object with a name. `keep_status_of`: the Service
    whose `status.loadBalancer` is kept (the Envoy Service)."""
    body = _trimmed(raw, resource)
    kept = _load_balancer_kept(raw, resource, keep_status_of)
    if kept is not None:
        body["status"] = kept
    meta = body["metadata"]
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = meta.get("namespace")
    # As the files source does: an object without a namespace (a cluster-scoped one) is in
    # "default", so the same objects compile the same from files and from a cluster.
    if not isinstance(namespace, str) or not namespace:
        namespace = DEFAULT_NAMESPACE
    meta["namespace"] = namespace
    body["apiVersion"], body["kind"] = resource.api_version, resource.kind
    return KubeObject(
        api_version=resource.api_version,
        kind=resource.kind,
        namespace=namespace,
        name=name,
        raw=freeze(body),
        origin=origin_of(resource.kind, namespace, name),
    )


def ref_of(raw: Mapping[str, Any], resource: ApiResource) -> ObjectRef | None:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        namespace = DEFAULT_NAMESPACE
    return ObjectRef(resource.group, resource.kind, namespace, meta["name"])

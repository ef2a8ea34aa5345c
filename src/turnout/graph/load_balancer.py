"""The Envoy Service's load balancer addresses, as Contour's `--envoy-service-name` reads them.

The controller reads them from the store and hands them to the compile as
`CompileOptions.service_addresses`, so no dialect reads a named Service and the compile stays a
function of its snapshot and options. The Kubernetes source keeps `status.loadBalancer` of that
one Service only (it drops every other object's `status`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.objects import ObjectRef
from turnout.store import Snapshot


def service_ref(namespace: str, name: str) -> ObjectRef:
    return ObjectRef("", "Service", namespace, name)


def load_balancer_addresses(status: Any) -> tuple[str, ...]:
    """`status.loadBalancer.ingress[]` of a Service: each entry's `ip`, else its `hostname`
    (an entry with neither, e.g. only `ports`, names nothing), in the Service's order."""
    lb = status.get("loadBalancer") if isinstance(status, Mapping) else None
    entries = lb.get("ingress") if isinstance(lb, Mapping) else None
    out: list[str] = []
    for entry in entries if isinstance(entries, (list, tuple)) else ():
        if not isinstance(entry, Mapping):
            continue
        address = entry.get("ip") or entry.get("hostname")
        if isinstance(address, str) and address and address not in out:
            out.append(address)
    return tuple(out)


def service_addresses(snapshot: Snapshot, ref: ObjectRef | None) -> tuple[str, ...]:
    """The load balancer addresses of Service `ref` in `snapshot`; () without one."""
    obj = snapshot.get_ref(ref) if ref is not None else None
    return load_balancer_addresses(obj.raw.get("status")) if obj is not None else ()

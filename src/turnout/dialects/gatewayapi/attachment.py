"""Which listeners a route attaches to through each of its `parentRefs` (reference notes §2.7),
and why not when it attaches to none.

For one parentRef: the relevant listeners are those its `sectionName` and `port` select (all of
the Gateway's without either); none -> NoMatchingParent. Of those, the listeners that admit the
route's kind and namespace (`allowedRoutes`); none -> NotAllowedByListeners. Of those, the
listeners whose hostname intersects the route's hostnames; none -> NoMatchingListenerHostname.
A parentRef to something that is not a Gateway of turnout's classes is not turnout's to report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.dialects.gatewayapi.conditions import ACCEPTED, RouteProblem
from turnout.dialects.gatewayapi.hostnames import hostname_problem, route_hostnames
from turnout.dialects.gatewayapi.kinds import GATEWAY, GROUP, integer, mapping, sequence, text
from turnout.dialects.gatewayapi.listeners import GatewayListener
from turnout.objects import KubeObject


@dataclass(frozen=True, slots=True)
class ParentRef:
    index: int
    group: str
    kind: str
    namespace: str
    name: str
    section_name: str | None
    port: int | None
    namespace_given: bool

    @property
    def field(self) -> str:
        return f"spec.parentRefs[{self.index}]"

    def to_json(self) -> dict[str, Any]:
        """The parentRef as route status writes it: group and kind always written out."""
        out: dict[str, Any] = {"group": self.group, "kind": self.kind}
        if self.namespace_given:
            out["namespace"] = self.namespace
        out["name"] = self.name
        if self.section_name is not None:
            out["sectionName"] = self.section_name
        if self.port is not None:
            out["port"] = self.port
        return out


# The CRDs' maxItems (CommonRouteSpec.parentRefs, HTTPRoute/GRPCRoute/TLSRoute hostnames): a
# longer list is refused (`route_hostnames_problem`) and read no further than this.
MAX_PARENT_REFS = 32
MAX_ROUTE_HOSTNAMES = 16


def parent_refs(route: KubeObject) -> list[ParentRef]:
    out: list[ParentRef] = []
    raw_refs = sequence(mapping(route.spec).get("parentRefs"))[:MAX_PARENT_REFS]
    for i, raw in enumerate(raw_refs):
        ref = mapping(raw)
        name = text(ref.get("name"))
        if name is None:
            continue  # nothing names a parent: nobody's to report
        group = ref.get("group", GROUP)
        namespace = text(ref.get("namespace"))
        out.append(
            ParentRef(
                index=i,
                group=group if isinstance(group, str) else "",
                kind=text(ref.get("kind")) or GATEWAY,
                namespace=namespace or route.namespace,
                name=name,
                section_name=text(ref.get("sectionName")),
                port=integer(ref.get("port")),
                namespace_given=namespace is not None,
            )
        )
    return out


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _hostnames(route: KubeObject) -> Sequence[Any]:
    return sequence(mapping(route.spec).get("hostnames"))[:MAX_ROUTE_HOSTNAMES]


def route_hostname_list(route: KubeObject) -> tuple[str, ...]:
    return tuple(h.lower() for h in _hostnames(route) if isinstance(h, str))


def _too_many(route: KubeObject, key: str, maximum: int) -> RouteProblem | None:
    count = len(sequence(mapping(route.spec).get(key)))
    if count <= maximum:
        return None
    message = f"spec.{key}: must have at most {maximum} items, got {count}"
    return RouteProblem(ACCEPTED, "UnsupportedValue", message)


def route_hostnames_problem(route: KubeObject) -> RouteProblem | None:
    """Why the route's `spec.hostnames` (or `spec.parentRefs`) are not valid (the CRD's
    maxItems, and its Hostname pattern: no IP, no port, `*.` only as the leftmost label): the API
    server would refuse the object, so the route is not accepted (UnsupportedValue) rather than
    served with some names dropped."""
    for key, maximum in (("parentRefs", MAX_PARENT_REFS), ("hostnames", MAX_ROUTE_HOSTNAMES)):
        if (too_many := _too_many(route, key, maximum)) is not None:
            return too_many
    for i, raw in enumerate(_hostnames(route)):
        problem = "is not a string" if not isinstance(raw, str) else hostname_problem(raw)
        if problem is not None:
            return RouteProblem(
                ACCEPTED, "UnsupportedValue", f"spec.hostnames[{i}]: {raw!r} {problem}"
            )
    return None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A route's attachment through one parentRef: the listeners with the hostnames it serves
    on each, or the problem that kept it from attaching."""

    parent: ParentRef
    gateway: KubeObject
    listeners: tuple[tuple[GatewayListener, tuple[str, ...]], ...]
    problem: RouteProblem | None


def attach(
    route: KubeObject,
    parent: ParentRef,
    gateway: KubeObject,
    listeners: Sequence[GatewayListener],
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> Attachment:
    def fail(reason: str, message: str) -> Attachment:
        return Attachment(parent, gateway, (), RouteProblem(ACCEPTED, reason, message))

    where = f"{parent.field}"
    # A sectionName picks one listener whatever it carries; without one, only the listeners for
    # the route's kind are candidates (the `port` doc: "listeners listening on the specified
    # port that also support this kind of Route"), so a TLSRoute to a Gateway without a TLS
    # listener matches no parent (conformance TLSRouteInvalidNoMatchingListener).
    relevant = [
        lst
        for lst in listeners
        if (parent.section_name is None or lst.name == parent.section_name)
        and (parent.port is None or lst.port == parent.port)
        and (parent.section_name is not None or lst.carries(route.kind))
    ]
    if not relevant:
        wanted = " and ".join(
            w
            for w in (
                f"named {parent.section_name!r}" if parent.section_name is not None else "",
                f"on port {parent.port}" if parent.port is not None else "",
            )
            if w
        )
        if parent.section_name is None:
            wanted = " ".join(w for w in (f"for {route.kind}s", wanted) if w)
        return fail(
            "NoMatchingParent",
            f"{where}: Gateway {gateway.namespace}/{gateway.name} has no listener"
            + (f" {wanted}" if wanted else ""),
        )
    # The API server labels every namespace with its name (immutable), so a selector on
    # kubernetes.io/metadata.name works even for a namespace given by no Namespace object.
    labels = {**namespace_labels.get(route.namespace, {}), NAMESPACE_NAME_LABEL: route.namespace}
    allowed = [
        lst
        for lst in relevant
        if route.kind in lst.kinds and lst.admits_namespace(route.namespace, labels)
    ]
    if not allowed:
        if not any(route.kind in lst.kinds for lst in relevant):
            why = f"no listener of it admits {route.kind}s"
        else:
            why = f"no listener of it admits routes from namespace {route.namespace}"
        return fail(
            "NotAllowedByListeners",
            f"{where}: Gateway {gateway.namespace}/{gateway.name}: {why}",
        )
    hostnames = route_hostname_list(route)
    attached: list[tuple[GatewayListener, tuple[str, ...]]] = []
    for lst in allowed:
        served = route_hostnames(lst.hostname, hostnames)
        if served:
            attached.append((lst, served))
    if not attached:
        listed = ", ".join(sorted({lst.hostname or "*" for lst in allowed}))
        return fail(
            "NoMatchingListenerHostname",
            f"spec.hostnames: none of {', '.join(hostnames)} intersects the hostnames of the "
            f"listeners of Gateway {gateway.namespace}/{gateway.name} it may attach to "
            f"({listed})",
        )
    return Attachment(parent, gateway, tuple(attached), None)

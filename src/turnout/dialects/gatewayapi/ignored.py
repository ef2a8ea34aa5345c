"""The Gateway API objects of another implementation: GatewayClasses of another controllerName,
the Gateways of their classes (or of a class that does not exist) and the routes attached to no
Gateway of turnout's. The spec gives them no status from turnout; `check` and `/status` list them
with the reason."""

from __future__ import annotations

from turnout.dialects.gatewayapi.attachment import parent_refs
from turnout.dialects.gatewayapi.classes import our_classes
from turnout.dialects.gatewayapi.kinds import (
    GATEWAY,
    GATEWAY_CLASS,
    GROUP,
    GRPC_ROUTE,
    HTTP_ROUTE,
    TCP_ROUTE,
    TLS_ROUTE,
    mapping,
    text,
)
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot


def ignored_objects(snapshot: Snapshot, controller_name: str) -> list[IgnoredObject]:
    ours = our_classes(snapshot, controller_name)
    out: list[IgnoredObject] = []
    controllers: dict[str, str] = {}
    for gc in snapshot.kind(GROUP, GATEWAY_CLASS):
        controller = text(mapping(gc.spec).get("controllerName")) or ""
        controllers.setdefault(gc.name, controller)
        if controller != controller_name:
            out.append(
                IgnoredObject.of(
                    gc,
                    f"controllerName {controller!r} is another controller's (turnout is "
                    f"{controller_name!r})",
                )
            )
    our_gateways: set[tuple[str, str]] = set()
    for g in snapshot.kind(GROUP, GATEWAY):
        class_name = text(mapping(g.spec).get("gatewayClassName")) or ""
        if class_name in ours:
            our_gateways.add((g.namespace, g.name))
        elif class_name in controllers:
            why = f"GatewayClass {class_name!r} belongs to controller {controllers[class_name]!r}"
            out.append(IgnoredObject.of(g, why))
        else:
            out.append(IgnoredObject.of(g, f"GatewayClass {class_name!r} does not exist"))
    for kind in (HTTP_ROUTE, GRPC_ROUTE, TLS_ROUTE, TCP_ROUTE):
        for route in snapshot.kind(GROUP, kind):
            parents = [p for p in parent_refs(route) if p.group == GROUP and p.kind == GATEWAY]
            if any((p.namespace, p.name) in our_gateways for p in parents):
                continue
            named = ", ".join(f"{p.namespace}/{p.name}" for p in parents) or "none"
            why = f"attached to no Gateway of turnout's (parent Gateways: {named})"
            out.append(IgnoredObject.of(route, why))
    return out

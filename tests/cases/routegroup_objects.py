"""RouteGroup dialect objects in the namespace `shop` (RouteGroups and the Service `web` they
route to), shared by the RouteGroup and condition-status test modules."""

from __future__ import annotations

from typing import Any

from tests.builders import endpoint_slice, kube_object
from turnout.objects import KubeObject, Origin

CREATED = "2024-01-01T00:00:00Z"


def shop_object(kind: str, name: str, body: dict[str, Any], api_version: str = "v1") -> KubeObject:
    """An object `shop/name` created at CREATED, with the top-level fields in `body`."""
    return kube_object(
        api_version, kind, name, "shop", created=CREATED, origin=Origin("test"), **body
    )


def routegroup(name: str, spec: Any) -> KubeObject:
    """A RouteGroup `shop/name` with `spec`."""
    return shop_object("RouteGroup", name, {"spec": spec}, "zalando.org/v1")


def web_service() -> list[KubeObject]:
    """Service `shop/web` (port "http" 80) and its EndpointSlice with the endpoint 10.0.0.1:8080."""
    return [
        shop_object("Service", "web", {"spec": {"ports": [{"name": "http", "port": 80}]}}),
        endpoint_slice("web", ["10.0.0.1"], "shop", ports=[("http", 8080)]),
    ]

"""The Envoy resources one translation produces, grouped by xDS type and sorted by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
SCOPED_ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

# The make-before-break order of xDS pushes (see the xDS protocol's eventual-consistency notes):
# a scope before the route configuration it names, which Envoy asks for once it has the scope.
TYPE_ORDER = (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    SCOPED_ROUTE_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
)


@dataclass(frozen=True, slots=True)
class EnvoyResources:
    """Generated protobuf messages per type URL; each tuple is sorted by resource name.

    Messages are typed `Any` because xds-protos ships no type stubs.
    """

    clusters: tuple[Any, ...] = ()  # envoy.config.cluster.v3.Cluster
    endpoints: tuple[Any, ...] = ()  # envoy.config.endpoint.v3.ClusterLoadAssignment
    listeners: tuple[Any, ...] = ()  # envoy.config.listener.v3.Listener
    routes: tuple[Any, ...] = ()  # envoy.config.route.v3.RouteConfiguration
    secrets: tuple[Any, ...] = ()  # envoy.extensions.transport_sockets.tls.v3.Secret
    # envoy.config.route.v3.ScopedRouteConfiguration (`translate.scoped_routes`)
    scoped_routes: tuple[Any, ...] = ()
    # id(message) -> (message, its deterministic serialization) for messages the translator
    # assembled from bytes (the route configurations), so the xDS server does not serialize
    # them again. Messages are never changed once translated.
    encoded: Mapping[int, tuple[Any, bytes]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Per type URL, what a translation that patched its last result knows it changed: (the
    # tuple of that type it patched, {name: the new message, or None when the name is gone}).
    # The xDS server that installed that very tuple looks at these names only, instead of
    # diffing every resource; a type the translation left alone is the very same tuple.
    changes: Mapping[str, tuple[tuple[Any, ...], Mapping[str, Any]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def serialized(self, message: Any) -> bytes:
        """`message.SerializeToString(deterministic=True)`, known or computed now."""
        known = self.encoded.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        data: bytes = message.SerializeToString(deterministic=True)
        return data

    def by_type(self) -> dict[str, tuple[Any, ...]]:
        return {
            CLUSTER_TYPE: self.clusters,
            ENDPOINT_TYPE: self.endpoints,
            LISTENER_TYPE: self.listeners,
            ROUTE_TYPE: self.routes,
            SECRET_TYPE: self.secrets,
            SCOPED_ROUTE_TYPE: self.scoped_routes,
        }

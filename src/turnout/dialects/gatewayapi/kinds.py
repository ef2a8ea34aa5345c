"""The Gateway API kinds and versions turnout reads (reference notes §1.1, the v1.6 standard
channel), and small readers shared by the package."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GROUP = "gateway.networking.k8s.io"
V1 = f"{GROUP}/v1"
V1BETA1 = f"{GROUP}/v1beta1"
V1ALPHA2 = f"{GROUP}/v1alpha2"
V1ALPHA3 = f"{GROUP}/v1alpha3"

GATEWAY_CLASS = "GatewayClass"
GATEWAY = "Gateway"
HTTP_ROUTE = "HTTPRoute"
GRPC_ROUTE = "GRPCRoute"
TLS_ROUTE = "TLSRoute"
TCP_ROUTE = "TCPRoute"
REFERENCE_GRANT = "ReferenceGrant"
BACKEND_TLS_POLICY = "BackendTLSPolicy"


def gateway_listener_name(port: int) -> str:
    """The graph (and Envoy) listener serving every Gateway listener on `port`."""
    return f"gateway_{port}"


# The versions served by the standard channel (v1beta1 of GatewayClass, Gateway and HTTPRoute is
# still served there), plus the alpha versions of TLSRoute and TCPRoute that the experimental
# channel serves and that most manifests written before v1.5/v1.6 use.
KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        (V1, GATEWAY_CLASS),
        (V1BETA1, GATEWAY_CLASS),
        (V1, GATEWAY),
        (V1BETA1, GATEWAY),
        (V1, HTTP_ROUTE),
        (V1BETA1, HTTP_ROUTE),
        (V1, GRPC_ROUTE),
        (V1, TLS_ROUTE),
        (V1ALPHA2, TLS_ROUTE),
        (V1ALPHA3, TLS_ROUTE),
        (V1, TCP_ROUTE),
        (V1ALPHA2, TCP_ROUTE),
        (V1, REFERENCE_GRANT),
        (V1BETA1, REFERENCE_GRANT),
        (V1, BACKEND_TLS_POLICY),
    }
)

# Listener protocols turnout serves, and the route kinds each admits when `allowedRoutes.kinds`
# is empty (the spec: "determined by the listener protocol").
DEFAULT_ROUTE_KINDS: Mapping[str, tuple[str, ...]] = {
    "HTTP": (HTTP_ROUTE, GRPC_ROUTE),
    "HTTPS": (HTTP_ROUTE, GRPC_ROUTE),
    "TLS": (TLS_ROUTE,),
    "TCP": (TCP_ROUTE,),
}


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, tuple | list) else ()


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def core_group(group: str) -> str:
    """The core API group is "" in Gateway API references; "core" is read as the same group."""
    return "" if group == "core" else group

"""Gateway API backendRefs (`BackendObjectReference` plus `weight`) -> graph clusters.

`resolve_backend_ref` answers for one entry of a rule's `backendRefs` (HTTPRoute, GRPCRoute,
TCPRoute, TLSRoute): the cluster its share goes to, or None with the problem the route's status
reports (`ResolvedRefs` False, `HTTPRouteRule.BackendRefs` doc and `shared_types.go`). A ref is
checked in this order, so a cross-namespace ref never reveals whether its target exists:

1. `group` ("" or "core") and `kind` (default `Service`): anything but a core Service is
   `InvalidKind`;
2. `namespace` (default the route's): another namespace needs a ReferenceGrant there from the
   route's kind, else `RefNotPermitted`;
3. `port` is required for a Service (the CRD's "Must have port for Service reference") and a
   port number: the CRD refuses anything else, so, like every value the CRD refuses, a missing
   or malformed port is `Accepted` False `UnsupportedValue` and the whole route is invalid;
   `name` and `port` must name a Service port, else `BackendNotFound`; an ExternalName Service
   counts as found only when the installation routes to them
   (`CompileOptions.enable_external_name_service`), as for every dialect, and is otherwise
   `BackendNotFound` with the reason in the message;
4. the Service port's `protocol` and `appProtocol` must suit the route (GEP-1911), else
   `UnsupportedProtocol`:

   | app | appProtocol | upstream |
   |---|---|---|
   | http | unset, `http`, `kubernetes.io/ws` | HTTP/1.1 (over TLS with a BackendTLSPolicy) |
   | http | `kubernetes.io/h2c` | h2c (H2 with a BackendTLSPolicy) |
   | http | `https`, `kubernetes.io/wss` | TLS, only with a BackendTLSPolicy |
   | grpc | unset, `kubernetes.io/h2c`, `grpc` | h2c (H2 with a BackendTLSPolicy) |
   | tcp, tls | any | the bytes as they come |
   | tls-terminate | any | the decrypted bytes; over TLS with a BackendTLSPolicy |

   IANA service names (`http`, `https`, `grpc`: no `/`) compare case-insensitively, as RFC 6335
   has them (upstream's BackendTLSPolicySANValidation declares `HTTPS`).
   Any other appProtocol is `UnsupportedProtocol`: a backend that declares a protocol turnout
   cannot speak is not sent that traffic. A port whose `protocol` is not TCP (UDP, SCTP) is
   `UnsupportedProtocol` for every route kind.

`weight` defaults to 1 and lies in 0..1,000,000 (the CRD's bounds). A weight the CRD refuses
(not an integer, or out of range) is reported `Accepted` False `UnsupportedValue`: the route
compilers then reject the whole route, which serves nothing. An invalid ref (`ResolvedRefs`
False) keeps its weight: the rule sends its share to `INVALID_BACKEND`, answered 500 (HTTP),
503 / `UNAVAILABLE` (gRPC) or refused (TCP).

A BackendTLSPolicy targeting the Service (and port) makes the upstream TLS, validated as the
policy says (`backend_tls.py`), for HTTP, gRPC and TLSRoutes on listeners that terminate TLS
(GEP-4274, conformance BackendTLSPolicyTLSRouteTerminate); on a passthrough listener the stream
is the client's TLS session and the policy does not apply (its status says so). A policy that
cannot be honoured makes the ref invalid (`ResolvedRefs` False `InvalidCACertificateRef` or
`NoValidCACertificate` for the route, as the spec lists such refs as invalid).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from turnout.dialects.gatewayapi.conditions import (
    ACCEPTED,
    BACKEND_NOT_FOUND,
    INVALID_KIND,
    RESOLVED_REFS,
    UNSUPPORTED_VALUE,
    RouteProblem,
)
from turnout.dialects.gatewayapi.kinds import core_group
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.graph.dialect import CompileContext
from turnout.graph.model import (
    INVALID_BACKEND,
    UpstreamProtocol,
    UpstreamSettings,
    UpstreamValidation,
    WeightedCluster,
)
from turnout.graph.services import (
    EXTERNAL_NAME_INVALID,
    EXTERNAL_NAME_LOCALHOST,
    EXTERNAL_NAME_NOT_ENABLED,
    ServicePort,
    Unresolved,
    external_name_phrase,
)
from turnout.objects import KubeObject

REF_NOT_PERMITTED = "RefNotPermitted"
UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"

MAX_WEIGHT = 1_000_000

# `app` of a TLSRoute's refs on a listener that terminates TLS (passthrough listeners: "tls").
TLS_TERMINATE = "tls-terminate"

H2C = "kubernetes.io/h2c"
WS = "kubernetes.io/ws"
WSS = "kubernetes.io/wss"
# appProtocol -> (upstream without a BackendTLSPolicy, None: the protocol needs one; upstream
# with a BackendTLSPolicy; the port speaks WebSocket)
_HTTP_APP_PROTOCOLS: dict[str | None, tuple[UpstreamProtocol | None, UpstreamProtocol, bool]] = {
    None: (UpstreamProtocol.HTTP, UpstreamProtocol.TLS, False),
    "http": (UpstreamProtocol.HTTP, UpstreamProtocol.TLS, False),
    WS: (UpstreamProtocol.HTTP, UpstreamProtocol.TLS, True),
    H2C: (UpstreamProtocol.H2C, UpstreamProtocol.H2, False),
    "https": (None, UpstreamProtocol.TLS, False),
    WSS: (None, UpstreamProtocol.TLS, True),
}
_GRPC_APP_PROTOCOLS: dict[str | None, tuple[UpstreamProtocol | None, UpstreamProtocol, bool]] = {
    None: (UpstreamProtocol.H2C, UpstreamProtocol.H2, False),
    H2C: (UpstreamProtocol.H2C, UpstreamProtocol.H2, False),
    "grpc": (UpstreamProtocol.H2C, UpstreamProtocol.H2, False),
}


def _app_protocol_key(app_protocol: str | None) -> str | None:
    """The appProtocol as the tables name it: IANA service names are case-insensitive
    (RFC 6335 section 5.1); domain-prefixed ones (`kubernetes.io/h2c`) are compared as written."""
    if app_protocol is None or "/" in app_protocol:
        return app_protocol
    return app_protocol.lower()


@dataclass(frozen=True, slots=True)
class ResolvedBackendRef:
    weight: int  # the ref's weight (default 1)
    cluster: str | None  # graph Cluster.name; None: invalid ref (its share answers 500)
    problem: RouteProblem | None  # the status problem when invalid
    # The Service port declares WebSocket (`kubernetes.io/ws` / `wss`): the route should allow
    # the upgrade.
    websockets: bool = False

    @property
    def weighted_cluster(self) -> WeightedCluster:
        """The ref's share in a graph split: its cluster, or the invalid backend."""
        return WeightedCluster(
            self.cluster if self.cluster is not None else INVALID_BACKEND, self.weight
        )


def _invalid(weight: int, condition: str, reason: str, message: str) -> ResolvedBackendRef:
    return ResolvedBackendRef(weight, None, RouteProblem(condition, reason, message))


def _weight(ref: Mapping[str, object]) -> int | str:
    """The weight, or why it is not one."""
    if "weight" not in ref or ref["weight"] is None:
        return 1
    weight = ref["weight"]
    if not isinstance(weight, int) or isinstance(weight, bool):
        return f"{weight!r} is not an integer"
    if not 0 <= weight <= MAX_WEIGHT:
        return f"{weight} is not between 0 and {MAX_WEIGHT}"
    return weight


def _string(ref: Mapping[str, object], key: str, default: str) -> str | None:
    value = ref.get(key)
    if value is None:
        return default
    return value if isinstance(value, str) else None


def resolve_backend_ref(
    route: KubeObject,
    ref: object,
    field: str,
    ctx: CompileContext,
    grants: ReferenceGrants,
    *,
    app: str,
) -> ResolvedBackendRef:
    """Resolves `ref` (the entry at `field`, e.g. `spec.rules[0].backendRefs[1]`) of `route`.

    `app` is "http" | "grpc" | "tcp" | "tls" (passthrough) | "tls-terminate": what the route
    sends, which decides the upstream protocol and which appProtocols are acceptable. Never
    raises.
    """
    if not isinstance(ref, Mapping):
        return _invalid(1, RESOLVED_REFS, BACKEND_NOT_FOUND, f"{field}: is not an object")
    weight = _weight(ref)
    if isinstance(weight, str):
        return _invalid(1, ACCEPTED, UNSUPPORTED_VALUE, f"{field}.weight: {weight}")
    target = _service_target(route, ref, field, grants, weight)
    if isinstance(target, ResolvedBackendRef):
        return target
    namespace, name = target
    port = _port(ref, field, weight)
    if isinstance(port, ResolvedBackendRef):
        return port
    found = _tcp_service_port(ctx, namespace, name, port, field, weight)
    if isinstance(found, ResolvedBackendRef):
        return found
    service, service_port = found
    tls = _upstream_tls(route, ctx, grants, service, service_port, app=app)
    if isinstance(tls, RouteProblem):
        return _invalid(weight, tls.condition, tls.reason, f"{field}: {tls.message}")
    shown = f"{field}: Service {namespace}/{name} port {port}"
    chosen = _upstream_protocol(route, service_port, tls, shown, weight, app=app)
    if isinstance(chosen, ResolvedBackendRef):
        return chosen
    protocol, websockets = chosen
    settings = UpstreamSettings(protocol=protocol, validation=tls)
    cluster = ctx.backends.service(namespace, name, port, settings=settings)
    if isinstance(cluster, Unresolved):  # the Service was just found: only a resolver change
        return _invalid(weight, RESOLVED_REFS, BACKEND_NOT_FOUND, f"{field}: {cluster.message}")
    return ResolvedBackendRef(weight, cluster.name, None, websockets)


def _kind_problem(ref: Mapping[str, object], field: str, weight: int) -> ResolvedBackendRef | None:
    """The invalid ref when `group` and `kind` do not name a core Service, else None."""
    group = _string(ref, "group", "")
    kind = _string(ref, "kind", "Service")
    if group is None or kind is None:
        return _invalid(
            weight, RESOLVED_REFS, INVALID_KIND, f"{field}: group and kind must be strings"
        )
    group = core_group(group)
    if (group, kind) != ("", "Service"):
        shown = f"{group}/{kind}" if group else kind
        return _invalid(
            weight,
            RESOLVED_REFS,
            INVALID_KIND,
            f"{field}: kind {shown} is not supported; backendRefs must be core Services",
        )
    return None


def _service_target(
    route: KubeObject,
    ref: Mapping[str, object],
    field: str,
    grants: ReferenceGrants,
    weight: int,
) -> tuple[str, str] | ResolvedBackendRef:
    """The Service's (namespace, name), checked in the module's order (kind, name, namespace,
    ReferenceGrant), or the invalid ref."""
    wrong_kind = _kind_problem(ref, field, weight)
    if wrong_kind is not None:
        return wrong_kind
    name = _string(ref, "name", "")
    if not name:
        return _invalid(weight, RESOLVED_REFS, BACKEND_NOT_FOUND, f"{field}: name is required")
    namespace = _string(ref, "namespace", "")
    if namespace is None:
        return _invalid(
            weight, RESOLVED_REFS, BACKEND_NOT_FOUND, f"{field}.namespace: is not a string"
        )
    namespace = namespace or route.namespace
    if not grants.permits(
        from_group=route.group,
        from_kind=route.kind,
        from_namespace=route.namespace,
        to_group="",
        to_kind="Service",
        to_namespace=namespace,
        to_name=name,
    ):
        return _invalid(
            weight,
            RESOLVED_REFS,
            REF_NOT_PERMITTED,
            f"{field}: Service {namespace}/{name} is in another namespace and no ReferenceGrant "
            f"in {namespace} allows {route.kind} references from namespace {route.namespace}",
        )
    return namespace, name


def _port(ref: Mapping[str, object], field: str, weight: int) -> int | ResolvedBackendRef:
    """The port number, or the invalid ref when it is missing or malformed."""
    # The CRD refuses both (`PortNumber`, and the rule "Must have port for Service
    # reference"): like every value it refuses, they make the route invalid.
    port = ref.get("port")
    if port is None:
        return _invalid(
            weight,
            ACCEPTED,
            UNSUPPORTED_VALUE,
            f"{field}.port: Must have port for Service reference",
        )
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        return _invalid(
            weight,
            ACCEPTED,
            UNSUPPORTED_VALUE,
            f"{field}.port: {port!r} is not a port number (1 to 65535)",
        )
    return port


def _tcp_service_port(
    ctx: CompileContext, namespace: str, name: str, port: int, field: str, weight: int
) -> tuple[KubeObject, ServicePort] | ResolvedBackendRef:
    """The Service and its TCP port, or the invalid ref when either is missing, the Service is
    refused (ExternalName) or the port is not TCP."""
    found = ctx.backends.service_port(namespace, name, port)
    if isinstance(found, Unresolved):
        return _invalid(
            weight,
            RESOLVED_REFS,
            BACKEND_NOT_FOUND,
            f"{field}: Service {namespace}/{name}"
            + (" not found" if found.reason == "ServiceNotFound" else f" has no port {port}"),
        )
    service, service_port = found
    refused = ctx.backends.refusal(service)
    if refused is not None:
        return _invalid(weight, RESOLVED_REFS, BACKEND_NOT_FOUND, _refusal(field, service, refused))
    if service_port.protocol.upper() != "TCP":
        return _invalid(
            weight,
            RESOLVED_REFS,
            UNSUPPORTED_PROTOCOL,
            f"{field}: Service {namespace}/{name} port {port} is {service_port.protocol}; "
            "turnout proxies TCP only",
        )
    return service, service_port


def _upstream_tls(
    route: KubeObject,
    ctx: CompileContext,
    grants: ReferenceGrants,
    service: KubeObject,
    service_port: ServicePort,
    *,
    app: str,
) -> UpstreamValidation | RouteProblem | None:
    """The upstream TLS validation a BackendTLSPolicy asks for, None for none, or the problem
    when the policy cannot be honoured."""
    # The gateway originates TLS wherever it holds the plain bytes: HTTP, gRPC and the streams
    # of TLS listeners that terminate. A TCPRoute's stream is the client's own (turnout's TCP
    # listeners do not terminate TLS), and a passthrough stream is already the client's TLS
    # session with the backend: a policy cannot apply there, which its status reports.
    tls: UpstreamValidation | RouteProblem | None = None
    if app in ("http", "grpc", TLS_TERMINATE):
        tls = grants.backend_tls.validation(service, service_port, ctx, used_by=route.ref)
    elif app == "tls":
        grants.backend_tls.note_passthrough(service, service_port, route.ref)
    return tls


def _upstream_protocol(
    route: KubeObject,
    service_port: ServicePort,
    tls: UpstreamValidation | None,
    shown: str,
    weight: int,
    *,
    app: str,
) -> tuple[UpstreamProtocol, bool] | ResolvedBackendRef:
    """The upstream protocol and whether the port speaks WebSocket, or the invalid ref when the
    port's appProtocol does not suit `app` (`shown`: the ref's field, Service and port)."""
    app_protocol = service_port.app_protocol
    websockets = False
    # TCP and TLS routes stream bytes, whatever the protocol; over TLS when a policy says so.
    protocol = UpstreamProtocol.TLS if tls is not None else UpstreamProtocol.TCP
    if app not in ("tcp", "tls", TLS_TERMINATE):
        table = _GRPC_APP_PROTOCOLS if app == "grpc" else _HTTP_APP_PROTOCOLS
        choice = table.get(_app_protocol_key(app_protocol))
        if choice is None:
            return _invalid(
                weight,
                RESOLVED_REFS,
                UNSUPPORTED_PROTOCOL,
                f"{shown} has appProtocol {app_protocol!r}, "
                f"which turnout cannot send {route.kind} traffic to",
            )
        plain, secure, websockets = choice
        if tls is not None:
            protocol = secure
        elif plain is not None:
            protocol = plain
        else:
            return _invalid(
                weight,
                RESOLVED_REFS,
                UNSUPPORTED_PROTOCOL,
                f"{shown} has appProtocol {app_protocol!r}, "
                "which needs a BackendTLSPolicy for the Service",
            )
    return protocol, websockets


def _refusal(field: str, service: KubeObject, refused: Unresolved) -> str:
    ref = f"Service {service.namespace}/{service.name}"
    if refused.reason in (
        EXTERNAL_NAME_NOT_ENABLED,
        EXTERNAL_NAME_LOCALHOST,
        EXTERNAL_NAME_INVALID,
    ):
        return f"{field}: {ref} {external_name_phrase(refused)}"
    return f"{field}: {refused.message}"

"""Gateway listeners: each one read and checked, then checked against every other listener that
binds the same port (on any Gateway of this controller), with the listener status the spec asks
for (reference notes §1.3 and §2.2).

A listener binds its `port` on turnout's `--address`. Every listener on one port shares one Envoy
listener, so the port's protocols must agree: HTTP alone, HTTPS and TLS together (both choose by
SNI), or one TCP listener. Within one Gateway, indistinct listeners are all Conflicted (the spec
forbids picking a winner); across Gateways the older Gateway keeps the port or hostname and the
newer Gateway's listener is Conflicted (there, any two hostnames that intersect conflict: a newer
Gateway never takes a name an older one serves), as turnout settles every other hostname dispute.
turnout's own `--http-port` and `--https-port` belong to the other dialects: a Gateway listener
there is not accepted (PortUnavailable), and nothing of a Gateway ever lands on those listeners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.conditions import (
    ACCEPTED,
    CONFLICTED,
    FALSE,
    OVERLAPPING_TLS_CONFIG,
    PENDING,
    PROGRAMMED,
    RESOLVED_REFS,
    TRUE,
    Condition,
)
from turnout.dialects.gatewayapi.hostnames import hostname_problem, intersect
from turnout.dialects.gatewayapi.kinds import (
    DEFAULT_ROUTE_KINDS,
    GATEWAY,
    GROUP,
    integer,
    mapping,
    sequence,
    text,
)
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.graph.model import TLSTermination
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import Unresolved
from turnout.objects import KubeObject

SUPPORTED_PROTOCOLS = ("HTTP", "HTTPS", "TLS", "TCP")
# Listeners of these classes may share a port; different classes may not.
_PORT_CLASS = {"HTTP": "HTTP", "HTTPS": "TLS", "TLS": "TLS", "TCP": "TCP"}


def idle_message(port: int) -> str:
    return (
        f"nothing on port {port} can be served yet (no attached route with a usable backend): "
        "Envoy does not listen on it until there is"
    )


def closed_message(port: int) -> str:
    """Programmed True of a listener with nothing to serve, once Envoy acknowledged it."""
    return (
        f"Envoy acknowledged the configuration; nothing on port {port} can be served yet (no "
        "attached route with a usable backend), so the port stays closed until a route attaches"
    )


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: Mapping[str, str]
    # (key, operator, values)
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for key, op, values in self.match_expressions:
            present = key in labels
            if op == "In" and not (present and labels[key] in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class GatewayListener:
    """One listener of a Gateway as read, with its conditions so far."""

    gateway: KubeObject
    index: int
    name: str
    hostname: str | None  # lower case; None: every hostname
    port: int
    protocol: str
    tls_mode: str | None  # "Terminate" | "Passthrough" for HTTPS/TLS listeners
    tls: TLSTermination | None
    namespaces_from: str  # "Same" | "All" | "Selector"
    selector: LabelSelector | None
    # Route kinds the listener admits (supportedKinds) and the kinds it was asked for but cannot.
    kinds: tuple[str, ...]
    invalid_kinds: tuple[str, ...]
    # `allowedRoutes.kinds` is set: the listener, not its protocol, decides which kinds attach.
    kinds_explicit: bool = False
    # Why the listener is not accepted (reason, message), or None.
    not_accepted: tuple[str, str] | None = None
    # Why its references do not resolve (reason, message), or None.
    unresolved: tuple[str, str] | None = None
    conflict: tuple[str, str] | None = None
    # The other TLS listeners of the Gateway on the same port whose hostnames overlap this
    # one's (OverlappingTLSConfig True, reason OverlappingHostnames), or None.
    overlapping: str | None = None

    @property
    def field(self) -> str:
        return f"spec.listeners[{self.index}]"

    def carries(self, kind: str) -> bool:
        """Whether a route of `kind` is the listener's business at all: its protocol carries
        the kind, or its `allowedRoutes.kinds` names route kinds it serves (admitting this kind
        or not). A listener whose kinds are all invalid for its protocol decides nothing.
        Conformance asks NotAllowedByListeners for an HTTPRoute to a TLS listener that admits
        TLSRoutes (HTTPRouteDisallowedKind), NoMatchingParent for a TLSRoute to an HTTP listener
        that names only TLSRoute (TLSRouteInvalidNoMatchingListener)."""
        explicit = self.kinds_explicit and bool(self.kinds)
        return explicit or kind in DEFAULT_ROUTE_KINDS.get(self.protocol, ())

    @property
    def ready(self) -> bool:
        """Whether the listener is configured in Envoy: accepted, not conflicted, and (for a
        terminating listener) with a usable certificate."""
        if self.not_accepted is not None or self.conflict is not None:
            return False
        return not (self.needs_certificate and self.tls is None)

    @property
    def needs_certificate(self) -> bool:
        return self.protocol == "HTTPS" or (self.protocol == "TLS" and self.tls_mode == "Terminate")

    @property
    def scheme(self) -> str:
        return "https" if self.protocol == "HTTPS" else "http"

    def admits_namespace(self, namespace: str, namespace_labels: Mapping[str, str]) -> bool:
        if self.namespaces_from == "All":
            return True
        if self.namespaces_from == "Selector":
            return self.selector is not None and self.selector.matches(namespace_labels)
        return namespace == self.gateway.namespace

    def conditions(self, programmed: bool, *, idle: bool = False) -> list[Condition]:
        """Accepted, Programmed, ResolvedRefs and Conflicted, in that order. `programmed`: Envoy
        acknowledged a configuration holding this listener. `idle`: nothing on the listener's
        port can be served (a TCP or TLS port without a usable route), so Envoy gets no
        listener for it and the port stays closed."""
        out: list[Condition] = []
        if self.not_accepted is not None:
            out.append(Condition(ACCEPTED, FALSE, *self.not_accepted))
        else:
            out.append(Condition(ACCEPTED, TRUE, "Accepted", "Listener is accepted"))
        if not self.ready:
            out.append(Condition(PROGRAMMED, FALSE, "Invalid", "Listener is not valid"))
        elif programmed:
            out.append(Condition(PROGRAMMED, TRUE, "Programmed", "Envoy acknowledged the listener"))
        elif idle:
            out.append(Condition(PROGRAMMED, FALSE, PENDING, idle_message(self.port)))
        else:
            out.append(
                Condition(
                    PROGRAMMED, FALSE, PENDING, "Waiting for Envoy to acknowledge the configuration"
                )
            )
        if self.unresolved is not None:
            out.append(Condition(RESOLVED_REFS, FALSE, *self.unresolved))
        else:
            out.append(Condition(RESOLVED_REFS, TRUE, "ResolvedRefs", "References are resolved"))
        if self.conflict is not None:
            out.append(Condition(CONFLICTED, TRUE, *self.conflict))
        else:
            out.append(Condition(CONFLICTED, FALSE, "NoConflicts", "No conflicts"))
        # The spec: MUST NOT be set when False.
        if self.overlapping is not None:
            out.append(
                Condition(OVERLAPPING_TLS_CONFIG, TRUE, "OverlappingHostnames", self.overlapping)
            )
        return out


@dataclass(slots=True)
class _Reading:
    """What `read_listener` learns, before it becomes a frozen GatewayListener."""

    not_accepted: tuple[str, str] | None = None
    unresolved: tuple[str, str] | None = None
    problems: list[str] = field(default_factory=list)

    def reject(self, reason: str, message: str) -> None:
        if self.not_accepted is None:
            self.not_accepted = (reason, message)

    def unresolve(self, reason: str, message: str) -> None:
        if self.unresolved is None:
            self.unresolved = (reason, message)


def _selector(raw: Any, where: str, reading: _Reading) -> LabelSelector | None:
    spec = mapping(raw)
    labels = {str(k): str(v) for k, v in mapping(spec.get("matchLabels")).items()}
    exprs: list[tuple[str, str, tuple[str, ...]]] = []
    for i, expr in enumerate(sequence(spec.get("matchExpressions"))):
        e = mapping(expr)
        key, op = text(e.get("key")), text(e.get("operator"))
        if key is None or op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            reading.reject(
                "UnsupportedValue",
                f"{where}.matchExpressions[{i}]: needs a key and an operator In, NotIn, "
                "Exists or DoesNotExist",
            )
            return None
        exprs.append((key, op, tuple(str(v) for v in sequence(e.get("values")))))
    return LabelSelector(labels, tuple(exprs))


def _hostname(raw: Any, where: str, reading: _Reading) -> str | None:
    if raw is None:
        return None
    host = text(raw)
    problem = "is not a string" if host is None else hostname_problem(host)
    if host is None or problem is not None:
        reading.reject("UnsupportedValue", f"{where}.hostname: {raw!r} {problem}")
        return None
    return host.lower()


def _route_kinds(
    protocol: str, raw: Any, where: str, reading: _Reading
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    allowed = DEFAULT_ROUTE_KINDS.get(protocol, ())
    requested = sequence(raw)
    if not requested:
        return allowed, ()
    kinds: list[str] = []
    invalid: list[str] = []
    for i, entry in enumerate(requested):
        e = mapping(entry)
        group = e.get("group", GROUP)
        kind = text(e.get("kind")) or ""
        if group == GROUP and kind in allowed:
            if kind not in kinds:
                kinds.append(kind)
        else:
            name = f"{group}/{kind}" if group else kind
            invalid.append(name)
            reading.unresolve(
                "InvalidRouteKinds",
                f"{where}.allowedRoutes.kinds[{i}]: {name or '(no kind)'} is not a route kind a "
                f"{protocol} listener supports",
            )
    return tuple(kinds), tuple(invalid)


def _certificate(
    gateway: KubeObject,
    tls: Mapping[str, Any],
    where: str,
    reading: _Reading,
    secrets: SecretResolver,
    grants: ReferenceGrants,
) -> TLSTermination | None:
    refs = sequence(tls.get("certificateRefs"))
    if not refs:
        reading.unresolve(
            "InvalidCertificateRef", f"{where}.tls.certificateRefs: a TLS certificate is required"
        )
        return None
    if len(refs) > 1:
        reading.problems.append(
            f"{where}.tls.certificateRefs: only the first certificate is served (one "
            "certificate per listener is what turnout supports)"
        )
    ref = mapping(refs[0])
    ref_where = f"{where}.tls.certificateRefs[0]"
    group = ref.get("group", "")
    kind = ref.get("kind", "Secret")
    name = text(ref.get("name"))
    namespace = text(ref.get("namespace")) or gateway.namespace
    if group not in ("", None) or kind != "Secret" or not name:
        reading.unresolve(
            "InvalidCertificateRef",
            f"{ref_where}: only a core Secret with a name is supported, got "
            f"{(str(group) + '/') if group else ''}{kind} {name or '(no name)'}",
        )
        return None
    if namespace != gateway.namespace and not grants.permits(
        from_group=GROUP,
        from_kind=GATEWAY,
        from_namespace=gateway.namespace,
        to_group="",
        to_kind="Secret",
        to_namespace=namespace,
        to_name=name,
    ):
        reading.unresolve(
            "RefNotPermitted",
            f"{ref_where}: Secret {namespace}/{name} is in another namespace and no "
            f"ReferenceGrant in {namespace} allows Gateways of {gateway.namespace} to use it",
        )
        return None
    # The ReferenceGrant is the Gateway API's permission; Contour's delegation does not apply.
    secret = secrets.tls_secret(namespace, name, for_namespace=namespace)
    if isinstance(secret, Unresolved):
        reading.unresolve("InvalidCertificateRef", f"{ref_where}: {secret.message}")
        return None
    return TLSTermination(secret=secret.name)


def _port(raw: Any, where: str, reading: _Reading, options: CompileOptions) -> int:
    """The listener's port (0 when it is not one); a port turnout itself uses is refused."""
    port = integer(raw)
    if port is None or not 1 <= port <= 65535:
        reading.reject("UnsupportedValue", f"{where}.port: must be a port number 1-65535")
        return 0
    elif port in (options.http_port, options.https_port):
        flag = "--http-port" if port == options.http_port else "--https-port"
        reading.reject(
            "PortUnavailable",
            f"{where}.port: {port} is turnout's {flag}, where the Ingress, HTTPProxy, "
            "IngressRoute and Route objects are served; choose another port for this listener",
        )
    elif (reserved := dict(options.reserved_ports).get(port)) is not None:
        reading.reject(
            "PortUnavailable",
            f"{where}.port: {port} is turnout's {reserved}; choose another port for this listener",
        )
    return port


def _allowed_namespaces(
    allowed: Mapping[str, Any], where: str, reading: _Reading
) -> tuple[str, LabelSelector | None]:
    """`allowedRoutes.namespaces`: `from` and, with `Selector`, the label selector."""
    namespaces = mapping(allowed.get("namespaces"))
    namespaces_from = text(namespaces.get("from")) or "Same"
    selector: LabelSelector | None = None
    if namespaces_from not in ("Same", "All", "Selector"):
        reading.reject(
            "UnsupportedValue",
            f"{where}.allowedRoutes.namespaces.from: {namespaces_from!r} is not Same, All or "
            "Selector",
        )
        namespaces_from = "Same"
    elif namespaces_from == "Selector":
        if namespaces.get("selector") is None:
            reading.reject(
                "UnsupportedValue",
                f"{where}.allowedRoutes.namespaces.selector: required with from: Selector",
            )
        selector = _selector(
            namespaces.get("selector"), f"{where}.allowedRoutes.namespaces.selector", reading
        )
    return namespaces_from, selector


def read_listener(
    gateway: KubeObject,
    index: int,
    raw: Any,
    *,
    options: CompileOptions,
    secrets: SecretResolver,
    grants: ReferenceGrants,
) -> GatewayListener:
    """One listener, checked on its own (everything the API server's schema would refuse is a
    listener condition here, since files are not validated by an API server)."""
    where = f"spec.listeners[{index}]"
    spec = mapping(raw)
    reading = _Reading()
    name = text(spec.get("name")) or f"(listener {index})"
    if text(spec.get("name")) is None:
        reading.reject("UnsupportedValue", f"{where}.name: a listener needs a name")
    protocol = text(spec.get("protocol")) or ""
    port = _port(spec.get("port"), where, reading, options)
    if protocol not in SUPPORTED_PROTOCOLS:
        reading.reject(
            "UnsupportedProtocol",
            f"{where}.protocol: {protocol or '(none)'} is not supported; turnout serves "
            + ", ".join(SUPPORTED_PROTOCOLS),
        )
    hostname = _hostname(spec.get("hostname"), where, reading)
    if protocol == "TCP" and spec.get("hostname") is not None:
        reading.reject("UnsupportedValue", f"{where}.hostname: a TCP listener has no hostname")
        hostname = None
    tls = mapping(spec.get("tls")) if spec.get("tls") is not None else None
    tls_mode: str | None = None
    termination: TLSTermination | None = None
    if protocol in ("HTTP", "TCP") and tls is not None:
        reading.reject("UnsupportedValue", f"{where}.tls: must not be set for {protocol}")
    elif protocol in ("HTTPS", "TLS"):
        mode = (tls or {}).get("mode")
        tls_mode = "Terminate" if mode is None else text(mode)
        if protocol == "TLS" and (tls is None or mode is None):
            reading.reject("UnsupportedValue", f"{where}.tls.mode: a TLS listener needs a mode")
        elif tls_mode not in ("Terminate", "Passthrough"):
            reading.reject(
                "UnsupportedValue", f"{where}.tls.mode: {mode!r} is not Terminate or Passthrough"
            )
        elif protocol == "HTTPS" and tls_mode != "Terminate":
            reading.reject(
                "UnsupportedValue",
                f"{where}.tls.mode: an HTTPS listener terminates TLS; Passthrough is only for "
                "TLS listeners (with TLSRoutes)",
            )
        elif tls_mode == "Terminate":
            termination = _certificate(gateway, tls or {}, where, reading, secrets, grants)
    allowed = mapping(spec.get("allowedRoutes"))
    namespaces_from, selector = _allowed_namespaces(allowed, where, reading)
    kinds, invalid_kinds = _route_kinds(protocol, allowed.get("kinds"), where, reading)
    return GatewayListener(
        gateway=gateway,
        index=index,
        name=name,
        hostname=hostname,
        port=port,
        protocol=protocol,
        tls_mode=tls_mode,
        tls=termination,
        namespaces_from=namespaces_from,
        selector=selector,
        kinds=kinds,
        invalid_kinds=invalid_kinds,
        kinds_explicit=bool(sequence(allowed.get("kinds"))),
        not_accepted=reading.not_accepted,
        unresolved=reading.unresolved,
    )


# The Gateway CRD's maxItems on spec.listeners.
MAX_LISTENERS = 64


def read_listeners(
    gateway: KubeObject,
    *,
    options: CompileOptions,
    secrets: SecretResolver,
    grants: ReferenceGrants,
) -> list[GatewayListener]:
    raw_listeners = sequence(mapping(gateway.spec).get("listeners"))
    out = [
        read_listener(gateway, i, raw, options=options, secrets=secrets, grants=grants)
        for i, raw in enumerate(raw_listeners[:MAX_LISTENERS])
    ]
    if len(raw_listeners) > MAX_LISTENERS:
        # The API server refuses the whole Gateway: none of its listeners is accepted.
        message = (
            f"spec.listeners: must have at most {MAX_LISTENERS} items, got {len(raw_listeners)}"
        )
        out = [_replace(lst, not_accepted=("UnsupportedValue", message)) for lst in out]
    seen: dict[str, int] = {}
    for i, listener in enumerate(out):
        if listener.name in seen and listener.not_accepted is None:
            out[i] = _replace(
                listener,
                not_accepted=(
                    "UnsupportedValue",
                    f"{listener.field}.name: {listener.name!r} is also the name of "
                    f"spec.listeners[{seen[listener.name]}]; listener names must be unique",
                ),
            )
        seen.setdefault(listener.name, i)
    return out


def _replace(listener: GatewayListener, **changes: Any) -> GatewayListener:
    from dataclasses import replace

    return replace(listener, **changes)


def _hostname_key(listener: GatewayListener) -> str:
    return listener.hostname or "*"


def _incompatible(
    a: GatewayListener, b: GatewayListener, *, across: bool
) -> tuple[str, str] | None:
    """How `a` conflicts with `b` on the same port, or None when they can share it. `across`: `b`
    belongs to another (older) Gateway. Within one Gateway listeners are distinct when their
    hostnames differ, and a request goes to the most specific one (the spec's listener
    isolation). Across Gateways that rule would let a newer Gateway take names an older one
    serves (a `*.example.com` listener would take `pay.example.com` from a listener without
    hostname), so there the hostnames must not intersect at all (no hostname intersects every
    hostname)."""
    if _PORT_CLASS[a.protocol] != _PORT_CLASS[b.protocol]:
        return (
            "ProtocolConflict",
            f"port {a.port} is also used by {b.protocol} listener {b.name!r} of Gateway "
            f"{b.gateway.namespace}/{b.gateway.name}; listeners sharing a port must use "
            "compatible protocols (HTTP, or HTTPS and TLS, or one TCP)",
        )
    shown = "no hostname" if a.hostname is None else f"hostname {a.hostname}"
    if a.protocol == "TCP" or _hostname_key(a) == _hostname_key(b):
        return (
            "HostnameConflict",
            f"port {a.port} with {shown} is also used by listener {b.name!r} of Gateway "
            f"{b.gateway.namespace}/{b.gateway.name}",
        )
    if across and intersect(a.hostname, b.hostname) is not None:
        theirs = "no hostname" if b.hostname is None else f"hostname {b.hostname}"
        return (
            "HostnameConflict",
            f"port {a.port} with {shown} overlaps listener {b.name!r} ({theirs}) of the older "
            f"Gateway {b.gateway.namespace}/{b.gateway.name}; listeners of different Gateways "
            "on one port must not share any hostname",
        )
    return None


def resolve_conflicts(gateways: Sequence[Sequence[GatewayListener]]) -> list[list[GatewayListener]]:
    """Marks Conflicted listeners. `gateways` is oldest first; a listener not accepted on its
    own takes no part (it binds nothing)."""
    taken: list[GatewayListener] = []  # accepted listeners of older Gateways
    out: list[list[GatewayListener]] = []
    for listeners in gateways:
        result = list(listeners)
        candidates = [i for i, lst in enumerate(result) if lst.not_accepted is None]
        for i in candidates:
            listener = result[i]
            conflict = next(
                (
                    c
                    for other in taken
                    if other.port == listener.port
                    and (c := _incompatible(listener, other, across=True)) is not None
                ),
                None,
            )
            if conflict is None:
                conflict = next(
                    (
                        c
                        for j in candidates
                        if j != i
                        and result[j].port == listener.port
                        and (c := _incompatible(listener, result[j], across=False)) is not None
                    ),
                    None,
                )
            if conflict is not None:
                result[i] = _replace(listener, conflict=conflict)
        result = mark_overlapping_tls(result)
        # Only the listeners that bind their port keep it from younger Gateways.
        taken.extend(
            lst for lst in result if lst.not_accepted is None and lst.conflict is None and lst.port
        )
        out.append(result)
    return out


def mark_overlapping_tls(listeners: Sequence[GatewayListener]) -> list[GatewayListener]:
    """Sets `overlapping` on the TLS listeners (HTTPS, TLS) of one Gateway that share a port
    with another whose hostname intersects theirs (`foo.example.com` and `*.example.com`; no
    hostname intersects all). The spec (`ListenerConditionOverlappingTLSConfig`): implementations
    MUST detect such overlaps, as a client may reuse a connection set up for one listener's name
    for the other's (HTTP/2 connection coalescing). Listeners that are not accepted or are
    Conflicted (an identical hostname) take no part. The condition informs: turnout still serves
    both listeners, each request or connection by the most specific listener hostname."""
    tls = [
        lst
        for lst in listeners
        if lst.protocol in ("HTTPS", "TLS") and lst.not_accepted is None and lst.conflict is None
    ]
    out = list(listeners)
    for i, listener in enumerate(out):
        if listener not in tls:
            continue
        others = [
            other
            for other in tls
            if other is not listener
            and other.port == listener.port
            and intersect(listener.hostname, other.hostname) is not None
        ]
        if others:
            names = ", ".join(f"{o.name!r} ({o.hostname or 'no hostname'})" for o in others)
            out[i] = _replace(
                listener,
                overlapping=f"port {listener.port}: hostname "
                f"{listener.hostname or '(none)'} overlaps the TLS listener(s) {names}",
            )
    return out

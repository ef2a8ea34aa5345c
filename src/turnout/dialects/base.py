"""What a dialect is: a pure front end from store objects to graph pieces and statuses.

A compile runs in two phases so that hostname ownership can span dialects:
1. `claims()`: every root that wants a hostname on a listener says so;
2. the graph builder decides one owner per (listener, hostname): the oldest object wins;
3. `compile()`: each dialect builds its virtual hosts for the hostnames it owns, and a status for
   every object of its kinds, reporting lost hostnames in its own status shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from turnout.graph.model import ListenerProtocol, TCPProxy, VirtualHost
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot

# The default listeners that dialects without their own listener model (everything but the
# Gateway API) attach virtual hosts to. Names follow Contour's.
HTTP_LISTENER = "ingress_http"
HTTPS_LISTENER = "ingress_https"

DEFAULT_GATEWAY_CONTROLLER_NAME = "turnout.dev/gateway-controller"


@dataclass(frozen=True, slots=True, order=True)
class IssuerDiscovery:
    """What OpenID discovery (`<issuer>/.well-known/openid-configuration`) answered for one
    issuer: its `jwks_uri`, or why there is none (`error`). Both None: no answer yet. Found by
    the control plane (turnout.sources.oidc) outside the compile, which only reads it."""

    issuer: str
    jwks_uri: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CompileOptions:
    address: str = "127.0.0.1"
    http_port: int = 8080
    https_port: int = 8443
    # Namespaces where roots (HTTPProxy/IngressRoute with a virtualhost) may live; empty: all.
    root_namespaces: tuple[str, ...] = ()
    # Contour's disablePermitInsecure: TLS hosts answer plain HTTP with a redirect, always.
    disable_permit_insecure: bool = False
    # The Ingress class this turnout serves (Ingress, HTTPProxy and IngressRoute class fields).
    ingress_class_name: str = "turnout"
    # Contour's fallback certificate, "namespace/name" of a TLS Secret ("" for none): served to
    # TLS clients without SNI (or with a name no host serves) for the hosts that enable it.
    fallback_certificate: str = ""
    # Contour's enableExternalNameService: route to ExternalName Services (DNS clusters). Off by
    # default, as in Contour: such a Service can point Envoy anywhere (GHSA-5ph6-qq5x-7jwc).
    enable_external_name_service: bool = False
    # Skipper's -kubernetes-routegroup-class: a regular expression (searched, as Go's
    # MatchString does) that a RouteGroup's `zalando.org/routegroup.class` annotation must match;
    # RouteGroups without the annotation are always served. Skipper's default.
    routegroup_class: str = "skipper"
    # The Gateway API controllerName this turnout implements: GatewayClasses naming it (and their
    # Gateways and routes) are turnout's; all others belong to another implementation.
    gateway_controller_name: str = DEFAULT_GATEWAY_CONTROLLER_NAME
    # Other ports turnout and its Envoy use on `address`, with the flag that sets each (admin,
    # xDS, Envoy admin): a Gateway listener there could not bind (PortUnavailable).
    reserved_ports: tuple[tuple[int, str], ...] = ()
    # OpenID discovery results for the issuers RouteGroups' `jwtValidation` filters name, sorted
    # by issuer; an issuer missing here has no answer yet. Part of the compile's input, so the
    # compile stays a pure function of snapshot and options.
    issuer_discovery: tuple[IssuerDiscovery, ...] = ()

    def discovery(self, issuer: str) -> IssuerDiscovery | None:
        for found in self.issuer_discovery:
            if found.issuer == issuer:
                return found
        return None


@dataclass(frozen=True, slots=True)
class HostClaim:
    listener: str
    hostname: str  # lower case
    claimant: KubeObject


@dataclass(frozen=True, slots=True)
class Ownership:
    """The owner of each (listener, hostname) and the claims that lost to it."""

    owners: Mapping[tuple[str, str], KubeObject] = field(default_factory=dict)

    def owner(self, listener: str, hostname: str) -> KubeObject | None:
        return self.owners.get((listener, hostname.lower()))

    def owns(self, obj: ObjectRef, listener: str, hostname: str) -> bool:
        owner = self.owner(listener, hostname)
        return owner is not None and owner.ref == obj


@dataclass(frozen=True, slots=True)
class CompileContext:
    options: CompileOptions
    ownership: Ownership
    backends: BackendResolver
    secrets: SecretResolver


@dataclass(frozen=True, slots=True)
class ListenerDecl:
    """A listener a dialect brings itself (Gateway API listeners bind their own ports), bound on
    `CompileOptions.address`. The dialect's virtual hosts and TCP proxies name it."""

    name: str
    port: int
    protocol: ListenerProtocol


@dataclass(frozen=True, slots=True)
class DialectOutput:
    virtual_hosts: tuple[tuple[str, VirtualHost], ...] = ()  # (listener name, vhost)
    statuses: tuple[ObjectStatus, ...] = ()
    tcp_proxies: tuple[tuple[str, TCPProxy], ...] = ()  # (listener name, SNI-routed TCP proxy)
    # Listeners of the dialect's own, besides the shared HTTP_LISTENER and HTTPS_LISTENER.
    listeners: tuple[ListenerDecl, ...] = ()


class Dialect(Protocol):
    name: str
    # The (apiVersion, kind) pairs this dialect reads; anything else in its groups is reported.
    kinds: frozenset[tuple[str, str]]

    def claims(self, snapshot: Snapshot, options: CompileOptions) -> Iterable[HostClaim]: ...

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput: ...


def ownership_from_claims(claims: Iterable[HostClaim]) -> Ownership:
    owners: dict[tuple[str, str], KubeObject] = {}
    for claim in claims:
        key = (claim.listener, claim.hostname.lower())
        current = owners.get(key)
        if current is None or claim.claimant.age_key < current.age_key:
            owners[key] = claim.claimant
    return Ownership(owners)

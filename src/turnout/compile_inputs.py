"""What a compile takes besides the objects: the options every layer may read.

Graph, dialects and the Envoy translator all import this module; it imports nothing of turnout's,
so it sits at the bottom of the layers (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The default listeners that dialects without their own listener model (everything but the
# Gateway API) attach virtual hosts to. Names follow Contour's.
HTTP_LISTENER = "ingress_http"
HTTPS_LISTENER = "ingress_https"

DEFAULT_GATEWAY_CONTROLLER_NAME = "turnout.dev/gateway-controller"

# The local address Envoy connects from when it sends a request back to its own HTTP listener
# (RouteGroup `loopback`): that listener trusts X-Forwarded-For only on connections from it, so a
# looped request keeps the client address the first hop determined and no client can claim one.
# Any 127.0.0.0/8 address is this host's on Linux; this one is used for nothing else.
OWN_HOP_SOURCE_ADDRESS = "127.0.0.84"

# Debian's and Ubuntu's system CA bundle.
DEFAULT_SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"

# From this many routes on, a virtual host is a matcher tree in Envoy (`--matcher-tree-min-routes`,
# docs/benchmarks.md has the measurement behind the default).
DEFAULT_MATCHER_TREE_MIN_ROUTES = 128

# From this many virtual hosts on, a plain HTTP listener gets one route configuration per host,
# chosen by a scope on the Host (`--scoped-routes-min-hosts`; docs/benchmarks.md, "Envoy's apply
# time for a one-host change").
DEFAULT_SCOPED_ROUTES_MIN_HOSTS = 1000

# From this many routes on, a virtual host of a plain HTTP listener is split into scopes by a
# leading path directory (`--split-host-min-routes`; docs/data-plane.md, "One big host: path
# scopes").
DEFAULT_SPLIT_HOST_MIN_ROUTES = 2048


class ListenerProtocol(enum.Enum):
    HTTP = "HTTP"
    HTTPS = "HTTPS"
    TLS_PASSTHROUGH = "TLS"
    TCP = "TCP"


class EscapedSlashes(enum.Enum):
    """What Envoy does with `%2F` and `%5C` (any hex case) in a request's path: the values of
    the HTTP connection manager's `path_with_escaped_slashes_action`, named by the flag's
    choices."""

    KEEP_UNCHANGED = "keep"
    REJECT_REQUEST = "reject"
    UNESCAPE_AND_REDIRECT = "redirect"
    UNESCAPE_AND_FORWARD = "forward"


@dataclass(frozen=True, slots=True)
class PathNormalization:
    """How Envoy rewrites a request's path before routing, beyond RFC 3986 normalisation (always
    on). The translator configures every HTTP connection manager with it and the evaluator
    follows it, so both read one value.

    `merge_slashes`: `//a` is `/a` (Contour's default; `--disable-merge-slashes` turns it off).
    `escaped_slashes`: redirect by default, so that a client sending `/%2Fadmin` is sent to
    `/admin`, where the policies of `/admin` apply, rather than being routed by `/` to a backend
    that decodes it to `//admin`.
    """

    merge_slashes: bool = True
    escaped_slashes: EscapedSlashes = EscapedSlashes.UNESCAPE_AND_REDIRECT


# What turnout does unless told otherwise (a module constant: a shared default argument).
DEFAULT_PATH_NORMALIZATION = PathNormalization()


@dataclass(frozen=True, slots=True)
class ListenerDecl:
    """A listener a dialect brings itself (Gateway API listeners bind their own ports), bound on
    `CompileOptions.address`. The dialect's virtual hosts and TCP proxies name it."""

    name: str
    port: int
    protocol: ListenerProtocol


@dataclass(frozen=True, slots=True, order=True)
class IssuerDiscovery:
    """What OpenID discovery (`<issuer>/.well-known/openid-configuration`) answered for one
    issuer: its `jwks_uri`, or why there is none (`error`). Both None: no answer yet. Found by
    the control plane (turnout.sources.oidc) outside the compile, which only reads it."""

    issuer: str
    jwks_uri: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, order=True)
class DnsAnswer:
    """What a DNS name of an upstream (an ExternalName Service, a RouteGroup `network` or `lb`
    backend) resolved to on turnout's host: its `addresses`, or why it did not resolve
    (`error`). Found by the controller (turnout.sources.local_addresses) outside the compile."""

    name: str
    addresses: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RateLimitService:
    """The global rate limit service the operator runs (Contour's `rateLimitService`), which
    Envoy asks over gRPC (`envoy.service.ratelimit.v3.RateLimitService`, HTTP/2 in clear text)
    whether a request's descriptors are over their limit. turnout runs none itself.

    `domain`: the rate limit domain every request names (Contour's default, `contour`).
    `fail_open`: let requests through when the service does not answer in time or fails;
    otherwise they are answered 500. `x_ratelimit_headers`: Envoy adds the
    `X-RateLimit-Limit/-Remaining/-Reset` headers the service's answer allows.
    `resource_exhausted`: a limited gRPC request gets RESOURCE_EXHAUSTED instead of UNAVAILABLE.
    `timeout_s`: how long Envoy waits for an answer."""

    host: str
    port: int
    domain: str = "contour"
    fail_open: bool = False
    x_ratelimit_headers: bool = False
    resource_exhausted: bool = False
    timeout_s: float = 0.1

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("a rate limit service needs a host")
        if not 0 < self.port < 65536:
            raise ValueError(f"rate limit service port must be in 1-65535, got {self.port}")
        if not self.domain:
            raise ValueError("a rate limit domain must not be empty")
        if not self.timeout_s > 0:
            raise ValueError(f"a rate limit timeout must be positive, got {self.timeout_s}")


DEFAULT_MAX_INCLUDE_REVISITS = 2_048


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
    # Files mode: no other controller reads these objects, so an Ingress without any class is
    # turnout's (as Contour with no class configured takes it) unless a default IngressClass
    # decides otherwise or `ingress_class_name` names another class. Off for a cluster, where
    # only the default IngressClass gives a classless Ingress to a controller.
    classless_ingress_is_ours: bool = False
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
    # Every address of this machine (its interfaces', its host name's), sorted: no upstream may
    # reach a reserved port on any of them, not only on `address` and loopback. Found by the
    # controller outside the compile, and refreshed.
    local_addresses: tuple[str, ...] = ()
    # What the DNS names of DNS-resolved upstreams resolved to, sorted by name: a name resolving
    # to this host or a link-local address is refused. A name missing here has no answer yet.
    dns_answers: tuple[DnsAnswer, ...] = ()
    # `--rate-limit-service`: without one, global rate limit policies are refused (Envoy would
    # have no one to ask).
    rate_limit_service: RateLimitService | None = None
    # `--max-include-revisits`: how much one root's include (HTTPProxy) or delegation
    # (IngressRoute) walk may do again: each object it reaches again on another path costs 1 plus
    # its routes. Distinct objects cost linearly and are not counted; shared children are what
    # grows exponentially.
    max_include_revisits: int = DEFAULT_MAX_INCLUDE_REVISITS
    # `--ingress-status-address`: what Ingress and RouteGroup `status.loadBalancer` name (an IP
    # or a hostname: the Envoy Service's external address); "": `address`.
    status_address: str = ""
    # The Envoy Service's `status.loadBalancer.ingress[]` addresses (`ip`, else `hostname`), in
    # its order (`--envoy-service`): read by the controller from the store, outside the compile.
    service_addresses: tuple[str, ...] = ()

    @property
    def load_balancer_addresses(self) -> tuple[str, ...]:
        """What Ingress and RouteGroup `status.loadBalancer` and Gateway `status.addresses`
        name: the flag, else the Envoy Service's load balancer, else `address` unless it is
        the unspecified address (`0.0.0.0`, `::`: where Envoy binds, no address a client can
        use; as Contour, nothing is written until the Service has one)."""
        if self.status_address:
            return (self.status_address,)
        if self.service_addresses:
            return self.service_addresses
        return () if self.address in ("0.0.0.0", "::") else (self.address,)

    def dns_answer(self, name: str) -> DnsAnswer | None:
        for found in self.dns_answers:
            if found.name == name:
                return found
        return None

    def discovery(self, issuer: str) -> IssuerDiscovery | None:
        for found in self.issuer_discovery:
            if found.issuer == issuer:
                return found
        return None

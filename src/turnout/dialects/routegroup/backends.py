"""RouteGroup backends onto clusters (Skipper's `routegroup.go: applyBackend`).

- `service`: the Service port's ready endpoints (EDS), in the RouteGroup's namespace. No ready
  endpoint: the route answers 502 "no endpoints", as Skipper's shunt route for it does.
- `lb`: a cluster of the listed endpoints (`scheme://ip:port`), balanced by `algorithm`.
- `network`: a cluster of the address; a DNS name is resolved by Envoy. The Host header sent is
  the address's host, as Skipper does unless `preserveHost("true")`.
- `shunt`: no upstream (404 unless a filter answers).
- `loopback`: Envoy's own HTTP listener as the upstream, so that the request, changed by the
  route's filters, is routed again (at most once, see LOOPBACK_HEADER).
- `dynamic`, `forward`: not expressible in Envoy (a target chosen per request, Skipper's
  `-forward-backend-url`); the route is refused with a status saying so.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from turnout.compile_inputs import OWN_HOP_SOURCE_ADDRESS, CompileOptions
from turnout.dialects.routegroup.spec import (
    ACCEPTED,
    RESOLVED_REFS,
    BackendSpec,
    BackendType,
    go_url_error,
)
from turnout.graph.model import (
    Cluster,
    Endpoint,
    LoadBalancerStrategy,
    UpstreamProtocol,
    UpstreamSettings,
)
from turnout.graph.services import (
    BackendResolver,
    Unresolved,
    endpoint_reserved_ports,
    external_name_phrase,
    forbidden_dns_name,
    forbidden_endpoint,
    own_addresses,
)
from turnout.store import Snapshot

BACKEND_PROTOCOL_ANNOTATION = "zalando.org/skipper-backend-protocol"

# Skipper's algorithms onto Envoy's. weightedRoundRobin adjusts weights from Skipper's passive
# health check, which Envoy does not have: round robin is what it does with equal weights.
LB_STRATEGIES: Mapping[str, LoadBalancerStrategy] = {
    "": LoadBalancerStrategy.ROUND_ROBIN,  # -kubernetes-default-lb-algorithm's default
    "roundRobin": LoadBalancerStrategy.ROUND_ROBIN,
    "random": LoadBalancerStrategy.RANDOM,
    "consistentHash": LoadBalancerStrategy.REQUEST_HASH,
    "powerOfRandomNChoices": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
    "weightedRoundRobin": LoadBalancerStrategy.ROUND_ROBIN,
    "leastRequests": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
}

_SCHEMES: Mapping[str, tuple[UpstreamProtocol, int]] = {
    "http": (UpstreamProtocol.HTTP, 80),
    "https": (UpstreamProtocol.TLS, 443),
    "h2c": (UpstreamProtocol.H2C, 80),
}

# Contour's blocklist, used by the resolver for ExternalName Services: names that lead Envoy to
# itself (its admin interface included).
_LOCALHOST_NAMES = frozenset({"localhost", "localhost.localdomain", "local.projectcontour.io"})


@dataclass(frozen=True, slots=True)
class Upstream:
    """A backend that forwards to a cluster."""

    cluster: Cluster
    host_rewrite: str | None = None  # the Host header a network backend sends
    no_endpoints: bool = False
    loopback: bool = False


# Marks a request a loopback route sent back to Envoy's own HTTP listener: a loopback route meets
# it at most once (Skipper allows 9 loops; each would be one more copy of every loopback route).
LOOPBACK_HEADER = "x-turnout-loopback"
LOOPBACK_LIMIT_STATUS = 500


def loopback_cluster(resolver: BackendResolver, options: CompileOptions) -> Cluster:
    """Envoy's own HTTP listener, as an upstream: a `loopback` backend sends the request there
    with the route's filters applied, and it is routed again, as Skipper's <loopback> does."""
    address = options.address
    if address in ("0.0.0.0", ""):
        address = "127.0.0.1"
    elif address == "::":
        address = "::1"
    # From a source address of its own, which the listener trusts to report the client in
    # X-Forwarded-For (IPv4 loopback only: IPv6 has no second loopback address to tell it by).
    source = OWN_HOP_SOURCE_ADDRESS if _ipv4_loopback(address) else None
    return resolver.static(
        "turnout",
        "loopback",
        options.http_port,
        endpoints=(Endpoint(address, options.http_port),),
        own=True,
        source_address=source,
    )


def _ipv4_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.version == 4 and ip.is_loopback


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a backend cannot be forwarded to, and what the route answers instead."""

    type: str  # the condition it falsifies
    reason: str
    message: str
    status: int


@dataclass(frozen=True, slots=True)
class Target:
    protocol: UpstreamProtocol
    host: str
    port: int


def parse_target(url: str, options: CompileOptions | None = None) -> Target | str:
    """scheme://host[:port] read as Skipper reads backend URLs; a string says what is wrong.

    With `options`, also refuses what would make a tenant's backend one of turnout's or Envoy's
    own interfaces (see `forbidden_address`)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        return f'"{url}" is not a URL: {go_url_error(url, e)}'
    scheme = _SCHEMES.get(parts.scheme)
    if parts.scheme == "fastcgi":
        return f'"{url}": FastCGI backends are not supported: Envoy has no FastCGI upstream'
    if scheme is None:
        return f'"{url}": scheme "{parts.scheme}" is not supported (http, https or h2c)'
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return f'"{url}" has no host'
    if parts.path not in ("", "/") or parts.query:
        return f'"{url}" has a path or query, which a backend address cannot have'
    if host in _LOCALHOST_NAMES:
        return f'"{url}" points to localhost, which is not allowed'
    if port == 0:
        # Go's url.Parse takes it; dialing it fails, and Envoy refuses the endpoint.
        return f'"{url}": port 0 is not a port a backend can listen on'
    target = Target(scheme[0], host, port if port is not None else scheme[1])
    if options is not None and (forbidden := forbidden_address(target, options)) is not None:
        return f'"{url}": {forbidden}'
    return target


def forbidden_address(target: Target, options: CompileOptions) -> str | None:
    """Why a backend may not be this IP address and port; None when it may.

    Skipper trusts whoever writes RouteGroups; turnout serves many tenants from one Envoy, so
    the graph's rule for every endpoint (`forbidden_endpoint`) applies here too, with the ports
    known before the Gateway listeners are (the graph checks those once assembled).
    """
    reserved = endpoint_reserved_ports(options)
    if not is_ip(target.host):
        # The port only: what the name resolves to is checked on the graph (see the function).
        return forbidden_dns_name(target.host, target.port, reserved, None)
    return forbidden_endpoint(target.host, target.port, reserved, own_addresses(options))


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def settings_for(
    backend: BackendSpec, protocol: UpstreamProtocol, upstream: Mapping[str, object]
) -> UpstreamSettings:
    """The backend's cluster settings: its algorithm, then what the route's filters set
    (fadeIn, consecutiveBreaker, consistentHash...)."""
    settings = UpstreamSettings(protocol=protocol, lb_strategy=LB_STRATEGIES[backend.algorithm])
    known = {f.name for f in dataclasses.fields(UpstreamSettings)}
    overrides = {k: v for k, v in upstream.items() if k in known}
    return dataclasses.replace(settings, **overrides) if overrides else settings  # type: ignore[arg-type]


def resolve(
    snapshot: Snapshot,
    resolver: BackendResolver,
    namespace: str,
    rg_name: str,
    annotations: Mapping[str, str],
    backend: BackendSpec,
    upstream: Mapping[str, object],
    options: CompileOptions,
) -> Upstream | Failure | None:
    """The cluster of a forwarding backend; None for a shunt."""
    where = _Where(backend)
    if backend.type is BackendType.SHUNT:
        return None
    if backend.type is BackendType.LOOPBACK:
        return Upstream(loopback_cluster(resolver, options), loopback=True)
    if backend.type in (BackendType.DYNAMIC, BackendType.FORWARD):
        return Failure(
            ACCEPTED,
            "BackendNotSupported",
            f"{where()}: {backend.type.value} backends are not supported: "
            f"{_UNSUPPORTED[backend.type]}; the route answers 500",
            500,
        )
    if backend.type is BackendType.SERVICE:
        return _service(snapshot, resolver, namespace, annotations, backend, upstream, where)
    if backend.type is BackendType.NETWORK:
        target = parse_target(backend.address, options)
        if isinstance(target, str):
            return Failure(ACCEPTED, "AddressNotValid", f"{where('.address')}: {target}", 500)
        settings = settings_for(backend, target.protocol, upstream)
        cluster = _static_cluster(resolver, namespace, rg_name, backend, [target], settings)
        default_port = _SCHEMES[urlsplit(backend.address).scheme][1]
        host = target.host if target.port == default_port else f"{target.host}:{target.port}"
        return Upstream(cluster, host_rewrite=host)
    return _lb(resolver, namespace, rg_name, backend, upstream, where, options)


@dataclass(frozen=True, slots=True)
class _Where:
    """How a message names a backend: its field (and a field below it) and its name."""

    backend: BackendSpec

    def __call__(self, below: str = "") -> str:
        return f'{self.backend.field}{below} (backend "{self.backend.name}")'


_UNSUPPORTED: Mapping[BackendType, str] = {
    BackendType.DYNAMIC: "Envoy has no upstream chosen per request by filters or the Host header "
    "(that would make it an open proxy)",
    BackendType.FORWARD: "turnout has no -forward-backend-url",
}


def _service(
    snapshot: Snapshot,
    resolver: BackendResolver,
    namespace: str,
    annotations: Mapping[str, str],
    backend: BackendSpec,
    upstream: Mapping[str, object],
    where: _Where,
) -> Upstream | Failure:
    protocol = (
        UpstreamProtocol.H2C
        if annotations.get(BACKEND_PROTOCOL_ANNOTATION) == "h2c"
        else UpstreamProtocol.HTTP
    )
    service = snapshot.get("", "Service", namespace, backend.service_name)
    refused = resolver.refusal(service) if service is not None else None
    if refused is not None:
        return Failure(
            RESOLVED_REFS,
            "ServiceNotSupported",
            f'{where(".serviceName")}: service "{namespace}/{backend.service_name}" '
            f"{external_name_phrase(refused)}; the route answers 502",
            502,
        )
    result = resolver.service(
        namespace,
        backend.service_name,
        backend.service_port,
        settings=settings_for(backend, protocol, upstream),
    )
    if isinstance(result, Unresolved):
        return Failure(
            RESOLVED_REFS,
            result.reason,
            f"{where()}: {result.message}; the route answers 502",
            502,
        )
    # Skipper answers for a Service without endpoints itself: routing depends on them here.
    empty = result.dns_name is None and not resolver.endpoints(result)
    return Upstream(result, no_endpoints=empty)


def _lb(
    resolver: BackendResolver,
    namespace: str,
    rg_name: str,
    backend: BackendSpec,
    upstream: Mapping[str, object],
    where: _Where,
    options: CompileOptions,
) -> Upstream | Failure:
    targets: list[Target] = []
    for i, url in enumerate(backend.endpoints):
        target = parse_target(url, options)
        if isinstance(target, str):
            return Failure(
                ACCEPTED, "EndpointNotValid", f"{where(f'.endpoints[{i}]')}: {target}", 500
            )
        if not is_ip(target.host) and len(backend.endpoints) > 1:
            return Failure(
                ACCEPTED,
                "EndpointNotValid",
                f"{where(f'.endpoints[{i}]')}: {url}: turnout takes a DNS name only as the single "
                "endpoint of an lb backend; list IP addresses, or use one name",
                500,
            )
        targets.append(target)
    protocols = {t.protocol for t in targets}
    if len(protocols) > 1:
        return Failure(
            ACCEPTED,
            "EndpointNotValid",
            f"{where('.endpoints')}: all endpoints of one backend must use one scheme",
            500,
        )
    settings = settings_for(backend, targets[0].protocol, upstream)
    return Upstream(_static_cluster(resolver, namespace, rg_name, backend, targets, settings))


def _static_cluster(
    resolver: BackendResolver,
    namespace: str,
    rg_name: str,
    backend: BackendSpec,
    targets: Sequence[Target],
    settings: UpstreamSettings,
) -> Cluster:
    """The cluster of a backend's targets (all of one scheme): one DNS name that Envoy resolves,
    or IP endpoints."""
    name, port = f"{rg_name}-{backend.name}", targets[0].port
    if len(targets) == 1 and not is_ip(targets[0].host):
        return resolver.static(namespace, name, port, dns_name=targets[0].host, settings=settings)
    endpoints = tuple(Endpoint(str(ipaddress.ip_address(t.host)), t.port) for t in targets)
    return resolver.static(namespace, name, port, endpoints=endpoints, settings=settings)

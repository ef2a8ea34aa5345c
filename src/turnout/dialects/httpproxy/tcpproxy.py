"""HTTPProxy `spec.tcpproxy` and `virtualhost.tls.passthrough`: a root's hostname routed by SNI
to TCP backends on the HTTPS listener (Contour's `processHTTPProxyTCPProxy`).

- With `tls.passthrough: true` the TLS stream reaches the backend untouched (the client sees the
  backend's certificate); with `tls.secretName` Envoy terminates TLS (checking client
  certificates when `clientValidation` asks) and streams the plain bytes. Without either, the
  tcpproxy is `TLSMustBeConfigured`: SNI is the only thing to route a TCP stream by.
- `services` (weights split connections; an unset weight counts 1, as in Contour) or `include`
  (`includes` is Contour's deprecated spelling; `include` wins when both are set) of a non-root
  HTTPProxy whose own `tcpproxy` is used, followed transitively.
- `loadBalancerPolicy.strategy` applies to the clusters (Cookie and RequestHash need an HTTP
  request to hash: ignored with a warning); `healthCheckPolicy` is a TCP connect check, to each
  service's `healthPort` when it sets one.
- Errors are Contour's (`TCPProxyError`: `TLSMustBeConfigured`, `NoServicesAndInclude`,
  `NothingDefined`, `ServiceUnresolvedReference`; `TCPProxyIncludeError`: `IncludeNotFound`,
  `RootIncludesRoot`, `IncludeCreatesCycle`), reported on the proxy of the chain that has the
  problem. Any of them leaves the root unserved on both listeners, as in Contour.
- A root's routes are still served on the HTTP listener (answering 301 to HTTPS unless they
  permit insecure traffic); on the HTTPS listener the hostname belongs to the TCP proxy. A root
  with `passthrough` and no `tcpproxy` serves nothing over TLS.

Seed 001 proposed a `tcp` backend protocol in place of `tcpproxy`; Contour shipped `tcpproxy`.
turnout reads both: `tcp_route.py` turns a root's route to `protocol: tcp` services into the same
TCP proxy. On a tcpproxy service, `protocol: tcp` is plain TCP to the upstream (the default).

`tcpproxy_spec.py` reads `spec.tcpproxy`; this module compiles it, given a `TCPInputs` (what it
reads of the compile in progress), so that it needs nothing of `processor.py`, which calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from turnout.dialects.httpproxy import upstream
from turnout.dialects.httpproxy.health_check import health_port
from turnout.dialects.httpproxy.spec import ParsedProxy, ServiceSpec
from turnout.dialects.httpproxy.status import ProxyStatusAccessor
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD, SERVICE_ERROR
from turnout.dialects.httpproxy.tcpproxy_spec import TCPHealthCheckSpec, TCPProxySpec
from turnout.graph.dialect import CompileContext
from turnout.graph.model import (
    LoadBalancerStrategy,
    TCPHealthCheck,
    TCPProxy,
    TLSTermination,
    UpstreamProtocol,
    UpstreamSettings,
    WeightedCluster,
)
from turnout.graph.services import Unresolved, find_service_port
from turnout.objects import KubeObject
from turnout.store import Snapshot

TCPPROXY_ERROR = "TCPProxyError"
TCPPROXY_INCLUDE_ERROR = "TCPProxyIncludeError"

# Contour's `loadBalancerPolicy`: any other strategy means RoundRobin.
STRATEGIES = {
    "RoundRobin": LoadBalancerStrategy.ROUND_ROBIN,
    "WeightedLeastRequest": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
    "Random": LoadBalancerStrategy.RANDOM,
}
HASH_STRATEGIES = ("Cookie", "RequestHash")

# Contour's defaults for a TCP health check field left at 0 (`internal/envoy/healthcheck.go`).
HEALTH_INTERVAL_S = 10.0
HEALTH_TIMEOUT_S = 2.0
HEALTH_UNHEALTHY = 3
HEALTH_HEALTHY = 2


class Passthrough:
    """What `_tls` answers for `tls.passthrough`: no termination, the stream goes through."""


PASSTHROUGH = Passthrough()


@dataclass(frozen=True, slots=True)
class TCPInputs:
    """The part of one compile that a TCP proxy reads: the proxies by key, their status
    accessors (where its errors go) and the proxies reached so far (an include adds its target),
    both shared with the processor's walk; `service` looks a Service up by (namespace, name) (the
    processor records what each root read)."""

    snapshot: Snapshot
    ctx: CompileContext
    proxies: Mapping[tuple[str, str], ParsedProxy]
    status: Mapping[tuple[str, str], ProxyStatusAccessor]
    reached: set[tuple[str, str]]
    service: Callable[[str, str], KubeObject | None]


def tcp_health_check(spec: TCPHealthCheckSpec | None) -> TCPHealthCheck | None:
    if spec is None:
        return None
    return TCPHealthCheck(
        interval_s=float(spec.interval_seconds) or HEALTH_INTERVAL_S,
        timeout_s=float(spec.timeout_seconds) or HEALTH_TIMEOUT_S,
        unhealthy_threshold=spec.unhealthy_threshold or HEALTH_UNHEALTHY,
        healthy_threshold=spec.healthy_threshold or HEALTH_HEALTHY,
    )


def compile_tcpproxy(
    inputs: TCPInputs,
    root: ParsedProxy,
    host: str,
    tls: TLSTermination | None,
    passthrough: bool,
) -> TCPProxy | None:
    """The root's TCP proxy for `host`, or None with the error reported (the root is then not
    served at all)."""
    tls_error = compile_tcpproxy_tls_error(tls, passthrough)
    if tls_error is not None:
        inputs.status[root.key].add_error(*tls_error)
        return None
    clusters = _clusters(inputs, root)
    if clusters is None:
        return None
    return TCPProxy(name=host, hostname=host, clusters=clusters, owner=root.obj.ref, tls=tls)


def compile_tcpproxy_tls_error(
    tls: TLSTermination | None, passthrough: bool
) -> tuple[str, str, str] | None:
    """SNI is the only thing to route a TCP stream by: TLS must be terminated or passed through."""
    if tls is None and not passthrough:
        return (
            TCPPROXY_ERROR,
            "TLSMustBeConfigured",
            "Spec.TCPProxy requires that either Spec.TLS.Passthrough or Spec.TLS.SecretName be set",
        )
    return None


def _clusters(inputs: TCPInputs, root: ParsedProxy) -> tuple[WeightedCluster, ...] | None:
    """The clusters of `root`'s tcpproxy, following its includes; None on an error. A loop, not
    recursion: a chain of includes can be as long as there are proxies."""
    visited: list[ParsedProxy] = []
    seen: set[tuple[str, str]] = set()
    proxy = root
    while True:
        st = inputs.status[proxy.key]
        tcp = proxy.spec.tcpproxy
        if tcp is None:
            # Reached through an include: Contour accepts a target without a tcpproxy and then
            # proxies nothing, which is surely not what the includer meant.
            st.add_error(
                TCPPROXY_ERROR,
                "NothingDefined",
                "included by a tcpproxy, but spec.tcpproxy is not set: either services or "
                "inclusion must be specified",
            )
            return None
        visited.append(proxy)
        seen.add(proxy.key)
        if tcp.services and tcp.include is not None:
            st.add_error(
                TCPPROXY_ERROR,
                "NoServicesAndInclude",
                "cannot specify services and include in the same httpproxy",
            )
            return None
        strategy = tcp.strategy
        if strategy in HASH_STRATEGIES:
            st.add_warning(
                TCPPROXY_ERROR,
                IGNORED_FIELD,
                f'ignoring field "Spec.TCPProxy.LoadBalancerPolicy"; {strategy} load balancer '
                "policy is not supported for TCPProxies",
            )
        if tcp.services:
            return _service_clusters(inputs, proxy, tcp)
        inc = tcp.include
        if inc is None:
            st.add_error(
                TCPPROXY_ERROR, "NothingDefined", "either services or inclusion must be specified"
            )
            return None
        namespace = inc.namespace or proxy.obj.namespace
        dest = inputs.proxies.get((namespace, inc.name))
        if dest is None:
            st.add_error(
                TCPPROXY_INCLUDE_ERROR,
                "IncludeNotFound",
                f"include {namespace}/{inc.name} not found",
            )
            return None
        if dest.is_root:
            st.add_error(
                TCPPROXY_INCLUDE_ERROR,
                "RootIncludesRoot",
                f"root httpproxy cannot include another root httpproxy ({namespace}/{inc.name})",
            )
            return None
        inputs.reached.add(dest.key)
        if dest.key in seen:
            chain = " -> ".join(f"{v.obj.namespace}/{v.obj.name}" for v in (*visited, dest))
            st.add_error(
                TCPPROXY_INCLUDE_ERROR, "IncludeCreatesCycle", f"include creates a cycle: {chain}"
            )
            return None
        if not dest.schema_valid:
            return None  # its own status says why
        proxy = dest


def _service_clusters(
    inputs: TCPInputs, proxy: ParsedProxy, tcp: TCPProxySpec
) -> tuple[WeightedCluster, ...] | None:
    settings = UpstreamSettings(
        protocol=UpstreamProtocol.TCP,
        lb_strategy=STRATEGIES.get(tcp.strategy, LoadBalancerStrategy.ROUND_ROBIN),
        tcp_health_check=tcp_health_check(tcp.health_check),
    )
    out: list[WeightedCluster] = []
    for svc in tcp.services:
        # The TCP check connects to the service's healthPort when it has one (Contour).
        checked = settings.tcp_health_check is not None
        health = health_port(svc.port, svc.health_port, checked)
        cluster = tcp_service_cluster(inputs, proxy, svc, replace(settings, health_port=health))
        if cluster is None:
            return None
        # Contour gives an unset weight 1 here (not 0 as on HTTP routes).
        out.append(WeightedCluster(cluster, svc.weight or 1))
    return tuple(out)


def tcp_service_cluster(
    inputs: TCPInputs,
    proxy: ParsedProxy,
    svc: ServiceSpec,
    settings: UpstreamSettings,
    where: str = "Spec.TCPProxy",
) -> str | None:
    """The cluster name for one tcpproxy service (in the proxy's own namespace), or None with
    the error reported. Protocol and upstream validation follow the route services' rules
    (`upstream.py`); the stream itself is TCP, TLS-originated for `tls`/`h2` upstreams."""
    st = inputs.status[proxy.key]
    namespace = proxy.obj.namespace
    if not 1 <= svc.port <= 65535:
        st.add_error(
            SERVICE_ERROR,
            "ServicePortInvalid",
            f'service "{svc.name}": port must be in the range 1-65535',
        )
        return None
    service = inputs.service(namespace, svc.name)
    port = find_service_port(service, svc.port) if service is not None else None
    if service is not None and port is not None:
        chosen = upstream.service_settings(
            service=service,
            port=port,
            name=svc.name,
            requested_port=svc.port,
            protocol=svc.protocol,
            upstream=svc.upstream,
            route=upstream.NO_ROUTE_UPSTREAM,
            lb_strategy=settings.lb_strategy,
            ca_bundles=inputs.ctx.secrets.ca_bundles,
            namespace=namespace,
        )
        if isinstance(chosen, tuple):
            st.add_error(*chosen)
            return None
        tls = chosen.protocol in (UpstreamProtocol.TLS, UpstreamProtocol.H2)
        settings = replace(
            settings,
            protocol=UpstreamProtocol.TLS if tls else UpstreamProtocol.TCP,
            validation=chosen.validation,
            slow_start=chosen.slow_start,
        )
    # Missing Services and ports, and refused ExternalName Services, come back from the
    # resolver with Contour's wording.
    result = inputs.ctx.backends.service(namespace, svc.name, svc.port, settings=settings)
    if isinstance(result, Unresolved):
        st.add_error(
            TCPPROXY_ERROR,
            "ServiceUnresolvedReference",
            f"{where} unresolved service reference: {result.message}",
        )
        return None
    return result.name

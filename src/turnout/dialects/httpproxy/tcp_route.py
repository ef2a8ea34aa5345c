"""Seed 001's `tcp` backend protocol: a root whose route sends to `protocol: tcp` services is a
TCP proxy, like one with `spec.tcpproxy` (`tcpproxy.py`).

Seed 001 lists `tcp: TLS encapsulated TCP sessions` among the protocols of a route's services and
says that it "eliminates the `tcpproxy` field". Contour shipped `tcpproxy` instead; turnout reads
both. A TCP stream has no path, headers or Host to route by: only the TLS server name (SNI)
selects it. So the rules are:

- the route is the root's only route and the root has no `includes` (the hostname's whole TLS
  traffic goes to it) and no `tcpproxy`;
- its `conditions` are absent or a single `prefix: /`, which every stream matches;
- every service of the route says `protocol: tcp`; besides `name`, `port` and `protocol` a
  service may set `weight` (an unset weight counts 1, as in `tcpproxy`; connections are split
  by weight) and `slowStartPolicy`; the route may set `loadBalancerPolicy` (RoundRobin,
  WeightedLeastRequest, Random; Cookie and RequestHash need an HTTP request and are ignored with
  a warning, as in `tcpproxy`);
- the root terminates TLS (`tls.secretName`, with client validation if asked) and streams the
  plain bytes to the services, or passes TLS through (`tls.passthrough`); without either it is
  `TLSMustBeConfigured`. Any other field (an HTTP policy, a mirror, `permitInsecure`, ...) or
  `virtualhost` policy would be silently meaningless on a TCP stream, so it is an error naming
  the field.

Every violation is a `TCPProxyError`/`TCPRouteNotValid` error naming the field, and leaves the
root unserved on both listeners, like a `tcpproxy` error. A `tcp` service on a route of an
included proxy, or next to non-TCP routes, is the same error on the proxy that wrote it (the
HTTP side reports it from `processor.py` through `misplaced_tcp_service`). The hostname has no
virtual host on the plain HTTP listener: there is no HTTP route to serve or redirect.
"""

from __future__ import annotations

from collections.abc import Mapping

from turnout.dialects.httpproxy.spec import ParsedProxy, RouteSpec, ServiceSpec
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD
from turnout.dialects.httpproxy.tcpproxy import (
    HASH_STRATEGIES,
    STRATEGIES,
    TCPPROXY_ERROR,
    TCPInputs,
    compile_tcpproxy_tls_error,
    tcp_service_cluster,
)
from turnout.graph.model import (
    LoadBalancerStrategy,
    TCPProxy,
    TLSTermination,
    UpstreamProtocol,
    UpstreamSettings,
    WeightedCluster,
)

TCP = "tcp"
TCP_ROUTE_NOT_VALID = "TCPRouteNotValid"

# What a route to `tcp` services and its services may set; everything else is HTTP-only.
ROUTE_FIELDS = frozenset({"conditions", "services", "loadBalancerPolicy"})
SERVICE_FIELDS = frozenset({"name", "port", "protocol", "weight", "slowStartPolicy"})
VHOST_FIELDS = frozenset({"fqdn", "tls"})


def is_tcp_route(route: RouteSpec) -> bool:
    return any(svc.protocol == TCP for svc in route.services)


def tcp_routes(proxy: ParsedProxy) -> list[RouteSpec]:
    return [r for r in proxy.spec.routes if is_tcp_route(r)]


def misplaced_tcp_service(route: RouteSpec) -> str | None:
    """The error message for a `tcp` service met while compiling HTTP routes: the route is not a
    root's only route (the root case never gets there)."""
    for svc in route.services:
        if svc.protocol == TCP:
            return (
                f"{svc.field}.protocol: tcp makes the whole hostname a TCP proxy, so it is only "
                "supported on the only route of a root HTTPProxy, without includes"
            )
    return None


def compile_tcp_route(
    inputs: TCPInputs,
    root: ParsedProxy,
    host: str,
    tls: TLSTermination | None,
    passthrough: bool,
) -> TCPProxy | None:
    """The root's TCP proxy for `host` from its `tcp` route, or None with the error reported."""
    st = inputs.status[root.key]
    route = tcp_routes(root)[0]
    problem = _shape_error(root, route)
    if problem is not None:
        st.add_error(TCPPROXY_ERROR, TCP_ROUTE_NOT_VALID, problem)
        return None
    tls_error = compile_tcpproxy_tls_error(tls, passthrough)
    if tls_error is not None:
        st.add_error(*tls_error)
        return None
    strategy = _strategy(inputs, root, route)
    clusters: list[WeightedCluster] = []
    for svc in route.services:
        cluster = _cluster(inputs, root, svc, strategy)
        if cluster is None:
            return None
        clusters.append(WeightedCluster(cluster, svc.weight or 1))
    return TCPProxy(name=host, hostname=host, clusters=tuple(clusters), owner=root.obj.ref, tls=tls)


def _shape_error(root: ParsedProxy, route: RouteSpec) -> str | None:
    """The first rule of the module docstring that `route` (a `tcp` route of `root`) breaks."""
    spec = root.spec
    if spec.tcpproxy is not None:
        return (
            f"{route.field}: a route to protocol tcp services and spec.tcpproxy both make the "
            "hostname a TCP proxy; use one of them"
        )
    if len(spec.routes) > 1 or spec.includes:
        others = "spec.includes" if spec.includes else "other routes"
        return (
            f"{route.field}: a route to protocol tcp services must be the root's only route "
            f"(found {others}): every TLS connection for the hostname goes to its services"
        )
    vhost = root.obj.spec.get("virtualhost") if isinstance(root.obj.spec, Mapping) else None
    if isinstance(vhost, Mapping):
        for key in sorted(k for k, v in vhost.items() if v is not None):
            if key not in VHOST_FIELDS:
                return (
                    f"spec.virtualhost.{key}: not supported with a route to protocol tcp services"
                )
    for cond in route.conditions:
        every = cond.prefix == "/" and not (
            cond.exact or cond.regex or cond.header or cond.query or cond.cookie or cond.user_agent
        )
        if not every:
            return (
                f"{cond.field}: a route to protocol tcp services matches every connection; only "
                'no conditions or prefix "/" are allowed'
            )
    for key in sorted(route.fields - ROUTE_FIELDS):
        return f"{route.field}.{key}: not supported on a route to protocol tcp services"
    for svc in route.services:
        if svc.protocol != TCP:
            return (
                f'{svc.field}.protocol: "{svc.protocol or "(unset)"}" on a route to protocol '
                "tcp services: every service of the route must be tcp"
            )
        for key in sorted(svc.fields - SERVICE_FIELDS):
            return f"{svc.field}.{key}: not supported with protocol tcp"
    return None


def _strategy(inputs: TCPInputs, root: ParsedProxy, route: RouteSpec) -> LoadBalancerStrategy:
    lb = route.route_policies.load_balancer
    name = lb.strategy if lb is not None else ""
    if name in HASH_STRATEGIES:
        inputs.status[root.key].add_warning(
            TCPPROXY_ERROR,
            IGNORED_FIELD,
            f'ignoring field "{route.field}.loadBalancerPolicy"; {name} load balancer policy is '
            "not supported for protocol tcp",
        )
    return STRATEGIES.get(name, LoadBalancerStrategy.ROUND_ROBIN)


def _cluster(
    inputs: TCPInputs, root: ParsedProxy, svc: ServiceSpec, strategy: LoadBalancerStrategy
) -> str | None:
    """One service's cluster: plain TCP to the endpoints, with the service's slow start (checked
    by `upstream.py` as on HTTP routes); None with the error reported."""
    settings = UpstreamSettings(protocol=UpstreamProtocol.TCP, lb_strategy=strategy)
    return tcp_service_cluster(inputs, root, svc, settings, where="Spec.Routes")

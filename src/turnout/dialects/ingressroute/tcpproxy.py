"""IngressRoute `spec.tcpproxy` and `virtualhost.tls.passthrough` (Contour v0.8/v0.9 to v1.0):
a root's hostnames routed by SNI to TCP backends on the HTTPS listener.

Contour v1.0's rules (`internal/dag/builder.go`, `processIngressRouteTCPProxy`):
- `tls.passthrough: true` without `secretName` passes the TLS stream through to the backends; with
  `secretName` Envoy terminates TLS and streams the plain bytes (passthrough is then ignored, with
  a warning here);
- `tcpproxy.services` (in the object's own namespace), or `tcpproxy.delegate` to an IngressRoute
  without a virtualhost whose own `tcpproxy` is used, followed transitively;
- services and delegate together: `tcpproxy: cannot specify services and delegate in the same
  tcpproxy`; a cycle: `tcpproxy creates a delegation cycle: a -> b -> a`; a missing Service:
  `tcpproxy: service ns/name/port: not found`;
- with a tcpproxy the routes are served on the HTTP listener as they are (no redirect to HTTPS),
  and the hostname's HTTPS side is the TCP proxy.

Where turnout differs, as for route delegation in this dialect: Contour v1.0 ignored a tcpproxy
without TLS, a missing delegate and a delegate that is a root without a word; turnout reports them
(`TLSMustBeConfigured` rejects the object, as any error in an object itself does; a delegation that
cannot be followed is reported on the object that wrote it and costs only the TCP proxy). Weights
split connections (v1.0 ignored them; an unset weight counts 1). A service's `healthCheck` is an
HTTP check, which a TCP stream cannot answer: ignored with a warning.

`spec.py` reads `spec.tcpproxy`; this module compiles it, given a `TCPInputs` (what it reads
of the compile in progress), so that it needs nothing of `processor.py`, which calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from turnout.dialects.ingressroute.spec import DelegateSpec, ParsedIngressRoute, ServiceSpec
from turnout.dialects.ingressroute.status import DELEGATION_ORDER, SERVICE_ORDER, StatusAccessor
from turnout.dialects.ingressroute.upstream import annotated_protocol
from turnout.graph.dialect import CompileContext
from turnout.graph.model import (
    LoadBalancerStrategy,
    TCPProxy,
    TLSTermination,
    UpstreamProtocol,
    UpstreamSettings,
    WeightedCluster,
)
from turnout.graph.services import Unresolved, find_service_port
from turnout.store import Snapshot


@dataclass(frozen=True, slots=True)
class TCPInputs:
    """The part of one compile that a tcpproxy reads: the objects by key and their status
    accessors (where its errors go, shared with the processor's walk)."""

    snapshot: Snapshot
    ctx: CompileContext
    irs: Mapping[tuple[str, str], ParsedIngressRoute]
    status: Mapping[tuple[str, str], StatusAccessor]


_STRATEGIES = {
    "": LoadBalancerStrategy.ROUND_ROBIN,
    "WeightedLeastRequest": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
    "Random": LoadBalancerStrategy.RANDOM,
}


def compile_tcpproxies(
    inputs: TCPInputs,
    ir: ParsedIngressRoute,
    hostnames: tuple[str, ...],
    tls: TLSTermination | None,
) -> list[TCPProxy] | None:
    """The root's TCP proxies (one per hostname); [] when a delegation could not be followed
    (reported; the routes are still served), None when the root itself is rejected."""
    clusters = _own_clusters(inputs, ir)
    if clusters is None:
        return None
    if isinstance(clusters, tuple):
        found: tuple[WeightedCluster, ...] = clusters
    else:
        found = _delegated_clusters(inputs, ir, clusters)
    return [
        TCPProxy(name=host, hostname=host, clusters=found, owner=ir.obj.ref, tls=tls)
        for host in hostnames
        if found
    ]


def _own_clusters(
    inputs: TCPInputs, ir: ParsedIngressRoute
) -> tuple[WeightedCluster, ...] | DelegateSpec | None:
    """`ir`'s own tcpproxy: its clusters, the delegate to follow, or None when `ir` is rejected
    (reported on it)."""
    st = inputs.status[ir.key]
    tcp = ir.spec.tcpproxy
    if not ir.valid:
        return None  # its own status says why
    if tcp is None:
        st.error(
            DELEGATION_ORDER,
            "NothingDefined",
            "tcpproxy: delegated to by a tcpproxy, but spec.tcpproxy is not set",
        )
        return None
    if tcp.delegate is not None:
        return tcp.delegate
    out: list[WeightedCluster] = []
    failed = False
    for svc in tcp.services:
        name = _cluster(inputs, ir, svc)
        if name is None:
            st.error(
                SERVICE_ORDER,
                "ServiceUnresolvedReference",
                f"tcpproxy: service {ir.obj.namespace}/{svc.name}/{svc.port}: not found",
            )
            failed = True
        else:
            out.append(WeightedCluster(name, svc.weight or 1))
    # Contour v1.0 allowed an empty tcpproxy: nothing is proxied.
    return None if failed else tuple(out)


def _delegated_clusters(
    inputs: TCPInputs, root: ParsedIngressRoute, delegate: DelegateSpec
) -> tuple[WeightedCluster, ...]:
    """Follows `delegate` (in a loop: a chain can be as long as there are objects); () when a
    delegation cannot be followed or the object it reaches is rejected, each reported."""
    visited = [root]
    seen = {root.key}
    ir = root
    while True:
        st = inputs.status[ir.key]
        key = ir.delegate_key(delegate)
        dest = inputs.irs.get(key)
        if dest is None:
            st.error(
                DELEGATION_ORDER,
                "DelegateNotFound",
                f"tcpproxy: delegate {key[0]}/{key[1]} not found",
            )
            return ()
        if dest.is_root:
            st.error(
                DELEGATION_ORDER,
                "RootDelegatesToRoot",
                "root ingressroute cannot delegate to another root ingressroute",
            )
            return ()
        if key in seen:
            chain = " -> ".join(f"{v.obj.namespace}/{v.obj.name}" for v in (*visited, dest))
            st.error(
                DELEGATION_ORDER,
                "DelegationCycle",
                f"tcpproxy creates a delegation cycle: {chain}",
            )
            return ()
        inputs.status[key].connect(ir.obj.namespace, ir.obj.name, "")
        # The delegated object's own problems reject it, not the object that delegated to it.
        found = _own_clusters(inputs, dest)
        if found is None:
            return ()
        if isinstance(found, tuple):
            return found
        visited.append(dest)
        seen.add(dest.key)
        ir, delegate = dest, found


def _cluster(inputs: TCPInputs, ir: ParsedIngressRoute, svc: ServiceSpec) -> str | None:
    namespace = ir.obj.namespace
    service = inputs.snapshot.get("", "Service", namespace, svc.name)
    port = find_service_port(service, svc.port) if service is not None else None
    if service is None or port is None:
        return None
    annotated = annotated_protocol(service.annotations, port.name, port.port)
    tls = annotated in (UpstreamProtocol.TLS, UpstreamProtocol.H2)
    settings = UpstreamSettings(
        protocol=UpstreamProtocol.TLS if tls else UpstreamProtocol.TCP,
        lb_strategy=_STRATEGIES.get(svc.strategy, LoadBalancerStrategy.ROUND_ROBIN),
    )
    result = inputs.ctx.backends.service(namespace, svc.name, svc.port, settings=settings)
    return None if isinstance(result, Unresolved) else result.name

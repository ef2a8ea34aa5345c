"""What the TLS and TCP parts of the listeners refer to, so the graph builder keeps only the
secrets, CA bundles and clusters that something served uses."""

from __future__ import annotations

from collections.abc import Iterable

from turnout.graph.model import Cluster, Listener, Route, TLSTermination, VirtualHost


def _terminations(listeners: Iterable[Listener]) -> Iterable[TLSTermination]:
    for listener in listeners:
        for vh in listener.virtual_hosts:
            if vh.tls is not None:
                yield vh.tls
        for proxy in listener.tcp_proxies:
            if proxy.tls is not None:
                yield proxy.tls


def tls_secret_names(listeners: Iterable[Listener]) -> set[str]:
    """Certificates: each termination's own, and the fallback certificate it enables."""
    names: set[str] = set()
    for tls in _terminations(listeners):
        names.add(tls.secret)
        if tls.fallback_secret is not None:
            names.add(tls.fallback_secret)
    return names


def ca_bundle_names(listeners: Iterable[Listener], clusters: Iterable[Cluster]) -> set[str]:
    """CA bundles and CRLs: client validation on terminations, upstream validation on clusters,
    and the key servers of JWT validations (Contour's `remoteJWKS.validation`)."""
    names: set[str] = set()
    listeners = tuple(listeners)  # walked twice
    for listener in listeners:
        for vh in listener.virtual_hosts:
            for route in vh.routes:
                jwt = route.policies.jwt
                if jwt is not None and jwt.validation is not None:
                    names.add(jwt.validation.ca_secret)
    for tls in _terminations(listeners):
        cv = tls.client_validation
        if cv is None:
            continue
        names.update(n for n in (cv.ca_bundle, cv.crl_bundle) if n is not None)
    names.update(c.validation.ca_secret for c in clusters if c.validation is not None)
    return names


def termination_secret_names(tls: TLSTermination) -> frozenset[str]:
    """`tls_secret_names` of one termination."""
    if tls.fallback_secret is None:
        return frozenset((tls.secret,))
    return frozenset((tls.secret, tls.fallback_secret))


def termination_ca_names(tls: TLSTermination) -> frozenset[str]:
    """`ca_bundle_names` of one termination: its client validation's CA bundle and CRL."""
    cv = tls.client_validation
    if cv is None:
        return frozenset()
    return frozenset(n for n in (cv.ca_bundle, cv.crl_bundle) if n is not None)


def vhost_secret_names(vh: VirtualHost) -> frozenset[str]:
    """`tls_secret_names` of one virtual host."""
    return frozenset() if vh.tls is None else termination_secret_names(vh.tls)


def route_ca_names(route: Route) -> tuple[str, ...]:
    """`ca_bundle_names` of one route: its JWT key server's CA bundle."""
    jwt = route.policies.jwt
    if jwt is None or jwt.validation is None:
        return ()
    return (jwt.validation.ca_secret,)


def cluster_ca_names(c: Cluster) -> frozenset[str]:
    """`ca_bundle_names` of one cluster: its upstream validation's CA bundle."""
    return frozenset() if c.validation is None else frozenset((c.validation.ca_secret,))

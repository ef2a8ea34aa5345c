"""TLS virtual hosts and TCP proxies on one listener (filter chains, SNI, fallback certificate)."""

from __future__ import annotations

from typing import Any

from tests.e2e.certs import CA
from turnout.graph.model import (
    CABundle,
    ClientValidation,
    Cluster,
    Endpoint,
    Forward,
    HostnameMatch,
    Listener,
    ListenerProtocol,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    TCPProxy,
    TLSSecret,
    TLSTermination,
    UpstreamProtocol,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "root")


ROOT_CA = CA()


LEAF = ROOT_CA.issue("a.example.com", "*.example.com")


CERT = TLSSecret("default/cert/1", "default", "cert", LEAF.cert_pem, LEAF.key_pem)


FALLBACK = TLSSecret("certs/fallback/1", "certs", "fallback", LEAF.cert_pem, LEAF.key_pem)


CA_BUNDLE = CABundle("default/ca/1", "default", "ca", ROOT_CA.cert_pem)


CRL_BUNDLE = CABundle("default/crl/1", "default", "crl", "", crl=ROOT_CA.crl())


DB = Cluster(
    "default/db/443/x", "default", "db", 443, UpstreamProtocol.TCP, (Endpoint("10.0.0.1", 5432),)
)


DB2 = Cluster("default/db2/443/x", "default", "db2", 443, UpstreamProtocol.TCP)


APP = Cluster("default/app/80/x", "default", "app", 80)


def vhost(host: str, tls: TLSTermination) -> VirtualHost:
    kind = HostnameMatch.WILDCARD_ONE_LABEL if host.startswith("*.") else HostnameMatch.EXACT
    route = Route(
        RouteMatch(), Forward((WeightedCluster(APP.name, 1),)), RouteSource(OWNER, "spec.routes[0]")
    )
    return VirtualHost(host, host, (route,), OWNER, kind, tls=tls)


def tcp_proxy(host: str, *clusters: tuple[str, int], tls: TLSTermination | None = None) -> TCPProxy:
    return TCPProxy(host, host, tuple(WeightedCluster(c, w) for c, w in clusters), OWNER, tls)


def tls_graph(
    vhosts: tuple[VirtualHost, ...] = (), tcp: tuple[TCPProxy, ...] = (), **kw: Any
) -> RoutingGraph:
    listener = Listener("ingress_https", "127.0.0.1", 8443, ListenerProtocol.HTTPS, vhosts, tcp)
    return RoutingGraph(
        listeners=(listener,),
        clusters=kw.get("clusters", (APP, DB, DB2)),
        secrets=kw.get("secrets", (CERT, FALLBACK)),
        ca_bundles=kw.get("ca_bundles", (CA_BUNDLE, CRL_BUNDLE)),
    )


def every_tls_feature_graph() -> RoutingGraph:
    """TLS hosts with client validation (CRL too), a fallback certificate and skipped
    verification, beside TCP proxies with and without TLS termination."""
    cv = ClientValidation(ca_bundle=CA_BUNDLE.name, crl_bundle=CRL_BUNDLE.name)
    return tls_graph(
        vhosts=(
            vhost("a.example.com", TLSTermination(CERT.name, client_validation=cv)),
            vhost("*.example.com", TLSTermination(CERT.name, fallback_secret=FALLBACK.name)),
            vhost(
                "skip.example.com",
                TLSTermination(
                    CERT.name, client_validation=ClientValidation(skip_verification=True)
                ),
            ),
        ),
        tcp=(
            tcp_proxy("db.example.com", (DB.name, 2), (DB2.name, 3)),
            tcp_proxy(
                "redis.example.com",
                (DB.name, 1),
                tls=TLSTermination(CERT.name, client_validation=cv),
            ),
        ),
    )

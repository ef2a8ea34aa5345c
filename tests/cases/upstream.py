"""Clusters with every upstream policy: TLS, validation, DNS, slow start, outlier detection."""

from __future__ import annotations

from typing import Any

from turnout.graph.model import (
    CABundle,
    Cluster,
    Endpoint,
    LoadBalancerStrategy,
    OutlierDetection,
    RoutingGraph,
    SlowStart,
    UpstreamProtocol,
    UpstreamValidation,
)

CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBYzCCAQmgAwIBAgIUb9rDHNZpGQqWMDfV7TdFPELG4BIwCgYIKoZIzj0EAwIw
GzEZMBcGA1UEAwwQdHVybm91dCBmaXh0dXJlczAgFw0yNDAxMDEwMDAwMDBaGA8y
MTI0MDEwMTAwMDAwMFowGzEZMBcGA1UEAwwQdHVybm91dCBmaXh0dXJlczBZMBMG
ByqGSM49AgEGCCqGSM49AwEHA0IABGuP+AgzdeDHMYHuP59f+2uZdLuVEqp5BgS2
ezQPeVoRm7EP3fcUIcLlxK6cGbscJRXXC/zVc0IQbAyE31O5SomjKTAnMCUGA1Ud
EQQeMByCDSouZXhhbXBsZS5jb22CC2V4YW1wbGUuY29tMAoGCCqGSM49BAMCA0gA
MEUCIAqPsG51fl9OilAhBhsQQuBNS38z1WHdtpiatD0nD85bAiEArPC3rPqOq7sJ
zuGhTIo00w8yqGil1NoK2WjFiO1AvSk=
-----END CERTIFICATE-----
"""


BUNDLE = CABundle("default/ca/0123456789", "default", "ca", CA_PEM)


def cluster(**kwargs: Any) -> Cluster:
    base: dict[str, Any] = {
        "name": "default/web/443/x",
        "namespace": "default",
        "service": "web",
        "port": 443,
        "endpoints": (Endpoint("127.0.0.1", 9443),),
    }
    base.update(kwargs)
    return Cluster(**base)


def every_upstream_policy() -> RoutingGraph:
    return RoutingGraph(
        clusters=(
            cluster(
                name="default/a/443/x",
                protocol=UpstreamProtocol.H2,
                validation=UpstreamValidation(BUNDLE.name, ("backend.example.com",)),
                outlier_detection=OutlierDetection(3, consecutive_gateway_errors=2),
                slow_start=SlowStart(30, 2.0, 0),
                connect_timeout_s=1.5,
            ),
            cluster(
                name="default/b/443/x",
                protocol=UpstreamProtocol.TLS,
                dns_name="api.example.com",
                endpoints=(),
                lb_strategy=LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
                slow_start=SlowStart(10),
            ),
            cluster(
                name="default/c/443/x",
                protocol=UpstreamProtocol.TLS,
                validation=UpstreamValidation("missing", ("x.example.com",)),
            ),
            cluster(name="default/d/80/x", protocol=UpstreamProtocol.H2C),
        ),
        ca_bundles=(BUNDLE,),
    )

"""Clusters of every load-balancing strategy and health check (cluster translation)."""

from __future__ import annotations

from turnout.graph.model import (
    Cluster,
    Endpoint,
    HTTPHealthCheck,
    LoadBalancerStrategy,
    RoutingGraph,
    UpstreamProtocol,
)


def cluster(
    strategy: LoadBalancerStrategy = LoadBalancerStrategy.ROUND_ROBIN,
    hc: HTTPHealthCheck | None = None,
    protocol: UpstreamProtocol = UpstreamProtocol.HTTP,
    name: str = "default/web/80/x",
) -> Cluster:
    return Cluster(
        name,
        "default",
        "web",
        80,
        protocol,
        endpoints=(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 9002)),
        lb_strategy=strategy,
        health_check=hc,
    )


def every_kind_of_cluster() -> RoutingGraph:
    clusters = [
        cluster(s, name=f"default/web/80/{s.value.lower()}") for s in LoadBalancerStrategy
    ] + [
        cluster(
            LoadBalancerStrategy.RANDOM,
            HTTPHealthCheck(
                path="/healthz",
                interval_s=1,
                timeout_s=1,
                unhealthy_threshold=10,
                healthy_threshold=1,
                expected_statuses=((200, 204),),
            ),
            name="default/web/80/hc",
        ),
        cluster(hc=HTTPHealthCheck(path="/s"), protocol=UpstreamProtocol.H2C, name="h2c/hc"),
    ]
    return RoutingGraph(clusters=tuple(clusters))

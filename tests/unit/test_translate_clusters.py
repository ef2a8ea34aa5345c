"""Cluster translation: load-balancing policies and active HTTP health checks."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.type.v3 import http_pb2

from tests.cases.clusters import cluster, every_kind_of_cluster
from tests.proto_checks import deprecated_fields
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import translate, translate_cluster
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.model import (
    Cluster,
    HTTPHealthCheck,
    LoadBalancerStrategy,
    UpstreamProtocol,
)


def one(c: Cluster) -> Any:
    return translate_cluster(c, TranslateOptions())


@pytest.mark.parametrize(
    ("strategy", "policy"),
    [
        (LoadBalancerStrategy.ROUND_ROBIN, cluster_pb2.Cluster.ROUND_ROBIN),
        (LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST, cluster_pb2.Cluster.LEAST_REQUEST),
        (LoadBalancerStrategy.RANDOM, cluster_pb2.Cluster.RANDOM),
        # Contour hashes both on a ring; the hash policy itself belongs to the route.
        (LoadBalancerStrategy.REQUEST_HASH, cluster_pb2.Cluster.RING_HASH),
        (LoadBalancerStrategy.COOKIE, cluster_pb2.Cluster.RING_HASH),
    ],
)
def test_lb_strategy_sets_the_lb_policy(strategy: LoadBalancerStrategy, policy: int) -> None:
    out = one(cluster(strategy))
    assert out.lb_policy == policy
    # The typed policy is an alternative to the enum; setting both would be ambiguous.
    assert not out.HasField("load_balancing_policy")


def test_every_strategy_has_a_policy() -> None:
    for strategy in LoadBalancerStrategy:
        one(cluster(strategy))  # raises KeyError for a strategy the translator forgot


def test_no_health_check_leaves_envoys_defaults() -> None:
    out = one(cluster())
    assert not out.health_checks
    assert not out.HasField("common_lb_config")
    assert not out.ignore_health_on_host_removal


def test_health_check_fields() -> None:
    hc = HTTPHealthCheck(
        path="/healthz",
        host="checker.example.com",
        interval_s=1.5,
        timeout_s=0.25,
        unhealthy_threshold=7,
        healthy_threshold=1,
    )
    out = one(cluster(hc=hc))
    (check,) = out.health_checks
    assert check.interval.ToMilliseconds() == 1500
    assert check.timeout.ToMilliseconds() == 250
    assert check.unhealthy_threshold.value == 7
    assert check.healthy_threshold.value == 1
    assert check.WhichOneof("health_checker") == "http_health_check"
    http = check.http_health_check
    assert http.path == "/healthz"
    assert http.host == "checker.example.com"
    assert http.codec_client_type == http_pb2.HTTP1
    # Nothing is ever retried: a 503 (or any status that is not expected) marks the host
    # unhealthy at the first failed check, whatever unhealthy_threshold says.
    assert not http.retriable_statuses
    assert not http.expected_statuses  # Envoy's default: 200 only
    # The interval holds from the start, not only once the cluster has carried traffic (Envoy
    # would otherwise check a new cluster every 60 s); no other interval is changed.
    assert check.no_traffic_interval == check.interval
    assert not check.HasField("unhealthy_interval")
    assert not check.HasField("healthy_edge_interval")


def test_health_check_uses_contours_default_host() -> None:
    (check,) = one(cluster(hc=HTTPHealthCheck(path="/status"))).health_checks
    assert check.http_health_check.host == "contour-envoy-healthcheck"
    assert check.interval.ToSeconds() == 5
    assert check.timeout.ToSeconds() == 2
    assert check.unhealthy_threshold.value == 3
    assert check.healthy_threshold.value == 2


def test_empty_health_check_host_lets_envoy_send_the_cluster_name() -> None:
    (check,) = one(cluster(hc=HTTPHealthCheck(path="/s", host=""))).health_checks
    assert check.http_health_check.host == ""


def test_health_check_disables_the_panic_threshold_and_drains_removed_hosts() -> None:
    out = one(cluster(hc=HTTPHealthCheck(path="/s")))
    # Present with 0%: Envoy never spreads requests over hosts that fail their checks.
    assert out.common_lb_config.HasField("healthy_panic_threshold")
    assert out.common_lb_config.healthy_panic_threshold.value == 0.0
    assert out.ignore_health_on_host_removal
    serialized = out.SerializeToString(deterministic=True)
    again = cluster_pb2.Cluster.FromString(serialized)
    assert again.common_lb_config.HasField("healthy_panic_threshold")


@pytest.mark.parametrize("protocol", [UpstreamProtocol.H2C, UpstreamProtocol.H2])
def test_health_check_speaks_http2_to_http2_upstreams(protocol: UpstreamProtocol) -> None:
    (check,) = one(cluster(hc=HTTPHealthCheck(path="/s"), protocol=protocol)).health_checks
    assert check.http_health_check.codec_client_type == http_pb2.HTTP2


def test_expected_statuses_are_half_open_ranges_within_envoys_bounds() -> None:
    hc = HTTPHealthCheck(path="/s", expected_statuses=((200, 300), (50, 120), (590, 700), (0, 99)))
    (check,) = one(cluster(hc=hc)).health_checks
    got = [(r.start, r.end) for r in check.http_health_check.expected_statuses]
    assert got == [(200, 300), (100, 120), (590, 600)]


def test_out_of_range_values_are_kept_within_what_envoy_accepts() -> None:
    hc = HTTPHealthCheck(
        path="", interval_s=0, timeout_s=-1, unhealthy_threshold=0, healthy_threshold=2**40
    )
    (check,) = one(cluster(hc=hc)).health_checks
    assert check.interval.ToNanoseconds() > 0
    assert check.timeout.ToNanoseconds() > 0
    assert check.unhealthy_threshold.value == 1
    assert check.healthy_threshold.value == 2**32 - 1
    assert check.http_health_check.path == "/"


def test_translation_is_deterministic() -> None:
    def serialized(res: EnvoyResources) -> list[bytes]:
        return [c.SerializeToString(deterministic=True) for c in res.clusters]

    assert serialized(translate(every_kind_of_cluster())) == serialized(
        translate(every_kind_of_cluster())
    )


def test_no_deprecated_field_is_set() -> None:
    for c in translate(every_kind_of_cluster()).clusters:
        assert deprecated_fields(c) == []

"""Envoy (`envoy --mode validate`) accepts what the translator makes of graphs that carry every
policy at once, without deprecation warnings. The graphs are in tests/cases; the unit tests
check the same graphs' translation without Envoy."""

from __future__ import annotations

import random

from tests.cases.clusters import every_kind_of_cluster
from tests.cases.health_port import dns_cluster
from tests.cases.httpproxy_policies import compile_proxies, random_route
from tests.cases.route_policies import rich_policies_graph
from tests.cases.tcp_tls import every_tls_feature_graph
from tests.cases.upstream import every_upstream_policy
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.graph.model import RoutingGraph


def test_envoy_accepts_whatever_random_policies_compile_to() -> None:
    rng = random.Random(20261121)
    result = compile_proxies(
        [[random_route(rng, fuzz=False) for _ in range(rng.randint(1, 4))] for _ in range(60)]
    )
    assert not result.problems, result.problems
    served = {vh.hostname for lst in result.graph.listeners for vh in lst.virtual_hosts}
    assert len(served) == 60  # every proxy compiled: valid values only
    outcome = validate_resources(translate(result.graph))
    assert outcome.ok, outcome.output[-3000:]
    assert not outcome.deprecation_warnings


def test_envoy_accepts_every_strategy_and_health_check_without_deprecation_warnings() -> None:
    result = validate_resources(translate(every_kind_of_cluster()))
    assert result.ok, result.output[-3000:]
    assert result.deprecation_warnings == ()


def test_envoy_accepts_the_health_port_of_a_dns_cluster() -> None:
    result = validate_resources(translate(RoutingGraph(clusters=(dns_cluster(),))))
    assert result.ok, result.output


def test_envoy_accepts_every_route_policy_without_deprecation_warnings() -> None:
    # The Lua scripts are compiled when the configuration loads, so a script Envoy's Lua cannot
    # parse fails here too.
    result = validate_resources(translate(rich_policies_graph()))
    assert result.ok, result.output[-3000:]
    assert not result.deprecation_warnings


def test_envoy_accepts_every_upstream_policy_without_deprecation_warnings() -> None:
    resources = translate(every_upstream_policy())
    assert len(resources.clusters) == 4
    result = validate_resources(resources)
    assert result.ok, result.output[-3000:]
    assert result.deprecation_warnings == ()


def test_envoy_accepts_every_tls_feature_without_deprecation_warnings() -> None:
    result = validate_resources(translate(every_tls_feature_graph()))
    assert result.ok, result.output[-2000:]
    assert result.deprecation_warnings == ()

"""Prometheus metrics. One `Metrics` per running turnout, holding its own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.objects = Gauge(
            "turnout_objects",
            "Routing objects by kind and state (valid, invalid, orphaned)",
            ["kind", "state"],
            registry=self.registry,
        )
        self.source_problems = Gauge(
            "turnout_source_problems",
            "Input problems not tied to a valid object (unparseable files, nameless objects)",
            registry=self.registry,
        )
        self.compile_seconds = Histogram(
            "turnout_compile_duration_seconds",
            "Time to compile the store into the routing graph and Envoy resources",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.compiles = Counter(
            "turnout_compiles", "Compiles of the routing graph", registry=self.registry
        )
        self.compile_errors = Counter(
            "turnout_compile_errors",
            "Compiles that failed (a turnout bug); the last good configuration was kept",
            registry=self.registry,
        )
        self.xds_pushes = Counter(
            "turnout_xds_pushes",
            "xDS responses sent to Envoy, by type",
            ["type"],
            registry=self.registry,
        )
        self.xds_acks = Counter(
            "turnout_xds_acks", "xDS ACKs received, by type", ["type"], registry=self.registry
        )
        self.xds_nacks = Counter(
            "turnout_xds_nacks", "xDS NACKs received, by type", ["type"], registry=self.registry
        )
        self.connected_envoys = Gauge(
            "turnout_xds_connected_envoys",
            "Envoy instances with an open ADS stream",
            registry=self.registry,
        )
        self.gateways = Gauge(
            "turnout_gateways",
            "Gateway API Gateways of turnout's classes by their Programmed condition (True once "
            "every connected Envoy acknowledged the configuration holding them)",
            ["programmed"],
            registry=self.registry,
        )
        self.envoy_restarts = Counter(
            "turnout_envoy_restarts",
            "Restarts of the supervised Envoy child process",
            registry=self.registry,
        )

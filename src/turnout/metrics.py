"""Prometheus metrics. One `Metrics` per running turnout, holding its own registry.

Every labelled series a dashboard or alert names exists at 0 from the start: a rate over a
series that appears only with its first event (the first NACK) hides that event.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

# The `type` label of the xDS counters (envoy/xds.py SHORT_TYPE_NAMES, which this layer cannot
# import).
XDS_TYPES = ("cluster", "endpoint", "listener", "route", "secret", "scoped_route")
PROGRAMMED_VALUES = ("True", "False", "Unknown")
# The `result` label of turnout_status_writes (sources/kubernetes/status_writer.py).
STATUS_WRITE_RESULTS = ("written", "conflict", "gone", "error")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._compile_metrics()
        self._xds_metrics()
        self._operation_metrics()
        self._register_runtime_collectors()
        self._initialise_labels()

    def _compile_metrics(self) -> None:
        """The objects and the compiles."""
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

    def _xds_metrics(self) -> None:
        """What Envoy was sent and answered."""
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
        self.xds_apply_seconds = Histogram(
            "turnout_xds_apply_seconds",
            "Envoy's apply time: from an xDS response sent to its ACK, by type",
            ["type"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
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

    def _operation_metrics(self) -> None:
        """Envoy's restarts, change to ACK, leadership and status writes."""
        self.envoy_restarts = Counter(
            "turnout_envoy_restarts",
            "Restarts of the supervised Envoy child process",
            registry=self.registry,
        )
        self.change_to_ack_seconds = Histogram(
            "turnout_change_to_ack_seconds",
            "From a source change seen to every connected Envoy acknowledging the configuration "
            "holding it (coalescing, compile, push and Envoy's apply)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.leader = Gauge(
            "turnout_leader",
            "1 while this turnout holds the leader-election Lease (or runs without election) and "
            "writes status in Kubernetes mode, else 0",
            registry=self.registry,
        )
        self.status_writes = Counter(
            "turnout_status_writes",
            "Status subresource writes in Kubernetes mode, by result (written; conflict: a 409, "
            "re-read and retried; gone: the object was deleted; error: any other failure)",
            ["result"],
            registry=self.registry,
        )

    def _register_runtime_collectors(self) -> None:
        """process_* (CPU, memory, open files) and python_* (GC, version), as on the default
        registry, which turnout does not use so that several turnouts in one process (tests)
        keep their own counts."""
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def _initialise_labels(self) -> None:
        for xds_type in XDS_TYPES:
            for counter in (self.xds_pushes, self.xds_acks, self.xds_nacks):
                counter.labels(type=xds_type)
            self.xds_apply_seconds.labels(type=xds_type)
        for value in PROGRAMMED_VALUES:
            self.gateways.labels(programmed=value)
        for result in STATUS_WRITE_RESULTS:
            self.status_writes.labels(result=result)

"""The seed 002 Route (`contour.heptio.com/v1alpha1`) fields turnout reads: the table `turnout
manifests` renders into the CRD's schema, and whose keys, enums and bounds the reader in `spec.py`
enforces."""

from __future__ import annotations

from turnout.dialects.openapi import (
    Column,
    integer,
    obj,
    objects,
    string,
)

# `*Seconds` fields are int32 in Kubernetes APIs; thresholds are Envoy's uint32.
MAX_SECONDS = 2**31 - 1
MAX_THRESHOLD = 2**32 - 1
# The seed's three strategies (`spec.STRATEGIES` maps them to the graph's).
STRATEGY_NAMES = ("RoundRobin", "WeightedLeastRequest", "Random")
# "" is unset, as Go's omitempty writes it: the reader takes it as no strategy.
STRATEGY_ENUM = ("", *STRATEGY_NAMES)

SHORT_NAMES: tuple[str, ...] = ()
PRINTER_COLUMNS = (
    Column("Host", ".spec.host", "The virtual host"),
    Column("Status", ".status.currentStatus", "The current status of the Route"),
)

SPEC = obj(
    "spec",
    string("host", required=True),
    obj(
        "lbHealthCheck",
        integer("healthyThresholdCount", 1, MAX_THRESHOLD),
        integer("intervalSeconds", 1, MAX_SECONDS),
        string("path", required=True),
        integer("timeoutSeconds", 1, MAX_SECONDS),
        integer("unhealthyThresholdCount", 1, MAX_THRESHOLD),
    ),
    objects(
        "routes",
        string("pathPrefix", required=True),
        string("strategy", enum=STRATEGY_ENUM),
        objects(
            "upstreams",
            obj(
                "lbHealthCheck",
                integer("healthyThresholdCount", 1, MAX_THRESHOLD),
                integer("intervalSeconds", 1, MAX_SECONDS),
                string("path", required=True),
                integer("timeoutSeconds", 1, MAX_SECONDS),
                integer("unhealthyThresholdCount", 1, MAX_THRESHOLD),
            ),
            string("serviceName", required=True),
            integer("servicePort", 1, 65535),
            integer("weight", 0, 100),
        ),
    ),
    string("strategy", enum=STRATEGY_ENUM),
)

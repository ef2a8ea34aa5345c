"""The RouteGroup (`zalando.org/v1`) fields turnout reads: the table `turnout manifests` renders
into the CRD's schema."""

from __future__ import annotations

from turnout.dialects.openapi import (
    Column,
    integer,
    obj,
    objects,
    string,
    strings,
)

# Skipper's backend types; `spec.BackendType` has one member for each ("forward" is documented by
# Skipper and accepted by its code, though its CRD's enum lacks it).
BACKEND_TYPES = ("service", "shunt", "loopback", "dynamic", "lb", "network", "forward")
SHORT_NAMES = ("rg", "rgs")
CATEGORIES = ("all",)
PRINTER_COLUMNS = (
    Column("Hosts", ".spec.hosts", "Hosts defined for the RouteGroup"),
    Column("Address", ".status.loadBalancer", "Address of the Load Balancer for the RouteGroup"),
)

SPEC = obj(
    "spec",
    objects(
        "backends",
        string("address"),
        string("algorithm"),
        strings("endpoints"),
        string("name", required=True),
        string("serviceName"),
        integer("servicePort", 0, 65535),
        string("type", required=True, enum=BACKEND_TYPES),
    ),
    objects(
        "defaultBackends",
        string("backendName"),
        integer("weight", 0),
    ),
    strings("hosts"),
    objects(
        "routes",
        objects(
            "backends",
            string("backendName"),
            integer("weight", 0),
        ),
        strings("filters"),
        strings("methods"),
        string("path"),
        string("pathRegexp"),
        string("pathSubtree"),
        strings("predicates"),
    ),
    objects(
        "tls",
        strings("hosts"),
        string("secretName", required=True),
    ),
)

"""The IngressRoute (`contour.heptio.com/v1beta1`, seed 000) fields turnout reads: the table
`turnout manifests` renders into the CRD's schema."""

from __future__ import annotations

from turnout.dialects.openapi import (
    Column,
    boolean,
    integer,
    obj,
    objects,
    string,
    strings,
)

SHORT_NAMES: tuple[str, ...] = ()  # upstream's CRD has none
PRINTER_COLUMNS = (
    Column("FQDN", ".spec.virtualhost.fqdn", "Fully qualified domain name"),
    Column("TLS Secret", ".spec.virtualhost.tls.secretName", "Secret with TLS credentials"),
    Column("First route", ".spec.routes[0].match", "First routes defined"),
    Column("Status", ".status.currentStatus", "The current status of the IngressRoute"),
    Column("Status Description", ".status.description", "Description of the current status"),
)

SPEC = obj(
    "spec",
    objects(
        "routes",
        obj(
            "delegate",
            string("name", required=True),
            string("namespace"),
        ),
        boolean("enableWebsockets"),
        string("match", required=True),
        boolean("permitInsecure"),
        string("prefixRewrite"),
        obj(
            "retryPolicy",
            integer("count", 0, 4294967295),
            string("perTryTimeout"),
        ),
        objects(
            "services",
            obj(
                "healthCheck",
                integer("healthyThresholdCount", 0, 4294967295),
                string("host"),
                integer("intervalSeconds", 0, 315576000000),
                string("path", required=True),
                integer("timeoutSeconds", 0, 315576000000),
                integer("unhealthyThresholdCount", 0, 4294967295),
            ),
            string("name", required=True),
            integer("port", required=True),
            string("strategy"),
            obj(
                "validation",
                string("caSecret", required=True),
                string("subjectName", required=True),
            ),
            integer("weight"),
        ),
        obj(
            "timeoutPolicy",
            string("request"),
        ),
    ),
    obj(
        "tcpproxy",
        obj(
            "delegate",
            string("name", required=True),
            string("namespace"),
        ),
        objects(
            "services",
            obj(
                "healthCheck",
                integer("healthyThresholdCount", 0, 4294967295),
                string("host"),
                integer("intervalSeconds", 0, 315576000000),
                string("path", required=True),
                integer("timeoutSeconds", 0, 315576000000),
                integer("unhealthyThresholdCount", 0, 4294967295),
            ),
            string("name", required=True),
            integer("port", required=True),
            string("strategy"),
            obj("validation", string("caSecret"), string("subjectName")),
            integer("weight"),
        ),
    ),
    obj(
        "virtualhost",
        strings("aliases"),
        string("fqdn", required=True),
        obj(
            "tls",
            string("minimumProtocolVersion"),
            boolean("passthrough"),
            string("secretName"),
        ),
    ),
)

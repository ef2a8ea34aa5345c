"""The HTTPProxy (`projectcontour.io/v1`) fields turnout reads: the table `turnout manifests`
renders into the CRD's schema. tests/unit/test_crd_schemas.py records every field the readers in
this package read and checks it against this table both ways."""

from __future__ import annotations

from turnout.dialects.openapi import (
    Column,
    Field,
    boolean,
    integer,
    integers,
    obj,
    objects,
    opaque,
    opaque_list,
    string,
    string_map,
    strings,
)

SHORT_NAMES = ("proxy", "proxies")
PRINTER_COLUMNS = (
    Column("FQDN", ".spec.virtualhost.fqdn", "Fully qualified domain name"),
    Column("TLS Secret", ".spec.virtualhost.tls.secretName", "Secret with TLS credentials"),
    Column("Status", ".status.currentStatus", "The current status of the HTTPProxy"),
    Column("Status Description", ".status.description", "Description of the current status"),
)


def _headers_policy(name: str) -> Field:
    return obj(
        name,
        strings("remove"),
        objects("set", string("name", required=True), string("value", required=True)),
    )


_SLOW_START = obj(
    "slowStartPolicy",
    string("aggression"),
    integer("minWeightPercent"),
    string("window", required=True),
)
_UPSTREAM_VALIDATION = obj(
    "validation",
    string("caSecret", required=True),
    string("subjectName"),
    strings("subjectNames"),
)
_LOAD_BALANCER = obj(
    "loadBalancerPolicy",
    objects(
        "requestHashPolicies",
        obj("headerHashOptions", string("headerName")),
        boolean("hashSourceIP"),
        obj("queryParameterHashOptions", string("parameterName")),
        boolean("terminal"),
    ),
    string("strategy"),
)


def _header_match(*, regex: bool) -> tuple[Field, ...]:
    """Contour's HeaderMatchCondition: in match conditions (where turnout reads `regex`) and in a
    rate limit descriptor's `requestHeaderValueMatch` (where it does not)."""
    return (
        string("contains"),
        string("exact"),
        boolean("ignoreCase"),
        string("name", required=True),
        string("notcontains"),
        string("notexact"),
        boolean("notpresent"),
        boolean("present"),
        *((string("regex"),) if regex else ()),
        boolean("treatMissingAsEmpty"),
    )


# `conditions`, the same on an include and on a route.
_CONDITIONS = objects(
    "conditions",
    string("cookie"),
    string("exact"),
    obj("header", *_header_match(regex=True)),
    string("prefix"),
    obj(
        "queryParameter",
        string("contains"),
        string("exact"),
        boolean("ignoreCase"),
        string("name", required=True),
        string("prefix"),
        boolean("present"),
        string("regex"),
        string("suffix"),
    ),
    string("regex"),
    string("user-agent"),
    string("userAgent"),
)


# `rateLimitPolicy`, the same on the virtual host and on a route.
_RATE_LIMIT_POLICY = obj(
    "rateLimitPolicy",
    obj(
        "global",
        objects(
            "descriptors",
            objects(
                "entries",
                obj("genericKey", string("key"), string("value", required=True)),
                obj("remoteAddress"),
                obj(
                    "requestHeader",
                    string("descriptorKey", required=True),
                    string("headerName", required=True),
                ),
                obj(
                    "requestHeaderValueMatch",
                    boolean("expectMatch"),
                    objects("headers", *_header_match(regex=False)),
                    string("value", required=True),
                ),
            ),
        ),
        boolean("disabled"),
    ),
    obj(
        "local",
        integer("burst"),
        integer("requests"),
        objects(
            "responseHeadersToAdd",
            string("name", required=True),
            string("value", required=True),
        ),
        integer("responseStatusCode"),
        string("unit"),
    ),
)


SPEC = obj(
    "spec",
    objects(
        "includes",
        _CONDITIONS,
        string("name", required=True),
        string("namespace"),
    ),
    string("ingressClassName"),
    objects(
        "routes",
        obj(
            "authPolicy",
            string_map("context"),
            boolean("disabled"),
        ),
        _CONDITIONS,
        objects(
            "cookieRewritePolicies",
            obj(
                "domainRewrite",
                string("value", required=True),
            ),
            string("name", required=True),
            obj(
                "pathRewrite",
                string("value", required=True),
            ),
            string("sameSite"),
            boolean("secure"),
        ),
        obj(
            "directResponsePolicy",
            string("body"),
            integer("statusCode"),
        ),
        boolean("enableWebsockets"),
        obj(
            "failurePolicy",
            integer("count"),
            boolean("passiveHealthCheckEnabled"),
            string("perTryTimeout"),
            boolean("retryPolicyEnabled"),
        ),
        obj(
            "healthCheckPolicy",
            objects(
                "expectedStatuses",
                integer("end"),
                integer("start"),
            ),
            integer("healthyThresholdCount"),
            string("host"),
            integer("intervalSeconds"),
            string("path", required=True),
            integer("timeoutSeconds"),
            integer("unhealthyThresholdCount"),
        ),
        obj(
            "internalRedirectPolicy",
            string("allowCrossSchemeRedirect"),
            boolean("denyRepeatedRouteRedirect"),
            integer("maxInternalRedirects"),
            integers("redirectResponseCodes"),
        ),
        objects(
            "ipAllowPolicy",
            string("cidr", required=True),
            string("source", required=True),
        ),
        objects(
            "ipDenyPolicy",
            string("cidr", required=True),
            string("source", required=True),
        ),
        obj(
            "jwtVerificationPolicy",
            boolean("disabled"),
            string("require"),
        ),
        _LOAD_BALANCER,
        obj(
            "pathRewritePolicy",
            objects(
                "replacePrefix",
                string("prefix"),
                string("replacement", required=True),
            ),
        ),
        boolean("permitInsecure"),
        _RATE_LIMIT_POLICY,
        obj(
            "requestHeadersPolicy",
            strings("remove"),
            objects(
                "set",
                string("name", required=True),
                string("value", required=True),
            ),
        ),
        obj(
            "requestRedirectPolicy",
            string("hostname"),
            string("path"),
            integer("port"),
            string("prefix"),
            string("scheme"),
            integer("statusCode"),
        ),
        obj(
            "responseHeadersPolicy",
            strings("remove"),
            objects(
                "set",
                string("name", required=True),
                string("value", required=True),
            ),
        ),
        obj(
            "retryPolicy",
            integer("count"),
            string("perTryTimeout"),
            integers("retriableStatusCodes"),
            strings("retryOn"),
        ),
        objects(
            "services",
            objects(
                "cookieRewritePolicies",
                obj("domainRewrite", string("value", required=True)),
                string("name", required=True),
                obj("pathRewrite", string("value", required=True)),
                string("sameSite"),
                boolean("secure"),
            ),
            integer("healthPort"),
            boolean("mirror"),
            string("name", required=True),
            integer("port"),
            string("protocol"),
            obj(
                "requestHeadersPolicy",
                strings("remove"),
                objects(
                    "set",
                    string("name", required=True),
                    string("value", required=True),
                ),
            ),
            obj(
                "responseHeadersPolicy",
                strings("remove"),
                objects(
                    "set",
                    string("name", required=True),
                    string("value", required=True),
                ),
            ),
            obj(
                "slowStartPolicy",
                string("aggression"),
                integer("minWeightPercent"),
                string("window", required=True),
            ),
            obj(
                "validation",
                string("caSecret", required=True),
                string("subjectName"),
                strings("subjectNames"),
            ),
            integer("weight"),
        ),
        obj(
            "timeoutPolicy",
            string("idle"),
            string("idleConnection"),
            string("request"),
            string("response"),
        ),
    ),
    obj(
        "tcpproxy",
        obj(
            "healthCheckPolicy",
            integer("healthyThresholdCount"),
            integer("intervalSeconds"),
            integer("timeoutSeconds"),
            integer("unhealthyThresholdCount"),
        ),
        obj(
            "include",
            string("name", required=True),
            string("namespace"),
        ),
        obj(
            "includes",
            string("name", required=True),
            string("namespace"),
        ),
        obj("loadBalancerPolicy", opaque_list("requestHashPolicies"), string("strategy")),
        objects(
            "services",
            objects(
                "cookieRewritePolicies",
                obj("domainRewrite", string("value", required=True)),
                string("name", required=True),
                obj("pathRewrite", string("value", required=True)),
                string("sameSite"),
                boolean("secure"),
            ),
            integer("healthPort"),
            boolean("mirror"),
            string("name", required=True),
            integer("port"),
            string("protocol"),
            _headers_policy("requestHeadersPolicy"),
            _headers_policy("responseHeadersPolicy"),
            _SLOW_START,
            obj(
                "validation",
                string("caSecret", required=True),
                string("subjectName"),
                strings("subjectNames"),
            ),
            integer("weight"),
        ),
    ),
    obj(
        "virtualhost",
        obj(
            "authorization",
            obj(
                "authPolicy",
                string_map("context"),
                boolean("disabled"),
            ),
            obj(
                "extensionRef",
                string("apiVersion"),
                string("name"),
                string("namespace"),
            ),
            boolean("failOpen"),
            string("responseTimeout"),
            obj(
                "withRequestBody",
                boolean("allowPartialMessage"),
                integer("maxRequestBytes"),
                boolean("packAsBytes"),
            ),
        ),
        obj(
            "corsPolicy",
            boolean("allowCredentials"),
            strings("allowHeaders"),
            strings("allowMethods"),
            strings("allowOrigin"),
            boolean("allowPrivateNetwork"),
            strings("exposeHeaders"),
            string("maxAge"),
        ),
        string("fqdn"),
        objects(
            "ipAllowPolicy",
            string("cidr", required=True),
            string("source", required=True),
        ),
        objects(
            "ipDenyPolicy",
            string("cidr", required=True),
            string("source", required=True),
        ),
        objects(
            "jwtProviders",
            strings("audiences"),
            boolean("default"),
            boolean("forwardJWT"),
            string("issuer"),
            string("name", required=True),
            obj(
                "remoteJWKS",
                string("cacheDuration"),
                string("dnsLookupFamily"),
                string("timeout"),
                string("uri", required=True),
                _UPSTREAM_VALIDATION,
                required=True,
            ),
        ),
        _RATE_LIMIT_POLICY,
        obj(
            "tls",
            obj(
                "clientValidation",
                string("caSecret"),
                boolean("crlOnlyVerifyLeafCert"),
                string("crlSecret"),
                obj(
                    "forwardClientCertificate",
                    boolean("cert"),
                    boolean("chain"),
                    boolean("dns"),
                    boolean("subject"),
                    boolean("uri"),
                ),
                boolean("optionalClientCertificate"),
                boolean("skipClientCertValidation"),
            ),
            boolean("enableFallbackCertificate"),
            string("maximumProtocolVersion"),
            string("minimumProtocolVersion"),
            boolean("passthrough"),
            string("secretName"),
        ),
    ),
)

# ExtensionService (`projectcontour.io/v1alpha1`): the authorization servers HTTPProxies name.
EXTENSION_SERVICE_SHORT_NAMES = ("extensionservice", "extensionservices")
EXTENSION_SERVICE_SPEC = obj(
    "spec",
    objects(
        "services",
        string("name", required=True),
        integer("port", required=True),
        integer("weight"),
        required=True,
    ),
    string("protocol"),
    string("protocolVersion"),
    obj("timeoutPolicy", string("idle"), string("idleConnection"), string("response")),
    obj("loadBalancerPolicy", opaque_list("requestHashPolicies"), string("strategy")),
    obj(
        "validation",
        string("caSecret", required=True),
        string("subjectName"),
        strings("subjectNames"),
    ),
    opaque("circuitBreakerPolicy"),
)

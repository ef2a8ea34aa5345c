"""Contour's JWT verification on HTTPProxy (`dialects/httpproxy/jwt.py`): providers on TLS roots,
routes' `jwtVerificationPolicy`, Contour's errors, and the JWT filter and key set clusters the
translator makes of them."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from google.protobuf import json_format

from tests.e2e.certs import CA, tls_secret_yaml
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.envoy.translate import translate
from turnout.envoy.translate.http_filters import JWT_AUTHN_FILTER
from turnout.graph.model import (
    DnsLookupFamily,
    JwtValidation,
    Route,
    RoutePolicies,
    RoutingGraph,
    UpstreamValidation,
)
from turnout.graph.validate import policies_problem
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

_CA = CA()
_LEAF = _CA.issue("jwt.example.com")
_SECRETS = tls_secret_yaml("default", "cert", _LEAF.cert_pem, _LEAF.key_pem) + textwrap.dedent(
    f"""\
    ---
    apiVersion: v1
    kind: Secret
    metadata: {{name: jwks-ca, namespace: default}}
    stringData:
      ca.crt: {json.dumps(_CA.cert_pem)}
    ---
    apiVersion: v1
    kind: Service
    metadata: {{name: app, namespace: default}}
    spec: {{ports: [{{port: 80}}]}}
    """
)
PROVIDERS = """\
  - name: main
    issuer: https://issuer.example.com
    audiences: [api, web]
    default: true
    forwardJWT: true
    remoteJWKS:
      uri: https://keys.example.com/jwks.json
      timeout: 5s
      cacheDuration: 1h
      dnsLookupFamily: v4
      validation: {caSecret: jwks-ca, subjectName: keys.example.com}
  - name: other
    remoteJWKS: {uri: "http://10.0.0.1:8080/keys"}
"""
ROUTES = """\
  - conditions: [{prefix: /default}]
    services: [{name: app, port: 80}]
  - conditions: [{prefix: /other}]
    services: [{name: app, port: 80}]
    jwtVerificationPolicy: {require: other}
  - conditions: [{prefix: /open}]
    services: [{name: app, port: 80}]
    jwtVerificationPolicy: {disabled: true}
"""


def proxy(providers: str = PROVIDERS, routes: str = ROUTES, tls: bool = True) -> str:
    tls_line = "    tls: {secretName: cert}\n" if tls else ""
    return (
        _SECRETS
        + "---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        + "metadata: {name: root, namespace: default}\nspec:\n  virtualhost:\n"
        + "    fqdn: jwt.example.com\n"
        + tls_line
        + (f"    jwtProviders:\n{textwrap.indent(providers, '    ')}" if providers else "")
        + f"  routes:\n{routes}"
    )


def compile_text(text: str) -> tuple[RoutingGraph, dict[str, Any]]:
    snapshot = Snapshot.of(parse_text(text, "jwt.yaml").objects)
    result = compile_snapshot(snapshot, CompileOptions())
    [status] = [s for s in result.statuses if s.body.get("currentStatus") is not None]
    return result.graph, dict(status.body)


def routes_by_prefix(graph: RoutingGraph, listener: str = "ingress_https") -> dict[str, Route]:
    [lst] = [x for x in graph.listeners if x.name == listener]
    return {r.match.path.value: r for vh in lst.virtual_hosts for r in vh.routes}


def errors(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for c in body["conditions"]
        for e in c.get("errors", ())
    ]


def test_default_required_and_disabled_routes() -> None:
    graph, body = compile_text(proxy())
    assert body["currentStatus"] == "valid", body
    routes = routes_by_prefix(graph)
    main = routes["/default"].policies.jwt
    assert main == JwtValidation(
        issuer="https://issuer.example.com",
        jwks_uri="https://keys.example.com/jwks.json",
        audiences=("api", "web"),
        forward=True,
        require_subject=False,
        bearer_header_only=False,
        timeout_s=5.0,
        cache_s=3600.0,
        validation=main.validation if main is not None else None,
        dns_lookup_family=DnsLookupFamily.V4,
    )
    assert main is not None and main.validation is not None
    assert main.validation.subject_names == ("keys.example.com",)
    other = routes["/other"].policies.jwt
    assert other is not None and other.issuer is None and not other.forward
    # Contour's defaults: a one-second fetch timeout, Envoy's ten-minute cache.
    assert (other.timeout_s, other.cache_s) == (1.0, 600.0)
    assert routes["/open"].policies.jwt is None
    # The CA bundle the key server is checked against is part of the graph.
    assert [b.namespace + "/" + b.secret for b in graph.ca_bundles] == ["default/jwks-ca"]


def test_translation_has_a_provider_per_validation_and_a_cluster_per_key_server() -> None:
    graph, _ = compile_text(proxy())
    resources = translate(graph)
    jwks = {c.name: c for c in resources.clusters if c.name.startswith("turnout-jwks/")}
    assert sorted(jwks)[0] == "turnout-jwks/http/10.0.0.1:8080"
    [https_name] = [n for n in jwks if n.startswith("turnout-jwks/https/keys.example.com:443/")]
    tls = json_format.MessageToDict(jwks[https_name].transport_socket)
    assert (
        _CA.cert_pem.strip()
        in tls["typedConfig"]["commonTlsContext"]["validationContext"]["trustedCa"]["inlineString"]
    )
    dns = json_format.MessageToDict(jwks[https_name].cluster_type.typed_config)
    assert dns["dnsLookupFamily"] == "V4_ONLY"
    [listener] = [x for x in resources.listeners if x.name == "ingress_https"]
    config = _jwt_config(listener)
    providers = config["providers"]
    assert len(providers) == 2
    main = next(p for p in providers.values() if p.get("issuer") == "https://issuer.example.com")
    assert main["audiences"] == ["api", "web"] and main["forward"] is True
    assert "fromHeaders" not in main and "subjects" not in main  # Envoy's token sources
    assert main["remoteJwks"]["httpUri"] == {
        "uri": "https://keys.example.com/jwks.json",
        "cluster": https_name,
        "timeout": "5s",
    }
    assert main["remoteJwks"]["cacheDuration"] == "3600s"
    other = next(p for p in providers.values() if "issuer" not in p)
    assert "forward" not in other  # the token is removed before the backend
    assert set(config["requirementMap"]) == set(providers)


def _jwt_config(listener: Any) -> dict[str, Any]:
    for chain in listener.filter_chains:
        hcm = json_format.MessageToDict(chain.filters[0].typed_config)
        for f in hcm["httpFilters"]:
            if f["name"] == JWT_AUTHN_FILTER:
                return dict(f["typedConfig"])
    raise AssertionError("no JWT filter")


@pytest.mark.parametrize(
    ("providers", "reason", "message"),
    [
        (
            "  - {name: a, remoteJWKS: {uri: 'http://k/a'}}\n"
            "  - {name: a, remoteJWKS: {uri: 'http://k/b'}}\n",
            "DuplicateProviderName",
            "Spec.VirtualHost.JWTProviders is invalid: duplicate name a",
        ),
        (
            "  - {name: a, default: true, remoteJWKS: {uri: 'http://k/a'}}\n"
            "  - {name: b, default: true, remoteJWKS: {uri: 'http://k/b'}}\n",
            "MultipleDefaultProvidersSpecified",
            "Spec.VirtualHost.JWTProviders is invalid: at most one provider can be set as the "
            "default",
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'ftp://k/a'}}\n",
            "RemoteJWKSSchemeInvalid",
            'Spec.VirtualHost.JWTProviders.RemoteJWKS.URI has invalid scheme "ftp", must be '
            "http or https",
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'http://k:x/a'}}\n",
            "RemoteJWKSURIInvalid",
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.URI is invalid: ",
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'http://k/a', validation: {caSecret: jwks-ca, "
            "subjectName: k}}}\n",
            "RemoteJWKSUpstreamValidationInvalid",
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation must not be specified "
            "when URI scheme is http.",
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'https://k/a', validation: {caSecret: nope, "
            "subjectName: k}}}\n",
            "RemoteJWKSUpstreamValidationInvalid",
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation is invalid: invalid CA "
            'Secret "default/nope": Secret not found',
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'http://k/a', timeout: soon}}\n",
            "RemoteJWKSTimeoutInvalid",
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.Timeout is invalid: time: invalid "
            'duration "soon"',
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'http://k/a', cacheDuration: 1x}}\n",
            "RemoteJWKSCacheDurationInvalid",
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.CacheDuration is invalid: time: unknown "
            'unit "x" in duration "1x"',
        ),
        (
            "  - {name: a, remoteJWKS: {uri: 'http://k/a', dnsLookupFamily: v5}}\n",
            "RemoteJWKSDNSLookupFamilyInvalid",
            'Spec.VirtualHost.JWTProviders.RemoteJWKS.DNSLookupFamily has an invalid value "v5", '
            "must be auto, all, v4 or v6",
        ),
    ],
)
def test_provider_errors_drop_the_root(providers: str, reason: str, message: str) -> None:
    graph, body = compile_text(proxy(providers, "  - services: [{name: app, port: 80}]\n"))
    [(type_, found_reason, found_message)] = errors(body)
    assert (type_, found_reason) == ("JWTVerificationError", reason)
    assert found_message.startswith(message), found_message
    assert not any(vh.routes for lst in graph.listeners for vh in lst.virtual_hosts)


def test_providers_need_a_root_that_terminates_tls() -> None:
    graph, body = compile_text(proxy(tls=False))
    assert errors(body) == [
        (
            "JWTVerificationError",
            "JWTVerificationNotPermitted",
            "Spec.VirtualHost.JWTProviders can only be defined for root HTTPProxies that "
            "terminate TLS",
        )
    ]
    assert not graph.listeners or not any(vh.routes for vh in graph.listeners[0].virtual_hosts)


@pytest.mark.parametrize("tls", [True, False])
def test_a_route_requiring_an_unknown_provider_drops_the_root(tls: bool) -> None:
    routes = "  - services: [{name: app, port: 80}]\n    jwtVerificationPolicy: {require: nope}\n"
    graph, body = compile_text(proxy(PROVIDERS if tls else "", routes, tls=tls))
    assert errors(body) == [
        (
            "JWTVerificationError",
            "JWTProviderNotDefined",
            'Route references an undefined JWT provider "nope"',
        )
    ]
    assert not any(vh.routes for lst in graph.listeners for vh in lst.virtual_hosts)


def test_require_and_disabled_together_are_refused() -> None:
    routes = (
        "  - services: [{name: app, port: 80}]\n"
        "    jwtVerificationPolicy: {require: main, disabled: true}\n"
    )
    _, body = compile_text(proxy(routes=routes))
    assert errors(body) == [
        (
            "JWTVerificationError",
            "InvalidJWTVerificationPolicy",
            "route's JWT verification policy cannot specify both require and disabled",
        )
    ]


def test_included_routes_take_the_roots_default_and_permit_insecure_checks_too() -> None:
    root = proxy(routes="").replace(
        "  routes:\n", "  includes: [{name: child, conditions: [{prefix: /child}]}]\n"
    )
    child = (
        "---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        "metadata: {name: child, namespace: default}\nspec:\n  routes:\n"
        "  - services: [{name: app, port: 80}]\n    permitInsecure: true\n"
    )
    snapshot = Snapshot.of(parse_text(root + child, "jwt.yaml").objects)
    graph = compile_snapshot(snapshot, CompileOptions()).graph
    https = routes_by_prefix(graph)["/child"].policies.jwt
    http = routes_by_prefix(graph, "ingress_http")["/child"].policies.jwt
    assert https is not None and https.issuer == "https://issuer.example.com"
    assert http == https


def test_the_net_checks_contours_fields() -> None:
    def problem(**fields: Any) -> str | None:
        jwt = JwtValidation(None, "https://keys.example.com/jwks", **fields)
        return policies_problem(RoutePolicies(jwt=jwt), frozenset())

    assert problem() is None  # no issuer: none checked
    assert problem(audiences=("api",), timeout_s=0.25, cache_s=600.0) is None
    assert problem(audiences=("a\r\nb",)) is not None
    assert problem(timeout_s=-1.0) is not None
    assert problem(cache_s=float("inf")) is not None
    bad_name = UpstreamValidation(ca_secret="default/ca/1", subject_names=("",))
    assert problem(validation=bad_name) is not None

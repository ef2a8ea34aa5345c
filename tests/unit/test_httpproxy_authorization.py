"""HTTPProxy external authorization: ExtensionService, `virtualhost.authorization`, route
`authPolicy`, their Contour statuses, and the Envoy configuration (checked by Envoy itself)."""

from __future__ import annotations

import json
from typing import Any

from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from tests.builders import endpoint_slice, kube_object, service
from tests.e2e.certs import CA
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import authorization_check, evaluate, make_request
from turnout.graph.model import RouteAuthorization, UpstreamProtocol
from turnout.objects import KubeObject
from turnout.store import Snapshot

HOST = "app.example.com"


def _tls_secret() -> KubeObject:
    leaf = CA().issue(HOST)
    return kube_object(
        "v1",
        "Secret",
        "cert",
        type="kubernetes.io/tls",
        stringData={"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem},
    )


def _extension(**spec: Any) -> KubeObject:
    body = {"services": [{"name": "authz", "port": 9000}], "protocol": "h2c", **spec}
    return kube_object("projectcontour.io/v1alpha1", "ExtensionService", "authz", spec=body)


def _proxy(auth: dict[str, Any] | None, *, tls: bool = True) -> KubeObject:
    vhost: dict[str, Any] = {"fqdn": HOST}
    if tls:
        vhost["tls"] = {"secretName": "cert"}
    if auth is not None:
        vhost["authorization"] = auth
    routes = [
        {
            "conditions": [{"prefix": "/public"}],
            "services": [{"name": "app", "port": 80}],
            "authPolicy": {"disabled": True},
        },
        {
            "conditions": [{"prefix": "/"}],
            "services": [{"name": "app", "port": 80}],
            "authPolicy": {"context": {"route": "root"}},
        },
    ]
    return kube_object(
        "projectcontour.io/v1", "HTTPProxy", "app", spec={"virtualhost": vhost, "routes": routes}
    )


def _compile(*objects: KubeObject) -> CompileResult:
    base = [
        service("app"),
        endpoint_slice("app", ["10.0.0.1"]),
        service("authz", port=9000),
        endpoint_slice("authz", ["10.0.0.2"], ports=((None, 9000),)),
        _tls_secret(),
    ]
    return compile_snapshot(Snapshot.of([*base, *objects]), CompileOptions())


def _status(result: CompileResult, kind: str) -> dict[str, Any]:
    found = next(s for s in result.statuses if s.ref.kind == kind)
    body: dict[str, Any] = json.loads(json.dumps(dict(found.body)))
    return body


AUTH = {
    "extensionRef": {"name": "authz"},
    "responseTimeout": "2s",
    "authPolicy": {"context": {"tenant": "a", "route": "vhost"}},
}


def test_authorization_compiles_to_the_https_host_and_its_routes() -> None:
    result = _compile(_extension(), _proxy(AUTH))
    assert _status(result, "HTTPProxy")["currentStatus"] == "valid"
    ext = _status(result, "ExtensionService")["conditions"][0]
    assert (ext["status"], ext["message"]) == ("True", "Valid ExtensionService")
    https = next(lst for lst in result.graph.listeners if lst.name == "ingress_https")
    vh = https.virtual_hosts[0]
    auth = vh.policies.authorization
    assert auth is not None and auth.response_timeout_s == 2.0 and not auth.fail_open
    cluster = result.graph.cluster(auth.cluster)
    assert cluster is not None and cluster.protocol is UpstreamProtocol.H2C
    by_prefix = {r.match.path.value: r.policies.authorization for r in vh.routes}
    assert by_prefix["/public"] == RouteAuthorization(
        disabled=True, context=(("route", "vhost"), ("tenant", "a"))
    )
    assert by_prefix["/"] == RouteAuthorization(context=(("route", "root"), ("tenant", "a")))
    # The plain-HTTP host only redirects to HTTPS: no check there.
    http = next(lst for lst in result.graph.listeners if lst.name == "ingress_http")
    assert http.virtual_hosts[0].policies.authorization is None


def test_envoy_accepts_the_ext_authz_filter_and_per_route_settings() -> None:
    result = _compile(_extension(), _proxy({**AUTH, "failOpen": True, "withRequestBody": {}}))
    resources = translate(result.graph)
    chains = [
        c for lst in resources.listeners if lst.name == "ingress_https" for c in lst.filter_chains
    ]
    hcm = hcm_pb2.HttpConnectionManager()
    chains[0].filters[0].typed_config.Unpack(hcm)
    authz = next(f for f in hcm.http_filters if f.name == "envoy.filters.http.ext_authz")
    config = ext_authz_pb2.ExtAuthz()
    authz.typed_config.Unpack(config)
    assert config.failure_mode_allow and config.with_request_body.max_request_bytes == 1024
    assert config.grpc_service.envoy_grpc.cluster_name.startswith("default/authz/9000")
    routes = {
        r.match.prefix: r
        for rc in resources.routes
        for vh in rc.virtual_hosts
        for r in vh.routes
        if rc.name.startswith("https") and vh.name == HOST
    }
    per_route = ext_authz_pb2.ExtAuthzPerRoute()
    routes["/public"].typed_per_filter_config["envoy.filters.http.ext_authz"].Unpack(per_route)
    assert per_route.disabled
    per_route = ext_authz_pb2.ExtAuthzPerRoute()
    routes["/"].typed_per_filter_config["envoy.filters.http.ext_authz"].Unpack(per_route)
    assert dict(per_route.check_settings.context_extensions) == {"route": "root", "tenant": "a"}
    outcome = validate_resources(resources)
    assert outcome.ok, outcome.output


def test_explain_says_the_answer_depends_on_the_server() -> None:
    result = _compile(_extension(), _proxy(AUTH))
    checked = evaluate(result.graph, make_request(HOST, "/x", listener="ingress_https"))
    assert authorization_check(checked) is not None
    skipped = evaluate(result.graph, make_request(HOST, "/public", listener="ingress_https"))
    assert authorization_check(skipped) is None


def _errors(result: CompileResult) -> list[tuple[str, str, str]]:
    valid = _status(result, "HTTPProxy")["conditions"][0]
    return [(e["type"], e["reason"], e["message"]) for e in valid.get("errors", [])]


def test_contour_auth_errors() -> None:
    assert _errors(_compile(_extension(), _proxy(AUTH, tls=False))) == [
        (
            "AuthError",
            "AuthNotPermitted",
            "Spec.VirtualHost.Authorization.ExtensionServiceRef can only be defined for root "
            "HTTPProxies that terminate TLS",
        )
    ]
    assert _errors(_compile(_proxy(AUTH))) == [
        (
            "AuthError",
            "ExtensionServiceNotFound",
            'Spec.Virtualhost.Authorization.ServiceRef extension service "default/authz" not found',
        )
    ]
    bad = {**AUTH, "extensionRef": {"name": "authz", "apiVersion": "foo/bar"}}
    assert _errors(_compile(_extension(), _proxy(bad)))[0][1] == "AuthBadResourceVersion"
    slow = {**AUTH, "responseTimeout": "forever"}
    assert _errors(_compile(_extension(), _proxy(slow)))[0][1] == "AuthResponseTimeoutInvalid"


def test_an_extension_service_with_problems_has_its_own_status() -> None:
    result = _compile(
        kube_object(
            "projectcontour.io/v1alpha1",
            "ExtensionService",
            "authz",
            spec={"services": [{"name": "missing", "port": 9000}], "protocol": "h2c"},
        ),
        _proxy(AUTH),
    )
    valid = _status(result, "ExtensionService")["conditions"][0]
    assert valid["status"] == "False"
    assert valid["errors"][0]["reason"] == "ServiceUnresolvedReference"
    assert _errors(result)[0][1] == "ExtensionServiceNotFound"

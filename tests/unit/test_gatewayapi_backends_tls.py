"""BackendTLSPolicy (`dialects/gatewayapi/backend_tls.py`): what a backendRef to a targeted Service
port gets (TLS upstream, validation against the policy's CA and names), the policy's own
conditions (Accepted, ResolvedRefs with the spec's reasons), conflicts, and its ancestors."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from envoy.extensions.transport_sockets.tls.v3 import common_pb2

from tests import builders
from tests.builders import kube_object
from tests.e2e.certs import CA
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.dialects.gatewayapi.backend_refs import resolve_backend_ref
from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.envoy.translate.clusters import upstream_tls_context
from turnout.graph.dialect import CompileContext, Ownership
from turnout.graph.model import (
    INVALID_BACKEND,
    CABundle,
    Cluster,
    Endpoint,
    UpstreamProtocol,
    UpstreamValidation,
)
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.graph.validate import cluster_problem
from turnout.objects import KubeObject, ObjectRef
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"
_CA = CA()


def obj(api: str, kind: str, name: str, created: str = "", **body: Any) -> KubeObject:
    return kube_object(api, kind, name, "apps", created=created, **body)


def service(name: str = "web", **port: Any) -> KubeObject:
    return builders.service(name, "apps", 443, port_name="https", **port)


def config_map(name: str = "ca", pem: str | None = None) -> KubeObject:
    return obj("v1", "ConfigMap", name, data={"ca.crt": _CA.cert_pem if pem is None else pem})


def policy(
    name: str = "btls",
    targets: list[dict[str, Any]] | None = None,
    created: str = "",
    **validation: Any,
) -> KubeObject:
    validation.setdefault("hostname", "web.example.com")
    if "wellKnownCACertificates" not in validation:
        validation.setdefault(
            "caCertificateRefs", [{"group": "", "kind": "ConfigMap", "name": "ca"}]
        )
    spec = {
        "targetRefs": targets
        if targets is not None
        else [{"group": "", "kind": "Service", "name": "web"}],
        "validation": validation,
    }
    return obj(f"{GROUP}/v1", "BackendTLSPolicy", name, created, spec=spec)


ROUTE = obj(f"{GROUP}/v1", "HTTPRoute", "r", spec={})


class Compiled:
    def __init__(self, *objects: KubeObject) -> None:
        snapshot = Snapshot.of(objects)
        self.backends = BackendResolver(snapshot)
        self.secrets = SecretResolver(snapshot)
        self.ctx = CompileContext(CompileOptions(), Ownership(), self.backends, self.secrets)
        self.grants = ReferenceGrants.from_snapshot(snapshot)

    def resolve(self, ref: dict[str, Any], app: str = "http") -> Any:
        return resolve_backend_ref(
            ROUTE, ref, "spec.rules[0].backendRefs[0]", self.ctx, self.grants, app=app
        )

    def cluster(self, name: str) -> Cluster:
        return next(c for c in self.backends.clusters() if c.name == name)

    def conditions(self, gateway: ObjectRef | None = None) -> dict[str, dict[str, Any]]:
        gw = gateway or ObjectRef(GROUP, "Gateway", "apps", "gw")
        (status,) = self.grants.backend_tls.statuses(
            {ROUTE.ref: [gw]}, "turnout.dev/gateway-controller", self.ctx
        )
        (ancestor,) = status.body["ancestors"]
        assert ancestor["ancestorRef"] == {
            "group": GROUP,
            "kind": "Gateway",
            "namespace": "apps",
            "name": "gw",
        }
        assert ancestor["controllerName"] == "turnout.dev/gateway-controller"
        return {c["type"]: c for c in ancestor["conditions"]}


def test_policy_makes_the_upstream_tls_and_validated() -> None:
    c = Compiled(service(), config_map(), policy())
    result = c.resolve({"name": "web", "port": 443})
    assert result.problem is None
    cluster = c.cluster(result.cluster)
    assert cluster.protocol is UpstreamProtocol.TLS
    assert isinstance(cluster.validation, UpstreamValidation)
    assert cluster.validation.sni == "web.example.com"
    assert cluster.validation.subject_names == ("web.example.com",)
    bundle = next(
        b for b in c.secrets.ca_bundles.bundles() if b.name == cluster.validation.ca_secret
    )
    assert bundle.ca_certificates == _CA.cert_pem
    conditions = c.conditions()
    assert conditions["Accepted"]["status"] == "True"
    assert conditions["ResolvedRefs"]["status"] == "True"


@pytest.mark.parametrize(
    ("app", "app_protocol", "expected"),
    [
        ("http", "kubernetes.io/h2c", UpstreamProtocol.H2),
        ("grpc", None, UpstreamProtocol.H2),
        ("http", "https", UpstreamProtocol.TLS),
        ("http", "kubernetes.io/wss", UpstreamProtocol.TLS),
    ],
)
def test_tls_flavour_follows_the_app_protocol(
    app: str, app_protocol: str | None, expected: UpstreamProtocol
) -> None:
    port: dict[str, Any] = {"appProtocol": app_protocol} if app_protocol else {}
    c = Compiled(service(**port), config_map(), policy())
    result = c.resolve({"name": "web", "port": 443}, app=app)
    assert result.problem is None
    assert c.cluster(result.cluster).protocol is expected


def test_tcp_and_tls_routes_pass_the_stream_on_untouched() -> None:
    c = Compiled(service(), config_map(), policy())
    result = c.resolve({"name": "web", "port": 443}, app="tls")
    cluster = c.cluster(result.cluster)
    assert cluster.protocol is UpstreamProtocol.TCP and cluster.validation is None


def test_subject_alt_names_replace_the_hostname_as_identity() -> None:
    sans = [
        {"type": "Hostname", "hostname": "a.example.com"},
        {"type": "Hostname", "hostname": "*.b.example.com"},
    ]
    c = Compiled(service(), config_map(), policy(subjectAltNames=sans))
    result = c.resolve({"name": "web", "port": 443})
    validation = c.cluster(result.cluster).validation
    assert validation is not None
    assert validation.subject_names == ("a.example.com", "*.b.example.com")
    assert validation.sni == "web.example.com"


def test_an_upper_case_https_app_protocol_is_tls_with_a_policy() -> None:
    # As upstream's BackendTLSPolicySANValidation declares it: IANA names are case-insensitive.
    c = Compiled(service(appProtocol="HTTPS"), config_map(), policy())
    result = c.resolve({"name": "web", "port": 443})
    assert result.problem is None
    assert c.cluster(result.cluster).protocol is UpstreamProtocol.TLS


def test_uri_subject_alt_names_are_matched_as_uris() -> None:
    sans = [
        {"type": "URI", "uri": "spiffe://cluster.local/ns/apps/sa/web"},
        {"type": "Hostname", "hostname": "a.example.com"},
    ]
    c = Compiled(service(), config_map(), policy(subjectAltNames=sans))
    result = c.resolve({"name": "web", "port": 443})
    assert result.problem is None
    validation = c.cluster(result.cluster).validation
    assert validation is not None
    assert validation.subject_uris == ("spiffe://cluster.local/ns/apps/sa/web",)
    assert validation.subject_names == ("a.example.com",)
    assert validation.sni == "web.example.com"
    assert c.conditions()["Accepted"]["status"] == "True"


def test_only_uri_subject_alt_names_drop_the_hostname_as_identity() -> None:
    sans = [{"type": "URI", "uri": "spiffe://cluster.local/web"}]
    c = Compiled(service(), config_map(), policy(subjectAltNames=sans))
    validation = c.cluster(c.resolve({"name": "web", "port": 443}).cluster).validation
    assert validation is not None
    assert validation.subject_names == ()
    assert validation.subject_uris == ("spiffe://cluster.local/web",)
    # The hostname is still the server name asked for.
    assert validation.sni == "web.example.com"


def test_policies_differing_only_in_uris_make_distinct_clusters() -> None:
    one = [{"type": "URI", "uri": "spiffe://cluster.local/one"}]
    two = [{"type": "URI", "uri": "spiffe://cluster.local/two"}]
    c = Compiled(
        service("web"),
        service("api"),
        config_map(),
        policy("one", subjectAltNames=one),
        policy("two", [{"group": "", "kind": "Service", "name": "api"}], subjectAltNames=two),
    )
    web = c.cluster(c.resolve({"name": "web", "port": 443}).cluster)
    api = c.cluster(c.resolve({"name": "api", "port": 443}).cluster)
    assert web.validation is not None and api.validation is not None
    assert web.validation.subject_uris == ("spiffe://cluster.local/one",)
    assert api.validation.subject_uris == ("spiffe://cluster.local/two",)


def test_secret_ca_refs_work_too() -> None:
    secret = obj("v1", "Secret", "ca-secret", type="Opaque", stringData={"ca.crt": _CA.cert_pem})
    c = Compiled(
        service(),
        secret,
        policy(caCertificateRefs=[{"group": "", "kind": "Secret", "name": "ca-secret"}]),
    )
    assert c.resolve({"name": "web", "port": 443}).problem is None


def test_section_name_targets_one_port_and_wins_over_the_whole_service() -> None:
    two_ports = obj(
        "v1",
        "Service",
        "web",
        spec={"ports": [{"port": 443, "name": "https"}, {"port": 80, "name": "http"}]},
    )
    port_policy = policy(
        "port",
        targets=[{"group": "", "kind": "Service", "name": "web", "sectionName": "https"}],
        hostname="port.example.com",
    )
    c = Compiled(two_ports, config_map(), port_policy)
    tls = c.cluster(c.resolve({"name": "web", "port": 443}).cluster)
    plain = c.cluster(c.resolve({"name": "web", "port": 80}).cluster)
    assert tls.validation is not None and tls.validation.sni == "port.example.com"
    assert plain.validation is None and plain.protocol is UpstreamProtocol.HTTP
    c = Compiled(
        two_ports, config_map(), port_policy, policy("whole", hostname="whole.example.com")
    )
    tls = c.cluster(c.resolve({"name": "web", "port": 443}).cluster)
    plain = c.cluster(c.resolve({"name": "web", "port": 80}).cluster)
    assert tls.validation is not None and tls.validation.sni == "port.example.com"
    assert plain.validation is not None and plain.validation.sni == "whole.example.com"


@pytest.mark.parametrize(
    ("objects", "accepted", "resolved"),
    [
        ((), "NoValidCACertificate", "InvalidCACertificateRef"),  # the ConfigMap does not exist
        ((config_map(pem="not a certificate"),), "NoValidCACertificate", "InvalidCACertificateRef"),
    ],
)
def test_invalid_ca_refs_make_the_backend_invalid(
    objects: tuple[KubeObject, ...], accepted: str, resolved: str
) -> None:
    c = Compiled(service(), policy(), *objects)
    result = c.resolve({"name": "web", "port": 443, "weight": 2})
    assert result.cluster is None and result.weight == 2
    assert result.problem is not None
    # The route's reason is one of the spec's route reasons; the policy's is in the message.
    assert (result.problem.condition, result.problem.reason) == ("ResolvedRefs", "BackendNotFound")
    assert "BackendTLSPolicy btls" in result.problem.message
    assert f"(Accepted {accepted})" in result.problem.message
    conditions = c.conditions()
    assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == (
        "False",
        accepted,
    )
    assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
        "False",
        resolved,
    )


def test_invalid_kind_of_a_ca_ref() -> None:
    c = Compiled(
        service(),
        policy(caCertificateRefs=[{"group": "example.com", "kind": "Bundle", "name": "ca"}]),
    )
    assert c.resolve({"name": "web", "port": 443}).cluster is None
    conditions = c.conditions()
    assert conditions["ResolvedRefs"]["reason"] == "InvalidKind"
    assert conditions["Accepted"]["reason"] == "NoValidCACertificate"


def test_one_valid_ref_among_invalid_ones_is_used() -> None:
    refs = [
        {"group": "", "kind": "ConfigMap", "name": "missing"},
        {"group": "", "kind": "ConfigMap", "name": "ca"},
    ]
    c = Compiled(service(), config_map(), policy(caCertificateRefs=refs))
    assert c.resolve({"name": "web", "port": 443}).problem is None
    conditions = c.conditions()
    assert conditions["Accepted"]["status"] == "True"
    assert conditions["ResolvedRefs"]["reason"] == "InvalidCACertificateRef"


@pytest.mark.parametrize(
    "validation",
    [
        {"wellKnownCACertificates": "Public"},
        {
            "wellKnownCACertificates": "System",
            "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
        },
        {"caCertificateRefs": []},
        {"subjectAltNames": [{"type": "URI", "uri": "cluster/web"}]},
        {"subjectAltNames": [{"type": "URI", "uri": "spiffe:web"}]},
        {"subjectAltNames": [{"type": "URI", "uri": "spiffe://" + "a" * 245}]},
        {"subjectAltNames": [{"type": "URI", "uri": "spiffe://cluster/web\r\nx"}]},
        {"subjectAltNames": [{"type": "URI"}]},
        {"subjectAltNames": [{"type": "URI", "uri": "spiffe://c/w", "hostname": "a.example.com"}]},
        {"subjectAltNames": [{"type": "Hostname", "uri": "spiffe://c/w"}]},
        {"subjectAltNames": [{"type": "IP", "hostname": "a.example.com"}]},
        {"hostname": ""},
        {"hostname": "Web.example.com"},
        {"hostname": "*.example.com"},
        {"hostname": "web_1.example.com"},
        {"hostname": "web.example.com."},
        {"hostname": "a" * 254},
        {"subjectAltNames": [{"type": "Hostname", "hostname": "A.example.com"}]},
        {"subjectAltNames": [{"type": "Hostname", "hostname": "a.*.example.com"}]},
        {"subjectAltNames": [{"type": "Hostname", "hostname": "bad host"}]},
    ],
)
def test_unsupported_validation_is_invalid(validation: dict[str, Any]) -> None:
    c = Compiled(service(), config_map(), policy(**validation))
    result = c.resolve({"name": "web", "port": 443})
    assert result.cluster is None
    assert result.problem is not None and result.problem.reason == "BackendNotFound"
    accepted = c.conditions()["Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert accepted["message"].startswith("spec.validation")


def test_conflicts_the_older_policy_wins() -> None:
    older = policy("zz-older", created="2024-01-01T00:00:00Z", hostname="older.example.com")
    newer = policy("aa-newer", created="2025-01-01T00:00:00Z", hostname="newer.example.com")
    c = Compiled(service(), config_map(), older, newer)
    result = c.resolve({"name": "web", "port": 443})
    validation = c.cluster(result.cluster).validation
    assert validation is not None and validation.sni == "older.example.com"
    gw = ObjectRef(GROUP, "Gateway", "apps", "gw")
    statuses = {s.ref.name: s for s in c.grants.backend_tls.statuses({ROUTE.ref: [gw]}, "x", c.ctx)}
    (loser,) = statuses["aa-newer"].body["ancestors"]
    (condition,) = loser["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Accepted",
        "False",
        "Conflicted",
    )
    assert "zz-older" in condition["message"]
    (winner,) = statuses["zz-older"].body["ancestors"]
    assert {c["type"]: c["status"] for c in winner["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }


def test_no_route_no_ancestors_and_services_without_policy_are_plain() -> None:
    c = Compiled(service(), service("other"), config_map(), policy())
    other = c.resolve({"name": "other", "port": 443})
    assert c.cluster(other.cluster).validation is None
    (status,) = c.grants.backend_tls.statuses({}, "x", c.ctx)
    assert status.body == {"ancestors": []}


def test_a_conflicted_policy_takes_no_target_from_a_newer_one() -> None:
    # A (oldest) holds web; B conflicts with A on web, so B is in force nowhere; C, newer than B,
    # targets only B's other Service and must be in force there.
    web_and_api = [
        {"group": "", "kind": "Service", "name": "web"},
        {"group": "", "kind": "Service", "name": "api"},
    ]
    a = policy("a", created="2024-01-01T00:00:00Z", hostname="a.example.com")
    b = policy("b", web_and_api, created="2024-02-01T00:00:00Z", hostname="b.example.com")
    c_policy = policy(
        "c",
        [{"group": "", "kind": "Service", "name": "api"}],
        created="2024-03-01T00:00:00Z",
        hostname="c.example.com",
    )
    c = Compiled(service(), service("api"), config_map(), a, b, c_policy)
    web = c.cluster(c.resolve({"name": "web", "port": 443}).cluster).validation
    api = c.cluster(c.resolve({"name": "api", "port": 443}).cluster).validation
    assert web is not None and web.sni == "a.example.com"
    assert api is not None and api.sni == "c.example.com"
    gw = ObjectRef(GROUP, "Gateway", "apps", "gw")
    users = {ROUTE.ref: [gw]}
    statuses = {s.ref.name: s for s in c.grants.backend_tls.statuses(users, "x", c.ctx)}
    accepted = {
        name: next(
            cond for cond in status.body["ancestors"][0]["conditions"] if cond["type"] == "Accepted"
        )
        for name, status in statuses.items()
    }
    assert {n: (a["status"], a["reason"]) for n, a in accepted.items()} == {
        "a": ("True", "Accepted"),
        "b": ("False", "Conflicted"),
        "c": ("True", "Accepted"),
    }
    assert "older BackendTLSPolicy a" in accepted["b"]["message"]


def test_conflicts_chain_in_age_order() -> None:
    # a holds web; b (web, api) is conflicted by a; c (api, db) is in force; d (db) conflicts
    # with c. The result does not depend on the order the policies are listed in.
    def target(*names: str) -> list[dict[str, Any]]:
        return [{"group": "", "kind": "Service", "name": n} for n in names]

    policies = [
        policy("a", target("web"), created="2024-01-01T00:00:00Z", hostname="a.example.com"),
        policy("b", target("web", "api"), created="2024-02-01T00:00:00Z", hostname="b.x.com"),
        policy("c", target("api", "db"), created="2024-03-01T00:00:00Z", hostname="c.x.com"),
        policy("d", target("db"), created="2024-04-01T00:00:00Z", hostname="d.x.com"),
    ]
    for ordering in (policies, policies[::-1]):
        c = Compiled(service(), service("api"), service("db"), config_map(), *ordering)
        snis = {
            name: c.cluster(c.resolve({"name": name, "port": 443}).cluster).validation
            for name in ("web", "api", "db")
        }
        assert {n: v.sni if v else None for n, v in snis.items()} == {
            "web": "a.example.com",
            "api": "c.x.com",
            "db": "c.x.com",
        }


def test_system_ca_certificates_validate_against_the_system_trust_store() -> None:
    # No ConfigMap in the snapshot: System needs none.
    c = Compiled(service(), policy(wellKnownCACertificates="System"))
    result = c.resolve({"name": "web", "port": 443})
    assert result.problem is None
    cluster = c.cluster(result.cluster)
    assert cluster.protocol is UpstreamProtocol.TLS
    assert cluster.validation == UpstreamValidation(
        ca_secret="",
        subject_names=("web.example.com",),
        sni="web.example.com",
        system_trust_store=True,
    )
    conditions = c.conditions()
    assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == (
        "True",
        "Accepted",
    )
    assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
        "True",
        "ResolvedRefs",
    )


def test_system_ca_certificates_keep_the_subject_alt_names() -> None:
    c = Compiled(
        service(),
        policy(
            wellKnownCACertificates="System",
            subjectAltNames=[{"type": "Hostname", "hostname": "*.internal.example.com"}],
        ),
    )
    result = c.resolve({"name": "web", "port": 443}, app="grpc")
    assert result.problem is None
    cluster = c.cluster(result.cluster)
    assert cluster.protocol is UpstreamProtocol.H2
    assert cluster.validation is not None and cluster.validation.system_trust_store
    assert cluster.validation.subject_names == ("*.internal.example.com",)
    assert cluster.validation.sni == "web.example.com"


def test_system_and_bundle_policies_are_distinct_clusters() -> None:
    # Two Services, one Service port each; the same port validated two ways must not share a
    # cluster (the settings are the cluster's identity).
    system = policy(
        "sys",
        targets=[{"group": "", "kind": "Service", "name": "web"}],
        wellKnownCACertificates="System",
    )
    bundle = policy("own", targets=[{"group": "", "kind": "Service", "name": "api"}])
    c = Compiled(service(), service("api"), config_map(), system, bundle)
    web = c.cluster(c.resolve({"name": "web", "port": 443}).cluster)
    api = c.cluster(c.resolve({"name": "api", "port": 443}).cluster)
    assert web.validation is not None and web.validation.system_trust_store
    assert api.validation is not None and not api.validation.system_trust_store
    assert api.validation.ca_secret != ""


def test_both_ca_sources_are_invalid_and_say_so() -> None:
    c = Compiled(
        service(),
        config_map(),
        policy(
            wellKnownCACertificates="System",
            caCertificateRefs=[{"group": "", "kind": "ConfigMap", "name": "ca"}],
        ),
    )
    result = c.resolve({"name": "web", "port": 443})
    assert result.cluster is None
    assert result.problem is not None and "(Accepted Invalid)" in result.problem.message
    accepted = c.conditions()["Accepted"]
    assert "caCertificateRefs and wellKnownCACertificates" in accepted["message"]


# --- TLSRoute: a terminating listener re-encrypts, passthrough cannot -------------------------

_TLS_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turnout}
spec: {controllerName: turnout.dev/gateway-controller}
---
apiVersion: v1
kind: Secret
metadata: {name: cert, namespace: apps}
type: kubernetes.io/tls
data: {tls.crt: CERT, tls.key: KEY}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ca, namespace: apps}
data: {ca.crt: CA}
---
apiVersion: v1
kind: Service
metadata: {name: be, namespace: apps}
spec: {ports: [{name: btls, port: 8443}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: btls, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: be, sectionName: btls}]
  validation:
    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    hostname: abc.example.com
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: turnout
  listeners:
  - name: tls
    port: 9443
    protocol: TLS
    hostname: tls.example.com
    tls: {mode: MODE, certificateRefs: [{name: cert}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  hostnames: [tls.example.com]
  rules: [{backendRefs: [{name: be, port: 8443}]}]
"""


def _tls_route_compile(mode: str, *, with_ca: bool = True) -> Any:
    issued = _CA.issue("tls.example.com")
    text = (
        _TLS_GATEWAY.replace("MODE", mode)
        .replace("CERT", base64.b64encode(issued.cert_pem.encode()).decode())
        .replace("KEY", base64.b64encode(issued.key_pem.encode()).decode())
        .replace("{ca.crt: CA}", "{ca.crt: " + json.dumps(_CA.cert_pem) + "}")
    )
    if not with_ca:
        text = text.replace("name: ca, namespace: apps", "name: other-ca, namespace: apps")
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects))


def _tls_route_parts(mode: str) -> tuple[Cluster, dict[str, Any], dict[str, Any]]:
    result = _tls_route_compile(mode)
    (proxy,) = [p for lst in result.graph.listeners for p in lst.tcp_proxies]
    (wc,) = proxy.clusters
    cluster = next(c for c in result.graph.clusters if c.name == wc.cluster)
    bodies = {s.ref.kind: s.body for s in result.statuses}
    return cluster, dict(bodies["TLSRoute"]), dict(bodies["BackendTLSPolicy"])


def test_a_terminating_tls_listener_re_encrypts_to_a_policy_backend() -> None:
    """BackendTLSPolicyTLSRouteTerminate (GEP-4274): the stream the gateway decrypted goes to the
    backend over TLS, validated against the policy's CA and hostname; the policy's ancestor is
    the Gateway, Accepted and ResolvedRefs True."""
    cluster, route, btls = _tls_route_parts("Terminate")
    assert cluster.protocol is UpstreamProtocol.TLS
    assert isinstance(cluster.validation, UpstreamValidation)
    assert cluster.validation.sni == "abc.example.com"
    assert cluster.validation.subject_names == ("abc.example.com",)
    (parent,) = route["parents"]
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }
    (ancestor,) = btls["ancestors"]
    assert ancestor["ancestorRef"]["name"] == "gw"
    assert {c["type"]: (c["status"], c["reason"]) for c in ancestor["conditions"]} == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
    }


def test_a_passthrough_listener_cannot_apply_the_policy_and_says_so() -> None:
    cluster, route, btls = _tls_route_parts("Passthrough")
    assert cluster.protocol is UpstreamProtocol.TCP and cluster.validation is None
    # The backend itself is fine: the route is served, the client's TLS reaches it.
    (parent,) = route["parents"]
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }
    (ancestor,) = btls["ancestors"]
    assert ancestor["ancestorRef"]["name"] == "gw"
    (accepted,) = ancestor["conditions"]
    assert (accepted["type"], accepted["status"], accepted["reason"]) == (
        "Accepted",
        "False",
        "NotApplicable",
    )
    assert "Passthrough" in accepted["message"]


def test_a_tls_route_policy_that_cannot_be_honoured_refuses_the_connections() -> None:
    """As for HTTP: a policy whose CA does not resolve makes the ref invalid; the terminated
    stream is refused rather than sent in plain text."""
    result = _tls_route_compile("Terminate", with_ca=False)
    (proxy,) = [p for lst in result.graph.listeners for p in lst.tcp_proxies]
    assert [wc.cluster for wc in proxy.clusters] == [INVALID_BACKEND]
    route = next(s.body for s in result.statuses if s.ref.kind == "TLSRoute")
    (parent,) = route["parents"]
    resolved = next(c for c in parent["conditions"] if c["type"] == "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")


# --- URI subject alternative names in Envoy and the graph's safety net ------------------------


def _tls_cluster(validation: UpstreamValidation) -> Cluster:
    return Cluster(
        "apps/web/443/x",
        "apps",
        "web",
        443,
        UpstreamProtocol.TLS,
        endpoints=(Endpoint("127.0.0.1", 9443),),
        validation=validation,
    )


def test_envoy_matches_hostnames_as_dns_and_uris_as_uri_sans() -> None:
    bundle = CABundle("apps/ca/x", "apps", "ca", _CA.cert_pem)
    validation = UpstreamValidation(
        ca_secret=bundle.name,
        subject_names=("a.example.com",),
        sni="web.example.com",
        subject_uris=("spiffe://cluster.local/web",),
    )
    ctx = upstream_tls_context(_tls_cluster(validation), {bundle.name: bundle})
    assert ctx.sni == "web.example.com"
    vc = ctx.common_tls_context.validation_context
    assert vc.trusted_ca.inline_string == _CA.cert_pem
    matchers = [(m.san_type, m.matcher.exact) for m in vc.match_typed_subject_alt_names]
    assert matchers == [
        (common_pb2.SubjectAltNameMatcher.DNS, "a.example.com"),
        (common_pb2.SubjectAltNameMatcher.URI, "spiffe://cluster.local/web"),
    ]


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("", "upstream validation subject URI[0] is empty"),
        ("spiffe://c/w\r\nx", "upstream validation subject URI[0]"),
    ],
)
def test_the_safety_net_refuses_bad_subject_uris(uri: str, problem: str) -> None:
    validation = UpstreamValidation("apps/ca/x", (), "web.example.com", subject_uris=(uri,))
    found = cluster_problem(_tls_cluster(validation))
    assert found is not None and found.startswith(problem)
    fine = UpstreamValidation("apps/ca/x", (), "web.example.com", subject_uris=("spiffe://c/w",))
    assert cluster_problem(_tls_cluster(fine)) is None

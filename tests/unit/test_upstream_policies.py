"""Upstream policies: the cluster translation (TLS, validation, DNS, outlier detection, slow
start, connect timeout), the ExternalName decision of the BackendResolver, and the HTTPProxy
mapping that the fixtures cannot see (failurePolicy retries, slow start strategies, Go
durations)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envoy.extensions.clusters.dns.v3 import dns_cluster_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from tests.cases.upstream import BUNDLE, CA_PEM, cluster, every_upstream_policy
from tests.proto_checks import deprecated_fields
from turnout.app import compile_snapshot
from turnout.cli import main
from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy import upstream
from turnout.envoy.translate import translate
from turnout.envoy.translate.clusters import (
    HTTP_PROTOCOL_OPTIONS,
    translate_cluster,
    upstream_sni,
)
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import (
    Cluster,
    Forward,
    LoadBalancerStrategy,
    OutlierDetection,
    RetryPolicy,
    RoutingGraph,
    SlowStart,
    UpstreamProtocol,
    UpstreamValidation,
)
from turnout.graph.services import (
    EXTERNAL_NAME_INVALID,
    EXTERNAL_NAME_LOCALHOST,
    EXTERNAL_NAME_NOT_ENABLED,
    BackendResolver,
    ServicePort,
)
from turnout.sources.parse import parse_text
from turnout.store import Snapshot


def one(c: Cluster) -> Any:
    return translate_cluster(c, TranslateOptions(), {BUNDLE.name: BUNDLE})


def tls_context(out: Any) -> Any:
    assert out.transport_socket.name == "envoy.transport_sockets.tls"
    ctx = tls_pb2.UpstreamTlsContext()
    assert out.transport_socket.typed_config.Unpack(ctx)
    return ctx


def http2(out: Any) -> bool:
    if HTTP_PROTOCOL_OPTIONS not in out.typed_extension_protocol_options:
        return False
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].Unpack(opts)
    return opts.explicit_http_config.HasField("http2_protocol_options")


# --- protocols and TLS ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol", "tls", "h2"),
    [
        (UpstreamProtocol.HTTP, False, False),
        (UpstreamProtocol.H2C, False, True),
        (UpstreamProtocol.TLS, True, False),
        (UpstreamProtocol.H2, True, True),
    ],
)
def test_protocol_sets_tls_and_http2(protocol: UpstreamProtocol, tls: bool, h2: bool) -> None:
    out = one(cluster(protocol=protocol))
    assert out.HasField("transport_socket") is tls
    assert http2(out) is h2
    if tls:
        alpn = list(tls_context(out).common_tls_context.alpn_protocols)
        # h2 must be negotiated for HTTP/2 over TLS; HTTP/1.1 needs nothing.
        assert alpn == (["h2"] if h2 else [])


def test_tls_without_validation_is_encrypted_to_the_services_name() -> None:
    ctx = tls_context(one(cluster(protocol=UpstreamProtocol.TLS)))
    assert ctx.sni == "web.default.svc"
    assert not ctx.common_tls_context.HasField("validation_context")
    params = ctx.common_tls_context.tls_params
    assert params.tls_minimum_protocol_version == common_pb2.TlsParameters.TLSv1_2
    assert params.tls_maximum_protocol_version == common_pb2.TlsParameters.TLSv1_3


def test_validation_trusts_the_bundle_and_requires_a_subject_name() -> None:
    validation = UpstreamValidation(BUNDLE.name, ("backend.example.com", "backend.internal"))
    ctx = tls_context(one(cluster(protocol=UpstreamProtocol.H2, validation=validation)))
    vc = ctx.common_tls_context.validation_context
    assert vc.trusted_ca.inline_string == CA_PEM
    sans = [(m.san_type, m.matcher.exact) for m in vc.match_typed_subject_alt_names]
    dns = common_pb2.SubjectAltNameMatcher.DNS
    assert sans == [(dns, "backend.example.com"), (dns, "backend.internal")]
    assert not vc.match_subject_alt_names  # the deprecated field
    assert ctx.sni == "backend.example.com"


def test_a_missing_bundle_fails_closed() -> None:
    validation = UpstreamValidation("default/gone/x", ("backend.example.com",))
    vc = tls_context(
        one(cluster(protocol=UpstreamProtocol.TLS, validation=validation))
    ).common_tls_context.validation_context
    # No CA to trust and a pin no server matches: every handshake fails; none is unverified.
    assert not vc.HasField("trusted_ca")
    assert len(vc.verify_certificate_spki) == 1


@pytest.mark.parametrize(
    ("kwargs", "sni"),
    [
        ({}, "web.default.svc"),
        ({"dns_name": "api.example.com"}, "api.example.com"),
        ({"dns_name": "10.0.0.1"}, "web.default.svc"),  # an IP address is no server name
        (
            {"validation": UpstreamValidation("b", ("*.example.com",))},
            "web.default.svc",  # nor is a wildcard
        ),
        (
            {"validation": UpstreamValidation("b", ("a.example.com",), sni="s.example.com")},
            "s.example.com",
        ),
        ({"service": "", "namespace": ""}, None),
    ],
)
def test_upstream_sni(kwargs: dict[str, Any], sni: str | None) -> None:
    assert upstream_sni(cluster(protocol=UpstreamProtocol.TLS, **kwargs)) == sni


# --- discovery, timeouts, outlier detection, slow start ------------------------------------------


def test_external_name_is_a_dns_cluster_on_the_service_port() -> None:
    out = one(cluster(dns_name="api.example.com", endpoints=()))
    assert out.WhichOneof("cluster_discovery_type") == "cluster_type"
    assert out.cluster_type.name == "envoy.cluster.dns"
    dns = dns_cluster_pb2.DnsCluster()
    assert out.cluster_type.typed_config.Unpack(dns)
    assert not dns.all_addresses_in_single_endpoint  # every address is a host (STRICT_DNS)
    assert not out.HasField("eds_cluster_config")
    [lb] = out.load_assignment.endpoints[0].lb_endpoints
    address = lb.endpoint.address.socket_address
    assert (address.address, address.port_value) == ("api.example.com", 443)


def test_dns_clusters_have_no_eds_resource() -> None:
    graph = RoutingGraph(
        clusters=(cluster(dns_name="api.example.com", endpoints=()), cluster(name="default/b/1/x"))
    )
    resources = translate(graph)
    assert [c.name for c in resources.clusters] == ["default/b/1/x", "default/web/443/x"]
    assert [e.cluster_name for e in resources.endpoints] == ["default/b/1/x"]


def test_connect_timeout_of_the_cluster_wins() -> None:
    assert one(cluster()).connect_timeout.ToNanoseconds() == 2_000_000_000
    assert one(cluster(connect_timeout_s=0.25)).connect_timeout.ToNanoseconds() == 250_000_000
    # Zero or less is no timeout Envoy accepts: the installation's default applies.
    assert one(cluster(connect_timeout_s=0)).connect_timeout.ToNanoseconds() == 2_000_000_000


def test_outlier_detection() -> None:
    od = one(cluster(outlier_detection=OutlierDetection())).outlier_detection
    assert od.consecutive_5xx.value == 5
    assert od.enforcing_consecutive_5xx.value == 100
    # Only the consecutive count ejects: success-rate ejection is off, gateway errors unset.
    assert od.HasField("enforcing_success_rate") and od.enforcing_success_rate.value == 0
    assert not od.HasField("consecutive_gateway_failure")
    assert od.interval.ToSeconds() == 10 and od.base_ejection_time.ToSeconds() == 30
    assert od.max_ejection_percent.value == 50
    gw = one(
        cluster(outlier_detection=OutlierDetection(consecutive_gateway_errors=2))
    ).outlier_detection
    assert (
        gw.consecutive_gateway_failure.value,
        gw.enforcing_consecutive_gateway_failure.value,
    ) == (
        2,
        100,
    )
    assert not one(cluster()).HasField("outlier_detection")


@pytest.mark.parametrize(
    ("strategy", "field"),
    [
        (LoadBalancerStrategy.ROUND_ROBIN, "round_robin_lb_config"),
        (LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST, "least_request_lb_config"),
        (LoadBalancerStrategy.RANDOM, None),
        (LoadBalancerStrategy.REQUEST_HASH, None),
    ],
)
def test_slow_start_goes_with_the_lb_policy(
    strategy: LoadBalancerStrategy, field: str | None
) -> None:
    out = one(cluster(lb_strategy=strategy, slow_start=SlowStart(45, 1.5, 20)))
    if field is None:
        # Envoy has no slow start for other policies; dialects refuse the combination.
        assert out.WhichOneof("lb_config") in (None, "ring_hash_lb_config")
        return
    assert out.WhichOneof("lb_config") == field
    config = getattr(out, field).slow_start_config
    assert config.slow_start_window.ToSeconds() == 45
    assert config.aggression.default_value == 1.5
    assert config.aggression.runtime_key
    assert config.min_weight_percent.value == 20


def test_no_deprecated_field_is_set() -> None:
    for out in translate(every_upstream_policy()).clusters:
        assert deprecated_fields(out) == [], out.name


# --- ExternalName: the resolver decides for every dialect ----------------------------------------


def snapshot(text: str) -> Snapshot:
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return Snapshot.of(parsed.objects)


def external(name: str, target: str | None) -> str:
    ext = f"\n  externalName: {target!r}" if target is not None else ""
    return f"""---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalName{ext}
  ports: [{{port: 443}}]
"""


def test_external_names_are_refused_unless_enabled() -> None:
    snap = snapshot(external("api", "API.example.com."))
    refused = BackendResolver(snap).service("default", "api", 443)
    assert not isinstance(refused, Cluster)
    assert refused.reason == EXTERNAL_NAME_NOT_ENABLED
    assert refused.message == (
        "default/api is an ExternalName service, these are not currently enabled. "
        "See the config.enableExternalNameService config file setting"
    )
    allowed = BackendResolver(snap, enable_external_name_service=True).service(
        "default", "api", 443
    )
    assert isinstance(allowed, Cluster)
    assert (allowed.dns_name, allowed.port, allowed.endpoints) == ("api.example.com", 443, ())


@pytest.mark.parametrize(
    "target", ["localhost", "LOCALHOST.", "localhost.localdomain", "local.projectcontour.io"]
)
def test_localhost_is_never_an_external_name(target: str) -> None:
    resolver = BackendResolver(
        snapshot(external("loop", target)), enable_external_name_service=True
    )
    refused = resolver.service("default", "loop", 443)
    assert not isinstance(refused, Cluster)
    assert refused.reason == EXTERNAL_NAME_LOCALHOST
    assert refused.message.endswith("points to localhost, this is not allowed")


@pytest.mark.parametrize("target", ["api example.com", "api.example.com:443", "-bad.example.com"])
def test_an_external_name_that_is_no_dns_name_is_refused(target: str) -> None:
    resolver = BackendResolver(snapshot(external("odd", target)), enable_external_name_service=True)
    refused = resolver.service("default", "odd", 443)
    assert not isinstance(refused, Cluster) and refused.reason == EXTERNAL_NAME_INVALID
    assert "is not a DNS name" in refused.message


def test_an_external_name_service_without_a_name_is_refused() -> None:
    resolver = BackendResolver(snapshot(external("none", None)), enable_external_name_service=True)
    refused = resolver.service("default", "none", 443)
    assert not isinstance(refused, Cluster) and refused.reason == EXTERNAL_NAME_INVALID


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        (
            "ingress",
            """---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing, namespace: default}
spec:
  ingressClassName: turnout
  rules:
    - host: ext.example.com
      http:
        paths: [{path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 443}}}}]
""",
        ),
        (
            "route",
            """---
apiVersion: contour.heptio.com/v1alpha1
kind: Route
metadata: {name: r, namespace: default}
spec:
  host: ext.example.com
  routes: [{pathPrefix: /, upstreams: [{serviceName: api, servicePort: 443}]}]
""",
        ),
        (
            "ingressroute",
            """---
apiVersion: contour.heptio.com/v1beta1
kind: IngressRoute
metadata: {name: ir, namespace: default}
spec:
  virtualhost: {fqdn: ext.example.com}
  routes: [{match: /, services: [{name: api, port: 443}]}]
""",
        ),
        (
            "httpproxy",
            """---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: p, namespace: default}
spec:
  virtualhost: {fqdn: ext.example.com}
  routes: [{services: [{name: api, port: 443}]}]
""",
        ),
    ],
)
def test_every_dialect_routes_to_external_names_only_when_enabled(kind: str, doc: str) -> None:
    snap = snapshot(external("api", "api.example.com") + doc)

    def clusters(enabled: bool) -> list[Cluster]:
        result = compile_snapshot(snap, CompileOptions(enable_external_name_service=enabled))
        return list(result.graph.clusters)

    assert clusters(False) == [], kind
    [c] = clusters(True)
    assert c.dns_name == "api.example.com", kind


# --- the HTTPProxy mapping -----------------------------------------------------------------------


def compile_proxy(route_extra: str) -> Any:
    text = f"""---
apiVersion: v1
kind: Service
metadata: {{name: backend, namespace: default}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: app, namespace: default}}
spec:
  virtualhost: {{fqdn: app.example.com}}
  routes:
    - services: [{{name: backend, port: 80}}]
{route_extra}"""
    return compile_snapshot(snapshot(text))


def only_route(result: Any) -> Any:
    [listener] = result.graph.listeners
    [vhost] = listener.virtual_hosts
    [route] = vhost.routes
    assert isinstance(route.action, Forward)
    return route


@pytest.mark.parametrize(
    ("policy", "retry"),
    [
        ("{}", RetryPolicy(count=1, retry_on=("5xx",))),
        ("{count: 3, perTryTimeout: 150ms}", RetryPolicy(count=3, per_try_timeout_s=0.15)),
        ("{count: -1}", RetryPolicy(count=0)),
        ("{count: 0, perTryTimeout: soon}", RetryPolicy(count=1)),
        ("{retryPolicyEnabled: false}", None),
    ],
)
def test_failure_policy_retries(policy: str, retry: RetryPolicy | None) -> None:
    route = only_route(compile_proxy(f"      failurePolicy: {policy}\n"))
    assert route.policies.retry == retry


def test_the_routes_retry_policy_wins_over_failure_policy() -> None:
    result = compile_proxy("      failurePolicy: {count: 5}\n      retryPolicy: {count: 2}\n")
    route = only_route(result)
    assert route.policies.retry is None or route.policies.retry.count == 2
    [status] = [s for s in result.statuses if s.ref.name == "app"]
    warnings = status.body["conditions"][0].get("warnings", [])
    assert any(
        "failurePolicy" in w["message"] and "retryPolicy applies" in w["message"] for w in warnings
    )


def service_settings(strategy: LoadBalancerStrategy, slow_start: upstream.SlowStartSpec) -> Any:
    snap = snapshot(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: default}\n"
        "spec: {ports: [{port: 80}]}\n"
    )
    [service] = snap.kind("", "Service")
    return upstream.service_settings(
        service=service,
        port=ServicePort("", 80, None, "TCP", None),
        name="s",
        requested_port=80,
        protocol="",
        upstream=upstream.ServiceUpstream(slow_start=slow_start),
        route=upstream.RouteUpstream(),
        lb_strategy=strategy,
        ca_bundles=CABundleResolver(snap),
        namespace="default",
    )


@pytest.mark.parametrize("strategy", list(LoadBalancerStrategy))
def test_slow_start_only_with_round_robin_or_weighted_least_request(
    strategy: LoadBalancerStrategy,
) -> None:
    settings = service_settings(strategy, upstream.SlowStartSpec("10s", "", 10))
    if strategy in (LoadBalancerStrategy.ROUND_ROBIN, LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST):
        assert settings.slow_start == SlowStart(10.0, 1.0, 10)
        assert settings.lb_strategy is strategy
    else:
        assert settings == (
            "ServiceError",
            "SlowStartInvalid",
            "slow start is only supported with RoundRobin or WeightedLeastRequest load balancer "
            "strategy",
        )


def test_the_cli_flag_turns_external_names_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.yaml").write_text(
        external("api", "api.example.com")
        + """---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: p, namespace: default}
spec:
  virtualhost: {fqdn: ext.example.com}
  routes: [{services: [{name: api, port: 443}]}]
"""
    )
    assert main(["check", str(tmp_path)]) == 1
    assert "these are not currently enabled" in capsys.readouterr().out
    assert main(["check", str(tmp_path), "--enable-external-name-service"]) == 0
    assert main(["explain", str(tmp_path), "--host", "ext.example.com"]) == 0
    assert "503" in capsys.readouterr().out
    assert (
        main(
            [
                "explain",
                str(tmp_path),
                "--host",
                "ext.example.com",
                "--enable-external-name-service",
            ]
        )
        == 0
    )
    assert "default/api/443" in capsys.readouterr().out

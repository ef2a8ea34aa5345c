"""The translator's TLS extras, field by field: SNI-routed TCP proxies (passthrough and
terminated), client certificate validation over SDS, the fallback-certificate chain, TCP health
checks, and the readiness and validation helpers that follow SDS references."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2

from tests.cases.tcp_tls import (
    APP,
    CA_BUNDLE,
    CERT,
    CRL_BUNDLE,
    DB,
    DB2,
    FALLBACK,
    ROOT_CA,
    every_tls_feature_graph,
    tcp_proxy,
    tls_graph,
    vhost,
)
from turnout.envoy.translate import translate
from turnout.envoy.translate.client_validation import validation_secret_name
from turnout.envoy.validate import static_bootstrap
from turnout.envoy.xds import _listener_secret_refs
from turnout.graph.model import (
    ClientValidation,
    Cluster,
    RoutingGraph,
    TCPHealthCheck,
    TLSTermination,
    UpstreamProtocol,
)
from turnout.graph.sni import select_sni


def _chains(graph: RoutingGraph) -> dict[str, Any]:
    (listener,) = translate(graph).listeners
    return {c.name: c for c in listener.filter_chains}


def _tcp_config(chain: Any) -> Any:
    (flt,) = chain.filters
    assert flt.name == "envoy.filters.network.tcp_proxy"
    config = tcp_proxy_pb2.TcpProxy()
    flt.typed_config.Unpack(config)
    return config


def _tls_context(chain: Any) -> Any:
    ctx = tls_pb2.DownstreamTlsContext()
    chain.transport_socket.typed_config.Unpack(ctx)
    return ctx


def _hcm(chain: Any) -> Any:
    hcm = hcm_pb2.HttpConnectionManager()
    chain.filters[0].typed_config.Unpack(hcm)
    return hcm


# --- TCP proxies ------------------------------------------------------------------------------


def test_passthrough_chain_matches_the_sni_and_has_no_transport_socket() -> None:
    (listener,) = translate(tls_graph(tcp=(tcp_proxy("db.example.com", (DB.name, 1)),))).listeners
    assert [f.name for f in listener.listener_filters] == ["envoy.filters.listener.tls_inspector"]
    (chain,) = listener.filter_chains
    assert chain.name == "tcp/db.example.com"
    assert list(chain.filter_chain_match.server_names) == ["db.example.com"]
    assert not chain.HasField("transport_socket")  # the client's TLS reaches the backend
    config = _tcp_config(chain)
    assert config.cluster == DB.name
    assert config.stat_prefix == "ingress_https"
    assert config.idle_timeout.seconds == 9001


def test_tcp_weights_split_connections_and_zero_weights_are_left_out() -> None:
    tcp = tcp_proxy("db.example.com", (DB.name, 80), (DB2.name, 20), (APP.name, 0))
    config = _tcp_config(_chains(tls_graph(tcp=(tcp,)))["tcp/db.example.com"])
    assert config.WhichOneof("cluster_specifier") == "weighted_clusters"
    assert [(c.name, c.weight) for c in config.weighted_clusters.clusters] == [
        (DB.name, 80),
        (DB2.name, 20),
    ]


def test_a_tcp_proxy_without_a_usable_cluster_gets_no_chain() -> None:
    graph = tls_graph(tcp=(tcp_proxy("db.example.com", (DB.name, 0)),))
    assert translate(graph).listeners == ()  # and a listener without chains is not emitted


def test_terminated_tcp_proxy_decrypts_without_offering_alpn() -> None:
    tls = TLSTermination(CERT.name, min_version="1.3")
    chain = _chains(tls_graph(tcp=(tcp_proxy("redis.example.com", (DB.name, 1), tls=tls),)))[
        "tcp/redis.example.com"
    ]
    ctx = _tls_context(chain)
    common = ctx.common_tls_context
    assert [s.name for s in common.tls_certificate_sds_secret_configs] == [CERT.name]
    assert list(common.alpn_protocols) == []  # not HTTP: no h2 to negotiate
    assert common.tls_params.tls_minimum_protocol_version == common_pb2.TlsParameters.TLSv1_3
    assert _tcp_config(chain).cluster == DB.name


def test_tcp_proxies_and_tls_hosts_share_the_listener_one_chain_per_name() -> None:
    tls = TLSTermination(CERT.name)
    graph = tls_graph(
        vhosts=(vhost("a.example.com", tls),),
        tcp=(tcp_proxy("db.example.com", (DB.name, 1)), tcp_proxy("a.example.com", (DB.name, 1))),
    )
    chains = _chains(graph)
    # A TCP proxy never takes a name a TLS host has (two chains with one match: Envoy rejects).
    assert sorted(chains) == ["https/a.example.com", "tcp/db.example.com"]


def test_a_wildcard_chain_sends_tcp_hostnames_to_421() -> None:
    graph = tls_graph(
        vhosts=(vhost("*.example.com", TLSTermination(CERT.name)),),
        tcp=(tcp_proxy("db.example.com", (DB.name, 1)),),
    )
    routes = {r.name: r for r in translate(graph).routes}
    wildcard = routes["https/*.example.com"]
    assert [list(v.domains) for v in wildcard.virtual_hosts] == [
        ["*.example.com"],
        ["*", "db.example.com"],
    ]


def test_tcp_health_check_on_the_cluster() -> None:
    hc = TCPHealthCheck(interval_s=5, timeout_s=1, unhealthy_threshold=4, healthy_threshold=0)
    cluster = Cluster("default/db/443/y", "default", "db", 443, UpstreamProtocol.TCP)
    cluster = cluster.__class__(**{**_fields(cluster), "tcp_health_check": hc})
    (out,) = translate(RoutingGraph(clusters=(cluster,))).clusters
    (check,) = out.health_checks
    assert check.WhichOneof("health_checker") == "tcp_health_check"
    assert (check.interval.seconds, check.timeout.seconds) == (5, 1)
    assert check.no_traffic_interval.seconds == 5
    assert (check.unhealthy_threshold.value, check.healthy_threshold.value) == (4, 1)
    assert out.common_lb_config.HasField("healthy_panic_threshold")
    assert out.common_lb_config.healthy_panic_threshold.value == 0
    assert out.ignore_health_on_host_removal
    assert out.lb_policy == cluster_pb2.Cluster.ROUND_ROBIN


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


# --- client validation ------------------------------------------------------------------------


@pytest.mark.parametrize(("optional", "required"), [(False, True), (True, False)])
def test_client_validation_names_an_sds_validation_secret(optional: bool, required: bool) -> None:
    cv = ClientValidation(ca_bundle=CA_BUNDLE.name, optional=optional)
    graph = tls_graph(
        vhosts=(vhost("a.example.com", TLSTermination(CERT.name, client_validation=cv)),)
    )
    ctx = _tls_context(_chains(graph)["https/a.example.com"])
    assert ctx.require_client_certificate.value is required
    sds = ctx.common_tls_context.validation_context_sds_secret_config
    assert sds.name == validation_secret_name(cv)
    assert sds.sds_config.HasField("ads")
    secrets = {s.name: s for s in translate(graph).secrets}
    validation = secrets[sds.name].validation_context
    assert validation.trusted_ca.inline_string == ROOT_CA.cert_pem
    assert not validation.HasField("crl")
    assert validation.trust_chain_verification == (
        common_pb2.CertificateValidationContext.VERIFY_TRUST_CHAIN
    )


def test_crl_and_skip_verification_go_into_the_validation_secret() -> None:
    crl = ClientValidation(
        ca_bundle=CA_BUNDLE.name, crl_bundle=CRL_BUNDLE.name, crl_only_verify_leaf=True
    )
    skip = ClientValidation(skip_verification=True)
    graph = tls_graph(
        vhosts=(
            vhost("crl.example.com", TLSTermination(CERT.name, client_validation=crl)),
            vhost("skip.example.com", TLSTermination(CERT.name, client_validation=skip)),
        )
    )
    secrets = {s.name: s for s in translate(graph).secrets}
    with_crl = secrets[validation_secret_name(crl)].validation_context
    assert with_crl.crl.inline_string == CRL_BUNDLE.crl
    assert with_crl.only_verify_leaf_cert_crl
    skipping = secrets[validation_secret_name(skip)].validation_context
    assert not skipping.HasField("trusted_ca")
    assert skipping.trust_chain_verification == (
        common_pb2.CertificateValidationContext.ACCEPT_UNTRUSTED
    )
    assert validation_secret_name(crl) != validation_secret_name(skip)


def test_one_validation_secret_for_hosts_that_validate_alike() -> None:
    cv = ClientValidation(ca_bundle=CA_BUNDLE.name)
    tls = TLSTermination(CERT.name, client_validation=cv)
    graph = tls_graph(
        vhosts=(vhost("a.example.com", tls),),
        tcp=(tcp_proxy("db.example.com", (DB.name, 1), tls=tls),),
    )
    names = [s.name for s in translate(graph).secrets]
    assert names == sorted(names)
    assert names.count(validation_secret_name(cv)) == 1
    assert _tls_context(_chains(graph)["tcp/db.example.com"]).require_client_certificate.value


def test_a_missing_ca_bundle_leaves_the_host_out_instead_of_unchecked() -> None:
    cv = ClientValidation(ca_bundle="default/gone/1")
    graph = tls_graph(
        vhosts=(
            vhost("a.example.com", TLSTermination(CERT.name, client_validation=cv)),
            vhost("b.example.com", TLSTermination(CERT.name)),
        )
    )
    resources = translate(graph)
    assert sorted(_chains(graph)) == ["https/b.example.com"]
    assert all(not s.name.startswith("validation/") for s in resources.secrets)


def test_readiness_and_validation_follow_the_validation_secret() -> None:
    cv = ClientValidation(ca_bundle=CA_BUNDLE.name)
    graph = tls_graph(
        vhosts=(vhost("a.example.com", TLSTermination(CERT.name, client_validation=cv)),)
    )
    resources = translate(graph)
    (listener,) = resources.listeners
    assert validation_secret_name(cv) in _listener_secret_refs(listener)
    bootstrap = static_bootstrap(resources)
    assert validation_secret_name(cv) in {
        s["name"] for s in bootstrap["static_resources"]["secrets"]
    }


# --- the fallback certificate -----------------------------------------------------------------


def test_fallback_chain_serves_the_hosts_that_enable_it() -> None:
    fallback = TLSTermination(CERT.name, fallback_secret=FALLBACK.name)
    graph = tls_graph(
        vhosts=(
            vhost("*.example.com", fallback),
            vhost("a.example.com", fallback),
            vhost("b.example.com", TLSTermination(CERT.name)),
            vhost("www.example.com", TLSTermination(CERT.name)),
        )
    )
    chains = _chains(graph)
    chain = chains["fallback-certificate"]
    assert list(chain.filter_chain_match.server_names) == []
    assert chain.filter_chain_match.transport_protocol == "tls"
    ctx = _tls_context(chain)
    assert [s.name for s in ctx.common_tls_context.tls_certificate_sds_secret_configs] == [
        FALLBACK.name
    ]
    assert list(ctx.common_tls_context.alpn_protocols) == ["h2", "http/1.1"]
    assert _hcm(chain).rds.route_config_name == "ingress_fallbackcert"
    routes = {r.name: r for r in translate(graph).routes}
    config = routes["ingress_fallbackcert"]
    # The enabled hosts; every other Host is 421, including names under the fallback wildcard
    # that have chains of their own.
    assert [list(v.domains) for v in config.virtual_hosts] == [
        ["*.example.com"],
        ["a.example.com"],
        ["*", "b.example.com", "www.example.com"],
    ]


def test_no_fallback_chain_without_a_host_that_enables_it() -> None:
    chains = _chains(tls_graph(vhosts=(vhost("a.example.com", TLSTermination(CERT.name)),)))
    assert "fallback-certificate" not in chains


def test_sni_selection_mirrors_envoys_chain_choice() -> None:
    fallback = TLSTermination(CERT.name, fallback_secret=FALLBACK.name)
    graph = tls_graph(
        vhosts=(vhost("*.example.com", fallback), vhost("a.b.example.com", fallback)),
        tcp=(tcp_proxy("db.example.com", (DB.name, 1)),),
    )
    (listener,) = graph.listeners
    assert select_sni(listener, "DB.example.com").tcp_proxy is not None
    assert select_sni(listener, "x.example.com").virtual_host == graph.listeners[0].virtual_hosts[0]
    assert select_sni(listener, "a.b.example.com").virtual_host is not None
    assert select_sni(listener, "other.org").fallback
    assert select_sni(listener, None).fallback


def test_listener_translation_is_deterministic() -> None:
    graph = every_tls_feature_graph()
    first, second = translate(graph), translate(graph)
    assert [m.SerializeToString(deterministic=True) for m in first.listeners] == [
        m.SerializeToString(deterministic=True) for m in second.listeners
    ]

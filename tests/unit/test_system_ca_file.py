"""The installation's system CA file (`--system-ca-file`): what BackendTLSPolicy
`wellKnownCACertificates: System` upstreams and https JWKS servers are verified against."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2

from turnout.app import translate_options
from turnout.cli import build_parser
from turnout.config import DEFAULT_SYSTEM_CA_FILE, ServeConfig
from turnout.envoy.translate.clusters import jwks_cluster, translate_cluster
from turnout.envoy.translate.http_filters import JwksCluster
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.model import CABundle, Cluster, UpstreamProtocol, UpstreamValidation
from turnout.graph.validate import cluster_problem

SYSTEM = UpstreamValidation(
    ca_secret="", subject_names=("web.example.com",), sni="web.example.com", system_trust_store=True
)


def tls_context(cluster: Any) -> Any:
    ctx = tls_pb2.UpstreamTlsContext()
    assert cluster.transport_socket.typed_config.Unpack(ctx)
    return ctx


def cluster(validation: UpstreamValidation, protocol: UpstreamProtocol) -> Cluster:
    return Cluster("apps/web/443/x", "apps", "web", 443, protocol=protocol, validation=validation)


def test_system_validation_reads_the_configured_file() -> None:
    out = translate_cluster(
        cluster(SYSTEM, UpstreamProtocol.TLS), TranslateOptions(system_ca_file="/etc/corp/ca.pem")
    )
    ctx = tls_context(out)
    vc = ctx.common_tls_context.validation_context
    assert vc.trusted_ca.filename == "/etc/corp/ca.pem"
    assert not vc.trusted_ca.inline_string
    assert not vc.verify_certificate_spki  # not the fail-closed pin of a missing bundle
    (san,) = vc.match_typed_subject_alt_names
    assert (san.san_type, san.matcher.exact) == (
        common_pb2.SubjectAltNameMatcher.DNS,
        "web.example.com",
    )
    assert ctx.sni == "web.example.com"


def test_system_validation_defaults_to_the_debian_bundle_and_keeps_h2() -> None:
    out = translate_cluster(cluster(SYSTEM, UpstreamProtocol.H2), TranslateOptions())
    ctx = tls_context(out)
    assert ctx.common_tls_context.validation_context.trusted_ca.filename == (
        "/etc/ssl/certs/ca-certificates.crt"
    )
    assert list(ctx.common_tls_context.alpn_protocols) == ["h2"]


def test_a_bundle_validation_stays_inline_whatever_the_system_file() -> None:
    bundle = CABundle(
        "apps/ca", "apps", "ca", "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    )
    validation = UpstreamValidation(ca_secret="apps/ca", subject_names=("web.example.com",))
    out = translate_cluster(
        cluster(validation, UpstreamProtocol.TLS),
        TranslateOptions(system_ca_file="/etc/corp/ca.pem"),
        {"apps/ca": bundle},
    )
    trusted = tls_context(out).common_tls_context.validation_context.trusted_ca
    assert trusted.inline_string == bundle.ca_certificates
    assert not trusted.filename


def test_jwks_servers_use_the_same_file() -> None:
    out = jwks_cluster(
        JwksCluster(True, "idp.example.com", 443), TranslateOptions(system_ca_file="/ca.pem")
    )
    vc = tls_context(out).common_tls_context.validation_context
    assert vc.trusted_ca.filename == "/ca.pem"


def test_the_safety_net_refuses_a_validation_naming_both() -> None:
    both = UpstreamValidation(
        ca_secret="apps/ca", subject_names=("a.example.com",), system_trust_store=True
    )
    problem = cluster_problem(cluster(both, UpstreamProtocol.TLS))
    assert problem is not None and "system trust store" in problem
    assert cluster_problem(cluster(SYSTEM, UpstreamProtocol.TLS)) is None


def test_the_flag_reaches_the_translation(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", str(tmp_path), "--system-ca-file", "/etc/c.pem"])
    assert args.system_ca_file == "/etc/c.pem"
    default = build_parser().parse_args(["serve", str(tmp_path)])
    assert default.system_ca_file == DEFAULT_SYSTEM_CA_FILE
    config = ServeConfig(paths=(tmp_path,), system_ca_file=args.system_ca_file)
    assert translate_options(config).system_ca_file == "/etc/c.pem"

"""Graph TLS secrets and terminations -> Envoy SDS Secrets and DownstreamTlsContexts.

Certificates reach Envoy only over SDS (design 5): a listener names its secret, and the Secret
resource carries the PEM inline. Nothing here logs or formats a Secret: `repr` of the generated
message would print the private key.
"""

from __future__ import annotations

from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2

from turnout.envoy.translate.common import ads_config_source, pack
from turnout.graph.model import TLSSecret, TLSTermination

TLS_TRANSPORT_SOCKET = "envoy.transport_sockets.tls"
# HTTP/2 first: the HTTP connection manager's AUTO codec follows what ALPN chose.
ALPN_PROTOCOLS = ("h2", "http/1.1")

_TLS_VERSIONS = {
    "1.2": common_pb2.TlsParameters.TLSv1_2,
    "1.3": common_pb2.TlsParameters.TLSv1_3,
}


def translate_secret(secret: TLSSecret) -> Any:
    """The SDS resource for `secret`, named like it (the name changes with the content)."""
    out = secret_pb2.Secret(name=secret.name)
    out.tls_certificate.certificate_chain.inline_string = secret.certificate_chain
    out.tls_certificate.private_key.inline_string = secret.private_key
    return out


def tls_version(version: str, default: str) -> Any:
    """A graph version ("1.2" | "1.3") as Envoy's enum. Dialects already map user input; an
    unknown value here would otherwise become TLS_AUTO, whose meaning depends on Envoy's build."""
    return _TLS_VERSIONS.get(version, _TLS_VERSIONS[default])


def downstream_tls_context(tls: TLSTermination) -> Any:
    """TLS termination with the certificate from SDS (over ADS) and the vhost's versions."""
    ctx = tls_pb2.DownstreamTlsContext()
    common = ctx.common_tls_context
    low = tls_version(tls.min_version, "1.2")
    # Dialects reject min > max; should one slip through, Envoy would reject the whole listener
    # (every host on it), so the range is narrowed to the minimum instead.
    high = max(low, tls_version(tls.max_version, "1.3"))
    common.tls_params.tls_minimum_protocol_version = low
    common.tls_params.tls_maximum_protocol_version = high
    common.alpn_protocols.extend(ALPN_PROTOCOLS)
    sds = common.tls_certificate_sds_secret_configs.add(name=tls.secret)
    sds.sds_config.CopyFrom(ads_config_source())
    return ctx


def transport_socket(context: Any) -> Any:
    """The TLS transport socket carrying `context` (a Downstream- or UpstreamTlsContext)."""
    return base_pb2.TransportSocket(name=TLS_TRANSPORT_SOCKET, typed_config=pack(context))

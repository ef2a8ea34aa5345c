"""Downstream TLS contexts with client certificate validation (mTLS), and the SDS Secrets that
carry their validation contexts.

A chain that validates client certificates names a validation-context Secret over SDS
(`common_tls_context.validation_context_sds_secret_config`), as it names its certificate. One
Secret holds everything the check needs: the CA bundle (`trusted_ca`), the CRL (`crl`,
`only_verify_leaf_cert_crl`) and, for `skip_verification`, `trust_chain_verification:
ACCEPT_UNTRUSTED`. Its name is a hash of those inputs, whose names are hashes of their content, so
a renewed CA or CRL is a new Secret and the chains that use it are updated to name it. Whether a
certificate is required is the chain's own `require_client_certificate`.

Nothing here fails open: `without_unvalidatable` drops, before translation, every virtual host or
TCP proxy whose CA bundle or CRL is missing from the graph (the graph builder never lets that
happen), so its clients cannot connect at all rather than connect unchecked; and no listener ever
names a validation Secret that is not sent, which would keep the whole listener from warming.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Container, Iterable, Mapping
from typing import Any

from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2

from turnout.envoy.translate.common import ads_config_source
from turnout.envoy.translate.secrets import downstream_tls_context
from turnout.graph.model import (
    CABundle,
    ClientValidation,
    Listener,
    RoutingGraph,
    TLSTermination,
)

VALIDATION_SECRET_PREFIX = "validation"


def validation_secret_name(cv: ClientValidation) -> str:
    """`validation/<namespace>/<secret>/<10 hex>`: readable, and a new name for new content."""
    key = repr((cv.ca_bundle, cv.crl_bundle, cv.skip_verification, cv.crl_only_verify_leaf))
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    # Bundle names are `namespace/secret/<hash>`; the prefix names the Secret a person wrote.
    source = (cv.ca_bundle or cv.crl_bundle or "any/any").rsplit("/", 1)[0]
    return f"{VALIDATION_SECRET_PREFIX}/{source}/{digest}"


def _bundles_present(cv: ClientValidation, bundles: Container[str]) -> bool:
    return all(n is None or n in bundles for n in (cv.ca_bundle, cv.crl_bundle))


def validation_secret(cv: ClientValidation, bundles: Mapping[str, CABundle]) -> Any | None:
    """The SDS Secret holding `cv`'s validation context; None when a bundle it names is missing."""
    if not _bundles_present(cv, bundles):
        return None
    out = secret_pb2.Secret(name=validation_secret_name(cv))
    ctx = out.validation_context
    ctx.SetInParent()  # an empty context (skip, no CA) is still a validation context
    if cv.ca_bundle is not None:
        ctx.trusted_ca.inline_string = bundles[cv.ca_bundle].ca_certificates
    if cv.crl_bundle is not None:
        ctx.crl.inline_string = bundles[cv.crl_bundle].crl or ""
        ctx.only_verify_leaf_cert_crl = cv.crl_only_verify_leaf
    if cv.skip_verification:
        ctx.trust_chain_verification = common_pb2.CertificateValidationContext.ACCEPT_UNTRUSTED
    return out


def downstream_context(tls: TLSTermination, *, alpn: bool = True) -> Any:
    """The DownstreamTlsContext of a terminating chain, with client validation when `tls` asks
    for it. `alpn=False` for TCP proxies: offering `h2` would tell a client it speaks HTTP/2."""
    ctx = downstream_tls_context(tls)
    if not alpn:
        ctx.common_tls_context.ClearField("alpn_protocols")
    cv = tls.client_validation
    if cv is None:
        return ctx
    ctx.require_client_certificate.value = not cv.optional
    sds = ctx.common_tls_context.validation_context_sds_secret_config
    sds.name = validation_secret_name(cv)
    sds.sds_config.CopyFrom(ads_config_source())
    return ctx


def client_validation_secrets(
    listeners: Iterable[Listener], bundles: Mapping[str, CABundle]
) -> list[Any]:
    """Every validation-context Secret the listeners' chains name, once each, by name."""
    out: dict[str, Any] = {}
    for listener in listeners:
        terminations = [vh.tls for vh in listener.virtual_hosts if vh.tls is not None]
        terminations += [p.tls for p in listener.tcp_proxies if p.tls is not None]
        for tls in terminations:
            cv = tls.client_validation
            if cv is None:
                continue
            name = validation_secret_name(cv)
            if name not in out:
                secret = validation_secret(cv, bundles)
                if secret is not None:
                    out[name] = secret
    return [out[k] for k in sorted(out)]


def without_unvalidatable(graph: RoutingGraph) -> RoutingGraph:
    """`graph` without the virtual hosts and TCP proxies whose client validation names a CA
    bundle or CRL the graph does not hold (see the module docstring)."""
    bundles = {b.name for b in graph.ca_bundles}

    def ok(tls: TLSTermination | None) -> bool:
        cv = tls.client_validation if tls is not None else None
        return cv is None or _bundles_present(cv, bundles)

    if all(ok(vh.tls) for lst in graph.listeners for vh in lst.virtual_hosts) and all(
        ok(p.tls) for lst in graph.listeners for p in lst.tcp_proxies
    ):
        return graph
    listeners = tuple(
        dataclasses.replace(
            lst,
            virtual_hosts=tuple(vh for vh in lst.virtual_hosts if ok(vh.tls)),
            tcp_proxies=tuple(p for p in lst.tcp_proxies if ok(p.tls)),
        )
        for lst in graph.listeners
    )
    return dataclasses.replace(graph, listeners=listeners)

"""HTTPProxy `virtualhost.tls` beyond the certificate: client certificate validation
(`clientValidation`) and the fallback certificate (`enableFallbackCertificate`).

Contour's rules and messages (`internal/dag/httpproxy_processor.go`), checked after the host's own
certificate was found:
- `enableFallbackCertificate` with `clientValidation` is `TLSIncompatibleFeatures`: the fallback
  chain serves every host that enables it under one TLS context, which cannot check each host's
  client certificates;
- the fallback certificate is the installation's (`turnout serve --fallback-certificate ns/name`);
  without one, `FallbackNotPresent`; a Secret the proxy's namespace may not use (it needs a
  TLSCertificateDelegation like any other) is `FallbackNotDelegated`, an unusable one
  `FallbackNotValid`;
- `clientValidation.caSecret` is a Secret with `ca.crt` (`name` or `namespace/name`, delegation
  needed across namespaces), required unless `skipClientCertValidation`; `crlSecret` a Secret with
  `crl.pem`. An unusable one is `ClientValidationInvalid`, one the namespace may not use
  `DelegationNotPermitted` (Contour's reason for client CAs; `CACertificateNotDelegated` is its
  reason for upstream validation CAs).
Any of these errors leaves the whole root unserved, as a TLS error does.

`spec.py` imports this module, so nothing here imports `spec.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from turnout.dialects.contour.names import namespaced_name
from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.status import ProxyStatusAccessor
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD, SPEC_ERROR, TLS_ERROR
from turnout.graph.dialect import CompileContext
from turnout.graph.model import ClientValidation, TLSTermination
from turnout.graph.services import Unresolved

CLIENT_VALIDATION_FIELDS = frozenset(
    {
        "caSecret",
        "skipClientCertValidation",
        "optionalClientCertificate",
        "crlSecret",
        "crlOnlyVerifyLeafCert",
        "forwardClientCertificate",
    }
)
_FORWARD_FIELDS = frozenset({"subject", "cert", "chain", "dns", "uri"})


@dataclass(frozen=True, slots=True)
class ClientValidationSpec:
    """`virtualhost.tls.clientValidation` as written ("" and false mean "not set")."""

    ca_secret: str = ""
    skip_client_cert_validation: bool = False
    optional_client_certificate: bool = False
    crl_secret: str = ""
    crl_only_verify_leaf_cert: bool = False


def read_client_validation(r: Any, value: Any, path: str) -> ClientValidationSpec | None:
    """Reads `clientValidation` with `spec._Reader` `r` (its errors name the field)."""
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, CLIENT_VALIDATION_FIELDS)
    forward = m.get("forwardClientCertificate")
    if forward is not None:
        where = f"{path}.forwardClientCertificate"
        fm = r.mapping(forward, where)
        if fm is not None:
            r.check_fields(fm, where, _FORWARD_FIELDS)
            if any(r.boolean(fm, key, where) for key in sorted(_FORWARD_FIELDS)):
                # Only a header for the backend is lost: the certificate is still checked.
                _ignored(r, f'ignoring field "{where}"; not supported by turnout yet')
    return ClientValidationSpec(
        ca_secret=r.string(m, "caSecret", path),
        skip_client_cert_validation=r.boolean(m, "skipClientCertValidation", path),
        optional_client_certificate=r.boolean(m, "optionalClientCertificate", path),
        crl_secret=r.string(m, "crlSecret", path),
        crl_only_verify_leaf_cert=r.boolean(m, "crlOnlyVerifyLeafCert", path),
    )


def _ignored(r: Any, message: str) -> None:
    r.problems.append(Problem(SPEC_ERROR, IGNORED_FIELD, message, warning=True))


def extend_termination(
    ctx: CompileContext,
    st: ProxyStatusAccessor,
    namespace: str,
    termination: TLSTermination,
    client_validation: ClientValidationSpec | None,
    enable_fallback: bool,
) -> TLSTermination | None:
    """`termination` with the fallback certificate and client validation the root asks for, or
    None with the error reported on `st`."""
    if enable_fallback and client_validation is not None:
        st.add_error(
            TLS_ERROR,
            "TLSIncompatibleFeatures",
            "Spec.Virtualhost.TLS fallback & client validation are incompatible",
        )
        return None
    if enable_fallback:
        fallback = _fallback_secret(ctx, st, namespace)
        if fallback is None:
            return None
        termination = replace(termination, fallback_secret=fallback)
    if client_validation is not None:
        cv = _client_validation(ctx, st, namespace, client_validation)
        if cv is None:
            return None
        termination = replace(termination, client_validation=cv)
    return termination


def _fallback_secret(ctx: CompileContext, st: ProxyStatusAccessor, namespace: str) -> str | None:
    configured = ctx.options.fallback_certificate
    if not configured:
        st.add_error(
            TLS_ERROR,
            "FallbackNotPresent",
            "Spec.Virtualhost.TLS enabled fallback but the fallback Certificate Secret is not "
            "configured (turnout serve --fallback-certificate)",
        )
        return None
    secret_ns, name = namespaced_name(configured, namespace)
    secret = ctx.secrets.tls_secret(secret_ns, name, for_namespace=namespace)
    if isinstance(secret, Unresolved):
        if secret.reason == "DelegationNotPermitted":
            st.add_error(
                TLS_ERROR,
                "FallbackNotDelegated",
                f'Spec.VirtualHost.TLS Secret "{secret_ns}/{name}" is not configured for '
                "certificate delegation",
            )
        else:
            st.add_error(
                TLS_ERROR,
                "FallbackNotValid",
                f'Spec.Virtualhost.TLS Secret "{secret_ns}/{name}" fallback certificate is '
                f"invalid: {secret.message}",
            )
        return None
    return secret.name


def _client_validation(
    ctx: CompileContext, st: ProxyStatusAccessor, namespace: str, spec: ClientValidationSpec
) -> ClientValidation | None:
    ca_bundle: str | None = None
    if spec.ca_secret:
        ca_ns, ca_name = namespaced_name(spec.ca_secret, namespace)
        ca = ctx.secrets.ca_bundles.ca_bundle(ca_ns, ca_name, for_namespace=namespace)
        if isinstance(ca, Unresolved):
            _bundle_error(st, "CA", spec.ca_secret, f"{ca_ns}/{ca_name}", ca)
            return None
        ca_bundle = ca.name
    elif not spec.skip_client_cert_validation:
        st.add_error(
            TLS_ERROR,
            "ClientValidationInvalid",
            "Spec.VirtualHost.TLS client validation is invalid: CA Secret must be specified",
        )
        return None
    crl_bundle: str | None = None
    if spec.crl_secret:
        if ca_bundle is None:
            # Envoy checks a CRL against the trusted CAs; without any, it refuses the listener.
            st.add_error(
                TLS_ERROR,
                "ClientValidationInvalid",
                "Spec.VirtualHost.TLS client validation is invalid: a CRL Secret needs a CA Secret",
            )
            return None
        crl_ns, crl_name = namespaced_name(spec.crl_secret, namespace)
        crl = ctx.secrets.ca_bundles.crl(crl_ns, crl_name, for_namespace=namespace)
        if isinstance(crl, Unresolved):
            _bundle_error(st, "CRL", spec.crl_secret, f"{crl_ns}/{crl_name}", crl)
            return None
        crl_bundle = crl.name
    elif spec.crl_only_verify_leaf_cert:
        st.add_warning(
            SPEC_ERROR,
            IGNORED_FIELD,
            'ignoring field "spec.virtualhost.tls.clientValidation.crlOnlyVerifyLeafCert"; it '
            "has no effect without crlSecret",
        )
    return ClientValidation(
        ca_bundle=ca_bundle,
        skip_verification=spec.skip_client_cert_validation,
        optional=spec.optional_client_certificate,
        crl_bundle=crl_bundle,
        crl_only_verify_leaf=spec.crl_only_verify_leaf_cert and crl_bundle is not None,
    )


def _bundle_error(
    st: ProxyStatusAccessor, what: str, written: str, resolved: str, why: Unresolved
) -> None:
    if why.reason == "DelegationNotPermitted":
        st.add_error(
            TLS_ERROR,
            "DelegationNotPermitted",
            f'Spec.VirtualHost.TLS {what} Secret "{written}" is invalid: {why.message}',
        )
    else:
        st.add_error(
            TLS_ERROR,
            "ClientValidationInvalid",
            f"Spec.VirtualHost.TLS client validation is invalid: invalid {what} Secret "
            f'"{resolved}": {why.message}',
        )


def fallback_and_passthrough(st: ProxyStatusAccessor) -> None:
    """Contour reports this combination and serves the passthrough without the fallback."""
    st.add_error(
        TLS_ERROR,
        "TLSIncompatibleFeatures",
        "Spec.VirtualHost.TLS: both Passthrough and enableFallbackCertificate were specified",
    )


def passthrough_with_client_validation(st: ProxyStatusAccessor) -> None:
    st.add_error(
        TLS_ERROR,
        "TLSIncompatibleFeatures",
        "Spec.VirtualHost.TLS passthrough cannot be combined with tls.clientValidation",
    )

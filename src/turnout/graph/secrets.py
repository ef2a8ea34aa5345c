"""TLS Secrets every dialect consumes, and Contour's TLSCertificateDelegation.

`SecretResolver` is created per compile, like `BackendResolver`: dialects ask it for a
`kubernetes.io/tls` Secret and get a `TLSSecret` (collected for SDS) or why it cannot be used.
Certificates and keys are parsed with `cryptography` so a malformed Secret is a status error on
the object that uses it, not an Envoy NACK that would take other hosts down with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from turnout.graph.model import TLSSecret
from turnout.graph.services import Unresolved
from turnout.objects import KubeObject
from turnout.store import Snapshot

TLS_SECRET_TYPE = "kubernetes.io/tls"
DELEGATION_KINDS = (
    ("projectcontour.io", "TLSCertificateDelegation"),
    ("contour.heptio.com", "TLSCertificateDelegation"),
)


def _secret_field(secret: KubeObject, key: str) -> str | None:
    """A Secret value: base64 in `data` (as the API server stores it), or plain in `stringData`
    (what people write in standalone files)."""
    data = secret.raw.get("data")
    if isinstance(data, Mapping) and isinstance(data.get(key), str):
        try:
            return base64.b64decode(data[key], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
    string_data = secret.raw.get("stringData")
    if isinstance(string_data, Mapping) and isinstance(string_data.get(key), str):
        return str(string_data[key])
    return None


def _check_pair(cert_pem: str, key_pem: str) -> str | None:
    """None when the chain and key load and belong together, else why not."""
    try:
        certs = x509.load_pem_x509_certificates(cert_pem.encode())
    except ValueError:
        return "tls.crt is not a PEM certificate"
    try:
        key = load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        return "tls.key is not an unencrypted PEM private key"
    if not certs:
        return "tls.crt holds no certificate"
    leaf_public: Any = certs[0].public_key()
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if leaf_public.public_bytes(*spki) != key.public_key().public_bytes(*spki):
        return "tls.key does not match the certificate in tls.crt"
    return None


def delegation_permitted(
    snapshot: Snapshot, secret_namespace: str, secret_name: str, target_namespace: str
) -> bool:
    """Contour's rule: the Secret's own namespace always may; another namespace may when a
    TLSCertificateDelegation in the Secret's namespace names the secret and lists that namespace
    (or `*` as its only entry)."""
    if secret_namespace == target_namespace:
        return True
    for group, kind in DELEGATION_KINDS:
        for delegation in snapshot.kind(group, kind):
            if delegation.namespace != secret_namespace:
                continue
            spec = delegation.spec if isinstance(delegation.spec, Mapping) else {}
            entries = spec.get("delegations")
            for entry in entries if isinstance(entries, tuple | list) else ():
                if not isinstance(entry, Mapping) or entry.get("secretName") != secret_name:
                    continue
                listed = entry.get("targetNamespaces")
                targets = (
                    [t for t in listed if isinstance(t, str)]
                    if isinstance(listed, tuple | list)
                    else []
                )
                if targets == ["*"] or target_namespace in targets:
                    return True
    return False


def delegation_refusal(
    snapshot: Snapshot, namespace: str, name: str, for_namespace: str
) -> Unresolved | None:
    """Why an object in `for_namespace` may not use Secret `namespace/name`; None when it may."""
    if delegation_permitted(snapshot, namespace, name, for_namespace):
        return None
    return Unresolved(
        "DelegationNotPermitted",
        f'Secret "{namespace}/{name}" certificate delegation not permitted',
    )


class SecretResolver:
    """Resolves TLS Secret references for one compile; collects the secrets used."""

    def __init__(self, snapshot: Snapshot) -> None:
        # Imported here: ca_bundles builds on this module's delegation check.
        from turnout.graph.ca_bundles import CABundleResolver

        self._snapshot = snapshot
        self._secrets: dict[str, TLSSecret] = {}
        self._checked: dict[tuple[str, str], TLSSecret | Unresolved] = {}
        # CA bundles and CRLs (`ca.crt`, `crl.pem`), resolved with the same delegation rule.
        self.ca_bundles = CABundleResolver(snapshot)

    def tls_secret(
        self, namespace: str, name: str, *, for_namespace: str
    ) -> TLSSecret | Unresolved:
        """The Secret `namespace/name` used by an object in `for_namespace`."""
        refused = delegation_refusal(self._snapshot, namespace, name, for_namespace)
        if refused is not None:
            return refused
        key = (namespace, name)
        if key not in self._checked:
            self._checked[key] = self._load(namespace, name)
        result = self._checked[key]
        if isinstance(result, TLSSecret):
            self._secrets[result.name] = result
        return result

    def _load(self, namespace: str, name: str) -> TLSSecret | Unresolved:
        secret = self._snapshot.get("", "Secret", namespace, name)
        if secret is None:
            return Unresolved("SecretNotFound", f'Secret "{namespace}/{name}" not found')
        secret_type = secret.raw.get("type")
        if secret_type not in (None, TLS_SECRET_TYPE):
            return Unresolved(
                "SecretNotValid",
                f'Secret "{namespace}/{name}" is of type "{secret_type}", not "{TLS_SECRET_TYPE}"',
            )
        cert, key = _secret_field(secret, "tls.crt"), _secret_field(secret, "tls.key")
        if cert is None or key is None:
            return Unresolved(
                "SecretNotValid", f'Secret "{namespace}/{name}" needs tls.crt and tls.key'
            )
        problem = _check_pair(cert, key)
        if problem is not None:
            return Unresolved("SecretNotValid", f'Secret "{namespace}/{name}": {problem}')
        digest = hashlib.sha256((cert + "\0" + key).encode()).hexdigest()[:10]
        return TLSSecret(
            name=f"{namespace}/{name}/{digest}",
            namespace=namespace,
            secret=name,
            certificate_chain=cert,
            private_key=key,
        )

    def secrets(self) -> tuple[TLSSecret, ...]:
        return tuple(self._secrets[k] for k in sorted(self._secrets))

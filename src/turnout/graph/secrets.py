"""TLS Secrets every dialect consumes, and Contour's TLSCertificateDelegation.

`SecretResolver` is created per compile, like `BackendResolver`: dialects ask it for a
`kubernetes.io/tls` Secret and get a `TLSSecret` (collected for SDS) or why it cannot be used.
Certificates and keys are parsed with `cryptography` so a malformed Secret is a status error on
the object that uses it, not an Envoy NACK that would take other hosts down with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.memo import IdentityMemo
from turnout.graph.model import CABundle, TLSSecret
from turnout.graph.secret_data import TLS_SECRET_TYPE, delegation_refusal, secret_field
from turnout.graph.services import Unresolved
from turnout.objects import KubeObject
from turnout.store import Snapshot


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


class SecretResolver:
    """Resolves TLS Secret references for one compile; collects the secrets used."""

    def __init__(self, snapshot: Snapshot, book: SecretBook | None = None) -> None:
        self._snapshot = snapshot
        self._book = SecretBook() if book is None else book
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
        # A pure function of the Secret object: the compile before's answer for the very same
        # object is reused (the certificate is not parsed again, the record stays identical).
        found = self._book.loaded.get(secret)
        if found is None:
            found = self._book.loaded.put(secret, self._read(secret, namespace, name))
        return found

    def _read(self, secret: KubeObject, namespace: str, name: str) -> TLSSecret | Unresolved:
        if secret is None:
            return Unresolved("SecretNotFound", f'Secret "{namespace}/{name}" not found')
        secret_type = secret.raw.get("type")
        if secret_type not in (None, TLS_SECRET_TYPE):
            return Unresolved(
                "SecretNotValid",
                f'Secret "{namespace}/{name}" is of type "{secret_type}", not "{TLS_SECRET_TYPE}"',
            )
        cert, key = secret_field(secret, "tls.crt"), secret_field(secret, "tls.key")
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

    def used_secrets(self, names: Iterable[str]) -> tuple[TLSSecret, ...]:
        """The TLS secrets named `names`, in name order: those resolved during this compile and
        those the compile before served (`SecretBook`) for pieces reused whole. A name holds the
        digest of the certificate and key, so it says the whole record."""
        self._book.loaded.age()
        book = self._book
        wanted = names if isinstance(names, set) else set(names)
        if wanted == book.secret_names and _same(self._secrets, book.secrets):
            return book.secret_tuple  # the same names, none resolved to another record
        book.secrets = _named(wanted, self._secrets, book.secrets)
        book.secret_names, book.secret_tuple = wanted, tuple(book.secrets.values())
        return book.secret_tuple

    def used_ca_bundles(self, names: Iterable[str]) -> tuple[CABundle, ...]:
        """The CA bundles and CRLs named `names`, as `used_secrets` (their names hold a digest
        of the PEM too)."""
        book, now = self._book, self.ca_bundles.used()
        wanted = names if isinstance(names, set) else set(names)
        if wanted == book.ca_names and _same(now, book.ca_bundles):
            return book.ca_tuple
        book.ca_bundles = _named(wanted, now, book.ca_bundles)
        book.ca_names, book.ca_tuple = wanted, tuple(book.ca_bundles.values())
        return book.ca_tuple


class SecretBook:
    """The TLS secrets and CA bundles the compile before served, by name, with the names
    asked for and the answer (the very same tuple again for the same names)."""

    def __init__(self) -> None:
        self.secrets: dict[str, TLSSecret] = {}
        self.ca_bundles: dict[str, CABundle] = {}
        self.loaded = IdentityMemo[KubeObject, TLSSecret | Unresolved]()
        self.secret_names: set[str] | None = None
        self.secret_tuple: tuple[TLSSecret, ...] = ()
        self.ca_names: set[str] | None = None
        self.ca_tuple: tuple[CABundle, ...] = ()


def _same(now: Mapping[str, object], before: Mapping[str, object]) -> bool:
    """Whether every record resolved during this compile is the very one kept by its name."""
    return all(before.get(k) is v for k, v in now.items())


T = TypeVar("T")


def _named(names: Iterable[str], now: Mapping[str, T], before: Mapping[str, T]) -> dict[str, T]:
    out: dict[str, T] = {}
    for name in sorted(names):
        found = now.get(name)
        if found is None:
            found = before.get(name)
        if found is not None:
            out[name] = found
    return out

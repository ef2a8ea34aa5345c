"""CA bundles and certificate revocation lists from Secrets, for every dialect.

Contour reads a CA bundle from the `ca.crt` key of a Secret (of type `Opaque`, no type, or
`kubernetes.io/tls`) and a CRL from its `crl.pem` key; both are PEM. They validate client
certificates (HTTPProxy `clientValidation`) and upstream servers (`validation.caSecret`).
A Secret in another namespace may only be used with a TLSCertificateDelegation, the same rule as
for certificates (`graph/secrets.py`), checked before the Secret is read.

Every PEM block is parsed here, so that a malformed bundle is a status error on the object that
names it: Envoy would reject the whole listener or cluster update that carried it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping

from cryptography import x509

from turnout.graph.model import CABundle
from turnout.graph.secret_data import TLS_SECRET_TYPE, delegation_refusal, secret_field
from turnout.graph.services import Unresolved
from turnout.store import Snapshot

CA_KEY = "ca.crt"
CRL_KEY = "crl.pem"
_BUNDLE_TYPES = (None, "", "Opaque", TLS_SECRET_TYPE)
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)


def _pem_problem(pem: str, block_type: str, what: str) -> str | None:
    """None when `pem` holds at least one block and every block is a parseable `block_type`."""
    blocks = list(_PEM_BLOCK.finditer(pem))
    if not blocks:
        return f"holds no PEM {what}"
    for block in blocks:
        if block.group(1) != block_type:
            return f'holds a PEM block of type "{block.group(1)}", not "{block_type}"'
        try:
            if block_type == "CERTIFICATE":
                x509.load_pem_x509_certificate(block.group(0).encode())
            else:
                x509.load_pem_x509_crl(block.group(0).encode())
        except ValueError:
            return f"holds a malformed PEM {what}"
    return None


class CABundleResolver:
    """Resolves CA-bundle and CRL Secret references for one compile; collects those used."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._used: dict[str, CABundle] = {}
        self._checked: dict[tuple[str, str, str], CABundle | Unresolved] = {}

    def ca_bundle(self, namespace: str, name: str, *, for_namespace: str) -> CABundle | Unresolved:
        """The `ca.crt` of Secret `namespace/name`, used by an object in `for_namespace`."""
        return self._resolve(namespace, name, CA_KEY, for_namespace)

    def config_map_ca_bundle(self, namespace: str, name: str) -> CABundle | Unresolved:
        """The `ca.crt` of ConfigMap `namespace/name` (Gateway API BackendTLSPolicy
        `caCertificateRefs`; same-namespace only, so no delegation applies)."""
        return self._cached((namespace, name, "ConfigMap"), self._load_config_map)

    def _load_config_map(self, namespace: str, name: str) -> CABundle | Unresolved:
        config_map = self._snapshot.get("", "ConfigMap", namespace, name)
        if config_map is None:
            return Unresolved("ConfigMapNotFound", f'ConfigMap "{namespace}/{name}" not found')
        data = config_map.raw.get("data")
        pem = data.get(CA_KEY) if isinstance(data, Mapping) else None
        if not isinstance(pem, str) or not pem:
            return Unresolved(
                "ConfigMapNotValid", f'ConfigMap "{namespace}/{name}" has no "{CA_KEY}" entry'
            )
        problem = _pem_problem(pem, "CERTIFICATE", "certificate")
        if problem is not None:
            return Unresolved(
                "ConfigMapNotValid", f'ConfigMap "{namespace}/{name}": {CA_KEY} {problem}'
            )
        digest = hashlib.sha256(f"configmap\0{pem}".encode()).hexdigest()[:10]
        return CABundle(
            name=f"{namespace}/{name}/{digest}",
            namespace=namespace,
            secret=name,
            ca_certificates=pem,
        )

    def crl(self, namespace: str, name: str, *, for_namespace: str) -> CABundle | Unresolved:
        """The `crl.pem` of Secret `namespace/name` (a `CABundle` whose `crl` is set)."""
        return self._resolve(namespace, name, CRL_KEY, for_namespace)

    def _resolve(
        self, namespace: str, name: str, key: str, for_namespace: str
    ) -> CABundle | Unresolved:
        refused = delegation_refusal(self._snapshot, namespace, name, for_namespace)
        if refused is not None:
            return refused
        return self._cached((namespace, name, key), lambda ns, n: self._load(ns, n, key))

    def _cached(
        self,
        cache_key: tuple[str, str, str],
        load: Callable[[str, str], CABundle | Unresolved],
    ) -> CABundle | Unresolved:
        """`load(namespace, name)` once per key; a usable bundle counts as used."""
        if cache_key not in self._checked:
            self._checked[cache_key] = load(cache_key[0], cache_key[1])
        result = self._checked[cache_key]
        if isinstance(result, CABundle):
            self._used[result.name] = result
        return result

    def _load(self, namespace: str, name: str, key: str) -> CABundle | Unresolved:
        secret = self._snapshot.get("", "Secret", namespace, name)
        if secret is None:
            return Unresolved("SecretNotFound", f'Secret "{namespace}/{name}" not found')
        secret_type = secret.raw.get("type")
        if secret_type not in _BUNDLE_TYPES:
            return Unresolved(
                "SecretNotValid",
                f'Secret "{namespace}/{name}" is of type "{secret_type}", not "Opaque" or '
                f'"{TLS_SECRET_TYPE}"',
            )
        pem = secret_field(secret, key)
        if not pem:
            return Unresolved("SecretNotValid", f'Secret "{namespace}/{name}" has no "{key}" entry')
        if key == CA_KEY:
            problem = _pem_problem(pem, "CERTIFICATE", "certificate")
        else:
            problem = _pem_problem(pem, "X509 CRL", "certificate revocation list")
        if problem is not None:
            return Unresolved("SecretNotValid", f'Secret "{namespace}/{name}": {key} {problem}')
        digest = hashlib.sha256(f"{key}\0{pem}".encode()).hexdigest()[:10]
        return CABundle(
            name=f"{namespace}/{name}/{digest}",
            namespace=namespace,
            secret=name,
            ca_certificates=pem if key == CA_KEY else "",
            crl=pem if key == CRL_KEY else None,
        )

    def used(self) -> Mapping[str, CABundle]:
        """The bundles resolved during this compile, by name."""
        return self._used

    def bundles(self) -> tuple[CABundle, ...]:
        return tuple(self._used[k] for k in sorted(self._used))

"""Reading Secrets: their values, and Contour's TLSCertificateDelegation rule for using one from
another namespace. Shared by TLS certificates (`graph.secrets`) and CA bundles
(`graph.ca_bundles`)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from turnout.graph.services import Unresolved
from turnout.objects import KubeObject
from turnout.store import Snapshot

TLS_SECRET_TYPE = "kubernetes.io/tls"
DELEGATION_KINDS = (
    ("projectcontour.io", "TLSCertificateDelegation"),
    ("contour.heptio.com", "TLSCertificateDelegation"),
)


def secret_field(secret: KubeObject, key: str) -> str | None:
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

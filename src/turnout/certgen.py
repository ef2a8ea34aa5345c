"""Certificates for xDS between pods (`turnout certgen`, as `contour certgen`).

One run makes a fresh CA and two leaf certificates it signs: the xDS server's (turnout) and the
xDS client's (the Envoys). The CA's private key is never written: a CA that cannot sign again
cannot be stolen to mint an Envoy identity; rotating means running certgen again and rolling
both sides (turnout reloads its files, docs/kubernetes.md "xDS TLS between pods").

The server certificate carries `clientAuth` besides `serverAuth`: the Envoy child `turnout serve`
starts presents turnout's own key pair as its client identity, since turnout has no client key
of its own (docs/kubernetes.md).

Pure apart from `write_files`; imports nothing of turnout's.
"""

from __future__ import annotations

import base64
import datetime
import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_NAMESPACE = "turnout-system"
DEFAULT_VALIDITY_DAYS = 365
SERVER_SECRET = "turnout-xds-server"
CLIENT_SECRET = "turnout-xds-client"
SERVICE_NAME = "turnout"
CLIENT_NAME = "envoy"
# Issued a little in the past so a node whose clock is behind still accepts a fresh certificate.
_BACKDATE = datetime.timedelta(minutes=5)

CA_FILE = "ca.crt"
SERVER_CERT_FILE = "xds-server.crt"
SERVER_KEY_FILE = "xds-server.key"
CLIENT_CERT_FILE = "xds-client.crt"
CLIENT_KEY_FILE = "xds-client.key"
KEY_FILES = frozenset({SERVER_KEY_FILE, CLIENT_KEY_FILE})


class KeyType(enum.StrEnum):
    ECDSA = "ecdsa"  # P-256
    RSA = "rsa"  # 2048 bits


PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True, slots=True)
class Issued:
    """A PEM certificate and, for a leaf, its PEM private key (PKCS#8, unencrypted)."""

    cert_pem: bytes
    key_pem: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class XdsCertificates:
    ca: Issued  # the CA certificate only; its key is thrown away
    server: Issued
    client: Issued


def server_sans(namespace: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The DNS names the xDS server's certificate is valid for: the Service's names in
    `namespace`, then `extra` (an address or a name outside the cluster), without repeats."""
    names = [
        SERVICE_NAME,
        f"{SERVICE_NAME}.{namespace}",
        f"{SERVICE_NAME}.{namespace}.svc",
        f"{SERVICE_NAME}.{namespace}.svc.cluster.local",
        *extra,
    ]
    return tuple(dict.fromkeys(n for n in names if n))


def generate(
    *,
    namespace: str = DEFAULT_NAMESPACE,
    extra_sans: Sequence[str] = (),
    validity_days: int = DEFAULT_VALIDITY_DAYS,
    key_type: KeyType = KeyType.ECDSA,
    now: datetime.datetime | None = None,
) -> XdsCertificates:
    """A new CA, and the xDS server's and client's certificates it signs."""
    if validity_days < 1:
        raise ValueError("validity must be at least one day")
    start = (now or datetime.datetime.now(datetime.UTC)) - _BACKDATE
    end = start + _BACKDATE + datetime.timedelta(days=validity_days)
    ca_key = _new_key(key_type)
    ca_name = _name(f"turnout xDS CA {namespace}")
    ca_cert = _ca_certificate(ca_key, ca_name, start, end)
    server_usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    server = _leaf(
        (ca_key, ca_cert), SERVICE_NAME, server_sans(namespace, extra_sans), server_usage, key_type
    )
    client = _leaf(
        (ca_key, ca_cert), CLIENT_NAME, (CLIENT_NAME,), [ExtendedKeyUsageOID.CLIENT_AUTH], key_type
    )
    return XdsCertificates(
        ca=Issued(ca_cert.public_bytes(Encoding.PEM)), server=server, client=client
    )


def _new_key(key_type: KeyType) -> PrivateKey:
    if key_type is KeyType.RSA:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "turnout"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca_certificate(
    key: PrivateKey, name: x509.Name, start: datetime.datetime, end: datetime.datetime
) -> x509.Certificate:
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return builder.sign(key, hashes.SHA256())


def _leaf(
    ca: tuple[PrivateKey, x509.Certificate],
    common_name: str,
    sans: Sequence[str],
    usages: list[x509.ObjectIdentifier],
    key_type: KeyType,
) -> Issued:
    ca_key, ca_cert = ca
    key = _new_key(key_type)
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        # RSA key exchange encrypts with the certificate's key; ECDSA keys only sign.
        key_encipherment=key_type is KeyType.RSA,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(ca_cert.not_valid_before_utc)
        .not_valid_after(ca_cert.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in sans]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return Issued(cert.public_bytes(Encoding.PEM), key_pem)


# -- output ------------------------------------------------------------------------------------


def files(certs: XdsCertificates) -> dict[str, bytes]:
    """File name → content, as `write_files` writes them."""
    return {
        CA_FILE: certs.ca.cert_pem,
        SERVER_CERT_FILE: certs.server.cert_pem,
        SERVER_KEY_FILE: certs.server.key_pem,
        CLIENT_CERT_FILE: certs.client.cert_pem,
        CLIENT_KEY_FILE: certs.client.key_pem,
    }


class ExistingFiles(FileExistsError):
    """`write_files` without `overwrite` found some of its files; the message names them."""


def write_files(certs: XdsCertificates, out: Path, *, overwrite: bool = False) -> list[Path]:
    """Writes the five files into `out` (created, mode 0700 when new): keys mode 0600,
    certificates 0644. Without `overwrite`, nothing is written when any of them exists
    (ExistingFiles names them), so a half-replaced set never mixes two CAs."""
    contents = files(certs)
    targets = {name: out / name for name in contents}
    existing = sorted(str(p) for p in targets.values() if p.exists() or p.is_symlink())
    if existing and not overwrite:
        raise ExistingFiles(f"{', '.join(existing)} already exist (--overwrite replaces them)")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, data in contents.items():
        _write(targets[name], data, 0o600 if name in KEY_FILES else 0o644)
    return list(targets.values())


def _write(path: Path, data: bytes, mode: int) -> None:
    """Writes through a new file renamed into place: the mode is set before any byte of a key
    is written, and a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)  # the umask may have taken bits off a certificate's 0644
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def secret_manifests(certs: XdsCertificates, namespace: str) -> list[dict[str, Any]]:
    """The two `kubernetes.io/tls` Secrets: turnout mounts the server one, Envoy the client
    one; each carries `ca.crt` to verify the other side."""
    return [
        _secret(SERVER_SECRET, namespace, certs.server, certs.ca.cert_pem),
        _secret(CLIENT_SECRET, namespace, certs.client, certs.ca.cert_pem),
    ]


def _secret(name: str, namespace: str, issued: Issued, ca_pem: bytes) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "turnout", "app.kubernetes.io/component": "xds"},
        },
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": b64(issued.cert_pem),
            "tls.key": b64(issued.key_pem),
            "ca.crt": b64(ca_pem),
        },
    }


class ApplyError(RuntimeError):
    """The Secrets could not be written through the API server; the message says why."""


def apply_secrets(
    manifests: Sequence[dict[str, Any]], kubeconfig: Path | None = None, context: str | None = None
) -> list[str]:
    """Creates each Secret, or replaces it when it exists (a rotation), through the API server
    of `kubeconfig` (in-cluster configuration, then $KUBECONFIG, then ~/.kube/config without
    one). Returns what was done, one line per Secret; ApplyError when it could not."""
    import httpx2
    from lightkube import ApiError, ConfigError

    try:
        return _apply(manifests, kubeconfig, context)
    except ApiError as err:
        raise ApplyError(f"{err.status.code} {err.status.reason}: {err.status.message}") from None
    except (ConfigError, httpx2.HTTPError, OSError, ValueError) as err:
        raise ApplyError(str(err) or type(err).__name__) from None


def _apply(
    manifests: Sequence[dict[str, Any]], kubeconfig: Path | None, context: str | None
) -> list[str]:
    from lightkube import ApiError, Client, KubeConfig
    from lightkube.resources.core_v1 import Secret

    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    selected = config.get(context_name=context) if context else config
    if selected is None:
        raise ValueError(f"the kubeconfig has no context {context!r}")
    client = Client(selected)
    done: list[str] = []
    for manifest in manifests:
        secret: Secret = Secret.from_dict(manifest)  # type: ignore[assignment]
        where = f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"
        try:
            client.create(secret, field_manager="turnout")
            done.append(f"secret {where} created")
        except ApiError as err:
            if err.status.code != 409:
                raise
            client.replace(secret, field_manager="turnout")
            done.append(f"secret {where} replaced")
    return done

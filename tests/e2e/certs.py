"""Throwaway certificates for tests: a CA and leaf certificates it signs, made with `cryptography`.

EC P-256 keys, because they are generated in microseconds and every TLS stack accepts them. The
certificates are valid from a day ago for thirty days, so clock skew never makes a test flaky.
"""

from __future__ import annotations

import datetime
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, PEM encoded."""

    cert_pem: str
    key_pem: str = field(repr=False)

    @property
    def der(self) -> bytes:
        """The DER bytes of the certificate, as `SSLObject.getpeercert(binary_form=True)` gives."""
        return x509.load_pem_x509_certificate(self.cert_pem.encode()).public_bytes(Encoding.DER)

    @property
    def serial(self) -> int:
        return x509.load_pem_x509_certificate(self.cert_pem.encode()).serial_number

    def load_into(self, context: ssl.SSLContext) -> None:
        """Loads this certificate and key into `context` (`ssl` reads them only from files)."""
        with tempfile.TemporaryDirectory(prefix="turnout-e2e-") as tmp:
            cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert.write_text(self.cert_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(cert, key)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(
        now + datetime.timedelta(days=30)
    )


class CA:
    """A self-signed certificate authority that issues server certificates."""

    def __init__(self, common_name: str = "turnout test CA") -> None:
        self._key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        public = self._key.public_key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        )
        self._cert = _validity(builder).sign(self._key, hashes.SHA256())
        self.cert_pem = self._cert.public_bytes(Encoding.PEM).decode()

    def issue(
        self,
        *hostnames: str,
        usage: x509.ObjectIdentifier | None = None,
        uris: tuple[str, ...] = (),
    ) -> Issued:
        """A server certificate for `hostnames` (DNS SANs; `*.example.com` works) and `uris`
        (URI SANs, e.g. SPIFFE IDs); `usage` is its extended key usage (default: server
        authentication)."""
        assert hostnames, "a server certificate needs at least one hostname"
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        *(x509.DNSName(h) for h in hostnames),
                        *(x509.UniformResourceIdentifier(u) for u in uris),
                    ]
                ),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage([usage or ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        cert = _validity(builder).sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(Encoding.PEM).decode(), _key_pem(key))

    def issue_client(self, name: str) -> Issued:
        """A client certificate (client authentication) for `name`."""
        return self.issue(name, usage=ExtendedKeyUsageOID.CLIENT_AUTH)

    def crl(self, *revoked: Issued) -> str:
        """A PEM CRL signed by this CA that revokes `revoked`."""
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(self._cert.subject)
            .last_update(now - datetime.timedelta(days=1))
            .next_update(now + datetime.timedelta(days=30))
        )
        for issued in revoked:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder()
                .serial_number(issued.serial)
                .revocation_date(now - datetime.timedelta(hours=1))
                .build()
            )
        return builder.sign(self._key, hashes.SHA256()).public_bytes(Encoding.PEM).decode()

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this CA and checks the hostname."""
        ctx = ssl.create_default_context(cadata=self.cert_pem)
        ctx.check_hostname = True
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


def tls_secret_yaml(namespace: str, name: str, cert_pem: str, key_pem: str) -> str:
    """A `kubernetes.io/tls` Secret with its PEM in `stringData`, as a YAML document."""
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert_pem, "tls.key": key_pem},
    }
    return str(yaml.safe_dump(doc, sort_keys=False))

"""Mutual TLS for the xDS server (`--xds-tls-cert/--xds-tls-key/--xds-tls-ca`).

The server presents `cert`/`key` and accepts only clients whose certificate chains to `ca`:
grpc's dynamic SSL credentials ask `CertificateReloader` before every new connection's handshake,
and it reads the files again whenever one of them changed (inode, size or modification time, so
the symlink swap of a Kubernetes Secret volume counts). A rotated certificate is served to the
next connection; Envoys already connected keep their connection. A set of files that does not
load (half written, key not matching the certificate) keeps the last good set and logs why.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from turnout.envoy.bootstrap import XdsClientTls

log = logging.getLogger(__name__)


class XdsTlsError(ValueError):
    """The xDS TLS files cannot be used; the message is one line naming the file."""


@dataclass(frozen=True, slots=True)
class XdsTlsFiles:
    """The server's certificate chain and key, and the CA its clients' certificates must
    chain to (PEM files)."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, slots=True)
class _Loaded:
    cert: bytes
    key: bytes
    ca: bytes


_Stamp = tuple[tuple[int, int, int], ...]


def load(files: XdsTlsFiles) -> _Loaded:
    """Reads and checks the three files: PEM certificates, a private key that belongs to the
    first certificate, at least one CA certificate. XdsTlsError otherwise."""
    cert, key, ca = (_read(p) for p in (files.cert, files.key, files.ca))
    try:
        chain = x509.load_pem_x509_certificates(cert)
    except ValueError:
        raise XdsTlsError(f"{files.cert}: not a PEM certificate") from None
    try:
        private = load_pem_private_key(key, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise XdsTlsError(f"{files.key}: not an unencrypted PEM private key") from None
    if private.public_key() != chain[0].public_key():
        raise XdsTlsError(f"{files.key}: the key does not belong to {files.cert}")
    try:
        x509.load_pem_x509_certificates(ca)
    except ValueError:
        raise XdsTlsError(f"{files.ca}: not a PEM certificate bundle") from None
    return _Loaded(cert, key, ca)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise XdsTlsError(f"{path}: {err.strerror or err}") from None


def _stamp(files: XdsTlsFiles) -> _Stamp:
    stamps = []
    for path in (files.cert, files.key, files.ca):
        try:
            st = os.stat(path)
        except OSError:
            stamps.append((0, 0, 0))
            continue
        stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


def _configuration(loaded: _Loaded) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(loaded.key, loaded.cert)], root_certificates=loaded.ca
    )


class CertificateReloader:
    """grpc's certificate-configuration fetcher: None while the files are unchanged (grpc keeps
    what it has), the new configuration once they changed and load."""

    def __init__(self, files: XdsTlsFiles) -> None:
        self.files = files
        self._stamp = _stamp(files)
        self.loaded = load(files)
        self.reloads = 0

    def initial(self) -> grpc.ServerCertificateConfiguration:
        return _configuration(self.loaded)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        stamp = _stamp(self.files)
        if stamp == self._stamp:
            return None
        try:
            loaded = load(self.files)
        except XdsTlsError as err:
            # Likely caught mid-rotation: the next handshake looks again.
            log.warning("xDS TLS files not reloaded, keeping the previous ones: %s", err)
            return None
        self._stamp = stamp
        if loaded == self.loaded:
            return None
        self.loaded = loaded
        self.reloads += 1
        log.info("xDS TLS certificate reloaded from %s", self.files.cert)
        return _configuration(loaded)


def server_credentials(files: XdsTlsFiles) -> grpc.ServerCredentials:
    """Credentials that require and verify a client certificate, reloading the files as they
    change. XdsTlsError when they cannot be used now."""
    reloader = CertificateReloader(files)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial(), reloader, require_client_authentication=True
    )


def server_dns_name(files: XdsTlsFiles) -> str:
    """The first DNS name of the server certificate's subjectAltName, "" without one."""
    (first, *_) = x509.load_pem_x509_certificates(load(files).cert)
    try:
        names = first.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ""
    dns = names.get_values_for_type(x509.DNSName)
    return dns[0] if dns else ""


def child_client_tls(files: XdsTlsFiles, sds_dir: Path) -> XdsClientTls:
    """The client side for the Envoy child `serve` starts, its SDS files in `sds_dir`: it
    presents turnout's own key pair (turnout has no other; `turnout certgen` gives the server
    certificate `clientAuth` for this) and checks the server's chain and first DNS name like
    any Envoy. Absolute paths: Envoy runs in another working directory."""
    return XdsClientTls(
        cert=str(files.cert.absolute()),
        key=str(files.key.absolute()),
        ca=str(files.ca.absolute()),
        sds_dir=str(sds_dir.absolute()),
        server_name=server_dns_name(files),
    )

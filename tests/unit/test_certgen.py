"""`turnout certgen`: the CA and the xDS server and client certificates, as files or Secrets."""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import socket
import stat
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID

from turnout import certgen, cli


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def _dns_names(cert: x509.Certificate) -> list[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return list(san.get_values_for_type(x509.DNSName))


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


@pytest.mark.parametrize("key_type", list(certgen.KeyType))
def test_both_leaves_chain_to_the_ca_and_keys_match(key_type: certgen.KeyType) -> None:
    certs = certgen.generate(key_type=key_type)
    ca = _cert(certs.ca.cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for issued in (certs.server, certs.client):
        leaf = _cert(issued.cert_pem)
        # Raises unless the CA signed it and the issuer names match.
        leaf.verify_directly_issued_by(ca)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        key = load_pem_private_key(issued.key_pem, password=None)
        assert key.public_key() == leaf.public_key()
        expected = ec.EllipticCurvePublicKey if key_type is certgen.KeyType.ECDSA else None
        if expected is not None:
            assert isinstance(leaf.public_key(), expected)
            assert leaf.public_key().curve.name == "secp256r1"  # type: ignore[attr-defined]
        else:
            assert isinstance(leaf.public_key(), rsa.RSAPublicKey)
            assert leaf.public_key().key_size == 2048


def test_server_names_cover_the_service_in_its_namespace_plus_extras() -> None:
    certs = certgen.generate(namespace="edge", extra_sans=["xds.example.com", "turnout"])
    assert _dns_names(_cert(certs.server.cert_pem)) == [
        "turnout",
        "turnout.edge",
        "turnout.edge.svc",
        "turnout.edge.svc.cluster.local",
        "xds.example.com",
    ]
    assert _dns_names(_cert(certs.client.cert_pem)) == ["envoy"]


def test_key_usages_separate_server_client_and_ca() -> None:
    certs = certgen.generate()
    ca, server, client = (_cert(i.cert_pem) for i in (certs.ca, certs.server, certs.client))
    ca_usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ca_usage.key_cert_sign and ca_usage.crl_sign
    for leaf in (server, client):
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
        assert usage.digital_signature and not usage.key_cert_sign
    # The server pair is also the Envoy child's client identity (docs/kubernetes.md).
    assert _usages(server) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert _usages(client) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_validity_is_the_asked_number_of_days() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    certs = certgen.generate(validity_days=30, now=now)
    for issued in (certs.ca, certs.server, certs.client):
        cert = _cert(issued.cert_pem)
        assert cert.not_valid_before_utc <= now
        assert cert.not_valid_after_utc == now + datetime.timedelta(days=30)
    with pytest.raises(ValueError):
        certgen.generate(validity_days=0)


def test_files_are_written_with_private_keys_0600_and_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "xds"
    assert cli.main(["certgen", "--out", str(out)]) == 0
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {
        "ca.crt": 0o644,
        "xds-server.crt": 0o644,
        "xds-server.key": 0o600,
        "xds-client.crt": 0o644,
        "xds-client.key": 0o600,
    }
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert cli.main(["certgen", "--out", str(out)]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert cli.main(["certgen", "--out", str(out), "--overwrite"]) == 0
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after.keys() == before.keys()
    assert all(after[name] != before[name] for name in before)


def test_one_existing_file_keeps_the_whole_set_from_being_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "xds-client.key").write_text("mine")
    assert cli.main(["certgen", "--out", str(tmp_path)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["xds-client.key"]
    err = capsys.readouterr().err
    assert err.startswith("turnout: ") and "xds-client.key" in err and "--overwrite" in err
    assert len(err.strip().splitlines()) == 1


def test_secrets_as_yaml_are_tls_secrets_with_the_ca(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["certgen", "-o", "yaml", "--namespace", "edge"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs] == [
        ("Secret", "edge", "turnout-xds-server"),
        ("Secret", "edge", "turnout-xds-client"),
    ]
    data = [{k: base64.b64decode(v) for k, v in d["data"].items()} for d in docs]
    assert all(d["type"] == "kubernetes.io/tls" for d in docs)
    assert data[0]["ca.crt"] == data[1]["ca.crt"]
    ca = _cert(data[0]["ca.crt"])
    server, client = _cert(data[0]["tls.crt"]), _cert(data[1]["tls.crt"])
    server.verify_directly_issued_by(ca)
    client.verify_directly_issued_by(ca)
    assert "turnout.edge.svc" in _dns_names(server)
    key = load_pem_private_key(data[1]["tls.key"], password=None)
    assert key.public_key() == client.public_key()


def test_secrets_as_json_are_one_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["certgen", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List"
    assert [i["metadata"]["namespace"] for i in doc["items"]] == ["turnout-system"] * 2


def test_an_output_is_required_and_only_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["certgen"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["certgen", "--out", "x", "-o", "yaml"])
    assert "not allowed with" in capsys.readouterr().err


class _SecretsApi(http.server.BaseHTTPRequestHandler):
    """The two Secret calls `certgen --kubernetes` makes, as the API server answers them:
    POST creates (409 AlreadyExists when the name is taken), PUT replaces."""

    secrets: ClassVar[dict[str, dict[str, Any]]] = {}
    calls: ClassVar[list[tuple[str, str, str]]] = []

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read(self) -> dict[str, Any]:
        self.calls.append((self.command, self.path, self.headers.get("Authorization", "")))
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        return body

    def do_POST(self) -> None:
        body = self._read()
        name = body["metadata"]["name"]
        if name in self.secrets:
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
            self._answer(409, {**status, "reason": "AlreadyExists", "code": 409, "message": name})
            return
        self.secrets[name] = body
        self._answer(201, body)

    def do_PUT(self) -> None:
        body = self._read()
        self.secrets[body["metadata"]["name"]] = body
        self._answer(200, body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_kubernetes_creates_the_secrets_then_replaces_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SecretsApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "fake",
                        "cluster": {"server": f"http://127.0.0.1:{server.server_port}"},
                    }
                ],
                "users": [{"name": "me", "user": {"token": "s3cret"}}],
                "contexts": [{"name": "here", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "here",
            }
        )
    )
    try:
        flags = ["certgen", "--kubernetes", "--kubeconfig", str(kubeconfig), "--namespace", "edge"]
        assert cli.main(flags) == 0
        first = dict(_SecretsApi.secrets)
        assert cli.main([*flags, "--context", "here"]) == 0
    finally:
        server.shutdown()
    base = "/api/v1/namespaces/edge/secrets"
    assert [(c[0], c[1].split("?")[0]) for c in _SecretsApi.calls] == [
        ("POST", base),
        ("POST", base),
        ("POST", base),
        ("PUT", f"{base}/turnout-xds-server"),
        ("POST", base),
        ("PUT", f"{base}/turnout-xds-client"),
    ]
    assert {c[2] for c in _SecretsApi.calls} == {"Bearer s3cret"}
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "secret edge/turnout-xds-server replaced",
        "secret edge/turnout-xds-client replaced",
    ]
    second = _SecretsApi.secrets
    assert first.keys() == second.keys() == {"turnout-xds-server", "turnout-xds-client"}
    assert all(s["type"] == "kubernetes.io/tls" for s in second.values())
    assert first["turnout-xds-server"]["data"] != second["turnout-xds-server"]["data"]


def test_kubernetes_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": f"http://127.0.0.1:{port.getsockname()[1]}"},
                    }
                ],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    with port:  # bound, never listening: connection refused
        assert cli.main(["certgen", "--kubernetes", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("turnout: cannot write the Secrets: ") and err.count("\n") == 1
    args = ["certgen", "--kubernetes", "--kubeconfig", str(kubeconfig), "--context", "nope"]
    assert cli.main(args) == 2
    assert (
        capsys.readouterr().err == "turnout: cannot write the Secrets: Context 'nope' not found\n"
    )


def test_an_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    assert cli.main(["certgen", "--out", str(tmp_path / "file" / "certs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"turnout: cannot write {tmp_path / 'file' / 'certs'}: ")
    assert err.count("\n") == 1

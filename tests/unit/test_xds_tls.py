"""xDS over mutual TLS: a client certificate from the CA is required, the files are reloaded
for new connections without dropping connected Envoys, the server binds only --xds-address, and
the flags take all three files or none."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography import x509

from tests.xds_client import AdsClient, snapshot
from turnout import app, certgen, cli
from turnout.config import ServeConfig
from turnout.envoy.resources import CLUSTER_TYPE
from turnout.envoy.xds import XdsServer
from turnout.envoy.xds_tls import XdsTlsError, XdsTlsFiles, load, server_credentials


def _files(out: Path) -> XdsTlsFiles:
    return XdsTlsFiles(out / "xds-server.crt", out / "xds-server.key", out / "ca.crt")


def _issue(out: Path) -> certgen.XdsCertificates:
    certs = certgen.generate()
    certgen.write_files(certs, out, overwrite=True)
    return certs


def _credentials(
    certs: certgen.XdsCertificates, client: certgen.Issued | None
) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(certs.ca.cert_pem)
    return grpc.ssl_channel_credentials(certs.ca.cert_pem, client.key_pem, client.cert_pem)


async def _gets_clusters(port: int, credentials: grpc.ChannelCredentials) -> bool:
    client = AdsClient(port, credentials=credentials)
    try:
        client.send(CLUSTER_TYPE)
        await client.recv(timeout=3.0)
        return True
    except TimeoutError:
        return False
    finally:
        await client.close()


def _served_serial(port: int, certs: certgen.XdsCertificates, tmp: Path) -> int:
    """The serial number of the certificate a new TLS connection to `port` is shown."""
    context = ssl.create_default_context(cadata=certs.ca.cert_pem.decode())
    context.check_hostname = False
    context.set_alpn_protocols(["h2"])
    (tmp / "c.crt").write_bytes(certs.client.cert_pem)
    (tmp / "c.key").write_bytes(certs.client.key_pem)
    context.load_cert_chain(tmp / "c.crt", tmp / "c.key")
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _serial(issued: certgen.Issued) -> int:
    return x509.load_pem_x509_certificate(issued.cert_pem).serial_number


@contextlib.asynccontextmanager
async def _tls_server(files: XdsTlsFiles) -> AsyncIterator[tuple[XdsServer, int]]:
    server = XdsServer()
    port = await server.start("127.0.0.1", 0, credentials=server_credentials(files))
    server.set_resources(snapshot(["a"]))
    try:
        yield server, port
    finally:
        await server.stop(0)


async def test_only_clients_with_a_certificate_from_the_ca_get_configuration(
    tmp_path: Path,
) -> None:
    certs = _issue(tmp_path / "xds")
    async with _tls_server(_files(tmp_path / "xds")) as (_, port):
        assert await _gets_clusters(port, _credentials(certs, certs.client))
        assert not await _gets_clusters(port, _credentials(certs, None))
        stranger = certgen.generate().client  # same names, another CA
        assert not await _gets_clusters(port, _credentials(certs, stranger))
        plain = AdsClient(port)
        plain.send(CLUSTER_TYPE)
        with pytest.raises(TimeoutError):
            await plain.recv(timeout=1.0)
        await plain.close()


async def test_a_rotated_certificate_is_served_to_new_connections_and_old_ones_stay(
    tmp_path: Path,
) -> None:
    out = tmp_path / "xds"
    old = _issue(out)
    async with _tls_server(_files(out)) as (server, port):
        connected = AdsClient(port, credentials=_credentials(old, old.client))
        connected.send(CLUSTER_TYPE)
        first = await connected.recv()
        assert await asyncio.to_thread(_served_serial, port, old, tmp_path) == _serial(old.server)

        new = _issue(out)  # a new CA and new key pairs, written over the files
        assert await asyncio.to_thread(_served_serial, port, new, tmp_path) == _serial(new.server)
        assert await _gets_clusters(port, _credentials(new, new.client))
        assert not await _gets_clusters(port, _credentials(old, old.client))

        # The Envoy connected before the rotation keeps its stream and gets the next change.
        connected.ack(first)
        server.set_resources(snapshot(["a", "b"]))
        update = await connected.recv()
        assert update.type_url == CLUSTER_TYPE and len(update.resources) == 2
        await connected.close()


async def test_files_that_do_not_load_keep_the_previous_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "xds"
    certs = _issue(out)
    async with _tls_server(_files(out)) as (_, port):
        # Caught mid-rotation: a new certificate beside the old key.
        (out / "xds-server.crt").write_bytes(certgen.generate().server.cert_pem)
        with caplog.at_level(logging.WARNING, logger="turnout"):
            assert await _gets_clusters(port, _credentials(certs, certs.client))
        assert "does not belong to" in caplog.text
        assert await asyncio.to_thread(_served_serial, port, certs, tmp_path) == _serial(
            certs.server
        )


def test_unusable_files_are_one_line_naming_the_file(tmp_path: Path) -> None:
    out = tmp_path / "xds"
    _issue(out)
    files = _files(out)
    (out / "ca.crt").write_text("not pem")
    with pytest.raises(XdsTlsError, match=r"ca\.crt: not a PEM certificate"):
        load(files)
    with pytest.raises(XdsTlsError, match="nothere"):
        load(XdsTlsFiles(out / "nothere", files.key, files.ca))


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        (["--xds-tls-cert", "c"], "--xds-tls-key, --xds-tls-ca"),
        (["--xds-tls-cert", "c", "--xds-tls-key", "k"], "--xds-tls-ca"),
        (["--xds-tls-ca", "a"], "--xds-tls-cert, --xds-tls-key"),
    ],
)
@pytest.mark.parametrize("command", [["serve", "--no-envoy", "x.yaml"], ["bootstrap"]])
def test_tls_flags_take_all_three_or_none(
    given: list[str], missing: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*command, *given]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"turnout: xDS TLS needs all of --xds-tls-cert, --xds-tls-key, --xds-tls-ca; "
        f"missing {missing}\n"
    )


def test_serve_refuses_tls_files_it_cannot_load_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "xds"
    _issue(out)
    (tmp_path / "x.yaml").write_text("")
    flags = ["--xds-tls-cert", str(out / "xds-client.crt"), "--xds-tls-key"]
    flags += [str(out / "xds-server.key"), "--xds-tls-ca", str(out / "ca.crt")]
    assert cli.main(["serve", "--no-envoy", str(tmp_path / "x.yaml"), *flags]) == 2
    assert capsys.readouterr().err == (
        f"turnout: --xds-tls-*: {out / 'xds-server.key'}: the key does not belong to "
        f"{out / 'xds-client.crt'}\n"
    )


def test_xds_with_tls_off_loopback_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "xds"
    _issue(out)
    tls = ["--xds-tls-cert", str(out / "xds-server.crt"), "--xds-tls-key"]
    tls += [str(out / "xds-server.key"), "--xds-tls-ca", str(out / "ca.crt")]
    parser = cli.build_parser()
    with caplog.at_level(logging.WARNING, logger="turnout"):
        cli.warn_exposed(
            cli.serve_config(parser.parse_args(["serve", "x.yaml", "--xds-address", "::", *tls]))
        )
        assert not caplog.records
        cli.warn_exposed(
            cli.serve_config(parser.parse_args(["serve", "x.yaml", "--xds-address", "::"]))
        )
    (record,) = caplog.records
    assert "--xds-address ::" in record.getMessage()


async def test_xds_binds_the_xds_address_never_the_public_address(tmp_path: Path) -> None:
    """Envoy's listeners go on --address (here 127.0.0.2); xDS stays on --xds-address."""
    config = ServeConfig(
        paths=(),
        address="127.0.0.2",
        xds_address="127.0.0.1",
        xds_port=0,
        admin_port=0,
        run_envoy=False,
        demo_backends=False,
        watch=False,
    )
    controller = app.build_controller(config)
    await controller.start()
    try:
        port = controller.xds_port
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=2).close()
    finally:
        await controller.stop()


def _bootstrap_flags(certs: Path) -> list[str]:
    return [
        "--xds-tls-cert",
        str(certs / "xds-client.crt"),
        "--xds-tls-key",
        str(certs / "xds-client.key"),
        "--xds-tls-ca",
        str(certs / "ca.crt"),
    ]


def test_bootstrap_writes_the_mtls_xds_cluster_and_its_sds_files(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    out = tmp_path / "envoy" / "envoy.yaml"
    out.parent.mkdir()
    flags = [*_bootstrap_flags(certs), "--xds-server-name", "turnout.edge.svc"]
    assert cli.main(["bootstrap", str(out), "--xds-address", "turnout.edge.svc", *flags]) == 0
    (cluster,) = yaml.safe_load(out.read_text())["static_resources"]["clusters"]
    socket_ = cluster["transport_socket"]
    assert socket_["name"] == "envoy.transport_sockets.tls"
    context = socket_["typed_config"]
    assert context["@type"].endswith("UpstreamTlsContext") and context["sni"] == "turnout.edge.svc"
    common = context["common_tls_context"]
    assert common["alpn_protocols"] == ["h2"]
    sds_paths = [
        common["tls_certificate_sds_secret_configs"][0]["sds_config"]["path_config_source"]["path"],
        common["validation_context_sds_secret_config"]["sds_config"]["path_config_source"]["path"],
    ]
    assert sds_paths == [
        str(out.parent / n) for n in ("xds-tls-certificate.yaml", "xds-validation-context.yaml")
    ]
    (certificate,) = yaml.safe_load(Path(sds_paths[0]).read_text())["resources"]
    assert certificate["tls_certificate"] == {
        "certificate_chain": {"filename": str(certs / "xds-client.crt")},
        "private_key": {"filename": str(certs / "xds-client.key")},
        "watched_directory": {"path": str(certs)},
    }
    (validation,) = yaml.safe_load(Path(sds_paths[1]).read_text())["resources"]
    assert validation["validation_context"] == {
        "trusted_ca": {"filename": str(certs / "ca.crt")},
        "watched_directory": {"path": str(certs)},
        "match_typed_subject_alt_names": [
            {"san_type": "DNS", "matcher": {"exact": "turnout.edge.svc"}}
        ],
    }


def test_bootstrap_without_tls_has_no_transport_socket(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bootstrap"]) == 0
    (cluster,) = yaml.safe_load(capsys.readouterr().out)["static_resources"]["clusters"]
    assert "transport_socket" not in cluster


def test_bootstrap_on_stdout_needs_a_directory_for_its_sds_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = _bootstrap_flags(tmp_path)
    assert cli.main(["bootstrap", *flags]) == 2
    assert capsys.readouterr().err == (
        "turnout: with --xds-tls-* and the bootstrap on stdout, --sds-dir says where its SDS "
        "files go\n"
    )
    (tmp_path / "file").write_text("")
    assert cli.main(["bootstrap", *flags, "--sds-dir", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.startswith(f"turnout: cannot write {tmp_path / 'file'}: ")
    assert cli.main(["bootstrap", *flags, "--sds-dir", str(tmp_path / "sds")]) == 0
    assert "transport_socket" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "sds").iterdir()) == [
        "xds-tls-certificate.yaml",
        "xds-validation-context.yaml",
    ]

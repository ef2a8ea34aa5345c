"""TLS passthrough, TCP proxying, client certificates and the fallback certificate through a real
Envoy, as a client (and a backend) sees them."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
import yaml

from tests.e2e.certs import CA, Issued, tls_secret_yaml
from tests.e2e.harness import Harness, service_yaml

pytestmark = pytest.mark.asyncio(loop_scope="session")

DB = "db.tcp.example.com"
REDIS = "redis.tcp.example.com"
MTLS = "mtls.tcp.example.com"
WILD = "*.tcp.example.com"
A = "a.fallback.example.com"
B = "b.fallback.example.com"


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA()


@pytest.fixture(scope="module")
def client(ca: CA) -> ssl.SSLContext:
    return ca.client_context()


class _Server:
    """A TCP server on 127.0.0.1 (TLS when `context` is given) that echoes every byte back."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.context = context
        self.server: asyncio.Server | None = None
        self.connections = 0

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._echo, "127.0.0.1", 0, ssl=self.context)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest_asyncio.fixture(loop_scope="session")
async def echoes(ca: CA) -> AsyncIterator[tuple[int, int, Issued]]:
    """A plain TCP echo, and a TLS echo presenting its own certificate for DB."""
    backend_cert = ca.issue(DB)
    tls_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    backend_cert.load_into(tls_ctx)
    plain, tls = _Server(), _Server(tls_ctx)
    plain_port, tls_port = await plain.start(), await tls.start()
    try:
        yield plain_port, tls_port, backend_cert
    finally:
        await plain.close()
        await tls.close()


def _opaque_secret(namespace: str, name: str, **entries: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": entries,
    }
    return str(yaml.safe_dump(doc, sort_keys=False))


async def _stream(
    port: int, sni: str | None, context: ssl.SSLContext, payload: bytes
) -> tuple[bytes, bytes]:
    """Sends `payload` over TLS to Envoy's HTTPS port; returns (echo, the peer's DER cert)."""
    for attempt in range(50):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname=sni or "127.0.0.1"
                ),
                timeout=5.0,
            )
            break
        except (ConnectionError, ssl.SSLError, OSError):
            if attempt == 49:
                raise
            await asyncio.sleep(0.1)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(payload)
        await writer.drain()
        echoed = await asyncio.wait_for(reader.readexactly(len(payload)), timeout=5.0)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return echoed, bytes(der)


TCP_PROXIES = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: db, namespace: default}}
spec:
  virtualhost:
    fqdn: {DB}
    tls: {{passthrough: true}}
  tcpproxy:
    services: [{{name: tls-echo, port: 443}}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: redis, namespace: default}}
spec:
  virtualhost:
    fqdn: {REDIS}
    tls: {{secretName: redis-cert}}
  tcpproxy:
    services: [{{name: echo, port: 6379}}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: wild, namespace: default}}
spec:
  virtualhost:
    fqdn: "{WILD}"
    tls: {{secretName: wild-cert}}
  routes:
    - services: [{{name: app, port: 80}}]
"""


async def _tcp_files(harness: Harness, ca: CA, plain_port: int, tls_port: int) -> dict[str, str]:
    return {
        "svc.yaml": await harness.services(("default", "app"))
        + "---\n"
        + service_yaml("default", "tls-echo", 443, tls_port)
        + "---\n"
        + service_yaml("default", "echo", 6379, plain_port),
        "secrets.yaml": tls_secret_yaml("default", "redis-cert", *_pair(ca.issue(REDIS)))
        + "---\n"
        + tls_secret_yaml("default", "wild-cert", *_pair(ca.issue(WILD))),
        "proxies.yaml": TCP_PROXIES,
    }


def _pair(issued: Issued) -> tuple[str, str]:
    return issued.cert_pem, issued.key_pem


async def test_passthrough_reaches_the_tls_backend_with_its_own_certificate(
    harness: Harness, ca: CA, client: ssl.SSLContext, echoes: tuple[int, int, Issued]
) -> None:
    plain_port, tls_port, backend_cert = echoes
    await harness.apply(await _tcp_files(harness, ca, plain_port, tls_port))
    # The client verifies DB's certificate against the CA: it is the backend's, through Envoy.
    echoed, der = await _stream(harness.https_port, DB, client, b"hello over passthrough\n")
    assert echoed == b"hello over passthrough\n"
    assert der == backend_cert.der


async def test_terminated_tcpproxy_streams_plain_bytes_to_the_backend(
    harness: Harness, ca: CA, client: ssl.SSLContext, echoes: tuple[int, int, Issued]
) -> None:
    plain_port, tls_port, backend_cert = echoes
    await harness.apply(await _tcp_files(harness, ca, plain_port, tls_port))
    payload = bytes(range(256)) * 64  # binary, and more than one read
    echoed, der = await _stream(harness.https_port, REDIS, client, payload)
    assert echoed == payload
    assert der != backend_cert.der  # Envoy's certificate for REDIS, from the Secret


SEED_TCP = "seed.tcp.example.com"
SEED_PASS = DB  # the TLS echo's certificate is for DB


def _seed_tcp_proxies(extra_route: str = "") -> str:
    """Seed 001's `protocol: tcp`: each root's only route sends to TCP services."""
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: seed-tcp, namespace: default}}
spec:
  virtualhost:
    fqdn: {SEED_TCP}
    tls: {{secretName: seed-cert}}
  routes:
    - conditions: [{{prefix: /}}]
      services: [{{name: stream, port: 7000, protocol: tcp}}]
{extra_route}---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: seed-pass, namespace: default}}
spec:
  virtualhost:
    fqdn: {SEED_PASS}
    tls: {{passthrough: true}}
  routes:
    - services: [{{name: tls-stream, port: 7443, protocol: tcp}}]
"""


async def test_seed_tcp_protocol_terminates_tls_and_streams_to_the_service(
    harness: Harness, ca: CA, client: ssl.SSLContext, echoes: tuple[int, int, Issued]
) -> None:
    _, tls_port, backend_cert = echoes
    seed_cert = ca.issue(SEED_TCP)
    stream = _Server()
    stream_port = await stream.start()
    try:
        files = {
            "svc.yaml": service_yaml("default", "stream", 7000, stream_port)
            + "---\n"
            + service_yaml("default", "tls-stream", 7443, tls_port),
            "secrets.yaml": tls_secret_yaml("default", "seed-cert", *_pair(seed_cert)),
        }
        await harness.apply({**files, "proxies.yaml": _seed_tcp_proxies()})
        for name in ("seed-tcp", "seed-pass"):
            assert harness.status_of("HTTPProxy", "default", name)["currentStatus"] == "valid"
        payload = bytes(range(256)) * 64
        echoed, der = await _stream(harness.https_port, SEED_TCP, client, payload)
        assert echoed == payload
        # Envoy's certificate from the Secret (verified against the CA), not a backend's.
        assert der == seed_cert.der
        assert stream.connections == 1
        # Passed through: the client sees the TLS backend's own certificate.
        echoed, der = await _stream(harness.https_port, SEED_PASS, client, b"through\n")
        assert (echoed, der) == (b"through\n", backend_cert.der)
        # A TCP route has no HTTP side: plain HTTP finds no virtual host for the name.
        assert (await harness.get(SEED_TCP)).status_code == 404

        # A second route makes the TCP route invalid: the root is not served, and says why.
        second = "    - conditions: [{prefix: /x}]\n      services: [{name: stream, port: 7000}]\n"
        await harness.apply({**files, "proxies.yaml": _seed_tcp_proxies(second)})
        errors = harness.status_of("HTTPProxy", "default", "seed-tcp")["conditions"][0]["errors"]
        assert [(e["type"], e["reason"]) for e in errors] == [("TCPProxyError", "TCPRouteNotValid")]
        assert "spec.routes[0]" in errors[0]["message"]
        with pytest.raises((ConnectionError, ssl.SSLError, OSError, asyncio.IncompleteReadError)):
            await _stream_once(harness.https_port, SEED_TCP, client, b"refused\n")
        assert stream.connections == 1
        # The other root is untouched.
        echoed, _ = await _stream(harness.https_port, SEED_PASS, client, b"still\n")
        assert echoed == b"still\n"
    finally:
        await stream.close()


async def _stream_once(port: int, sni: str, context: ssl.SSLContext, payload: bytes) -> bytes:
    """One attempt, no retries: the echo of `payload`, or the connection's error."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=sni), timeout=5.0
    )
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), timeout=5.0)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def test_a_tcp_hostname_sent_on_a_wildcard_chain_is_misdirected(
    harness: Harness, ca: CA, client: ssl.SSLContext, echoes: tuple[int, int, Issued]
) -> None:
    plain_port, tls_port, _ = echoes
    await harness.apply(await _tcp_files(harness, ca, plain_port, tls_port))
    r = await harness.https_get("x.tcp.example.com", verify=client)
    assert (r.status_code, r.json()["service"]) == (200, "app")
    # DB has a chain of its own (passthrough): over the wildcard's connection it is a 421.
    r = await harness.https_get(DB, sni="x.tcp.example.com", verify=client)
    assert r.status_code == 421


# --- client certificates ------------------------------------------------------------------------


def _mtls_root(name: str, fqdn: str, validation: str) -> str:
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: {name}, namespace: default}}
spec:
  virtualhost:
    fqdn: {fqdn}
    tls: {{secretName: {name}-cert, clientValidation: {validation}}}
  routes:
    - services: [{{name: app, port: 80}}]
"""


REQUIRED = "required.mtls.example.com"
OPTIONAL = "optional.mtls.example.com"
SKIP = "skip.mtls.example.com"
SKIP_CA = "skip-ca.mtls.example.com"
CRL = "crl.mtls.example.com"


@pytest_asyncio.fixture(loop_scope="session")
async def mtls(harness: Harness, ca: CA) -> AsyncIterator[dict[str, Issued]]:
    """Five hosts checking client certificates five ways, and the client certificates to try:
    one the CA signed, one it signed and revoked, one from a CA nobody trusts."""
    good, revoked = ca.issue_client("alice"), ca.issue_client("mallory")
    stranger = CA("another CA").issue_client("eve")
    secrets = [
        tls_secret_yaml("default", f"{name}-cert", *_pair(ca.issue(host)))
        for name, host in (
            ("required", REQUIRED),
            ("optional", OPTIONAL),
            ("skip", SKIP),
            ("skip-ca", SKIP_CA),
            ("crl", CRL),
        )
    ]
    secrets.append(_opaque_secret("default", "client-ca", **{"ca.crt": ca.cert_pem}))
    secrets.append(_opaque_secret("default", "client-crl", **{"crl.pem": ca.crl(revoked)}))
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "secrets.yaml": "---\n".join(secrets),
            "proxies.yaml": "---\n".join(
                [
                    _mtls_root("required", REQUIRED, "{caSecret: client-ca}"),
                    _mtls_root(
                        "optional",
                        OPTIONAL,
                        "{caSecret: client-ca, optionalClientCertificate: true}",
                    ),
                    _mtls_root("skip", SKIP, "{skipClientCertValidation: true}"),
                    _mtls_root(
                        "skip-ca", SKIP_CA, "{caSecret: client-ca, skipClientCertValidation: true}"
                    ),
                    _mtls_root("crl", CRL, "{caSecret: client-ca, crlSecret: client-crl}"),
                ]
            ),
        }
    )
    yield {"good": good, "revoked": revoked, "stranger": stranger}


def _with_certificate(ca: CA, issued: Issued | None) -> ssl.SSLContext:
    ctx = ca.client_context()
    if issued is not None:
        issued.load_into(ctx)
    return ctx


async def _status(harness: Harness, host: str, ctx: ssl.SSLContext) -> int | str:
    """The response status, or "refused" when the TLS handshake (or the first read after it,
    with TLS 1.3) fails."""
    try:
        r = await harness.https_get(host, verify=ctx, retry_connect=False)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, ssl.SSLError):
        # httpx wraps the alert, unless it arrives while the request is being written.
        return "refused"
    return r.status_code


async def _eventually_status(harness: Harness, host: str, ctx: ssl.SSLContext) -> int | str:
    # The first connection to a chain Envoy just received may race its activation.
    for _ in range(20):
        status = await _status(harness, host, ctx)
        if status == 200:
            return status
        await asyncio.sleep(0.1)
    return status


async def test_required_client_certificate(
    harness: Harness, ca: CA, mtls: dict[str, Issued]
) -> None:
    assert await _eventually_status(harness, REQUIRED, _with_certificate(ca, mtls["good"])) == 200
    assert await _status(harness, REQUIRED, _with_certificate(ca, None)) == "refused"
    assert await _status(harness, REQUIRED, _with_certificate(ca, mtls["stranger"])) == "refused"


async def test_optional_client_certificate(
    harness: Harness, ca: CA, mtls: dict[str, Issued]
) -> None:
    assert await _eventually_status(harness, OPTIONAL, _with_certificate(ca, None)) == 200
    assert await _status(harness, OPTIONAL, _with_certificate(ca, mtls["good"])) == 200
    # A certificate that is presented is still checked.
    assert await _status(harness, OPTIONAL, _with_certificate(ca, mtls["stranger"])) == "refused"


async def test_skip_client_certificate_validation(
    harness: Harness, ca: CA, mtls: dict[str, Issued]
) -> None:
    # Any certificate will do, even one from a CA nobody trusts, and so will none (Contour: "client
    # certificates are requested but not verified").
    assert await _eventually_status(harness, SKIP, _with_certificate(ca, mtls["stranger"])) == 200
    assert await _status(harness, SKIP, _with_certificate(ca, None)) == 200
    # With a caSecret they are required on requests, still not verified.
    assert (
        await _eventually_status(harness, SKIP_CA, _with_certificate(ca, mtls["stranger"])) == 200
    )
    assert await _status(harness, SKIP_CA, _with_certificate(ca, None)) == "refused"


async def test_revoked_client_certificate_is_refused(
    harness: Harness, ca: CA, mtls: dict[str, Issued]
) -> None:
    assert await _eventually_status(harness, CRL, _with_certificate(ca, mtls["good"])) == 200
    assert await _status(harness, CRL, _with_certificate(ca, mtls["revoked"])) == "refused"
    # Without the CRL the same certificate is fine: the refusal is the revocation.
    assert await _status(harness, REQUIRED, _with_certificate(ca, mtls["revoked"])) == 200


# --- the fallback certificate -------------------------------------------------------------------


async def test_fallback_certificate_serves_clients_without_sni(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    fallback = ca.issue("fallback.example.com")
    cert_a = ca.issue(A)
    root = """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: {name}, namespace: default}}
spec:
  virtualhost:
    fqdn: {fqdn}
    tls: {{secretName: {name}-cert{extra}}}
  routes:
    - services: [{{name: {name}, port: 80}}]
"""
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "a"), ("default", "b")),
            "secrets.yaml": tls_secret_yaml("default", "a-cert", *_pair(cert_a))
            + "---\n"
            + tls_secret_yaml("default", "b-cert", *_pair(ca.issue(B)))
            + "---\n"
            + tls_secret_yaml("certs", "fallback", *_pair(fallback))
            + "---\n"
            + yaml.safe_dump(
                {
                    "apiVersion": "projectcontour.io/v1",
                    "kind": "TLSCertificateDelegation",
                    "metadata": {"name": "fallback", "namespace": "certs"},
                    "spec": {
                        "delegations": [{"secretName": "fallback", "targetNamespaces": ["*"]}]
                    },
                }
            ),
            "a.yaml": root.format(name="a", fqdn=A, extra=", enableFallbackCertificate: true"),
            "b.yaml": root.format(name="b", fqdn=B, extra=""),
        },
        options={"fallback_certificate": "certs/fallback"},
    )
    # No SNI: the fallback certificate, and A's routes by its Host header.
    no_sni = ca.client_context()
    no_sni.check_hostname = False  # nothing to check it against without a name
    url = f"https://127.0.0.1:{harness.https_port}/x"
    async with httpx.AsyncClient(verify=no_sni, timeout=5.0) as http:
        r = None
        for _ in range(50):
            with contextlib.suppress(httpx.ConnectError):
                r = await http.get(url, headers={"Host": A})
                break
            await asyncio.sleep(0.1)
        assert r is not None and r.status_code == 200
        assert r.json()["service"] == "a"
        # B did not enable the fallback: misdirected, retry with SNI.
        assert (await http.get(url, headers={"Host": B})).status_code == 421
    # An IP address as the server name sends no SNI.
    assert await harness.peer_certificate("127.0.0.1", no_sni) == fallback.der
    # With SNI each host still gets its own certificate.
    assert await harness.peer_certificate(A, client) == cert_a.der
    r = await harness.https_get(B, verify=client)
    assert (r.status_code, r.json()["service"]) == (200, "b")


async def test_ingressroute_passthrough_and_delegated_tcpproxy(
    harness: Harness, ca: CA, client: ssl.SSLContext, echoes: tuple[int, int, Issued]
) -> None:
    _, tls_port, backend_cert = echoes
    await harness.apply(
        {
            "svc.yaml": service_yaml("default", "tls-echo", 443, tls_port),
            "ir.yaml": f"""\
apiVersion: contour.heptio.com/v1beta1
kind: IngressRoute
metadata: {{name: db, namespace: default}}
spec:
  virtualhost:
    fqdn: {DB}
    tls: {{passthrough: true}}
  tcpproxy:
    delegate: {{name: db-backend}}
---
apiVersion: contour.heptio.com/v1beta1
kind: IngressRoute
metadata: {{name: db-backend, namespace: default}}
spec:
  tcpproxy:
    services: [{{name: tls-echo, port: 443}}]
""",
        }
    )
    echoed, der = await _stream(harness.https_port, DB, client, b"ingressroute\n")
    assert (echoed, der) == (b"ingressroute\n", backend_cert.der)
    assert harness.status_of("IngressRoute", "default", "db-backend")["currentStatus"] == "valid"

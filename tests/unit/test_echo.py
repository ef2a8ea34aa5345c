from __future__ import annotations

import asyncio
import socket
import ssl
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from tests.e2e.certs import CA
from turnout.echo import EchoServer, demo_backends, start_demo_backends, start_echo
from turnout.sources.parse import parse_text
from turnout.store import Snapshot


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = await start_echo("127.0.0.1", 0, name="foo", namespace="team-a")
    yield server
    await server.close()


async def test_echo_reports_request(echo: EchoServer) -> None:
    assert echo.port > 0
    async with httpx.AsyncClient() as client:
        resp = await client.get(
            f"http://127.0.0.1:{echo.port}/a/b%2Fc?x=1&y=%20",
            headers={"Host": "example.com", "X-Test": "yes", "Cookie": "a=1"},
        )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["service"] == "foo"
    assert body["namespace"] == "team-a"
    assert body["path"] == "/a/b%2Fc?x=1&y=%20"
    assert body["host"] == "example.com"
    assert body["method"] == "GET"
    assert body["proto"] == "HTTP/1.1"
    assert body["headers"]["x-test"] == "yes"
    assert body["headers"]["cookie"] == "a=1"
    assert all(k == k.lower() for k in body["headers"])


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
async def test_echo_answers_any_method_with_a_body(echo: EchoServer, method: str) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(2):  # the same kept-alive connection serves the next request
            resp = await client.request(method, f"{echo.url}/", content=b"x" * 10_000)
            assert resp.status_code == 200
            assert resp.json()["method"] == method


async def test_echo_joins_repeated_headers(echo: EchoServer) -> None:
    async with httpx.AsyncClient() as client:
        resp = await client.get(echo.url, headers=[("X-Multi", "a"), ("x-multi", "b")])
    assert resp.json()["headers"]["x-multi"] == "a, b"
    assert resp.json()["path"] == "/"


async def test_echo_close_frees_the_port() -> None:
    server = await start_echo("127.0.0.1", 0, name="foo")
    port = server.port
    await server.close()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


async def test_echo_module_entry_point() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnout.echo",
        "--port",
        str(port),
        "--name",
        "bar",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 10)
        assert f"127.0.0.1:{port}" in line.decode()
        async with httpx.AsyncClient() as client:
            resp = await client.get(f"http://127.0.0.1:{port}/hi")
        assert resp.json()["service"] == "bar"
        assert resp.json()["namespace"] == "default"
    finally:
        proc.terminate()
        await proc.wait()


DEMO = """
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {turnout.dev/demo-echo: "true"}
spec:
  ports: [{name: http, port: 80, targetPort: 9001}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 9001}]
endpoints:
- addresses: ["127.0.0.1"]
- addresses: ["127.0.0.2"]
  conditions: {ready: false}
- addresses: ["10.0.0.5"]
---
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: team-b
  annotations: {turnout.dev/demo-echo: "true"}
spec:
  ports: [{port: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-x
  namespace: team-b
  labels: {kubernetes.io/service-name: api}
addressType: IPv6
ports: [{port: 9002}]
endpoints:
- addresses: ["::1"]
---
apiVersion: v1
kind: Service
metadata:
  name: real
spec:
  ports: [{port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: real-1
  labels: {kubernetes.io/service-name: real}
ports: [{port: 9003}]
endpoints:
- addresses: ["127.0.0.1"]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: other-namespace
  namespace: team-c
  labels: {kubernetes.io/service-name: web}
ports: [{name: http, port: 9004}]
endpoints:
- addresses: ["127.0.0.1"]
"""


def snapshot_of(text: str) -> Snapshot:
    result = parse_text(text, "demo.yaml")
    assert not result.problems
    return Snapshot.of(result.objects)


def test_demo_backends_picks_ready_loopback_endpoints_of_annotated_services() -> None:
    assert demo_backends(snapshot_of(DEMO)) == [
        ("default", "web", "127.0.0.1", 9001),
        ("team-b", "api", "::1", 9002),
    ]


def test_demo_backends_one_server_per_address() -> None:
    twice = DEMO.replace(
        "name: real\n", "name: real\n  annotations: {turnout.dev/demo-echo: 'true'}\n"
    )
    twice = twice.replace("port: 9003", "port: 9001")
    backends = demo_backends(snapshot_of(twice))
    assert [b for b in backends if b[2:] == ("127.0.0.1", 9001)] == [
        ("default", "real", "127.0.0.1", 9001)
    ]


async def test_start_demo_backends_serves_each_endpoint() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = DEMO.replace("9001", str(port)).replace('"::1"', '"10.1.1.1"')
    servers = await start_demo_backends(snapshot_of(text))
    try:
        assert [(s.namespace, s.name, s.port) for s in servers] == [("default", "web", port)]
        async with httpx.AsyncClient() as client:
            body: dict[str, Any] = (await client.get(f"http://127.0.0.1:{port}/x")).json()
        assert (body["service"], body["namespace"]) == ("web", "default")
    finally:
        for server in servers:
            await server.close()


async def test_echo_can_be_told_to_fail_one_path(echo: EchoServer) -> None:
    async with httpx.AsyncClient() as client:
        echo.answer("/healthz", 503)
        failed = await client.get(f"{echo.url}/healthz?probe=1")
        other = await client.get(f"{echo.url}/healthz/deeper")
        echo.answer("/healthz", None)
        restored = await client.get(f"{echo.url}/healthz")
    assert failed.status_code == 503
    assert failed.json()["service"] == "foo"  # still the echo body, so tests see who failed
    assert other.status_code == 200
    assert restored.status_code == 200


async def test_echo_can_redirect_one_path(echo: EchoServer) -> None:
    async with httpx.AsyncClient() as client:
        echo.answer("/old", 302, times=1, location="http://example.com/new")
        redirected = await client.get(f"{echo.url}/old")
        again = await client.get(f"{echo.url}/old")
        echo.answer("/plain", 503, times=1)
        failed = await client.get(f"{echo.url}/plain")
    assert redirected.status_code == 302
    assert redirected.headers["location"] == "http://example.com/new"
    assert again.status_code == 200 and "location" not in again.headers
    assert failed.status_code == 503 and "location" not in failed.headers


# --- what the Gateway API conformance suite asks of its echo backend -----------------------------


@pytest.fixture
def tls_context(tmp_path: Path) -> tuple[ssl.SSLContext, CA]:
    ca = CA()
    leaf = ca.issue("backend.example.com")
    (tmp_path / "tls.crt").write_text(leaf.cert_pem)
    (tmp_path / "tls.key").write_text(leaf.key_pem)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    return ctx, ca


async def test_https_echo_reports_the_server_name_each_connection_sent(
    tls_context: tuple[ssl.SSLContext, CA],
) -> None:
    server_ctx, ca = tls_context
    asked: list[str | None] = []
    # A callback the caller had set keeps running.
    server_ctx.sni_callback = lambda _obj, name, _ctx: asked.append(name)
    server = await start_echo("127.0.0.1", 0, name="secure", ssl_context=server_ctx)
    try:
        assert server.url == f"https://127.0.0.1:{server.port}"
        client_ctx = ca.client_context()
        # The name goes in the TLS handshake; the connection itself goes to 127.0.0.1.
        transport = httpx.AsyncHTTPTransport(verify=client_ctx)
        async with httpx.AsyncClient(transport=transport) as client:
            resp = await client.get(
                f"{server.url}/x",
                headers={"Host": "backend.example.com"},
                extensions={"sni_hostname": "backend.example.com"},
            )
        assert resp.status_code == 200
        body = resp.json()
        assert body["service"] == "secure"
        assert body["tls"] == {"serverName": "backend.example.com"}
        # Without SNI (an address as the host), no name: never one another connection sent.
        no_sni = ca.client_context()
        no_sni.check_hostname = False
        async with httpx.AsyncClient(verify=no_sni) as client:
            bare = (await client.get(f"{server.url}/y")).json()
        assert bare["tls"] == {"serverName": None}
        assert asked == ["backend.example.com", None]
    finally:
        await server.close()


async def test_plain_echo_has_no_tls_field(echo: EchoServer) -> None:
    async with httpx.AsyncClient() as client:
        body = (await client.get(echo.url)).json()
    assert "tls" not in body
    assert echo.url.startswith("http://")


async def test_echo_set_header_adds_response_headers(echo: EchoServer) -> None:
    async with httpx.AsyncClient() as client:
        resp = await client.get(
            echo.url,
            headers=[
                ("X-Echo-Set-Header", "X-Header-Set: set, X-Other:a:b ,broken, :empty"),
                ("X-Echo-Set-Header", "X-Second-Line: 2"),
            ],
        )
    assert resp.status_code == 200
    assert resp.headers["x-header-set"] == "set"
    assert resp.headers["x-other"] == "a:b"  # only the first colon separates name and value
    assert resp.headers["x-second-line"] == "2"
    assert "broken" not in resp.headers
    # The request header itself is still echoed, as every request header is.
    assert resp.json()["headers"]["x-echo-set-header"].startswith("X-Header-Set: set")


@pytest.mark.parametrize(
    ("delay", "at_least", "below"),
    [("0.3", 0.3, 2.0), ("300ms", 0.3, 2.0), ("1s", 1.0, 3.0), ("nan", 0.0, 0.5), ("x", 0.0, 0.5)],
)
async def test_echo_delay_forms(
    echo: EchoServer, delay: str, at_least: float, below: float
) -> None:
    async with httpx.AsyncClient() as client:
        started = time.monotonic()
        resp = await client.get(f"{echo.url}/slow", params={"delay": delay})
        took = time.monotonic() - started
    assert resp.status_code == 200
    assert at_least <= took < below


async def test_echo_websocket_echoes_text_and_binary_frames(echo: EchoServer) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{echo.url}/ws") as ws:
        await ws.send_str("hello")
        text = await ws.receive(timeout=5)
        await ws.send_bytes(b"\x00\x01\xffbinary")
        binary = await ws.receive(timeout=5)
    assert (text.type, text.data) == (aiohttp.WSMsgType.TEXT, "hello")
    assert (binary.type, binary.data) == (aiohttp.WSMsgType.BINARY, b"\x00\x01\xffbinary")
    assert echo.requests("/ws") == 1

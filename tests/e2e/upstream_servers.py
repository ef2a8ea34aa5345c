"""Backends that tell how Envoy reached them: over TLS or not, with which server name and ALPN
protocol, over HTTP/1.1 or HTTP/2.

- `start_tls_echo`: HTTP/1.1 over TLS (aiohttp). A client speaking clear text gets no answer.
- `start_h2_echo`: HTTP/2 only (the `h2` package), in clear text (h2c with prior knowledge) or
  over TLS. A client speaking HTTP/1.1 gets the connection closed.

Both answer every request with a JSON body: `service`, `path`, `proto` ("HTTP/1.1" or
"HTTP/2"), `tls` (bool), `sni` (the server name the client sent, or null) and `alpn` (the
protocol ALPN selected, or null).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.events
from aiohttp import web

from tests.e2e.certs import Issued


def server_context(
    issued: Issued, alpn: list[str] | None = None
) -> tuple[ssl.SSLContext, dict[int, str]]:
    """A server TLS context for `issued`, and a map from SSL object id to the server name the
    client sent (filled during each handshake)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    issued.load_into(ctx)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    names: dict[int, str] = {}

    def remember(sslobj: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        if server_name is not None:
            names[id(sslobj)] = server_name

    ctx.sni_callback = remember
    return ctx, names


@dataclass
class Backend:
    port: int
    requests: int = 0
    _close: Callable[[], Awaitable[None]] | None = None

    async def close(self) -> None:
        if self._close is not None:
            await self._close()


async def start_tls_echo(name: str, issued: Issued) -> Backend:
    """HTTP/1.1 over TLS on 127.0.0.1 (a free port), with the certificate `issued`."""
    ctx, names = server_context(issued, ["http/1.1"])
    backend = Backend(0)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        backend.requests += 1
        sslobj = request.transport.get_extra_info("ssl_object") if request.transport else None
        body = {
            "service": name,
            "path": request.raw_path,
            "proto": f"HTTP/{request.version.major}.{request.version.minor}",
            "tls": sslobj is not None,
            "sni": names.get(id(sslobj)) if sslobj is not None else None,
            "alpn": sslobj.selected_alpn_protocol() if sslobj is not None else None,
        }
        return web.json_response(body)

    runner = web.ServerRunner(web.Server(handle, access_log=None), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    backend.port = int(runner.addresses[0][1])
    backend._close = runner.cleanup
    return backend


class _H2Protocol(asyncio.Protocol):
    def __init__(self, name: str, backend: Backend, names: dict[int, str]) -> None:
        self.name = name
        self.backend = backend
        self.names = names
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.transport: asyncio.Transport | None = None
        self.paths: dict[int, str] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            events = self.conn.receive_data(data)
        except Exception:  # not HTTP/2 (e.g. an HTTP/1.1 request): hang up
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {k.decode() if isinstance(k, bytes) else k: v for k, v in event.headers}
                path = headers.get(":path", "/")
                self.paths[event.stream_id] = path.decode() if isinstance(path, bytes) else path
            elif isinstance(event, h2.events.StreamEnded):
                self._answer(event.stream_id)
            elif isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        self.transport.write(self.conn.data_to_send())

    def _answer(self, stream_id: int) -> None:
        assert self.transport is not None
        self.backend.requests += 1
        sslobj = self.transport.get_extra_info("ssl_object")
        body = json.dumps(
            {
                "service": self.name,
                "path": self.paths.pop(stream_id, "/"),
                "proto": "HTTP/2",
                "tls": sslobj is not None,
                "sni": self.names.get(id(sslobj)) if sslobj is not None else None,
                "alpn": sslobj.selected_alpn_protocol() if sslobj is not None else None,
            }
        ).encode()
        self.conn.send_headers(
            stream_id,
            [
                (":status", "200"),
                ("content-type", "application/json"),
                ("content-length", str(len(body))),
            ],
        )
        self.conn.send_data(stream_id, body, end_stream=True)


async def start_h2_echo(name: str, issued: Issued | None = None) -> Backend:
    """HTTP/2 on 127.0.0.1 (a free port): clear text (h2c) without `issued`, TLS with ALPN h2
    with it."""
    backend = Backend(0)
    ctx: ssl.SSLContext | None = None
    names: dict[int, str] = {}
    if issued is not None:
        ctx, names = server_context(issued, ["h2"])
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _H2Protocol(name, backend, names), "127.0.0.1", 0, ssl=ctx
    )
    backend.port = int(server.sockets[0].getsockname()[1])

    async def close() -> None:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)

    backend._close = close
    return backend

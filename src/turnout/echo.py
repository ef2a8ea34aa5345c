"""A small echo backend for demos and end-to-end tests.

Every request, whatever its method or path, is answered with JSON describing what the backend saw,
after the manner of the ingress-conformance echoserver that Contour's e2e tests use: the service it
stands for, the full path with query as received, the Host header and the request headers. Tests
assert which backend answered and what the proxy changed on the way.

A test can make a server answer another status on one path (`EchoServer.answer`), e.g. a 503 on
the path Envoy's active health check asks for, or only for the next few requests (a backend that
fails once, for retries), optionally with a `Location` (a backend that redirects, for internal
redirects); `EchoServer.requests` counts what arrived per path. Two query parameters
change the answer of one request: `delay=<seconds>` (or `1s`, `500ms`) waits before answering
(at most 30 s, for timeouts) and `set-cookie=<value>` (repeatable) adds a `Set-Cookie` header
(for cookie rewriting); the header `X-Echo-Set-Header: name:value,...` adds response headers.
A WebSocket upgrade is accepted, and every text or binary message is sent back as it came.
`client_port` is the port of the connection the request came on, so a test can tell a reused
upstream connection from a new one.

Run one by hand with `python -m turnout.echo --port 9001 --name foo`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import math
import ssl
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from turnout.graph.services import index_endpoint_slices, service_endpoints, service_ports
from turnout.store import Snapshot

log = logging.getLogger(__name__)

DEMO_ANNOTATION = "turnout.dev/demo-echo"


@dataclass(frozen=True, slots=True)
class EchoServer:
    host: str
    port: int
    name: str
    namespace: str
    _runner: web.BaseRunner = field(repr=False)
    # path -> status, shared with the request handler (the server object itself is frozen).
    _statuses: dict[str, int] = field(default_factory=dict, repr=False)
    # path -> how many more requests get the status in _statuses before it goes back to 200.
    _remaining: dict[str, int] = field(default_factory=dict, repr=False)
    # path -> requests received, counted when they arrive.
    _counts: Counter[str] = field(default_factory=Counter, repr=False)
    tls: bool = False
    # path -> the Location header sent with the status in _statuses.
    _locations: dict[str, str] = field(default_factory=dict, repr=False)

    def answer(
        self, path: str, status: int | None, times: int | None = None, location: str | None = None
    ) -> None:
        """From now on, answer requests for `path` (the path without the query) with `status`,
        still with the echo body; `None` goes back to 200. With `times`, only the next `times`
        requests get `status`. With `location`, those answers carry it as their `Location`."""
        self._remaining.pop(path, None)
        self._locations.pop(path, None)
        if status is None:
            self._statuses.pop(path, None)
            return
        if location is not None:
            self._locations[path] = location
        self._statuses[path] = status
        if times is not None:
            self._remaining[path] = times

    def requests(self, path: str | None = None) -> int:
        """How many requests arrived for `path` (without the query), or for any path."""
        return self._counts[path] if path is not None else sum(self._counts.values())

    def reset_counts(self) -> None:
        self._counts.clear()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()


_Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


# A test that asks for a longer delay has a bug; the server must not hold a connection forever.
_MAX_DELAY_S = 30.0


def _status(
    path: str, statuses: MutableMapping[str, int], remaining: MutableMapping[str, int]
) -> int:
    status = statuses.get(path, 200)
    left = remaining.get(path)
    if left is not None:
        if left <= 1:
            remaining.pop(path, None)
            statuses.pop(path, None)
        else:
            remaining[path] = left - 1
    return status


async def _websocket(request: web.BaseRequest) -> web.StreamResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for message in ws:
        if message.type == web.WSMsgType.TEXT:
            await ws.send_str(message.data)
        elif message.type == web.WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    return ws


def _handler(
    name: str,
    namespace: str,
    statuses: MutableMapping[str, int],
    remaining: MutableMapping[str, int] | None = None,
    counts: Counter[str] | None = None,
    server_names: MutableMapping[ssl.SSLObject, str] | None = None,
    locations: MutableMapping[str, str] | None = None,
) -> _Handler:
    remaining = remaining if remaining is not None else {}
    counts = counts if counts is not None else Counter()
    locations = locations if locations is not None else {}

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        counts[request.path] += 1
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await _websocket(request)
        # Drains the body so that the connection can be kept alive for the next request.
        await request.read()
        headers: dict[str, str] = {}
        for key, value in request.headers.items():
            lower = key.lower()
            headers[lower] = f"{headers[lower]}, {value}" if lower in headers else value
        body: dict[str, object] = {
            "service": name,
            "namespace": namespace,
            # raw_path is what arrived on the wire, so tests see rewrites exactly, undecoded.
            "path": request.raw_path,
            "host": request.headers.get("Host", ""),
            "method": request.method,
            "proto": f"HTTP/{request.version.major}.{request.version.minor}",
            "headers": headers,
            # The proxy's side of the connection: a new port is a new upstream connection.
            "client_port": _peer_port(request),
        }
        sslobj = request.transport.get_extra_info("ssl_object") if request.transport else None
        if sslobj is not None and server_names is not None:
            # As echo-basic's `tls.serverName`: the SNI the proxy sent (BackendTLSPolicy hostname).
            tls: dict[str, str | None] = {"serverName": server_names.get(sslobj)}
            body["tls"] = tls
        location = locations.get(request.path) if request.path in statuses else None
        status = _status(request.path, statuses, remaining)
        delay = _delay(request.query.get("delay"))
        if delay:
            await asyncio.sleep(delay)
        response = web.json_response(body, status=status)
        if location is not None:
            response.headers["Location"] = location
        for cookie in request.query.getall("set-cookie", []):
            response.headers.add("Set-Cookie", cookie)
        for value in request.headers.getall(ECHO_SET_HEADER, []):
            for header, header_value in _echo_set_headers(value):
                response.headers.add(header, header_value)
        return response

    return handle


def _peer_port(request: web.BaseRequest) -> int | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2 and isinstance(peer[1], int):
        return peer[1]
    return None


# As the Gateway API conformance echo backend: `X-Echo-Set-Header: name:value,name2:value2` makes
# the backend answer with those response headers (for ResponseHeaderModifier expectations).
ECHO_SET_HEADER = "X-Echo-Set-Header"


def _echo_set_headers(value: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in value.split(","):
        name, sep, header_value = item.partition(":")
        if sep and name.strip():
            pairs.append((name.strip(), header_value.strip()))
    return pairs


def _delay(value: str | None) -> float:
    # Seconds, or a Go duration in s or ms as the conformance tests write it ("1s", "500ms").
    text = (value or "").strip()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 0.001
    elif text.endswith("s"):
        text = text[:-1]
    try:
        seconds = float(text) * scale if text else 0.0
    except ValueError:
        return 0.0
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), _MAX_DELAY_S)


async def start_echo(
    host: str,
    port: int,
    *,
    name: str,
    namespace: str = "default",
    ssl_context: ssl.SSLContext | None = None,
) -> EchoServer:
    """Starts an echo server; `port` 0 picks a free port, which `EchoServer.port` then tells.
    With `ssl_context` it speaks HTTPS (a TLS passthrough or BackendTLSPolicy target) and reports
    the server name each connection asked for (`tls.serverName` in the answer, null without
    SNI); that takes the context's `sni_callback`, and runs a callback already set there."""
    statuses: dict[str, int] = {}
    remaining: dict[str, int] = {}
    counts: Counter[str] = Counter()
    # Keyed by the connection's own SSLObject, weakly: an id() could be reused by a later
    # connection that sent no SNI and would then report a stale name.
    server_names: weakref.WeakKeyDictionary[ssl.SSLObject, str] = weakref.WeakKeyDictionary()
    if ssl_context is not None:
        chained = ssl_context.sni_callback

        def remember(
            sslobj: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
        ) -> int | None:
            if server_name is not None:
                server_names[sslobj] = server_name
            if chained is None:
                return None
            # A caller's own callback (e.g. picking a certificate by name) still runs; typeshed
            # says str, but Python passes None for a client without SNI, as it does here.
            return chained(sslobj, server_name, context)  # type: ignore[arg-type]

        ssl_context.sni_callback = remember
    locations: dict[str, str] = {}
    handler = _handler(name, namespace, statuses, remaining, counts, server_names, locations)
    server = web.Server(handler, access_log=None)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    log.info("echo %s/%s listening on %s:%d", namespace, name, host, bound)
    return EchoServer(
        host,
        int(bound),
        name,
        namespace,
        runner,
        statuses,
        remaining,
        counts,
        tls=ssl_context is not None,
        _locations=locations,
    )


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def demo_backends(snapshot: Snapshot) -> list[tuple[str, str, str, int]]:
    """(namespace, service, address, port) for each ready loopback endpoint of every Service
    annotated `turnout.dev/demo-echo: "true"`: where `turnout serve` starts echo servers so that
    the quickstart answers without any real backend.

    Endpoints are resolved as the compiler resolves them (EndpointSlices labelled
    `kubernetes.io/service-name`, matched to the Service's ports), so an echo server runs exactly
    where Envoy will send traffic. Only one server can bind an address and port: the first
    Service (by namespace/name) that lists it gets it.
    """
    found: list[tuple[str, str, str, int]] = []
    owner: dict[tuple[str, int], tuple[str, str]] = {}
    slices = index_endpoint_slices(snapshot)
    for service in snapshot.kind("", "Service"):
        if str(service.annotations.get(DEMO_ANNOTATION, "")).lower() != "true":
            continue
        me = (service.namespace, service.name)
        for sp in service_ports(service):
            for endpoint in service_endpoints(snapshot, service, sp, slices):
                if not _is_loopback(endpoint.address):
                    continue
                where = (endpoint.address, endpoint.port)
                first = owner.setdefault(where, me)
                if first == me:
                    if (*me, *where) not in found:
                        found.append((*me, *where))
                else:
                    log.warning(
                        "demo echo: %s:%d is served for %s/%s; not also for %s/%s",
                        *where,
                        *first,
                        *me,
                    )
    return found


async def start_demo_backends(snapshot: Snapshot) -> list[EchoServer]:
    """Starts an echo server for each of `demo_backends`; a port already in use is logged and
    skipped (someone may be running the real backend there)."""
    servers: list[EchoServer] = []
    for namespace, name, address, port in demo_backends(snapshot):
        try:
            servers.append(await start_echo(address, port, name=name, namespace=namespace))
        except OSError as err:
            log.warning(
                "demo echo %s/%s on %s:%d not started: %s", namespace, name, address, port, err
            )
    return servers


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m turnout.echo", description="Answer every HTTP request with JSON about it."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port to bind (0: any free port)")
    parser.add_argument("--name", required=True, help="the service name to report")
    parser.add_argument("--namespace", default="default", help="the namespace to report")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    server = await start_echo(args.host, args.port, name=args.name, namespace=args.namespace)
    print(f"echo {args.namespace}/{args.name} on {server.url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # Ctrl-C is how a hand-run echo server is meant to stop.
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

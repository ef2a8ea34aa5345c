"""End-to-end harness: turnout's controller in-process, one real Envoy, echo backends on loopback.

One harness serves the whole test session; each test writes its own files into the watched
directory and waits until Envoy has acknowledged the configuration compiled from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import socket
import ssl
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from turnout.app import build_controller, compile_options, translate_options
from turnout.config import ServeConfig
from turnout.controller import Controller
from turnout.echo import EchoServer, start_echo


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_yaml(
    namespace: str, name: str, port: int, backend_port: int | None, created: str | None = None
) -> str:
    """A Service and (when backend_port is given) an EndpointSlice pointing at 127.0.0.1."""
    meta_ts = f'\n  creationTimestamp: "{created}"' if created else ""
    doc = f"""\
        apiVersion: v1
        kind: Service
        metadata:
          name: {name}
          namespace: {namespace}{meta_ts}
        spec:
          ports:
            - name: http
              port: {port}
        """
    doc = textwrap.dedent(doc)
    if backend_port is not None:
        doc += textwrap.dedent(f"""\
            ---
            apiVersion: discovery.k8s.io/v1
            kind: EndpointSlice
            metadata:
              name: {name}-slice
              namespace: {namespace}
              labels:
                kubernetes.io/service-name: {name}
            addressType: IPv4
            ports:
              - name: http
                port: {backend_port}
            endpoints:
              - addresses: ["127.0.0.1"]
            """)
    return doc


def multi_endpoint_service(namespace: str, name: str, ports: Sequence[int]) -> str:
    """A Service on port 80 whose endpoints are several backends on 127.0.0.1 (one
    EndpointSlice per backend port, since a slice has one set of ports)."""
    docs = [service_yaml(namespace, name, 80, None)]
    for i, port in enumerate(ports):
        docs.append(
            textwrap.dedent(f"""\
                apiVersion: discovery.k8s.io/v1
                kind: EndpointSlice
                metadata:
                  name: {name}-{i}
                  namespace: {namespace}
                  labels: {{kubernetes.io/service-name: {name}}}
                addressType: IPv4
                ports: [{{name: http, port: {port}}}]
                endpoints: [{{addresses: ["127.0.0.1"]}}]
                """)
        )
    return "---\n".join(docs)


@contextlib.asynccontextmanager
async def backends(namespace: str, *names: str) -> AsyncIterator[list[EchoServer]]:
    """Echo backends owned by one test (unlike the session-wide `Harness.backend`), so that it
    can count their requests and make them fail without affecting other tests."""
    servers = [await start_echo("127.0.0.1", 0, name=n, namespace=namespace) for n in names]
    try:
        yield servers
    finally:
        for s in servers:
            await s.close()


@dataclass(frozen=True, slots=True)
class RawResponse:
    """An answer to `Harness.raw_get`: the status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: str


@dataclass
class Harness:
    controller: Controller
    config_dir: Path
    http_port: int
    _echoes: dict[tuple[str, str], Any] = field(default_factory=dict)
    https_port: int = 0
    # The controller's configuration as the session started it; `apply(options=...)` derives a
    # per-apply configuration from it, so no override outlives the test that made it.
    _base_config: ServeConfig | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    async def backend(self, namespace: str, name: str) -> int:
        """Starts (once per session) an echo backend answering as namespace/name."""
        key = (namespace, name)
        if key not in self._echoes:
            self._echoes[key] = await start_echo("127.0.0.1", 0, name=name, namespace=namespace)
        return int(self._echoes[key].port)

    async def services(self, *specs: tuple[str, str]) -> str:
        """YAML for Services (port 80) backed by echo backends, one per (namespace, name)."""
        docs = []
        for namespace, name in specs:
            docs.append(service_yaml(namespace, name, 80, await self.backend(namespace, name)))
        return "---\n".join(docs)

    def write(self, files: Mapping[str, str]) -> None:
        for child in self.config_dir.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        for name, text in files.items():
            (self.config_dir / name).write_text(textwrap.dedent(text))

    async def apply(
        self,
        files: Mapping[str, str],
        timeout: float = 10.0,
        options: Mapping[str, Any] | None = None,
        translate: Mapping[str, Any] | None = None,
    ) -> str:
        """Replaces the watched files, recompiles, and waits until Envoy ACKs the result.

        `options` overrides `ServeConfig` fields that only change the compile (e.g.
        `disable_permit_insecure`) until the next `apply`; the same Envoy keeps running.
        `translate` overrides `TranslateOptions` fields no flag sets (e.g. the size of a split
        host's path scopes) the same way.
        """
        if self._base_config is None:
            self._base_config = self.controller.config
        config = dataclasses.replace(self._base_config, **(options or {}))
        self.controller.config = config
        self.controller.compile_options = compile_options(config)
        self.controller.translate_options = dataclasses.replace(
            translate_options(config), **(translate or {})
        )
        self.write(files)
        applied = await self.controller.reload()
        assert applied is not None, self.controller.compile_error
        assert await self.controller.xds.wait_acked(applied.version, timeout), (
            f"Envoy did not acknowledge version {applied.version}: {self.controller.readiness()[1]}"
        )
        return applied.version

    async def wait_acked_current(self, timeout: float = 10.0) -> None:
        applied = self.controller.applied
        assert applied is not None
        assert await self.controller.xds.wait_acked(applied.version, timeout)

    def status_of(self, kind: str, namespace: str, name: str) -> Mapping[str, Any]:
        for s in self.controller.statuses():
            if (s.ref.kind, s.ref.namespace, s.ref.name) == (kind, namespace, name):
                return s.body
        raise AssertionError(f"no status for {kind} {namespace}/{name}")

    async def get(
        self,
        host: str,
        path: str = "/",
        headers: Mapping[str, str] | None = None,
        method: str = "GET",
    ) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5.0) as client:
            # A listener Envoy just received may still be binding: retry only connect errors.
            for attempt in range(50):
                try:
                    return await client.request(
                        method, path, headers={"Host": host, **(headers or {})}
                    )
                except httpx.ConnectError:
                    if attempt == 49:
                        raise
                    await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def raw_get(self, host: str, target: str) -> RawResponse:
        """One HTTP/1.1 GET with `target` written byte for byte: httpx would normalise `//a`
        or `/./a` before sending it, and the tests of Envoy's path normalisation need them."""
        request = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        for attempt in range(50):
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self.http_port), timeout=5.0
                )
                break
            except OSError:
                if attempt == 49:
                    raise
                await asyncio.sleep(0.1)
        try:
            writer.write(request.encode("latin-1"))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5.0)
            status_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            # Read by Content-Length: waiting for EOF would wait out Envoy's delayed close.
            length = headers.get("content-length")
            read = reader.readexactly(int(length)) if length is not None else reader.read()
            body = await asyncio.wait_for(read, timeout=5.0)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return RawResponse(int(status_line.split(" ", 2)[1]), headers, body.decode("latin-1"))

    async def https_get(
        self,
        host: str,
        path: str = "/",
        *,
        verify: ssl.SSLContext,
        sni: str | None = None,
        headers: Mapping[str, str] | None = None,
        method: str = "GET",
        retry_connect: bool = True,
    ) -> httpx.Response:
        """A request over TLS to the HTTPS port on 127.0.0.1, with `sni` (default: `host`) as the
        server name, verified with `verify`, and `host` as the Host header."""
        url = f"https://127.0.0.1:{self.https_port}{path}"
        extensions = {"sni_hostname": sni or host}
        async with httpx.AsyncClient(verify=verify, timeout=5.0) as client:
            # A listener or filter chain Envoy just received may still be taking over the
            # socket: retry connect (and handshake) errors only.
            attempts = 50 if retry_connect else 1
            for attempt in range(attempts):
                try:
                    return await client.request(
                        method,
                        url,
                        headers={"Host": host, **(headers or {})},
                        extensions=extensions,
                    )
                except httpx.ConnectError:
                    if attempt == attempts - 1:
                        raise
                    await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def peer_certificate(self, sni: str, verify: ssl.SSLContext) -> bytes:
        """The DER certificate Envoy presents on the HTTPS port for the server name `sni`."""
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.https_port, ssl=verify, server_hostname=sni),
            timeout=5.0,
        )
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
        assert der is not None
        return bytes(der)

    async def served_by(
        self, host: str, path: str = "/", headers: Mapping[str, str] | None = None
    ) -> str:
        """The namespace/name of the echo backend that answered, or the status code."""
        r = await self.get(host, path, headers)
        if r.status_code != 200:
            return str(r.status_code)
        body = r.json()
        return f"{body['namespace']}/{body['service']}"

    async def envoy_admin(self, path: str) -> Any:
        """The JSON that Envoy's admin interface answers at `path` (on its Unix socket)."""
        socket_path = str(self.controller.state_dir.admin_socket)
        transport = httpx.AsyncHTTPTransport(uds=socket_path)
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
            r = await client.get(f"http://envoy{path}")
            r.raise_for_status()
            return r.json()

    async def active_clusters(self) -> list[dict[str, Any]]:
        """The dynamic clusters Envoy is using, as its config dump shows them."""
        dump = await self.envoy_admin("/config_dump?resource=dynamic_active_clusters")
        return [entry.get("cluster", {}) for entry in dump.get("configs", [])]

    async def distribution(self, host: str, path: str, n: int) -> Counter[str]:
        counts: Counter[str] = Counter()
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5.0) as client:
            for _ in range(n):
                r = await client.get(path, headers={"Host": host})
                body = r.json() if r.status_code == 200 else {}
                counts[
                    f"{body.get('namespace')}/{body.get('service')}" if body else str(r.status_code)
                ] += 1
        return counts

    async def eventually(self, probe: Any, expected: Any, timeout: float = 10.0) -> Any:
        """Polls an async probe until it returns `expected`; returns the last value."""
        deadline = asyncio.get_running_loop().time() + timeout
        value = None
        while asyncio.get_running_loop().time() < deadline:
            value = await probe()
            if value == expected:
                return value
            await asyncio.sleep(0.1)
        return value

    async def close(self) -> None:
        for server in self._echoes.values():
            await server.close()
        self._echoes.clear()


async def start_harness(tmp: Path, **settings: Any) -> Harness:
    """A controller with its own Envoy serving `tmp/config`; `settings`: more `ServeConfig`
    fields."""
    config_dir = tmp / "config"
    config_dir.mkdir()
    http_port = free_port()
    https_port = free_port()
    config = ServeConfig(
        paths=(config_dir,),
        http_port=http_port,
        https_port=https_port,
        admin_port=free_port(),
        xds_port=0,
        envoy_admin_port=free_port(),
        log_level="warning",
        demo_backends=False,
        state_dir=tmp / "state",
        debounce_ms=50,
        **settings,
    )
    controller = build_controller(config)
    await controller.start()
    return Harness(
        controller=controller, config_dir=config_dir, http_port=http_port, https_port=https_port
    )

"""Gateway API backends through the real Envoy: a TCPRoute on a TCP listener of its own port, a
TLSRoute passing TLS through by SNI (the client sees the backend's certificate), a
cross-namespace backendRef that works with a ReferenceGrant and answers 500 once the grant is
gone, a split whose invalid third answers 500, and a BackendTLSPolicy making Envoy speak
validated TLS to its backend."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from tests.e2e.certs import CA, Issued
from tests.e2e.gateway_backends import (
    HTTP_ROUTE,
    SECURE_REF,
    backend_tls_policy,
    gateway,
    get_when_listening,
    listener,
    parent_condition,
)
from tests.e2e.harness import Harness, free_port, service_yaml
from tests.e2e.upstream_servers import server_context, start_tls_echo
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.graph.model import INVALID_BACKEND

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
]


class StreamServer:
    """A TCP server on 127.0.0.1 (TLS when `context` is given) that answers every connection
    with its name, then echoes every byte back."""

    def __init__(self, name: str, context: ssl.SSLContext | None = None) -> None:
        self.name = name.encode()
        self.context = context
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self.name + b"\n")
            await writer.drain()
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
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def tcp_route(name: str, rules: str, *, created: str = "", section: str = "") -> str:
    """TCPRoute `apps/name` on the Gateway `infra/gw` (on its listener `section` if given), with
    the YAML lines of its `spec.rules` (indented by two spaces)."""
    timestamp = f'\n  creationTimestamp: "{created}"' if created else ""
    section_name = f"\n      sectionName: {section}" if section else ""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata:
  name: {name}
  namespace: apps{timestamp}
spec:
  parentRefs:
    - name: gw
      namespace: infra{section_name}
{rules}"""


def tcp_service(namespace: str, name: str, port: int, backend_port: int) -> str:
    return service_yaml(namespace, name, port, backend_port)


async def stream(
    port: int, payload: bytes, *, ssl_context: ssl.SSLContext | None = None, sni: str = ""
) -> tuple[bytes, bytes, bytes | None]:
    """Connects to Envoy on `port` (over TLS when `ssl_context` is given, with `sni`), sends
    `payload`; returns (the backend's name line, the echo, the peer certificate)."""
    for attempt in range(50):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", port, ssl=ssl_context, server_hostname=sni or None
                ),
                timeout=5.0,
            )
            hello = await asyncio.wait_for(reader.readline(), timeout=5.0)
            if not hello:  # accepted, then closed: a listener still warming up
                raise ConnectionError("closed before the backend answered")
            break
        except (ConnectionError, ssl.SSLError, OSError, asyncio.IncompleteReadError):
            if attempt == 49:
                raise
            await asyncio.sleep(0.1)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        writer.write(payload)
        await writer.drain()
        echoed = await asyncio.wait_for(reader.readexactly(len(payload)), timeout=5.0)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return hello.strip(), echoed, der


async def outcome(port: int, host: str, path: str = "/") -> str:
    """`namespace/name` of the echo backend that answered a request to Envoy on `port`, or the
    status code."""
    r = await get_when_listening(port, host, path)
    if r.status_code != 200:
        return str(r.status_code)
    body = r.json()
    return f"{body['namespace']}/{body['service']}"


def assert_envoy_accepts(h: Harness) -> None:
    """The applied configuration also passes `envoy --mode validate` as static resources (where
    route tables are checked against the clusters unless told otherwise)."""
    assert h.controller.applied is not None
    result = validate_resources(translate(h.controller.applied.result.graph))
    assert result.ok, result.output


@pytest_asyncio.fixture(loop_scope="session")
async def ca() -> CA:
    return CA()


@pytest_asyncio.fixture(loop_scope="session")
async def servers(ca: CA) -> AsyncIterator[dict[str, tuple[int, Issued | None]]]:
    """Plain TCP servers `one` and `two`, and TLS servers for a.tls.example.com and
    b.tls.example.com, each presenting its own certificate."""
    issued = {"a": ca.issue("a.tls.example.com"), "b": ca.issue("b.tls.example.com")}
    started: list[StreamServer] = []
    out: dict[str, tuple[int, Issued | None]] = {}
    for name in ("one", "two"):
        server = StreamServer(name)
        started.append(server)
        out[name] = (await server.start(), None)
    for name, cert in issued.items():
        context, _ = server_context(cert)
        server = StreamServer(f"tls-{name}", context)
        started.append(server)
        out[f"tls-{name}"] = (await server.start(), cert)
    try:
        yield out
    finally:
        for server in started:
            await server.close()


async def test_tcproute_streams_on_its_own_port(
    harness: Harness, servers: dict[str, tuple[int, Issued | None]]
) -> None:
    port = free_port()
    route = tcp_route("db", "  rules: [{backendRefs: [{name: one, port: 5432}]}]\n", section="tcp")
    await harness.apply(
        {
            "gw.yaml": gateway(listener("tcp", port, "TCP")),
            "route.yaml": route,
            "svc.yaml": tcp_service("apps", "one", 5432, servers["one"][0]),
        }
    )
    hello, echoed, _ = await stream(port, b"select 1;\n")
    assert (hello, echoed) == (b"one", b"select 1;\n")
    status = harness.status_of("TCPRoute", "apps", "db")
    (parent,) = status["parents"]
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }
    assert_envoy_accepts(harness)


async def test_tcproute_split_rejects_the_invalid_share(
    harness: Harness, servers: dict[str, tuple[int, Issued | None]]
) -> None:
    port = free_port()
    route = tcp_route(
        "db", "  rules: [{backendRefs: [{name: one, port: 5432}, {name: missing, port: 5432}]}]\n"
    )
    await harness.apply(
        {
            "gw.yaml": gateway(listener("tcp", port, "TCP")),
            "route.yaml": route,
            "svc.yaml": tcp_service("apps", "one", 5432, servers["one"][0]),
        }
    )
    await stream(port, b"warm")  # the listener is up
    counts: Counter[str] = Counter()
    for _ in range(60):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5.0)
            counts[line.strip().decode() or "closed"] += 1
        except ConnectionError:
            counts["closed"] += 1
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    # Half of the connections are closed without an answer (p=0.5, n=60: 5 standard deviations).
    assert set(counts) == {"one", "closed"}
    assert 11 <= counts["closed"] <= 49, counts
    resolved = parent_condition(harness, "TCPRoute", "db", "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert_envoy_accepts(harness)


async def test_an_older_malformed_tcproute_does_not_take_the_listener(
    harness: Harness, servers: dict[str, tuple[int, Issued | None]]
) -> None:
    port = free_port()

    def route(name: str, created: str, rules: str) -> str:
        return tcp_route(name, rules, created=created)

    await harness.apply(
        {
            "gw.yaml": gateway(listener("tcp", port, "TCP")),
            "broken.yaml": route("broken", "2024-01-01T00:00:00Z", "")
            + "---\n"
            + route(
                "bad-weight",
                "2024-01-02T00:00:00Z",
                "  rules: [{backendRefs: [{name: two, port: 5432, weight: -3}]}]\n",
            ),
            "good.yaml": route(
                "good",
                "2024-02-01T00:00:00Z",
                "  rules: [{backendRefs: [{name: one, port: 5432}]}]\n",
            ),
            "svc.yaml": tcp_service("apps", "one", 5432, servers["one"][0])
            + "---\n"
            + tcp_service("apps", "two", 5432, servers["two"][0]),
        }
    )
    # Every connection reaches the valid route's backend: none is closed by the broken routes.
    for _ in range(10):
        hello, echoed, _ = await stream(port, b"ping")
        assert (hello, echoed) == (b"one", b"ping")
    for name in ("broken", "bad-weight"):
        accepted = parent_condition(harness, "TCPRoute", name, "Accepted")
        assert (accepted["status"], accepted["reason"]) == ("False", "UnsupportedValue")
        assert accepted["message"].startswith("spec.rules")
    accepted = parent_condition(harness, "TCPRoute", "good", "Accepted")
    assert (accepted["status"], accepted["message"]) == ("True", "Route is accepted")
    assert_envoy_accepts(harness)


async def test_tlsroute_passes_tls_through_by_sni(
    harness: Harness, ca: CA, servers: dict[str, tuple[int, Issued | None]]
) -> None:
    port = free_port()
    routes = ""
    for name in ("a", "b"):
        routes += f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata:
  name: {name}
  namespace: apps
spec:
  parentRefs:
    - name: gw
      namespace: infra
  hostnames: ["{name}.tls.example.com"]
  rules:
    - backendRefs:
        - name: tls-{name}
          port: 443
"""
    services = "---\n".join(
        tcp_service("apps", f"tls-{n}", 443, servers[f"tls-{n}"][0]) for n in ("a", "b")
    )
    tls_listener = listener("tls", port, "TLS", "      tls:\n        mode: Passthrough\n")
    await harness.apply(
        {
            "gw.yaml": gateway(tls_listener),
            "routes.yaml": routes,
            "svc.yaml": services,
        }
    )
    client = ca.client_context()
    for name in ("a", "b"):
        hello, echoed, der = await stream(
            port, b"ping", ssl_context=client, sni=f"{name}.tls.example.com"
        )
        assert (hello, echoed) == (f"tls-{name}".encode(), b"ping")
        cert = servers[f"tls-{name}"][1]
        assert cert is not None and der == cert.der  # the backend's own certificate
    # A name no route serves gets no chain: the handshake fails.
    with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="c.tls.example.com"
            ),
            timeout=5.0,
        )
        writer.close()
    assert_envoy_accepts(harness)


GRANT = """\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: from-apps
  namespace: backends
spec:
  from:
    - group: gateway.networking.k8s.io
      kind: HTTPRoute
      namespace: apps
  to:
    - group: ""
      kind: Service
"""


async def test_cross_namespace_backend_needs_the_grant_and_loses_it(harness: Harness) -> None:
    port = free_port()
    host = "grant.example.com"
    refs = "        - name: web\n          namespace: backends\n          port: 80\n"
    files = {
        "gw.yaml": gateway(listener("http", port, "HTTP")),
        "route.yaml": HTTP_ROUTE.format(host=host, refs=refs),
        "svc.yaml": await harness.services(("backends", "web")),
    }
    await harness.apply({**files, "grant.yaml": GRANT})
    assert await outcome(port, host) == "backends/web"
    assert parent_condition(harness, "HTTPRoute", "web", "ResolvedRefs")["reason"] == "ResolvedRefs"

    await harness.apply(files)  # the grant is deleted
    assert await outcome(port, host) == "500"
    resolved = parent_condition(harness, "HTTPRoute", "web", "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "RefNotPermitted")
    assert_envoy_accepts(harness)

    await harness.apply({**files, "grant.yaml": GRANT})  # and granted again
    assert await outcome(port, host) == "backends/web"


async def test_three_way_split_with_an_invalid_backend_answers_a_third_500(
    harness: Harness,
) -> None:
    port = free_port()
    host = "split.example.com"
    refs = (
        "        - name: a\n          port: 80\n"
        "        - name: b\n          port: 80\n"
        "        - name: nowhere\n          port: 80\n"
    )
    await harness.apply(
        {
            "gw.yaml": gateway(listener("http", port, "HTTP")),
            "route.yaml": HTTP_ROUTE.format(host=host, refs=refs),
            "svc.yaml": await harness.services(("apps", "a"), ("apps", "b")),
        }
    )
    graph = harness.controller.applied.result.graph if harness.controller.applied else None
    assert graph is not None
    assert INVALID_BACKEND not in {c.name for c in graph.clusters}
    n = 300
    counts: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=5.0) as client:
        await outcome(port, host)  # the listener is up
        for _ in range(n):
            r = await client.get(f"http://127.0.0.1:{port}/", headers={"Host": host})
            counts["500" if r.status_code == 500 else f"{r.json()['service']}"] += 1
    assert set(counts) == {"a", "b", "500"}, counts
    # p = 1/3, n = 300: 100 expected, 8.2 standard deviation; the bounds are 5 of them.
    for key in counts:
        assert 59 <= counts[key] <= 141, counts
    resolved = parent_condition(harness, "HTTPRoute", "web", "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert "backendRefs[2]" in resolved["message"]
    assert_envoy_accepts(harness)


async def test_backend_tls_policy_makes_envoy_validate_the_backend(
    harness: Harness, ca: CA
) -> None:
    port = free_port()
    host = "secure.example.com"
    backend = await start_tls_echo("secure", ca.issue("backend.internal"))
    try:
        ca_map = "\n".join("    " + line for line in ca.cert_pem.splitlines())
        validation = """\
    caCertificateRefs:
      - group: ""
        kind: ConfigMap
        name: backend-ca
    hostname: {hostname}
"""
        policy = (
            backend_tls_policy(validation)
            + f"""\
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: backend-ca
  namespace: apps
data:
  ca.crt: |
{ca_map}
"""
        )
        files = {
            "gw.yaml": gateway(listener("http", port, "HTTP")),
            "route.yaml": HTTP_ROUTE.format(host=host, refs=SECURE_REF),
            "svc.yaml": service_yaml("apps", "secure", 443, backend.port),
        }
        await harness.apply({**files, "policy.yaml": policy.format(hostname="backend.internal")})
        r = await get_when_listening(port, host, "/x")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tls"] is True and body["sni"] == "backend.internal"
        async with httpx.AsyncClient(timeout=5.0) as client:
            # A name the backend's certificate does not carry: Envoy refuses the handshake.
            await harness.apply({**files, "policy.yaml": policy.format(hostname="other.internal")})
            r = await client.get(f"http://127.0.0.1:{port}/x", headers={"Host": host})
            assert r.status_code == 503

            # No CA to validate with (the ConfigMap is gone): the backend is invalid, 500.
            without_ca = policy.format(hostname="backend.internal").split("---")[0]
            await harness.apply({**files, "policy.yaml": without_ca})
            r = await client.get(f"http://127.0.0.1:{port}/x", headers={"Host": host})
            assert r.status_code == 500
            resolved = parent_condition(harness, "HTTPRoute", "web", "ResolvedRefs")
            assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
            assert "BackendTLSPolicy secure" in resolved["message"]
            assert "(Accepted NoValidCACertificate)" in resolved["message"]
        assert_envoy_accepts(harness)
    finally:
        await backend.close()

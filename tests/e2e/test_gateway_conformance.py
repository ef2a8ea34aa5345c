"""The Gateway API conformance suite, re-written as turnout cases, run through the real Envoy.

One test per directory under tests/conformance/ (see its README for the case format and how a case
maps to its upstream test). For each step of a case the runner:

1. loads the step's manifests together with the base objects the case names (namespaces, the
   GatewayClass `turnout`, the base Gateways and the backend Services of the upstream base);
2. gives every Gateway listener port its own free loopback port (per Gateway, stable for the
   session: on Kubernetes every Gateway has its own address), and rewrites parentRef ports to match;
3. starts an echo backend per Service (HTTP, HTTPS, h2c, gRPC or TCP, as the upstream backend is)
   and writes an EndpointSlice pointing at it;
4. applies everything and waits until Envoy ACKed it, then checks the expected status conditions
   and sends the expected requests through Envoy.

Since the harness waits for the ACK, requests are sent once rather than retried until three
consecutive successes as the upstream suite does; status is polled briefly because Programmed is
written after the ACK.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import ssl
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import grpc
import httpx
import pytest
import pytest_asyncio
import yaml

from tests.e2e.certs import CA, Issued, tls_secret_yaml
from tests.e2e.harness import Harness, free_port
from tests.e2e.upstream_servers import start_h2_echo
from turnout.echo import EchoServer, start_echo

pytestmark = pytest.mark.asyncio(loop_scope="session")

CASES_DIR = Path(__file__).resolve().parents[1] / "conformance"
BASE_FILE = CASES_DIR / "base" / "manifests.yaml"
CASES = sorted(p.parent.name for p in CASES_DIR.glob("*/cases.yaml"))

GATEWAY_GROUP = "gateway.networking.k8s.io"
CONTROLLER_NAME = "turnout.dev/gateway-controller"
CLASS_NAME = "turnout"
INFRA = "gateway-conformance-infra"
CLUSTER_SCOPED = frozenset({"GatewayClass"})

# The Secrets the upstream suite creates programmatically (suite.go Setup), with their SANs.
KNOWN_CERTIFICATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("gateway-conformance-web-backend", "certificate"): ("*",),
    (INFRA, "tls-validity-checks-certificate"): ("*", "*.org", "*.wildcard.org"),
    (INFRA, "tls-checks-certificate"): ("abc.example.com", "other.example.com"),
    (INFRA, "tls-passthrough-checks-certificate"): ("abc.example.com",),
    ("gateway-conformance-app-backend", "tls-passthrough-checks-certificate"): ("abc.example.com",),
    (INFRA, "tls-terminate-checks-certificate"): ("tls.example.com",),
}
# What TLS passthrough backends (tls-backend*, l4-backend) present: every name the TLSRoute cases
# send as SNI, so a client can tell a passthrough (backend's certificate) from a termination.
PASSTHROUGH_BACKEND_HOSTS = ("abc.example.com", "other.example.com", "tls.example.com")
# The URI SAN of the HTTPS backends' certificate besides those names, as upstream's tls-backend
# serves it (BackendTLSPolicySANValidation).
BACKEND_URIS = ("spiffe://abc.example.com/test-identity",)

GRPC_SERVICE = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"


# -- backends ------------------------------------------------------------------------------------


class _TcpEcho:
    """As the upstream echo in TCP mode: every connection is answered with one JSON line naming
    the backend, then whatever the client sends is echoed back. With `ssl` it serves over TLS
    (echo-basic with TLS_SERVER_CERT and TCP_ECHO_SERVER) and names the server name it was
    asked for in the line (`tls.serverName`)."""

    def __init__(self, namespace: str, name: str, ssl_context: ssl.SSLContext | None = None):
        self.namespace, self.name = namespace, name
        self.server: asyncio.Server | None = None
        self.ssl = ssl_context
        # id(SSLObject) -> the SNI of its handshake (the callback sees no connection object)
        self._sni: dict[int, str | None] = {}
        if ssl_context is not None:
            ssl_context.sni_callback = self._remember_sni

    def _remember_sni(self, conn: Any, server_name: str | None, _ctx: Any) -> None:
        self._sni[id(conn)] = server_name

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello: dict[str, Any] = {"namespace": self.namespace, "service": self.name}
            tls = writer.get_extra_info("ssl_object")
            if tls is not None:
                hello["tls"] = {"serverName": self._sni.pop(id(tls), None)}
            writer.write(json.dumps(hello).encode() + b"\n")
            await writer.drain()
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def _grpc_echo_handler(namespace: str, name: str) -> grpc.GenericRpcHandler:
    """The echo-basic gRPC service, with JSON instead of protobuf messages (the proxy never reads
    the message): `Echo` and `EchoTwo` answer the method, the request metadata, the authority and
    the backend; `EchoThree` is unimplemented, as upstream."""

    def echo(method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def answer(_request: bytes, context: grpc.ServicerContext) -> bytes:
            # Repeated keys joined with "," as an HTTP/2 server reads repeated headers.
            metadata: dict[str, str] = {}
            for k, v in context.invocation_metadata():
                if isinstance(v, str):
                    metadata[k] = f"{metadata[k]},{v}" if k in metadata else v
            body = {
                "fully_qualified_method": f"/{GRPC_SERVICE}/{method}",
                "headers": metadata,
                "authority": metadata.get(":authority", ""),
                "namespace": namespace,
                "service": name,
            }
            return json.dumps(body).encode()

        return answer

    def identity(b: bytes) -> bytes:
        return b

    handlers = {
        m: grpc.unary_unary_rpc_method_handler(
            echo(m), request_deserializer=identity, response_serializer=identity
        )
        for m in ("Echo", "EchoTwo")
    }
    return grpc.method_handlers_generic_handler(GRPC_SERVICE, handlers)


@dataclass
class Backends:
    """Echo backends for the whole session, one per (namespace, Service, protocol)."""

    ca: CA
    http: dict[tuple[str, str], EchoServer] = field(default_factory=dict)
    ports: dict[tuple[str, str, str], int] = field(default_factory=dict)
    _closers: list[Callable[[], Any]] = field(default_factory=list)

    async def port(self, namespace: str, name: str, protocol: str) -> int:
        key = (namespace, name, protocol)
        if key in self.ports:
            return self.ports[key]
        if protocol == "http":
            server = await start_echo("127.0.0.1", 0, name=name, namespace=namespace)
            self.http[(namespace, name)] = server
            self._closers.append(server.close)
            port = server.port
        elif protocol == "https":
            issued = self.ca.issue(*PASSTHROUGH_BACKEND_HOSTS, uris=BACKEND_URIS)
            with _pem_files(issued) as (cert_path, key_path):
                ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                ctx.load_cert_chain(cert_path, key_path)
            server = await start_echo(
                "127.0.0.1", 0, name=name, namespace=namespace, ssl_context=ctx
            )
            self._closers.append(server.close)
            port = server.port
        elif protocol == "h2c":
            backend = await start_h2_echo(name)
            self._closers.append(backend.close)
            port = backend.port
        elif protocol in ("grpc", "grpcs"):
            server = grpc.aio.server()
            server.add_generic_rpc_handlers((_grpc_echo_handler(namespace, name),))
            if protocol == "grpcs":
                issued = self.ca.issue(*PASSTHROUGH_BACKEND_HOSTS)
                credentials = grpc.ssl_server_credentials(
                    [(issued.key_pem.encode(), issued.cert_pem.encode())]
                )
                port = server.add_secure_port("127.0.0.1:0", credentials)
            else:
                port = server.add_insecure_port("127.0.0.1:0")
            await server.start()

            async def stop(s: Any = server) -> None:
                await s.stop(None)

            self._closers.append(stop)
        elif protocol in ("tcp", "tcps"):
            tcp_ssl = None
            if protocol == "tcps":
                issued = self.ca.issue(*PASSTHROUGH_BACKEND_HOSTS)
                with _pem_files(issued) as (cert_path, key_path):
                    tcp_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                    tcp_ssl.load_cert_chain(cert_path, key_path)
            tcp = _TcpEcho(namespace, name, tcp_ssl)
            port = await tcp.start()
            self._closers.append(tcp.close)
        else:
            raise AssertionError(f"unknown backend protocol {protocol}")
        self.ports[key] = port
        return port

    async def close(self) -> None:
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                await close()


@contextlib.contextmanager
def _pem_files(issued: Issued) -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="turnout-conformance-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_text(issued.cert_pem)
        key.write_text(issued.key_pem)
        yield str(cert), str(key)


def backend_protocol(service: Mapping[str, Any], port: Mapping[str, Any]) -> str:
    """The kind of echo a Service port stands for, as the upstream base manifests deploy it."""
    name = str(service["metadata"]["name"])
    if name.startswith("grpc-"):
        return "grpc"
    if name.startswith("backendtlspolicy-grpc"):
        return "grpcs"
    if name.startswith("l4-backend"):
        # echo-basic's L4 mode: plain TCP on 3000, TLS (answering HTTPS) on 8443.
        return "https" if port.get("port") == 8443 else "tcp"
    if name.startswith(("tls-backend", "backendtlspolicy")) or port.get("appProtocol") == "HTTPS":
        return "https"
    if name.startswith("tcp-"):
        return "tcp"
    if name.startswith("btls-terminate-tcp"):
        # echo-basic in TCP mode with a TLS certificate (BackendTLSPolicyTLSRouteTerminate)
        return "tcps"
    if port.get("appProtocol") == "kubernetes.io/h2c":
        return "h2c"
    return "http"


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA("turnout conformance CA")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def backends(ca: CA) -> AsyncIterator[Backends]:
    b = Backends(ca)
    try:
        yield b
    finally:
        await b.close()


@dataclass
class Session:
    """State that outlives one case: listener ports per Gateway and certificates per Secret."""

    ports: dict[tuple[str, str, int], int] = field(default_factory=dict)
    certificates: dict[tuple[str, str], Issued] = field(default_factory=dict)
    # A CA that signed no backend's certificate.
    other_ca_pem: str = field(default_factory=lambda: CA("turnout conformance other CA").cert_pem)

    def listener_port(self, namespace: str, gateway: str, port: int) -> int:
        key = (namespace, gateway, port)
        if key not in self.ports:
            self.ports[key] = free_port()
        return self.ports[key]

    def original_port(self, namespace: str, gateway: str, actual: int) -> int | None:
        for (ns, gw, port), mapped in self.ports.items():
            if (ns, gw, mapped) == (namespace, gateway, actual):
                return port
        return None


@pytest.fixture(scope="module")
def session() -> Session:
    return Session()


# -- manifests -----------------------------------------------------------------------------------


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def key_of(doc: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = doc.get("metadata", {})
    return (str(doc.get("kind")), str(meta.get("namespace", "")), str(meta.get("name")))


def base_objects(wanted_gateways: Sequence[str]) -> list[dict[str, Any]]:
    """Namespaces, GatewayClass and Services always; base Gateways only when the case uses them."""
    out = []
    for doc in load_yaml(BASE_FILE):
        kind, _, name = key_of(doc)
        if kind == "Gateway" and name not in wanted_gateways:
            continue
        out.append(doc)
    return out


def merge_objects(*groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Later groups replace earlier objects with the same kind/namespace/name."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for group in groups:
        for doc in group:
            merged[key_of(doc)] = doc
    return list(merged.values())


def rewrite_ports(docs: list[dict[str, Any]], session: Session) -> None:
    """Gateway listener ports → this session's free ports; parentRef ports follow."""
    for doc in docs:
        kind, ns, name = key_of(doc)
        spec = doc.get("spec") or {}
        if kind == "Gateway":
            if spec.get("gatewayClassName") == "{GATEWAY_CLASS_NAME}":
                spec["gatewayClassName"] = CLASS_NAME
            for listener in spec.get("listeners") or []:
                if isinstance(listener.get("port"), int):
                    listener["port"] = session.listener_port(ns, name, listener["port"])
        elif kind.endswith("Route"):
            for ref in spec.get("parentRefs") or []:
                if ref.get("kind", "Gateway") == "Gateway" and isinstance(ref.get("port"), int):
                    gw_ns = ref.get("namespace", ns)
                    ref["port"] = session.listener_port(gw_ns, ref["name"], ref["port"])


ECHO_PLACEHOLDER = re.compile(r"^\{ECHO:([^/{}]+)/([^/{}]+)\}$")


async def fill_echo_ports(docs: Sequence[dict[str, Any]], backends: Backends) -> None:
    """Endpoints and EndpointSlices written in a case (as the upstream tests patch them with pod
    IPs) name their port as `"{ECHO:namespace/service}"`: the HTTP echo of that Service."""

    async def fill(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: await fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [await fill(v) for v in value]
        if isinstance(value, str) and (m := ECHO_PLACEHOLDER.match(value)):
            return await backends.port(m.group(1), m.group(2), "http")
        return value

    for doc in docs:
        if doc.get("kind") in ("Endpoints", "EndpointSlice"):
            doc.update(await fill(doc))


async def endpoint_slices(
    docs: Sequence[dict[str, Any]], backends: Backends
) -> list[dict[str, Any]]:
    """An EndpointSlice per Service (without one of its own) pointing at its echo backends."""
    have = {
        (key_of(d)[1], d.get("metadata", {}).get("labels", {}).get("kubernetes.io/service-name"))
        for d in docs
        if d.get("kind") == "EndpointSlice"
    } | {key_of(d)[1:] for d in docs if d.get("kind") == "Endpoints"}
    out = []
    for doc in docs:
        kind, ns, name = key_of(doc)
        if kind != "Service" or (ns, name) in have:
            continue
        spec = doc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            continue
        ports = []
        for port in spec.get("ports") or []:
            protocol = backend_protocol(doc, port)
            entry: dict[str, Any] = {"port": await backends.port(ns, name, protocol)}
            if port.get("name"):
                entry["name"] = port["name"]
            ports.append(entry)
        out.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{name}-conformance",
                    "namespace": ns,
                    "labels": {"kubernetes.io/service-name": name},
                },
                "addressType": "IPv4",
                "ports": ports,
                "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
            }
        )
    return out


def ca_config_maps(case: Mapping[str, Any], ca: CA, session: Session) -> list[dict[str, Any]]:
    """ConfigMaps with `ca.crt` = the test CA, which signs every backend's certificate, or (for
    `mismatchCaConfigMaps`) another CA that signed none (upstream: the CA ConfigMaps the suite
    creates for BackendTLSPolicy tests, `mismatch-ca-certificate` among them)."""
    out = []
    for key, pem in (("caConfigMaps", ca.cert_pem), ("mismatchCaConfigMaps", session.other_ca_pem)):
        for ref in case.get(key) or []:
            ns, name = ref.split("/")
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns},
                    "data": {"ca.crt": pem},
                }
            )
    return out


def certificate_secrets(case: Mapping[str, Any], ca: CA, session: Session) -> list[dict[str, Any]]:
    out = []
    for ref in case.get("certificates") or []:
        ns, name = ref.split("/")
        key = (ns, name)
        if key not in session.certificates:
            session.certificates[key] = ca.issue(*KNOWN_CERTIFICATES[key])
        issued = session.certificates[key]
        out.append(yaml.safe_load(tls_secret_yaml(ns, name, issued.cert_pem, issued.key_pem)))
    return out


# -- status checks -------------------------------------------------------------------------------


def status_body(harness: Harness, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
    for s in harness.controller.statuses():
        # A cluster-scoped object (GatewayClass) may carry whatever namespace its file gave it.
        ns = "" if kind in CLUSTER_SCOPED else (s.ref.namespace or "")
        if (s.ref.kind, ns, s.ref.name) == (kind, namespace, name):
            body = s.body
            inner = body.get("status")
            return inner if isinstance(inner, Mapping) else body
    return None


def generation_of(docs: Sequence[Mapping[str, Any]], kind: str, namespace: str, name: str) -> int:
    for doc in docs:
        if key_of(doc) == (kind, namespace, name):
            gen = doc.get("metadata", {}).get("generation")
            return gen if isinstance(gen, int) else 1
    return 1


def check_conditions(
    where: str, actual: Any, expected: Sequence[Mapping[str, Any]], generation: int
) -> list[str]:
    """Upstream findConditionInList + ConditionsHaveLatestObservedGeneration."""
    errors = []
    conds = actual if isinstance(actual, list) else []
    by_type = {c.get("type"): c for c in conds if isinstance(c, Mapping)}
    for want in expected:
        got = by_type.get(want["type"])
        if want.get("absent"):
            # GatewayListenerMustNotHaveCondition
            if got is not None:
                errors.append(f"{where}: unexpected {want['type']} condition {dict(got)!r}")
            continue
        if got is None:
            errors.append(f"{where}: no {want['type']} condition in {_short(conds)}")
            continue
        for field_name in ("status", "reason"):
            if field_name in want and str(got.get(field_name)) != str(want[field_name]):
                errors.append(
                    f"{where}: {want['type']} {field_name} {got.get(field_name)!r}, "
                    f"want {want[field_name]!r} (message: {got.get('message')!r})"
                )
    for c in conds:
        if isinstance(c, Mapping) and c.get("observedGeneration") != generation:
            errors.append(
                f"{where}: {c.get('type')} observedGeneration {c.get('observedGeneration')!r}, "
                f"want {generation}"
            )
    return errors


def _short(conds: Any) -> str:
    if not isinstance(conds, list):
        return repr(conds)
    return ", ".join(
        f"{c.get('type')}={c.get('status')}/{c.get('reason')}"
        for c in conds
        if isinstance(c, Mapping)
    )


def _split(ref: str) -> tuple[str, str]:
    ns, _, name = ref.rpartition("/")
    return ns, name


def check_gateway_ready(
    harness: Harness, docs: Sequence[Mapping[str, Any]], gateway: str
) -> list[str]:
    """GatewayAndHTTPRoutesMustBeAccepted's Gateway half: conditions current, a typed address,
    every listener Accepted, Programmed and ResolvedRefs."""
    ns, name = _split(gateway)
    body = status_body(harness, "Gateway", ns, name)
    if body is None:
        return [f"Gateway {gateway}: no status"]
    gen = generation_of(docs, "Gateway", ns, name)
    errors = check_conditions(
        f"Gateway {gateway}",
        body.get("conditions"),
        [{"type": "Accepted", "status": "True"}, {"type": "Programmed", "status": "True"}],
        gen,
    )
    addresses = body.get("addresses") or []
    if not any(isinstance(a, Mapping) and a.get("type") for a in addresses):
        errors.append(f"Gateway {gateway}: no status.addresses entry with a type: {addresses!r}")
    for listener in body.get("listeners") or []:
        errors += check_conditions(
            f"Gateway {gateway} listener {listener.get('name')}",
            listener.get("conditions"),
            [{"type": t, "status": "True"} for t in ("Accepted", "Programmed", "ResolvedRefs")],
            gen,
        )
    return errors


def find_parent(
    body: Mapping[str, Any],
    route_ns: str,
    gateway: str,
    field: str = "parents",
    *,
    namespace_required: bool = False,
) -> tuple[Mapping[str, Any] | None, list[str]]:
    """This controller's entry for `gateway` in a route's status.parents (or a policy's
    status.ancestors), and what is wrong with how its reference is written (group and kind must
    be written out). `namespace_required`: upstream's parentRefsMatch with namespaceRequired
    (GatewayAndRoutesMustBeAccepted for a route in another namespace than its Gateway): an entry
    whose reference has no namespace does not match."""
    gw_ns, gw_name = _split(gateway)
    ref_field = "ancestorRef" if field == "ancestors" else "parentRef"
    for parent in body.get(field) or []:
        if not isinstance(parent, Mapping):
            continue
        ref = parent.get(ref_field) or {}
        if namespace_required and "namespace" not in ref:
            continue
        if ref.get("name") != gw_name or ref.get("namespace", route_ns) != gw_ns:
            continue
        if parent.get("controllerName") != CONTROLLER_NAME:
            continue
        problems = []
        if ref.get("group") != GATEWAY_GROUP or ref.get("kind") != "Gateway":
            problems.append(f"{ref_field} group/kind not written out: {dict(ref)!r}")
        return parent, problems
    return None, []


def check_route_parent(
    harness: Harness,
    docs: Sequence[Mapping[str, Any]],
    kind: str,
    route: str,
    gateway: str,
    conditions: Sequence[Mapping[str, Any]],
    field: str = "parents",
    *,
    namespace_required: bool = False,
) -> list[str]:
    ns, name = _split(route)
    body = status_body(harness, kind, ns, name)
    where = f"{kind} {route} {field[:-1]} {gateway}"
    if body is None:
        return [f"{kind} {route}: no status"]
    parent, problems = find_parent(body, ns, gateway, field, namespace_required=namespace_required)
    if parent is None:
        return [f"{where}: no {field} entry for this controller in {body.get(field)!r}"]
    return [f"{where}: {p}" for p in problems] + check_conditions(
        where, parent.get("conditions"), conditions, generation_of(docs, kind, ns, name)
    )


def check_status(
    harness: Harness, docs: Sequence[Mapping[str, Any]], step: Mapping[str, Any]
) -> list[str]:
    errors: list[str] = []
    for accepted in step.get("accepted") or []:
        kind = accepted.get("kind", "HTTPRoute")
        gateway = accepted["gateway"]
        errors += check_gateway_ready(harness, docs, gateway)
        for route in accepted.get("routes") or []:
            want = [{"type": "Accepted", "status": "True", "reason": "Accepted"}]
            if accepted.get("resolvedRefs", True):
                want.append({"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs"})
            cross_namespace = _split(route)[0] != _split(gateway)[0]
            errors += check_route_parent(
                harness, docs, kind, route, gateway, want, namespace_required=cross_namespace
            )
    for want in step.get("status") or []:
        kind = want["kind"]
        ns, name = want.get("namespace", ""), want["name"]
        body = status_body(harness, kind, ns, name)
        label = f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
        if body is None:
            errors.append(f"{label}: no status")
            continue
        gen = generation_of(docs, kind, ns, name)
        if "conditions" in want:
            errors += check_conditions(label, body.get("conditions"), want["conditions"], gen)
        if want.get("latestConditions") and not body.get("conditions"):
            # GatewayMustHaveLatestConditions: conditions written, all for this generation.
            errors.append(f"{label}: no conditions")
        elif want.get("latestConditions"):
            errors += check_conditions(label, body.get("conditions"), [], gen)
        if want.get("addresses"):
            addresses = body.get("addresses") or []
            if not any(isinstance(a, Mapping) and a.get("type") for a in addresses):
                errors.append(f"{label}: no typed status.addresses entry: {addresses!r}")
        if "listeners" in want:
            errors += _check_listeners(label, body.get("listeners"), want["listeners"], gen)
        for parent_want in want.get("parents") or []:
            errors += check_route_parent(
                harness,
                docs,
                kind,
                f"{ns}/{name}",
                parent_want["gateway"],
                parent_want.get("conditions") or [],
            )
        for ancestor in want.get("ancestors") or []:
            errors += check_route_parent(
                harness,
                docs,
                kind,
                f"{ns}/{name}",
                ancestor["gateway"],
                ancestor.get("conditions") or [],
                "ancestors",
            )
        if want.get("noAcceptedParents"):
            errors += _check_no_accepted_parents(label, body)
        for gateway in want.get("noParentFor") or []:
            parent, _ = find_parent(body, ns, gateway)
            if parent is not None:
                errors.append(f"{label}: unexpected parent status for {gateway}: {parent!r}")
    return errors


def _check_listeners(
    label: str, actual: Any, expected: Sequence[Mapping[str, Any]], gen: int
) -> list[str]:
    """GatewayStatusMustHaveListeners: same count; per listener supportedKinds ⊆ actual (an
    empty expected list wants an empty actual list), attachedRoutes, conditions."""
    listeners = actual if isinstance(actual, list) else []
    errors = []
    if len(listeners) != len(expected):
        errors.append(f"{label}: {len(listeners)} listener statuses, want {len(expected)}")
    by_name = {item.get("name"): item for item in listeners if isinstance(item, Mapping)}
    for want in expected:
        got = by_name.get(want["name"])
        where = f"{label} listener {want['name']}"
        if got is None:
            errors.append(f"{where}: missing")
            continue
        if "attachedRoutes" in want and got.get("attachedRoutes") != want["attachedRoutes"]:
            errors.append(
                f"{where}: attachedRoutes {got.get('attachedRoutes')!r}, "
                f"want {want['attachedRoutes']}"
            )
        if "supportedKinds" in want:
            kinds = {
                (k.get("group", GATEWAY_GROUP) or GATEWAY_GROUP, k.get("kind"))
                for k in got.get("supportedKinds") or []
                if isinstance(k, Mapping)
            }
            wanted = {(GATEWAY_GROUP, k) for k in want["supportedKinds"]}
            if not wanted <= kinds or (not wanted and kinds):
                errors.append(f"{where}: supportedKinds {sorted(kinds)}, want {sorted(wanted)}")
        if "conditions" in want:
            errors += check_conditions(where, got.get("conditions"), want["conditions"], gen)
    return errors


def _check_no_accepted_parents(label: str, body: Mapping[str, Any]) -> list[str]:
    """HTTPRouteMustHaveNoAcceptedParents: no parents, or one parent with Accepted False."""
    parents = [p for p in body.get("parents") or [] if isinstance(p, Mapping)]
    if not parents:
        return []
    if len(parents) == 1:
        for c in parents[0].get("conditions") or []:
            if c.get("type") == "Accepted" and c.get("status") == "False":
                return []
    return [f"{label}: want no accepted parents, got {parents!r}"]


async def wait_status(
    harness: Harness, docs: Sequence[Mapping[str, Any]], step: Mapping[str, Any]
) -> list[str]:
    # Programmed is written once Envoy ACKed, a moment after `apply` returns.
    errors = check_status(harness, docs, step)
    for _ in range(30):
        if not errors:
            break
        await asyncio.sleep(0.1)
        errors = check_status(harness, docs, step)
    return errors


# -- requests ------------------------------------------------------------------------------------


@dataclass
class Target:
    namespace: str
    gateway: str
    original_port: int
    port: int


def target_of(req: Mapping[str, Any], case: Mapping[str, Any], session: Session) -> Target:
    gateway = req.get("gateway") or case.get("gateway")
    assert gateway, "a request needs a gateway (in the request or the case)"
    ns, name = _split(gateway)
    default_port = 443 if req.get("scheme") == "https" or "tls" in req else 80
    original = int(req.get("port", case.get("port", default_port)))
    return Target(ns, name, original, session.listener_port(ns, name, original))


def client_context(ca: CA) -> ssl.SSLContext:
    # The conformance certificates carry SANs like "*" that hostname checking refuses; the chain
    # is still verified against the test CA.
    ctx = ssl.create_default_context(cadata=ca.cert_pem)
    ctx.check_hostname = False
    return ctx


async def http_request(
    target: Target, req: Mapping[str, Any], ca: CA, retry_connect: bool = True
) -> httpx.Response:
    scheme = req.get("scheme", "http")
    path = req.get("path", "/")
    headers = dict(req.get("headers") or {})
    if req.get("host"):
        headers["Host"] = req["host"]
    set_headers = req.get("backendSetResponseHeaders") or {}
    headers["X-Echo-Set-Header"] = ",".join(f"{k}:{v}" for k, v in set_headers.items())
    extensions: dict[str, Any] = {}
    verify: ssl.SSLContext | bool = False
    if scheme == "https":
        verify = client_context(ca)
        extensions["sni_hostname"] = req.get("sni") or str(req.get("host", "")).split(":")[0]
    url = f"{scheme}://127.0.0.1:{target.port}{path}"
    # h2c: HTTP/2 with prior knowledge, as upstream's H2CPriorKnowledgeProtocol.
    h2c = req.get("protocol") == "h2c"
    async with httpx.AsyncClient(verify=verify, timeout=10.0, http1=not h2c, http2=h2c) as client:
        # A listener Envoy just received may still be binding: retry connect errors only.
        attempts = 50 if retry_connect else 1
        for attempt in range(attempts):
            try:
                return await client.request(
                    req.get("method", "GET"), url, headers=headers, extensions=extensions
                )
            except httpx.ConnectError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


def _norm_header(value: str) -> str:
    # Upstream joins repeated headers with ","; the echo joins them with ", ".
    return ",".join(part.strip() for part in value.split(","))


def check_http(
    label: str,
    req: Mapping[str, Any],
    expect: Mapping[str, Any],
    response: httpx.Response,
    target: Target,
    session: Session,
) -> list[str]:
    """Upstream CompareRoundTrip."""
    want_status = expect.get("status", 200)
    statuses = want_status if isinstance(want_status, list) else [want_status]
    got = response.status_code
    if got in (408, 504) and any(s in (408, 504) for s in statuses):
        return []
    if got not in statuses:
        return [f"{label}: status {got}, want {want_status} (body {response.text[:200]!r})"]
    errors: list[str] = []
    if "protocol" in expect and response.http_version != expect["protocol"]:
        errors.append(f"{label}: answered over {response.http_version}, want {expect['protocol']}")
    if got in (200, 204):
        errors += _check_backend(label, req, expect, response)
    if got in (300, 301, 302, 303, 304, 305, 307, 308) and "redirect" in expect:
        errors += _check_redirect(label, req, expect["redirect"], response, target, session)
    for name, value in (expect.get("headers") or {}).items():
        actual = response.headers.get_list(name)
        if not actual:
            errors.append(f"{label}: response header {name} missing, want {value!r}")
        elif _norm_header(",".join(actual)) != _norm_header(str(value)):
            errors.append(f"{label}: response header {name}={actual!r}, want {value!r}")
    for name, values in (expect.get("validHeaders") or {}).items():
        # Upstream ValidHeaderValues with IgnoreWhitespace: any of the listed values.
        joined = ",".join(response.headers.get_list(name))
        if "".join(joined.split()) not in {"".join(str(v).split()) for v in values}:
            errors.append(f"{label}: response header {name}={joined!r}, want one of {values!r}")
    for name in expect.get("absentHeaders") or []:
        if name in response.headers:
            errors.append(f"{label}: response header {name} present: {response.headers[name]!r}")
    return errors


def _check_backend(
    label: str, req: Mapping[str, Any], expect: Mapping[str, Any], response: httpx.Response
) -> list[str]:
    errors = []
    if "application/json" not in response.headers.get("content-type", ""):
        if expect.get("backend"):
            errors.append(f"{label}: not an echo answer: {response.text[:200]!r}")
        return errors
    body = response.json()
    if expect.get("backend") and body.get("service") != expect["backend"]:
        errors.append(f"{label}: served by {body.get('service')!r}, want {expect['backend']!r}")
    if expect.get("backendHeader"):
        # The request header a per-backend filter set names the backend that must have served it.
        named = {k.lower(): v for k, v in (body.get("headers") or {}).items()}.get(
            str(expect["backendHeader"]).lower()
        )
        if named != body.get("service"):
            errors.append(
                f"{label}: served by {body.get('service')!r} but its "
                f"{expect['backendHeader']} header says {named!r}"
            )
    if expect.get("namespace") and body.get("namespace") != expect["namespace"]:
        errors.append(
            f"{label}: backend namespace {body.get('namespace')!r}, want {expect['namespace']!r}"
        )
    seen = expect.get("request") or {}
    want_path = seen.get("path", req.get("path", "/"))
    if body.get("path") != want_path:
        errors.append(f"{label}: backend saw path {body.get('path')!r}, want {want_path!r}")
    want_host = seen.get("host", req.get("host"))
    if want_host and body.get("host") != want_host:
        errors.append(f"{label}: backend saw host {body.get('host')!r}, want {want_host!r}")
    if "sni" in seen:
        # The server name the gateway sent to a TLS backend (upstream ExpectedRequest SNI).
        got_sni = (body.get("tls") or {}).get("serverName")
        if got_sni != seen["sni"]:
            errors.append(f"{label}: backend was asked for {got_sni!r}, want {seen['sni']!r}")
    if "proto" in seen and body.get("proto") != seen["proto"]:
        errors.append(f"{label}: backend saw {body.get('proto')!r}, want {seen['proto']!r}")
    want_method = seen.get("method", req.get("method", "GET"))
    if body.get("method") and body.get("method") != want_method:
        errors.append(f"{label}: backend saw method {body.get('method')!r}, want {want_method!r}")
    headers = {k.lower(): v for k, v in (body.get("headers") or {}).items()}
    want_headers = seen["headers"] if "headers" in seen else (req.get("headers") or {})
    for name, value in want_headers.items():
        actual = headers.get(name.lower())
        if actual is None:
            errors.append(f"{label}: backend did not see header {name}, want {value!r}")
        elif _norm_header(str(actual)) != _norm_header(str(value)):
            errors.append(f"{label}: backend saw {name}={actual!r}, want {value!r}")
    for name in seen.get("absentHeaders") or []:
        if name.lower() in headers:
            errors.append(f"{label}: backend saw header {name}={headers[name.lower()]!r}")
    return errors


def _check_redirect(
    label: str,
    req: Mapping[str, Any],
    want: Mapping[str, Any],
    response: httpx.Response,
    target: Target,
    session: Session,
) -> list[str]:
    location = response.headers.get("location")
    if not location:
        return [f"{label}: redirect without Location"]
    parts = urlsplit(location)
    errors = []
    scheme = want.get("scheme", req.get("scheme", "http"))
    if parts.scheme != scheme:
        errors.append(f"{label}: Location {location!r} scheme, want {scheme!r}")
    if want.get("host") and parts.hostname != want["host"]:
        errors.append(f"{label}: Location {location!r} host, want {want['host']!r}")
    path = want.get("path", req.get("path", "/").split("?")[0])
    if parts.path != path:
        errors.append(f"{label}: Location {location!r} path, want {path!r}")
    port: int | None = parts.port
    if port is not None:
        # A listener port the runner mapped reads as the port the manifest declared.
        port = session.original_port(target.namespace, target.gateway, port) or port
    if "port" in want:
        if port != int(want["port"]):
            errors.append(f"{label}: Location {location!r} port {port}, want {want['port']}")
    else:
        default = 443 if scheme == "https" else 80
        if port not in (None, default):
            errors.append(f"{label}: Location {location!r} port {port}, want none or {default}")
    return errors


async def check_request(
    req: Mapping[str, Any],
    case: Mapping[str, Any],
    harness: Harness,
    backends: Backends,
    session: Session,
    ca: CA,
) -> list[str]:
    target = target_of(req, case, session)
    expect = req.get("expect") or {}
    where = f"gateway {target.gateway}:{target.original_port}"
    if "grpc" in req:
        what = f"gRPC {req['grpc'].get('method')} authority {req.get('host', '')}"
    elif "tcp" in req:
        what = "TCP connection"
    elif "tls" in req:
        what = f"TLS (SNI {req['tls'].get('sni') or req.get('host')})"
    else:
        what = (
            f"{req.get('method', 'GET')} {req.get('scheme', 'http')}://{req.get('host', '')}"
            f"{req.get('path', '/')}"
        )
    label = f"{what} {req.get('headers') or ''} → {where}".replace("  ", " ")
    if ("grpc" in req or "tcp" in req) and "distribution" in expect:
        return await _check_distribution(label, target, req, expect["distribution"], ca)
    if "grpc" in req:
        return await _check_grpc(label, target, req, expect)
    if "tcp" in req:
        return await _check_tcp(label, target, expect, req["tcp"].get("sni"), ca)
    if "tls" in req:
        return await _check_passthrough(label, target, req, expect, ca)
    if "websocket" in req:
        return await _check_websocket(label, target, req)
    if "distribution" in expect:
        return await _check_distribution(label, target, req, expect["distribution"], ca)
    if "mirrorShares" in expect:
        return await _check_mirror_shares(label, target, req, expect["mirrorShares"], backends, ca)
    mirrors = [tuple(m.split("/")) for m in expect.get("mirroredTo") or []]
    before = {m: backends.http[m].requests() for m in mirrors if m in backends.http}
    if expect.get("connectionFailure"):
        try:
            response = await http_request(target, req, ca, retry_connect=False)
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            return []
        return [f"{label}: answered {response.status_code}, want the connection to fail"]
    response = await http_request(target, req, ca)
    errors = check_http(label, req, expect, response, target, session)
    for _ in range(int(req.get("repeat", 1)) - 1):
        if errors:
            break
        response = await http_request(target, req, ca)
        errors = check_http(label, req, expect, response, target, session)
    for mirror in mirrors:
        if mirror not in backends.http:
            errors.append(f"{label}: mirror backend {mirror} was never started")
            continue
        server = backends.http[mirror]
        for _ in range(50):
            if server.requests() > before[mirror]:
                break
            await asyncio.sleep(0.05)
        else:
            errors.append(f"{label}: no mirrored request reached {'/'.join(mirror)}")
    return errors


async def _check_distribution(
    label: str, target: Target, req: Mapping[str, Any], want: Mapping[str, Any], ca: CA
) -> list[str]:
    """Upstream weight.go: 500 requests, 10 at a time, each backend within ±5 points (the TCP
    test: ±3) of its expected share, a weight-0 backend receiving nothing; sampling noise is
    answered as upstream does, by trying again, up to 10 times (MaxTestRetries). A request to a
    weight-0 backend fails at once."""
    total = int(want.get("requests", 500))
    tolerance = float(want.get("tolerance", 0.05))
    expected: Mapping[str, float] = want["shares"]
    semaphore = asyncio.Semaphore(10)
    errors: list[str] = []
    for _attempt in range(int(want.get("attempts", 10))):
        counts: Counter[str] = Counter()

        async def one(counts: Counter[str] = counts) -> None:
            async with semaphore:
                if "grpc" in req:
                    counts[await _grpc_served_by(target, req)] += 1
                    return
                if "tcp" in req:
                    try:
                        hello = await _tcp_hello(target.port, req["tcp"].get("sni"), ca)
                        counts[str(hello.get("service"))] += 1
                    except (TimeoutError, OSError, ssl.SSLError, asyncio.IncompleteReadError):
                        counts["connection failed"] += 1
                    return
                r = await http_request(target, req, ca)
                if r.status_code == 200 and "json" in r.headers.get("content-type", ""):
                    counts[str(r.json().get("service"))] += 1
                else:
                    counts[str(r.status_code)] += 1

        await asyncio.gather(*(one() for _ in range(total)))
        errors = []
        for name in sorted(set(expected) | set(counts)):
            share = counts[name] / total
            exp = float(expected.get(name, 0.0))
            if exp == 0.0 and counts[name]:
                return [
                    f"{label}: {name} got {counts[name]} requests, want none "
                    f"(distribution {dict(counts)})"
                ]
            if abs(share - exp) > tolerance:
                errors.append(f"{label}: {name} got {share:.2%}, want {exp:.0%} ± {tolerance:.0%}")
        if not errors:
            return []
        errors.append(f"{label}: distribution {dict(counts)}")
    return errors


async def _check_mirror_shares(
    label: str,
    target: Target,
    req: Mapping[str, Any],
    want: Mapping[str, Any],
    backends: Backends,
    ca: CA,
) -> list[str]:
    """Upstream HTTPRouteRequestPercentageMirror: 500 requests, each mirror backend gets its
    percent of them within ±5 % (relative); the check is repeated (upstream: 5 attempts, here 10,
    as sampling noise alone fails one attempt in two) until one attempt passes."""
    total = int(want.get("requests", 500))
    shares = {tuple(k.split("/")): float(v) for k, v in want["percent"].items()}
    semaphore = asyncio.Semaphore(10)
    errors: list[str] = []
    for _attempt in range(int(want.get("attempts", 10))):
        before = {m: backends.http[m].requests() for m in shares}

        async def one() -> None:
            async with semaphore:
                await http_request(target, req, ca)

        await asyncio.gather(*(one() for _ in range(total)))
        # Mirrored requests are fire-and-forget: let the stragglers arrive.
        last: dict[tuple[str, ...], int] = {}
        for _ in range(50):
            now = {m: backends.http[m].requests() for m in shares}
            if now == last:
                break
            last = now
            await asyncio.sleep(0.1)
        errors = []
        for mirror, percent in shares.items():
            got = last[mirror] - before[mirror]
            expected = total * percent / 100.0
            if not expected * 0.95 <= got <= expected * 1.05:
                errors.append(
                    f"{label}: {'/'.join(mirror)} got {got} mirrored requests of {total}, "
                    f"want {expected:.0f} ± 5%"
                )
        if not errors:
            return []
    return errors


async def _check_websocket(label: str, target: Target, req: Mapping[str, Any]) -> list[str]:
    """Upstream HTTPRouteBackendProtocolWebSocket: a text and a binary frame come back as sent."""
    url = f"ws://127.0.0.1:{target.port}{req['websocket'].get('path', '/ws')}"
    headers = {"Host": req["host"]} if req.get("host") else {}
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, headers=headers, timeout=aiohttp.ClientWSTimeout(10.0)) as ws,
        ):
            await ws.send_str("Websocket Support!")
            text = await ws.receive(timeout=5.0)
            await ws.send_bytes(bytes([1, 2, 3, 4, 5, 6, 7]))
            binary = await ws.receive(timeout=5.0)
    except (aiohttp.ClientError, TimeoutError) as err:
        return [f"{label}: WebSocket failed: {err!r}"]
    errors = []
    if text.data != "Websocket Support!":
        errors.append(f"{label}: text frame came back as {text.data!r}")
    if binary.data != bytes([1, 2, 3, 4, 5, 6, 7]):
        errors.append(f"{label}: binary frame came back as {binary.data!r}")
    return errors


async def _grpc_call(target: Target, req: Mapping[str, Any]) -> tuple[str, bytes, str]:
    """(the full method, the answer, "OK" or the status code name)."""
    spec = req["grpc"]
    method = f"/{spec.get('service', GRPC_SERVICE)}/{spec['method']}"
    options = [("grpc.default_authority", req.get("host", "grpc.example.com"))]
    metadata = tuple((k.lower(), v) for k, v in (req.get("headers") or {}).items())
    async with grpc.aio.insecure_channel(f"127.0.0.1:{target.port}", options=options) as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            raw = await call(b"{}", metadata=metadata, timeout=10.0)
        except grpc.aio.AioRpcError as err:
            return method, str(err.details() or "").encode(), err.code().name
    return method, raw, "OK"


async def _grpc_served_by(target: Target, req: Mapping[str, Any]) -> str:
    _, raw, code = await _grpc_call(target, req)
    return str(json.loads(raw).get("service")) if code == "OK" else code


async def _check_grpc(
    label: str, target: Target, req: Mapping[str, Any], expect: Mapping[str, Any]
) -> list[str]:
    want_code = expect.get("code", "OK")
    method, raw, code = await _grpc_call(target, req)
    if code != "OK":
        # `failure`: any status but OK (upstream MakeRequestAndExpectEventuallyConsistentFailure).
        if code == want_code or want_code == "failure":
            return []
        return [f"{label}: gRPC {method} failed {code}: {raw.decode()!r}, want {want_code}"]
    if want_code != "OK":
        return [f"{label}: gRPC {method} succeeded, want {want_code}"]
    body = json.loads(raw)
    errors = []
    if expect.get("backend") and body.get("service") != expect["backend"]:
        errors.append(
            f"{label}: gRPC served by {body.get('service')!r}, want {expect['backend']!r}"
        )
    if expect.get("namespace") and body.get("namespace") != expect["namespace"]:
        errors.append(f"{label}: gRPC namespace {body.get('namespace')!r}")
    if body.get("fully_qualified_method") != method:
        errors.append(f"{label}: backend saw {body.get('fully_qualified_method')!r}, want {method}")
    seen = {k.lower(): v for k, v in (body.get("headers") or {}).items()}
    for name, value in ((expect.get("request") or {}).get("headers") or {}).items():
        if seen.get(name.lower()) != value:
            errors.append(f"{label}: backend saw {name}={seen.get(name.lower())!r}, want {value!r}")
    for name in (expect.get("request") or {}).get("absentHeaders") or []:
        if name.lower() in seen:
            errors.append(f"{label}: backend saw header {name}")
    return errors


async def _check_tcp(
    label: str, target: Target, expect: Mapping[str, Any], sni: str | None, ca: CA
) -> list[str]:
    """A TCP connection (over TLS the gateway terminates when `sni` is given) to a TCP echo."""
    samples = int(expect.get("samples", 1))
    errors: list[str] = []
    for _ in range(samples):
        try:
            hello = await _tcp_hello(target.port, sni, ca)
        except (TimeoutError, OSError, ssl.SSLError, asyncio.IncompleteReadError) as err:
            if expect.get("connectionFailure"):
                continue
            return [f"{label}: TCP connection failed: {err!r}"]
        if expect.get("connectionFailure"):
            return [f"{label}: TCP connection answered {hello!r}, want it refused/reset"]
        if (hello.get("namespace"), hello.get("service")) != (
            expect.get("namespace"),
            expect.get("backend"),
        ):
            errors.append(f"{label}: TCP served by {hello!r}, want {expect.get('backend')}")
            break
        want_sni = (expect.get("request") or {}).get("sni")
        if want_sni is not None:
            got = hello.get("tls")
            if got is None:
                errors.append(f"{label}: the backend was reached in plain text, want TLS")
                break
            if got.get("serverName") != want_sni:
                errors.append(
                    f"{label}: backend was asked for {got.get('serverName')!r}, want {want_sni!r}"
                )
                break
    return errors


async def _tcp_hello(port: int, sni: str | None, ca: CA) -> dict[str, Any]:
    tls: dict[str, Any] = (
        {"ssl": client_context(ca), "server_hostname": sni} if sni is not None else {}
    )
    for attempt in range(20):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, **tls), timeout=5.0
            )
            break
        except ConnectionRefusedError:
            if attempt == 19:
                raise
            await asyncio.sleep(0.1)
    try:
        line = await asyncio.wait_for(reader.readline(), timeout=5.0)
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        return dict(json.loads(line))
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def _check_passthrough(
    label: str, target: Target, req: Mapping[str, Any], expect: Mapping[str, Any], ca: CA
) -> list[str]:
    """An HTTPS request through a TLS passthrough listener: the backend terminates TLS."""
    sni = req["tls"].get("sni") or req.get("host")
    ctx = client_context(ca)
    url = f"https://127.0.0.1:{target.port}{req.get('path', '/')}"
    headers = {"Host": req.get("host", sni)}
    try:
        async with httpx.AsyncClient(verify=ctx, timeout=10.0) as client:
            r = await client.get(url, headers=headers, extensions={"sni_hostname": sni})
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as err:
        if expect.get("connectionFailure"):
            return []
        return [f"{label}: TLS connection with SNI {sni} failed: {err!r}"]
    if expect.get("connectionFailure"):
        return [f"{label}: SNI {sni} answered {r.status_code}, want the connection refused/reset"]
    if r.status_code != expect.get("status", 200):
        return [f"{label}: status {r.status_code}, want {expect.get('status', 200)}"]
    body = r.json()
    got = f"{body.get('namespace')}/{body.get('service')}"
    want = f"{expect.get('namespace')}/{expect.get('backend')}"
    if got != want:
        return [f"{label}: served by {got}, want {want}"]
    # Passed through untouched: the backend terminated the client's own handshake.
    got_sni = (body.get("tls") or {}).get("serverName")
    if got_sni != sni:
        return [f"{label}: backend saw server name {got_sni!r}, want {sni!r}"]
    return []


# -- the test ------------------------------------------------------------------------------------


def steps_of(case: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "steps" in case:
        return list(case["steps"])
    return [case]


@pytest.mark.parametrize("name", CASES)
async def test_conformance(
    name: str, harness: Harness, backends: Backends, session: Session, ca: CA
) -> None:
    case_dir = CASES_DIR / name
    case = yaml.safe_load((case_dir / "cases.yaml").read_text())
    failures: list[str] = []
    for index, step in enumerate(steps_of(case)):
        files = step.get("manifests", ["manifests.yaml"])
        manifests = [doc for f in files for doc in load_yaml(case_dir / f)]
        keys = [key_of(doc) for doc in manifests]
        assert len(keys) == len(set(keys)), f"{name}: an object is written twice in {files}"
        docs = copy.deepcopy(
            merge_objects(
                base_objects(case.get("base") or []),
                certificate_secrets(case, ca, session),
                ca_config_maps(case, ca, session),
                manifests,
            )
        )
        rewrite_ports(docs, session)
        await fill_echo_ports(docs, backends)
        docs += await endpoint_slices(docs, backends)
        await harness.apply({"conformance.yaml": yaml.safe_dump_all(docs, sort_keys=False)})
        prefix = f"step {index + 1}: " if "steps" in case else ""
        failures += [prefix + e for e in await wait_status(harness, docs, step)]
        for req in step.get("requests") or []:
            failures += [
                prefix + e for e in await check_request(req, case, harness, backends, session, ca)
            ]
    assert not failures, f"{name} ({case.get('upstream')}):\n  " + "\n  ".join(failures)

"""Upstream policies through a real Envoy, as the backends see them: TLS and HTTP/2 to the
upstream, upstream certificate validation, ExternalName Services, passive health checks
(failurePolicy) and slow start."""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.certs import CA
from tests.e2e.harness import Harness, backends
from tests.e2e.upstream_servers import Backend, start_h2_echo, start_tls_echo

pytestmark = pytest.mark.asyncio(loop_scope="session")

NS = "upstream"


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA("upstream test CA")


def service(
    name: str,
    ports: list[int],
    *,
    annotations: dict[str, str] | None = None,
    port: int = 443,
    port_name: str = "web",
) -> str:
    """A Service on `port` whose endpoints are 127.0.0.1 on each of `ports`."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
            "spec": {"ports": [{"name": port_name, "port": port}]},
        }
    ]
    for i, backend_port in enumerate(ports):
        docs.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": NS,
                    "labels": {"kubernetes.io/service-name": name},
                },
                "addressType": "IPv4",
                "ports": [{"name": port_name, "port": backend_port}],
                "endpoints": [{"addresses": ["127.0.0.1"]}],
            }
        )
    return yaml.safe_dump_all(docs, sort_keys=False)


def proxy(fqdn: str, services: str, route_extra: str = "", name: str | None = None) -> str:
    return textwrap.dedent(f"""\
        apiVersion: projectcontour.io/v1
        kind: HTTPProxy
        metadata: {{name: {name or fqdn.split(".")[0]}, namespace: {NS}}}
        spec:
          virtualhost: {{fqdn: {fqdn}}}
          routes:
            - services: {services}
        """) + textwrap.indent(route_extra, "      ")


def ca_secret(name: str, ca: CA) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "stringData": {"ca.crt": ca.cert_pem},
    }
    return yaml.safe_dump(doc, sort_keys=False)


@asynccontextmanager
async def running(*servers: Backend) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for server in servers:
            await server.close()


async def get(harness: Harness, host: str, path: str = "/") -> httpx.Response:
    return await harness.get(host, path)


def error_reasons(harness: Harness, name: str) -> list[tuple[str, str]]:
    body = harness.status_of("HTTPProxy", NS, name)
    return [(e["type"], e["reason"]) for e in body["conditions"][0].get("errors", [])]


# --- protocols -----------------------------------------------------------------------------------


async def test_tls_protocol_speaks_tls_with_the_services_name(harness: Harness, ca: CA) -> None:
    backend = await start_tls_echo("tls", ca.issue("tls.upstream.svc"))
    async with running(backend):
        await harness.apply(
            {
                "svc.yaml": service("tls", [backend.port]),
                "p.yaml": proxy("tls.example.com", "[{name: tls, port: 443, protocol: tls}]"),
            }
        )
        r = await get(harness, "tls.example.com", "/hello")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tls"] is True
        assert body["proto"] == "HTTP/1.1"
        assert body["path"] == "/hello"
        # Without validation the server name is the Service's DNS name.
        assert body["sni"] == "tls.upstream.svc"
        # Envoy offers http/1.1 by ALPN on its own for an HTTP/1.1 upstream.
        assert body["alpn"] == "http/1.1"


async def test_h2c_protocol_speaks_http2_in_clear_text(harness: Harness) -> None:
    backend = await start_h2_echo("h2c")
    async with running(backend):
        await harness.apply(
            {
                "svc.yaml": service("h2c", [backend.port], port=80),
                "p.yaml": proxy("h2c.example.com", "[{name: h2c, port: 80, protocol: h2c}]"),
            }
        )
        r = await get(harness, "h2c.example.com", "/x")
        assert r.status_code == 200, r.text
        assert r.json()["proto"] == "HTTP/2"
        assert r.json()["tls"] is False


async def test_h2_from_the_service_annotation_speaks_http2_over_tls(
    harness: Harness, ca: CA
) -> None:
    backend = await start_h2_echo("h2", ca.issue("h2.upstream.svc"))
    async with running(backend):
        await harness.apply(
            {
                "svc.yaml": service(
                    "h2",
                    [backend.port],
                    annotations={"projectcontour.io/upstream-protocol.h2": "web"},
                ),
                "p.yaml": proxy("h2.example.com", "[{name: h2, port: 443}]"),
            }
        )
        r = await get(harness, "h2.example.com")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["proto"], body["tls"], body["alpn"]) == ("HTTP/2", True, "h2")
        assert body["sni"] == "h2.upstream.svc"


async def test_seed001_protocol_names_are_aliases(harness: Harness, ca: CA) -> None:
    h2 = await start_h2_echo("https2", ca.issue("https2.upstream.svc"))
    h2c = await start_h2_echo("http2")
    async with running(h2, h2c):
        await harness.apply(
            {
                "svc.yaml": service("https2", [h2.port]) + "---\n" + service("http2", [h2c.port]),
                "a.yaml": proxy(
                    "https2.example.com", "[{name: https2, port: 443, protocol: https2}]"
                ),
                "b.yaml": proxy("http2.example.com", "[{name: http2, port: 443, protocol: http2}]"),
            }
        )
        a = (await get(harness, "https2.example.com")).json()
        b = (await get(harness, "http2.example.com")).json()
        assert (a["proto"], a["tls"]) == ("HTTP/2", True)
        assert (b["proto"], b["tls"]) == ("HTTP/2", False)


# --- upstream validation -------------------------------------------------------------------------


async def test_validation_accepts_the_right_certificate_and_refuses_others(
    harness: Harness, ca: CA
) -> None:
    good = await start_tls_echo("good", ca.issue("backend.example.com"))
    impostor = await start_tls_echo("impostor", CA("impostor CA").issue("backend.example.com"))
    async with running(good, impostor):
        validation = "validation: {caSecret: upstream-ca, subjectName: backend.example.com}"
        wrong_name = "validation: {caSecret: upstream-ca, subjectName: other.example.com}"
        await harness.apply(
            {
                "ca.yaml": ca_secret("upstream-ca", ca),
                "svc.yaml": service("good", [good.port])
                + "---\n"
                + service("impostor", [impostor.port]),
                "a.yaml": proxy(
                    "valid.example.com", f"[{{name: good, port: 443, protocol: tls, {validation}}}]"
                ),
                "b.yaml": proxy(
                    "wrong-name.example.com",
                    f"[{{name: good, port: 443, protocol: tls, {wrong_name}}}]",
                ),
                "c.yaml": proxy(
                    "impostor.example.com",
                    f"[{{name: impostor, port: 443, protocol: tls, {validation}}}]",
                ),
            }
        )
        r = await get(harness, "valid.example.com")
        assert r.status_code == 200, r.text
        # The subject name is also the server name Envoy asks for.
        assert r.json()["sni"] == "backend.example.com"
        before = good.requests
        assert (await get(harness, "wrong-name.example.com")).status_code == 503
        # The handshake failed: the request never reached the backend.
        assert good.requests == before
        assert (await get(harness, "impostor.example.com")).status_code == 503
        assert impostor.requests == 0
        for name in ("valid", "wrong-name", "impostor"):
            assert error_reasons(harness, name) == []


async def test_ingressroute_validation(harness: Harness, ca: CA) -> None:
    backend = await start_tls_echo("legacy", ca.issue("legacy.example.com"))
    async with running(backend):

        def ingressroute(name: str, subject: str) -> str:
            return textwrap.dedent(f"""\
                apiVersion: contour.heptio.com/v1beta1
                kind: IngressRoute
                metadata: {{name: {name}, namespace: {NS}}}
                spec:
                  virtualhost: {{fqdn: {name}.example.com}}
                  routes:
                    - match: /
                      services:
                        - name: legacy
                          port: 443
                          validation: {{caSecret: legacy-ca, subjectName: {subject}}}
                """)

        await harness.apply(
            {
                "ca.yaml": ca_secret("legacy-ca", ca),
                "svc.yaml": service(
                    "legacy",
                    [backend.port],
                    annotations={"contour.heptio.com/upstream-protocol.tls": "443"},
                ),
                "a.yaml": ingressroute("ir-valid", "legacy.example.com"),
                "b.yaml": ingressroute("ir-wrong", "other.example.com"),
            }
        )
        r = await get(harness, "ir-valid.example.com")
        assert r.status_code == 200, r.text
        assert (r.json()["tls"], r.json()["sni"]) == (True, "legacy.example.com")
        assert (await get(harness, "ir-wrong.example.com")).status_code == 503
        assert backend.requests == 1


async def test_missing_ca_secret_is_a_status_error(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": service("nowhere", [1]),
            "p.yaml": proxy(
                "noca.example.com",
                "[{name: nowhere, port: 443, protocol: tls, "
                "validation: {caSecret: missing, subjectName: backend.example.com}}]",
            ),
        }
    )
    assert error_reasons(harness, "noca") == [("ServiceError", "TLSUpstreamValidation")]
    # The proxy's routes are dropped, as in Contour: the host is not served.
    assert (await get(harness, "noca.example.com")).status_code == 404


# --- ExternalName Services -----------------------------------------------------------------------


def external_service(name: str, external: str, port: int) -> str:
    return textwrap.dedent(f"""\
        apiVersion: v1
        kind: Service
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          type: ExternalName
          externalName: {external}
          ports: [{{name: http, port: {port}}}]
        """)


async def test_external_name_service_only_with_the_flag(harness: Harness) -> None:
    async with backends(NS, "outside") as (echo,):
        files = {
            # An IP literal resolves to itself; "localhost" is refused, as in Contour.
            "svc.yaml": external_service("outside", "127.0.0.1", echo.port)
            + "---\n"
            + external_service("loop", "localhost", echo.port),
            "a.yaml": proxy("external.example.com", f"[{{name: outside, port: {echo.port}}}]"),
            "b.yaml": proxy("loop.example.com", f"[{{name: loop, port: {echo.port}}}]"),
        }
        await harness.apply(files)
        assert (await get(harness, "external.example.com")).status_code == 503
        assert error_reasons(harness, "external") == [
            ("ServiceError", "ServiceUnresolvedReference")
        ]

        await harness.apply(files, options={"enable_external_name_service": True})
        r = await get(harness, "external.example.com", "/via-dns")
        assert r.status_code == 200, r.text
        assert (r.json()["service"], r.json()["path"]) == ("outside", "/via-dns")
        assert error_reasons(harness, "external") == []
        assert (await get(harness, "loop.example.com")).status_code == 503
        message = harness.status_of("HTTPProxy", NS, "loop")["conditions"][0]["errors"][0][
            "message"
        ]
        assert "points to localhost, this is not allowed" in message


# --- failurePolicy: passive health checks --------------------------------------------------------


async def test_failure_policy_ejects_an_endpoint_that_keeps_failing(harness: Harness) -> None:
    async with backends(NS, "good", "bad") as (good, bad):
        bad.answer("/", 500)
        files = {
            "svc.yaml": service("flaky", [good.port, bad.port], port=80),
            "on.yaml": proxy(
                "ejects.example.com",
                "[{name: flaky, port: 80}]",
                "failurePolicy: {retryPolicyEnabled: false}\n",
            ),
            "off.yaml": proxy(
                "keeps.example.com",
                "[{name: flaky, port: 80}]",
                "failurePolicy: {retryPolicyEnabled: false, passiveHealthCheckEnabled: false}\n",
            ),
        }
        await harness.apply(files)
        seen: Counter[int] = Counter()
        async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
            for _ in range(30):
                r = await client.get("/", headers={"Host": "ejects.example.com"})
                seen[r.status_code] += 1
            # Five consecutive 5xx from the bad endpoint eject it (Envoy's default count).
            assert 1 <= seen[500] <= 5, seen
            after = Counter(
                [
                    (await client.get("/", headers={"Host": "ejects.example.com"})).status_code
                    for _ in range(20)
                ]
            )
            assert after == Counter({200: 20})
            # Without the passive health check the bad endpoint keeps its share.
            control = Counter(
                [
                    (await client.get("/", headers={"Host": "keeps.example.com"})).status_code
                    for _ in range(20)
                ]
            )
            assert control[500] >= 5, control


async def test_failure_policy_retries_hide_the_failing_endpoint(harness: Harness) -> None:
    async with backends(NS, "good", "bad") as (good, bad):
        bad.answer("/", 500)
        await harness.apply(
            {
                "svc.yaml": service("flaky", [good.port, bad.port], port=80),
                # Seed 001's example: both halves on by default.
                "p.yaml": proxy(
                    "retries.example.com",
                    "[{name: flaky, port: 80}]",
                    "failurePolicy: {count: 3, perTryTimeout: 2s}\n",
                ),
            }
        )
        statuses = Counter(
            [(await get(harness, "retries.example.com")).status_code for _ in range(20)]
        )
        # Every 500 from the bad endpoint was retried on the good one until it was ejected.
        assert statuses == Counter({200: 20}), statuses


# --- slow start ----------------------------------------------------------------------------------


async def test_slow_start_reaches_envoy(harness: Harness) -> None:
    async with backends(NS, "slow") as (echo,):
        await harness.apply(
            {
                "svc.yaml": service("slow", [echo.port], port=80),
                "p.yaml": proxy(
                    "slow.example.com",
                    "[{name: slow, port: 80, slowStartPolicy: {window: 30s, aggression: '2.0', "
                    "minWeightPercent: 20}}]",
                ),
            }
        )
        assert (await get(harness, "slow.example.com")).status_code == 200
        slow = [c for c in await harness.active_clusters() if c["name"].startswith(f"{NS}/slow/")]
        assert len(slow) == 1
        config = slow[0]["round_robin_lb_config"]["slow_start_config"]
        assert config["slow_start_window"] == "30s"
        assert config["aggression"]["default_value"] == 2.0
        assert config["min_weight_percent"]["value"] == 20.0


async def _shares(harness: Harness, host: str, n: int) -> Counter[str]:
    """Which backend answered each of `n` requests on one client connection."""
    counts: Counter[str] = Counter()
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        for _ in range(n):
            r = await client.get("/", headers={"Host": host})
            counts[r.json()["service"] if r.status_code == 200 else str(r.status_code)] += 1
    return counts


async def test_slow_start_gives_a_new_endpoint_a_small_share(harness: Harness) -> None:
    """One endpoint, then a second one joins: within the window the newcomer gets a small share
    with slowStartPolicy, and half without (a control route to the same Service)."""
    async with backends(NS, "old", "new") as (old, new):
        # Envoy scales the weight of every endpoint younger than the window, the first one too,
        # by max(minWeightPercent, (age / window) ^ (1 / aggression)) with an age of at least 1 s.
        # With the old endpoint about 3.5 s old and the new one 1-1.5 s, that is 0.12 against
        # 0.01-0.02: the newcomer gets about a tenth of the requests.
        slow = "slowStartPolicy: {window: 10s, aggression: '0.5', minWeightPercent: 1}"
        proxies = {
            "slow.yaml": proxy("ramp.example.com", f"[{{name: ramp, port: 80, {slow}}}]"),
            "control.yaml": proxy("noramp.example.com", "[{name: ramp, port: 80}]"),
        }
        await harness.apply({"svc.yaml": service("ramp", [old.port], port=80), **proxies})
        assert await _shares(harness, "ramp.example.com", 5) == Counter({"old": 5})
        assert await _shares(harness, "noramp.example.com", 5) == Counter({"old": 5})
        await asyncio.sleep(3.0)  # the old endpoint ages
        # The same clusters (their settings did not change); only their endpoints do.
        await harness.apply({"svc.yaml": service("ramp", [old.port, new.port], port=80), **proxies})
        loop = asyncio.get_running_loop()
        started = loop.time()
        ramped = await _shares(harness, "ramp.example.com", 100)
        control = await _shares(harness, "noramp.example.com", 100)
        assert loop.time() - started < 10.0
        assert ramped["old"] + ramped["new"] == 100, ramped
        assert ramped["new"] <= 25, ramped
        # Round robin without slow start alternates between the two.
        assert 40 <= control["new"] <= 60, control


# --- timeoutPolicy.idleConnection ----------------------------------------------------------------


async def test_idle_connection_timeout_closes_the_upstream_connection(harness: Harness) -> None:
    """The echo reports the port of the connection each request came on: with idleConnection
    Envoy opens a new upstream connection after a pause longer than the timeout; without it the
    pooled connection is reused."""
    async with backends(NS, "pooled") as (echo,):
        await harness.apply(
            {
                "svc.yaml": service("pooled", [echo.port], port=80),
                "idle.yaml": proxy(
                    "idle.example.com",
                    "[{name: pooled, port: 80}]",
                    "timeoutPolicy: {idleConnection: 1s}\n",
                ),
                "keep.yaml": proxy("keep.example.com", "[{name: pooled, port: 80}]"),
            }
        )
        hosts = ("idle.example.com", "keep.example.com")
        ports: dict[str, list[int]] = {h: [] for h in hosts}
        async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:

            async def request_each() -> None:
                for h in hosts:
                    r = await client.get("/", headers={"Host": h})
                    assert r.status_code == 200, r.text
                    ports[h].append(r.json()["client_port"])

            await request_each()
            await request_each()  # at once: both reuse their connection
            await asyncio.sleep(1.8)
            await request_each()
        idle, keep = ports["idle.example.com"], ports["keep.example.com"]
        assert idle[0] == idle[1] and idle[2] != idle[1], idle
        assert keep[0] == keep[1] == keep[2], keep
        # Two clusters (different settings), so two pools: never one connection for both.
        assert not set(idle) & set(keep)

"""Skipper's `jwtValidation` through the controller's OpenID discovery and a real Envoy.

A local issuer on 127.0.0.1 serves its discovery document and key set (an RSA key; tokens are
signed here with `cryptography`). The RouteGroup's route with the filter answers 503 while the
discovery fails, then 401 to requests without a valid token and forwards valid ones (with the
token) to the backend; a route without the filter is never affected."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.e2e.harness import Harness
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions, IssuerDiscovery
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.sources.oidc import DiscoverySettings
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.asyncio(loop_scope="session"),
]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def sign(key: rsa.RSAPrivateKey, kid: str, claims: dict[str, Any]) -> str:
    """An RS256 JWS in compact form."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = ".".join(
        b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


def jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "alg": "RS256",
        "use": "sig",
        "kid": kid,
        "n": b64url(_int_bytes(numbers.n)),
        "e": b64url(_int_bytes(numbers.e)),
    }


@dataclass
class Issuer:
    """An OpenID provider on loopback: discovery answers `discovery_status` (200: the document)."""

    key: rsa.RSAPrivateKey
    port: int = 0
    discovery_status: int = 200
    discovery_requests: int = 0
    jwks_requests: int = 0
    runner: web.AppRunner | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/realm"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/realm/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/realm/keys", self._jwks)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _discovery(self, request: web.Request) -> web.Response:
        self.discovery_requests += 1
        if self.discovery_status != 200:
            return web.Response(status=self.discovery_status)
        return web.json_response({"issuer": self.url, "jwks_uri": f"{self.url}/keys"})

    async def _jwks(self, request: web.Request) -> web.Response:
        self.jwks_requests += 1
        return web.json_response({"keys": [jwk(self.key, "k1")]})

    def token(self, **overrides: Any) -> str:
        claims: dict[str, Any] = {
            "iss": self.url,
            "sub": "alice",
            "iat": int(time.time()),
            "exp": int(time.time()) + 600,
        }
        claims.update(overrides)
        return sign(self.key, "k1", claims)


@pytest_asyncio.fixture(loop_scope="session")
async def issuer(harness: Harness) -> AsyncIterator[Issuer]:
    server = Issuer(new_key())
    await server.start()
    saved = harness.controller.oidc.settings
    # Quick retries so the test does not wait for the production intervals.
    harness.controller.oidc.settings = DiscoverySettings(
        timeout_s=2.0, attempts=2, backoff_s=0.05, retry_s=0.2, refresh_s=0.5
    )
    try:
        yield server
    finally:
        await harness.apply({})  # stops the discovery of this issuer
        harness.controller.oidc.settings = saved
        assert server.runner is not None
        await server.runner.cleanup()


def routegroup(issuer: str, services: str) -> dict[str, str]:
    return {
        "services.yaml": services,
        "rg.yaml": f"""\
            apiVersion: zalando.org/v1
            kind: RouteGroup
            metadata: {{name: jwt, namespace: default}}
            spec:
              hosts: [jwt.example.com]
              backends:
              - {{name: app, type: service, serviceName: jwt-app, servicePort: 80}}
              defaultBackends: [{{backendName: app}}]
              routes:
              - pathSubtree: /secure
                filters: ['jwtValidation("{issuer}")']
              - pathSubtree: /open
            """,
    }


def condition(harness: Harness, type_: str) -> dict[str, Any]:
    body = harness.status_of("RouteGroup", "default", "jwt")
    [found] = [c for c in body["conditions"] if c["type"] == type_]
    return dict(found)


async def get(harness: Harness, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Host": "jwt.example.com"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        return await client.get(path, headers=headers)


async def wait_for(probe: Any, timeout: float = 15.0) -> Any:
    """Polls the async `probe` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.1)


async def test_jwt_validation_end_to_end(harness: Harness, issuer: Issuer) -> None:
    issuer.discovery_status = 404
    await harness.apply(routegroup(issuer.url, await harness.services(("default", "jwt-app"))))

    # Discovery fails: the RouteGroup says why and the route never lets a request through.
    async def failed() -> bool:
        return bool(condition(harness, "ResolvedRefs")["reason"] == "IssuerDiscoveryFailed")

    assert await wait_for(failed), condition(harness, "ResolvedRefs")
    message = condition(harness, "ResolvedRefs")["message"]
    assert "spec.routes[0].filters[0]" in message
    assert "jwtValidation" in message and issuer.url in message and "HTTP 404" in message
    await harness.wait_acked_current()
    assert (await get(harness, "/secure", issuer.token())).status_code == 503
    open_response = await get(harness, "/open")
    assert open_response.status_code == 200
    assert open_response.json()["service"] == "jwt-app"

    # Discovery succeeds: the retry finds the key set URI and the controller recompiles.
    issuer.discovery_status = 200

    async def resolved() -> bool:
        return bool(condition(harness, "ResolvedRefs")["status"] == "True")

    assert await wait_for(resolved), condition(harness, "ResolvedRefs")
    await harness.wait_acked_current()

    valid = issuer.token()

    async def admitted() -> bool:
        # Envoy fetches the key set in the background after the listener update.
        return (await get(harness, "/secure/x", valid)).status_code == 200

    assert await wait_for(admitted)
    response = await get(harness, "/secure/x", valid)
    seen = response.json()
    assert seen["service"] == "jwt-app" and seen["path"] == "/secure/x"
    # The token reaches the backend unchanged, as Skipper forwards it.
    assert seen["headers"]["authorization"] == f"Bearer {valid}"
    assert issuer.jwks_requests >= 1

    # Everything else is a bare 401, as Skipper's `unauthorized` (no body, no WWW-Authenticate).
    no_token = await get(harness, "/secure/x")
    assert no_token.status_code == 401
    assert "www-authenticate" not in no_token.headers and no_token.content == b""
    other_key = sign(new_key(), "k1", {"iss": issuer.url, "sub": "alice"})
    assert (await get(harness, "/secure/x", other_key)).status_code == 401
    wrong_issuer = issuer.token(iss="http://127.0.0.1:1/other")
    assert (await get(harness, "/secure/x", wrong_issuer)).status_code == 401
    expired = issuer.token(exp=int(time.time()) - 3600)
    assert (await get(harness, "/secure/x", expired)).status_code == 401
    assert (await get(harness, "/secure/x", "not-a-jwt")).status_code == 401
    basic = await _raw_get(harness, "/secure/x", "Basic YWxpY2U6c2VjcmV0")
    assert basic.status_code == 401

    # The route without the filter is unaffected, with or without a token.
    assert (await get(harness, "/open")).status_code == 200
    assert (await get(harness, "/open", "not-a-jwt")).status_code == 200


async def _raw_get(harness: Harness, path: str, authorization: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        return await client.get(
            path, headers={"Host": "jwt.example.com", "Authorization": authorization}
        )


async def test_every_jwks_form_is_valid_for_envoy_without_deprecations() -> None:
    """https JWKS by DNS name (TLS verified against the CA file), http by IPv4 and IPv6 address,
    two issuers sharing one JWKS host, and a route whose issuer has no answer (503)."""
    issuers = {
        "https://a.example.org": "https://keys.example.org/a/jwks",
        "https://b.example.org/realm": "https://keys.example.org:8443/b",
        "http://127.0.0.1:9000/r": "http://127.0.0.1:9000/r/keys",
        "http://[::1]:9000": "http://[::1]:9000/keys",
    }
    routes = "".join(
        f"      - path: /r{i}\n        filters: ['jwtValidation(\"{issuer}\")']\n"
        for i, issuer in enumerate([*issuers, "https://pending.example.org"])
    )
    text = f"""\
apiVersion: zalando.org/v1
kind: RouteGroup
metadata: {{name: forms, namespace: default}}
spec:
  hosts: [forms.example.com]
  backends:
  - {{name: shunt, type: shunt}}
  defaultBackends: [{{backendName: shunt}}]
  routes:
{routes.replace("      ", "  ")}
"""
    snapshot = Snapshot.of(parse_text(text, "forms.yaml").objects)
    answers = tuple(sorted(IssuerDiscovery(i, jwks_uri=u) for i, u in issuers.items()))
    result = compile_snapshot(snapshot, CompileOptions(issuer_discovery=answers))
    [status] = result.statuses
    assert "IssuerDiscoveryPending" in str(status.body) and status.summary.startswith(
        "spec.routes[4].filters[0]"
    ), status.body
    resources = translate(result.graph)
    jwks = sorted(c.name for c in resources.clusters if c.name.startswith("turnout-jwks/"))
    assert jwks == [
        "turnout-jwks/http/127.0.0.1:9000",
        "turnout-jwks/http/::1:9000",
        "turnout-jwks/https/keys.example.org:443",
        "turnout-jwks/https/keys.example.org:8443",
    ]
    validated = validate_resources(resources)
    assert validated.ok, validated.output
    assert validated.deprecation_warnings == (), validated.output

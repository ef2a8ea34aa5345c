"""Contour's JWT verification (HTTPProxy `jwtProviders`, `jwtVerificationPolicy`) through a real
Envoy. A key server on 127.0.0.1 serves its JSON Web Key Set over TLS with a certificate of a test
CA, which the provider's `validation` names; tokens are RS256, signed here. The default provider
forwards the token, a required one does not, and a disabled route needs none."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.cases.jwt_tokens import jwk, new_key, sign
from tests.e2e.certs import CA, tls_secret_yaml
from tests.e2e.harness import Harness
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

HOST = "jwt.contour.example.com"
ISSUER = "https://issuer.example.com"
KEYS_NAME = "keys.example.com"


class KeyServer:
    """A JWKS endpoint over TLS on loopback."""

    def __init__(self, key: rsa.RSAPrivateKey, ca: CA) -> None:
        self.key = key
        self.ca = ca
        self.port = 0
        self.requests = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/keys", self._jwks)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ca.issue(KEYS_NAME).load_into(context)
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _jwks(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.json_response({"keys": [jwk(self.key, "k1")]})

    def token(self, **overrides: Any) -> str:
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": "api",
            "sub": "alice",
            "exp": int(time.time()) + 600,
        }
        claims.update(overrides)
        return sign(self.key, "k1", claims)


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA()


@pytest_asyncio.fixture(loop_scope="session")
async def keys(ca: CA) -> AsyncIterator[KeyServer]:
    server = KeyServer(new_key(), ca)
    await server.start()
    try:
        yield server
    finally:
        assert server.runner is not None
        await server.runner.cleanup()


def files(keys: KeyServer, ca: CA, services: str) -> dict[str, str]:
    cert = ca.issue(HOST)
    ca_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "jwks-ca", "namespace": "default"},
        "stringData": {"ca.crt": ca.cert_pem},
    }
    uri = f"https://127.0.0.1:{keys.port}/keys"
    remote = f"{{uri: '{uri}', validation: {{caSecret: jwks-ca, subjectName: {KEYS_NAME}}}}}"
    return {
        "services.yaml": services,
        "secrets.yaml": tls_secret_yaml("default", "cert", cert.cert_pem, cert.key_pem)
        + "---\n"
        + json.dumps(ca_secret),
        "proxy.yaml": f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: jwt, namespace: default}}
spec:
  virtualhost:
    fqdn: {HOST}
    tls: {{secretName: cert}}
    jwtProviders:
    - {{name: main, default: true, forwardJWT: true, issuer: '{ISSUER}', audiences: [api],
        remoteJWKS: {remote}}}
    - {{name: strict, issuer: '{ISSUER}', audiences: [api], remoteJWKS: {remote}}}
  routes:
  - services: [{{name: jwt-app, port: 80}}]
  - conditions: [{{prefix: /strict}}]
    services: [{{name: jwt-app, port: 80}}]
    jwtVerificationPolicy: {{require: strict}}
  - conditions: [{{prefix: /open}}]
    services: [{{name: jwt-app, port: 80}}]
    jwtVerificationPolicy: {{disabled: true}}
""",
    }


async def wait_for(probe: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.1)


async def test_contour_jwt_verification_end_to_end(
    harness: Harness, keys: KeyServer, ca: CA
) -> None:
    await harness.apply(files(keys, ca, await harness.services(("default", "jwt-app"))))
    status = harness.status_of("HTTPProxy", "default", "jwt")
    assert status["currentStatus"] == "valid", status
    client = ca.client_context()

    async def get(path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await harness.https_get(HOST, path, verify=client, headers=headers)

    valid = keys.token()

    async def admitted() -> bool:
        # Envoy fetches the key set in the background after the listener update.
        return (await get("/x", valid)).status_code == 200

    assert await wait_for(admitted)
    assert keys.requests >= 1

    # The default provider forwards the token to the backend (`forwardJWT`).
    seen = (await get("/x", valid)).json()
    assert seen["service"] == "jwt-app" and seen["headers"]["authorization"] == f"Bearer {valid}"
    # A provider without forwardJWT checks the token and removes it.
    strict = await get("/strict/x", valid)
    assert strict.status_code == 200 and "authorization" not in strict.json()["headers"]

    # Everything that is not a valid token of the issuer for the audience is refused.
    assert (await get("/strict/x")).status_code == 401  # no token on a require route
    assert (await get("/x")).status_code == 401  # no token under the default provider
    assert (await get("/x", keys.token(exp=int(time.time()) - 3600))).status_code == 401
    assert (await get("/x", keys.token(iss="https://other.example.com"))).status_code == 401
    # A valid token for another audience is Envoy's 403 (JwtAudienceNotAllowed), as in Contour.
    assert (await get("/x", keys.token(aud="someone-else"))).status_code == 403
    assert (await get("/x", keys.token(aud=["web", "api"]))).status_code == 200
    other_key = sign(new_key(), "k1", {"iss": ISSUER, "aud": "api", "sub": "alice"})
    assert (await get("/strict/x", other_key)).status_code == 401

    # The disabled route needs no token.
    open_route = await get("/open/x")
    assert open_route.status_code == 200 and open_route.json()["path"] == "/open/x"
    # Plain HTTP is redirected to HTTPS before any token is asked for.
    assert (await harness.get(HOST, "/x")).status_code == 301
    await harness.apply({})


async def test_every_provider_form_is_valid_for_envoy_without_deprecations(ca: CA) -> None:
    """Key servers by DNS name (each lookup family, with and without `validation`) and by IPv4
    and IPv6 address, providers with and without issuer, audiences and forwarding."""
    keys = KeyServer(new_key(), ca)
    keys.port = 8443
    service = (
        "{apiVersion: v1, kind: Service, metadata: {name: jwt-app, namespace: default}, "
        "spec: {ports: [{port: 80}]}}"
    )
    text = "\n---\n".join(v for v in files(keys, ca, service).values() if v)
    forms = [
        "{uri: 'https://keys.example.org/a', dnsLookupFamily: auto}",
        "{uri: 'https://keys.example.org:8443/b', dnsLookupFamily: all, timeout: 250ms}",
        "{uri: 'http://keys.example.org/c', dnsLookupFamily: v6, cacheDuration: 5m}",
        f"{{uri: 'https://keys.example.org/d', dnsLookupFamily: v4, validation: {{caSecret: "
        f"jwks-ca, subjectName: {KEYS_NAME}}}}}",
        "{uri: 'http://[::1]:9000/keys'}",
    ]
    extra = "".join(
        f"    - {{name: p{i}, audiences: [a{i}], remoteJWKS: {form}}}\n"
        for i, form in enumerate(forms)
    )
    routes = "".join(
        f"  - conditions: [{{prefix: /p{i}}}]\n    services: [{{name: jwt-app, port: 80}}]\n"
        f"    jwtVerificationPolicy: {{require: p{i}}}\n"
        for i in range(len(forms))
    )
    text = text.replace("  routes:\n", extra + "  routes:\n" + routes)
    snapshot = Snapshot.of(parse_text(text, "forms.yaml").objects)
    result = compile_snapshot(snapshot, CompileOptions())
    status = next(s for s in result.statuses if s.ref.kind == "HTTPProxy")
    assert status.body["currentStatus"] == "valid", status.summary
    resources = translate(result.graph)
    jwks = [c.name for c in resources.clusters if c.name.startswith("turnout-jwks/")]
    assert len(jwks) == 1 + len(forms), jwks  # the main server's two providers share one
    validated = validate_resources(resources)
    assert validated.ok, validated.output
    assert validated.deprecation_warnings == (), validated.output

"""HTTPProxy external authorization through the real Envoy, with a small authorization server
speaking Envoy's `envoy.service.auth.v3.Authorization/Check` over gRPC (h2c): allowed and
denied requests, a route that opts out, context extensions, and fail-open/closed when the server
cannot be reached."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from envoy.type.v3 import http_status_pb2
from google.rpc import status_pb2

from tests.e2e.certs import CA, tls_secret_yaml
from tests.e2e.harness import Harness, free_port, service_yaml

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "authz.tls.example.com"


class AuthServer(external_auth_pb2_grpc.AuthorizationServicer):
    """Denies requests with `x-deny`, allows the others adding `x-authz-user`; remembers the
    context extensions of every check."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, str]] = []

    async def Check(self, request: Any, context: Any) -> Any:
        self.contexts.append(dict(request.attributes.context_extensions))
        headers = request.attributes.request.http.headers
        out = external_auth_pb2.CheckResponse()
        if "x-deny" in headers:
            out.status.CopyFrom(status_pb2.Status(code=grpc.StatusCode.PERMISSION_DENIED.value[0]))
            out.denied_response.status.code = http_status_pb2.Unauthorized
            out.denied_response.headers.append(
                base_pb2.HeaderValueOption(
                    header=base_pb2.HeaderValue(key="x-denied-by", value="authz")
                )
            )
            out.denied_response.body = "go away"
            return out
        out.status.CopyFrom(status_pb2.Status(code=0))
        out.ok_response.headers.append(
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key="x-authz-user", value="alice")
            )
        )
        return out


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def auth_server() -> AsyncIterator[tuple[AuthServer, int]]:
    servicer = AuthServer()
    server = grpc.aio.server()
    external_auth_pb2_grpc.add_AuthorizationServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, port
    await server.stop(None)


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA()


def manifests(auth_port: int, fail_open: bool) -> dict[str, str]:
    extension = """\
apiVersion: projectcontour.io/v1alpha1
kind: ExtensionService
metadata: {name: authz, namespace: default}
spec:
  protocol: h2c
  services: [{name: authz, port: 9000}]
"""
    proxy = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: app, namespace: default}}
spec:
  virtualhost:
    fqdn: {HOST}
    tls: {{secretName: cert}}
    authorization:
      extensionRef: {{name: authz}}
      responseTimeout: 2s
      failOpen: {str(fail_open).lower()}
      authPolicy: {{context: {{tenant: a, route: vhost}}}}
  routes:
    - conditions: [{{prefix: /public}}]
      authPolicy: {{disabled: true}}
      services: [{{name: app, port: 80}}]
    - services: [{{name: app, port: 80}}]
      authPolicy: {{context: {{route: root}}}}
"""
    return {
        "authz.yaml": service_yaml("default", "authz", 9000, auth_port) + "---\n" + extension,
        "proxy.yaml": proxy,
    }


async def apply(harness: Harness, ca: CA, auth_port: int, fail_open: bool = False) -> None:
    leaf = ca.issue(HOST)
    files = manifests(auth_port, fail_open)
    files["svc.yaml"] = await harness.services(("default", "app"))
    files["secret.yaml"] = tls_secret_yaml("default", "cert", leaf.cert_pem, leaf.key_pem)
    await harness.apply(files)


async def test_allowed_denied_opted_out_and_context(
    harness: Harness, ca: CA, auth_server: tuple[AuthServer, int]
) -> None:
    server, port = auth_server
    await apply(harness, ca, port)
    status = harness.status_of("HTTPProxy", "default", "app")
    assert status["currentStatus"] == "valid", status
    client: ssl.SSLContext = ca.client_context()

    r = await harness.https_get(HOST, "/x", verify=client)
    assert r.status_code == 200, r.text
    assert r.json()["headers"]["x-authz-user"] == "alice"
    assert server.contexts[-1] == {"tenant": "a", "route": "root"}

    r = await harness.https_get(HOST, "/x", verify=client, headers={"x-deny": "1"})
    assert (r.status_code, r.headers.get("x-denied-by"), r.text) == (401, "authz", "go away")

    checks = len(server.contexts)
    r = await harness.https_get(HOST, "/public", verify=client, headers={"x-deny": "1"})
    assert r.status_code == 200
    assert "x-authz-user" not in r.json()["headers"]
    assert len(server.contexts) == checks  # the server was not asked


async def test_unreachable_server_fails_closed_or_open(harness: Harness, ca: CA) -> None:
    nobody = free_port()
    client = ca.client_context()
    await apply(harness, ca, nobody, fail_open=False)
    r = await harness.https_get(HOST, "/x", verify=client)
    assert r.status_code == 403
    await apply(harness, ca, nobody, fail_open=True)
    r = await harness.https_get(HOST, "/x", verify=client)
    assert r.status_code == 200
    assert "x-authz-user" not in r.json()["headers"]

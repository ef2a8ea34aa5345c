"""BackendTLSPolicy `wellKnownCACertificates: System` through the real Envoy: the backend must
chain to the installation's system CA file (`--system-ca-file`, here a file of the test's own
CA), and a file of another CA makes Envoy refuse the backend (503)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.certs import CA
from tests.e2e.gateway_backends import (
    HTTP_ROUTE,
    SECURE_REF,
    backend_tls_policy,
    gateway,
    get_when_listening,
    listener,
)
from tests.e2e.harness import Harness, free_port, service_yaml
from tests.e2e.upstream_servers import start_tls_echo
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
]

HOST = "system-ca.example.com"


def manifests(port: int, backend_port: int) -> dict[str, str]:
    validation = "    wellKnownCACertificates: System\n    hostname: backend.internal\n"
    return {
        "gw.yaml": gateway(listener("http", port, "HTTP")),
        "route.yaml": HTTP_ROUTE.format(host=HOST, refs=SECURE_REF),
        "svc.yaml": service_yaml("apps", "secure", 443, backend_port),
        "policy.yaml": backend_tls_policy(validation),
    }


async def test_system_ca_certificates_are_the_system_ca_file(
    harness: Harness, tmp_path: Path
) -> None:
    backend_ca, other_ca = CA("backend CA"), CA("someone else's CA")
    trusted = tmp_path / "trusted.pem"
    # A bundle, as a system store is: the backend's CA among others.
    trusted.write_text(other_ca.cert_pem + backend_ca.cert_pem)
    untrusted = tmp_path / "untrusted.pem"
    untrusted.write_text(other_ca.cert_pem)
    port = free_port()
    backend = await start_tls_echo("secure", backend_ca.issue("backend.internal"))
    try:
        files = manifests(port, backend.port)
        await harness.apply(files, options={"system_ca_file": str(trusted)})
        r = await get_when_listening(port, HOST, "/x")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tls"] is True and body["sni"] == "backend.internal"
        (ancestor,) = harness.status_of("BackendTLSPolicy", "apps", "secure")["ancestors"]
        accepted = next(c for c in ancestor["conditions"] if c["type"] == "Accepted")
        assert (accepted["status"], accepted["reason"]) == ("True", "Accepted")
        assert harness.controller.applied is not None
        graph = harness.controller.applied.result.graph
        assert validate_resources(translate(graph, harness.controller.translate_options)).ok

        # The same objects with a system file that lacks the backend's CA: the handshake fails.
        await harness.apply(files, options={"system_ca_file": str(untrusted)})
        r = await get_when_listening(port, HOST, "/x")
        assert r.status_code == 503, r.text
        assert backend.requests == 1
    finally:
        await backend.close()

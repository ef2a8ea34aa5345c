"""TLS termination through a real Envoy: certificates by SNI, the plain-HTTP upgrade,
permitInsecure, misdirected requests and Secret changes, as a client sees them."""

from __future__ import annotations

import ssl

import httpx
import pytest

from tests.e2e.certs import CA, Issued, tls_secret_yaml
from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

A = "a.tls.example.com"
B = "b.tls.example.com"


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA()


@pytest.fixture(scope="module")
def client(ca: CA) -> ssl.SSLContext:
    return ca.client_context()


def tls_root(
    name: str,
    fqdn: str,
    secret: str,
    routes: str = "    - services: [{name: app, port: 80}]\n",
    tls_extra: str = "",
    namespace: str = "default",
) -> str:
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata:
  name: {name}
  namespace: {namespace}
spec:
  virtualhost:
    fqdn: "{fqdn}"
    tls: {{secretName: {secret}{tls_extra}}}
  routes:
{routes}"""


def secret(name: str, issued: Issued, namespace: str = "default") -> str:
    return tls_secret_yaml(namespace, name, issued.cert_pem, issued.key_pem)


async def two_hosts(harness: Harness, ca: CA) -> tuple[Issued, Issued]:
    """Hosts A and B on the HTTPS port, each with its own certificate and backend."""
    cert_a, cert_b = ca.issue(A), ca.issue(B)
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app"), ("team-b", "app")),
            "secrets.yaml": secret("cert-a", cert_a) + "---\n" + secret("cert-b", cert_b, "team-b"),
            "a.yaml": tls_root("a", A, "cert-a"),
            "b.yaml": tls_root("b", B, "cert-b", namespace="team-b"),
        }
    )
    return cert_a, cert_b


async def test_sni_selects_the_hosts_certificate_and_routes(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    cert_a, cert_b = await two_hosts(harness, ca)
    # The client checks the certificate against the test CA and the SNI name.
    r = await harness.https_get(A, "/x?y=1", verify=client)
    assert r.status_code == 200
    body = r.json()
    assert (body["namespace"], body["service"], body["path"]) == ("default", "app", "/x?y=1")
    assert body["headers"]["x-forwarded-proto"] == "https"
    r = await harness.https_get(B, "/", verify=client)
    assert (r.status_code, r.json()["namespace"]) == (200, "team-b")
    # One port, two certificates: the one presented is chosen by SNI.
    assert await harness.peer_certificate(A, client) == cert_a.der
    assert await harness.peer_certificate(B, client) == cert_b.der
    # A name no host serves gets no certificate at all.
    with pytest.raises(httpx.ConnectError):
        await harness.https_get("c.tls.example.com", verify=client, retry_connect=False)


async def test_plain_http_to_a_tls_host_is_redirected_to_https(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    await two_hosts(harness, ca)
    r = await harness.get(A, "/cart?item=1")
    assert r.status_code == 301
    assert r.headers["location"].startswith(f"https://{A}")
    assert r.headers["location"].endswith("/cart?item=1")


PERMIT_ROUTES = """\
    - services: [{name: app, port: 80}]
    - conditions: [{prefix: /public}]
      permitInsecure: true
      services: [{name: public, port: 80}]
"""


async def permit_insecure_files(harness: Harness, ca: CA) -> dict[str, str]:
    return {
        "svc.yaml": await harness.services(("default", "app"), ("default", "public")),
        "secret.yaml": secret("cert-a", ca.issue(A)),
        "a.yaml": tls_root("a", A, "cert-a", routes=PERMIT_ROUTES),
    }


async def test_permit_insecure_route_answers_on_plain_http(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    files = await permit_insecure_files(harness, ca)
    await harness.apply(files)
    assert await harness.served_by(A, "/public/page") == "default/public"
    assert (await harness.get(A, "/private")).status_code == 301
    r = await harness.https_get(A, "/public/page", verify=client)
    assert r.json()["service"] == "public"

    # The installation-wide switch wins over the route, on the same Envoy.
    await harness.apply(files, options={"disable_permit_insecure": True})
    r = await harness.get(A, "/public/page")
    assert r.status_code == 301
    assert r.headers["location"].startswith(f"https://{A}")
    r = await harness.https_get(A, "/public/page", verify=client)
    assert r.json()["service"] == "public"

    # The override lasted for one apply only.
    await harness.apply(files)
    assert await harness.served_by(A, "/public/page") == "default/public"


async def test_host_that_disagrees_with_sni_gets_421(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    cert_a, cert_b = ca.issue(A), ca.issue(B)
    wildcard = ca.issue("*.tls.example.com")
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app"), ("default", "wild")),
            "secrets.yaml": "---\n".join(
                [secret("cert-a", cert_a), secret("cert-b", cert_b), secret("wild", wildcard)]
            ),
            "a.yaml": tls_root("a", A, "cert-a"),
            "b.yaml": tls_root("b", B, "cert-b"),
            "w.yaml": tls_root(
                "w", "*.tls.example.com", "wild", "    - services: [{name: wild, port: 80}]\n"
            ),
        }
    )
    # A connection made for A must not be used to reach B's routes.
    r = await harness.https_get(B, "/", sni=A, verify=client)
    assert r.status_code == 421
    r = await harness.https_get("unknown.example.org", "/", sni=A, verify=client)
    assert r.status_code == 421
    # The Host may carry a port and any case: still the same host.
    r = await harness.https_get(f"{A.upper()}:{harness.https_port}", "/", sni=A, verify=client)
    assert (r.status_code, r.json()["service"]) == (200, "app")
    # A wildcard's connection serves its own hosts, but not a host that has its own chain.
    r = await harness.https_get("c.tls.example.com", "/", sni="d.tls.example.com", verify=client)
    assert (r.status_code, r.json()["service"]) == (200, "wild")
    r = await harness.https_get(A, "/", sni="d.tls.example.com", verify=client)
    assert r.status_code == 421
    # And the hosts themselves are served on their own connections.
    assert (await harness.https_get(B, "/", verify=client)).status_code == 200
    r = await harness.https_get("d.tls.example.com", "/", verify=client)
    assert r.json()["service"] == "wild"


async def test_minimum_protocol_version_is_enforced(harness: Harness, ca: CA) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "secrets.yaml": secret("cert-a", ca.issue(A)) + "---\n" + secret("cert-b", ca.issue(B)),
            "a.yaml": tls_root("a", A, "cert-a", tls_extra=', minimumProtocolVersion: "1.3"'),
            "b.yaml": tls_root("b", B, "cert-b"),
        }
    )
    tls12 = ca.client_context()
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert (await harness.https_get(B, verify=tls12)).status_code == 200
    with pytest.raises(httpx.ConnectError):
        await harness.https_get(A, verify=tls12, retry_connect=False)
    assert (await harness.https_get(A, verify=ca.client_context())).status_code == 200


async def test_malformed_secret_fails_only_its_own_host(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    cert_a = ca.issue(A)
    # B's Secret pairs its certificate with another key: Envoy would reject the whole listener.
    broken = Issued(ca.issue(B).cert_pem, ca.issue(B).key_pem)
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "secrets.yaml": secret("cert-a", cert_a) + "---\n" + secret("cert-b", broken),
            "a.yaml": tls_root("a", A, "cert-a"),
            "b.yaml": tls_root("b", B, "cert-b"),
        }
    )
    status = harness.status_of("HTTPProxy", "default", "b")
    assert status["currentStatus"] == "invalid"
    (error,) = status["conditions"][0]["errors"]
    assert (error["type"], error["reason"]) == ("TLSError", "SecretNotValid")
    assert error["message"].startswith('Spec.VirtualHost.TLS Secret "cert-b" is invalid: ')
    assert harness.status_of("HTTPProxy", "default", "a")["currentStatus"] == "valid"
    # A keeps serving; B is served neither over HTTPS nor over plain HTTP.
    r = await harness.https_get(A, verify=client)
    assert (r.status_code, r.json()["service"]) == (200, "app")
    with pytest.raises(httpx.ConnectError):
        await harness.https_get(B, verify=client, retry_connect=False)
    assert (await harness.get(B)).status_code == 404


async def test_renewed_certificate_is_served_after_reload(
    harness: Harness, ca: CA, client: ssl.SSLContext
) -> None:
    first, renewed = ca.issue(A), ca.issue(A)
    files = {
        "svc.yaml": await harness.services(("default", "app")),
        "a.yaml": tls_root("a", A, "cert-a"),
    }
    await harness.apply({**files, "secret.yaml": secret("cert-a", first)})
    assert await harness.peer_certificate(A, client) == first.der
    await harness.apply({**files, "secret.yaml": secret("cert-a", renewed)})
    assert await harness.peer_certificate(A, client) == renewed.der
    r = await harness.https_get(A, verify=client)
    assert (r.status_code, r.json()["service"]) == (200, "app")

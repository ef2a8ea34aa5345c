"""Kubernetes Ingress through a real Envoy: what a client gets and which backend answered."""

from __future__ import annotations

import ssl

import pytest

from tests.e2e.certs import CA, tls_secret_yaml
from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")


def ingress(
    name: str,
    rules: str,
    ns: str = "default",
    created: str | None = None,
    class_name: str | None = "turnout",
    annotations: str = "",
    extra_spec: str = "",
) -> str:
    ts = f'\n  creationTimestamp: "{created}"' if created else ""
    ann = f"\n  annotations: {annotations}" if annotations else ""
    cls = f"\n  ingressClassName: {class_name}" if class_name else ""
    return f"""\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: {ns}{ts}{ann}
spec:{cls}{extra_spec}
  rules:
{rules}"""


def path(p: str, service: str, path_type: str = "Prefix", port: str = "number: 80") -> str:
    return (
        f"          - {{path: '{p}', pathType: {path_type}, "
        f"backend: {{service: {{name: {service}, port: {{{port}}}}}}}}}\n"
    )


def rule(host: str | None, *paths: str) -> str:
    head = f"    - host: '{host}'\n      http:\n" if host else "    - http:\n"
    return head + "        paths:\n" + "".join(paths)


async def test_prefix_is_segment_wise_and_exact_wins(harness: Harness) -> None:
    host = "paths.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(
                ("default", "root"), ("default", "foo"), ("default", "foo-exact")
            ),
            "ing.yaml": ingress(
                "paths",
                rule(
                    host,
                    path("/", "root"),
                    path("/foo/", "foo"),
                    path("/foo", "foo-exact", "Exact"),
                ),
            ),
        }
    )
    assert await harness.served_by(host, "/foo") == "default/foo-exact"
    # "/foo/" as a Prefix is the segment prefix /foo: the trailing slash is ignored.
    assert await harness.served_by(host, "/foo/") == "default/foo"
    assert await harness.served_by(host, "/foo/bar") == "default/foo"
    assert await harness.served_by(host, "/foo?x=1") == "default/foo-exact"
    # Not a string prefix: /foobar is not under /foo.
    assert await harness.served_by(host, "/foobar") == "default/root"
    assert await harness.served_by(host, "/FOO") == "default/root"
    r = await harness.get(host, "/foo/bar?q=1")
    assert r.json()["path"] == "/foo/bar?q=1"
    status = harness.status_of("Ingress", "default", "paths")
    assert status["loadBalancer"] == {"ingress": [{"ip": "127.0.0.1"}]}


async def test_implementation_specific_regex_and_string_prefix(harness: Harness) -> None:
    host = "specific.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "static"), ("default", "users")),
            "ing.yaml": ingress(
                "specific",
                rule(
                    host,
                    path("/static", "static", "ImplementationSpecific"),
                    path("/users/[0-9]+", "users", "ImplementationSpecific"),
                ),
            ),
        }
    )
    assert await harness.served_by(host, "/staticfiles/app.js") == "default/static"
    assert await harness.served_by(host, "/users/42") == "default/users"
    assert await harness.served_by(host, "/users/42?tab=posts") == "default/users"
    assert await harness.served_by(host, "/users/abc") == "404"


async def test_ingresses_for_one_host_merge_and_the_older_wins_a_conflict(
    harness: Harness,
) -> None:
    host = "shop.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(
                ("team-a", "web"), ("team-a", "api"), ("team-b", "api"), ("team-b", "cart")
            ),
            "a.yaml": ingress(
                "storefront",
                rule(host, path("/", "web"), path("/api", "api")),
                ns="team-a",
                created="2024-01-01T00:00:00Z",
            ),
            "b.yaml": ingress(
                "cart",
                rule(host, path("/cart", "cart"), path("/api", "api")),
                ns="team-b",
                created="2024-06-01T00:00:00Z",
            ),
        }
    )
    assert await harness.served_by(host, "/") == "team-a/web"
    assert await harness.served_by(host, "/cart/items") == "team-b/cart"
    assert await harness.served_by(host, "/api/v1") == "team-a/api"
    loser = harness.status_of("Ingress", "team-b", "cart")
    accepted = next(c for c in loser["conditions"] if c["type"] == "Accepted")
    assert accepted["status"] == "False" and accepted["reason"] == "PathConflict"
    assert "Ingress team-a/storefront" in accepted["message"]
    # Part of it is served, so it still reports the address.
    assert loser["loadBalancer"] == {"ingress": [{"ip": "127.0.0.1"}]}


async def test_default_backend_serves_hosts_no_rule_names(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "fallback"), ("default", "app")),
            "ing.yaml": ingress(
                "with-default",
                rule("app.example.com", path("/app", "app")),
                extra_spec="\n  defaultBackend: {service: {name: fallback, port: {name: http}}}",
            ),
        }
    )
    assert await harness.served_by("unknown.example.com", "/") == "default/fallback"
    assert await harness.served_by("unknown.example.com", "/any/path") == "default/fallback"
    assert await harness.served_by("app.example.com", "/app/1") == "default/app"
    # A host with rules has no fallback to the default backend (Contour's behaviour).
    assert await harness.served_by("app.example.com", "/other") == "404"


async def test_wildcard_host_matches_exactly_one_label(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "wild"), ("default", "exact")),
            "ing.yaml": ingress(
                "wild",
                rule("*.foo.com", path("/", "wild")) + rule("exact.foo.com", path("/", "exact")),
            ),
        }
    )
    assert await harness.served_by("bar.foo.com", "/") == "default/wild"
    assert await harness.served_by("bar.foo.com:8080", "/") == "default/wild"
    assert await harness.served_by("exact.foo.com", "/") == "default/exact"
    assert await harness.served_by("baz.bar.foo.com", "/") == "404"
    assert await harness.served_by("foo.com", "/") == "404"
    r = await harness.get("bar.foo.com", "/")
    assert r.json()["host"] == "bar.foo.com"


async def test_class_selection(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "svc")),
            "classes.yaml": """\
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: edge
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec:
  controller: turnout.dev/ingress-controller
""",
            "mine.yaml": ingress("mine", rule("mine.example.com", path("/", "svc"))),
            "edge.yaml": ingress(
                "edge", rule("edge.example.com", path("/", "svc")), class_name="edge"
            ),
            "classless.yaml": ingress(
                "classless", rule("classless.example.com", path("/", "svc")), class_name=None
            ),
            "nginx.yaml": ingress(
                "nginx", rule("nginx.example.com", path("/", "svc")), class_name="nginx"
            ),
            "annotated.yaml": ingress(
                "annotated",
                rule("annotated.example.com", path("/", "svc")),
                annotations="{kubernetes.io/ingress.class: nginx}",
            ),
        }
    )
    assert await harness.served_by("mine.example.com") == "default/svc"
    assert await harness.served_by("edge.example.com") == "default/svc"
    # The default IngressClass is turnout's: an Ingress without a class is served.
    assert await harness.served_by("classless.example.com") == "default/svc"
    assert await harness.served_by("nginx.example.com") == "404"
    # The annotation wins over ingressClassName: turnout.
    assert await harness.served_by("annotated.example.com") == "404"
    ours = {s.ref.name for s in harness.controller.statuses() if s.ref.kind == "Ingress"}
    assert ours == {"mine", "edge", "classless"}


async def test_missing_service_answers_503(harness: Harness) -> None:
    host = "missing.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "web")),
            "ing.yaml": ingress(
                "missing",
                rule(
                    host, path("/", "web"), path("/api", "gone"), path("/p", "web", port="name: x")
                ),
            ),
        }
    )
    assert (await harness.get(host, "/api")).status_code == 503
    assert (await harness.get(host, "/api/v1")).status_code == 503
    assert (await harness.get(host, "/p")).status_code == 503
    assert await harness.served_by(host, "/apis") == "default/web"
    status = harness.status_of("Ingress", "default", "missing")
    refs = next(c for c in status["conditions"] if c["type"] == "ResolvedRefs")
    assert refs["status"] == "False" and refs["reason"] == "ServiceNotFound"
    assert 'service "default/gone" not found' in refs["message"]


async def test_force_ssl_redirect_and_allow_http(harness: Harness) -> None:
    host = "redirect.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "web"), ("default", "login")),
            "web.yaml": ingress("web", rule(host, path("/", "web"))),
            "login.yaml": ingress(
                "login",
                rule(host, path("/login", "login")),
                annotations='{ingress.kubernetes.io/force-ssl-redirect: "true"}',
            ),
            "hidden.yaml": ingress(
                "hidden",
                rule(host, path("/hidden", "login")),
                annotations='{kubernetes.io/ingress.allow-http: "false"}',
            ),
        }
    )
    r = await harness.get(host, "/login?next=/")
    assert r.status_code == 301
    assert r.headers["location"] == f"https://{host}/login?next=/"
    assert await harness.served_by(host, "/") == "default/web"
    # Not served on plain HTTP: the shorter prefix of the other Ingress answers.
    assert await harness.served_by(host, "/hidden") == "default/web"


def tls_spec(host: str, secret: str) -> str:
    return f"\n  tls: [{{hosts: ['{host}'], secretName: {secret}}}]"


async def test_a_tls_entry_does_not_serve_another_ingress_host(harness: Harness) -> None:
    """Security: team-b lists team-a's hosts under `tls` with its own Secret but has no paths for
    them. Clients of team-a's hosts must never get team-b's certificate: not in place of team-a's
    own (team-b's Ingress is older), not for a host team-a serves on plain HTTP only."""
    shop, plain = "shop.tenant-a.example.com", "plain.tenant-a.example.com"
    ca = CA()
    a_cert = ca.issue(shop)
    b_cert = ca.issue(shop, plain)
    await harness.apply(
        {
            "svc.yaml": await harness.services(("team-a", "web"), ("team-b", "web")),
            "secrets.yaml": tls_secret_yaml("team-a", "cert", a_cert.cert_pem, a_cert.key_pem)
            + "\n---\n"
            + tls_secret_yaml("team-b", "cert", b_cert.cert_pem, b_cert.key_pem),
            "a.yaml": ingress(
                "a",
                rule(shop, path("/", "web")) + rule(plain, path("/", "web")),
                ns="team-a",
                created="2024-01-01T00:00:00Z",
                extra_spec=tls_spec(shop, "cert"),
            ),
            "b.yaml": ingress(
                "b",
                rule("b.tenant-b.example.com", path("/", "web")),
                ns="team-b",
                created="2020-01-01T00:00:00Z",
                annotations='{projectcontour.io/tls-minimum-protocol-version: "1.3"}',
                extra_spec=f"\n  tls: [{{hosts: ['{shop}', '{plain}'], secretName: cert}}]",
            ),
        }
    )
    context = ca.client_context()
    r = await harness.https_get(shop, "/", verify=context)
    assert r.status_code == 200 and r.json()["namespace"] == "team-a"
    assert await harness.peer_certificate(shop, context) == a_cert.der
    # Team-b's TLS-version annotation does not apply to team-a's host: TLS 1.2 still works.
    tls12 = ca.client_context()
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert await harness.peer_certificate(shop, tls12) == a_cert.der
    # No HTTPS for the plain host at all: no filter chain for its server name.
    with pytest.raises((ssl.SSLError, OSError)):
        await harness.peer_certificate(plain, context)
    assert await harness.served_by(plain) == "team-a/web"
    b_status = harness.status_of("Ingress", "team-b", "b")
    accepted = next(c for c in b_status["conditions"] if c["type"] == "Accepted")
    assert accepted["status"] == "True"
    assert f'this Ingress has no paths for host "{shop}"' in accepted["message"]
    assert f'this Ingress has no paths for host "{plain}"' in accepted["message"]

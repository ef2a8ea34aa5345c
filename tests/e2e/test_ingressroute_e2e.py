"""IngressRoute through a real Envoy: seed 000's examples, delegation across namespaces,
whole-object rejection, orphans, aliases, ownership and weights, as a client sees them."""

from __future__ import annotations

import ssl
import textwrap

import pytest

from tests.e2e.certs import CA, tls_secret_yaml
from tests.e2e.harness import Harness, service_yaml

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "ir.example.com"


def ir(name: str, namespace: str, spec: str, created: str | None = None) -> str:
    """One v1beta1 IngressRoute document; `spec` is the YAML under `spec:`."""
    ts = f'\n  creationTimestamp: "{created}"' if created else ""
    return (
        "apiVersion: contour.heptio.com/v1beta1\n"
        "kind: IngressRoute\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}{ts}\n"
        "spec:\n" + textwrap.indent(textwrap.dedent(spec).rstrip("\n") + "\n", "  ")
    )


async def services_on(harness: Harness, *specs: tuple[str, str, int]) -> str:
    """Services on the given ports, each backed by its own echo backend."""
    docs = [
        service_yaml(ns, name, port, await harness.backend(ns, name)) for ns, name, port in specs
    ]
    return "---\n".join(docs)


async def test_delegation_across_namespaces(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("infra", "web"), ("marketing", "blog")),
            "root.yaml": ir(
                "root",
                "infra",
                f"""\
                virtualhost: {{fqdn: {HOST}}}
                routes:
                  - {{match: /, services: [{{name: web, port: 80}}]}}
                  - {{match: /blog, delegate: {{name: blog, namespace: marketing}}}}
                """,
            ),
            "blog.yaml": ir(
                "blog",
                "marketing",
                """\
                routes:
                  - {match: /blog, services: [{name: blog, port: 80}]}
                """,
            ),
        }
    )
    assert await harness.served_by(HOST, "/blog/post-1") == "marketing/blog"
    assert await harness.served_by(HOST, "/about") == "infra/web"
    # Matching is a string prefix, as in Contour; the backend sees the path as sent.
    r = await harness.get(HOST, "/blogroll?page=2")
    assert r.json()["service"] == "blog" and r.json()["path"] == "/blogroll?page=2"
    status = harness.status_of("IngressRoute", "marketing", "blog")
    assert status["currentStatus"] == "valid"
    assert status["delegationStatuses"] == [
        {
            "state": {
                "connected": {"parent": {"name": "root", "namespace": "infra", "prefix": "/blog"}}
            }
        }
    ]


SEED_WORDPRESS = """\
apiVersion: contour.heptio.com/v1alpha1
kind: IngressRoute
metadata:
  name: heptio
  namespace: kube-system
spec:
  virtualhost:
    fqdn: heptio.com
    aliases:
      - www.heptio.com
  routes:
  - match: /
    delegate:
      name: wordpress
      namespace: heptio-wordpress
---
apiVersion: contour.heptio.com/v1alpha1
kind: IngressRoute
metadata:
  name: wordpress
  namespace: heptio-wordpress
spec:
  routes:
  - match: /
    service:
      name: wordpress-svc
      port: 8000
"""


async def test_seed000_services_in_the_delegated_namespace(harness: Harness) -> None:
    """Seed 000's kube-system/heptio example, verbatim: the root holds heptio.com (and its alias)
    and delegates / to the namespace that runs the service."""
    await harness.apply(
        {
            "svc.yaml": await services_on(harness, ("heptio-wordpress", "wordpress-svc", 8000)),
            "seed.yaml": SEED_WORDPRESS,
        }
    )
    assert await harness.served_by("heptio.com", "/") == "heptio-wordpress/wordpress-svc"
    assert await harness.served_by("www.heptio.com", "/2018/07/hello") == (
        "heptio-wordpress/wordpress-svc"
    )
    assert harness.status_of("IngressRoute", "kube-system", "heptio")["currentStatus"] == "valid"


async def test_seed000_child_routes_outside_the_prefix_reject_the_child(harness: Harness) -> None:
    """Seed 000's validation rules 1 and 2: a child route outside the delegated prefix rejects
    the whole child; its delegated prefix answers 502 rather than falling through."""
    await harness.apply(
        {
            "svc.yaml": await services_on(
                harness, ("root", "home", 80), ("child", "css", 80), ("child", "static", 80)
            ),
            "root.yaml": ir(
                "root",
                "root",
                """\
                virtualhost: {fqdn: heptio.com, aliases: [www.heptio.com]}
                routes:
                  - {match: /, services: [{name: home, port: 80}]}
                  - {match: /static, delegate: {name: child, namespace: child}}
                """,
            ),
            "child.yaml": ir(
                "child",
                "child",
                """\
                routes:
                  - {match: /static/css, services: [{name: static, port: 80}]}
                  - {match: /css, services: [{name: css, port: 80}]}
                """,
            ),
        }
    )
    assert await harness.served_by("heptio.com", "/static/css/site.css") == "502"
    assert await harness.served_by("www.heptio.com", "/static/js") == "502"
    # The child's /css never reached the host: the root's / serves it.
    assert await harness.served_by("heptio.com", "/css/site.css") == "root/home"
    child = harness.status_of("IngressRoute", "child", "child")
    assert child["currentStatus"] == "invalid"
    assert child["description"] == (
        'the path prefix "/css" does not match the parent\'s path prefix "/static"'
    )


SEED_GOOGLE = """\
apiVersion: contour.heptio.com/v1alpha1
kind: IngressRoute
metadata:
  name: google
  namespace: prod
spec:
  virtualhost:
    fqdn: www.google.com
    aliases:
      - www.google.com.au
      - google.com
    tls:
      secretName: google-tls
  routes:
  - match: /static
    service:
    - name: google-static
      port: 9000
  - match: /finance
    delegate:
      name: google-finance
      namespace: finance
  - match: /ads
    service:
    - name: ads-red
      port: 9090
    - name: ads-blue
      port: 9090
---
apiVersion: contour.heptio.com/v1alpha1
kind: IngressRoute
metadata:
  name: google-finance
  namespace: finance
spec:
  routes:
  - match: /finance
    service:
    - name: finance-app
      port: 9999
  - match: /finance/static
    service:
    - name: finance-static-content
      port: 8080
  - match: /finance/partners
    delegate:
      name: finance-partners
      namespace: partners
"""


async def test_seed000_google_example_over_tls(harness: Harness) -> None:
    """Seed 000's fully populated root, verbatim (its finance-partners target does not exist, so
    google-finance reports it and /finance/partners answers 502)."""
    ca = CA()
    issued = ca.issue("www.google.com", "google.com", "www.google.com.au")
    client: ssl.SSLContext = ca.client_context()
    await harness.apply(
        {
            "svc.yaml": await services_on(
                harness,
                ("prod", "google-static", 9000),
                ("prod", "ads-red", 9090),
                ("prod", "ads-blue", 9090),
                ("finance", "finance-app", 9999),
                ("finance", "finance-static-content", 8080),
            ),
            "secret.yaml": tls_secret_yaml("prod", "google-tls", issued.cert_pem, issued.key_pem),
            "seed.yaml": SEED_GOOGLE,
        }
    )

    async def over_tls(host: str, path: str) -> str:
        r = await harness.https_get(host, path, verify=client)
        if r.status_code != 200:
            return str(r.status_code)
        return f"{r.json()['namespace']}/{r.json()['service']}"

    assert await over_tls("www.google.com", "/static/logo.png") == "prod/google-static"
    assert await over_tls("google.com", "/finance") == "finance/finance-app"
    assert await over_tls("www.google.com.au", "/finance/static/a.css") == (
        "finance/finance-static-content"
    )
    assert await over_tls("www.google.com", "/ads/1") in {"prod/ads-red", "prod/ads-blue"}
    assert await over_tls("www.google.com", "/finance/partners/x") == "502"
    # Plain HTTP is upgraded.
    r = await harness.get("google.com", "/static/logo.png")
    assert r.status_code == 301
    assert r.headers["location"] == "https://google.com/static/logo.png"
    assert harness.status_of("IngressRoute", "prod", "google")["currentStatus"] == "valid"
    finance = harness.status_of("IngressRoute", "finance", "google-finance")
    assert finance["description"] == (
        'route "/finance/partners": delegate partners/finance-partners not found'
    )


async def test_a_rejected_object_serves_nothing_and_others_keep_serving(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("web", "home"), ("api", "api")),
            "broken.yaml": ir(
                "broken",
                "web",
                """\
                virtualhost: {fqdn: broken.example.com}
                routes:
                  - {match: /, services: [{name: home, port: 80}]}
                  - {match: /admin, services: [{name: not-there, port: 80}]}
                """,
            ),
            "root.yaml": ir(
                "root",
                "web",
                f"""\
                virtualhost: {{fqdn: {HOST}}}
                routes:
                  - {{match: /, services: [{{name: home, port: 80}}]}}
                  - {{match: /api, delegate: {{name: api, namespace: api}}}}
                  - {{match: /v2, delegate: {{name: v2, namespace: api}}}}
                """,
            ),
            "api.yaml": ir(
                "api", "api", "routes: [{match: /api, services: [{name: api, port: 80}]}]"
            )
            + "---\n"
            + ir(
                "v2",
                "api",
                """\
                routes:
                  - {match: /v2/users, services: [{name: api, port: 80}]}
                  - {match: /v2/orders, services: [{name: api, port: 80, weight: -1}]}
                """,
            ),
        }
    )
    # Validation rule 1: the missing Service of /admin takes / down with it, on that object only.
    assert await harness.served_by("broken.example.com", "/") == "404"
    broken = harness.status_of("IngressRoute", "web", "broken")
    assert broken["currentStatus"] == "invalid"
    assert broken["description"] == "Service [not-there:80] is invalid or missing"
    assert await harness.served_by(HOST, "/") == "web/home"
    assert await harness.served_by(HOST, "/api/users") == "api/api"
    # The rejected edge's prefix answers 502 instead of reaching the root's / route.
    assert await harness.served_by(HOST, "/v2/users") == "502"
    assert harness.status_of("IngressRoute", "api", "v2")["currentStatus"] == "invalid"


async def test_orphans_are_reported_and_never_served(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app"), ("team", "lost")),
            "root.yaml": ir(
                "root",
                "default",
                f"""\
                virtualhost: {{fqdn: {HOST}}}
                routes:
                  - {{match: /, services: [{{name: app, port: 80}}]}}
                """,
            ),
            "orphan.yaml": ir(
                "orphan", "team", "routes: [{match: /orphan, services: [{name: lost, port: 80}]}]"
            )
            + "---\n"
            + ir(
                "no-fqdn",
                "team",
                """\
                virtualhost: {}
                routes: [{match: /orphan, delegate: {name: orphan}}]
                """,
            ),
        }
    )
    orphan = harness.status_of("IngressRoute", "team", "orphan")
    assert orphan["currentStatus"] == "orphaned"
    assert orphan["description"] == (
        "this IngressRoute is not part of a delegation chain from a root IngressRoute"
    )
    assert orphan["delegationStatuses"] == [
        {"state": {"orphaned": {"lastParent": {"name": "no-fqdn", "namespace": "team"}}}}
    ]
    assert await harness.served_by(HOST, "/orphan") == "default/app"


async def test_aliases_serve_the_same_routes(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app"), ("team", "docs")),
            "root.yaml": ir(
                "site",
                "default",
                """\
                virtualhost:
                  fqdn: alias.example.com
                  aliases: [www.alias.example.com, alias.example.net]
                routes:
                  - {match: /, services: [{name: app, port: 80}]}
                  - {match: /docs, delegate: {name: docs, namespace: team}}
                """,
            ),
            "docs.yaml": ir(
                "docs", "team", "routes: [{match: /docs, services: [{name: docs, port: 80}]}]"
            ),
        }
    )
    for host in ("alias.example.com", "www.alias.example.com", "ALIAS.example.net"):
        assert await harness.served_by(host, "/") == "default/app", host
        assert await harness.served_by(host, "/docs/intro") == "team/docs", host
    assert await harness.served_by("other.alias.example.com", "/") == "404"


async def test_fqdn_owned_by_an_older_httpproxy(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("team-a", "a"), ("team-b", "b")),
            "proxy.yaml": f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: first, namespace: team-a, creationTimestamp: "2019-01-01T00:00:00Z"}}
spec:
  virtualhost: {{fqdn: {HOST}}}
  routes:
    - services: [{{name: a, port: 80}}]
""",
            "ir.yaml": ir(
                "second",
                "team-b",
                f"""\
                virtualhost: {{fqdn: {HOST}}}
                routes: [{{match: /, services: [{{name: b, port: 80}}]}}]
                """,
                created="2024-01-01T00:00:00Z",
            ),
        }
    )
    assert await harness.served_by(HOST, "/") == "team-a/a"
    second = harness.status_of("IngressRoute", "team-b", "second")
    assert second["description"] == f'fqdn "{HOST}" is already owned by HTTPProxy team-a/first'


async def test_weighted_split_within_tolerance(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "stable"), ("default", "canary")),
            "root.yaml": ir(
                "weights",
                "default",
                f"""\
                virtualhost: {{fqdn: {HOST}}}
                routes:
                  - match: /
                    services:
                      - {{name: stable, port: 80, weight: 80}}
                      - {{name: canary, port: 80, weight: 20, strategy: Random}}
                """,
            ),
        }
    )
    n = 400
    counts = await harness.distribution(HOST, "/", n)
    assert set(counts) == {"default/stable", "default/canary"}
    share = counts["default/canary"] / n
    # Binomial(400, 0.2) has a standard deviation of 2%; 0.12-0.28 is four of them.
    assert 0.12 <= share <= 0.28, counts

"""HTTPProxy matching through a real Envoy: query parameters, path kinds and their precedence,
header ignoreCase / treatMissingAsEmpty, the seed 001 cookie and user-agent shorthands, and
ingress class selection. Each test checks which backend answered, so Envoy and the evaluator
(the fixtures) are held to the same meaning."""

from __future__ import annotations

import json

import pytest

from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")


def proxy(name: str, fqdn: str | None, body: str, ns: str = "default", extra: str = "") -> str:
    vhost = f"\n  virtualhost:\n    fqdn: {fqdn}" if fqdn else ""
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata:
  name: {name}
  namespace: {ns}{extra}
spec:{vhost}
{body}"""


async def test_query_parameter_operators(harness: Harness) -> None:
    host = "query.example.com"
    names = ("exact", "exact-ci", "prefix", "suffix", "regex", "contains", "present", "app")
    await harness.apply(
        {
            "svc.yaml": await harness.services(*(("default", n) for n in names)),
            "proxy.yaml": proxy(
                "query",
                host,
                """\
  routes:
    - conditions: [{prefix: /exact}, {queryParameter: {name: channel, exact: Beta}}]
      services: [{name: exact, port: 80}]
    - conditions: [{prefix: /ci}, {queryParameter: {name: channel, exact: Beta, ignoreCase: true}}]
      services: [{name: exact-ci, port: 80}]
    - conditions: [{prefix: /prefix}, {queryParameter: {name: region, prefix: eu-}}]
      services: [{name: prefix, port: 80}]
    - conditions:
        - prefix: /suffix
        - queryParameter: {name: file, suffix: .JSON, ignoreCase: true}
      services: [{name: suffix, port: 80}]
    - conditions: [{prefix: /regex}, {queryParameter: {name: id, regex: "[0-9]+"}}]
      services: [{name: regex, port: 80}]
    - conditions: [{prefix: /contains}, {queryParameter: {name: q, contains: kube}}]
      services: [{name: contains, port: 80}]
    - conditions: [{prefix: /present}, {queryParameter: {name: debug, present: true}}]
      services: [{name: present, port: 80}]
    - conditions: [{prefix: /raw}, {queryParameter: {name: p, exact: "a+b/c"}}]
      services: [{name: exact, port: 80}]
    - services: [{name: app, port: 80}]
""",
            ),
        }
    )
    cases = {
        "/exact?channel=Beta": "default/exact",
        "/exact?channel=beta": "default/app",
        # Parameter names are case-sensitive, and only the first value of a name counts.
        "/exact?Channel=Beta": "default/app",
        "/exact?channel=stable&channel=Beta": "default/app",
        "/ci?channel=BETA": "default/exact-ci",
        "/prefix?region=eu-west-1": "default/prefix",
        "/prefix?region=us-east-1": "default/app",
        "/suffix?file=data.json": "default/suffix",
        "/suffix?file=data.json.gz": "default/app",
        "/regex?id=42": "default/regex",
        "/regex?id=42a": "default/app",
        "/contains?q=minikube": "default/contains",
        "/contains?q=Kubernetes": "default/app",
        "/present?debug": "default/present",
        "/present?a=1&debug=": "default/present",
        "/present?debugging=1": "default/app",
        # Values are matched as written in the request line: not percent-decoded, "+" is "+".
        "/raw?p=a+b/c": "default/exact",
        "/raw?p=a%2Bb%2Fc": "default/app",
    }
    got = {path: await harness.served_by(host, path) for path in cases}
    assert got == cases
    assert harness.status_of("HTTPProxy", "default", "query")["currentStatus"] == "valid"


async def test_path_kind_precedence_and_tie_breaks(harness: Harness) -> None:
    host = "precedence.example.com"
    names = ("exact", "regex", "long-regex", "prefix", "method", "headers", "query", "root")
    await harness.apply(
        {
            "svc.yaml": await harness.services(*(("default", n) for n in names)),
            # Declared in the worst order: the result must not depend on it.
            "proxy.yaml": proxy(
                "precedence",
                host,
                """\
  routes:
    - services: [{name: root, port: 80}]
    - conditions: [{prefix: /shop}, {queryParameter: {name: q, present: true}}]
      services: [{name: query, port: 80}]
    - conditions:
        - prefix: /shop
        - header: {name: x-a, present: true}
        - header: {name: x-b, present: true}
      services: [{name: headers, port: 80}]
    - conditions: [{prefix: /shop}, {header: {name: ":method", exact: POST}}]
      services: [{name: method, port: 80}]
    - conditions: [{prefix: /shop/cart/items}]
      services: [{name: prefix, port: 80}]
    - conditions: [{regex: "/shop/.*"}]
      services: [{name: regex, port: 80}]
    - conditions: [{regex: "/shop/cart/[a-z]+"}]
      services: [{name: long-regex, port: 80}]
    - conditions: [{exact: /shop/cart/items}]
      services: [{name: exact, port: 80}]
""",
            ),
        }
    )
    # Exact, then regex (longer first), then prefix: the path decides before anything else.
    assert await harness.served_by(host, "/shop/cart/items") == "default/exact"
    assert await harness.served_by(host, "/shop/cart/items?q=1") == "default/exact"
    assert await harness.served_by(host, "/shop/cart/other") == "default/long-regex"
    assert await harness.served_by(host, "/shop/cart/items/1") == "default/regex"
    # Same prefix: a :method match, then more headers, then more query parameters.
    both = {"x-a": "1", "x-b": "1"}
    r = await harness.get(host, "/shop?q=1", headers=both, method="POST")
    assert r.status_code == 200 and r.json()["service"] == "method"
    assert await harness.served_by(host, "/shop?q=1", both) == "default/headers"
    assert await harness.served_by(host, "/shop?q=1", {"x-a": "1"}) == "default/query"
    assert await harness.served_by(host, "/shop", {"x-a": "1"}) == "default/root"


async def test_header_ignore_case_and_treat_missing_as_empty(harness: Harness) -> None:
    host = "headers.example.com"
    names = ("exact", "notcontains", "notexact-missing", "regex", "app")
    await harness.apply(
        {
            "svc.yaml": await harness.services(*(("default", n) for n in names)),
            "proxy.yaml": proxy(
                "headers",
                host,
                """\
  routes:
    - conditions: [{prefix: /exact}, {header: {name: X-Env, exact: Prod, ignoreCase: true}}]
      services: [{name: exact, port: 80}]
    - conditions:
        - prefix: /notcontains
        - header: {name: x-env, notcontains: prod, ignoreCase: true}
      services: [{name: notcontains, port: 80}]
    - conditions:
        - prefix: /missing
        - header: {name: x-tier, notexact: gold, treatMissingAsEmpty: true}
      services: [{name: notexact-missing, port: 80}]
    - conditions:
        - prefix: /regex
        - header: {name: x-env, regex: "prod-[0-9]+", ignoreCase: true}
      services: [{name: regex, port: 80}]
    - services: [{name: app, port: 80}]
""",
            ),
        }
    )
    assert await harness.served_by(host, "/exact", {"x-env": "PROD"}) == "default/exact"
    assert await harness.served_by(host, "/exact", {"x-env": "production"}) == "default/app"
    assert await harness.served_by(host, "/notcontains", {"x-env": "PreProd"}) == "default/app"
    assert await harness.served_by(host, "/notcontains", {"x-env": "dev"}) == "default/notcontains"
    # Without treatMissingAsEmpty an inverted match fails on a missing header; with it, passes.
    assert await harness.served_by(host, "/notcontains") == "default/app"
    assert await harness.served_by(host, "/missing") == "default/notexact-missing"
    assert await harness.served_by(host, "/missing", {"x-tier": "gold"}) == "default/app"
    # ignoreCase does not reach a regex: the proxy is valid, with a warning that says so.
    assert await harness.served_by(host, "/regex", {"x-env": "prod-1"}) == "default/regex"
    assert await harness.served_by(host, "/regex", {"x-env": "PROD-1"}) == "default/app"
    condition = harness.status_of("HTTPProxy", "default", "headers")["conditions"][0]
    assert condition["status"] == "True"
    assert [w["reason"] for w in condition["warnings"]] == ["IgnoredField"]


async def test_cookie_and_user_agent_shorthands(harness: Harness) -> None:
    host = "seed001.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(
                ("default", "cookiebackend"),
                ("default", "backend-default"),
                ("team-b", "chrome"),
                ("team-b", "chrome-beta"),
            ),
            # Seed 001's own spelling: list items `- cookie: ...` and `- user-agent: ...`.
            "root.yaml": proxy(
                "root",
                host,
                """\
  includes:
    - name: browsers
      namespace: team-b
      conditions:
        - prefix: /app
        - user-agent: Chrome
  routes:
    - conditions:
        - prefix: /foo
        - cookie: user=test
      services: [{name: cookiebackend, port: 80}]
    - services: [{name: backend-default, port: 80}]
""",
            ),
            "browsers.yaml": proxy(
                "browsers",
                None,
                """\
  routes:
    - services: [{name: chrome, port: 80}]
    - conditions: [{cookie: beta=1}]
      services: [{name: chrome-beta, port: 80}]
""",
                ns="team-b",
            ),
        }
    )
    chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/124.0 Safari/537.36"
    cookie = {"Cookie": "theme=dark; user=test"}
    assert await harness.served_by(host, "/foo", cookie) == "default/cookiebackend"
    assert await harness.served_by(host, "/foo", {"Cookie": "user=Test"}) == (
        "default/backend-default"
    )
    assert await harness.served_by(host, "/foo") == "default/backend-default"
    assert await harness.served_by(host, "/app", {"User-Agent": chrome}) == "team-b/chrome"
    assert (
        await harness.served_by(host, "/app/x", {"User-Agent": chrome, "Cookie": "beta=1"})
        == "team-b/chrome-beta"
    )
    assert await harness.served_by(host, "/app", {"User-Agent": "curl/8.5"}) == (
        "default/backend-default"
    )
    assert harness.status_of("HTTPProxy", "team-b", "browsers")["currentStatus"] == "valid"


async def test_ingress_class_selection(harness: Harness) -> None:
    files = {
        "svc.yaml": await harness.services(("default", "svc")),
        "none.yaml": proxy(
            "no-class", "none.example.com", "  routes: [{services: [{name: svc, port: 80}]}]"
        ),
        "turnout.yaml": proxy(
            "turnout-class",
            "turnout.example.com",
            "  ingressClassName: turnout\n  routes: [{services: [{name: svc, port: 80}]}]",
        ),
        "internal.yaml": proxy(
            "internal-class",
            "internal.example.com",
            "  routes: [{services: [{name: svc, port: 80}]}]",
            extra="\n  annotations: {projectcontour.io/ingress.class: internal}",
        ),
    }

    def proxies() -> set[str]:
        return {s.ref.name for s in harness.controller.statuses() if s.ref.kind == "HTTPProxy"}

    # The default class serves proxies of no class and of class "turnout".
    await harness.apply(files)
    assert await harness.served_by("none.example.com") == "default/svc"
    assert await harness.served_by("turnout.example.com") == "default/svc"
    assert await harness.served_by("internal.example.com") == "404"
    assert proxies() == {"no-class", "turnout-class"}

    # A configured class serves exactly that class; the others get no routes and no status.
    await harness.apply(files, options={"ingress_class_name": "internal"})
    assert await harness.served_by("internal.example.com") == "default/svc"
    assert await harness.served_by("none.example.com") == "404"
    assert await harness.served_by("turnout.example.com") == "404"
    assert proxies() == {"internal-class"}


async def test_regex_within_envoys_program_size_is_served(harness: Harness) -> None:
    # Envoy counts `/x.{20}` as 46 (its RE2 reads `.` as one byte); RE2's default UTF-8 count is
    # 166, which used to refuse it. `/y.{48}` is 102 as Envoy counts it: over the limit of 100.
    host = "regex-size.example.com"
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "wide"), ("default", "root")),
            "proxy.yaml": proxy(
                "regex-size",
                host,
                """\
  routes:
    - conditions: [{regex: "/x.{20}"}]
      services: [{name: wide, port: 80}]
    - services: [{name: root, port: 80}]
""",
            ),
            "too-large.yaml": proxy(
                "regex-too-large",
                "regex-too-large.example.com",
                """\
  routes:
    - conditions: [{regex: "/y.{48}"}]
      services: [{name: wide, port: 80}]
""",
            ),
        }
    )
    assert harness.status_of("HTTPProxy", "default", "regex-size")["currentStatus"] == "valid"
    assert await harness.served_by(host, "/x" + "abcde" * 4) == "default/wide"
    assert await harness.served_by(host, "/x" + "abc") == "default/root"
    assert await harness.served_by(host, "/x" + "abcde" * 5) == "default/root"
    refused = harness.status_of("HTTPProxy", "default", "regex-too-large")
    assert refused["currentStatus"] == "invalid"
    assert "RE2 program size 102 exceeds Envoy's limit of 100" in json.dumps(refused)


async def test_a_host_with_many_routes_is_a_matcher_tree_with_the_same_first_match(
    harness: Harness,
) -> None:
    """From `--matcher-tree-min-routes` (128 by default) routes, Envoy gets the host as a matcher
    tree; the routes Envoy picks stay those the list order gives (docs/data-plane.md)."""
    host = "many-routes.example.com"
    routes = "".join(
        f"""\
    - conditions: [{{prefix: /team-{i}/}}]
      services: [{{name: {("even", "odd")[i % 2]}, port: 80}}]
"""
        for i in range(150)
    )
    routes += """\
    - conditions: [{prefix: /team-7/}, {header: {name: x-first, present: true}}]
      services: [{name: header, port: 80}]
    - services: [{name: root, port: 80}]
"""
    await harness.apply(
        {
            "svc.yaml": await harness.services(
                *(("default", n) for n in ("even", "odd", "header", "root"))
            ),
            "proxy.yaml": proxy("many-routes", host, "  routes:\n" + routes),
        }
    )
    dump = await harness.envoy_admin("/config_dump?resource=dynamic_route_configs")
    vhosts = [
        vh
        for config in dump["configs"]
        for vh in config["route_config"].get("virtual_hosts", [])
        if host in vh["domains"]
    ]
    assert len(vhosts) == 1 and "matcher" in vhosts[0] and "routes" not in vhosts[0]
    cases = {
        "/team-149/x": "default/odd",
        "/team-148/": "default/even",
        "/team-14/x?q=/team-149/": "default/even",
        "/team-1/x": "default/odd",
        "/team-1": "default/root",
        "/team-150/": "default/root",
        "/other": "default/root",
    }
    got = {path: await harness.served_by(host, path) for path in cases}
    assert got == cases
    # Equal prefixes: the header route is more specific and comes first in Contour's order.
    assert await harness.served_by(host, "/team-7/a", {"x-first": "1"}) == "default/header"
    assert await harness.served_by(host, "/team-7/a") == "default/odd"

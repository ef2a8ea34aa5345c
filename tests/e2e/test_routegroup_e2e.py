"""Skipper RouteGroups (seed 003) through a real Envoy: the seed's use cases, Skipper's priority,
weighted traffic switching measured as a distribution, and statuses naming what is refused."""

from __future__ import annotations

import textwrap
from collections import Counter

import httpx
import pytest

from tests.e2e.certs import CA, tls_secret_yaml
from tests.e2e.harness import Harness
from tests.e2e.stats import within_sigmas

pytestmark = pytest.mark.asyncio(loop_scope="session")


def routegroup(name: str, spec: str, namespace: str = "default", annotations: str = "") -> str:
    ann = f"\n  annotations: {annotations}" if annotations else ""
    return (
        "apiVersion: zalando.org/v1\nkind: RouteGroup\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}{ann}\n"
        f"spec:\n{textwrap.indent(textwrap.dedent(spec).strip(), '  ')}\n"
    )


async def apply_routegroups(harness: Harness, specs: dict[str, str], *services: str) -> None:
    """Applies a RouteGroup of each name and spec in `specs` and an echo Service of each name in
    `services`, all in `default`."""
    files = {f"rg-{name}.yaml": routegroup(name, spec) for name, spec in specs.items()}
    files["svc.yaml"] = await harness.services(*(("default", s) for s in services))
    await harness.apply(files)


async def apply_routegroup(harness: Harness, name: str, spec: str, *services: str) -> None:
    """Applies RouteGroup `name` of `spec` and an echo Service of each name, all in `default`."""
    await apply_routegroups(harness, {name: spec}, *services)


def service_backend(name: str, service: str) -> str:
    return f"- {{name: {name}, type: service, serviceName: {service}, servicePort: 80}}"


def loopback_spec(host: str, service: str, routes: str) -> str:
    """A RouteGroup spec on `host` whose default backend "app" is `service`, beside a loopback
    backend "loop"; `routes` follow the catch-all `pathSubtree: /`."""
    return (
        f"hosts: [{host}]\nbackends:\n{service_backend('app', service)}\n"
        "- {name: loop, type: loopback}\ndefaultBackends: [{backendName: app}]\n"
        f"routes:\n- pathSubtree: /\n{textwrap.dedent(routes).strip()}\n"
    )


def condition(status: dict[str, object], type_: str) -> dict[str, object]:
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    found = [c for c in conditions if c["type"] == type_]
    assert len(found) == 1, conditions
    return dict(found[0])


def accepted_of(harness: Harness, name: str) -> dict[str, object]:
    """The Accepted condition in the status of RouteGroup `name` in `default`."""
    return condition(dict(harness.status_of("RouteGroup", "default", name)), "Accepted")


def assert_filter_refused(harness: Harness, name: str, message_start: str) -> None:
    """RouteGroup `name` is not accepted for the filter its Accepted message starts naming."""
    accepted = accepted_of(harness, name)
    assert accepted["reason"] == "FilterNotSupported"
    assert str(accepted["message"]).startswith(message_start), accepted


async def fresh_client_gets(
    harness: Harness, n: int, headers: dict[str, str]
) -> list[tuple[str, str]]:
    """Who answers each of `n` GETs of / sent as by a new client (no cookie kept from an earlier
    answer): the service's name, or the status code, and the `canary` cookie set."""
    answers: list[tuple[str, str]] = []
    async with httpx.AsyncClient(base_url=harness.base_url, timeout=5.0) as client:
        for _ in range(n):
            client.cookies.clear()
            r = await client.get("/", headers=headers)
            answer = str(r.json()["service"]) if r.status_code == 200 else str(r.status_code)
            answers.append((answer, r.cookies.get("canary") or ""))
    return answers


async def test_simplicity(harness: Harness) -> None:
    """Seed 003 "Simplicity", verbatim: two hosts, one Service, `path: /`."""
    await apply_routegroup(
        harness,
        "myapp",
        """
        hosts:
        - example.org
        - myapp.example.org
        backends:
        - name: myapp
          type: service
          serviceName: myapp-svc
          servicePort: 80
        routes:
        - path: /
          backends:
          - backendName: myapp
        """,
        "myapp-svc",
    )
    assert await harness.served_by("example.org", "/") == "default/myapp-svc"
    assert await harness.served_by("myapp.example.org", "/") == "default/myapp-svc"
    # Skipper's Path is exact: nothing else of the host is routed.
    assert await harness.served_by("example.org", "/other") == "404"
    status = harness.status_of("RouteGroup", "default", "myapp")
    assert status["loadBalancer"] == {"routegroup": [{"ip": "127.0.0.1"}]}
    assert condition(dict(status), "Accepted")["status"] == "True"
    assert condition(dict(status), "ResolvedRefs")["status"] == "True"


async def test_several_paths_with_default_backends(harness: Harness) -> None:
    await apply_routegroup(
        harness,
        "myapp",
        """
        hosts: [example.org, myapp.example.org]
        backends:
        - name: myapp
          type: service
          serviceName: myapp-svc
          servicePort: 80
        defaultBackends:
        - backendName: myapp
        routes:
        - path: /articles
        - path: /articles/shoes
        - path: /order
        """,
        "myapp-svc",
    )
    for path in ("/articles", "/articles/shoes", "/order"):
        assert await harness.served_by("myapp.example.org", path) == "default/myapp-svc"
    assert await harness.served_by("example.org", "/articles/boots") == "404"
    assert await harness.served_by("example.org", "/") == "404"


async def test_redirect_and_migration(harness: Harness) -> None:
    """Seed 003's redirect-and-migration example in the shipped CRD's terms: the redirect is
    served, and the loopback migration sends /api, rewritten to /, round again to the route for
    "/" and its Service; the status says the RouteGroup is served."""
    await apply_routegroup(
        harness,
        "my-routes",
        """
        hosts: [www.complex.example.org, complex.example.org]
        backends:
        - name: my-service
          type: service
          serviceName: my-service-v1
          servicePort: 80
        - name: redirect
          type: shunt
        - name: migration
          type: loopback
        defaultBackends:
        - backendName: my-service
        routes:
        - path: /
        - path: /api
          backends:
          - backendName: migration
          filters:
          - modPath("/api", "/")
        - path: /login
          methods: [GET]
          backends:
          - backendName: redirect
          filters:
          - redirectTo(308, "https://login.example.org/")
        """,
        "my-service-v1",
    )
    assert await harness.served_by("complex.example.org", "/") == "default/my-service-v1"
    r = await harness.get("www.complex.example.org", "/login")
    assert r.status_code == 308
    assert r.headers["location"] == "https://login.example.org/"
    assert (await harness.get("complex.example.org", "/login", method="POST")).status_code == 404
    # The migration: modPath turns /api into /, and the loopback routes it again, to the route
    # for "/" and its Service.
    r = await harness.get("complex.example.org", "/api")
    assert r.status_code == 200
    assert (r.json()["service"], r.json()["path"]) == ("my-service-v1", "/")
    # Path("/api") takes /api only: /api/x matches no route.
    assert (await harness.get("complex.example.org", "/api/x")).status_code == 404
    status = harness.status_of("RouteGroup", "default", "my-routes")
    assert condition(dict(status), "Accepted")["status"] == "True"


async def test_loopback_comes_round_once(harness: Harness) -> None:
    """A loopback route the looped request meets again answers 500 (Skipper: after 9 loops)."""
    await apply_routegroup(
        harness,
        "loops",
        f"""
        hosts: [loops.example.org]
        backends:
        {service_backend("app", "app")}
        - {{name: again, type: loopback}}
        defaultBackends: [{{backendName: app}}]
        routes:
        - pathSubtree: /
        - pathSubtree: /v1
          filters: ['modPath("^/v1", "/v2")']
          backends: [{{backendName: again}}]
        - pathSubtree: /v2
          filters: ['setRequestHeader("X-Migrated", "yes")']
        - pathSubtree: /forever
          backends: [{{backendName: again}}]
        """,
        "app",
    )
    r = await harness.get("loops.example.org", "/v1/items")
    assert r.status_code == 200
    assert r.json()["path"] == "/v2/items"
    assert r.json()["headers"].get("x-migrated") == "yes"
    r = await harness.get("loops.example.org", "/forever")
    assert r.status_code == 500
    assert r.text == "max loopbacks reached"


async def test_seed_example_as_written_is_refused_with_reasons(harness: Harness) -> None:
    """The same seed example as written: `method`, `backend` and an unterminated string."""
    await apply_routegroup(
        harness,
        "my-routes",
        """
        hosts: [complex.example.org]
        backends:
        - name: my-service
          type: service
          serviceName: my-service-v1
          servicePort: 80
        - name: redirect
          type: shunt
        defaultBackends:
        - backendName: my-service
        routes:
        - path: /
        - path: /login
          method:
          - GET
          backend: redirect
          filters:
          - redirectTo(308, "https://login.example.org/)
        """,
        "my-service-v1",
    )
    assert await harness.served_by("complex.example.org", "/") == "404"
    status = harness.status_of("RouteGroup", "default", "my-routes")
    accepted = condition(dict(status), "Accepted")
    message = str(accepted["message"])
    assert accepted["status"] == "False"
    assert 'spec.routes[1].method: unknown field "method"' in message
    assert 'spec.routes[1].backend: unknown field "backend"' in message
    assert "spec.routes[1].filters[0]: " in message
    assert status["loadBalancer"] == {}


async def test_traffic_switching_80_20(harness: Harness) -> None:
    await apply_routegroup(
        harness,
        "switch",
        f"""
        hosts: [api.example.org]
        backends:
        {service_backend("v1", "api-v1")}
        {service_backend("v2", "api-v2")}
        defaultBackends:
        - {{backendName: v1, weight: 80}}
        - {{backendName: v2, weight: 20}}
        routes:
        - pathSubtree: /api
        - path: /api/resource
          predicates: ['Header("X-Team", "a")']
        """,
        "api-v1",
        "api-v2",
    )
    n = 500
    counts = await harness.distribution("api.example.org", "/api/items", n)
    assert counts["default/api-v1"] + counts["default/api-v2"] == n, counts
    assert within_sigmas(counts["default/api-v2"], n, 0.2), counts
    # Every route of the RouteGroup switches together.
    counts = await harness.distribution("api.example.org", "/api/resource", 300)
    assert counts["default/api-v1"] + counts["default/api-v2"] == 300, counts
    assert within_sigmas(counts["default/api-v2"], 300, 0.2), counts


async def test_ab_test_with_canary_cookie(harness: Harness) -> None:
    """Seed 003's A/B test: 10% of the requests without a cookie go to variant A and get
    `canary=A`, the others `canary=B`; `canary=A` keeps a client on A."""
    await apply_routegroup(
        harness,
        "my-routes",
        f"""
        hosts: [ab.example.org]
        backends:
        {service_backend("variant-a", "service-a")}
        {service_backend("variant-b", "service-b")}
        defaultBackends:
        - backendName: variant-b
        routes:
        - path: /
          filters:
          - responseCookie("canary", "A")
          predicates:
          - Traffic(.1)
          backends:
          - backendName: variant-a
        - path: /
          filters:
          - responseCookie("canary", "B")
        - path: /
          predicates:
          - Cookie("canary", "team-foo")
        - path: /
          predicates:
          - Cookie("canary", "A")
          backends:
          - backendName: variant-a
        - path: /
          predicates:
          - Cookie("canary", "B")
        """,
        "service-a",
        "service-b",
    )
    n = 400
    seen = Counter(await fresh_client_gets(harness, n, {"Host": "ab.example.org"}))
    # The cookie a client gets names the variant that answered.
    assert set(seen) <= {("service-a", "A"), ("service-b", "B")}, seen
    assert within_sigmas(seen[("service-a", "A")], n, 0.1), seen
    for _ in range(20):
        assert (
            await harness.served_by("ab.example.org", "/", {"Cookie": "canary=A"})
            == "default/service-a"
        )
    # The Traffic(.1) route weighs as much as the Cookie routes and is written first: it comes
    # first for every client, so one in ten with canary=B moves to A, as in Skipper.
    n = 300
    with_b = await fresh_client_gets(harness, n, {"Host": "ab.example.org", "Cookie": "canary=B"})
    moved = Counter(answer for answer, _ in with_b)
    assert moved["service-a"] + moved["service-b"] == n, moved
    assert within_sigmas(moved["service-a"], n, 0.1), moved


async def test_chained_traffic_predicates_split_as_skipper_does(harness: Harness) -> None:
    """Traffic(.2) then Traffic(.3) at one node: Skipper gives the second 30% of the remaining
    80% (24%), the rest goes on; Envoy's single draw is given chained thresholds for it."""
    await apply_routegroup(
        harness,
        "chain",
        f"""
        hosts: [chain.example.org]
        backends:
        {service_backend("first", "first")}
        {service_backend("second", "second")}
        {service_backend("rest", "rest")}
        defaultBackends: [{{backendName: rest}}]
        routes:
        - pathSubtree: /
          predicates: ["Traffic(.2)"]
          backends: [{{backendName: first}}]
        - pathSubtree: /
          predicates: ["Traffic(.3)"]
          backends: [{{backendName: second}}]
        - pathSubtree: /
        """,
        "first",
        "second",
        "rest",
    )
    n = 600
    counts = await harness.distribution("chain.example.org", "/x", n)
    assert sum(counts.values()) == n and len(counts) == 3, counts
    assert within_sigmas(counts["default/first"], n, 0.2), counts
    assert within_sigmas(counts["default/second"], n, 0.8 * 0.3), counts


async def test_read_write_method_split(harness: Harness) -> None:
    await apply_routegroup(
        harness,
        "rw",
        f"""
        hosts: [rw.example.org]
        backends:
        {service_backend("read", "reader")}
        {service_backend("write", "writer")}
        defaultBackends: [{{backendName: read}}]
        routes:
        - pathSubtree: /
          methods: [GET, HEAD]
        - pathSubtree: /
          methods: [POST, PUT, PATCH, DELETE]
          backends: [{{backendName: write}}]
        """,
        "reader",
        "writer",
    )
    for method, expected in (("GET", "reader"), ("POST", "writer"), ("DELETE", "writer")):
        r = await harness.get("rw.example.org", "/items/1", method=method)
        assert r.status_code == 200
        assert r.json()["service"] == expected, method
    assert (await harness.get("rw.example.org", "/items", method="HEAD")).status_code == 200
    assert (await harness.get("rw.example.org", "/items", method="OPTIONS")).status_code == 404


async def test_path_subtree_vs_path(harness: Harness) -> None:
    """Route order in the object does not matter: the deeper Path wins over the PathSubtree
    above it, PathSubtree is segment-wise, and a route without a path comes last."""
    await apply_routegroup(
        harness,
        "tree",
        f"""
        hosts: [tree.example.org]
        backends:
        {service_backend("root", "root")}
        {service_backend("api", "api")}
        {service_backend("health", "health")}
        defaultBackends: [{{backendName: root}}]
        routes:
        - pathSubtree: /
        - pathSubtree: /api
          backends: [{{backendName: api}}]
        - path: /api/health
          backends: [{{backendName: health}}]
        - pathRegexp: ^/api
          predicates: ['Weight(100)']
          backends: [{{backendName: health}}]
        """,
        "root",
        "api",
        "health",
    )
    host = "tree.example.org"
    assert await harness.served_by(host, "/api/health") == "default/health"
    assert await harness.served_by(host, "/api") == "default/api"
    assert await harness.served_by(host, "/api/users") == "default/api"
    assert await harness.served_by(host, "/apis") == "default/root"
    r = await harness.get(host, "/api/users?page=2")
    assert r.json()["path"] == "/api/users?page=2"


async def test_tree_nodes_shared_by_path_and_path_subtree(harness: Harness) -> None:
    """Skipper's tree nodes through Envoy: Path("/a/") and PathSubtree("/a") with a method meet
    at the node /a/, where the method's weight wins; /a and below stay the subtree's. The free
    wildcard of Path("/b/*rest") takes a non-empty rest, so /b goes to the static Path("/b")."""
    await apply_routegroup(
        harness,
        "nodes",
        f"""
        hosts: [nodes.example.org]
        backends:
        {service_backend("slash", "slash")}
        {service_backend("subtree", "subtree")}
        {service_backend("static", "static")}
        - {{name: s, type: shunt}}
        defaultBackends: [{{backendName: s}}]
        routes:
        - path: /a/
          backends: [{{backendName: slash}}]
        - pathSubtree: /a
          methods: [GET]
          backends: [{{backendName: subtree}}]
        - path: /b
          backends: [{{backendName: static}}]
        - path: /b/*rest
          filters: ['status(202)', 'inlineContent("rest")']
        """,
        "slash",
        "subtree",
        "static",
    )
    host = "nodes.example.org"
    for path in ("/a", "/a/", "/a/x/y"):
        assert await harness.served_by(host, path) == "default/subtree", path
    r = await harness.get(host, "/a/", method="POST")
    assert (r.status_code, r.json()["service"]) == (200, "slash")
    assert (await harness.get(host, "/a/x", method="POST")).status_code == 404
    assert await harness.served_by(host, "/b") == "default/static"
    r = await harness.get(host, "/b/x")
    assert (r.status_code, r.text) == (202, "rest")
    assert (await harness.get(host, "/b/")).status_code == 404


async def test_unsupported_filter_reported_in_status(harness: Harness) -> None:
    await apply_routegroup(
        harness,
        "guarded",
        f"""
        hosts: [guarded.example.org]
        backends:
        {service_backend("app", "app")}
        defaultBackends: [{{backendName: app}}]
        routes:
        - pathSubtree: /
        - pathSubtree: /admin
          filters:
          - oauthTokeninfoAllScope("admin")
        """,
        "app",
    )
    # The route that needs the filter answers 500: its requests never reach the route for "/".
    assert (await harness.get("guarded.example.org", "/admin/users")).status_code == 500
    assert await harness.served_by("guarded.example.org", "/shop") == "default/app"
    accepted = accepted_of(harness, "guarded")
    assert accepted["status"] == "False"
    assert accepted["reason"] == "FilterNotSupported"
    assert "spec.routes[1].filters[0]" in str(accepted["message"])
    assert "oauthTokeninfoAllScope" in str(accepted["message"])


async def test_lb_and_network_backends(harness: Harness) -> None:
    """`lb` endpoints and a `network` address reach the echo backends directly."""
    one = await harness.backend("default", "pool-1")
    two = await harness.backend("default", "pool-2")
    direct = await harness.backend("default", "direct")
    await harness.apply(
        {
            "rg.yaml": routegroup(
                "static",
                f"""
                hosts: [static.example.org]
                backends:
                - name: pool
                  type: lb
                  algorithm: roundRobin
                  endpoints: ["http://127.0.0.1:{one}", "http://127.0.0.1:{two}"]
                - name: direct
                  type: network
                  address: "http://127.0.0.1:{direct}"
                defaultBackends: [{{backendName: pool}}]
                routes:
                - pathSubtree: /
                - pathSubtree: /direct
                  backends: [{{backendName: direct}}]
                """,
            ),
        }
    )
    counts = await harness.distribution("static.example.org", "/x", 40)
    assert set(counts) == {"default/pool-1", "default/pool-2"}, counts
    r = await harness.get("static.example.org", "/direct/y")
    assert r.json()["service"] == "direct"
    # Skipper sends a network backend the address's host.
    assert r.json()["host"] == f"127.0.0.1:{direct}"


async def test_tls_termination_from_the_routegroup_secret(harness: Harness) -> None:
    ca = CA()
    issued = ca.issue("secure.example.org")
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "secret.yaml": tls_secret_yaml(
                "default", "secure-cert", issued.cert_pem, issued.key_pem
            ),
            "rg.yaml": routegroup(
                "secure",
                f"""
                hosts: [secure.example.org]
                backends:
                {service_backend("app", "app")}
                defaultBackends: [{{backendName: app}}]
                tls:
                - hosts: [secure.example.org]
                  secretName: secure-cert
                """,
            ),
        }
    )
    r = await harness.https_get("secure.example.org", "/x", verify=ca.client_context())
    assert r.status_code == 200
    assert r.json()["headers"]["x-forwarded-proto"] == "https"
    assert await harness.peer_certificate("secure.example.org", ca.client_context()) == issued.der
    # Skipper serves the same routes on plain HTTP.
    assert await harness.served_by("secure.example.org", "/x") == "default/app"


async def test_backends_cannot_publish_envoys_admin_interface(harness: Harness) -> None:
    """A network, lb or tee backend on Envoy's admin port is refused: GET /server_info through
    the public listener never answers with Envoy's admin JSON."""
    admin = harness.controller.config.envoy_admin_port
    await harness.apply(
        {
            "rg.yaml": routegroup(
                "adm",
                f"""
                hosts: [adm.example.org]
                backends:
                - {{name: envoyadmin, type: network, address: "http://127.0.0.1:{admin}"}}
                - {{name: lbadmin, type: lb, endpoints: ["http://127.0.0.1:{admin}"]}}
                - {{name: metadata, type: network, address: "http://169.254.169.254"}}
                routes:
                - pathSubtree: /
                  backends: [{{backendName: envoyadmin}}]
                - pathSubtree: /lb
                  backends: [{{backendName: lbadmin}}]
                - pathSubtree: /latest
                  backends: [{{backendName: metadata}}]
                """,
            ),
        }
    )
    for path in ("/server_info", "/lb/server_info", "/latest/meta-data"):
        r = await harness.get("adm.example.org", path)
        assert r.status_code == 500, (path, r.text[:200])
        assert "envoy" not in r.text.lower(), path
    accepted = accepted_of(harness, "adm")
    assert accepted["status"] == "False"
    assert accepted["reason"] == "AddressNotValid"
    message = str(accepted["message"])
    assert f'spec.backends[0].address (backend "envoyadmin"): "http://127.0.0.1:{admin}"' in message
    assert "--envoy-admin-port" in message
    assert 'spec.backends[1].endpoints[0] (backend "lbadmin")' in message
    assert 'spec.backends[2].address (backend "metadata")' in message and "link-local" in message


async def test_loopback_cannot_enter_another_tenants_host(harness: Harness) -> None:
    """RouteGroup A's loopback route that sets B's Host would reach B's /admin as a request from
    Envoy itself, past B's ClientIP allow-list: refused, and A's route answers 500."""
    await apply_routegroups(
        harness,
        {
            "tenant-b": f"""
                hosts: [b.example.org]
                backends:
                {service_backend("admin", "b-admin")}
                routes:
                - path: /admin
                  predicates: ['ClientIP("127.0.0.1/32")']
                  backends: [{{backendName: admin}}]
                """,
            "tenant-a": loopback_spec(
                "a.example.org",
                "a-app",
                """
                - path: /steal
                  filters: ['setRequestHeader("Host", "b.example.org")', 'setPath("/admin")']
                  backends: [{backendName: loop}]
                - path: /again
                  filters: ['setPath("/moved")']
                  backends: [{backendName: loop}]
                """,
            ),
        },
        "b-admin",
        "a-app",
    )
    r = await harness.get("a.example.org", "/steal")
    assert r.status_code == 500 and "b-admin" not in r.text
    assert_filter_refused(
        harness,
        "tenant-a",
        "spec.routes[1].filters[0]: filter setRequestHeader: with the loopback backend",
    )
    # A loop within the RouteGroup's own host still routes again.
    r = await harness.get("a.example.org", "/again")
    assert r.status_code == 200 and r.json()["path"] == "/moved"
    assert r.json()["service"] == "a-app"


async def test_loopback_cannot_leave_its_hosts_by_an_absolute_path(harness: Harness) -> None:
    """A loopback route's modPath to "http://victim.example.org/..." would make the looped request
    line absolute-form, and the second hop would route it to the victim's virtual host from
    127.0.0.1: refused, the route answers 500. A path starting "//" stays origin-form."""
    await apply_routegroups(
        harness,
        {
            "victim": f"""
                hosts: [victim.example.org]
                backends:
                {service_backend("app", "victim-app")}
                routes:
                - pathSubtree: /
                  backends: [{{backendName: app}}]
                """,
            "intruder": loopback_spec(
                "intruder.example.org",
                "own-app",
                """
                - path: /steal
                  filters: ['modPath("^.*$", "http://victim.example.org/admin")']
                  backends: [{backendName: loop}]
                - path: /slashes
                  filters: ['setPath("//victim.example.org/admin")']
                  backends: [{backendName: loop}]
                """,
            ),
        },
        "victim-app",
        "own-app",
    )
    r = await harness.get("intruder.example.org", "/steal")
    assert r.status_code == 500 and "victim-app" not in r.text
    assert_filter_refused(
        harness,
        "intruder",
        "spec.routes[1].filters[0]: filter modPath is not supported with the loopback backend",
    )
    r = await harness.get("intruder.example.org", "/slashes")
    assert r.status_code == 200
    # Still the loop's own backend; the second hop merges the slashes (edge-safe paths).
    assert (r.json()["service"], r.json()["path"]) == ("own-app", "/victim.example.org/admin")


async def test_loop_keeps_its_mark_and_the_client_address(harness: Harness) -> None:
    """A route cannot drop the loop mark (one request would loop without end) nor pass a
    client-supplied X-Forwarded-For to the second hop, which trusts it from 127.0.0.1."""
    await apply_routegroup(
        harness,
        "marked",
        loopback_spec(
            "marked.example.org",
            "marked-app",
            """
            - path: /unmarked
              filters: ['dropRequestHeader("X-Turnout-Loopback")']
              backends: [{backendName: loop}]
            - path: /spoof
              filters: ['setRequestHeader("X-Forwarded-For", "10.20.30.40")']
              backends: [{backendName: loop}]
            - path: /again
              filters: ['setPath("/moved")']
              backends: [{backendName: loop}]
            """,
        ),
        "marked-app",
    )
    for path in ("/unmarked", "/spoof"):
        r = await harness.get("marked.example.org", path)
        assert r.status_code == 500 and r.text == "", path
    message = str(accepted_of(harness, "marked")["message"])
    assert (
        "spec.routes[1].filters[0]: filter dropRequestHeader is not supported with the header "
        '"x-turnout-loopback"' in message
    )
    assert (
        "spec.routes[2].filters[0]: filter setRequestHeader is not supported with the loopback"
        in message
    )
    # The client's own X-Forwarded-For does not reach the second hop either.
    r = await harness.get(
        "marked.example.org", "/again", headers={"X-Forwarded-For": "10.20.30.40"}
    )
    assert r.status_code == 200 and r.json()["path"] == "/moved"
    forwarded = r.json()["headers"]["x-forwarded-for"]
    assert "10.20.30.40" not in forwarded and forwarded.startswith("127.0.0.1"), forwarded


async def test_traffic_segments_tile_the_requests(harness: Harness) -> None:
    """Skipper's documented TrafficSegment(0, .5), (.5, .8), (.8, 1): one draw per request, each
    route takes its segment's share, and none is left unserved."""
    await apply_routegroup(
        harness,
        "segments",
        f"""
        hosts: [segments.example.org]
        backends:
        {service_backend("a", "seg-a")}
        {service_backend("b", "seg-b")}
        {service_backend("c", "seg-c")}
        routes:
        - path: /
          predicates: ["TrafficSegment(.8, 1)"]
          backends: [{{backendName: c}}]
        - path: /
          predicates: ["TrafficSegment(0, .5)"]
          backends: [{{backendName: a}}]
        - path: /
          predicates: ["TrafficSegment(.5, .8)"]
          backends: [{{backendName: b}}]
        """,
        "seg-a",
        "seg-b",
        "seg-c",
    )
    n = 600
    counts = await harness.distribution("segments.example.org", "/", n)
    assert counts["default/seg-a"] + counts["default/seg-b"] + counts["default/seg-c"] == n, counts
    assert within_sigmas(counts["default/seg-a"], n, 0.5), counts
    assert within_sigmas(counts["default/seg-b"], n, 0.3), counts
    assert within_sigmas(counts["default/seg-c"], n, 0.2), counts


async def test_hosts_match_with_any_port(harness: Harness) -> None:
    """Skipper's host regex for spec.hosts takes any port: clients on a non-default port send
    `Host: host:port`, and Envoy ignores the port in host matching. It also takes a trailing dot,
    which the listeners strip (Envoy's strip_trailing_host_dot)."""
    await apply_routegroup(
        harness,
        "ported",
        f"""
        hosts: [ported.example.org]
        backends:
        {service_backend("app", "ported-app")}
        defaultBackends: [{{backendName: app}}]
        """,
        "ported-app",
    )
    for host in (
        "ported.example.org",
        "ported.example.org:8080",
        f"ported.example.org:{harness.http_port}",
        "PORTED.example.org:80",
        "ported.example.org.",
    ):
        assert await harness.served_by(host, "/x") == "default/ported-app", host
    assert await harness.served_by("other.example.org:8080", "/x") == "404"


async def test_loopback_keeps_the_client_address(harness: Harness) -> None:
    """ClientIP on the second hop sees the client the first hop determined, as Skipper's
    in-process loop does: Envoy connects to itself from 127.0.0.84, and only there does the
    client address the first hop sends count. A client cannot claim an address, directly or
    through the loop."""
    await apply_routegroup(
        harness,
        "loop-client",
        loopback_spec(
            "loop-client.example.org",
            "loop-app",
            """
            - path: /via-loop
              filters: ['setPath("/guarded")']
              backends: [{backendName: loop}]
            - path: /via-loop-hop
              filters: ['setPath("/hop-only")']
              backends: [{backendName: loop}]
            - path: /via-loop-office
              filters: ['setPath("/office")']
              backends: [{backendName: loop}]
            - path: /guarded
              predicates: ['ClientIP("127.0.0.1/32")', 'Header("X-Turnout-Loopback", "1")']
              filters: ['setResponseHeader("X-Guard", "client")']
            - path: /hop-only
              predicates: ['ClientIP("127.0.0.84/32")']
              filters: ['setResponseHeader("X-Guard", "hop")']
            - path: /office
              predicates: ['ClientIP("10.0.0.0/8")']
              filters: ['setResponseHeader("X-Guard", "office")']
            """,
        ),
        "loop-app",
    )
    host = "loop-client.example.org"
    r = await harness.get(host, "/via-loop")
    assert r.status_code == 200 and r.headers.get("x-guard") == "client"
    # Envoy's own source address is not the client's.
    r = await harness.get(host, "/via-loop-hop")
    assert r.status_code == 200 and "x-guard" not in r.headers
    forged = {
        "X-Envoy-External-Address": "10.1.2.3",
        "X-Forwarded-For": "10.1.2.3",
        "X-Turnout-Loopback-Client": "10.1.2.3",
    }
    for path in ("/office", "/via-loop-office"):
        r = await harness.get(host, path, forged)
        assert r.status_code == 200 and "x-guard" not in r.headers, path
    # Envoy overwrites a client's x-envoy-external-address: it cannot pose as the loop hop.
    forged["X-Envoy-External-Address"] = "127.0.0.84"
    r = await harness.get(host, "/office", forged)
    assert r.status_code == 200 and "x-guard" not in r.headers

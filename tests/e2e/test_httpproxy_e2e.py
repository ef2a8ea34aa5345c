"""HTTPProxy through a real Envoy: what a client gets and which backend answered."""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "e2e.example.com"


def root(
    name: str = "root",
    ns: str = "default",
    fqdn: str = HOST,
    body: str = "",
    created: str | None = None,
) -> str:
    ts = f'\n  creationTimestamp: "{created}"' if created else ""
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata:
  name: {name}
  namespace: {ns}{ts}
spec:
  virtualhost:
    fqdn: {fqdn}
{body}"""


async def test_prefix_conditions_are_string_prefixes(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app"), ("default", "foo")),
            "proxy.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
    - conditions: [{prefix: /foo}]
      services: [{name: foo, port: 80}]
"""
            ),
        }
    )
    assert await harness.served_by(HOST, "/") == "default/app"
    assert await harness.served_by(HOST, "/foo") == "default/foo"
    # Contour's prefix is a string prefix, not a path segment.
    assert await harness.served_by(HOST, "/foobar") == "default/foo"
    assert await harness.served_by(HOST, "/fo") == "default/app"
    # The backend sees the path as the client sent it.
    r = await harness.get(HOST, "/foo/bar?x=1")
    assert r.json()["path"] == "/foo/bar?x=1"
    # An unknown host is not served.
    assert (await harness.get("other.example.com", "/")).status_code == 404


async def test_header_conditions(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(
                ("default", "a"), ("default", "b"), ("default", "c"), ("default", "app")
            ),
            "proxy.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}, {header: {name: x-tenant, exact: a}}]
      services: [{name: a, port: 80}]
    - conditions: [{prefix: /}, {header: {name: user-agent, contains: Chrome}}]
      services: [{name: b, port: 80}]
    - conditions: [{prefix: /}, {header: {name: x-debug, present: true}}]
      services: [{name: c, port: 80}]
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
"""
            ),
        }
    )
    assert await harness.served_by(HOST, "/", {"x-tenant": "a"}) == "default/a"
    assert await harness.served_by(HOST, "/", {"x-tenant": "b"}) == "default/app"
    ua = "Mozilla/5.0 (Macintosh) AppleWebKit/537.36 Chrome/74.0.3729.169 Safari/537.36"
    assert await harness.served_by(HOST, "/", {"user-agent": ua}) == "default/b"
    assert await harness.served_by(HOST, "/", {"x-debug": ""}) == "default/c"
    assert await harness.served_by(HOST, "/") == "default/app"


async def test_header_only_route_matches_every_path(harness: Harness) -> None:
    # Seed 001 "Path Match with Headers (no path)": a wildcard path is implied.
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "a"), ("default", "b")),
            "proxy.yaml": root(
                body="""\
  routes:
    - conditions: [{header: {name: x-header, exact: a}}]
      services: [{name: a, port: 80}]
    - conditions: [{header: {name: x-header, exact: b}}]
      services: [{name: b, port: 80}]
"""
            ),
        }
    )
    assert await harness.served_by(HOST, "/any/path", {"x-header": "a"}) == "default/a"
    assert await harness.served_by(HOST, "/else", {"x-header": "b"}) == "default/b"
    assert await harness.served_by(HOST, "/else") == "404"


async def test_include_across_namespaces(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("infra", "web"), ("marketing", "blog")),
            "root.yaml": root(
                ns="infra",
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: web, port: 80}]
  includes:
    - name: blog
      namespace: marketing
      conditions: [{prefix: /blog}]
""",
            ),
            "blog.yaml": """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: blog, namespace: marketing}
spec:
  routes:
    - conditions: [{prefix: /}]
      services: [{name: blog, port: 80}]
""",
        }
    )
    assert await harness.served_by(HOST, "/blog/post-1") == "marketing/blog"
    assert await harness.served_by(HOST, "/about") == "infra/web"
    r = await harness.get(HOST, "/blog/post-1")
    assert r.json()["path"] == "/blog/post-1"
    assert harness.status_of("HTTPProxy", "marketing", "blog")["currentStatus"] == "valid"


async def test_nested_includes_concatenate_paths_and_and_headers(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("team-a", "api"), ("default", "app")),
            "root.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
  includes:
    - name: mid
      namespace: team-a
      conditions: [{prefix: /api}, {header: {name: x-beta, exact: "true"}}]
"""
            ),
            "mid.yaml": """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: mid, namespace: team-a}
spec:
  includes:
    - name: leaf
      conditions: [{prefix: /v2}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: leaf, namespace: team-a}
spec:
  routes:
    - conditions: [{prefix: /users}]
      services: [{name: api, port: 80}]
""",
        }
    )
    beta = {"x-beta": "true"}
    assert await harness.served_by(HOST, "/api/v2/users/7", beta) == "team-a/api"
    # Without the header from the root's include condition, the leaf route does not match.
    assert await harness.served_by(HOST, "/api/v2/users/7") == "default/app"
    assert await harness.served_by(HOST, "/api/users", beta) == "default/app"


async def test_weighted_split_within_tolerance(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "stable"), ("default", "canary")),
            "proxy.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services:
        - {name: stable, port: 80, weight: 80}
        - {name: canary, port: 80, weight: 20}
"""
            ),
        }
    )
    n = 400
    counts = await harness.distribution(HOST, "/", n)
    assert set(counts) == {"default/stable", "default/canary"}
    share = counts["default/canary"] / n
    # Binomial(400, 0.2) has a standard deviation of 2%; 0.12-0.28 is four of them.
    assert 0.12 <= share <= 0.28, counts


async def test_even_split_when_no_weights(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "a"), ("default", "b")),
            "proxy.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: a, port: 80}, {name: b, port: 80}]
"""
            ),
        }
    )
    counts = await harness.distribution(HOST, "/", 200)
    assert 0.35 <= counts["default/a"] / 200 <= 0.65, counts


async def test_orphan_and_cycle_statuses(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app"), ("default", "lost")),
            "root.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
  includes:
    - name: loop-a
      conditions: [{prefix: /loop}]
"""
            ),
            "others.yaml": """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: orphan}
spec:
  routes:
    - conditions: [{prefix: /orphan}]
      services: [{name: lost, port: 80}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: loop-a}
spec:
  includes: [{name: loop-b}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: loop-b}
spec:
  includes: [{name: loop-a}]
""",
        }
    )
    orphan = harness.status_of("HTTPProxy", "default", "orphan")
    assert orphan["currentStatus"] == "orphaned"
    assert orphan["description"] == (
        "this HTTPProxy is not part of a delegation chain from a root HTTPProxy"
    )
    # An orphan's routes are never served: /orphan falls through to the root's / route.
    assert await harness.served_by(HOST, "/orphan") == "default/app"
    messages = [
        e["message"]
        for s in ("loop-a", "loop-b")
        for c in harness.status_of("HTTPProxy", "default", s).get("conditions", [])
        for e in c.get("errors", [])
    ]
    # As in Contour, the path starts at the root and the revisited proxy carries the error.
    assert (
        "include creates an include cycle: default/root -> default/loop-a -> "
        "default/loop-b -> default/loop-a" in messages
    ), messages


async def test_missing_include_answers_502_and_missing_service_503(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "root.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
    - conditions: [{prefix: /gone}]
      services: [{name: not-there, port: 80}]
  includes:
    - name: nowhere
      namespace: elsewhere
      conditions: [{prefix: /team}]
"""
            ),
        }
    )
    assert (await harness.get(HOST, "/team/x")).status_code == 502
    assert (await harness.get(HOST, "/gone")).status_code == 503
    assert await harness.served_by(HOST, "/") == "default/app"
    status = harness.status_of("HTTPProxy", "default", "root")
    assert status["currentStatus"] == "invalid"
    reasons = {e["reason"] for c in status["conditions"] for e in c.get("errors", [])}
    assert {"IncludeNotFound", "ServiceUnresolvedReference"} <= reasons


async def test_service_that_appears_later(harness: Harness) -> None:
    proxy = root(
        body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: late, port: 80}]
"""
    )
    await harness.apply({"proxy.yaml": proxy})
    assert (await harness.get(HOST, "/")).status_code == 503
    await harness.apply(
        {"proxy.yaml": proxy, "svc.yaml": await harness.services(("default", "late"))}
    )
    assert await harness.served_by(HOST, "/") == "default/late"
    assert harness.status_of("HTTPProxy", "default", "root")["currentStatus"] == "valid"


async def test_reload_on_file_change(harness: Harness) -> None:
    services = await harness.services(("default", "one"), ("default", "two"))
    proxy = root(
        body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: one, port: 80}]
"""
    )
    await harness.apply({"svc.yaml": services, "proxy.yaml": proxy})
    assert await harness.served_by(HOST, "/") == "default/one"
    # No explicit reload: the file watcher must notice the change.
    (harness.config_dir / "proxy.yaml").write_text(proxy.replace("name: one", "name: two"))
    got = await harness.eventually(lambda: harness.served_by(HOST, "/"), "default/two")
    assert got == "default/two"


async def test_file_that_stops_parsing_keeps_old_routes(harness: Harness) -> None:
    services = await harness.services(("default", "one"))
    proxy = root(
        body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: one, port: 80}]
"""
    )
    await harness.apply({"svc.yaml": services, "proxy.yaml": proxy})
    (harness.config_dir / "proxy.yaml").write_text("spec: [unclosed\n  - {")

    async def problem_reported() -> bool:
        return any(p.source.endswith("proxy.yaml") for p in harness.controller.problems())

    assert await harness.eventually(problem_reported, True)
    problem = next(p for p in harness.controller.problems() if p.source.endswith("proxy.yaml"))
    assert problem.line is not None and "cannot parse YAML" in problem.reason
    await harness.wait_acked_current()
    assert await harness.served_by(HOST, "/") == "default/one"
    assert harness.status_of("HTTPProxy", "default", "root")["currentStatus"] == "valid"


async def test_fqdn_owned_by_the_older_proxy(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("team-a", "a"), ("team-b", "b")),
            "a.yaml": root(
                name="first",
                ns="team-a",
                created="2024-01-01T00:00:00Z",
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: a, port: 80}]
""",
            ),
            "b.yaml": root(
                name="second",
                ns="team-b",
                created="2025-01-01T00:00:00Z",
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: b, port: 80}]
""",
            ),
        }
    )
    assert await harness.served_by(HOST, "/") == "team-a/a"
    loser = harness.status_of("HTTPProxy", "team-b", "second")
    assert loser["currentStatus"] == "invalid"
    errors = [e for c in loser["conditions"] for e in c.get("errors", [])]
    assert any(
        e["reason"] == "DuplicateVhost" and "team-a/first" in e["message"] for e in errors
    ), errors


async def test_wildcard_fqdn_matches_one_label(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "wild")),
            "proxy.yaml": root(
                fqdn="'*.wild.example.com'",
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: wild, port: 80}]
""",
            ),
        }
    )
    assert await harness.served_by("a.wild.example.com", "/") == "default/wild"
    assert await harness.served_by("a.wild.example.com:8080", "/") == "default/wild"
    assert await harness.served_by("a.b.wild.example.com", "/") == "404"
    assert await harness.served_by("wild.example.com", "/") == "404"


async def test_invalid_object_does_not_disturb_others(harness: Harness) -> None:
    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "good.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
"""
            ),
            "bad.yaml": """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: bad}
spec:
  virtualhost: {fqdn: bad.example.com}
  routes: "not a list"
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: badregex}
spec:
  virtualhost: {fqdn: regex.example.com}
  routes:
    - conditions: [{prefix: /}, {header: {name: x, regex: "(unclosed"}}]
      services: [{name: app, port: 80}]
---
kind: HTTPProxy
metadata: {name: no-api-version}
""",
        }
    )
    assert await harness.served_by(HOST, "/") == "default/app"
    assert harness.status_of("HTTPProxy", "default", "bad")["currentStatus"] == "invalid"
    assert harness.status_of("HTTPProxy", "default", "badregex")["currentStatus"] == "invalid"
    assert (await harness.get("regex.example.com", "/")).status_code == 404
    ready, reason = harness.controller.readiness()
    assert ready, reason


async def test_admin_endpoints(harness: Harness) -> None:
    from tests.e2e.harness import free_port
    from turnout.admin.server import AdminServer

    await harness.apply(
        {
            "svc.yaml": await harness.services(("default", "app")),
            "proxy.yaml": root(
                body="""\
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
"""
            ),
        }
    )
    import httpx

    admin = AdminServer(harness.controller)
    port = await admin.start("127.0.0.1", free_port())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).status_code == 200
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            status = (await client.get("/status")).json()
            entry = next(o for o in status["objects"] if o["metadata"]["name"] == "root")
            assert entry["apiVersion"] == "projectcontour.io/v1"
            assert entry["kind"] == "HTTPProxy"
            assert entry["status"]["currentStatus"] == "valid"
            metrics = (await client.get("/metrics")).text
            assert 'turnout_objects{kind="HTTPProxy",state="valid"} 1.0' in metrics
            assert "turnout_xds_acks_total" in metrics
            assert "turnout_compile_duration_seconds_count" in metrics
            xds = await client.get("/debug/xds", params={"type": "clusters"})
            assert xds.status_code == 200, xds.text
            clusters = xds.json()["clusters"]["resources"]
            assert any(c["name"].startswith("default/app/80/") for c in clusters), clusters
    finally:
        await admin.stop()
    await asyncio.sleep(0)

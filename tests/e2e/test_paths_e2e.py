"""Edge-safe paths through a real Envoy: no spelling of an allow-listed path (`//admin`,
`/./admin`, `/%2Fadmin`, ...) reaches the backend of the catch-all route, and a delegated prefix
cannot be left with `..`; `--disable-merge-slashes` and `--escaped-slashes` reach Envoy; the
evaluator (`turnout explain`) picks the route Envoy picks (docs/policies.md, "Path
normalisation")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import Harness, RawResponse
from turnout.app import translate_options
from turnout.compile_inputs import EscapedSlashes
from turnout.graph.evaluate import Decision, evaluate, make_request

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "paths.e2e.example.com"

# `/admin` allows only 10.0.0.0/8; the tests' client is 127.0.0.1, so Envoy answers 403 there.
ROOT = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: root, namespace: default}}
spec:
  virtualhost: {{fqdn: {HOST}}}
  routes:
    - conditions: [{{prefix: /admin}}]
      services: [{{name: app, port: 80}}]
      ipAllowPolicy: [{{source: Peer, cidr: 10.0.0.0/8}}]
    - services: [{{name: app, port: 80}}]
  includes:
    - name: team
      namespace: team
      conditions: [{{prefix: /team}}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: team, namespace: team}}
spec:
  routes:
    - services: [{{name: api, port: 80}}]
"""

ADMIN_ROUTE = "HTTPProxy default/root spec.routes[0]"
APP_ROUTE = "HTTPProxy default/root spec.routes[1]"


async def apply(harness: Harness, options: dict[str, Any] | None = None) -> None:
    services = await harness.services(("default", "app"), ("team", "api"))
    await harness.apply({"svc.yaml": services, "root.yaml": ROOT}, options=options)


def backend(r: RawResponse) -> tuple[str, str] | None:
    """(service, path as the backend received it), or None when Envoy answered itself."""
    if r.status != 200 or not r.body.startswith("{"):
        return None
    seen = json.loads(r.body)
    return f"{seen['namespace']}/{seen['service']}", seen["path"]


def explained(harness: Harness, target: str) -> Decision:
    applied = harness.controller.applied
    assert applied is not None
    paths = translate_options(harness.controller.config).paths
    return evaluate(applied.result.graph, make_request(HOST, target), paths)


def chosen(decision: Decision) -> str | None:
    return str(decision.route.source) if decision.route is not None else None


ADMIN_SPELLINGS = [
    "/admin",
    "//admin",
    "///admin",
    "/./admin",
    "/x/../admin",
    "/%2e%2e/admin",
    "/.//admin",
    "/admin//x",
    "/team/..//admin",
    "/team/%2e%2e/admin",
]


async def test_no_spelling_of_an_allow_listed_path_reaches_a_backend(harness: Harness) -> None:
    await apply(harness)
    for target in ADMIN_SPELLINGS:
        r = await harness.raw_get(HOST, target)
        assert (r.status, backend(r)) == (403, None), target
        assert chosen(explained(harness, target)) == ADMIN_ROUTE, target

    # Paths are case-sensitive in Envoy, as in Contour: `/ADMIN` is another path, the `/` route's.
    r = await harness.raw_get(HOST, "/ADMIN")
    assert backend(r) == ("default/app", "/ADMIN")
    assert chosen(explained(harness, "/ADMIN")) == APP_ROUTE


async def test_escaped_slashes_are_redirected_to_the_decoded_path(harness: Harness) -> None:
    await apply(harness)
    for target, location in [
        ("/%2Fadmin", "/admin"),
        ("/%2fadmin", "/admin"),
        ("/admin%2Fx", "/admin/x"),
        ("/%5Cadmin?q=1", "/admin?q=1"),
        ("/team%2F..%2Fadmin", "/admin"),
    ]:
        r = await harness.raw_get(HOST, target)
        assert (r.status, r.headers.get("location"), backend(r)) == (307, location, None), target
        decision = explained(harness, target)
        assert (decision.status, decision.location) == (307, location), target
        # The client following the redirect meets the policy of the path it names.
        assert (await harness.raw_get(HOST, location)).status == 403, target


async def test_a_delegated_prefix_cannot_be_left_with_dot_segments(harness: Harness) -> None:
    await apply(harness)
    r = await harness.raw_get(HOST, "/team//x")
    assert backend(r) == ("team/api", "/team/x")
    # Out of /team: the root's `/` route, with the path it names, never the team's backend.
    for target in ("/team/..//other", "/team/../other", "/team/%2e%2e/other"):
        r = await harness.raw_get(HOST, target)
        assert backend(r) == ("default/app", "/other"), target
        assert chosen(explained(harness, target)) == APP_ROUTE, target


async def test_the_opt_outs_reach_envoy_and_the_evaluator(harness: Harness) -> None:
    await apply(
        harness,
        {"disable_merge_slashes": True, "escaped_slashes": EscapedSlashes.KEEP_UNCHANGED},
    )
    # What the defaults guard against, shown by turning them off.
    for target in ("//admin", "/%2Fadmin"):
        r = await harness.raw_get(HOST, target)
        assert backend(r) == ("default/app", target), target
        assert chosen(explained(harness, target)) == APP_ROUTE, target
    # RFC 3986 normalisation stays on whatever the flags.
    assert (await harness.raw_get(HOST, "/./admin")).status == 403

    await apply(harness, {"escaped_slashes": EscapedSlashes.REJECT_REQUEST})
    r = await harness.raw_get(HOST, "/%2Fadmin")
    assert (r.status, backend(r)) == (400, None)
    assert explained(harness, "/%2Fadmin").status == 400
    assert (await harness.raw_get(HOST, "//admin")).status == 403

    await apply(harness, {"escaped_slashes": EscapedSlashes.UNESCAPE_AND_FORWARD})
    assert (await harness.raw_get(HOST, "/%2Fadmin")).status == 403
    assert chosen(explained(harness, "/%2Fadmin")) == ADMIN_ROUTE
    r = await harness.raw_get(HOST, "/%2Fother")
    assert backend(r) == ("default/app", "/other")

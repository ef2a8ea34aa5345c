"""Scoped RDS through the session Envoy (`--scoped-routes-min-hosts`, set low here): each host
answers from its own route configuration, the Host is matched as Envoy's virtual-host lookup
matches it (any case, with or without a port, over HTTP/1.1 and HTTP/2), a Host no scope has gets
the same 404 as before, and a change to one host's routes sends that host's RouteConfiguration
only, over Delta xDS."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from tests.e2e.harness import Harness
from turnout.envoy.translate.scoped_routes import SCOPE_KEY_HEADER
from turnout.envoy.translate.split_host import dirs_generation

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCOPED = {"scoped_routes_min_hosts": 2}
HOSTS = ("one.scoped.example.com", "two.scoped.example.com", "three.scoped.example.com")


def proxy(name: str, fqdn: str, prefix: str = "/") -> str:
    return f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: {name}, namespace: scoped}}
spec:
  virtualhost: {{fqdn: {fqdn}}}
  routes:
  - conditions: [{{prefix: {prefix}}}]
    services: [{{name: {name}, port: 80}}]
"""


async def files(harness: Harness, one_prefix: str = "/") -> dict[str, str]:
    services = await harness.services(*(("scoped", host.split(".")[0]) for host in HOSTS))
    out = {"svc.yaml": services}
    for host in HOSTS:
        name = host.split(".")[0]
        out[f"{name}.yaml"] = proxy(name, host, one_prefix if name == "one" else "/")
    return out


async def http2_get(harness: Harness, host: str) -> tuple[str, dict[str, object]]:
    """One HTTP/2 request (prior knowledge, so `:authority` is `host`): version and echo body."""
    proc = await asyncio.create_subprocess_exec(
        "curl", "-s", "--http2-prior-knowledge", "-H", f"Host: {host}",
        "-w", "\n%{http_version}", f"{harness.base_url}/",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    body, _, version = out.decode().rpartition("\n")
    return version, json.loads(body)


async def route_updates(harness: Harness, tail: str = "") -> dict[str, int]:
    """Envoy's counts, per RDS subscription, of the responses that carried its route
    configuration (`update_attempt`) and of the rebuilds (`config_reload`); `tail`: a regex
    for what follows the host (a split host's path)."""
    stats = await harness.envoy_admin(
        "/stats?format=json&filter=rds\\..*scoped\\.example\\.com"
        + tail
        + "\\.(update_attempt|config_reload)$"
    )
    return {s["name"]: int(s["value"]) for s in stats["stats"] if "value" in s}


async def test_each_host_answers_from_its_own_scope(harness: Harness) -> None:
    await harness.apply(await files(harness), options=SCOPED)
    listeners = await harness.envoy_admin("/config_dump?resource=dynamic_listeners")
    assert "scoped_routes" in json.dumps(listeners)
    for host in HOSTS:
        name = host.split(".")[0]
        assert await harness.served_by(host) == f"scoped/{name}"
        assert await harness.served_by(host.upper()) == f"scoped/{name}"
        assert await harness.served_by(f"{host}:8080") == f"scoped/{name}"
        assert await harness.served_by(f"{host.title()}.:1") == f"scoped/{name}"
    assert await harness.served_by("unknown.scoped.example.com") == "404"
    assert await harness.served_by("[::1]:80") == "404"
    unknown = await harness.raw_get("UNKNOWN.scoped.example.com:80", "/")
    assert (unknown.status, unknown.body) == (404, "")


async def test_http2_authority_selects_the_scope(harness: Harness) -> None:
    await harness.apply(await files(harness), options=SCOPED)
    version, body = await http2_get(harness, "TWO.scoped.example.com:8080")
    assert version == "2"
    assert (body["namespace"], body["service"]) == ("scoped", "two")


async def test_the_key_header_never_reaches_the_backend(harness: Harness) -> None:
    await harness.apply(await files(harness), options=SCOPED)
    forged = {SCOPE_KEY_HEADER: "two.scoped.example.com"}
    r = await harness.get("one.scoped.example.com", headers=forged)
    assert r.json()["service"] == "one"  # the client's own header does not choose the scope
    assert SCOPE_KEY_HEADER not in r.json()["headers"]
    assert r.json()["host"] == "one.scoped.example.com"


async def test_a_change_to_one_host_sends_only_its_route_configuration(harness: Harness) -> None:
    bootstrap = yaml.safe_load(harness.controller.state_dir.bootstrap.read_text())
    assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    await harness.apply(await files(harness), options=SCOPED)
    before = await route_updates(harness)
    assert len(before) == 2 * len(HOSTS)
    await harness.apply(await files(harness, one_prefix="/v2"), options=SCOPED)
    assert await harness.served_by("one.scoped.example.com", "/v2") == "scoped/one"
    assert await harness.served_by("one.scoped.example.com", "/") == "404"
    after = await route_updates(harness)
    changed = {name for name, count in after.items() if count != before.get(name)}
    one = "http.ingress_http.rds.ingress_http/one.scoped.example.com"
    assert changed == {f"{one}.update_attempt", f"{one}.config_reload"}
    assert await harness.served_by("two.scoped.example.com") == "scoped/two"


# --- a host split into path scopes ----------------------------------------------------------------

BIG = "big.scoped.example.com"
# Split from 4 routes into scopes of one route, however many copies: directories /a, /a/x, /bb.
SPLIT = {"scoped_routes_min_hosts": 0, "split_host_min_routes": 4}
SPLIT_SCOPES = {"split_scope_max_routes": 1, "split_max_extra_share": 100.0}
UNSPLIT = {"scoped_routes_min_hosts": 0, "split_host_min_routes": 0}
BIG_ROUTES = (("/a/x", "one"), ("/a/x/", "three"), ("/a/y", "two"), ("/b", "three"),
              ("/bb/z", "one"), ("/", "two"))  # fmt: skip
# Into each directory, beside it, under it, partial segments, queries, trailing slashes.
BIG_PATHS = ("/a/x", "/a/x/", "/a/x/deep?q=/b", "/a/xy", "/a/y?x", "/a", "/a/", "/a?q=/a/x",
             "/bb/z", "/bb", "/bbb", "/b", "/c", "/", "/?q=1", "/A/x", "//a/x", "/a/./x",
             "/a/%78")  # fmt: skip


async def big_files(
    harness: Harness, routes: tuple[tuple[str, str], ...] = BIG_ROUTES
) -> dict[str, str]:
    services = await harness.services(("scoped", "one"), ("scoped", "two"), ("scoped", "three"))
    body = "".join(
        f"  - conditions: [{{prefix: {p}}}]\n    services: [{{name: {s}, port: 80}}]\n"
        for p, s in routes
    )
    proxy = (
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        "metadata: {name: big, namespace: scoped}\n"
        f"spec:\n  virtualhost: {{fqdn: {BIG}}}\n  routes:\n{body}"
    )
    return {"svc.yaml": services, "big.yaml": proxy}


async def answers(harness: Harness) -> list[tuple[str, int, str]]:
    out = []
    for path in BIG_PATHS:
        r = await harness.raw_get(BIG, path)
        out.append(
            (path, r.status, r.body[:80] if r.status != 200 else r.body.split('"service"')[1][:12])
        )
    for host in (BIG.upper() + ":80", "other.scoped.example.com"):
        r = await harness.raw_get(host, "/a/x")
        out.append((host, r.status, r.body[:40]))
    r = await harness.raw_get(BIG, "*")
    out.append(("*", r.status, r.body[:40]))
    return out


async def test_a_split_host_answers_as_the_unsplit_host(harness: Harness) -> None:
    await harness.apply(await big_files(harness), options=UNSPLIT)
    whole = await answers(harness)
    await harness.apply(await big_files(harness), options=SPLIT, translate=SPLIT_SCOPES)
    scopes = await harness.envoy_admin("/config_dump?resource=dynamic_scoped_route_configs")
    dumped = json.dumps(scopes)
    g = dirs_generation([("a",), ("a", "x"), ("bb",)])
    for path in ("", f"{g}/", f"{g}/a", f"{g}/a/x", f"{g}/bb"):
        assert f'"ingress_http/{BIG}{path}"' in dumped, path
    assert await answers(harness) == whole
    # The index and the scopes as matcher trees.
    trees = {**SPLIT, "matcher_tree_min_routes": 1}
    await harness.apply(await big_files(harness), options=trees, translate=SPLIT_SCOPES)
    assert "matcher" in json.dumps(
        await harness.envoy_admin("/config_dump?resource=dynamic_route_configs")
    )
    assert await answers(harness) == whole
    await harness.apply(await big_files(harness), options=SPLIT, translate=SPLIT_SCOPES)
    assert await harness.served_by(BIG, "/a/xy") == "scoped/one"
    assert await harness.served_by(BIG, "/bbb") == "scoped/three"


async def test_http2_reaches_a_path_scope(harness: Harness) -> None:
    await harness.apply(await big_files(harness), options=SPLIT, translate=SPLIT_SCOPES)
    proc = await asyncio.create_subprocess_exec(
        "curl", "-s", "--http2-prior-knowledge", "-H", f"Host: {BIG.upper()}:8080",
        f"{harness.base_url}/a/y?q=/a/x", stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    body = json.loads(out)
    assert (body["service"], body["path"]) == ("two", "/a/y?q=/a/x")
    assert SCOPE_KEY_HEADER not in body["headers"]


async def test_a_change_to_one_route_sends_only_its_path_scope(harness: Harness) -> None:
    await harness.apply(await big_files(harness), options=SPLIT, translate=SPLIT_SCOPES)
    before = await route_updates(harness, "(.[0-9a-f]+/.*)?")
    changed_routes = (*BIG_ROUTES[:2], ("/a/y2", "two"), *BIG_ROUTES[3:])
    await harness.apply(
        await big_files(harness, changed_routes), options=SPLIT, translate=SPLIT_SCOPES
    )
    assert await harness.served_by(BIG, "/a/y2") == "scoped/two"
    assert await harness.served_by(BIG, "/a/y") == "scoped/two"  # by "/" now
    after = await route_updates(harness, "(.[0-9a-f]+/.*)?")
    assert len(after) >= 10
    changed = {name for name, count in after.items() if count != before.get(name)}
    g = dirs_generation([("a",), ("a", "x"), ("bb",)])
    scope = f"http.ingress_http.rds.ingress_http/{BIG}{g}/a"
    assert changed == {f"{scope}.update_attempt", f"{scope}.config_reload"}


async def test_no_request_fails_while_a_directory_comes_and_goes(harness: Harness) -> None:
    await harness.apply(await big_files(harness), options=SPLIT, translate=SPLIT_SCOPES)
    grown = (*BIG_ROUTES[:5], ("/n/x", "three"), BIG_ROUTES[5])
    statuses: list[int] = []
    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            statuses.append((await harness.raw_get(BIG, "/n/x")).status)

    task = asyncio.create_task(load())
    for _ in range(3):
        await harness.apply(await big_files(harness, grown), options=SPLIT, translate=SPLIT_SCOPES)
        assert await harness.served_by(BIG, "/n/x") == "scoped/three"
        await harness.apply(await big_files(harness), options=SPLIT, translate=SPLIT_SCOPES)
        assert await harness.served_by(BIG, "/n/x") == "scoped/two"
    stop.set()
    await task
    assert len(statuses) > 20
    assert set(statuses) == {200}, statuses

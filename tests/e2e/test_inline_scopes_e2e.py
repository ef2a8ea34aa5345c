"""Inline scopes (`--xds-inline-scopes`) through a Delta Envoy of their own: each host's scope
holds its route table inline, so Envoy opens no RDS subscription per host; every host answers
from its own table, and a change to one host (or to one directory of a split host) sends that
one scope."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from tests.e2e.harness import Harness, start_harness
from turnout.envoy.translate.split_host import dirs_generation

pytestmark = pytest.mark.asyncio(loop_scope="session")

# The hosts and the split host of test_scoped_routes_e2e.py, in short.
SCOPED = {"scoped_routes_min_hosts": 2}
HOSTS = ("one.inline.example.com", "two.inline.example.com", "three.inline.example.com")
BIG = "big.inline.example.com"
SPLIT = {"scoped_routes_min_hosts": 0, "split_host_min_routes": 4}
SPLIT_SCOPES = {"split_scope_max_routes": 1, "split_max_extra_share": 100.0}
BIG_ROUTES = (("/a/x", "one"), ("/a/x/", "three"), ("/a/y", "two"), ("/b", "three"),
              ("/bb/z", "one"), ("/", "two"))  # fmt: skip
BIG_PATHS = ("/a/x", "/a/x/deep", "/a/xy", "/a/y", "/a", "/bb/z", "/bbb", "/b", "/c", "/")


def proxy(name: str, fqdn: str, routes: tuple[tuple[str, str], ...]) -> str:
    body = "".join(
        f"  - conditions: [{{prefix: {p}}}]\n    services: [{{name: {s}, port: 80}}]\n"
        for p, s in routes
    )
    return (
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        f"metadata: {{name: {name}, namespace: inline}}\n"
        f"spec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n{body}"
    )


async def files(harness: Harness, one_prefix: str = "/") -> dict[str, str]:
    services = await harness.services(*(("inline", host.split(".")[0]) for host in HOSTS))
    out = {"svc.yaml": services}
    for host in HOSTS:
        name = host.split(".")[0]
        prefix = one_prefix if name == "one" else "/"
        out[f"{name}.yaml"] = proxy(name, host, ((prefix, name),))
    return out


async def big_files(
    harness: Harness, routes: tuple[tuple[str, str], ...] = BIG_ROUTES
) -> dict[str, str]:
    services = await harness.services(*(("inline", n) for n in ("one", "two", "three")))
    return {"svc.yaml": services, "big.yaml": proxy("big", BIG, routes)}


async def answers(harness: Harness) -> list[tuple[str, str]]:
    return [(path, await harness.served_by(BIG, path)) for path in BIG_PATHS]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def inline(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    h = await start_harness(Path(tmp_path_factory.mktemp("inline")), xds_inline_scopes=True)
    try:
        yield h
    finally:
        await h.close()
        await h.controller.stop()


@contextlib.contextmanager
def pushes(caplog: pytest.LogCaptureFixture) -> Iterator[list[tuple[str, int, int]]]:
    """The xDS responses turnout sends meanwhile, (type, resources, removed), read from its log
    (`Envoy ...: sending <type> version ... (<n> resource(s), <m> removed, ...)`)."""
    sent: list[tuple[str, int, int]] = []
    with caplog.at_level(logging.DEBUG, logger="turnout.envoy.xds"):
        start = len(caplog.records)
        yield sent
        for record in caplog.records[start:]:
            message = str(record.msg)
            if record.name == "turnout.envoy.xds" and message.startswith("Envoy %s: sending"):
                _, kind, _, count, removed, _ = record.args  # type: ignore[misc]
                sent.append((str(kind), int(count), int(removed)))


async def inline_tables(harness: Harness) -> dict[str, dict[str, object]]:
    """Envoy's scopes (config_dump) by name, each the table it holds inline."""
    dump = await harness.envoy_admin("/config_dump?resource=dynamic_scoped_route_configs")
    out = {}
    for group in dump["configs"]:
        for scope in group["scoped_route_configs"]:
            assert "route_configuration_name" not in scope, scope
            out[scope["name"]] = scope["route_configuration"]
    return out


async def test_each_host_answers_from_the_table_inline_in_its_scope(inline: Harness) -> None:
    bootstrap = yaml.safe_load(inline.controller.state_dir.bootstrap.read_text())
    assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    await inline.apply(await files(inline), options=SCOPED)
    tables = await inline_tables(inline)
    for host in HOSTS:
        table = tables[f"ingress_http/{host}"]
        assert [vh["domains"] for vh in table["virtual_hosts"]] == [[host]]  # type: ignore[index]
        name = host.split(".")[0]
        assert await inline.served_by(host) == f"inline/{name}"
        assert await inline.served_by(f"{host.upper()}:8080") == f"inline/{name}"
    assert await inline.served_by("unknown.inline.example.com") == "404"
    # No RDS subscription per host: Envoy asked for no scope's route configuration.
    routes = await inline.envoy_admin("/config_dump?resource=dynamic_route_configs")
    assert "inline.example.com" not in json.dumps(routes)
    stats = await inline.envoy_admin("/stats?format=json&filter=rds\\..*inline\\.example")
    assert stats["stats"] == []


async def test_a_change_to_one_host_sends_only_its_scope(
    inline: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    await inline.apply(await files(inline), options=SCOPED)
    before = await inline_tables(inline)
    with pushes(caplog) as sent:
        await inline.apply(await files(inline, one_prefix="/v2"), options=SCOPED)
    assert sent == [("scoped_route", 1, 0)]
    assert await inline.served_by("one.inline.example.com", "/v2") == "inline/one"
    assert await inline.served_by("one.inline.example.com", "/") == "404"
    after = await inline_tables(inline)
    changed = {name for name, table in after.items() if table != before.get(name)}
    assert changed == {"ingress_http/one.inline.example.com"}
    assert await inline.served_by("two.inline.example.com") == "inline/two"


async def test_a_split_host_changes_one_path_scope(
    inline: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    await inline.apply(await big_files(inline), options=SPLIT, translate=SPLIT_SCOPES)
    whole = await answers(inline)
    before = await inline_tables(inline)
    changed_routes = (*BIG_ROUTES[:2], ("/a/y2", "two"), *BIG_ROUTES[3:])
    with pushes(caplog) as sent:
        await inline.apply(
            await big_files(inline, changed_routes), options=SPLIT, translate=SPLIT_SCOPES
        )
    assert sent == [("scoped_route", 1, 0)]
    assert await inline.served_by(BIG, "/a/y2") == "inline/two"
    after = await inline_tables(inline)
    changed = {name for name, table in after.items() if table != before.get(name)}
    g = dirs_generation([("a",), ("a", "x"), ("bb",)])
    assert changed == {f"ingress_http/{BIG}{g}/a"}
    await inline.apply(await big_files(inline), options=SPLIT, translate=SPLIT_SCOPES)
    assert await answers(inline) == whole

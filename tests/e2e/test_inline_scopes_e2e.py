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
from tests.e2e.test_scoped_routes_e2e import (
    BIG,
    BIG_ROUTES,
    HOSTS,
    SCOPED,
    SPLIT,
    SPLIT_SCOPES,
    answers,
    big_files,
    files,
)
from turnout.envoy.translate.split_host import dirs_generation

pytestmark = pytest.mark.asyncio(loop_scope="session")


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
        assert await inline.served_by(host) == f"scoped/{name}"
        assert await inline.served_by(f"{host.upper()}:8080") == f"scoped/{name}"
    assert await inline.served_by("unknown.scoped.example.com") == "404"
    # No RDS subscription per host: Envoy asked for no scope's route configuration.
    routes = await inline.envoy_admin("/config_dump?resource=dynamic_route_configs")
    assert "scoped.example.com" not in json.dumps(routes)
    stats = await inline.envoy_admin("/stats?format=json&filter=rds\\..*scoped\\.example")
    assert stats["stats"] == []


async def test_a_change_to_one_host_sends_only_its_scope(
    inline: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    await inline.apply(await files(inline), options=SCOPED)
    before = await inline_tables(inline)
    with pushes(caplog) as sent:
        await inline.apply(await files(inline, one_prefix="/v2"), options=SCOPED)
    assert sent == [("scoped_route", 1, 0)]
    assert await inline.served_by("one.scoped.example.com", "/v2") == "scoped/one"
    assert await inline.served_by("one.scoped.example.com", "/") == "404"
    after = await inline_tables(inline)
    changed = {name for name, table in after.items() if table != before.get(name)}
    assert changed == {"ingress_http/one.scoped.example.com"}
    assert await inline.served_by("two.scoped.example.com") == "scoped/two"


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
    assert await inline.served_by(BIG, "/a/y2") == "scoped/two"
    after = await inline_tables(inline)
    changed = {name for name, table in after.items() if table != before.get(name)}
    g = dirs_generation([("a",), ("a", "x"), ("bb",)])
    assert changed == {f"ingress_http/{BIG}{g}/a"}
    await inline.apply(await big_files(inline), options=SPLIT, translate=SPLIT_SCOPES)
    assert await answers(inline) == whole

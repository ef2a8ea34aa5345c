"""Metrics a started turnout exports: process and Python runtime metrics, every labelled counter at
0 before its first event, change -> ACK latency, and the Grafana dashboard names only metrics
that exist."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.xds_client import AdsClient, FakeEnvoy, until
from turnout.admin.server import AdminServer
from turnout.app import build_controller
from turnout.config import ServeConfig
from turnout.controller import Controller

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "turnout-dashboard.json"

PROXY = """\
apiVersion: v1
kind: Service
metadata: {name: app}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: root}
spec:
  virtualhost: {fqdn: metrics.example.com}
  routes: [{services: [{name: app, port: 80}]}]
"""

# PromQL words that are not metric names.
PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
    | {"bool", "offset", "inf", "nan"}
)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Controller, str]]:
    """A controller (no Envoy, the files watched) and its admin server's /metrics URL."""
    (tmp_path / "a.yaml").write_text(PROXY)
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), run_envoy=False, demo_backends=False, xds_port=0, debounce_ms=20
        )
    )
    admin = AdminServer(controller)
    port = await admin.start("127.0.0.1", 0)
    await controller.start()
    try:
        yield controller, f"http://127.0.0.1:{port}/metrics"
    finally:
        await admin.stop()
        await controller.stop()


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        return await response.text()


def _samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value of every sample line."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            samples[series] = float(value)
    return samples


def _names(text: str) -> set[str]:
    return {re.split(r"[{ ]", series)[0] for series in _samples(text)}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers outside label matchers, range
    selectors, grouping clauses and strings, that are neither functions nor keywords."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word = match.group(0)
        follows = expr[match.end() :].lstrip()
        if follows.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def _dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in doc["panels"] for t in p.get("targets", ())]
    for variable in doc["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(metric, label): the metric is its first argument.
            queries.append(re.sub(r"^label_values\((\w+),.*\)$", r"\1", variable["definition"]))
    return queries


def test_promql_metric_names_skips_functions_labels_and_ranges() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$x", le!="1"}'
        "[$__rate_interval]))) / ignoring (type) sum without (kind) (b_total) and on (x) c"
    )
    assert promql_metric_names(expr) == {"a_bucket", "b_total", "c"}


async def test_runtime_metrics_and_every_labelled_counter_at_zero(
    served: tuple[Controller, str],
) -> None:
    _, url = served
    samples = _samples(await _scrape(url))
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert name in samples
    assert any(s.startswith("python_gc_collections_total{") for s in samples)
    assert any(s.startswith("python_info{") for s in samples)
    for kind in ("cluster", "endpoint", "listener", "route", "secret"):
        for event in ("pushes", "acks", "nacks"):
            assert samples[f'turnout_xds_{event}_total{{type="{kind}"}}'] == 0.0
    for programmed in ("True", "False", "Unknown"):
        assert samples[f'turnout_gateways{{programmed="{programmed}"}}'] == 0.0
    assert samples["turnout_compile_errors_total"] == 0.0
    assert samples["turnout_envoy_restarts_total"] == 0.0
    assert samples["turnout_change_to_ack_seconds_count"] == 0.0


async def test_change_to_ack_is_timed_once_every_envoy_acknowledged(
    served: tuple[Controller, str], tmp_path: Path
) -> None:
    controller, url = served
    registry = controller.metrics.registry
    fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
    try:
        version = controller.xds.version
        assert version is not None
        await until(lambda: controller.xds.acked(version), 5.0)
        # The cold start is not a change: nothing timed yet.
        assert registry.get_sample_value("turnout_change_to_ack_seconds_count") == 0.0

        (tmp_path / "a.yaml").write_text(PROXY.replace("metrics.", "changed."))
        await until(lambda: controller.xds.version != version, 5.0)
        new_version = controller.xds.version
        assert new_version is not None
        await until(lambda: controller.xds.acked(new_version), 5.0)
        assert registry.get_sample_value("turnout_change_to_ack_seconds_count") == 1.0
        elapsed = registry.get_sample_value("turnout_change_to_ack_seconds_sum")
        assert elapsed is not None and 0 < elapsed < 5
        text = await _scrape(url)
        assert "turnout_change_to_ack_seconds_count 1.0" in text
    finally:
        await fake.stop()


async def test_dashboard_uses_only_exported_metrics(served: tuple[Controller, str]) -> None:
    _, url = served
    exported = _names(await _scrape(url))
    used = set().union(*(promql_metric_names(q) for q in _dashboard_queries()))
    assert len(used) >= 15  # the parse found the dashboard's metrics
    assert used - exported == set()
    # Every turnout metric has a panel.
    suffix = r"_(bucket|sum|count|created|total)$"
    turnout = {re.sub(suffix, "", n) for n in exported if n.startswith("turnout_")}
    assert turnout - {re.sub(suffix, "", n) for n in used} == set()

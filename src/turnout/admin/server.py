"""The admin HTTP server: /healthz, /readyz, /status, /metrics, /debug/xds and the web view /ui."""

from __future__ import annotations

import ipaddress
import json
from importlib import resources
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from turnout.admin import ui
from turnout.compile_inputs import HTTP_LISTENER, PathNormalization
from turnout.envoy.dump import render, resources_document
from turnout.envoy.resources import EnvoyResources
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import evaluate, make_request
from turnout.metrics import Metrics
from turnout.status.model import IgnoredObject, ObjectStatus
from turnout.store import SourceProblem


class AdminSource(Protocol):
    """What the admin server reads from the running controller."""

    metrics: Metrics

    def statuses(self) -> tuple[ObjectStatus, ...]: ...

    def problems(self) -> tuple[SourceProblem, ...]: ...

    def readiness(self) -> tuple[bool, str]: ...

    def status_json(self, status: ObjectStatus) -> dict[str, Any]: ...

    def xds_resources(self) -> EnvoyResources | None: ...
    def applied_result(self) -> CompileResult | None: ...

    def path_normalization(self) -> PathNormalization: ...

    def ignored(self) -> tuple[IgnoredObject, ...]: ...

    def ignored_json(self, ignored: IgnoredObject) -> dict[str, Any]: ...


def status_document(source: AdminSource) -> str:
    return json.dumps(
        {
            "objects": [source.status_json(s) for s in source.statuses()],
            "problems": [p.to_json() for p in source.problems()],
            # Objects turnout leaves to another controller, or does not read, with the reason.
            "ignored": [source.ignored_json(i) for i in source.ignored()],
        },
        indent=2,
        sort_keys=False,
    )


def is_loopback_peer(remote: str | None) -> bool:
    """Whether a request came from this host (IPv4-mapped loopback included)."""
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def debug_xds_response(source: AdminSource, request: web.Request) -> web.Response:
    """The running xDS resources, as `turnout translate` prints them. Only for this host's
    peers, even when --admin-address is not loopback: they name every backend and certificate."""
    if not is_loopback_peer(request.remote):
        return web.Response(status=403, text="/debug/xds answers only loopback peers\n")
    fmt = request.query.get("format", "json")
    if fmt not in ("json", "yaml"):
        return web.Response(status=400, text=f"unknown format {fmt!r}: expected json or yaml\n")
    resources = source.xds_resources()
    if resources is None:
        return web.Response(status=503, text="no configuration applied yet\n")
    try:
        document = resources_document(resources, request.query.get("type", "all"))
    except ValueError as err:
        return web.Response(status=400, text=f"{err}\n")
    content_type = "application/json" if fmt == "json" else "application/yaml"
    return web.Response(text=render(document, fmt), content_type=content_type)


def make_app(source: AdminSource) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ready, reason = source.readiness()
        return web.Response(status=200 if ready else 503, text=f"{reason}\n")

    async def status(_: web.Request) -> web.Response:
        return web.Response(
            text=status_document(source),
            content_type="application/json",
        )

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(source.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def debug_xds(request: web.Request) -> web.Response:
        return debug_xds_response(source, request)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/debug/xds", debug_xds)
    add_ui_routes(app, source)
    return app


# The web view is unauthenticated like the rest of the admin API; no inline script runs, so
# markup a tenant managed to slip past the escaping could not execute either.
UI_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'",
    "Cache-Control": "no-store",
}


def ui_graph_body(source: AdminSource) -> str:
    waiting = "" if source.applied_result() else source.readiness()[1]
    return ui.graph_body(source.applied_result(), source.statuses(), source.problems(), waiting)


def add_ui_routes(app: web.Application, source: AdminSource) -> None:
    htmx = resources.files("turnout.admin").joinpath("static/htmx.min.js").read_bytes()

    def html(text: str) -> web.Response:
        return web.Response(text=text, content_type="text/html", headers=UI_HEADERS)

    async def page(_: web.Request) -> web.Response:
        return html(ui.page(ui.graph_fragment(ui_graph_body(source))))

    async def graph(request: web.Request) -> web.Response:
        body = ui_graph_body(source)
        if request.query.get("seen") == ui.body_token(body):
            return web.Response(status=204, headers=UI_HEADERS)  # htmx swaps nothing
        return html(ui.graph_fragment(body))

    async def explain(request: web.Request) -> web.Response:
        result = source.applied_result()
        q = request.query
        headers = ui.parse_headers(q.get("headers", ""))
        if result is None or isinstance(headers, str):
            return html(ui.esc(headers if isinstance(headers, str) else "nothing compiled yet"))
        req = make_request(
            q.get("host", ""),
            q.get("path", "/") or "/",
            q.get("method", "GET") or "GET",
            headers,
            listener=q.get("listener", "") or HTTP_LISTENER,
        )
        return html(ui.explain_html(req, evaluate(result.graph, req, source.path_normalization())))

    async def script(_: web.Request) -> web.Response:
        return web.Response(body=htmx, content_type="text/javascript")

    app.router.add_get("/ui", page)
    app.router.add_get("/ui/graph", graph)
    app.router.add_get("/ui/explain", explain)
    app.router.add_get("/ui/htmx.min.js", script)


class AdminServer:
    def __init__(self, source: AdminSource) -> None:
        self._runner = web.AppRunner(make_app(source), access_log=None)
        self.port = 0

    async def start(self, address: str, port: int) -> int:
        await self._runner.setup()
        site = web.TCPSite(self._runner, address, port)
        await site.start()
        bound = [a for a in self._runner.addresses if isinstance(a, tuple)]
        self.port = int(bound[0][1]) if bound else port
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()

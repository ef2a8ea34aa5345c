"""The admin HTTP server: /healthz, /readyz, /status and /metrics."""

from __future__ import annotations

import json
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    return app


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

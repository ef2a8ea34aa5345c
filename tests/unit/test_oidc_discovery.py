"""The control plane's OpenID discovery (turnout.sources.oidc) against a local issuer: success,
each failure and its message, retries with backoff, refresh, keeping the last good answer, and
tracking the issuers a snapshot names."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from turnout.compile_inputs import IssuerDiscovery
from turnout.sources.oidc import (
    DiscoveryError,
    DiscoverySettings,
    IssuerDiscoverer,
    discover_once,
    fetch_jwks_uri,
)

FAST = DiscoverySettings(timeout_s=1.0, attempts=3, backoff_s=0.01, retry_s=0.05, refresh_s=0.1)


@dataclass
class Provider:
    """Answers `<issuer>/.well-known/openid-configuration` with `answers` in turn (the last one
    repeats): a status, or a status and a body."""

    answers: list[tuple[int, Any]] = field(default_factory=lambda: [(200, None)])
    delay_s: float = 0.0
    requests: list[float] = field(default_factory=list)
    port: int = 0

    def url(self, realm: str = "realm") -> str:
        return f"http://127.0.0.1:{self.port}/{realm}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(time.monotonic())
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        status, body = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if body is None:
            realm = request.match_info["realm"]
            body = {"issuer": self.url(realm), "jwks_uri": f"{self.url(realm)}/keys"}
        if isinstance(body, str):
            return web.Response(status=status, text=body)
        return web.json_response(body, status=status)


@pytest_asyncio.fixture
async def provider() -> AsyncIterator[Provider]:
    p = Provider()
    app = web.Application()
    app.router.add_get("/{realm}/.well-known/openid-configuration", p.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    p.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield p
    finally:
        await runner.cleanup()


async def fetch(issuer: str, timeout_s: float = 1.0) -> str:
    async with aiohttp.ClientSession() as session:
        return await fetch_jwks_uri(session, issuer, timeout_s)


async def fetch_error(issuer: str, timeout_s: float = 1.0) -> str:
    with pytest.raises(DiscoveryError) as info:
        await fetch(issuer, timeout_s)
    return str(info.value)


async def test_the_jwks_uri_of_the_discovery_document(provider: Provider) -> None:
    assert await fetch(provider.url()) == f"{provider.url()}/keys"


async def test_each_failure_says_why(provider: Provider) -> None:
    issuer = provider.url()
    where = f"{issuer}/.well-known/openid-configuration"
    provider.answers = [(404, "nope")]
    assert await fetch_error(issuer) == f"GET {where} answered HTTP 404"
    provider.answers = [(200, {"issuer": issuer})]
    assert await fetch_error(issuer) == f"{where} has no jwks_uri"
    provider.answers = [(200, "<html>")]
    assert await fetch_error(issuer) == f"{where} is not a JSON document"
    provider.answers = [(200, ["a"])]
    assert await fetch_error(issuer) == f"{where} is not a JSON object"
    provider.answers = [(200, {"jwks_uri": "file:///etc/keys"})]
    assert "is not an http(s) URL" in await fetch_error(issuer)
    provider.answers = [(200, None)]
    provider.delay_s = 0.5
    assert await fetch_error(issuer, timeout_s=0.1) == f"GET {where} timed out after 0.1 s"
    # Nothing listening.
    closed = f"http://127.0.0.1:{_unused_port()}/realm"
    assert "failed" in await fetch_error(closed)


def _unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Changes:
    def __init__(self, discoverer: list[IssuerDiscoverer]) -> None:
        self.seen: list[tuple[IssuerDiscovery, ...]] = []
        self._discoverer = discoverer
        self.event = asyncio.Event()

    async def __call__(self) -> None:
        self.seen.append(self._discoverer[0].results())
        self.event.set()

    async def next(self, timeout: float = 5.0) -> tuple[IssuerDiscovery, ...]:
        await asyncio.wait_for(self.event.wait(), timeout)
        self.event.clear()
        return self.seen[-1]


def discoverer(settings: DiscoverySettings = FAST) -> tuple[IssuerDiscoverer, Changes]:
    holder: list[IssuerDiscoverer] = []
    changes = Changes(holder)
    holder.append(IssuerDiscoverer(changes, settings))
    return holder[0], changes


async def test_a_tracked_issuer_is_discovered_and_reported_once(provider: Provider) -> None:
    d, changes = discoverer(
        DiscoverySettings(timeout_s=1.0, attempts=3, backoff_s=0.01, retry_s=5, refresh_s=5)
    )
    try:
        assert d.results() == ()
        d.track([provider.url()])
        d.track([provider.url()])  # tracking again starts nothing new
        assert await changes.next() == (
            IssuerDiscovery(provider.url(), jwks_uri=f"{provider.url()}/keys"),
        )
        await asyncio.sleep(0.1)
        assert len(provider.requests) == 1 and len(changes.seen) == 1
    finally:
        await d.close()


async def test_retries_back_off_then_the_failure_is_reported(provider: Provider) -> None:
    provider.answers = [(503, "busy")]
    settings = DiscoverySettings(timeout_s=1.0, attempts=3, backoff_s=0.1, retry_s=5, refresh_s=5)
    d, changes = discoverer(settings)
    try:
        d.track([provider.url()])
        [answer] = await changes.next()
        assert answer.jwks_uri is None and answer.error is not None
        assert "HTTP 503" in answer.error
        assert len(provider.requests) == 3
        t = provider.requests
        first, second = t[1] - t[0], t[2] - t[1]
        assert first >= 0.09 and second >= 0.19  # 0.1 s, then doubled
    finally:
        await d.close()


async def test_a_failed_issuer_is_asked_again_and_success_recompiles(provider: Provider) -> None:
    provider.answers = [(500, "x"), (500, "x"), (500, "x"), (200, None)]
    d, changes = discoverer()
    try:
        d.track([provider.url()])
        [failed] = await changes.next()
        assert failed.error is not None and "HTTP 500" in failed.error
        [found] = await changes.next()
        assert found == IssuerDiscovery(provider.url(), jwks_uri=f"{provider.url()}/keys")
    finally:
        await d.close()


async def test_refresh_reports_a_changed_jwks_uri_and_keeps_the_last_good_one(
    provider: Provider,
) -> None:
    issuer = provider.url()
    provider.answers = [
        (200, {"jwks_uri": f"{issuer}/keys-1"}),
        (200, {"jwks_uri": f"{issuer}/keys-2"}),
    ]
    d, changes = discoverer()
    try:
        d.track([issuer])
        assert (await changes.next())[0].jwks_uri == f"{issuer}/keys-1"
        assert (await changes.next())[0].jwks_uri == f"{issuer}/keys-2"
        # The issuer starts failing: the answer stays, and nothing is recompiled.
        provider.answers = [(500, "down")]
        provider.requests.clear()
        while len(provider.requests) < 6:
            await asyncio.sleep(0.05)
        assert d.results() == (IssuerDiscovery(issuer, jwks_uri=f"{issuer}/keys-2"),)
        assert len(changes.seen) == 2
    finally:
        await d.close()


async def test_untracked_issuers_are_dropped_and_stop_being_asked(provider: Provider) -> None:
    d, changes = discoverer()
    a, b = provider.url("a"), provider.url("b")
    try:
        d.track([a, b])
        while len(d.results()) < 2:
            await changes.next()
        assert [r.issuer for r in d.results()] == [a, b]
        d.track([b])
        assert [r.issuer for r in d.results()] == [b]
        d.track([])
        assert d.results() == ()
        await asyncio.sleep(0.05)  # a request already on its way still arrives
        asked = len(provider.requests)
        await asyncio.sleep(0.3)  # several refresh intervals
        assert len(provider.requests) == asked
    finally:
        await d.close()
    d.track([a])  # closed: tracks nothing
    assert d.results() == ()


async def test_discover_once_answers_every_issuer_in_one_round(provider: Provider) -> None:
    good, bad = provider.url("good"), provider.url("bad")
    closed = f"http://127.0.0.1:{_unused_port()}/realm"
    found = await discover_once([good, closed, good], 5.0, FAST)
    assert [a.issuer for a in found] == sorted([good, closed])
    by_issuer = {a.issuer: a for a in found}
    assert by_issuer[good] == IssuerDiscovery(good, jwks_uri=f"{good}/keys")
    assert by_issuer[closed].jwks_uri is None and "failed" in (by_issuer[closed].error or "")
    assert len(provider.requests) == 1  # one round: no refresh afterwards
    assert await discover_once([], 5.0) == ()
    provider.delay_s = 2.0
    started = time.monotonic()
    [late] = await discover_once([bad], 0.2, FAST)
    assert time.monotonic() - started < 1.5
    assert late == IssuerDiscovery(bad, error="no answer within 0.2 s")

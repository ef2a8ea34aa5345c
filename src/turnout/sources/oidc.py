"""OpenID discovery for Skipper's `jwtValidation` filter, in the control plane.

Skipper fetches `<issuer>/.well-known/openid-configuration` when it creates a `jwtValidation`
filter and validates tokens with the key set at the document's `jwks_uri`. Envoy's JWT filter
needs that URI in its configuration, and turnout's compile is a pure function that makes no
network calls, so the discovery happens here, outside it: the controller tells `IssuerDiscovery`
which issuers the current snapshot names (`track`), a task per issuer fetches the document
(timeout, retries with backoff) and refreshes it (hourly, as Skipper refreshes key sets), and
every change of an answer calls `on_change`, which recompiles with the new `results()` as
`CompileOptions.issuer_discovery`.

An answer once found is kept while later refreshes fail (the key set itself is fetched and
refreshed by Envoy); the failure is logged. An issuer without any answer is reported by the
RouteGroup's status, and its routes answer 503 until discovery succeeds.

The one-shot commands (`turnout check --discover`, `turnout explain --discover`) run one round
of the same discovery through `discover_once`, within a total timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from turnout.compile_inputs import IssuerDiscovery

log = logging.getLogger("turnout.oidc")

DISCOVERY_PATH = "/.well-known/openid-configuration"
# A discovery document is a few KiB; anything far larger is not one.
MAX_DOCUMENT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class DiscoverySettings:
    """`timeout_s` per request; `attempts` requests per round, `backoff_s` apart (doubling,
    at most `max_backoff_s`); a successful answer is refreshed every `refresh_s` (Skipper's key
    set refresh interval), an issuer without an answer is asked again after `retry_s`."""

    timeout_s: float = 10.0
    attempts: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    refresh_s: float = 3600.0
    retry_s: float = 30.0


class DiscoveryError(Exception):
    """Why one discovery request gave no `jwks_uri` (the message goes into the status)."""


def discovery_url(issuer: str) -> str:
    # Skipper concatenates: url.Parse(issuerURL + "/.well-known/openid-configuration").
    return issuer + DISCOVERY_PATH


async def fetch_jwks_uri(session: aiohttp.ClientSession, issuer: str, timeout_s: float) -> str:
    """The `jwks_uri` of `issuer`'s discovery document; raises DiscoveryError saying why not."""
    url = discovery_url(issuer)
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=True
        ) as response:
            if response.status != 200:
                raise DiscoveryError(f"GET {url} answered HTTP {response.status}")
            body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
    except TimeoutError:
        raise DiscoveryError(f"GET {url} timed out after {timeout_s:g} s") from None
    except aiohttp.ClientError as err:
        raise DiscoveryError(f"GET {url} failed: {err or type(err).__name__}") from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise DiscoveryError(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise DiscoveryError(f"{url} is not a JSON document") from None
    if not isinstance(document, dict):
        raise DiscoveryError(f"{url} is not a JSON object")
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str) or not jwks_uri:
        raise DiscoveryError(f"{url} has no jwks_uri")
    try:
        parsed = urlsplit(jwks_uri)
        parsed.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise DiscoveryError(f"the jwks_uri {jwks_uri!r} of {url} is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise DiscoveryError(f"the jwks_uri {jwks_uri!r} of {url} is not an http(s) URL")
    return jwks_uri


class IssuerDiscoverer:
    """Discovers the issuers it is told to track, one task each; see the module docstring."""

    def __init__(
        self,
        on_change: Callable[[], Awaitable[object]],
        settings: DiscoverySettings | None = None,
    ) -> None:
        self._on_change = on_change
        self.settings = settings or DiscoverySettings()
        self._answers: dict[str, IssuerDiscovery] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def results(self) -> tuple[IssuerDiscovery, ...]:
        """The answers for the tracked issuers, sorted: the compile's `issuer_discovery`."""
        return tuple(sorted(a for i, a in self._answers.items() if i in self._tasks))

    def track(self, issuers: Iterable[str]) -> None:
        """Discovers `issuers` from now on (starting a task for each new one) and stops
        discovering the others. Must run on the event loop."""
        if self._closed:
            return
        wanted = set(issuers)
        for issuer in sorted(self._tasks.keys() - wanted):
            self._tasks.pop(issuer).cancel()
            self._answers.pop(issuer, None)
        for issuer in sorted(wanted - self._tasks.keys()):
            self._tasks[issuer] = asyncio.create_task(
                self._run(issuer), name=f"turnout-oidc {issuer}"
            )

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _run(self, issuer: str) -> None:
        settings = self.settings
        while True:
            answer = await self._discover(issuer)
            previous = self._answers.get(issuer)
            if answer.jwks_uri is None and previous is not None and previous.jwks_uri is not None:
                # Keep the last good answer: Envoy still fetches the key set from it.
                log.warning(
                    "OpenID discovery of %s failed, keeping %s: %s",
                    issuer,
                    previous.jwks_uri,
                    answer.error,
                )
                answer = previous
            if answer != previous and issuer in self._tasks:
                self._answers[issuer] = answer
                if answer.jwks_uri is not None:
                    log.info("OpenID discovery of %s: jwks_uri %s", issuer, answer.jwks_uri)
                else:
                    log.warning("OpenID discovery of %s failed: %s", issuer, answer.error)
                try:
                    await self._on_change()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("recompiling after OpenID discovery of %s failed", issuer)
            await asyncio.sleep(
                settings.refresh_s if answer.jwks_uri is not None else settings.retry_s
            )

    async def _discover(self, issuer: str) -> IssuerDiscovery:
        """One round: up to `attempts` requests, `backoff_s` apart and doubling."""
        settings = self.settings
        delay = settings.backoff_s
        error = "no attempt made"
        for attempt in range(max(settings.attempts, 1)):
            if attempt:
                await asyncio.sleep(delay)
                delay = min(delay * 2, settings.max_backoff_s)
            try:
                jwks_uri = await fetch_jwks_uri(self._client(), issuer, settings.timeout_s)
            except DiscoveryError as err:
                error = str(err)
                continue
            return IssuerDiscovery(issuer, jwks_uri=jwks_uri)
        return IssuerDiscovery(issuer, error=error)


async def discover_once(
    issuers: Iterable[str], total_timeout_s: float, settings: DiscoverySettings | None = None
) -> tuple[IssuerDiscovery, ...]:
    """One round of discovery of each of `issuers` for the one-shot commands (`turnout check
    --discover`): the control plane's requests, retries and backoff, all within
    `total_timeout_s`. Every issuer gets an answer, sorted by issuer: its `jwks_uri`, or an
    error, which for an issuer still unanswered when the time is up says so."""
    wanted = sorted(set(issuers))
    if not wanted:
        return ()
    if settings is None:
        base = DiscoverySettings()
        settings = DiscoverySettings(timeout_s=min(base.timeout_s, total_timeout_s))
    all_answered = asyncio.Event()

    async def answered() -> None:
        if len(discoverer.results()) == len(wanted):
            all_answered.set()

    discoverer = IssuerDiscoverer(answered, settings)
    try:
        discoverer.track(wanted)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_answered.wait(), total_timeout_s)
        found = {answer.issuer: answer for answer in discoverer.results()}
    finally:
        await discoverer.close()
    late = f"no answer within {total_timeout_s:g} s"
    return tuple(found.get(issuer) or IssuerDiscovery(issuer, error=late) for issuer in wanted)

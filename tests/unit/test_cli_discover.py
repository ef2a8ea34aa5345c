"""`turnout check --discover` and `turnout explain --discover`: OpenID discovery of RouteGroup
jwtValidation issuers before the compile, against a local issuer; without the flag, no network
call and a status that says how to resolve the issuer."""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from tests.cases.oidc import RG
from turnout.cli import main


@dataclass
class Issuer:
    """A local OpenID provider: `<url>/.well-known/openid-configuration` answers `status`, with
    the jwks_uri `<url>/keys` when 200, after `delay_s`."""

    status: int = 200
    delay_s: float = 0.0
    requests: int = 0
    port: int = 0
    seen_paths: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/realm"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.seen_paths.append(request.path)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status != 200:
            return web.Response(status=self.status, text="down")
        return web.json_response({"issuer": self.url, "jwks_uri": f"{self.url}/keys"})


@pytest_asyncio.fixture
async def issuer() -> AsyncIterator[Issuer]:
    found = Issuer()
    app = web.Application()
    app.router.add_get("/realm/.well-known/openid-configuration", found.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.port = int(runner.addresses[0][1])
    try:
        yield found
    finally:
        await runner.cleanup()


HINT = "run `turnout check --discover` to resolve the issuer"


def write(tmp_path: Path, issuer_url: str) -> str:
    (tmp_path / "rg.yaml").write_text(textwrap.dedent(RG % issuer_url))
    return str(tmp_path)


async def run(*argv: str) -> int:
    # main() runs its own event loop for discovery; the issuer answers on this one.
    return await asyncio.to_thread(main, list(argv))


def resolved_refs(out: str) -> dict[str, Any]:
    [obj] = [o for o in json.loads(out)["objects"] if o["kind"] == "RouteGroup"]
    conditions: list[dict[str, Any]] = obj["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "ResolvedRefs")


async def test_check_discover_resolves_the_issuer_and_passes(
    issuer: Issuer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, issuer.url)
    assert await run("check", path, "--discover", "-o", "json") == 0
    refs = resolved_refs(capsys.readouterr().out)
    assert (refs["status"], refs["reason"]) == ("True", "ResolvedRefs")
    assert issuer.seen_paths == ["/realm/.well-known/openid-configuration"]


async def test_check_without_discover_makes_no_call_and_says_how_to_resolve(
    issuer: Issuer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, issuer.url)
    assert await run("check", path) == 1
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if ": RouteGroup default/rg: " in x]
    assert line.startswith(f"{path}/rg.yaml:")
    assert "invalid" in line and issuer.url in line
    assert line.endswith(HINT), line
    assert await run("check", path, "-o", "json") == 1
    refs = resolved_refs(capsys.readouterr().out)
    assert (refs["status"], refs["reason"]) == ("False", "IssuerDiscoveryPending")
    assert refs["message"].endswith(HINT)
    assert issuer.requests == 0


async def test_check_discover_reports_a_failed_issuer(
    issuer: Issuer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issuer.status = 500
    path = write(tmp_path, issuer.url)
    assert await run("check", path, "--discover", "-o", "json") == 1
    refs = resolved_refs(capsys.readouterr().out)
    assert refs["reason"] == "IssuerDiscoveryFailed"
    assert "answered HTTP 500" in refs["message"]
    assert "--discover" not in refs["message"]  # discovery ran: no hint to run it
    assert issuer.requests == 3  # one round: the control plane's attempts, no more


async def test_check_discover_is_bounded_by_its_timeout(
    issuer: Issuer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issuer.delay_s = 10.0
    path = write(tmp_path, issuer.url)
    started = time.monotonic()
    code = await run("check", path, "--discover", "--discover-timeout", "0.5", "-o", "json")
    took = time.monotonic() - started
    assert code == 1
    assert took < 5.0
    refs = resolved_refs(capsys.readouterr().out)
    assert refs["reason"] == "IssuerDiscoveryFailed"
    assert "no answer within 0.5 s" in refs["message"]


async def test_explain_discover_shows_the_jwt_requirement(
    issuer: Issuer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, issuer.url)
    ask = ("explain", path, "--host", "a.example.com", "--path", "/secure/x")
    # Without a token the JWT filter's 401 is definite: explain exits 1, as for a 404.
    assert await run(*ask, "--discover") == 1
    captured = capsys.readouterr()
    assert "answered by JWT validation of route RouteGroup default/rg" in captured.out
    assert f"401 unless a valid JWT of issuer {issuer.url} (keys {issuer.url}/keys)" in (
        captured.out
    )
    assert "note:" not in captured.err
    # Without it the route is the 503 it is until discovery answers, and stderr says why.
    assert await run(*ask, "-o", "json") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["action"].startswith("direct response 503")
    assert "turnout: note: RouteGroup default/rg: " in captured.err
    assert "run `turnout explain --discover` to resolve the issuer" in captured.err
    assert issuer.requests == 1


def test_discover_without_routegroups_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "svc.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: app}\nspec:\n  ports: [{port: 80}]\n"
    )
    assert main(["check", str(tmp_path), "--discover"]) == 0
    assert "--discover" not in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-1", "nan", "x", "3601"])
def test_discover_timeout_must_be_a_sane_number_of_seconds(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", str(tmp_path), "--discover", "--discover-timeout", value])
    assert exit_info.value.code == 2
    assert "--discover-timeout" in capsys.readouterr().err

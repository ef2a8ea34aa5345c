"""The admin web view (/ui) in a real headless Chromium: a controller and its admin server on free
ports with the quickstart example plus a refused HTTPProxy, driven through Playwright.

Chromium is Debian's (`/usr/bin/chromium`, `.ci/run` installs it); no browser is downloaded. Set
TURNOUT_UI_SCREENSHOT to a path to write the page's screenshot there (docs/ui.png is made so).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Page, async_playwright, expect

from tests.e2e.harness import free_port
from turnout.admin.server import AdminServer
from turnout.app import build_controller
from turnout.config import ServeConfig
from turnout.controller import Controller

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"

# `services[].port` must be a number: the whole HTTPProxy is refused.
REFUSED = """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: broken, namespace: infra}
spec:
  virtualhost: {fqdn: broken.turnout.local}
  routes:
    - services: [{name: web, port: eighty}]
"""

LATER = """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: later, namespace: infra}
spec:
  virtualhost: {fqdn: later.turnout.local}
  routes:
    - services: [{name: web, port: 80}]
"""


@pytest_asyncio.fixture(loop_scope="session")
async def admin_url(tmp_path: Path) -> AsyncIterator[tuple[str, Controller, Path]]:
    for source in QUICKSTART.glob("*.yaml"):
        shutil.copy(source, tmp_path / source.name)
    (tmp_path / "refused.yaml").write_text(REFUSED)
    config = ServeConfig(
        paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
    )
    controller = build_controller(config)
    await controller.start()
    admin = AdminServer(controller)
    port = await admin.start("127.0.0.1", free_port())
    try:
        yield f"http://127.0.0.1:{port}", controller, tmp_path
    finally:
        await admin.stop()
        await controller.stop()


async def explain(page: Page, host: str, path: str) -> None:
    await page.fill("form.explain input[name=host]", host)
    await page.fill("form.explain input[name=path]", path)
    await page.click("form.explain button[type=submit]")


async def test_web_view_in_chromium(admin_url: tuple[str, Controller, Path]) -> None:
    url, controller, config_dir = admin_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1200, "height": 800})
        await page.goto(f"{url}/ui")
        listeners = page.locator("#listeners")
        await expect(listeners).to_contain_text("demo.turnout.local")
        await expect(listeners).to_contain_text("owned by HTTPProxy infra/demo")

        # The delegation tree opens on a click: the root includes marketing/blog.
        child = page.locator("#delegation details.tree .obj", has_text="HTTPProxy marketing/blog")
        await expect(child).to_be_hidden()
        await page.locator("#delegation summary", has_text="HTTPProxy infra/demo").click()
        await expect(child).to_be_visible()
        await expect(child).to_have_class("obj state-valid")

        await explain(page, "demo.turnout.local", "/blog/post")
        result = page.locator("#explain-result")
        await expect(result).to_contain_text("route: HTTPProxy infra/demo -> marketing/blog")
        await expect(result).to_contain_text("forward to marketing/blog/80/")

        # The refused object is red.
        refused = page.locator("#objects .obj", has_text="HTTPProxy infra/broken")
        await expect(refused).to_have_class("obj state-invalid")
        await expect(refused).to_have_css("color", "rgb(198, 40, 40)")

        await page.screenshot(path=os.environ.get("TURNOUT_UI_SCREENSHOT") or config_dir / "ui.png")

        # Polls of an unchanged graph swap nothing: the tree the reader opened stays open.
        await page.wait_for_timeout(2500)
        await expect(child).to_be_visible()
        # A change shows up without reloading the page.
        (config_dir / "later.yaml").write_text(LATER)
        await controller.reload()
        await expect(listeners).to_contain_text("later.turnout.local", timeout=10_000)
        await browser.close()


async def test_unchanged_graph_answers_no_content(
    admin_url: tuple[str, Controller, Path],
) -> None:
    import httpx

    url, _, _ = admin_url
    async with httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/ui")
        assert page.status_code == 200
        assert "default-src 'self'" in page.headers["content-security-policy"]
        seen = page.text.split('hx-get="/ui/graph?seen=', 1)[1].split('"', 1)[0]
        assert (await client.get("/ui/graph", params={"seen": seen})).status_code == 204
        fresh = await client.get("/ui/graph", params={"seen": "stale"})
        assert fresh.status_code == 200 and "demo.turnout.local" in fresh.text
        script = await client.get("/ui/htmx.min.js")
        assert script.status_code == 200 and "Zero-Clause BSD" in script.text


pytestmark = pytest.mark.timeout(120)

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.harness import Harness, start_harness


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def harness(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    h = await start_harness(Path(tmp_path_factory.mktemp("e2e")))
    try:
        yield h
    finally:
        await h.close()
        await h.controller.stop()

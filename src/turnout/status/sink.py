"""Where the controller hands its published statuses besides its own views (admin, metrics,
logs): a status sink, such as the Kubernetes status writer (`sources/kubernetes/status_sink.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from turnout.status.model import ObjectStatus


class StatusSink(Protocol):
    def publish(self, statuses: Sequence[ObjectStatus]) -> None:
        """Every published status, each time one changed (settled by Envoy's answers and
        stamped with transition times); must return at once (the event loop calls it)."""
        ...

    async def run(self) -> None:
        """Runs for as long as the controller does (cancelled when it stops)."""
        ...

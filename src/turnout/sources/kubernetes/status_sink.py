"""Kubernetes mode's status sink: the status writer, writing only while this replica leads.

With leader election (the default) the elector turns the writer on and off; without it
(`--no-leader-elect`) this replica writes from the start. On a clean stop the elector releases
the Lease so that a standby takes over at its next try.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from turnout.objects import ObjectRef
from turnout.sources.kubernetes.leader import LeaderElector
from turnout.sources.kubernetes.status_writer import StatusWriter
from turnout.status.model import ObjectStatus


class KubeStatusSink:
    """`status.sink.StatusSink` for the API server; `observe`/`forget` are for the Kubernetes
    source, which sees each object's status in its watch before dropping it from the store."""

    def __init__(self, writer: StatusWriter, elector: LeaderElector | None) -> None:
        self.writer = writer
        self.elector = elector

    def publish(self, statuses: Sequence[ObjectStatus]) -> None:
        self.writer.publish(statuses)

    def observe(
        self, ref: ObjectRef, resource_version: str, status: Mapping[str, Any] | None
    ) -> None:
        self.writer.observe(ref, resource_version, status)

    def forget(self, ref: ObjectRef) -> None:
        self.writer.forget(ref)

    @property
    def leading(self) -> bool:
        return self.writer.leading

    async def run(self) -> None:
        if self.elector is None:
            self.writer.set_leading(True)
            await self.writer.run()
            return
        tasks = [
            asyncio.create_task(self.writer.run(), name="status-writer"),
            asyncio.create_task(self.elector.run(), name="leader-election"),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it.

Every replica watches and serves xDS; only the leader writes status. The Lease `turnout` in
`--leader-election-namespace` names the leader (`holderIdentity`) and when it last renewed.

client-go's rules and defaults (`LeaseDuration` 15 s, `RenewDeadline` 10 s, `RetryPeriod` 2 s):

- A candidate tries every `retry_period_s`. It takes the Lease when there is none (create), when
  it has no holder (released), or when the Lease has not changed for `lease_duration_s` as seen
  by this replica's own monotonic clock (client-go's observedTime, so clock skew between nodes
  does not matter); taking it from another holder counts `leaseTransitions`.
- The leader renews every `retry_period_s`; when no renewal succeeded for `renew_deadline_s`, it
  steps down (stops writing) before anyone else may take the Lease (`lease_duration_s` later).
- Every write is an update at the `resourceVersion` read, so of two candidates racing for an
  expired Lease exactly one wins (the other gets a 409).
- On a clean shutdown the leader releases the Lease (client-go's `ReleaseOnCancel`): no holder,
  `leaseDurationSeconds: 1`, so a standby takes over at its next try instead of waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

log = logging.getLogger("turnout.kubernetes.leader")

LEASE_NAME = "turnout"
DEFAULT_NAMESPACE = "turnout-system"
DEFAULT_LEASE_DURATION_S = 15.0
DEFAULT_RENEW_DEADLINE_S = 10.0
DEFAULT_RETRY_PERIOD_S = 2.0


class LeaseConflict(Exception):
    """409: another replica wrote the Lease first (or created it)."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease's spec as client-go's `LeaderElectionRecord`, with the resourceVersion read."""

    holder: str
    lease_duration_s: int
    acquire_time: str | None = None  # RFC 3339 with microseconds (metav1.MicroTime)
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str = ""

    def spec(self) -> tuple[str, int, str | None, str | None, int]:
        """What identifies one write of the Lease (its raw record in client-go)."""
        return (
            self.holder,
            self.lease_duration_s,
            self.acquire_time,
            self.renew_time,
            self.transitions,
        )


class LeaseApi(Protocol):
    async def get(self) -> LeaseRecord | None: ...

    async def create(self, record: LeaseRecord) -> LeaseRecord: ...

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """Writes `record` at its `resource_version`; LeaseConflict when that is stale."""
        ...


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    identity: str
    lease_duration_s: float = DEFAULT_LEASE_DURATION_S
    renew_deadline_s: float = DEFAULT_RENEW_DEADLINE_S
    retry_period_s: float = DEFAULT_RETRY_PERIOD_S


def timing_problem(lease_duration_s: float, renew_deadline_s: float, retry_period_s: float) -> str:
    """What is wrong with the timings, as client-go's NewLeaderElector refuses them ("" for
    nothing): a leader must step down before its Lease can be taken, and retry in between."""
    if lease_duration_s <= renew_deadline_s:
        return "--leader-election-lease-duration must be greater than the renew deadline"
    if renew_deadline_s <= 1.2 * retry_period_s:  # client-go's JitterFactor
        return "--leader-election-renew-deadline must be greater than 1.2 x the retry period"
    return ""


def default_identity() -> str:
    """The pod's name when the chart passes it (POD_NAME), else hostname_uuid as client-go's
    examples do: unique per process, so a restarted replica is a new candidate."""
    pod = os.environ.get("POD_NAME", "")
    return pod or f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: LeaseApi,
        settings: ElectionSettings,
        on_change: Callable[[bool], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = micro_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        self.settings = settings
        self.on_change = on_change
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.leading = False
        self.observed: LeaseRecord | None = None
        self.observed_at = 0.0  # monotonic time the observed record last changed
        self.renewed_at = 0.0  # monotonic time of the last successful acquire or renewal

    def _observe(self, record: LeaseRecord, now: float) -> None:
        if self.observed is None or self.observed.spec() != record.spec():
            self.observed_at = now
        self.observed = record

    def _lease_valid(self, now: float) -> bool:
        if self.observed is None:
            return False
        return self.observed_at + self.observed.lease_duration_s > now

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew): True when this replica holds the Lease
        afterwards."""
        now, stamp = self.clock(), self.wall()
        me = self.settings.identity
        duration = max(1, round(self.settings.lease_duration_s))
        current = await self.api.get()
        if current is None:
            record = LeaseRecord(me, duration, stamp, stamp, 0)
            return await self._write(self.api.create, record, now)
        self._observe(current, now)
        held_by_me = current.holder == me
        if current.holder and not held_by_me and self._lease_valid(now):
            return False
        if held_by_me:
            acquired, transitions = current.acquire_time, current.transitions
        else:
            acquired, transitions = stamp, current.transitions + 1
        record = LeaseRecord(me, duration, acquired, stamp, transitions, current.resource_version)
        return await self._write(self.api.update, record, now)

    async def _write(
        self,
        write: Callable[[LeaseRecord], Awaitable[LeaseRecord]],
        record: LeaseRecord,
        now: float,
    ) -> bool:
        try:
            written = await write(record)
        except LeaseConflict:
            return False
        self.observed, self.observed_at, self.renewed_at = written, now, now
        return True

    def _set_leading(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            log.info(
                "%s leadership of Lease %s as %s",
                "acquired" if leading else "lost",
                LEASE_NAME,
                self.settings.identity,
            )
            self.on_change(leading)

    async def step(self) -> None:
        """One tick of the loop: try to acquire or renew; a leader that could not renew for
        `renew_deadline_s` steps down."""
        try:
            ok = await self.try_acquire_or_renew()
        except Exception as err:
            # Network errors and unexpected API answers: the next tick tries again.
            log.warning("leader election: cannot reach the Lease: %s", err)
            ok = False
        if ok:
            self._set_leading(True)
        elif self.leading and self.clock() - self.renewed_at >= self.settings.renew_deadline_s:
            self._set_leading(False)

    async def run(self) -> None:
        """Campaigns and renews until cancelled; then releases the Lease if it holds it."""
        try:
            while True:
                await self.step()
                await self.sleep(self.settings.retry_period_s)
        finally:
            if self.leading:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.release())

    async def release(self) -> None:
        """Gives the Lease up (client-go's ReleaseOnCancel): no holder, a 1 s duration."""
        if not self.leading or self.observed is None:
            return
        stamp = self.wall()
        record = replace(
            self.observed, holder="", lease_duration_s=1, acquire_time=stamp, renew_time=stamp
        )
        self._set_leading(False)
        try:
            await self.api.update(record)
        except LeaseConflict:
            log.info("Lease %s changed meanwhile: not released", LEASE_NAME)

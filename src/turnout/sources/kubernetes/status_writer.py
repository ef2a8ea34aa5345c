"""Writes each object's status to its `/status` subresource (Kubernetes mode, leader only).

The controller hands over its published statuses (`publish`: compiled, settled by Envoy's
answers, so a Gateway's `Programmed` is written once Envoy ACKed, and stamped with transition
times); the Kubernetes source reports the status each object has in the API server (`observe`,
from its watch). An object is written only when the two differ (`status_diff.status_to_write`:
transition times aside), so a recompile that changes nothing writes nothing, and the conditions
that did not change keep the `lastTransitionTime` the object already has, across restarts and
leader changes.

- Coalesced: the queue holds objects, not statuses; a worker writes the newest status of an
  object when it gets to it, so a status replaced while queued is never written.
- Rate-limited: a token bucket (`DEFAULT_WRITES_PER_SECOND`, `DEFAULT_WRITE_BURST`) across
  every write; only writes take a token, never a skipped comparison.
- Optimistic: each merge patch carries the `resourceVersion` the status was computed against;
  a 409 re-reads the object, recomputes and retries with backoff (`MAX_ATTEMPTS`).
- Only the leader writes (`set_leading`); on becoming leader every object is compared again, so
  whatever changed while another replica (or none) was writing is written once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from turnout.metrics import Metrics
from turnout.objects import ObjectRef
from turnout.sources.kubernetes.kinds import ApiResource, by_group_kind
from turnout.sources.kubernetes.status_diff import merge_patch, status_to_write, withdrawn
from turnout.status.model import ObjectStatus

log = logging.getLogger("turnout.kubernetes.status")

# 1,000 objects changed at once get their status within 2 s (docs/benchmarks.md) while a
# controller never floods the API server: client-go's default (5/s) would take minutes.
DEFAULT_WRITES_PER_SECOND = 500.0
DEFAULT_WRITE_BURST = 500
# Writes in flight at once: each waits on one API round trip.
DEFAULT_WORKERS = 8
MAX_ATTEMPTS = 5
CONFLICT_BACKOFF_S = 0.05
# A write that failed otherwise (API server unreachable, 5xx) is tried again this much later.
ERROR_RETRY_S = 2.0
# Contour's Route: `lastProcessTime` says when turnout last wrote it.
PROCESS_TIME_KINDS = frozenset({("contour.heptio.com", "Route")})

Sleep = Callable[[float], Awaitable[None]]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Conflict(Exception):
    """409: the object changed since the resourceVersion the write was computed against."""


class Gone(Exception):
    """404: the object (or its API) no longer exists."""


@dataclass(frozen=True, slots=True)
class Observed:
    """An object's status as the API server has it, and the resourceVersion it was read at."""

    resource_version: str
    status: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class StatusTarget:
    """The `/status` subresource of one object (`resource` at the object's own version)."""

    resource: ApiResource
    namespace: str
    name: str


class StatusApi(Protocol):
    async def read(self, target: StatusTarget) -> Observed: ...

    async def patch(
        self, target: StatusTarget, resource_version: str, status: Mapping[str, Any]
    ) -> Observed:
        """Merge-patches `status` (with `resourceVersion` as a precondition): Conflict, Gone."""
        ...


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up. A token taken from an empty bucket is
    borrowed from the future: the taker waits until it would have arrived (as Go's
    `rate.Limiter.Reserve`), so concurrent takers queue in order."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.updated = clock()

    def take(self) -> float:
        """Takes a token: the seconds to wait before using it (0: now)."""
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    async def acquire(self, sleep: Sleep = asyncio.sleep) -> None:
        wait = self.take()
        if wait > 0:
            await sleep(wait)


def status_target(status: ObjectStatus) -> StatusTarget | None:
    """Where `status` is written; None for a kind turnout writes no status of."""
    resource = by_group_kind().get((status.ref.group, status.ref.kind))
    if resource is None or not resource.writes_status:
        return None
    version = status.api_version.rpartition("/")[2] or resource.version
    namespace = status.ref.namespace if resource.namespaced else ""
    return StatusTarget(dataclasses.replace(resource, version=version), namespace, status.ref.name)


# The status to write over the object's current one (None: it says that already).
Desired = Callable[[Mapping[str, Any] | None], dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class WriterSettings:
    controller_name: str
    writes_per_second: float = DEFAULT_WRITES_PER_SECOND
    burst: int = DEFAULT_WRITE_BURST
    workers: int = DEFAULT_WORKERS


class StatusWriter:
    """The controller's status sink in Kubernetes mode (see the module docstring)."""

    def __init__(
        self,
        api: StatusApi,
        settings: WriterSettings,
        *,
        metrics: Metrics | None = None,
        limiter: TokenBucket | None = None,
        sleep: Sleep = asyncio.sleep,
        now: Callable[[], str] = now_rfc3339,
    ) -> None:
        self.api = api
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.limiter = limiter or TokenBucket(settings.writes_per_second, settings.burst)
        self.sleep = sleep
        self.now = now
        self.leading = False
        self._desired: dict[ObjectRef, ObjectStatus] = {}
        # Objects that had a status and have none now: their last one (where to write).
        self._withdrawn: dict[ObjectRef, ObjectStatus] = {}
        self._current: dict[ObjectRef, Observed] = {}
        # An ordered set: objects to compare and maybe write, oldest first.
        self._queue: dict[ObjectRef, None] = {}
        self._inflight: set[ObjectRef] = set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- what the controller and the source say ----------------------------------------------

    def publish(self, statuses: Sequence[ObjectStatus]) -> None:
        """The controller's published statuses: the objects whose status changed are queued."""
        previous = self._desired
        # The controller keeps an unchanged status the very same object: one identity check
        # each, and the per-status work (where it is written) only for the changed ones.
        self._desired = {
            s.ref: s for s in statuses if previous.get(s.ref) is s or status_target(s) is not None
        }
        for ref, status in self._desired.items():
            if previous.get(ref) is status:
                continue
            self._withdrawn.pop(ref, None)
            self._enqueue(ref)
        # A deleted object was forgotten (the watch said so): nothing to take back from it.
        for ref in (previous.keys() - self._desired.keys()) & self._current.keys():
            self._withdrawn[ref] = previous[ref]
            self._enqueue(ref)

    def observe(
        self, ref: ObjectRef, resource_version: str, status: Mapping[str, Any] | None
    ) -> None:
        """The status `ref` has in the API server now (a watch event): compared again, since
        someone else may have written it."""
        known = self._current.get(ref)
        self._current[ref] = Observed(resource_version, status)
        # The echo of this writer's own write (the version it holds already) needs no compare.
        if ref in self._desired and (known is None or known.resource_version != resource_version):
            self._enqueue(ref)

    def forget(self, ref: ObjectRef) -> None:
        """`ref` was deleted. Its desired status goes too: it was computed for the deleted
        object, and a new object of the same name must wait for a compile that has seen it."""
        self._desired.pop(ref, None)
        self._current.pop(ref, None)
        self._queue.pop(ref, None)
        self._withdrawn.pop(ref, None)

    def set_leading(self, leading: bool) -> None:
        """Only the leader writes; a new leader compares every object once."""
        self.metrics.leader.set(1 if leading else 0)
        if leading == self.leading:
            return
        self.leading = leading
        if leading:
            for ref in self._desired:
                self._enqueue(ref)

    def _enqueue(self, ref: ObjectRef) -> None:
        self._queue[ref] = None
        self._idle.clear()
        self._wake.set()

    @property
    def pending(self) -> int:
        """Objects queued or being written."""
        return len(self._queue) + len(self._inflight)

    async def idle(self) -> None:
        """Returns once nothing is queued or being written (tests, the benchmark)."""
        await self._idle.wait()

    # -- the workers -------------------------------------------------------------------------

    async def run(self) -> None:
        workers = [
            asyncio.create_task(self._work(), name=f"status-writer-{i}")
            for i in range(max(1, self.settings.workers))
        ]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            ref = await self._take()
            try:
                await self.write(ref)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # The API server unreachable or answering an error: one line, and the object is
                # compared again later (a newer status may have replaced it meanwhile).
                self.metrics.status_writes.labels(result="error").inc()
                log.warning("cannot write the status of %s: %s; retrying", ref, err or repr(err))
                asyncio.get_running_loop().call_later(ERROR_RETRY_S, self._enqueue, ref)
            finally:
                self._inflight.discard(ref)
                self._settle_idle()

    async def _take(self) -> ObjectRef:
        """The oldest queued object that no other worker is writing (one write per object at a
        time, so a newer status never races an older one)."""
        while True:
            if self.leading:
                for ref in self._queue:
                    if ref not in self._inflight:
                        del self._queue[ref]
                        self._inflight.add(ref)
                        return ref
            self._settle_idle()
            self._wake.clear()
            await self._wake.wait()

    def _settle_idle(self) -> None:
        if self._inflight:
            return
        if not self._queue or not self.leading:
            self._idle.set()
        else:
            self._wake.set()

    def _next(self, ref: ObjectRef) -> tuple[StatusTarget, Desired] | None:
        """Where to write `ref` and what, given the status it has; None: nothing to do."""
        status = self._desired.get(ref)
        last = status if status is not None else self._withdrawn.get(ref)
        target = status_target(last) if last is not None else None
        if last is None or target is None:
            return None
        controller = self.settings.controller_name
        if status is None:
            return target, lambda current: withdrawn(current, controller)
        stamp = self.now() if (ref.group, ref.kind) in PROCESS_TIME_KINDS else None
        body = status.body
        return target, lambda current: status_to_write(
            body, current, controller_name=controller, process_time=stamp
        )

    async def write(self, ref: ObjectRef) -> None:
        """Writes the newest status of `ref` if the object says something else (or, for an
        object that has no status any more, takes turnout's entries out of it); a 409 re-reads
        the object and tries again, with backoff."""
        for attempt in range(MAX_ATTEMPTS):
            job = self._next(ref)
            if job is None or not self.leading:
                return
            try:
                if await self._write_once(ref, *job):
                    self._withdrawn.pop(ref, None)
                    return
            except Gone:
                self._current.pop(ref, None)
                self._withdrawn.pop(ref, None)
                self.metrics.status_writes.labels(result="gone").inc()
                return
            self._current.pop(ref, None)  # re-read before the next attempt
            self.metrics.status_writes.labels(result="conflict").inc()
            await self.sleep(CONFLICT_BACKOFF_S * 2**attempt)
        log.warning("gave up writing the status of %s after %d conflicts", ref, MAX_ATTEMPTS)

    async def _write_once(self, ref: ObjectRef, target: StatusTarget, desired: Desired) -> bool:
        """True when done (written or nothing to write), False on a conflict."""
        observed = self._current.get(ref)
        if observed is None:
            observed = await self.api.read(target)
            self._current[ref] = observed
        body = desired(observed.status)
        if body is None:
            return True
        await self.limiter.acquire(self.sleep)
        try:
            written = await self.api.patch(
                target, observed.resource_version, merge_patch(observed.status, body)
            )
        except Conflict:
            return False
        self._current[ref] = written
        self.metrics.status_writes.labels(result="written").inc()
        return True

"""One resource's list and watch (in one namespace, or all): turnout's own informer, since the
client library has none.

List (the list's resourceVersion) -> the whole list replaces the store partition -> watch from
that resourceVersion with bookmarks, each event applied to the partition and advancing the
resourceVersion (a bookmark advances it too, so a watch that is quiet for long resumes from a
recent version, not one the server has compacted). A watch the server ends (its timeout, a drop)
resumes from the last resourceVersion, so no event is missed and none is applied twice. A 410
Gone (the version was compacted) lists again; the new list replaces the partition, which removes
the objects deleted meanwhile: the deletes the lost events would have carried. A connection error
or an error answer backs off (capped exponential with jitter) and retries the same step."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnout.objects import ObjectRef
from turnout.sources.base import SourceSink
from turnout.sources.kubernetes.api import RETRYABLE, Json, KubeApi, KubeApiError
from turnout.sources.kubernetes.convert import ref_of, to_object
from turnout.sources.kubernetes.kinds import ApiResource

log = logging.getLogger(__name__)

PARTITION_PREFIX = "k8s:"
# A watch that ends sooner than this with no event in it is treated as a failure (backed off).
MIN_WATCH_S = 1.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with full jitter (client-go's reflector backs off the same
    way, so a restarting API server is not stampeded by every controller at once)."""

    initial_s: float = 0.5
    max_s: float = 30.0

    def delay(self, failures: int) -> float:
        ceiling = min(self.max_s, self.initial_s * 2 ** max(0, failures - 1))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True, slots=True)
class WatchSettings:
    backoff: Backoff = Backoff()
    # The server-side timeout of one watch request; client-go picks 5-10 minutes at random so
    # that watches do not all restart together.
    timeout_s: tuple[int, int] = (300, 600)


DEFAULT_SETTINGS = WatchSettings()


class StatusObserver(Protocol):
    """Told the status each object has in the API server (which the store does not keep): the
    status writer compares with it, so it writes only what changed and never reads first."""

    def observe(
        self, ref: ObjectRef, resource_version: str, status: Mapping[str, Any] | None
    ) -> None: ...

    def forget(self, ref: ObjectRef) -> None: ...


class Gone(Exception):
    """410: the resourceVersion to watch from was compacted; list again."""


class NotServed(Exception):
    """404 on the collection: the resource (a CRD) is no longer offered."""


def partition_of(resource: ApiResource, namespace: str | None) -> str:
    base = f"{PARTITION_PREFIX}{resource.group}/{resource.kind}"
    return f"{base}@{namespace}" if namespace is not None else base


def collection_path(resource: ApiResource, namespace: str | None) -> str:
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    if namespace is not None and resource.namespaced:
        return f"{prefix}/namespaces/{namespace}/{resource.plural}"
    return f"{prefix}/{resource.plural}"


class Reflector:
    """Keeps partition `k8s:<group>/<kind>` (`@<namespace>` when limited to one) equal to the
    server's objects. `listed` is set once the first list is in the store."""

    def __init__(
        self,
        api: KubeApi,
        resource: ApiResource,
        namespace: str | None,
        sink: SourceSink,
        settings: WatchSettings = DEFAULT_SETTINGS,
        observer: StatusObserver | None = None,
        keep_status_of: ObjectRef | None = None,
    ) -> None:
        self.api = api
        self.keep_status_of = keep_status_of  # the Envoy Service (its load balancer is read)
        self.observer = observer if resource.writes_status else None
        self.resource = resource
        self.namespace = namespace if resource.namespaced else None
        self.sink = sink
        self.settings = settings
        self.partition = partition_of(resource, self.namespace)
        self.path = collection_path(resource, self.namespace)
        self.listed = asyncio.Event()
        self.rv: str | None = None
        self.lists = 0  # how many lists it took (tests and logs)
        self._failures = 0

    async def run(self) -> None:
        """Until cancelled, or until the resource is no longer served (its partition is then
        removed: the CRD and its objects are gone)."""
        while True:
            try:
                if self.rv is None:
                    await self._list()
                if not await self._watch():
                    # Ended at once with nothing in it (a proxy cutting the stream, a server
                    # shutting down): wait before the next one rather than spin.
                    await self._back_off(None)
            except Gone:
                log.info("%s: resourceVersion %s expired; listing again", self.partition, self.rv)
                self.rv = None
            except NotServed:
                log.warning("%s is no longer served by the API server", self.partition)
                self.sink.remove_partition(self.partition)
                self.listed.set()
                return
            except RETRYABLE as err:
                await self._back_off(err)

    async def _back_off(self, err: BaseException | None) -> None:
        self._failures += 1
        delay = self.settings.backoff.delay(self._failures)
        why = "the watch ended at once" if err is None else str(err) or type(err).__name__
        log.warning("%s: %s; retrying in %.1f s", self.partition, why, delay)
        await asyncio.sleep(delay)

    async def _list(self) -> None:
        try:
            body = await self.api.get(self.path)
        except KubeApiError as err:
            if err.code == 404:
                raise NotServed from err
            raise
        items = body.get("items")
        objects = []
        for item in items if isinstance(items, list) else ():
            obj = (
                to_object(item, self.resource, self.keep_status_of)
                if isinstance(item, dict)
                else None
            )
            if obj is not None:
                objects.append(obj)
                self._observe(item)
        self.sink.replace_partition(self.partition, objects)
        meta = body.get("metadata")
        self.rv = str(meta.get("resourceVersion", "")) if isinstance(meta, dict) else ""
        self.lists += 1
        self._failures = 0
        self.listed.set()

    async def _watch(self) -> bool:
        """One watch request from `self.rv` until the server ends it: whether it was worth
        having (it carried an event, or lasted at least `MIN_WATCH_S`)."""
        params = {"resourceVersion": self.rv or "", "allowWatchBookmarks": "true"}
        timeout = random.randint(*self.settings.timeout_s)
        loop = asyncio.get_running_loop()
        started, events = loop.time(), 0
        try:
            async for event in self.api.watch(self.path, params, timeout):
                self._apply(event)
                self._failures = 0
                events += 1
            return events > 0 or loop.time() - started >= MIN_WATCH_S
        except KubeApiError as err:
            if err.code == 410:
                raise Gone from err
            if err.code == 404:
                raise NotServed from err
            raise

    def _apply(self, event: Json) -> None:
        kind, raw = event.get("type"), event.get("object")
        if not isinstance(raw, dict):
            return
        if kind == "ERROR":
            code = raw.get("code")
            raise KubeApiError(code if isinstance(code, int) else 500, "", str(raw.get("message")))
        self._apply_object(str(kind), raw)
        meta = raw.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(rv, str) and rv:
            self.rv = rv

    def _apply_object(self, kind: str, raw: Json) -> None:
        if kind in ("ADDED", "MODIFIED"):
            obj = to_object(raw, self.resource, self.keep_status_of)
            if obj is not None:
                self.sink.upsert(self.partition, obj)
                self._observe(raw)
        elif kind == "DELETED":
            ref = ref_of(raw, self.resource)
            if ref is not None:
                self.sink.delete(self.partition, ref)
                if self.observer is not None:
                    self.observer.forget(ref)

    def _observe(self, raw: Json) -> None:
        ref = ref_of(raw, self.resource) if self.observer is not None else None
        if self.observer is None or ref is None:
            return
        meta = raw.get("metadata") or {}
        status = raw.get("status")
        self.observer.observe(
            ref,
            str(meta.get("resourceVersion", "")),
            status if isinstance(status, Mapping) else None,
        )

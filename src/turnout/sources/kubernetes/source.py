"""The Kubernetes source (`Source`): every kind turnout reads, listed and watched from an API
server, one reflector per kind (per namespace with `--watch-namespaces`).

Discovery picks each kind's version; a kind the server does not offer is skipped with one
warning and looked for again every `rediscover_s`, so a CRD installed later is picked up (and one
removed takes its objects with it). `synced()` comes once every offered kind has listed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

from lightkube.config.kubeconfig import SingleConfig

from turnout.objects import ObjectRef
from turnout.sources.base import SourceSink
from turnout.sources.kubernetes.api import RETRYABLE, KubeApi
from turnout.sources.kubernetes.discovery import discover, wanted
from turnout.sources.kubernetes.kinds import ApiResource
from turnout.sources.kubernetes.reflector import (
    DEFAULT_SETTINGS,
    Reflector,
    StatusObserver,
    WatchSettings,
)

log = logging.getLogger(__name__)

# How often kinds the server did not offer are looked for again (a CRD installed later).
DEFAULT_REDISCOVER_S = 30.0


class KubernetesSource:
    def __init__(
        self,
        config: SingleConfig,
        readable: Iterable[tuple[str, str]],
        namespaces: Sequence[str] = (),
        rediscover_s: float = DEFAULT_REDISCOVER_S,
        settings: WatchSettings = DEFAULT_SETTINGS,
        observer: StatusObserver | None = None,
        envoy_service: ObjectRef | None = None,
    ) -> None:
        self._config = config
        # The Service whose `status.loadBalancer` is kept (`--envoy-service`).
        self.envoy_service = envoy_service
        self.observer = observer  # the status writer, told each object's current status
        self._want = wanted(readable)
        self._namespaces = tuple(namespaces)
        self._rediscover_s = rediscover_s
        self._settings = settings
        self.name = f"kubernetes {config.cluster.server}"
        self._running: dict[tuple[str, str], list[tuple[Reflector, asyncio.Task[None]]]] = {}
        self._warned: set[tuple[str, str]] = set()

    @property
    def reflectors(self) -> list[Reflector]:
        return [r for pairs in self._running.values() for r, _ in pairs]

    async def run(self, sink: SourceSink) -> None:
        api = KubeApi.connect(self._config)
        try:
            await self._discover(api, sink)
            await self._all_listed()
            sink.synced()
            while True:
                await asyncio.sleep(self._rediscover_s)
                try:
                    await self._discover(api, sink)
                except RETRYABLE as err:
                    log.warning("Kubernetes discovery failed: %s; trying again later", err)
        finally:
            await self._stop_all()
            await api.close()

    async def reload(self) -> None:
        """Lists every kind again (each list replaces its partition) and waits until done."""
        for pairs in self._running.values():
            for index, (reflector, task) in enumerate(pairs):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                reflector.rv = None
                reflector.listed.clear()
                pairs[index] = (reflector, asyncio.create_task(reflector.run()))
        await self._all_listed()

    async def _all_listed(self) -> None:
        await asyncio.gather(*(r.listed.wait() for r in self.reflectors))

    async def _stop_all(self) -> None:
        tasks = [t for pairs in self._running.values() for _, t in pairs]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()

    async def _discover(self, api: KubeApi, sink: SourceSink) -> None:
        found = await discover(api, self._want)
        for resource in found.missing:
            key = (resource.group, resource.kind)
            if key not in self._warned:
                self._warned.add(key)
                log.warning(
                    "the API server does not offer %s %s (%s); skipped until it does",
                    resource.kind,
                    resource.group or "core",
                    resource.plural,
                )
        for resource in found.served:
            self._start(api, resource, sink)

    def _start(self, api: KubeApi, resource: ApiResource, sink: SourceSink) -> None:
        key = (resource.group, resource.kind)
        running = self._running.get(key)
        if running and not all(task.done() for _, task in running):
            return
        if key in self._warned:
            log.info("the API server now offers %s %s", resource.kind, resource.api_version)
            self._warned.discard(key)
        namespaces: Sequence[str | None] = (
            self._namespaces if resource.namespaced and self._namespaces else (None,)
        )
        pairs = []
        for ns in namespaces:
            reflector = Reflector(
                api, resource, ns, sink, self._settings, self.observer, self.envoy_service
            )
            pairs.append((reflector, asyncio.create_task(reflector.run())))
        self._running[key] = pairs

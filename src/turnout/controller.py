"""The running control plane: sources -> store -> compile -> translate -> xDS, plus status sinks.

`Controller` owns one store, one xDS server and (in standalone mode) one supervised Envoy. Every
change recompiles the whole store; the compile is a pure function, so the controller's only state
is the latest result and what Envoy acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnout.compile_inputs import CompileOptions, IssuerDiscovery
from turnout.config import ServeConfig
from turnout.envoy.bootstrap import bootstrap_config, write_bootstrap
from turnout.envoy.process import EnvoyProcess
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.xds import XdsServer
from turnout.graph.build import CompileResult, build_graph
from turnout.graph.dialect import Dialects, EnvoyView
from turnout.metrics import Metrics
from turnout.objects import ObjectRef
from turnout.sources.files import FileSource
from turnout.sources.oidc import IssuerDiscoverer
from turnout.status.model import ObjectStatus, State
from turnout.store import Snapshot, SourceProblem, Store

log = logging.getLogger("turnout")


@dataclass(frozen=True, slots=True)
class Applied:
    """One compile that was handed to the xDS server."""

    result: CompileResult
    version: str
    compiled_at: float
    snapshot: Snapshot | None = None  # the compiled input (Gateway listeners name their ports)


class Controller:
    def __init__(
        self,
        config: ServeConfig,
        *,
        dialects: Dialects,
        compile_options: CompileOptions,
        translate_options: TranslateOptions,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.dialects = dialects
        self.compile_options = compile_options
        self.translate_options = translate_options
        self.metrics = metrics or Metrics()
        self.store = Store()
        self.files = FileSource(list(config.paths), self.store)
        self.xds = XdsServer(self.metrics)
        self.envoy: EnvoyProcess | None = None
        self.applied: Applied | None = None
        self.xds_port: int = config.xds_port
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._demo: list[object] = []
        self._last_states: dict[ObjectRef, tuple[State, str]] = {}
        self.applied_problems: tuple[SourceProblem, ...] = ()
        self.compile_error: str | None = None
        self.watch_error: str | None = None
        self._compile_lock = asyncio.Lock()
        # OpenID discovery for RouteGroups' jwtValidation: network calls stay out of the compile,
        # whose input the answers become; a changed answer recompiles.
        self.oidc = IssuerDiscoverer(self.recompile)

    # -- compile -------------------------------------------------------------------------------

    def _compile(
        self, snapshot: Snapshot, discovery: tuple[IssuerDiscovery, ...] = ()
    ) -> tuple[CompileResult, EnvoyResources]:
        """Pure and thread-safe: it reads only the immutable snapshot and discovery answers."""
        options = self.compile_options
        if discovery:
            options = dataclasses.replace(options, issuer_discovery=discovery)
        result = build_graph(snapshot, options, self.dialects.all)
        return result, translate(result.graph, self.translate_options)

    async def recompile(self) -> Applied | None:
        """Compiles the current store and hands the result to the xDS server.

        The compile runs in a worker thread so a large one does not stall ADS streams or the
        admin server; compiles are serialized so the newest snapshot is always applied last.

        A failure here is a bug in turnout, not bad input (dialects turn bad input into status).
        It must not take turnout down or change anyone's routing: the last good configuration
        stays in force, and /readyz reports the failure until a compile succeeds.
        """
        async with self._compile_lock:
            started = time.perf_counter()
            snapshot = self.store.snapshot()
            try:
                inputs = self.dialects.external_inputs(snapshot, self.compile_options)
                self.oidc.track(tuple(sorted(inputs.oidc_issuers)))
                result, resources = await asyncio.to_thread(
                    self._compile, snapshot, self.oidc.results()
                )
                version = self.xds.set_resources(resources)
            except Exception as err:
                self.compile_error = f"compile failed, last good configuration kept: {err!r}"
                self.metrics.compile_errors.inc()
                log.exception("compile failed; the last good configuration stays in force")
                return self.applied
            self.compile_error = None
            elapsed = time.perf_counter() - started
            self.metrics.compile_seconds.observe(elapsed)
            self.metrics.compiles.inc()
            self.applied = Applied(result, version, time.time(), snapshot)
            self._publish(result)
            log.debug(
                "compiled %d objects in %.1f ms (version %s)",
                len(snapshot.objects),
                elapsed * 1000,
                version,
            )
            return self.applied

    def _publish(self, result: CompileResult) -> None:
        """Status sinks: metrics, and a log line for every object whose state changed."""
        counts: Counter[tuple[str, str]] = Counter(
            (s.ref.kind, s.state.value) for s in result.statuses
        )
        self.metrics.objects.clear()
        for (kind, state), n in sorted(counts.items()):
            self.metrics.objects.labels(kind=kind, state=state).set(n)
        self.metrics.source_problems.set(len(result.problems))
        seen: dict[ObjectRef, tuple[State, str]] = {}
        for status in result.statuses:
            current = (status.state, status.summary)
            seen[status.ref] = current
            if self._last_states.get(status.ref) != current:
                level = logging.INFO if status.state is State.VALID else logging.WARNING
                log.log(level, "%s: %s: %s", status.ref, status.state.value, status.summary)
        for ref in self._last_states.keys() - seen.keys():
            log.info("%s: removed", ref)
        self._last_states = seen
        # Parse problems are logged by the files source as they happen; the rest once per change.
        previous = set(self.applied_problems)
        for problem in result.problems:
            if problem not in previous and problem.severity != "unreadable":
                log.warning("input problem: %s", problem)
        self.applied_problems = result.problems

    def statuses(self) -> tuple[ObjectStatus, ...]:
        """The compiled statuses, each Gateway listener Programmed once every connected Envoy (at
        least one) has the current content of its port's Envoy listener (and the route
        configurations and secrets it loads), Invalid with Envoy's message when one rejected it,
        Pending until then; a Gateway by its listeners. Changes and rejections elsewhere do not
        touch them."""
        applied = self.applied
        if applied is None:
            return ()
        statuses = applied.result.statuses
        if applied.version != self.xds.version:
            return statuses
        snapshot = applied.snapshot

        def probe(name: str) -> tuple[str, str]:
            state = self.xds.listener_state(name)
            if not state.exists:
                # "closed": every Envoy acknowledged a configuration without it (port closed)
                return ("closed" if state.programmed else "absent"), state.message
            if state.programmed is None:
                return "pending", state.message
            return ("programmed" if state.programmed else "rejected"), state.message

        objects = snapshot.get_ref if snapshot is not None else (lambda ref: None)
        return self.dialects.settle(statuses, EnvoyView(probe, objects))

    def status_json(self, status: ObjectStatus) -> dict[str, Any]:
        return self.dialects.status_json(status)

    def problems(self) -> tuple[SourceProblem, ...]:
        return self.applied.result.problems if self.applied else ()

    def readiness(self) -> tuple[bool, str]:
        if self.compile_error is not None:
            return False, self.compile_error
        if self.watch_error is not None:
            return False, self.watch_error
        if self.applied is None:
            return False, "no configuration compiled yet"
        # Readiness means everything turnout could program is programmed: Envoy refusing a
        # Gateway's port (busy, privileged) is reported on that Gateway's listener as
        # Programmed False and must not take every other tenant's readiness down with it.
        return self.xds.readiness(self.dialects.reported_listeners(self.applied.result.graph))

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.files.load_all()
        self.xds_port = await self.xds.start(self.config.address, self.config.xds_port)
        await self.recompile()
        if self.config.demo_backends:
            await self._start_demo_backends()
        if self.config.watch:
            self._tasks.append(asyncio.create_task(self._watch(), name="turnout-watch"))
        if self.config.run_envoy:
            bootstrap_path = self._work_dir() / "envoy-bootstrap.yaml"
            write_bootstrap(bootstrap_path, self.bootstrap())
            self.envoy = EnvoyProcess(
                bootstrap_path,
                log_level=self.config.envoy_log_level,
                metrics=self.metrics,
                extra_args=self.config.extra_envoy_args,
            )
            await self.envoy.start()

    def bootstrap(self) -> dict[str, object]:
        return bootstrap_config(
            xds_address=self.config.address,
            xds_port=self.xds_port,
            admin_address=self.config.address,
            admin_port=self.config.envoy_admin_port,
            node_id=self.config.node_id,
        )

    async def reload(self) -> Applied | None:
        """Re-reads every file and recompiles (tests and SIGHUP use it)."""
        self.files.load_all()
        return await self.recompile()

    async def _watch(self) -> None:
        """Runs the file watcher, restarting it (with backoff) if it ever fails: a dead watcher
        would silently freeze the configuration, so /readyz reports it until it runs again."""

        async def changed() -> None:
            await self.recompile()

        backoff = 0.5
        while not self._stop.is_set():
            try:
                await self.files.watch(
                    changed, debounce_ms=self.config.debounce_ms, stop_event=self._stop
                )
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self.watch_error = f"file watcher failed, restarting: {err!r}"
                log.exception("file watcher failed; restarting in %.1f s", backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                # Changes made while the watcher was down are picked up by a full reload.
                self.files.load_all()
                await self.recompile()
                self.watch_error = None

    async def _start_demo_backends(self) -> None:
        from turnout.echo import demo_backends, start_echo

        started: set[tuple[str, int]] = set()
        for namespace, service, address, port in demo_backends(self.store.snapshot()):
            if (address, port) in started:
                continue
            try:
                self._demo.append(
                    await start_echo(address, port, name=service, namespace=namespace)
                )
                started.add((address, port))
                log.info(
                    "demo echo backend %s/%s listening on %s:%d", namespace, service, address, port
                )
            except (OSError, ValueError, OverflowError) as err:
                log.warning(
                    "cannot start demo echo backend %s/%s on %s:%d: %s",
                    namespace,
                    service,
                    address,
                    port,
                    err,
                )

    def _work_dir(self) -> Path:
        if self.config.work_dir is not None:
            self.config.work_dir.mkdir(parents=True, exist_ok=True)
            return self.config.work_dir
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="turnout-")
        return Path(self._tmp.name)

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.envoy is not None:
            await self.envoy.stop()
        await self.oidc.close()
        await self.xds.stop()
        for server in self._demo:
            close = getattr(server, "close", None)
            if close is not None:
                await close()
        self._demo.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

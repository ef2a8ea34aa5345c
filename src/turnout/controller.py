"""The running control plane: sources -> store -> compile -> translate -> xDS, plus status sinks.

`Controller` owns one store, one xDS server and (in standalone mode) one supervised Envoy. Its
sources (`turnout.sources.base.Source`) write into the store; every change recompiles the whole
store (except an endpoint-only one, below); the compile is a pure function, so the controller's
only state is the latest result, the
statuses as Envoy's answers settled them, and what Envoy acknowledged.

When it compiles:

* not before every source has listed everything once (`synced`): a half-listed store would
  program Envoy with routes missing and report objects as orphaned. `/readyz` names the source
  it waits for.
* a change that comes after a quiet window (no change for `ServeConfig.debounce_ms`, 20 ms by
  default) compiles at once: a compile costs what the change touched, so waiting would be most
  of its latency. A change that comes sooner (during that compile, or in a burst: a `kubectl
  apply` of many objects, a `git checkout`) waits until no change came for `debounce_ms`, but
  never longer than `MAX_DELAY_S` (1 s) after the first change not compiled yet, so a steady
  trickle cannot starve it: a burst is one leading compile and one (or a few) more.
* not at all when the store holds what the last good compile compiled (a file touched or
  rewritten with the same content), with the same discovery answers.
* without the dialects when only EndpointSlices or Endpoints of Services no routing decision
  reads changed (`graph.endpoint_update`): the last result with those Services' endpoints
  redone, exactly what a full compile gives; such a burst's quiet window is
  `ENDPOINT_DEBOUNCE_S`.

Statuses: what only Envoy's answer decides (a Gateway's `Programmed`) is settled when the xDS
server reports that Envoy answered (ACK or NACK) and right after each compile, not when someone
reads them; each condition's `lastTransitionTime` is carried over from the last published status
while the condition's status stays the same, across compiles too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import gc
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import filterfalse
from typing import Any, Generic, TypeVar

from turnout.compile_inputs import CompileOptions, IssuerDiscovery, PathNormalization
from turnout.config import ServeConfig
from turnout.envoy.bootstrap import (
    XdsClientTls,
    bootstrap_config,
    bootstrap_yaml,
    write_bootstrap,
    write_xds_sds_files,
)
from turnout.envoy.process import EnvoyProcess
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.served_state import (
    ServedKey,
    ServedState,
    ServedStateFile,
    environment_key,
    files_key,
)
from turnout.envoy.state import StateDir, default_state_dir, our_envoy, same_bootstrap
from turnout.envoy.translate import TranslateMemo, retranslate_clusters, translate
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.xds import Serialized, XdsServer
from turnout.envoy.xds_tls import child_client_tls, server_credentials
from turnout.graph.attribution import rejection_findings
from turnout.graph.build import CompileResult, build_graph, fold_findings
from turnout.graph.dialect import Dialect, Dialects, EnvoyView
from turnout.graph.endpoint_update import endpoint_services, update_endpoints
from turnout.graph.load_balancer import service_addresses
from turnout.graph.memo import CompileMemo
from turnout.metrics import Metrics
from turnout.objects import ObjectRef, group_of
from turnout.sources.base import Source, StoreSink
from turnout.sources.files import CACHE_SAVE_DELAY_S, FileSource, FileStat, file_stats
from turnout.sources.local_addresses import HostWatcher
from turnout.sources.oidc import IssuerDiscoverer
from turnout.status.model import IgnoredObject, ObjectStatus, State, stamp_transitions
from turnout.status.sink import StatusSink
from turnout.store import (
    Change,
    Snapshot,
    SourceProblem,
    Store,
    changed_objects,
    same_content,
)

log = logging.getLogger("turnout")

# The longest a change waits for its compile while more changes keep coming.
MAX_DELAY_S = 1.0
# Versions waiting for every Envoy's ACK to time their change: bounded, as with no Envoy
# connected none is ever acknowledged.
MAX_UNACKED_CHANGES = 64
# The debounce of a burst that changed only EndpointSlices or Endpoints: such a change costs
# milliseconds (the endpoints fast path), so waiting the full debounce_ms would be most of its
# latency; a rolling update's writes arriving together still make one update.
ENDPOINT_DEBOUNCE_S = 0.01
ENDPOINT_KINDS = frozenset({("discovery.k8s.io", "EndpointSlice"), ("", "Endpoints")})
# How long after a compile `freeze_heap` runs (`Controller.freeze_heap`): after the push.
FREEZE_DELAY_S = 0.05
# A cold start that takes longer than this says how far it got, every this often.
PROGRESS_INTERVAL_S = 1.0
# The served state (`envoy.served_state`) is written once no change came for as long as the
# parse cache waits, looked at this often.
SERVED_STATE_QUIET_S = CACHE_SAVE_DELAY_S
SERVED_STATE_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class Applied:
    """One compile that was handed to the xDS server."""

    result: CompileResult
    version: str
    compiled_at: float
    snapshot: Snapshot | None = None  # the compiled input (Gateway listeners name their ports)
    resources: EnvoyResources | None = None  # what went to the xDS server (admin /debug/xds)


@dataclass(frozen=True, slots=True)
class _Input:
    """What a compile read: the same input compiles to the same result, so it is skipped."""

    snapshot: Snapshot
    discovery: tuple[IssuerDiscovery, ...]
    compile_options: CompileOptions
    translate_options: TranslateOptions

    def same(self, other: _Input | None, changes: Sequence[Change] | None = None) -> bool:
        """`changes`: the objects changed from `other`'s snapshot to this one (the store's log,
        which costs what changed), None: compare every object."""
        if other is None:
            return False
        if changes is None:
            same_objects = same_content(self.snapshot, other.snapshot)
        else:
            same_objects = not changes and self.snapshot.problems == other.snapshot.problems
        return (
            same_objects
            and self.discovery == other.discovery
            and self.compile_options == other.compile_options
            and self.translate_options == other.translate_options
        )


def _connectable(address: str) -> str:
    """Where the child Envoy reaches a server bound on `address`: this host's loopback for the
    unspecified address (binding 0.0.0.0 also listens there)."""
    if address in ("", "0.0.0.0"):
        return "127.0.0.1"
    if address == "::":
        return "::1"
    return address


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def programmed_counts(statuses: Iterable[ObjectStatus]) -> dict[str, int]:
    """How many objects (Gateways) have a `Programmed` condition of their own True, False and
    Unknown."""
    counts = {"True": 0, "False": 0, "Unknown": 0}
    for status in statuses:
        programmed = status.condition("Programmed")
        if programmed is not None:
            counts[str(programmed.status)] += 1
    return counts


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IdentityDiff(Generic[T]):
    """A sequence against the one before, by identity: the new one by `id`, and the items
    that came (not in the one before) and went (not in the new one)."""

    by_id: dict[int, T]
    added: tuple[T, ...]
    removed: tuple[T, ...]


def identity_diff(before: dict[int, T], items: Sequence[T]) -> IdentityDiff[T]:
    """`items` against `before` (the `by_id` of the last diff, which keeps those items alive,
    so no `id` is reused meanwhile): a few C-speed passes, then work in what changed."""
    by_id = dict(zip(map(id, items), items, strict=True))
    added = tuple(map(by_id.__getitem__, filterfalse(before.__contains__, by_id)))
    # by_id is what both hold plus `added`, `before` what both hold plus what went.
    if len(before) == len(by_id) - len(added):
        return IdentityDiff(by_id, added, ())
    removed = tuple(map(before.__getitem__, filterfalse(by_id.__contains__, before)))
    return IdentityDiff(by_id, added, removed)


def settled_kinds(dialects: Dialects) -> frozenset[tuple[str, str]]:
    """The (group, kind)s of the dialects whose `settle` changes statuses (it is overridden):
    only those statuses are settled again when Envoy answers."""
    overriding = (d for d in dialects.all if type(d).settle is not Dialect.settle)
    return frozenset((group_of(v), k) for d in overriding for v, k in d.kinds)


def _by_ref(status: ObjectStatus) -> ObjectRef:
    return status.ref


def freeze_heap() -> None:
    """Moves everything alive out of the cyclic collector's passes (`gc.freeze`, O(1)) after
    the young generations were collected (so no cyclic garbage is frozen).

    What a compile builds lives until a later change replaces it, and is freed then by
    reference counting (its pieces hold no cycles: 200 changes frozen this way left no
    unreachable object behind). Left to the collector, each change's survivors would pile up
    until a full collection walks them all: pauses of 1-2 s at 10,000 objects."""
    gc.collect(1)
    gc.freeze()


def envoy_state_dir(config: ServeConfig) -> StateDir:
    """Where the Envoy child's bootstrap, pid file and admin socket live."""
    return StateDir(config.state_dir or default_state_dir(config.http_port))


def running_envoy(config: ServeConfig) -> int | None:
    """The pid of the Envoy a previous turnout left running in the state directory, if any."""
    return our_envoy(envoy_state_dir(config), config.node_id)


class Controller:
    def __init__(
        self,
        config: ServeConfig,
        *,
        sources: Sequence[Source],
        dialects: Dialects,
        compile_options: CompileOptions,
        translate_options: TranslateOptions,
        metrics: Metrics | None = None,
        status_sinks: Sequence[StatusSink] = (),
        envoy_service: ObjectRef | None = None,
        served_state: ServedStateFile | None = None,
    ) -> None:
        self.config = config
        # Kubernetes mode: the Service whose load balancer addresses statuses name, read from
        # the store into the compile's options (`--envoy-service`).
        self.envoy_service = envoy_service
        # Told every published status (Kubernetes mode: the status writer).
        self.status_sinks = tuple(status_sinks)
        self.sources = tuple(sources)
        self.dialects = dialects
        self.compile_options = compile_options
        self.translate_options = translate_options
        self.metrics = metrics or Metrics()
        self.store = Store()
        self.xds = XdsServer(
            self.metrics,
            on_state_change=self._settle,
            inline_scopes=config.xds_inline_scopes,
        )
        self.envoy: EnvoyProcess | None = None
        self.applied: Applied | None = None
        self.xds_port: int = config.xds_port
        self._init_compile_state()
        self._init_loop_state()
        self._init_publish_state()
        self._init_served_state(served_state)

    def _init_served_state(self, served_state: ServedStateFile | None) -> None:
        """The served state: with one files source, what the xDS server held is saved for the
        next start, which serves it until its first compile when nothing changed meanwhile."""
        only = self.sources[0] if len(self.sources) == 1 else None
        self._files = only if isinstance(only, FileSource) else None
        self.served_state = served_state if self._files is not None else None
        # The listeners readiness excuses while the restored state is served (None: it is
        # not), what was saved or restored last, and when it was looked at last.
        self._restored_listeners: frozenset[str] | None = None
        self._served_key: tuple[ServedKey, str] | None = None
        self._served_mark: tuple[object, ...] | None = None
        self._last_compiled = -math.inf  # monotonic

    def _init_compile_state(self) -> None:
        """What the last compile left: its results and errors, and the memos the next one
        carries."""
        self.applied_problems: tuple[SourceProblem, ...] = ()
        self._ignored: tuple[IgnoredObject, ...] = ()  # the last compile's, and as a set:
        self._last_ignored: frozenset[IgnoredObject] = frozenset()
        self.compile_error: str | None = None
        self._source_errors: dict[int, str] = {}  # a failed source until it listed again
        # What the compiles carry from one to the next (`graph.memo`, `envoy.translate.memo`),
        # and the snapshot the compile memo last compiled: an endpoints fast path in between
        # changes the store but not the memo, so the next compile's changes start there.
        self._compile_memo = CompileMemo()
        self._translate_memo = TranslateMemo()
        self._memo_snapshot: Snapshot | None = None
        # `freeze_heap` after every compile (`turnout serve` of files sets it, after its cold
        # start froze the heap: `cli.cold_start_gc`).
        self.freeze_heap = False
        # OpenID discovery for RouteGroups' jwtValidation: network calls stay out of the compile,
        # whose input the answers become; a changed answer recompiles.
        self.oidc = IssuerDiscoverer(self.recompile)
        # This host's addresses and the answers for the DNS names upstreams use, found outside
        # the compile like OpenID discovery and refreshed every 30 s.
        self.hosts = HostWatcher(self.recompile)

    def _init_loop_state(self) -> None:
        """The tasks, events and timings of the source and compile loops."""
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._demo: list[object] = []
        self._compile_lock = asyncio.Lock()
        self._compiled: _Input | None = None  # the input of the last good compile
        self._dirty = asyncio.Event()  # the store changed since the compile loop last looked
        self._synced: set[int] = set()  # indexes of the sources that listed everything
        self._all_synced = asyncio.Event()
        self._first_compile = asyncio.Event()
        # When the first source change not yet compiled was seen (monotonic), and the versions
        # holding changes not yet acknowledged by every Envoy: turnout_change_to_ack_seconds.
        self._change_seen: float | None = None
        self._unacked: collections.deque[tuple[str, float]] = collections.deque(
            maxlen=MAX_UNACKED_CHANGES
        )
        # The burst being coalesced (`_coalesce`, monotonic times): when its first change not
        # yet compiled came, whether that one came after a quiet window (compiled at once),
        # and when the last change came.
        self._burst_start: float | None = None
        self._leading = False
        self._last_change = -math.inf

    def _init_publish_state(self) -> None:
        """The statuses as published, and what publishing them patches from one compile to the
        next."""
        # The published statuses: compiled, settled by Envoy's answers, stamped with transition
        # times; and the settled-but-unstamped ones they came from, to skip unchanged work.
        # All by identity (`identity_diff`): an unchanged status is the very same object from
        # one compile to the next, so the work per change is in the statuses that changed.
        self._published: tuple[ObjectStatus, ...] = ()
        self._settled: tuple[ObjectStatus, ...] = ()  # what `_published` was stamped from
        self._settled_by_id: dict[int, ObjectStatus] = {}
        self._published_of: dict[int, ObjectStatus] = {}  # id of a settled status -> published
        # The compiled statuses `_publish` last saw, their counts by (kind, state), and those
        # of the kinds some dialect settles with Envoy's answers (`settled_kinds`).
        self._compiled_by_id: dict[int, ObjectStatus] = {}
        # The compiled statuses, and the last diff: from, to, and what changed (settled as
        # compiled, they are what `_publish_settled` needs too).
        self._compiled_statuses: tuple[ObjectStatus, ...] = ()
        self._compiled_diff: tuple[
            tuple[ObjectStatus, ...], tuple[ObjectStatus, ...], IdentityDiff[ObjectStatus]
        ] = ((), (), IdentityDiff({}, (), ()))
        self._state_counts: Counter[tuple[str, str]] = Counter()
        self._settled_kinds = settled_kinds(self.dialects)
        self._to_settle: dict[int, ObjectStatus] = {}
        self._programmed: Counter[str] = Counter()  # programmed_counts of _published

    # -- compile -------------------------------------------------------------------------------

    def _compile(
        self, snapshot: Snapshot, options: CompileOptions, changes: tuple[Change, ...] | None
    ) -> tuple[CompileResult, EnvoyResources]:
        """A pure function of the immutable snapshot and options; the memos it carries make it
        cost what changed since the last compile (`changes`, None: work them out), and are used
        by one compile at a time (`_compile_lock`)."""
        self._memo_snapshot = None  # until this compile is through, the memos are suspect
        result = build_graph(snapshot, options, self.dialects.all, self._compile_memo, changes)
        resources = translate(result.graph, self.translate_options, self._translate_memo)
        self._memo_snapshot = snapshot
        return result, resources

    def _memo_changes(self, snapshot: Snapshot) -> tuple[Change, ...] | None:
        """What changed since the compile memo's last snapshot (the store's log); None: the
        memo works it out (or has none and compiles everything)."""
        old = self._memo_snapshot
        return None if old is None else self.store.changes(old, snapshot)

    def _drop_memos(self) -> None:
        """After a failed compile nothing a memo holds is trusted: the next compile is full."""
        self._compile_memo = CompileMemo()
        self._translate_memo = TranslateMemo()
        self._memo_snapshot = None

    async def recompile(self) -> Applied | None:
        """Compiles the current store and hands the result to the xDS server, unless the store
        holds what the last good compile compiled.

        The compile runs in a worker thread so a large one does not stall ADS streams or the
        admin server; compiles are serialized so the newest snapshot is always applied last.
        A compile that names a DNS upstream not resolved yet is done again once it is, before
        anything is applied, so a name leading to this host never reaches Envoy's first config.

        A failure here is a bug in turnout, not bad input (dialects turn bad input into status).
        It must not take turnout down or change anyone's routing: the last good configuration
        stays in force, and /readyz reports the failure until a compile succeeds.
        """
        async with self._compile_lock:
            started = time.perf_counter()
            change_seen, self._change_seen = self._change_seen, None
            self._burst_start = None
            snapshot = self.store.snapshot()
            self.store.clear_pending()
            compiled = self._compiled
            # The store unchanged since then: no need to look for external inputs again.
            if (
                compiled is not None
                and compiled.snapshot is snapshot
                and (self._input(snapshot).same(compiled))
            ):
                return self.applied
            try:
                inputs = self.dialects.external_inputs(snapshot, self.compile_options)
                self.oidc.track(tuple(sorted(inputs.oidc_issuers)))
                compile_input = self._input(snapshot)
                changes = self._changes(snapshot)
                if compile_input.same(self._compiled, changes):
                    return self.applied
                fast = await asyncio.to_thread(self._endpoint_update, compile_input, changes)
                if fast is not None:
                    result, resources = fast
                else:
                    result, resources = await asyncio.to_thread(
                        self._compile,
                        snapshot,
                        compile_input.compile_options,
                        self._memo_changes(snapshot),
                    )
                if fast is None and await asyncio.to_thread(self.hosts.track, result.dns_names):
                    compile_input = self._input(snapshot)
                    result, resources = await asyncio.to_thread(
                        self._compile,
                        snapshot,
                        compile_input.compile_options,
                        self._memo_changes(snapshot),
                    )
                previous = self.xds.version
                version = self.xds.set_resources(resources)
            except Exception as err:
                self._drop_memos()
                self.compile_error = f"compile failed, last good configuration kept: {err!r}"
                self.metrics.compile_errors.inc()
                log.exception("compile failed; the last good configuration stays in force")
                return self.applied
            self._compiled = compile_input
            if change_seen is not None and version != previous:
                self._unacked.append((version, change_seen))
            self._applied(result, version, snapshot, time.perf_counter() - started, resources)
            if self.freeze_heap:
                # Once the push to Envoy is out (its stream task runs next): not in its way.
                asyncio.get_running_loop().call_later(FREEZE_DELAY_S, freeze_heap)
            return self.applied

    def _changes(self, snapshot: Snapshot) -> tuple[Change, ...] | None:
        """What changed since the last good compile's input, from the store's log (in the event
        loop, which writes the store); None when the log cannot tell."""
        old = self._compiled
        return None if old is None else self.store.changes(old.snapshot, snapshot)

    def _endpoint_update(
        self, new: _Input, changes: tuple[Change, ...] | None
    ) -> tuple[CompileResult, EnvoyResources] | None:
        """The last compile with the endpoints of `new` when only EndpointSlices (or Endpoints)
        of Services no routing decision depends on changed since it (`changes`; None: compare
        the snapshots): the dialects do not run and only those clusters are translated anew
        (`update_endpoints`, exactly a full compile's result). None: compile everything."""
        old, applied = self._compiled, self.applied
        if old is None or applied is None or applied.resources is None:
            return None
        if (old.discovery, old.compile_options, old.translate_options) != (
            new.discovery,
            new.compile_options,
            new.translate_options,
        ):
            return None
        if changes is None:
            changes = changed_objects(old.snapshot, new.snapshot)
        if endpoint_services(changes) is None:
            return None
        try:
            update = update_endpoints(
                applied.result, old.snapshot, new.snapshot, changes, new.compile_options
            )
            if update is None:
                return None
            resources = retranslate_clusters(
                applied.resources,
                update.result.graph,
                update.clusters,
                new.translate_options,
                self._translate_memo,
            )
        except Exception:
            # A bug here must cost only speed: the full compile decides.
            log.exception("endpoint update failed; compiling everything")
            return None
        log.debug("endpoints of %d cluster(s) updated without a compile", len(update.clusters))
        return update.result, resources

    def _input(self, snapshot: Snapshot) -> _Input:
        discovery = self.oidc.results()
        options = dataclasses.replace(
            self.compile_options,
            issuer_discovery=discovery or self.compile_options.issuer_discovery,
            local_addresses=self.hosts.addresses,
            dns_answers=self.hosts.answers,
            service_addresses=service_addresses(snapshot, self.envoy_service),
        )
        return _Input(snapshot, discovery, options, self.translate_options)

    def _applied(
        self,
        result: CompileResult,
        version: str,
        snapshot: Snapshot,
        elapsed: float,
        resources: EnvoyResources,
    ) -> None:
        self.compile_error = None
        self._restored_listeners = None
        self._last_compiled = time.monotonic()
        self.metrics.compile_seconds.observe(elapsed)
        self.metrics.compiles.inc()
        self.applied = Applied(result, version, time.time(), snapshot, resources)
        self._publish(result)
        self._settle()
        log.debug(
            "compiled %d objects in %.1f ms (version %s)",
            len(snapshot.objects),
            elapsed * 1000,
            version,
        )

    def _publish(self, result: CompileResult) -> None:
        """Status sinks: metrics, and a log line for every object whose state changed. The
        compile keeps an unchanged object's status the very same object, so the work per
        compile is in the statuses that changed."""
        diff = identity_diff(self._compiled_by_id, result.statuses)
        self._compiled_by_id = diff.by_id
        self._compiled_diff = (self._compiled_statuses, result.statuses, diff)
        self._compiled_statuses = result.statuses
        if diff.added or diff.removed:
            self._count_and_log(diff)
        for status in diff.removed:
            self._to_settle.pop(id(status), None)
        for status in diff.added:
            if (status.ref.group, status.ref.kind) in self._settled_kinds:
                self._to_settle[id(status)] = status
        self.metrics.source_problems.set(len(result.problems))
        # Parse problems are logged by the files source as they happen; the rest once per change.
        if result.problems != self.applied_problems:
            previous = set(self.applied_problems)
            for problem in result.problems:
                if problem not in previous and problem.severity != "unreadable":
                    log.warning("input problem: %s", problem)
        self.applied_problems = result.problems
        # Another controller's objects are normal: info, once each, so nothing is ignored silently.
        if result.ignored is not self._ignored:
            for ignored in result.ignored:
                if ignored not in self._last_ignored:
                    log.info("%s: ignored: %s", ignored.ref, ignored.reason)
            self._ignored, self._last_ignored = result.ignored, frozenset(result.ignored)

    def _count_and_log(self, diff: IdentityDiff[ObjectStatus]) -> None:
        """The object counts by (kind, state) and a log line per object whose state changed
        (or that came or went), from the statuses that changed since the last compile."""
        counts = self._state_counts
        gone: dict[ObjectRef, ObjectStatus] = {s.ref: s for s in diff.removed}
        for removed in diff.removed:
            counts[(removed.ref.kind, removed.state.value)] -= 1
        for status in sorted(diff.added, key=_by_ref):
            counts[(status.ref.kind, status.state.value)] += 1
            old = gone.pop(status.ref, None)
            if old is None or (old.state, old.summary) != (status.state, status.summary):
                level = logging.INFO if status.state is State.VALID else logging.WARNING
                log.log(level, "%s: %s: %s", status.ref, status.state.value, status.summary)
        for ref in sorted(gone):
            log.info("%s: removed", ref)
        self._set_object_metrics(counts)

    def _set_object_metrics(self, counts: Counter[tuple[str, str]]) -> None:
        self.metrics.objects.clear()
        for (kind, state), n in sorted(counts.items()):
            if n > 0:
                self.metrics.objects.labels(kind=kind, state=state).set(n)

    def statuses(self) -> tuple[ObjectStatus, ...]:
        """The published statuses (see `_settle`): each Gateway listener Programmed once every
        connected Envoy (at least one) has the current content of its port's Envoy listener (and
        the route configurations and secrets it loads), Invalid with Envoy's message when one
        rejected it, Pending until then; a Gateway by its listeners. Changes and rejections
        elsewhere do not touch them."""
        return self._published

    def _settle(self) -> None:
        """Settles the compiled statuses with what Envoy answered, stamps transition times and
        publishes them. Called by the xDS server whenever an Envoy answered (or connected, or
        went away), and after each compile."""
        self._time_acked_changes()
        applied = self.applied
        if applied is None or applied.version != self.xds.version:
            # Between a snapshot's installation and its Applied: the next call settles it.
            return
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
        settled = self._settled_statuses(applied.result.statuses, EnvoyView(probe, objects))
        refused = [(r.type, r.name, r.message) for r in self.xds.refused_resources()]
        rejections = rejection_findings(applied.result.graph, refused)
        if rejections and snapshot is not None:
            # A resource Envoy refused is reported on the objects that wrote it.
            settled = fold_findings(settled, rejections, snapshot)
        self._publish_settled(settled)

    def _time_acked_changes(self) -> None:
        """Observes change -> ACK for every version every connected Envoy now has; a later
        version acknowledged covers the earlier ones."""
        if not self._unacked:
            return
        acked = [i for i, (version, _) in enumerate(self._unacked) if self.xds.acked(version)]
        if not acked:
            return
        now = time.monotonic()
        for _ in range(acked[-1] + 1):
            _, seen = self._unacked.popleft()
            self.metrics.change_to_ack_seconds.observe(now - seen)

    def _settled_statuses(
        self, statuses: tuple[ObjectStatus, ...], envoy: EnvoyView
    ) -> tuple[ObjectStatus, ...]:
        """`statuses` settled by the dialects: only those of the kinds a dialect settles are
        given to them (`_publish` keeps them apart); the others are as compiled."""
        if not self._to_settle:
            return statuses
        before = tuple(sorted(self._to_settle.values(), key=_by_ref))
        after = self.dialects.settle(before, envoy)
        swap = {id(a): b for a, b in zip(before, after, strict=True) if a is not b}
        if not swap:
            return statuses
        # swap.get(id, status): the settled status, or the status itself; all in C.
        return tuple(map(swap.get, map(id, statuses), statuses))

    def _publish_settled(self, settled: tuple[ObjectStatus, ...]) -> None:
        """Stamps transition times on the settled statuses that changed (by identity: an
        unchanged one keeps its published status, times and all) and tells the sinks."""
        if settled is self._settled:
            return
        before, after, diff = self._compiled_diff
        if before is not self._settled or after is not settled:
            diff = identity_diff(self._settled_by_id, settled)
        self._settled, self._settled_by_id = settled, diff.by_id
        if not diff.added and not diff.removed:
            return
        now = now_rfc3339()
        published_of, programmed = self._published_of, self._programmed
        gone = {s.ref: published_of.pop(id(s)) for s in diff.removed}
        olds = {s.ref: s for s in diff.removed}
        for status in diff.added:
            old, previous = olds.get(status.ref), gone.pop(status.ref, None)
            if previous is not None and old == status:
                published_of[id(status)] = previous  # unchanged: keep its times, not restamped
                continue
            stamped = published_of[id(status)] = stamp_transitions(status, previous, now)
            if previous is not None:
                programmed.subtract(programmed_counts((previous,)))
            programmed.update(programmed_counts((stamped,)))
        for previous in gone.values():
            programmed.subtract(programmed_counts((previous,)))
        self._published = tuple(map(published_of.__getitem__, map(id, settled)))
        # Programmed changes with Envoy's answers, so it is counted here, not per compile.
        for value in ("True", "False", "Unknown"):
            self.metrics.gateways.labels(programmed=value).set(programmed[value])
        for sink in self.status_sinks:
            sink.publish(self._published)

    def status_json(self, status: ObjectStatus) -> dict[str, Any]:
        return self.dialects.status_json(status)

    def problems(self) -> tuple[SourceProblem, ...]:
        return self.applied.result.problems if self.applied else ()

    def xds_resources(self) -> EnvoyResources | None:
        """The resources of the last compile handed to the xDS server (None before the first)."""
        return self.applied.resources if self.applied else None

    def applied_result(self) -> CompileResult | None:
        """The compile Envoy was last given (the admin web view draws its graph)."""
        return self.applied.result if self.applied else None

    def path_normalization(self) -> PathNormalization:
        """How Envoy normalizes request paths, so the admin view explains what Envoy does."""
        return self.translate_options.paths

    def ignored(self) -> tuple[IgnoredObject, ...]:
        return self.applied.result.ignored if self.applied else ()

    def ignored_json(self, ignored: IgnoredObject) -> dict[str, Any]:
        return self.dialects.ignored_json(ignored)

    @property
    def watch_error(self) -> str | None:
        return next(iter(self._source_errors.values()), None)

    def readiness(self) -> tuple[bool, str]:
        if self.compile_error is not None:
            return False, self.compile_error
        if self.watch_error is not None:
            return False, self.watch_error
        if self.applied is None and self._restored_listeners is not None:
            # Serving the last run's configuration, the compile of these very files.
            ready, reason = self.xds.readiness(self._restored_listeners)
            return ready, f"{reason} (the last run's configuration; compiling)"
        if self.applied is None:
            waiting = [s.name for i, s in enumerate(self.sources) if i not in self._synced]
            if waiting:
                return False, f"waiting for source(s) {', '.join(waiting)} to list everything"
            return False, "no configuration compiled yet"
        # Readiness means everything turnout could program is programmed: Envoy refusing a
        # Gateway's port (busy, privileged) is reported on that Gateway's listener as
        # Programmed False and must not take every other tenant's readiness down with it.
        return self.xds.readiness(self.dialects.reported_listeners(self.applied.result.graph))

    # -- the served state ----------------------------------------------------------------------

    def _served_settings(self, compile_input: _Input) -> tuple[object, ...]:
        """What the output depends on besides the files and the code."""
        return (self.config, compile_input.compile_options, compile_input.translate_options)

    async def _restore_served(self) -> None:
        """Hands the xDS server the served state the last run saved, when the files (listed and
        stat'ed, not read) and everything else are what it was saved with: Envoy is programmed
        from it before anything compiled. Anything else is the normal cold start."""
        files, saved = self._files, self.served_state
        if files is None or saved is None:
            return
        try:
            state = await asyncio.to_thread(self._load_served, files, saved)
            if state is None:
                return
            self.xds.restore(state.resources, state.version)
        except Exception as err:  # never fatal: the cold start follows
            log.warning("served state not used: %r", err)
            return
        self._restored_listeners = state.reported_listeners
        self._served_key = (state.key, state.version)
        log.info(
            "serving the last run's configuration (%d resources, version %s) until compiled",
            len(state.resources),
            state.version,
        )

    def _load_served(self, files: FileSource, saved: ServedStateFile) -> ServedState | None:
        settings = self._served_settings(self._input(self.store.snapshot()))
        stats = file_stats(files.paths, files.exclude)
        return saved.load(ServedKey(environment_key(settings), files_key(stats)))

    def _busy(self) -> bool:
        """Whether a compile runs or waits (a save gives the CPU up to it)."""
        return self._dirty.is_set() or self._compile_lock.locked()

    async def _save_served_later(self) -> None:
        while True:
            await asyncio.sleep(SERVED_STATE_POLL_S)
            # Quiet since the last change and the last compile: not while Envoy takes it.
            quiet_since = max(self._last_change, self._last_compiled)
            if time.monotonic() - quiet_since >= SERVED_STATE_QUIET_S:
                try:
                    await self.save_served()
                except Exception:  # a restart then starts cold; serving goes on
                    log.exception("cannot save the served state")

    async def save_served(self) -> bool:
        """Writes the served state (off the event loop) when what the xDS server holds is the
        compile of what the files source loaded, with nothing pending, and it was not written
        yet; True when it was. Not when the compile used answers found outside the files (DNS,
        OpenID discovery): a restart could not check them before compiling."""
        files, saved = self._files, self.served_state
        compiled, applied = self._compiled, self.applied
        if files is None or saved is None or compiled is None or applied is None:
            return False
        if self.compile_error is not None or self._busy():
            return False
        if compiled.snapshot is not self.store.snapshot() or applied.version != self.xds.version:
            return False
        mark = (applied.version, files.stat_marks)
        if mark == self._served_mark:
            return False
        stats = files.loaded_stats()
        if stats is None:
            return False
        self._served_mark = mark
        if compiled.discovery or compiled.compile_options.dns_answers:
            log.debug("served state not saved: the configuration depends on DNS or OpenID answers")
            await asyncio.to_thread(saved.remove)
            self._served_key = None  # the file is gone: the same key must be written again
            return False
        # Taken here, with the version they make: the thread must not see a later snapshot.
        served = (applied.version, self.xds.served())
        listeners = self.dialects.reported_listeners(applied.result.graph)
        written = await asyncio.to_thread(
            self._write_served, saved, self._served_settings(compiled), stats, served, listeners
        )
        if not written:
            self._served_mark = None  # looked at again later
        return written

    def _write_served(
        self,
        saved: ServedStateFile,
        settings: tuple[object, ...],
        stats: tuple[FileStat, ...],
        served: tuple[str, tuple[Serialized, ...]],
        listeners: frozenset[str],
    ) -> bool:
        version, resources = served
        key = ServedKey(environment_key(settings), files_key(stats))
        if (key, version) == self._served_key:
            return True  # what the file holds already
        if not saved.save(ServedState(key, version, listeners, resources), self._busy):
            return False
        self._served_key = (key, version)
        log.info("served state saved (%d resources, version %s)", len(resources), version)
        return True

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts the xDS server and the sources, and returns once every source has listed
        everything and that was compiled. Envoy (if turnout runs one) starts meanwhile: it waits
        on ADS, which answers nothing before the first compile, so a new Envoy is programmed
        as soon as that is through and an adopted one keeps serving what it had until then;
        unless the last run's served state was restored (`_restore_served`): then ADS serves
        that at once."""
        tls = self.config.xds_tls
        self.xds_port = await self.xds.start(
            self.config.xds_address,
            self.config.xds_port,
            credentials=None if tls is None else server_credentials(tls),
        )
        # Envoy starts while the served state is looked for; the sources once that is settled, so
        # that a change they see after the files were stat'ed is one the first compile has.
        restoring = asyncio.create_task(self._restore_served(), name="served-restore")
        try:
            started = self.config.run_envoy and await self._start_envoy(replace=False)
        finally:
            await restoring
        for index, source in enumerate(self.sources):
            self._tasks.append(
                asyncio.create_task(self._run_source(index, source), name=f"source-{source.name}")
            )
        self._tasks.append(asyncio.create_task(self._compile_loop(), name="turnout-compile"))
        self._tasks.append(asyncio.create_task(self.hosts.run(), name="turnout-hosts"))
        if self.served_state is not None:
            self._tasks.append(asyncio.create_task(self._save_served_later(), name="served"))
        for sink in self.status_sinks:
            self._tasks.append(asyncio.create_task(sink.run(), name="turnout-status-sink"))
        await self._wait_first_compile()
        if self.config.demo_backends:
            await self._start_demo_backends()
        if self.config.run_envoy and not started:
            await self._start_envoy()

    @property
    def state_dir(self) -> StateDir:
        return envoy_state_dir(self.config)

    async def _start_envoy(self, replace: bool = True) -> bool:
        """Adopts the Envoy a previous turnout left running in the state directory (after a
        crash: it kept serving meanwhile), else starts one. An Envoy of ours started with another
        bootstrap (another xDS port) would never find this turnout: it is stopped first, unless
        `replace` is False (before the first compile: that Envoy serves until the new one can
        be programmed); then nothing is done and False returned."""
        state = self.state_dir
        state.prepare()
        bootstrap = self.bootstrap()
        running = await asyncio.to_thread(our_envoy, state, self.config.node_id)
        adopt = running is not None and same_bootstrap(state, bootstrap_yaml(bootstrap))
        if running is not None and not adopt and not replace:
            return False
        child_tls = self._child_tls()
        if child_tls is not None:  # an adopted Envoy reads them again: same content
            write_xds_sds_files(child_tls, state.path)
        self.envoy = EnvoyProcess(
            state.bootstrap,
            log_level=self.config.envoy_log_level,
            metrics=self.metrics,
            extra_args=self.config.extra_envoy_args,
            state=state,
        )
        if running is not None and adopt and await self.envoy.adopt(running):
            return True
        if running is not None:
            log.warning("stopping the Envoy (pid %d) started with another bootstrap", running)
            await self.envoy.adopt(running)
            await self.envoy.stop()
        state.admin_socket.unlink(missing_ok=True)  # a stale socket from an Envoy that died
        write_bootstrap(state.bootstrap, bootstrap)
        await self.envoy.start()
        return True

    async def _wait_first_compile(self) -> None:
        """Waits for the first compile, saying every `PROGRESS_INTERVAL_S` how far it got once
        it takes longer than that (a large input can take a while, and silence looks hung)."""
        started = time.monotonic()
        while True:
            try:
                await asyncio.wait_for(self._first_compile.wait(), PROGRESS_INTERVAL_S)
                return
            except TimeoutError:
                log.info("starting (%.0f s): %s", time.monotonic() - started, self.progress())

    def progress(self) -> str:
        """How far the cold start got: the sources still listing, or the objects compiling."""
        waiting = [s.name for i, s in enumerate(self.sources) if i not in self._synced]
        if waiting:
            return f"loading objects, waiting for source(s) {', '.join(waiting)}"
        return f"compiling {len(self.store.snapshot().objects)} objects"

    def bootstrap(self) -> dict[str, object]:
        return bootstrap_config(
            xds_address=_connectable(self.config.xds_address),
            xds_port=self.xds_port,
            admin_address=self.config.address,
            admin_port=self.config.envoy_admin_port,
            node_id=self.config.node_id,
            admin_socket=self.state_dir.admin_socket,
            stats=self.config.envoy_stats,
            xds_tls=self._child_tls(),
            xds_api=self.config.xds_api,
        )

    def _child_tls(self) -> XdsClientTls | None:
        tls = self.config.xds_tls
        return None if tls is None else child_client_tls(tls, self.state_dir.path)

    async def reload(self) -> Applied | None:
        """Has every source list everything again, and compiles (tests and SIGHUP use it)."""
        for source in self.sources:
            await source.reload()
        return await self.recompile()

    def _changed(self) -> None:
        now = time.monotonic()
        if self._change_seen is None and self._first_compile.is_set():
            self._change_seen = now
        if self._burst_start is None:
            self._burst_start = now
            quiet = max(0, self.config.debounce_ms) / 1000
            self._leading = now - self._last_change >= quiet
        self._last_change = now
        self._dirty.set()

    def _source_synced(self, index: int) -> None:
        self._synced.add(index)
        self._source_errors.pop(index, None)
        if len(self._synced) == len(self.sources):
            self._all_synced.set()

    async def _run_source(self, index: int, source: Source) -> None:
        """Runs a source, restarting it (with backoff) if it ever fails: a dead source would
        silently freeze the configuration, so /readyz reports it until it has listed everything
        again."""
        sink = StoreSink(self.store, self._changed, lambda: self._source_synced(index))
        backoff = 0.5
        while not self._stop.is_set():
            try:
                await source.run(sink)
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self._source_errors[index] = f"source {source.name} failed, restarting: {err!r}"
                log.exception("source %s failed; restarting in %.1f s", source.name, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _compile_loop(self) -> None:
        """The first compile once every source is synced, then one per burst of changes."""
        await self._all_synced.wait()
        self._dirty.clear()
        await self.recompile()
        self._first_compile.set()
        while True:
            await self._dirty.wait()
            await self._coalesce()
            await self.recompile()

    async def _coalesce(self) -> None:
        """Returns at once for a change that came after a quiet window (the first of a burst:
        compiled on its leading edge); else waits until no change came for the window, or
        `MAX_DELAY_S` after the first change not compiled yet."""
        self._dirty.clear()
        first = self._burst_start
        if first is None or self._leading:
            return
        deadline = first + MAX_DELAY_S
        while True:
            remaining = min(self._last_change + self._window(), deadline) - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._dirty.wait(), remaining)
            except TimeoutError:
                return
            self._dirty.clear()

    def _window(self) -> float:
        """The quiet window of the pending changes: `debounce_ms`, or `ENDPOINT_DEBOUNCE_S`
        when they are only EndpointSlices or Endpoints (the fast path costs milliseconds)."""
        quiet = max(0, self.config.debounce_ms) / 1000
        pending = self.store.pending_kinds()
        if pending and pending <= ENDPOINT_KINDS:
            return min(quiet, ENDPOINT_DEBOUNCE_S)
        return quiet

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

    async def stop(self) -> None:
        with contextlib.suppress(Exception):  # logged where it failed; stopping goes on
            await self.save_served()
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

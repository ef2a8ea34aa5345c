"""What one part of the HTTPProxy compile read and did, so that the next compile replays it while
none of what it read changed (issue 11: a change costs the roots it touches).

A `Trace` is kept per root (and per included subtree of a root's walk, `processor.py`):

- what it read: the HTTPProxies it looked up (found or not: an include of a missing proxy must
  recompile when it appears), the Services, the owners of the hostnames it asked about, whether it
  read Secrets (TLS, CA bundles, CRLs, delegations: any Secret, ConfigMap,
  TLSCertificateDelegation or Namespace change recompiles such a part, a coarse but sound rule)
  and whether it read the ExtensionServices (recompiled when the valid ones change);
- what it did: the status problems it added, in order, per proxy; the proxies it reached; the
  proxies its walk entered with their cost (the include revisit budget is replayed exactly).

A root's trace stands as it is while the delta does not make it stale (`root_index.py` finds the
roots it does). A root's trace holds its top-level subtrees' traces as they are (`parts`), not
merged, so a root that replays thousands of included proxies and walks one again costs that one
(the index diffs its parts by identity); a subtree's trace is flat. A subtree's trace (never
changed once recorded) is replayed in the walk's order,
which gives the accessors and the budget the state a full walk would give them. The clusters,
TLS Secrets and CA bundles a kept part uses need no replay: the graph builder keeps those of the
compile before by name while their inputs are the same (`services.ClusterBook`,
`secrets.SecretBook`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.spec import ParsedProxy
from turnout.dialects.httpproxy.status import ProxyStatusAccessor
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import CABundle, Cluster, TLSSecret, UpstreamProtocol, UpstreamSettings
from turnout.graph.secret_data import DELEGATION_KINDS
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver, ServicePort, Unresolved
from turnout.objects import KubeObject
from turnout.store import Snapshot

Key = tuple[str, str]  # (namespace, name)
# A subtree of a root's walk: the proxy, the chain's conditions, the chain of proxy keys that led
# there (cycle checks and `via`), the root's default JWT provider.
SubKey = tuple[Key, tuple[Any, ...], tuple[Key, ...], str]

PROXY_KIND = ("projectcontour.io", "HTTPProxy")
SERVICE_KIND = ("", "Service")
# The shared SecretResolver reads the delegations of both Contour groups for any dialect.
SECRET_KINDS = frozenset({("", "Secret"), ("", "ConfigMap"), ("", "Namespace")}).union(
    DELEGATION_KINDS
)


@dataclass(slots=True)
class Trace:
    """See the module docstring. Problems are an ordered set per trace: a repeat within one
    trace is a no-op however it is replayed."""

    statuses: dict[tuple[Key, Problem], None] = field(default_factory=dict)
    reached: set[Key] = field(default_factory=set)
    proxies: set[Key] = field(default_factory=set)
    services: set[Key] = field(default_factory=set)
    owners: dict[tuple[str, str], KubeObject | None] = field(default_factory=dict)
    walks: list[tuple[Key, int]] = field(default_factory=list)
    secret_reads: bool = False
    extension_reads: bool = False
    # The proxies `walks` entered and the cost of its own revisits, once the trace is complete
    # (`replay_walks`).
    walk_summary: tuple[frozenset[Key], int] | None = None
    # A root's: the complete (flat) traces of its top-level subtrees, each with the length of
    # `statuses` when it was merged (None: merged into this trace's own fields).
    parts: list[tuple[int, Trace]] | None = None

    def merge(self, other: Trace) -> None:
        """`other`, a part of this trace's work, done (or replayed) after what this one holds."""
        if self.parts is not None:
            self.parts.append((len(self.statuses), other))
            return
        self.statuses.update(other.statuses)
        self.reached |= other.reached
        self.proxies |= other.proxies
        self.services |= other.services
        self.owners.update(other.owners)
        self.walks.extend(other.walks)
        self.secret_reads = self.secret_reads or other.secret_reads
        self.extension_reads = self.extension_reads or other.extension_reads


def units(trace: Trace) -> list[Trace]:
    """The flat traces `trace` is made of: itself, then its parts."""
    if not trace.parts:
        return [trace]
    return [trace, *(part for _, part in trace.parts)]


def statuses_of(trace: Trace) -> Iterable[tuple[Key, Problem]]:
    """The problems `trace` reported, in order, as one flat trace would hold them."""
    if not trace.parts:
        return trace.statuses
    own = list(trace.statuses)
    out: dict[tuple[Key, Problem], None] = {}
    at = 0
    for end, part in trace.parts:
        out.update(dict.fromkeys(own[at:end]))
        out.update(part.statuses)
        at = end
    out.update(dict.fromkeys(own[at:]))
    return out


def reached_of(trace: Trace) -> set[Key]:
    """The proxies `trace` reached, its parts' too."""
    if not trace.parts:
        return trace.reached
    return set().union(*(unit.reached for unit in units(trace)))


@dataclass(frozen=True, slots=True)
class Changed:
    """What changed since the compile before, as the traces read it."""

    proxies: frozenset[Key]
    services: frozenset[Key]
    secrets: bool
    extensions: bool

    @property
    def nothing(self) -> bool:
        return not (self.proxies or self.services or self.secrets or self.extensions)

    def stale(self, trace: Trace) -> bool:
        if not (self.proxies or self.services or self.secrets or self.extensions):
            return False
        if trace.parts:
            return any(map(self._stale, units(trace)))
        return self._stale(trace)

    def _stale(self, trace: Trace) -> bool:
        return (
            not trace.proxies.isdisjoint(self.proxies)
            or not trace.services.isdisjoint(self.services)
            or (trace.secret_reads and self.secrets)
            or (trace.extension_reads and self.extensions)
        )


class Recorder:
    """The traces being recorded, innermost last; effects go to the innermost."""

    def __init__(self) -> None:
        self.stack: list[Trace] = []

    @property
    def current(self) -> Trace | None:
        return self.stack[-1] if self.stack else None

    def push(self, parts: bool = False) -> Trace:
        """A new innermost trace; `parts`: one that keeps the traces merged into it as they
        are (a root's)."""
        trace = Trace(parts=[] if parts else None)
        self.stack.append(trace)
        return trace

    def pop(self, trace: Trace) -> None:
        """Ends `trace`; its effects happened, so the enclosing trace holds them too (also when
        the work was cut short by an exception)."""
        popped = self.stack.pop()
        assert popped is trace
        if trace.parts is None:
            # A subtree's trace is complete: summed up now, while its walks are at hand, and
            # not the first time a later compile replays it among thousands.
            trace.walk_summary = _walk_summary(trace.walks)
        if self.stack:
            self.stack[-1].merge(trace)


class RecordedAccessor(ProxyStatusAccessor):
    """A proxy's status accessor whose problems are recorded in the current trace."""

    def __init__(self, obj: KubeObject, key: Key, recorder: Recorder) -> None:
        super().__init__(obj)
        self.key = key
        self.recorder = recorder

    def add(self, problem: Problem) -> None:
        trace = self.recorder.current
        if trace is not None:
            trace.statuses[(self.key, problem)] = None
        super().add(problem)

    def apply(self, problem: Problem) -> None:
        """Adds a replayed (or parse) problem without recording it again."""
        super().add(problem)


class Accessors(dict[Key, RecordedAccessor]):
    """The status accessors, made on first use: a proxy nobody reports on costs nothing."""

    def __init__(self, proxies: Mapping[Key, ParsedProxy], recorder: Recorder) -> None:
        super().__init__()
        self.proxies = proxies
        self.recorder = recorder

    def __missing__(self, key: Key) -> RecordedAccessor:
        proxy = self.proxies[key]
        accessor = RecordedAccessor(proxy.obj, key, recorder=self.recorder)
        for problem in proxy.problems:
            accessor.apply(problem)
        self[key] = accessor
        return accessor


class ProxyReads(Mapping[Key, ParsedProxy]):
    """The proxies by key; a lookup (found or not) is recorded in the current trace."""

    def __init__(self, proxies: Mapping[Key, ParsedProxy], recorder: Recorder) -> None:
        self.proxies = proxies
        self.recorder = recorder

    def __getitem__(self, key: Key) -> ParsedProxy:
        trace = self.recorder.current
        if trace is not None:
            trace.proxies.add(key)
        return self.proxies[key]

    def find(self, key: Key) -> ParsedProxy | None:
        """`get(key)` in one step (an include walk looks up thousands)."""
        stack = self.recorder.stack
        if stack:
            stack[-1].proxies.add(key)
        return self.proxies.get(key)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.proxies)

    def __len__(self) -> int:
        return len(self.proxies)


class Reached(set[Key]):
    """The proxies reached from a root; an addition is recorded in the current trace."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def add(self, key: Key) -> None:
        trace = self.recorder.current
        if trace is not None:
            trace.reached.add(key)
        super().add(key)


class ServiceReads:
    """The snapshot's Services, each lookup recorded in the current trace."""

    def __init__(self, snapshot: Snapshot, recorder: Recorder) -> None:
        self.snapshot = snapshot
        self.recorder = recorder

    def get(self, namespace: str, name: str) -> KubeObject | None:
        trace = self.recorder.current
        if trace is not None:
            trace.services.add((namespace, name))
        return self.snapshot.get("", "Service", namespace, name)


class RecordingBackends:
    """The `BackendResolver` calls the dialect makes, recorded in the current trace: the Service
    read."""

    def __init__(self, real: BackendResolver, recorder: Recorder) -> None:
        self.real = real
        self.recorder = recorder

    def refusal(self, service: KubeObject) -> Unresolved | None:
        return self.real.refusal(service)

    def service_port(
        self, namespace: str, name: str, port: int | str
    ) -> tuple[KubeObject, ServicePort] | Unresolved:
        trace = self.recorder.current
        if trace is not None:
            trace.services.add((namespace, name))
        return self.real.service_port(namespace, name, port)

    def service(
        self,
        namespace: str,
        name: str,
        port: int | str,
        protocol: UpstreamProtocol = UpstreamProtocol.HTTP,
        settings: UpstreamSettings | None = None,
    ) -> Cluster | Unresolved:
        result = self.real.service(namespace, name, port, protocol, settings)
        trace = self.recorder.current
        if trace is not None:
            trace.services.add((namespace, name))
        return result


class RecordingBundles:
    """The `CABundleResolver` calls the dialect makes: a Secret read, the bundle collected."""

    def __init__(self, real: CABundleResolver, recorder: Recorder) -> None:
        self.real = real
        self.recorder = recorder

    def _seen(self, result: CABundle | Unresolved) -> CABundle | Unresolved:
        trace = self.recorder.current
        if trace is not None:
            trace.secret_reads = True
        return result

    def ca_bundle(self, namespace: str, name: str, *, for_namespace: str) -> CABundle | Unresolved:
        return self._seen(self.real.ca_bundle(namespace, name, for_namespace=for_namespace))

    def crl(self, namespace: str, name: str, *, for_namespace: str) -> CABundle | Unresolved:
        return self._seen(self.real.crl(namespace, name, for_namespace=for_namespace))

    def config_map_ca_bundle(self, namespace: str, name: str) -> CABundle | Unresolved:
        return self._seen(self.real.config_map_ca_bundle(namespace, name))


class RecordingSecrets:
    """The `SecretResolver` calls the dialect makes: a Secret read, the TLS Secret collected."""

    def __init__(self, real: SecretResolver, recorder: Recorder) -> None:
        self.real = real
        self.recorder = recorder
        self.ca_bundles = RecordingBundles(real.ca_bundles, recorder)

    def tls_secret(
        self, namespace: str, name: str, *, for_namespace: str
    ) -> TLSSecret | Unresolved:
        result = self.real.tls_secret(namespace, name, for_namespace=for_namespace)
        trace = self.recorder.current
        if trace is not None:
            trace.secret_reads = True
        return result


@dataclass(frozen=True, slots=True)
class Walk:
    """The include revisit budget after replaying a trace's walks, or None when the replay would
    go over it (the walk must then run for real, to stop at the same point)."""

    budget: int
    walked: frozenset[Key]


def replay_walks(trace: Trace, budget: int, walked: set[Key]) -> Walk | None:
    """The budget after replaying the complete `trace`'s walks on top of `walked`. A walk that
    enters no proxy walked before costs only its own revisits (the budget only falls, so it went
    below zero somewhere exactly when it ends below zero): one C-speed set check, not a step per
    proxy."""
    summary = trace.walk_summary
    if summary is None:
        summary = trace.walk_summary = _walk_summary(trace.walks)
    keys, own_cost = summary
    if walked.isdisjoint(keys):
        return Walk(budget - own_cost, keys) if budget >= own_cost else None
    entered: set[Key] = set()
    for key, cost in trace.walks:
        if key in walked or key in entered:
            budget -= cost
            if budget < 0:
                return None
        entered.add(key)
    return Walk(budget, keys)


def _walk_summary(walks: list[tuple[Key, int]]) -> tuple[frozenset[Key], int]:
    entered: set[Key] = set()
    own_cost = 0
    for key, cost in walks:
        if key in entered:
            own_cost += cost
        entered.add(key)
    return frozenset(entered), own_cost

"""What a dialect is to the compile: a pure front end from store objects to graph pieces and
statuses, called through this protocol only (the graph never imports a dialect).

A compile runs in two phases so that hostname ownership can span dialects:
1. `claims()`: every root that wants a hostname on a listener says so;
2. the graph builder decides one owner per (listener, hostname): the oldest object wins;
3. `compile()`: each dialect builds its virtual hosts for the hostnames it owns, and a status for
   every object of its kinds, reporting lost hostnames in its own status shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from turnout.compile_inputs import CompileOptions, ListenerDecl
from turnout.graph.memo import CompileMemo, replaced_places
from turnout.graph.model import RoutingGraph, TCPProxy, VirtualHost
from turnout.graph.secrets import SecretResolver
from turnout.graph.services import BackendResolver
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import IgnoredObject, ObjectStatus
from turnout.store import Snapshot


@dataclass(frozen=True, slots=True)
class HostClaim:
    listener: str
    hostname: str  # lower case
    claimant: KubeObject


@dataclass(frozen=True, slots=True)
class Ownership:
    """The owner of each (listener, hostname) and the claims that lost to it."""

    owners: Mapping[tuple[str, str], KubeObject] = field(default_factory=dict)

    def owner(self, listener: str, hostname: str) -> KubeObject | None:
        return self.owners.get((listener, hostname.lower()))

    def owns(self, obj: ObjectRef, listener: str, hostname: str) -> bool:
        owner = self.owner(listener, hostname)
        return owner is not None and owner.ref == obj


@dataclass(frozen=True, slots=True)
class RecordedOwnership(Ownership):
    """Ownership that records every (listener, hostname) asked about and its answer, so that a
    dialect's output can be reused while those answers stay the same."""

    asked: dict[tuple[str, str], KubeObject | None] = field(default_factory=dict)

    def owner(self, listener: str, hostname: str) -> KubeObject | None:
        key = (listener, hostname.lower())
        found = self.owners.get(key)
        self.asked[key] = found
        return found

    def same_answers(self, ownership: Ownership) -> bool:
        """Whether `ownership` answers every recorded question with the very same owner."""
        return all(ownership.owners.get(k) is v for k, v in self.asked.items())


@dataclass(frozen=True, slots=True)
class CompileContext:
    options: CompileOptions
    ownership: Ownership
    backends: BackendResolver
    secrets: SecretResolver
    # The compile's memory of the compile before (`graph/memo.py`); a fresh one: a full compile.
    memo: CompileMemo = field(default_factory=CompileMemo)


@dataclass(frozen=True, slots=True)
class DialectOutput:
    virtual_hosts: tuple[tuple[str, VirtualHost], ...] = ()  # (listener name, vhost)
    statuses: tuple[ObjectStatus, ...] = ()
    tcp_proxies: tuple[tuple[str, TCPProxy], ...] = ()  # (listener name, SNI-routed TCP proxy)
    # Listeners of the dialect's own, besides the shared HTTP_LISTENER and HTTPS_LISTENER.
    listeners: tuple[ListenerDecl, ...] = ()


# What Envoy has of one Envoy listener (by name): "programmed", "rejected", "pending",
# "closed" (the configuration has no such listener and every connected Envoy acknowledged that)
# or "absent" (no such listener, not yet acknowledged); with a message (Envoy's reason for a
# rejection, or what it waits for).
ListenerProbe = Callable[[str], tuple[str, str]]


@dataclass(frozen=True, slots=True)
class EnvoyView:
    """What the controller knows of the Envoys it programs, for statuses settled after Envoy
    answered: `probe` of an Envoy listener, and the objects of the snapshot the statuses came
    from (`objects(ref)`)."""

    probe: ListenerProbe
    objects: Callable[[ObjectRef], KubeObject | None]


@dataclass(frozen=True, slots=True)
class ExternalInputs:
    """What a dialect needs from outside the compile, found by the controller (which feeds the
    answers back in through `CompileOptions`): the OpenID issuers to discover."""

    oidc_issuers: frozenset[str] = frozenset()


class Dialect(Protocol):
    """A dialect. Implementations subclass this protocol to inherit the default hooks."""

    name: str
    # The (apiVersion, kind) pairs this dialect reads; anything else in its groups is reported.
    kinds: frozenset[tuple[str, str]]
    # The (group, kind) pairs among `kinds` that are cluster-scoped (shown without a namespace).
    cluster_scoped: frozenset[tuple[str, str]] = frozenset()

    # True: `claims` and `compile` use the memo (`CompileContext.memo`) to redo only what the
    # change touched. False: the builder reuses the dialect's whole output while nothing it may
    # read changed (its kinds, the core kinds, the owners of the hostnames it asked about).
    incremental: bool = False

    def claims(
        self, snapshot: Snapshot, options: CompileOptions, memo: CompileMemo | None = None
    ) -> Iterable[HostClaim]: ...

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput: ...

    def external_inputs(self, snapshot: Snapshot, options: CompileOptions) -> ExternalInputs:
        """What the compile of `snapshot` needs from outside (e.g. OpenID discovery)."""
        return ExternalInputs()

    def settle(
        self, statuses: Sequence[ObjectStatus], envoy: EnvoyView | None
    ) -> tuple[ObjectStatus, ...]:
        """The dialect's statuses with what only Envoy's answer decides (Gateway API
        `Programmed`). `envoy` None: every Envoy acknowledged everything (`check`)."""
        return tuple(statuses)

    def reported_listeners(self, graph: RoutingGraph) -> frozenset[str]:
        """Envoy listeners whose rejection this dialect reports on its own objects (a Gateway's
        port), so that it need not fail the whole controller's readiness."""
        return frozenset()

    def ignored(self, snapshot: Snapshot, options: CompileOptions) -> Iterable[IgnoredObject]:
        """The objects of this dialect's kinds that are not turnout's (another class or
        controller), with the reason: they get no status, but `check` and `/status` list them."""
        return ()

    # True: `ignored` is `ignored_object` of each object of the dialect's kinds, in ref order,
    # so that the builder asks again only about the objects that changed.
    ignored_per_object: bool = False

    def ignored_object(self, obj: KubeObject, options: CompileOptions) -> IgnoredObject | None:
        """`ignored` of one object (for a dialect that is `ignored_per_object`)."""
        return None


@dataclass(frozen=True, slots=True)
class Dialects:
    """The dialects of a turnout, as the composition root chose them; what the controller, CLI
    and admin server need from them, asked of all of them."""

    all: tuple[Dialect, ...]

    @property
    def kinds(self) -> frozenset[tuple[str, str]]:
        return frozenset().union(*(d.kinds for d in self.all))

    @property
    def cluster_scoped(self) -> frozenset[tuple[str, str]]:
        return frozenset().union(*(d.cluster_scoped for d in self.all))

    def external_inputs(self, snapshot: Snapshot, options: CompileOptions) -> ExternalInputs:
        issuers: set[str] = set()
        for d in self.all:
            issuers |= d.external_inputs(snapshot, options).oidc_issuers
        return ExternalInputs(oidc_issuers=frozenset(issuers))

    def settle(
        self, statuses: Sequence[ObjectStatus], envoy: EnvoyView | None
    ) -> tuple[ObjectStatus, ...]:
        for d in self.all:
            statuses = d.settle(statuses, envoy)
        return tuple(statuses)

    def reported_listeners(self, graph: RoutingGraph) -> frozenset[str]:
        return frozenset().union(*(d.reported_listeners(graph) for d in self.all))

    def status_json(self, status: ObjectStatus) -> dict[str, Any]:
        scoped = (status.ref.group, status.ref.kind) in self.cluster_scoped
        return status.to_json(cluster_scoped=scoped)

    def ignored_json(self, ignored: IgnoredObject) -> dict[str, Any]:
        scoped = (ignored.ref.group, ignored.ref.kind) in self.cluster_scoped
        return ignored.to_json(cluster_scoped=scoped)


def ownership_from_claims(
    claims: Iterable[HostClaim], memo: CompileMemo | None = None
) -> Ownership:
    """One owner per (listener, hostname): the oldest claimant, the first claim on a tie.
    `memo`: the index of the compile before, patched for the claims that are not the very same
    objects (a dialect hands back the same claim objects for what did not change)."""
    if memo is None:
        return Ownership(_owners(claims))
    kept = memo.stage("ownership", OwnershipMemo)
    claims = claims if isinstance(claims, list) else list(claims)
    before, kept.given = kept.given, claims
    gone: dict[int, HostClaim] | None = None
    if memo.delta.everything or not kept.claims or kept.repeated:
        pass
    elif len(before) == len(claims):
        # The common case: the same claims in the same places but a few (one C-speed pass).
        places = replaced_places(before, claims)
        gone = {id(before[i]): before[i] for i in places}
        added = {id(claims[i]): claims[i] for i in places}
        if any(i in kept.claims and i not in gone for i in added):
            gone = None  # a claim given twice: `rebuild` counts it as a full compile does
    else:
        now = dict(zip(map(id, claims), claims, strict=True))
        if len(now) == len(claims):
            gone = {i: kept.claims[i] for i in kept.claims.keys() - now.keys()}
            added = {i: now[i] for i in now.keys() - kept.claims.keys()}
    if gone is None or not kept.patch(gone, added):
        kept.rebuild(claims)
    return kept.answer()


def _owners(claims: Iterable[HostClaim]) -> dict[tuple[str, str], KubeObject]:
    owners: dict[tuple[str, str], KubeObject] = {}
    for claim in claims:
        key = (claim.listener, claim.hostname.lower())
        current = owners.get(key)
        if current is None or claim.claimant.age_key < current.age_key:
            owners[key] = claim.claimant
    return owners


class OwnershipMemo:
    """`ownership_from_claims`' index: the claims by identity, the claims of each (listener,
    hostname), the owners; `changed`: the keys whose owner the last compile changed (None:
    any)."""

    def __init__(self) -> None:
        self.given: list[HostClaim] = []
        self.claims: dict[int, HostClaim] = {}
        self.by_key: dict[tuple[str, str], dict[int, HostClaim]] = {}
        self.owners: dict[tuple[str, str], KubeObject] = {}
        self.changed: set[tuple[str, str]] | None = None
        self.last: Ownership | None = None
        self.repeated = False  # a claim object given twice: rebuilt every time

    def answer(self) -> Ownership:
        """The owners; the same `Ownership` while no owner changed (a copy: never mutated)."""
        if self.last is None or self.changed is None or self.changed:
            self.last = Ownership(dict(self.owners))
        return self.last

    def rebuild(self, claims: list[HostClaim]) -> None:
        now = dict(zip(map(id, claims), claims, strict=True))
        self.claims, self.by_key, self.repeated = now, {}, len(now) != len(claims)
        for claim in claims:
            key = (claim.listener, claim.hostname.lower())
            self.by_key.setdefault(key, {})[id(claim)] = claim
        self.owners, self.changed = _owners(claims), None

    def patch(self, gone: dict[int, HostClaim], added: dict[int, HostClaim]) -> bool:
        """Patches the index for the claims added and removed (by identity); False: a tie
        between claimants of one age, which the claims' order decides (`rebuild`)."""
        touched: set[tuple[str, str]] = set()
        for i, claim in gone.items():
            key = (claim.listener, claim.hostname.lower())
            del self.by_key[key][i]
            del self.claims[i]
            touched.add(key)
        for i, claim in added.items():
            key = (claim.listener, claim.hostname.lower())
            self.by_key.setdefault(key, {})[i] = claim
            self.claims[i] = claim
            touched.add(key)
        self.changed = set()
        for key in touched:
            tie, owner = self._owner(key)
            if tie:
                return False
            if owner is None:
                del self.by_key[key]
                if self.owners.pop(key, None) is not None:
                    self.changed.add(key)
            elif self.owners.get(key) is not owner:
                self.owners[key] = owner
                self.changed.add(key)
        return True

    def _owner(self, key: tuple[str, str]) -> tuple[bool, KubeObject | None]:
        """Whether two objects of one age claim `key`, and its oldest claimant (None: none)."""
        claimants = {id(c.claimant): c.claimant for c in self.by_key[key].values()}
        if not claimants:
            return False, None
        ages = sorted((c.age_key, i) for i, c in claimants.items())
        if len(ages) > 1 and ages[0][0] == ages[1][0]:
            return True, None
        return False, claimants[ages[0][1]]

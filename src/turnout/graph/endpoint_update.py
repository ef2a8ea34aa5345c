"""The endpoints fast path: an EndpointSlice (or Endpoints) change applied to the last compile
without running the dialects.

Dialects build clusters without endpoints; the endpoint stage after them
(`services.resolve_endpoints`) fills them in, `drop_forbidden_endpoints` and the Envoy-limits
net check them, and the findings go to the objects routing to the Service. A dialect whose
routing reads endpoints records the Service (`CompileResult.endpoint_dependent_services`).
So when only EndpointSlices of other Services changed, the dialects' output is the same, and
redoing those later stages for the clusters of the changed Services gives exactly what a full
compile gives: `update_endpoints` does that, and answers None whenever it cannot be sure (the
caller then compiles everything).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from turnout.compile_inputs import CompileOptions
from turnout.graph.build import (
    CompileResult,
    EndpointBasis,
    endpoint_findings,
    fold_findings,
    forbidden_problems,
)
from turnout.graph.model import Cluster
from turnout.graph.services import (
    SERVICE_NAME_LABEL,
    ForbiddenEndpoint,
    drop_forbidden_endpoints,
    resolve_endpoints,
)
from turnout.graph.validate import endpoint_problem
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import Finding, ObjectStatus
from turnout.store import Change, Snapshot, SourceProblem

# The endpoint kinds exactly as the compile reads them (another apiVersion is refused by the
# kinds check, which only a full compile redoes).
_SLICE = ("discovery.k8s.io/v1", "EndpointSlice")
_ENDPOINTS = ("v1", "Endpoints")


@dataclass(frozen=True, slots=True)
class EndpointUpdate:
    """A compile result with new endpoints, and its clusters whose endpoints were redone."""

    result: CompileResult
    clusters: tuple[Cluster, ...]


def _services_of(obj: KubeObject) -> tuple[str, str] | None:
    """The Service an endpoint object belongs to, or None when it is not one the fast path
    takes (another kind or apiVersion, or a creationTimestamp the kinds check reports)."""
    if obj.creation_timestamp and obj.created_at is None:
        return None
    if (obj.api_version, obj.kind) == _ENDPOINTS:
        return (obj.namespace, obj.name)
    if (obj.api_version, obj.kind) == _SLICE:
        label = obj.labels.get(SERVICE_NAME_LABEL)
        return (obj.namespace, label if isinstance(label, str) else "")
    return None


def endpoint_services(changes: Iterable[Change]) -> frozenset[tuple[str, str]] | None:
    """The Services whose endpoints `changes` touch (an EndpointSlice moved to another Service
    touches both), or None when something else changed."""
    found: set[tuple[str, str]] = set()
    for before, after in changes:
        for obj in (before, after):
            if obj is None:
                continue
            service = _services_of(obj)
            if service is None:
                return None
            found.add(service)
    return frozenset(found)


def update_endpoints(
    result: CompileResult,
    old: Snapshot,
    snapshot: Snapshot,
    changes: Sequence[Change],
    options: CompileOptions,
) -> EndpointUpdate | None:
    """`result` (the compile of `old` with `options`) redone for `snapshot`, which differs from
    `old` by `changes`; None when something other than endpoints changed, or the endpoints of
    a Service a routing decision read: only a full compile can tell then. The work is in the
    changed Services' clusters, not in the size of the snapshot."""
    services = endpoint_services(changes)
    previous = result.endpoint_basis
    if services is None or previous is None or services & result.endpoint_dependent_services:
        return None
    if snapshot.problems != old.problems or any(_endpoint_kind(r) for r in result.rejected):
        return None
    slices = _reindexed(previous.slices, changes)
    fresh: dict[str, Cluster] = {}
    forbidden: dict[str, tuple[ForbiddenEndpoint, ...]] = {}
    for service in sorted(services):
        for backend in previous.backends.get(service, ()):
            resolved = resolve_endpoints(backend, snapshot, slices)
            (kept,), dropped = drop_forbidden_endpoints((resolved,), previous.reserved, options)
            if any(endpoint_problem(ep) is not None for ep in kept.endpoints):
                return None  # the net would report it among its other problems: a full compile
            fresh[kept.name] = kept
            forbidden[kept.name] = dropped
    graph = result.graph
    names = tuple(sorted(n for n in fresh if n in previous.positions))
    if names:
        clusters = list(graph.clusters)
        for name in names:
            clusters[previous.positions[name]] = fresh[name]
        graph = dataclasses.replace(graph, clusters=tuple(clusters))
    entries = _merged(previous, forbidden, snapshot, slices)
    refused = tuple(f for f, _ in entries)
    # The same refusals name the same routes (the listeners are the last compile's): no walk.
    same = _finding_keys(refused) == _finding_keys(previous.forbidden)
    basis = dataclasses.replace(
        previous,
        slices=slices,
        endpoint_findings=previous.endpoint_findings if same else endpoint_findings(refused, graph),
        forbidden=refused,
        forbidden_problems=tuple(p for _, p in entries),
    )
    statuses = _refolded(result, previous, basis, snapshot)
    problems = (*basis.head_problems, *basis.forbidden_problems, *basis.tail_problems)
    updated = dataclasses.replace(
        result, graph=graph, statuses=statuses, problems=problems, endpoint_basis=basis
    )
    return EndpointUpdate(updated, tuple(fresh[n] for n in names))


def _reindexed(
    index: Mapping[tuple[str, str], Sequence[KubeObject]], changes: Iterable[Change]
) -> Mapping[tuple[str, str], Sequence[KubeObject]]:
    """`index_endpoint_slices` of the snapshot after `changes`, from the one before: the
    entries of the Services a changed slice belongs (or belonged) to are redone."""
    redone: dict[tuple[str, str], dict[str, KubeObject]] = {}
    for before, after in changes:
        for obj, keep in ((before, False), (after, True)):
            if obj is None or obj.kind != "EndpointSlice":
                continue
            label = obj.labels.get(SERVICE_NAME_LABEL)
            if not isinstance(label, str) or not label:
                continue
            key = (obj.namespace, label)
            if key not in redone:
                redone[key] = {o.name: o for o in index.get(key, ())}
            if keep:
                redone[key][obj.name] = obj
            else:
                redone[key].pop(obj.name, None)
    if not redone:
        return index
    out = dict(index)
    for key, by_name in redone.items():
        if by_name:
            out[key] = [by_name[n] for n in sorted(by_name)]
        else:
            out.pop(key, None)
    return out


def _finding_keys(forbidden: Iterable[ForbiddenEndpoint]) -> list[tuple[object, ...]]:
    """What `endpoint_findings` reads of each refused endpoint."""
    return [
        (f.cluster.name, f.cluster.namespace, f.cluster.service, f.endpoint, f.reason)
        for f in forbidden
    ]


def _endpoint_kind(ref: ObjectRef) -> bool:
    return (ref.group, ref.kind) in {("discovery.k8s.io", "EndpointSlice"), ("", "Endpoints")}


def _merged(
    basis: EndpointBasis,
    redone: dict[str, tuple[ForbiddenEndpoint, ...]],
    snapshot: Snapshot,
    slices: Mapping[tuple[str, str], Sequence[KubeObject]],
) -> list[tuple[ForbiddenEndpoint, SourceProblem]]:
    """The refused endpoints with their problems: the redone clusters' anew, the others' as
    they were, in cluster name order as `drop_forbidden_endpoints` lists them."""
    kept = [
        (f, p)
        for f, p in zip(basis.forbidden, basis.forbidden_problems, strict=True)
        if f.cluster.name not in redone
    ]
    for dropped in redone.values():
        kept.extend(zip(dropped, forbidden_problems(dropped, snapshot, slices), strict=True))
    # Stable: one cluster's entries keep their endpoint order.
    kept.sort(key=lambda e: e[0].cluster.name)
    return kept


def _by_ref(findings: Iterable[Finding]) -> dict[ObjectRef, tuple[Finding, ...]]:
    """Findings per object, first occurrence first, as `fold_findings` groups them."""
    out: dict[ObjectRef, dict[Finding, None]] = {}
    for finding in findings:
        out.setdefault(finding.ref, {})[finding] = None
    return {ref: tuple(found) for ref, found in out.items()}


def _refolded(
    result: CompileResult, old: EndpointBasis, basis: EndpointBasis, snapshot: Snapshot
) -> tuple[ObjectStatus, ...]:
    """`result.statuses` (folded from `old`) with the findings of `basis` folded anew into the
    objects whose findings changed; the others stay the very same records."""
    before = _by_ref((*old.limit_findings, *old.endpoint_findings))
    after = _by_ref((*basis.limit_findings, *basis.endpoint_findings))
    changed = {ref for ref in before.keys() | after.keys() if before.get(ref) != after.get(ref)}
    if not changed:
        return result.statuses
    statuses = list(result.statuses)
    for i, base in enumerate(basis.statuses):
        if base.ref in changed:
            statuses[i] = _fold_one(base, after.get(base.ref, ()), snapshot)
    return tuple(statuses)


def _fold_one(
    status: ObjectStatus, findings: Sequence[Finding], snapshot: Snapshot
) -> ObjectStatus:
    return fold_findings((status,), findings, snapshot)[0]

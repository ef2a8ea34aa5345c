"""ReferenceGrant (`gateway.networking.k8s.io` v1beta1 and v1): which cross-namespace references
the owners of a namespace allow into it.

A grant lives in the namespace of the *target*. It permits a reference when one of its `from`
entries names the referring object's group, kind and namespace, and one of its `to` entries names
the target's group and kind and either no name or the target's name (`from` and `to` entries are
each ORed). A reference within one namespace needs no grant. The index is rebuilt from the
snapshot on every compile, so removing a grant revokes the access at the next compile, as the spec
requires ("MUST respond to the removal of a grant by revoking the access").

Entries that do not have the shape the CRD enforces (a missing kind or namespace, a value that is
not a string) grant nothing; ReferenceGrant has no status to report them in, and a malformed grant
must never widen access.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.gatewayapi.backend_tls import BackendTLSPolicies
from turnout.dialects.gatewayapi.kinds import GROUP, REFERENCE_GRANT, core_group
from turnout.store import Snapshot


@dataclass(frozen=True, slots=True)
class _From:
    group: str
    kind: str
    namespace: str


@dataclass(frozen=True, slots=True)
class _To:
    group: str
    kind: str
    name: str  # "" for every object of the group and kind


@dataclass(frozen=True, slots=True)
class _Grant:
    namespace: str  # the targets' namespace
    sources: tuple[_From, ...]
    targets: tuple[_To, ...]

    def permits(self, source: _From, group: str, kind: str, name: str) -> bool:
        if source not in self.sources:
            return False
        return any(
            t.group == group and t.kind == kind and (not t.name or t.name == name)
            for t in self.targets
        )


def _string(m: Mapping[str, Any], key: str) -> str | None:
    value = m.get(key, "")
    return value if isinstance(value, str) else None


def _entries(spec: Mapping[str, Any], key: str) -> tuple[Mapping[str, Any], ...]:
    value = spec.get(key)
    if not isinstance(value, list | tuple):
        return ()
    return tuple(e for e in value if isinstance(e, Mapping))


def _read_grant(namespace: str, spec: Any) -> _Grant | None:
    if not isinstance(spec, Mapping):
        return None
    sources: list[_From] = []
    for entry in _entries(spec, "from"):
        group, kind, ns = (_string(entry, k) for k in ("group", "kind", "namespace"))
        if group is None or not kind or not ns:
            continue
        sources.append(_From(core_group(group), kind, ns))
    targets: list[_To] = []
    for entry in _entries(spec, "to"):
        group, kind, name = (_string(entry, k) for k in ("group", "kind", "name"))
        if group is None or not kind or name is None:
            continue
        targets.append(_To(core_group(group), kind, name))
    if not sources or not targets:
        return None
    return _Grant(namespace, tuple(sources), tuple(targets))


class ReferenceGrants:
    """The ReferenceGrants of one snapshot, indexed by the namespace they grant access to.

    It also carries the snapshot's BackendTLSPolicies (`backend_tls`): with the grants, they are
    what resolving a backendRef needs beyond the compile context, and every route compiler
    already receives this object.
    """

    def __init__(
        self,
        grants: Mapping[str, tuple[_Grant, ...]],
        backend_tls: BackendTLSPolicies | None = None,
    ) -> None:
        self._by_namespace = dict(grants)
        self.backend_tls = backend_tls if backend_tls is not None else BackendTLSPolicies()

    @staticmethod
    def from_snapshot(snapshot: Snapshot) -> ReferenceGrants:
        # Both served versions (v1beta1, v1) share the group and kind, hence one store bucket.
        by_namespace: dict[str, list[_Grant]] = {}
        for obj in snapshot.kind(GROUP, REFERENCE_GRANT):
            grant = _read_grant(obj.namespace, obj.spec)
            if grant is not None:
                by_namespace.setdefault(obj.namespace, []).append(grant)
        return ReferenceGrants(
            {ns: tuple(g) for ns, g in by_namespace.items()},
            BackendTLSPolicies.from_snapshot(snapshot),
        )

    def permits(
        self,
        *,
        from_group: str,
        from_kind: str,
        from_namespace: str,
        to_group: str,
        to_kind: str,
        to_namespace: str,
        to_name: str,
    ) -> bool:
        """Whether an object (group, kind, namespace) may refer to `to_namespace/to_name`."""
        if from_namespace == to_namespace:
            return True
        source = _From(core_group(from_group), from_kind, from_namespace)
        group = core_group(to_group)
        return any(
            g.permits(source, group, to_kind, to_name)
            for g in self._by_namespace.get(to_namespace, ())
        )

"""The xDS server: ADS over gRPC (`grpc.aio`), State of the World and Delta.

One `XdsServer` holds the current snapshot (an `EnvoyResources` turned into packed, hashed
resources) and serves it to every Envoy that opens `StreamAggregatedResources` (SotW,
`api_type: GRPC`) or `DeltaAggregatedResources` (Delta, `api_type: DELTA_GRPC`, what turnout's
bootstrap asks for by default). Both variants share one per-stream state machine; a delta stream
differs in what a response holds and how a request subscribes:

* A resource's delta `version` is the sha256 of its serialized bytes. Every type, clusters and
  listeners included, is sent only for the names whose content the stream was not sent yet;
  `removed_resources` names what a wildcard subscription had and the configuration dropped.
* Subscriptions are changes (`resource_names_subscribe`/`_unsubscribe`), honoured even on a
  request with a stale nonce; a newly subscribed name is always sent, one that does not exist yet
  when it appears. The first request's `initial_resource_versions` say what a reconnecting Envoy
  has, and only what differs is sent.
* ACK/NACK, the per-resource refusal bookkeeping and the make-before-break order below are the
  same for both variants; stale clusters go out as `removed_resources` after the routes stopped
  naming them.
* Scoped RDS: with `inline_scopes` (`--xds-inline-scopes`) a delta stream gets each scope with
  its RouteConfiguration inline (`_InlineScopes`, derived from the one translation per
  snapshot); a SotW stream, and any stream without it, the scopes naming their route
  configurations, as translated. Each stream's versions, targets and
  readiness are those of its own form (`_Snapshot.of` and the like).

Protocol rules this module keeps (see the xDS protocol's "ACK/NACK and resource type instance
version", "When to send an update" and "Eventual consistency considerations"):

* `version_info` is per type: a hash of the names and serialized bytes of the resources the stream
  is meant to have, so identical input gives identical versions and no push.
* Every response has a fresh nonce. Once a type has had a response on a stream, a request whose
  `response_nonce` is neither empty nor that response's nonce is stale and ignored entirely.
* A request answering the latest response is a NACK when it has `error_detail`, an ACK otherwise.
  A NACKed response is not sent again on that stream; the next change of the resources is.
* At most one response per type and stream waits for its ACK/NACK.
* Clusters and listeners are sent as the full state of the world; endpoints, route configurations
  and secrets only for the names the stream subscribed to, and only those whose content the stream
  has not been sent yet (newly subscribed names always go out, names that do not exist yet are sent
  when they appear).
* Make-before-break: a new snapshot goes out as CDS, then EDS, then LDS, then RDS (SDS whenever it
  changes; listeners wait for their secrets by themselves). Listeners and route configurations are
  held back until the clusters and the endpoints of the clusters the stream accepted are
  acknowledged, because Envoy does not warm routes: a route to a cluster that is still warming
  answers 503. Clusters (and their endpoints) that the new snapshot drops stay in CDS until the
  stream has acknowledged the new listeners and route configurations; then a final CDS removes them.

Readiness counts, per connected Envoy, every type it subscribed to plus what it will subscribe to:
listeners and clusters whenever the snapshot has any (Envoy asks for listeners only after its
clusters warmed), and the CLAs and route configurations that the snapshot's clusters and listeners
reference. A reconnecting Envoy that reports the current CDS/LDS version is not sent them again.

Each stream is served by its gRPC handler task, which owns all of the stream's state; a small reader
task only moves incoming requests into the stream's queue, where snapshot changes also arrive.

A change costs a stream what it touched, not the size of the configuration: a snapshot records,
per type, the names that differ from the snapshot it was built from; a stream switching from that
one marks only those names (and its retained ones) dirty, planning looks only at the dirty and
forced names, and "synced" only at the names whose acknowledged content may differ. Whatever the
bookkeeping does not follow (a skipped snapshot, a resumed stream, a new wildcard) makes the next
look cover every name.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import hashlib
import logging
import re
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import scoped_route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    SECRET_TYPE,
    TYPE_ORDER,
    EnvoyResources,
)
from turnout.metrics import Metrics

log = logging.getLogger(__name__)

SHORT_TYPE_NAMES: Mapping[str, str] = {
    CLUSTER_TYPE: "cluster",
    ENDPOINT_TYPE: "endpoint",
    LISTENER_TYPE: "listener",
    ROUTE_TYPE: "route",
    SECRET_TYPE: "secret",
    SCOPED_ROUTE_TYPE: "scoped_route",
}
# Types whose every response carries all resources; a name missing from one means "deleted".
# Envoy subscribes to scoped route configurations with a wildcard and takes a SotW response as
# the whole set, as it does for listeners and clusters.
FULL_STATE_TYPES = frozenset({CLUSTER_TYPE, LISTENER_TYPE, SCOPED_ROUTE_TYPE})
# The types whose resources make Envoy subscribe to names of the key type.
# A subset type's resources are named by resources of its parent types; readiness counts the
# names the parents reference (Envoy subscribes to them only after accepting the parents). A
# route configuration is named by a listener's HCM (`rds`) or by a scope (scoped RDS).
_PARENT_TYPES: Mapping[str, tuple[str, ...]] = {
    ENDPOINT_TYPE: (CLUSTER_TYPE,),
    ROUTE_TYPE: (LISTENER_TYPE, SCOPED_ROUTE_TYPE),
    SECRET_TYPE: (LISTENER_TYPE,),
}
# Make-before-break: a type is sent only once these types have nothing in flight or left to send.
# Route configurations wait for scopes: a split host's index (`translate.split_host`) may name
# the scopes just sent, whose route configurations Envoy asks for once it took them, and those
# go before the index (`_new_first`).
_GATES = {
    LISTENER_TYPE: (CLUSTER_TYPE, ENDPOINT_TYPE),
    SCOPED_ROUTE_TYPE: (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE),
    ROUTE_TYPE: (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, SCOPED_ROUTE_TYPE),
}

_DOWNSTREAM_TLS_TYPE = "type.googleapis.com/" + tls_pb2.DownstreamTlsContext.DESCRIPTOR.full_name
_HCM_TYPE = (
    "type.googleapis.com/" + http_connection_manager_pb2.HttpConnectionManager.DESCRIPTOR.full_name
)
_MAX_MESSAGE_BYTES = 2**31 - 1
_NACK_HISTORY = 100
_VERSION_LENGTH = 16


# ---------------------------------------------------------------------------------------------
# Snapshots


@dataclass(frozen=True, slots=True)
class _Resource:
    name: str
    digest: str  # sha256 of the serialized message: equal digests, equal resources
    # The serialized message, shared by all streams and snapshots while it does not change
    # (for route configurations, the very bytes the translator keeps). Kept as bytes, not as
    # the `google.protobuf.Any` a response carries: each upb message has an arena of its own,
    # about 1.2 KB, 48 MiB at 40,000 resources; a response builds its Anys when it is sent.
    data: bytes
    # The type URL; empty for a stand-in of what a reconnected Envoy holds (never sent).
    type_url: str
    # Names this resource makes Envoy subscribe to: the CLA of an EDS cluster, the route
    # configurations of a listener's HTTP connection managers, the route configuration of a scope.
    refs: tuple[str, ...] = ()
    # SDS secrets a listener's TLS contexts name (its `refs` are route configurations).
    secret_refs: tuple[str, ...] = ()
    # The translated message this was packed from: the next snapshot handed the very same
    # message object reuses this resource without serializing or hashing it again.
    message: Any = field(default=None, compare=False, repr=False)
    # This resource's share of its type's version (`content_version`), a function of name and
    # digest, so a type's version is a sum rather than a hash over every resource.
    mark: int = field(default=0, compare=False, repr=False)
    # An inline scope (`_InlineScopes`): `data` is the scope without `route_configuration_name`
    # and this the route configuration that goes inline, joined only when a response is built.
    inlined: _Resource | None = field(default=None, compare=False, repr=False)

    def refs_of(self, child_type: str) -> tuple[str, ...]:
        return self.secret_refs if child_type == SECRET_TYPE else self.refs

    def packed(self) -> Any:
        """The resource as a response carries it (a `google.protobuf.Any`)."""
        if self.inlined is not None:
            return any_pb2.Any(type_url=self.type_url, value=_inline_bytes(self))
        return any_pb2.Any(type_url=self.type_url, value=self.data)


@dataclass(frozen=True, slots=True)
class Serialized:
    """One resource as the xDS server holds it, in plain data (`envoy.served_state` keeps these
    on disk): its type, name, serialized bytes and the names it makes Envoy subscribe to."""

    type_url: str
    name: str
    data: bytes
    refs: tuple[str, ...] = ()
    secret_refs: tuple[str, ...] = ()


def _resource_name(type_url: str, message: Any) -> str:
    if type_url == ENDPOINT_TYPE:
        return str(message.cluster_name)
    return str(message.name)


def _cluster_refs(cluster: Any) -> tuple[str, ...]:
    if (
        cluster.WhichOneof("cluster_discovery_type") == "type"
        and cluster.type == cluster_pb2.Cluster.EDS
    ):
        return (cluster.eds_cluster_config.service_name or cluster.name,)
    return ()


def _listener_refs(listener: Any) -> tuple[str, ...]:
    chains = list(listener.filter_chains)
    if listener.HasField("default_filter_chain"):
        chains.append(listener.default_filter_chain)
    names: set[str] = set()
    for chain in chains:
        for network_filter in chain.filters:
            if network_filter.typed_config.type_url != _HCM_TYPE:
                continue
            hcm = http_connection_manager_pb2.HttpConnectionManager()
            network_filter.typed_config.Unpack(hcm)
            if hcm.HasField("rds"):
                names.add(hcm.rds.route_config_name)
    return tuple(sorted(names))


def _listener_secret_refs(listener: Any) -> tuple[str, ...]:
    chains = list(listener.filter_chains)
    if listener.HasField("default_filter_chain"):
        chains.append(listener.default_filter_chain)
    names: set[str] = set()
    for chain in chains:
        if not chain.HasField("transport_socket"):
            continue
        typed = chain.transport_socket.typed_config
        if typed.type_url != _DOWNSTREAM_TLS_TYPE:
            continue
        context = tls_pb2.DownstreamTlsContext()
        typed.Unpack(context)
        common = context.common_tls_context
        names.update(c.name for c in common.tls_certificate_sds_secret_configs)
        if common.HasField("validation_context_sds_secret_config"):
            names.add(common.validation_context_sds_secret_config.name)
    return tuple(sorted(names))


def _pack(
    type_url: str, message: Any, previous: Mapping[str, _Resource], source: EnvoyResources
) -> _Resource:
    name = _resource_name(type_url, message)
    old = previous.get(name)
    # Deterministic serialization makes the bytes a function of content only (map order).
    data = source.serialized(message)
    if old is not None and old.data == data:
        # Equal content from a new message: keep the digest, remember the message, and hold
        # the bytes the translator holds too (not a copy: a restored resource's).
        return dataclasses.replace(old, data=data, message=message)
    refs: tuple[str, ...] = ()
    secret_refs: tuple[str, ...] = ()
    if type_url == CLUSTER_TYPE:
        refs = _cluster_refs(message)
    elif type_url == LISTENER_TYPE:
        refs = _listener_refs(message)
        secret_refs = _listener_secret_refs(message)
    elif type_url == SCOPED_ROUTE_TYPE:
        refs = (str(message.route_configuration_name),)
    digest = hashlib.sha256(data).hexdigest()
    return _Resource(
        name=name,
        digest=digest,
        data=data,
        type_url=type_url,
        refs=refs,
        secret_refs=secret_refs,
        message=message,
        mark=_mark(name, digest),
    )


def _mark(name: str, digest: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{name}\0{digest}".encode()).digest())


def content_version(resources: Iterable[_Resource]) -> str:
    """The `version_info` of a set of resources: a function of their names and contents.

    A hash of the sum (mod 2**256) of one hash per (name, digest): order does not matter, and
    each resource's term is computed once when it is packed, so a snapshot that changes one
    resource among 10,000 pays a few integer additions rather than hashing every name again."""
    return _version_of(_total(resources))


def _total(resources: Iterable[_Resource]) -> int:
    total = 0
    for res in resources:
        total += res.mark or _mark(res.name, res.digest)
    return total


def _version_of(total: int) -> str:
    digest = hashlib.sha256(b"%x" % (total % _MARK_MODULUS)).hexdigest()
    return digest[:_VERSION_LENGTH]


_MARK_MODULUS = 2**256


@dataclass(frozen=True, slots=True)
class _Snapshot:
    seq: int
    version: str
    resources: Mapping[str, Mapping[str, _Resource]]  # type URL -> name -> resource
    type_versions: Mapping[str, str]
    # EDS/RDS names that the snapshot's clusters/listeners reference and that exist.
    referenced: Mapping[str, frozenset[str]]
    # The seq of the snapshot this one was built from (-1: none) and, per type, the names whose
    # resource is not the very same object there (changed, added or removed): a stream switching
    # from that snapshot looks at these names only.
    base: int = -1
    changes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Per type, the tuple of messages this was built from: handed the very same tuple again (a
    # type the translator left alone), the next snapshot reuses the type without a look.
    sources: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    # Per type, the sum of its resources' marks (its version before hashing), and per subset
    # type how many parent resources name each name: what a patched type updates.
    totals: Mapping[str, int] = field(default_factory=dict)
    ref_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # The scopes with their route configurations inline, for Delta streams (None: not made).
    inline: _InlineScopes | None = None

    # -- per form: what a stream taking inline scopes (`inline`) sees of each type ------------

    def of(self, type_url: str, inline: bool) -> Mapping[str, _Resource]:
        if inline and type_url == SCOPED_ROUTE_TYPE and self.inline is not None:
            return self.inline.resources
        return self.resources[type_url]

    def version_of(self, type_url: str, inline: bool) -> str:
        if inline and type_url == SCOPED_ROUTE_TYPE and self.inline is not None:
            return self.inline.version
        return self.type_versions[type_url]

    def changes_of(self, type_url: str, inline: bool) -> frozenset[str]:
        if inline and type_url == SCOPED_ROUTE_TYPE and self.inline is not None:
            return self.inline.changes
        return self.changes.get(type_url, frozenset())

    def referenced_of(self, type_url: str, inline: bool) -> frozenset[str]:
        if inline and type_url == ROUTE_TYPE and self.inline is not None:
            return self.inline.referenced
        return self.referenced.get(type_url, frozenset())

    @staticmethod
    def build(
        seq: int,
        envoy_resources: EnvoyResources,
        previous: _Snapshot | None,
        equal_sources: Mapping[str, tuple[Any, ...]] | None = None,
        inline: bool = False,
    ) -> _Snapshot:
        """The snapshot of `envoy_resources`. What `previous` already held as the very same
        message is reused as it was (no serialization, no hash), and a type none of whose
        resources changed keeps its version, mapping and references. A type the translator
        patched from the very tuple `previous` was built from (`EnvoyResources.changes`) is
        patched here too: the work is in the changes alone. `equal_sources`: the tuples of a
        later snapshot not installed because its content was `previous`'s, which stand for
        `previous`'s own (the translator patches the last tuples it made). `inline`: also make
        the inline form of the scopes (`_InlineScopes`), patched from `previous`'s."""
        aliases = equal_sources or {}
        resources: dict[str, Mapping[str, _Resource]] = {}
        changes: dict[str, frozenset[str]] = {}
        totals: dict[str, int] = {}
        sources = envoy_resources.by_type()
        for type_url, messages in sources.items():
            if previous is None:
                resources[type_url] = _pack_type(type_url, messages, {}, envoy_resources)[0]
                totals[type_url] = _total(resources[type_url].values())
                continue
            reusable = previous.resources[type_url]
            resources[type_url], changes[type_url] = reusable, frozenset()
            totals[type_url] = previous.totals[type_url]
            based = (previous.sources.get(type_url), aliases.get(type_url))
            if any(messages is b for b in based):
                continue
            hint = envoy_resources.changes.get(type_url)
            if hint is not None and any(hint[0] is b for b in based):
                by_name, changed = _patch_type(type_url, hint[1], reusable, envoy_resources)
                total = totals[type_url] + _total(by_name[n] for n in changed if n in by_name)
                total -= _total(reusable[n] for n in changed if n in reusable)
            else:
                by_name, changed = _pack_type(type_url, messages, reusable, envoy_resources)
                total = _total(by_name.values()) if changed else totals[type_url]
            if changed:
                resources[type_url], changes[type_url] = by_name, changed
                totals[type_url] = total
        snapshot = _Snapshot._finish(seq, resources, changes, sources, totals, previous)
        if not inline:
            return snapshot
        before = previous.inline if previous is not None else None
        return dataclasses.replace(snapshot, inline=_inline_scopes(resources, changes, before))

    @staticmethod
    def restored(seq: int, saved: Iterable[Serialized], inline: bool) -> _Snapshot:
        """The snapshot of resources saved by an earlier run (`XdsServer.restore`): no message
        behind them, their digests computed from the bytes."""
        resources: dict[str, dict[str, _Resource]] = {t: {} for t in TYPE_ORDER}
        for item in saved:
            by_name = resources.get(item.type_url)
            if by_name is None:
                raise ValueError(f"unknown resource type {item.type_url!r}")
            digest = hashlib.sha256(item.data).hexdigest()
            if item.name in by_name:
                raise ValueError(f"duplicate {SHORT_TYPE_NAMES[item.type_url]} {item.name!r}")
            by_name[item.name] = _Resource(
                item.name,
                digest,
                item.data,
                item.type_url,
                item.refs,
                item.secret_refs,
                mark=_mark(item.name, digest),
            )
        totals = {t: _total(by_name.values()) for t, by_name in resources.items()}
        snapshot = _Snapshot._finish(seq, resources, {}, {}, totals, None)
        if not inline:
            return snapshot
        return dataclasses.replace(snapshot, inline=_inline_scopes(resources, {}, None))

    @staticmethod
    def _finish(
        seq: int,
        resources: Mapping[str, Mapping[str, _Resource]],
        changes: Mapping[str, frozenset[str]],
        sources: Mapping[str, tuple[Any, ...]],
        totals: Mapping[str, int],
        previous: _Snapshot | None,
    ) -> _Snapshot:
        type_versions = {
            t: _version_of(totals[t])
            if previous is None or changes[t]
            else previous.type_versions[t]
            for t in TYPE_ORDER
        }
        overall = hashlib.sha256(
            "\n".join(f"{t} {type_versions[t]}" for t in TYPE_ORDER).encode()
        ).hexdigest()[:_VERSION_LENGTH]
        ref_counts: dict[str, Mapping[str, int]] = {}
        referenced: dict[str, frozenset[str]] = {}
        for child, parents in _PARENT_TYPES.items():
            if previous is not None and not any(changes[t] for t in (child, *parents)):
                ref_counts[child] = previous.ref_counts[child]
                referenced[child] = previous.referenced[child]
                continue
            counts, touched = _ref_counts(child, parents, resources, changes, previous)
            ref_counts[child] = counts
            children = resources[child]
            if previous is None or touched is None:
                referenced[child] = frozenset(counts.keys() & children.keys())
                continue
            # Only the names a changed parent names or that changed themselves can move.
            touched |= changes[child]
            now = {name for name in touched if name in counts and name in children}
            before = previous.referenced[child]
            added, gone = now - before, (touched - now) & before
            referenced[child] = (before - gone) | added if added or gone else before
        base = -1 if previous is None else previous.seq
        return _Snapshot(
            seq,
            overall,
            resources,
            type_versions,
            referenced,
            base,
            changes,
            sources,
            totals,
            ref_counts,
        )


def _ref_counts(
    child: str,
    parents: tuple[str, ...],
    resources: Mapping[str, Mapping[str, _Resource]],
    changes: Mapping[str, frozenset[str]],
    previous: _Snapshot | None,
) -> tuple[Mapping[str, int], set[str] | None]:
    """How many resources of the parent types name each name of `child`, and the names whose
    count changed: the previous counts patched for the parents' changed names, or counted
    afresh (None: every name may have changed)."""
    if previous is None or sum(len(changes[p]) for p in parents) > _PATCH_LIMIT:
        counts: dict[str, int] = {}
        for parent in parents:
            for res in resources[parent].values():
                for name in res.refs_of(child):
                    counts[name] = counts.get(name, 0) + 1
        return counts, None
    old_counts = previous.ref_counts[child]
    touched: set[str] = set()
    if not any(changes[p] for p in parents):
        return old_counts, touched
    counts = dict(old_counts)
    for parent in parents:
        before, after = previous.resources[parent], resources[parent]
        for name in changes[parent]:
            gone, new = before.get(name), after.get(name)
            for ref in gone.refs_of(child) if gone is not None else ():
                touched.add(ref)
                if counts[ref] == 1:
                    del counts[ref]
                else:
                    counts[ref] -= 1
            for ref in new.refs_of(child) if new is not None else ():
                touched.add(ref)
                counts[ref] = counts.get(ref, 0) + 1
    return counts, touched


# Beyond this many changed parents, counting afresh is as cheap as patching.
_PATCH_LIMIT = 4096


def _patch_type(
    type_url: str,
    updates: Mapping[str, Any],
    reusable: Mapping[str, _Resource],
    source: EnvoyResources,
) -> tuple[dict[str, _Resource], frozenset[str]]:
    """`reusable` with the translator's changes ({name: message, or None: gone}) applied, and
    the names whose resource is not the very same object there."""
    by_name = dict(reusable)
    changed: set[str] = set()
    for name, message in updates.items():
        old = reusable.get(name)
        if message is None:
            if old is not None:
                del by_name[name]
                changed.add(name)
        elif old is None or old.message is not message:
            res = _pack(type_url, message, reusable, source)
            if res.name != name:
                raise ValueError(f"{SHORT_TYPE_NAMES[type_url]} {res.name!r} handed as {name!r}")
            by_name[name] = res
            changed.add(name)
    return by_name, frozenset(changed)


def _pack_type(
    type_url: str,
    messages: Iterable[Any],
    reusable: Mapping[str, _Resource],
    source: EnvoyResources,
) -> tuple[dict[str, _Resource], frozenset[str]]:
    """The resources of `messages` by name, and the names whose resource is not the very same
    object in `reusable` (changed, added or removed): none when it can be kept as it is."""
    by_name: dict[str, _Resource] = {}
    changed: set[str] = set()
    # The translator keeps an unchanged piece's message the very same object: found by identity
    # (cheaper than reading its name), there is nothing to serialize or hash.
    known = {id(res.message): res for res in reusable.values()} if reusable else {}
    for message in messages:
        res = known.get(id(message))
        if res is None or res.message is not message:
            res = _pack(type_url, message, reusable, source)
            changed.add(res.name)
        if res.name in by_name:
            # Envoy NACKs a response with duplicate names; this is a translator bug.
            raise ValueError(f"duplicate {SHORT_TYPE_NAMES[type_url]} resource name {res.name!r}")
        by_name[res.name] = res
    # The others were found in `reusable` under their own names: unless they are all of it,
    # some of its names are gone.
    if len(by_name) - len(changed) != len(reusable):
        changed.update(reusable.keys() - by_name.keys())
    return by_name, frozenset(changed)


def _new_first(st: _TypeState, names: list[str]) -> list[str]:
    """Of the route configurations `names` to send, the ones Envoy never had, when there are
    some beside changed ones: the changed ones (a split host's index naming the new scopes)
    wait until Envoy took the new ones, and stay to be looked at (`dirty`)."""
    new = [name for name in names if name not in st.acked]
    if not new or len(new) == len(names):
        return names
    held = st.dirty if st.dirty is not None else set()
    st.dirty = held | {name for name in names if name in st.acked}
    return new


def _referenced(
    parents: Iterable[_Resource], children: Mapping[str, _Resource], child_type: str
) -> frozenset[str]:
    return frozenset(
        name for res in parents for name in res.refs_of(child_type) if name in children
    )


# ---------------------------------------------------------------------------------------------
# Inline scopes: what a Delta stream is sent of scoped RDS


@dataclass(frozen=True, slots=True)
class _InlineScopes:
    """The scopes of a snapshot as a Delta stream is sent them with `XdsServer.inline_scopes`
    (`--xds-inline-scopes`): each with the RouteConfiguration it names inline
    (`ScopedRouteConfiguration.route_configuration`). Envoy then builds a scope's table as it
    takes the scope, with no RDS subscription per scope (a subscription, its init target and a
    dozen statistics each, and a second round trip before the table is in effect): a shorter
    first configuration and less memory, but a changed table is a scoped RDS update, which
    costs Envoy more than an RDS one (docs/data-plane.md). A Delta response carries only the
    changed scopes, so a one-host change still sends one scope. A State-of-the-World stream keeps
    the scopes naming their route configurations: each of its scope responses carries every
    scope, and inline, every table.

    Derived from the one translation per snapshot, and patched: a scope is made again only when
    it or the route configuration of its name changed (or it names another one: `odd`)."""

    resources: Mapping[str, _Resource]
    version: str
    total: int
    # The names whose resource is not the very same object in the previous snapshot's form.
    changes: frozenset[str]
    # Scopes naming a route configuration of another name: made again on every change.
    odd: frozenset[str]
    # The route configurations the listeners name, and of those the ones that exist: what a
    # stream of this form subscribes to (it asks for no scope's route configuration).
    listener_refs: frozenset[str]
    referenced: frozenset[str]


# `ScopedRouteConfiguration.route_configuration`, field 5, length-delimited: the highest field
# number of the message, so appended to the others (which a deterministic serialization writes in
# field order) it gives the bytes the inline message serializes to.
_INLINE_TAG = bytes([5 << 3 | 2])


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _inline_bytes(res: _Resource) -> bytes:
    config = res.inlined
    assert config is not None
    return res.data + _INLINE_TAG + _varint(len(config.data)) + config.data


def _inline(scope: _Resource, routes: Mapping[str, _Resource]) -> _Resource:
    """`scope` with the route configuration it names inline; `scope` itself when the snapshot
    has no such route configuration (Envoy then asks for it over RDS, as ever)."""
    config = routes.get(scope.refs[0]) if scope.refs else None
    if config is None:
        return scope
    message = scoped_route_pb2.ScopedRouteConfiguration.FromString(scope.data)
    message.ClearField("route_configuration_name")
    head = message.SerializeToString(deterministic=True)
    hashed = hashlib.sha256(head)
    hashed.update(_INLINE_TAG + _varint(len(config.data)))
    hashed.update(config.data)
    digest = hashed.hexdigest()
    return _Resource(
        name=scope.name,
        digest=digest,
        data=head,
        type_url=SCOPED_ROUTE_TYPE,
        mark=_mark(scope.name, digest),
        inlined=config,
    )


def _is_odd(name: str, scope: _Resource) -> bool:
    return scope.refs != (name,)


def _inline_scopes(
    resources: Mapping[str, Mapping[str, _Resource]],
    changes: Mapping[str, frozenset[str]],
    previous: _InlineScopes | None,
) -> _InlineScopes:
    """The inline form of `resources`' scopes, patched from `previous` (the form of the snapshot
    `changes` are relative to) for the changed scopes and route configurations only."""
    scopes, routes = resources[SCOPED_ROUTE_TYPE], resources[ROUTE_TYPE]
    listeners = resources[LISTENER_TYPE]
    if previous is None or not changes:
        by_name = {name: _inline(res, routes) for name, res in scopes.items()}
        odd = frozenset(name for name, res in scopes.items() if _is_odd(name, res))
        refs = frozenset[str]().union(*(res.refs for res in listeners.values()))
        total = _total(by_name.values())
        return _InlineScopes(
            by_name, _version_of(total), total, frozenset(by_name), odd, refs, refs & routes.keys()
        )
    refs = previous.listener_refs
    if changes[LISTENER_TYPE]:
        refs = frozenset[str]().union(*(res.refs for res in listeners.values()))
    referenced = previous.referenced
    if refs is not previous.listener_refs or not refs.isdisjoint(changes[ROUTE_TYPE]):
        referenced = refs & routes.keys()
    # Only these can have changed: the rest is the very same scope naming the very same table.
    touched = changes[SCOPED_ROUTE_TYPE] | changes[ROUTE_TYPE] | previous.odd
    base, patched = previous.resources, None
    total, strays = previous.total, set(previous.odd)
    for name in touched:
        old, scope = base.get(name), scopes.get(name)
        new = None if scope is None else _inline(scope, routes)
        strays.discard(name)
        if scope is not None and _is_odd(name, scope):
            strays.add(name)
        if new is old or (old is not None and new is not None and old.digest == new.digest):
            continue
        if patched is None:
            patched = dict(base)
        if old is not None:
            total -= _total((old,))
            del patched[name]
        if new is not None:
            total += _total((new,))
            patched[name] = new
    if patched is None:
        return _InlineScopes(
            base, previous.version, total, frozenset(), frozenset(strays), refs, referenced
        )
    changed = frozenset(n for n in touched if patched.get(n) is not base.get(n))
    return _InlineScopes(
        patched, _version_of(total), total, changed, frozenset(strays), refs, referenced
    )


# ---------------------------------------------------------------------------------------------
# Per-stream state


@dataclass(frozen=True, slots=True)
class Nack:
    """A rejected response: which Envoy, which type, which version, and Envoy's reason."""

    node: str
    type_url: str
    version: str
    message: str
    at: float  # time.time()

    @property
    def type(self) -> str:
        return SHORT_TYPE_NAMES.get(self.type_url, self.type_url)

    def describe(self) -> str:
        return f"Envoy {self.node} rejected {self.type} version {self.version}: {self.message}"


@dataclass(frozen=True, slots=True)
class RefusedResource:
    """One resource of the current configuration that an Envoy refused, with its reason."""

    type: str  # "cluster", "listener", "route", "secret", "endpoint"
    name: str
    node: str
    message: str


@dataclass(frozen=True, slots=True)
class ListenerState:
    """What `XdsServer.listener_state` knows about one Envoy listener."""

    programmed: bool | None  # True: in effect everywhere; False: rejected; None: not yet
    message: str
    exists: bool = True  # False: the current configuration has no such listener


class _Outcome(enum.Enum):
    ACK = "ack"
    NACK = "nack"


@dataclass(slots=True)
class _TypeState:
    type_url: str
    requested: bool = False
    wildcard: bool = False
    ever_named: bool = False  # the legacy wildcard rule: empty names mean "*" until named once
    names: set[str] = field(default_factory=set)
    nonce: str = ""
    pending: bool = False  # a response is out and has not been ACKed or NACKed
    inflight: dict[str, _Resource] = field(default_factory=dict)  # the last response
    inflight_version: str = ""
    # What the stream was sent (ACKed or not): a NACKed content is never sent again because it is
    # recorded here. For subset types this accumulates per name.
    sent: dict[str, _Resource] = field(default_factory=dict)
    sent_version: str | None = None
    acked: dict[str, _Resource] = field(default_factory=dict)  # what Envoy confirmed it has
    acked_version: str | None = None
    acked_refs: frozenset[str] = frozenset()  # names the acknowledged resources reference
    last_outcome: _Outcome | None = None
    nack: Nack | None = None  # until a later version is ACKed
    # Names to resend even though their content is unchanged: Envoy re-warms a changed EDS
    # cluster and finishes warming only when a CLA response arrives.
    forced: set[str] = field(default_factory=set)
    # Per resource, the content (digest) Envoy has in effect, and the content it refused with
    # its message: what `XdsServer.listener_state` reads, resource by resource, so that one
    # rejected resource does not hide that the others are in effect.
    in_effect: dict[str, str] = field(default_factory=dict)
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Delta xDS: every response carries only changed resources plus the names it removes, so
    # `sent`/`acked` accumulate per name for every type (SotW: only for subset types).
    delta: bool = False
    inflight_removed: tuple[str, ...] = ()
    sent_at: float = 0.0  # time.monotonic() of the last response: Envoy's apply time
    # The names whose plan may differ from "nothing to send" (None: unknown, check every name):
    # every other name is, if wanted, sent in its target content and, under a wildcard, not
    # sent unless targeted. Grown by whatever changes a name's target, sent content or
    # subscription; emptied by planning, so a change costs what it touched.
    dirty: set[str] | None = None
    # The same for what Envoy acknowledged: `unacked` holds the names whose acknowledged content
    # differs from the target (or that only one of them has), up to date but for the names in
    # `ack_dirty` (None: every name).
    ack_dirty: set[str] | None = None
    unacked: set[str] = field(default_factory=set)
    names_dropped: int = 0  # counts the requests that may have dropped names from `names`

    def touch(self, names: Iterable[str]) -> None:
        if self.dirty is not None:
            self.dirty.update(names)
        if self.ack_dirty is not None:
            self.ack_dirty.update(names)

    def forget_dirty(self) -> None:
        """Something changed that the dirty sets do not follow: look at every name next time."""
        self.dirty = self.ack_dirty = None

    def subscribed(self, available: Iterable[str]) -> set[str]:
        if self.wildcard:
            return set(available)
        return self.names.intersection(available)


def _has(sent: _Resource | None, res: _Resource) -> bool:
    """Whether what was sent (or acknowledged) is `res`'s content; unchanged resources are the
    very same objects from snapshot to snapshot, so mostly an identity check."""
    return sent is res or (sent is not None and sent.digest == res.digest)


def _mentions(message: str, name: str) -> bool:
    """Whether Envoy's error message names the resource `name` (as a whole word)."""
    return re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w./-])", message) is not None


def _note_refused(st: _TypeState, message: str) -> None:
    """Records what a rejected response did, resource by resource. Envoy adds, updates and
    removes listeners and clusters one at a time and reports the ones that failed by name
    ("Error adding/updating listener(s) gateway_8081: cannot bind ..."): those keep their old
    content, the others of the response are in effect. A message that names none of the
    resources (and any rejected route configuration or secret response, which Envoy hands to
    its subscriptions one after another and may stop applying midway) refuses every changed
    resource of the response and puts nothing new in effect."""
    named = {name for name in st.inflight if _mentions(message, name)}
    if named and st.type_url in FULL_STATE_TYPES:
        taken = {name: res.digest for name, res in st.inflight.items() if name not in named}
        if st.delta:
            # A delta response holds only the changes: the rest stays as it was, the removed
            # names are gone and the refused ones keep their old content.
            removed = set(st.inflight_removed)
            kept = {n: d for n, d in st.in_effect.items() if n not in removed}
        else:
            kept = {name: st.in_effect[name] for name in named if name in st.in_effect}
        st.in_effect = kept | taken
        st.refused = {name: (st.inflight[name].digest, message) for name in named}
        return
    for name, res in st.inflight.items():
        if (not named or name in named) and st.in_effect.get(name) != res.digest:
            st.refused[name] = (res.digest, message)


class _Wake:
    """Queue item: the server's snapshot changed."""


class _End:
    """Queue item: the client closed its side of the stream."""


_WAKE = _Wake()
_END = _End()


class _Stream:
    """The state machine of one ADS stream. Only the stream's own task touches it."""

    def __init__(self, server: XdsServer, stream_id: int, peer: str, delta: bool = False) -> None:
        self.server = server
        self.id = stream_id
        self.peer = peer
        self.delta = delta
        # Takes the scopes with their route configurations inline (`_InlineScopes`).
        self.inline = delta and server.inline_scopes
        self.node_id: str | None = None
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.snapshot: _Snapshot | None = None
        self.types = {t: _TypeState(t, delta=delta) for t in TYPE_ORDER}
        # (acked cluster refs, EDS target, EDS `names_dropped`) when every acked cluster's CLA was
        # last found subscribed: until one of them changes, it still is.
        self._endpoints_subscribed: tuple[Any, ...] | None = None
        # Resources the current snapshot dropped but Envoy may still use until it has the new
        # listeners and routes (make-before-break): clusters, and scopes a split host's index
        # Envoy holds may still name.
        self.retained: dict[str, dict[str, _Resource]] = {
            CLUSTER_TYPE: {},
            ENDPOINT_TYPE: {},
            SCOPED_ROUTE_TYPE: {},
        }
        # Per retained type, the (resources, nonce, pending, requested) of the last switch that
        # found nothing to retain (`switch_snapshot`).
        self._clean: dict[str, tuple[Any, ...] | None] = {}
        self.synced_seq = -1  # seq of the latest snapshot this stream fully acknowledged

    @property
    def node(self) -> str:
        return self.node_id or f"(unknown node at {self.peer})"

    # -- inputs ---------------------------------------------------------------------------

    def switch_snapshot(self, snapshot: _Snapshot | None) -> None:
        if snapshot is None or snapshot is self.snapshot:
            return
        old, self.snapshot = self.snapshot, snapshot
        if old is None:
            return
        for type_url, st in self.types.items():
            if snapshot.base == old.seq:
                st.touch(snapshot.changes_of(type_url, self.inline))
            else:
                st.forget_dirty()
        for type_url, retained in self.retained.items():
            current = snapshot.of(type_url, self.inline)
            st = self.types[type_url]
            # Names outside `current` enter what the stream was sent or acknowledged only by a
            # response, an answer or a resumption, each of which moves nonce, pending or
            # requested: with none of them since a look that found nothing to retain, and the
            # very same resources, there is still nothing.
            state = (current, st.nonce, st.pending, st.requested)
            clean = self._clean.get(type_url)
            if not retained and clean is not None and clean[0] is current and clean == state:
                continue
            self._clean[type_url] = None
            for name in st.acked.keys() - current.keys():
                retained[name] = st.acked[name]
            for name in st.sent.keys() - current.keys():
                retained[name] = st.sent[name]
            back = retained.keys() & current.keys()
            for name in back:
                del retained[name]
            st.touch(retained.keys())
            st.touch(back)
            if not retained:
                self._clean[type_url] = state

    def _type_of(self, request: Any) -> _TypeState | None:
        if request.HasField("node") and request.node.id:
            self.node_id = request.node.id
        st = self.types.get(request.type_url)
        if st is None:
            log.debug(
                "Envoy %s asked for unsupported type %s; ignored", self.node, request.type_url
            )
        return st

    def on_request(self, request: Any) -> None:
        if self.delta:
            self.on_delta_request(request)
            return
        st = self._type_of(request)
        if st is None:
            return
        type_url = st.type_url
        nonce = request.response_nonce
        # Before the first response of a type on this stream there is nothing to be stale
        # against; a reconnecting client may still carry a nonce from its previous stream.
        if st.nonce and nonce and nonce != st.nonce:
            log.debug(
                "Envoy %s: ignoring %s request with stale nonce %s (latest %s)",
                self.node,
                SHORT_TYPE_NAMES[type_url],
                nonce,
                st.nonce,
            )
            return
        if st.pending and nonce == st.nonce:
            if request.HasField("error_detail"):
                self._on_nack(st, request.error_detail.message)
            else:
                self._on_ack(st)
        if not st.requested:
            self._maybe_resume(st, request.version_info)
        st.requested = True
        self._update_subscription(st, request.resource_names)

    def _on_ack(self, st: _TypeState) -> None:
        st.pending = False
        st.last_outcome = _Outcome.ACK
        if st.type_url in FULL_STATE_TYPES and not st.delta:
            st.acked = dict(st.inflight)
            st.in_effect = {name: res.digest for name, res in st.inflight.items()}
            st.refused.clear()
            st.ack_dirty = None
        else:
            if st.ack_dirty is not None:
                st.ack_dirty.update(st.inflight, st.inflight_removed)
            st.acked.update(st.inflight)
            for name, res in st.inflight.items():
                st.in_effect[name] = res.digest
                st.refused.pop(name, None)
            for name in st.inflight_removed:
                st.acked.pop(name, None)
                st.in_effect.pop(name, None)
                st.refused.pop(name, None)
        if st.type_url == CLUSTER_TYPE:
            st.acked_refs = frozenset(name for res in st.acked.values() for name in res.refs)
        st.acked_version = st.inflight_version
        if st.nack is not None and st.nack.version != st.inflight_version:
            st.nack = None
        self.server._count("ack", st.type_url)
        applied = time.monotonic() - st.sent_at
        self.server._observe_apply(st.type_url, applied)
        log.debug(
            "Envoy %s ACKed %s version %s (%d resource(s), %d removed) %.3f s after the push",
            self.node,
            SHORT_TYPE_NAMES[st.type_url],
            st.inflight_version,
            len(st.inflight),
            len(st.inflight_removed),
            applied,
        )

    def _on_nack(self, st: _TypeState, message: str) -> None:
        st.pending = False
        st.last_outcome = _Outcome.NACK
        nack = Nack(self.node, st.type_url, st.inflight_version, message, time.time())
        st.nack = nack
        self.server._record_nack(nack)
        _note_refused(st, message)
        if st.delta:
            # Envoy removes what a delta response removes before it adds and updates the rest,
            # failing or not; the removal is not announced again.
            for name in st.inflight_removed:
                st.acked.pop(name, None)
            st.touch(st.inflight_removed)
        # Only Envoy's message is logged, never resource contents: a Secret's bytes must not leak.
        log.warning("%s", nack.describe())

    def _maybe_resume(self, st: _TypeState, version: str) -> None:
        """A reconnecting Envoy reports the version it has; for full-state types that names the
        whole set, so an unchanged set need not be sent (and re-warmed) again."""
        if not version or st.type_url not in FULL_STATE_TYPES or self.snapshot is None:
            return
        target = self._target(st.type_url)
        if version == self._target_version(st.type_url, target):
            st.sent = dict(target)
            st.acked = dict(target)
            st.acked_refs = frozenset(name for res in target.values() for name in res.refs)
            st.in_effect = {name: res.digest for name, res in target.items()}
            st.sent_version = st.acked_version = version
            st.last_outcome = _Outcome.ACK
            st.forget_dirty()

    def _update_subscription(self, st: _TypeState, resource_names: Iterable[str]) -> None:
        names = set(resource_names)
        if names:
            st.ever_named = True
        was_wildcard = st.wildcard
        st.wildcard = "*" in names or (not names and not st.ever_named)
        names.discard("*")
        if st.wildcard and not was_wildcard:
            st.forget_dirty()
        st.touch(names - st.names)
        st.names_dropped += 1
        if st.type_url in FULL_STATE_TYPES or st.wildcard:
            st.names = names
            return
        dropped = st.names - names
        st.names = names
        # Envoy forgets what it unsubscribed; if it subscribes again it needs the resource again.
        for name in dropped:
            self._forget(st, name)

    # -- delta requests ---------------------------------------------------------------------

    def on_delta_request(self, request: Any) -> None:
        """A `DeltaDiscoveryRequest`: ACK/NACK by nonce, then the subscription changes, which
        count even when the nonce is stale (xDS protocol, "Delta xDS")."""
        st = self._type_of(request)
        if st is None:
            return
        nonce = request.response_nonce
        if st.pending and nonce and nonce == st.nonce:
            if request.HasField("error_detail"):
                self._on_nack(st, request.error_detail.message)
            else:
                self._on_ack(st)
        elif st.nonce and nonce and nonce != st.nonce:
            log.debug(
                "Envoy %s: %s request with stale nonce %s (latest %s): subscriptions only",
                self.node,
                SHORT_TYPE_NAMES[st.type_url],
                nonce,
                st.nonce,
            )
        resumed: Mapping[str, str] = {}
        if not st.requested:
            st.requested = True
            # The legacy wildcard: a first request naming nothing asks for everything.
            st.wildcard = not request.resource_names_subscribe
            st.forget_dirty()
            resumed = dict(request.initial_resource_versions)
            self._resume_delta(st, resumed)
        self._update_delta_subscription(
            st, request.resource_names_subscribe, request.resource_names_unsubscribe, resumed
        )

    def _resume_delta(self, st: _TypeState, versions: Mapping[str, str]) -> None:
        """A reconnecting Envoy lists what it has (`initial_resource_versions`): those are not
        sent again unless they differ. Names the configuration no longer has are removed, the
        clusters and endpoints among them only after the routes stop naming them."""
        if not versions:
            return
        st.forget_dirty()
        target = self._target(st.type_url) if self.snapshot is not None else {}
        for name, version in versions.items():
            res = target.get(name)
            if res is None or res.digest != version:
                # Stands for what Envoy has; never sent (see `_plan_delta`).
                res = _Resource(name=name, digest=version, data=b"", type_url="")
                retained = self.retained.get(st.type_url)
                if name not in target and retained is not None:
                    retained[name] = res
            st.sent[name] = st.acked[name] = res
            st.in_effect[name] = version
        if st.type_url == CLUSTER_TYPE:
            st.acked_refs = frozenset(name for res in st.acked.values() for name in res.refs)
        st.last_outcome = _Outcome.ACK

    def _update_delta_subscription(
        self,
        st: _TypeState,
        subscribe: Iterable[str],
        unsubscribe: Iterable[str],
        resumed: Mapping[str, str],
    ) -> None:
        for name in unsubscribe:
            if name == "*":
                st.wildcard = False
                continue
            st.touch((name,))
            st.names.discard(name)
            st.names_dropped += 1
            if not st.wildcard:
                # Envoy drops what it unsubscribed; a later subscription needs it sent again.
                self._forget(st, name)
        for name in subscribe:
            if name == "*":
                if not st.wildcard:
                    st.forget_dirty()
                st.wildcard = True
                continue
            st.touch((name,))
            st.names.add(name)
            st.ever_named = True
            # A subscribed name is sent even if Envoy should have it (xDS protocol: "the server
            # must send it"), except what the same first request listed as held.
            if name not in resumed:
                st.forced.add(name)

    @staticmethod
    def _forget(st: _TypeState, name: str) -> None:
        st.touch((name,))
        st.sent.pop(name, None)
        st.acked.pop(name, None)
        st.forced.discard(name)
        st.in_effect.pop(name, None)
        st.refused.pop(name, None)

    # -- what the stream should have --------------------------------------------------------

    def current(self, type_url: str, snapshot: _Snapshot) -> Mapping[str, _Resource]:
        """`snapshot`'s resources of `type_url` in the form this stream is sent."""
        return snapshot.of(type_url, self.inline)

    def _target(self, type_url: str) -> Mapping[str, _Resource]:
        assert self.snapshot is not None
        current = self.snapshot.of(type_url, self.inline)
        retained = self.retained.get(type_url)
        if not retained:
            return current
        return {**retained, **current}

    def _target_version(self, type_url: str, target: Mapping[str, _Resource]) -> str:
        assert self.snapshot is not None
        if target is self.snapshot.of(type_url, self.inline):
            return self.snapshot.version_of(type_url, self.inline)
        return content_version(target.values())

    def _counted_names(self, type_url: str, target: Mapping[str, _Resource]) -> set[str]:
        """The names of a subset type that the stream must hold: what it subscribed to plus what
        its clusters or listeners will make it subscribe to, as far as they exist."""
        assert self.snapshot is not None
        counted = self.types[type_url].subscribed(target)
        parents = _PARENT_TYPES.get(type_url, ())
        if not parents:
            return counted
        if self.retained.get(type_url) or any(self.retained.get(p) for p in parents):
            named_by = (res for p in parents for res in self._target(p).values())
            return counted | _referenced(named_by, target, type_url)
        return counted | self.snapshot.referenced_of(type_url, self.inline)

    def _synced(self, type_url: str, excused: frozenset[str] = frozenset()) -> bool:
        """Has the stream acknowledged the current content of this type? `excused`: listeners
        whose rejection `excused_listeners` accepted; they and the names only they reference
        do not count."""
        st = self.types[type_url]
        if st.pending:
            return False
        target = self._target(type_url)
        if type_url in FULL_STATE_TYPES:
            # Envoy asks for listeners only once its clusters warmed, so a stream that has not
            # asked yet does not have them.
            if not st.requested:
                return not target
            if excused and type_url == LISTENER_TYPE:
                return True
            if st.delta:
                return not self._unacked(st, target)
            return st.acked_version == self._target_version(type_url, target)
        parents = _PARENT_TYPES.get(type_url, ())
        if (
            st.requested
            and not excused
            and not self.retained.get(type_url)
            and not any(self.retained.get(p) for p in parents)
        ):
            # Only a name whose acknowledged content differs can be one that is not synced.
            assert self.snapshot is not None
            referenced = self.snapshot.referenced_of(type_url, self.inline)
            return not any(
                name in target and (st.wildcard or name in st.names or name in referenced)
                for name in self._unacked(st, target)
            )
        counted = self._counted_names(type_url, target)
        if excused and LISTENER_TYPE in _PARENT_TYPES.get(type_url, ()):
            listeners = self._target(LISTENER_TYPE)
            still = _referenced(
                (res for name, res in listeners.items() if name not in excused), target, type_url
            )
            only_excused = _referenced(
                (listeners[name] for name in excused if name in listeners), target, type_url
            )
            counted -= only_excused - still - st.subscribed(target)
        if not st.requested:
            return not counted
        return all(_has(st.acked.get(name), target[name]) for name in counted)

    @staticmethod
    def _unacked(st: _TypeState, target: Mapping[str, _Resource]) -> set[str]:
        """The names whose acknowledged content is not the target's (or that only one of the
        two has), brought up to date for the names touched since the last look."""

        def differs(name: str) -> bool:
            res = target.get(name)
            if res is None:
                return name in st.acked
            return not _has(st.acked.get(name), res)

        if st.ack_dirty is None:
            st.unacked = {name for name in target.keys() | st.acked.keys() if differs(name)}
        else:
            for name in st.ack_dirty:
                if differs(name):
                    st.unacked.add(name)
                else:
                    st.unacked.discard(name)
        st.ack_dirty = set()
        return st.unacked

    def fully_synced(self, excused: frozenset[str] = frozenset()) -> bool:
        return (
            self.snapshot is not None
            and self.snapshot is self.server._snapshot
            and not any(self.retained.values())
            and all(self._synced(t, excused) for t in TYPE_ORDER)
        )

    def _refused_listeners(self) -> frozenset[str]:
        """The listeners of the stream's last listener response that Envoy rejected by name, when
        it rejected each in its current content and has every other listener of the
        configuration in effect as it is now (and no removed one); else empty."""
        if self.snapshot is None:
            return frozenset()
        st = self.types[LISTENER_TYPE]
        if st.pending or st.last_outcome is not _Outcome.NACK or not st.refused:
            return frozenset()
        target = self._target(LISTENER_TYPE)
        for name, (digest, _) in st.refused.items():
            res = target.get(name)
            if res is None or res.digest != digest:
                return frozenset()
        for name, res in target.items():
            if name not in st.refused and st.in_effect.get(name) != res.digest:
                return frozenset()
        if any(name not in target for name in st.in_effect):
            return frozenset()
        return frozenset(st.refused)

    def excused_listeners(self, reported: frozenset[str]) -> frozenset[str]:
        """The listeners whose rejection does not make this stream unready: the refused
        listeners (`_refused_listeners`) when they are all of `reported` (whose rejection the
        caller reports on the objects that declared them); else empty."""
        refused = self._refused_listeners()
        return refused if refused <= reported else frozenset()

    def first_unsynced(self, excused: frozenset[str] = frozenset()) -> str:
        if self.snapshot is not self.server._snapshot:
            return f"Envoy {self.node} has not been sent the current configuration yet"
        for type_url in TYPE_ORDER:
            if not self._synced(type_url, excused):
                version = self._target_version(type_url, self._target(type_url))
                return (
                    f"waiting for Envoy {self.node} to acknowledge "
                    f"{SHORT_TYPE_NAMES[type_url]} version {version}"
                )
        return f"waiting for Envoy {self.node} to acknowledge the removal of stale clusters"

    # -- what to send -----------------------------------------------------------------------

    def _plan(self, type_url: str) -> tuple[str, list[_Resource]] | None:
        """The response this type needs now (version, resources), if any."""
        st = self.types[type_url]
        if not st.requested or st.pending:
            return None
        target = self._target(type_url)
        version = self._target_version(type_url, target)
        if type_url in FULL_STATE_TYPES:
            if version == st.sent_version:
                return None
            return version, [target[name] for name in sorted(target)]
        send = sorted(name for name in self._candidates(st, target) if name in target)
        st.dirty = set()
        if type_url == ROUTE_TYPE:
            send = _new_first(st, send)
        if not send:
            return None
        return version, [target[name] for name in send]

    @staticmethod
    def _candidates(st: _TypeState, target: Mapping[str, _Resource]) -> set[str]:
        """The names to look at for a plan: the wanted names that are forced or whose sent
        content differs from the target, and under a wildcard the sent names the target lacks.
        Only the dirty names can be either (every name when that is not known)."""
        st.forced = {name for name in st.forced if name in target}
        if st.dirty is None:
            names: Iterable[str] = target.keys() | st.sent.keys()
        else:
            names = st.dirty | st.forced
        out = set()
        for name in names:
            res = target.get(name)
            if res is None:
                if st.wildcard and name in st.sent:
                    out.add(name)
            elif (st.wildcard or name in st.names) and (
                name in st.forced or not _has(st.sent.get(name), res)
            ):
                out.add(name)
        return out

    def _plan_delta(self, type_url: str) -> tuple[str, list[_Resource], list[str]] | None:
        """The delta response this type needs now: the subscribed resources whose content the
        stream was not sent (or that it subscribed to again), and the names to remove."""
        st = self.types[type_url]
        if not st.requested or st.pending:
            return None
        target = self._target(type_url)
        candidates = self._candidates(st, target)
        names = sorted(name for name in candidates if name in target)
        if type_url == ROUTE_TYPE or (type_url == SCOPED_ROUTE_TYPE and self.inline):
            # Inline, a split host's new path scopes go before the index scope naming them.
            names = _new_first(st, names)
        send = [
            target[name]
            for name in names
            # A stand-in for what a reconnected Envoy has (`_resume_delta`) has no content.
            if target[name].type_url
        ]
        # Only a wildcard subscription hears of removals (`_candidates`): Envoy drops an
        # explicitly subscribed CLA, route configuration or secret itself once nothing names it
        # (and a removal would empty a CLA a draining cluster still uses).
        removed = sorted(name for name in candidates if name not in target)
        # What is not sent now (a stand-in) stays to be looked at again.
        st.dirty = candidates - {res.name for res in send} - set(removed)
        if not send and not removed:
            return None
        if type_url in FULL_STATE_TYPES:
            # As a State-of-the-World response would, every change of clusters or listeners
            # tries the refused ones again (a port may have become free); Envoy applies those
            # one by one, so a refused one does not hold the others back.
            sending = {res.name for res in send}
            send.extend(
                target[name]
                for name, (digest, _) in sorted(st.refused.items())
                if name not in sending and name in target and target[name].digest == digest
            )
            send.sort(key=lambda res: res.name)
        return self._target_version(type_url, target), send, removed

    def _cluster_endpoints_subscribed(self) -> bool:
        """Envoy subscribes to a new cluster's CLA only after it processed the CDS response; until
        that subscription has arrived (and been answered) the cluster is still warming."""
        cds, eds = self.types[CLUSTER_TYPE], self.types[ENDPOINT_TYPE]
        if cds.last_outcome is not _Outcome.ACK or eds.wildcard:
            # After a NACK we cannot tell which clusters Envoy took; do not wait for them.
            return True
        target = self._target(ENDPOINT_TYPE)
        key = (cds.acked_refs, target, eds.names_dropped)
        known = self._endpoints_subscribed
        if known is not None and known[0] is key[0] and known[1] is key[1] and known[2] == key[2]:
            return True
        subscribed = all(name in eds.names for name in cds.acked_refs if name in target)
        self._endpoints_subscribed = key if subscribed else None
        return subscribed

    def _maybe_finish_transition(self) -> None:
        """Drop the retained clusters once nothing Envoy holds can still route to them."""
        if not any(self.retained.values()):
            return
        # Listeners Envoy refused and never had (a port it cannot bind) route nowhere: with all
        # the others current, nothing Envoy holds can reach the stale clusters either.
        refused = self._refused_listeners()
        if refused & self.types[LISTENER_TYPE].in_effect.keys():
            refused = frozenset()
        listeners_current = self._synced(LISTENER_TYPE) or bool(refused)
        if (
            listeners_current
            and self._synced(SCOPED_ROUTE_TYPE)
            and self._synced(ROUTE_TYPE, refused)
        ):
            for type_url, retained in self.retained.items():
                if retained:
                    log.debug(
                        "Envoy %s: removing %d stale %s resource(s)",
                        self.node,
                        len(retained),
                        SHORT_TYPE_NAMES[type_url],
                    )
                self.types[type_url].touch(retained.keys())
                retained.clear()

    def responses(self) -> list[Any]:
        """Decide and record the responses to send now, in make-before-break order."""
        if self.snapshot is None:
            return []
        self._maybe_finish_transition()
        out = []
        idle: dict[str, bool] = {}  # nothing in flight and nothing left to send
        for type_url in TYPE_ORDER:
            if not all(idle[gate] for gate in _GATES.get(type_url, ())):
                idle[type_url] = False
                continue
            plan = self._plan_delta(type_url) if self.delta else self._plan(type_url)
            if plan is not None:
                out.append(self._respond(type_url, *plan))
            idle[type_url] = plan is None and not self.types[type_url].pending
            if type_url == ENDPOINT_TYPE:
                idle[type_url] = idle[type_url] and self._cluster_endpoints_subscribed()
        return out

    def _respond(
        self,
        type_url: str,
        version: str,
        resources: list[_Resource],
        removed: list[str] | None = None,
    ) -> Any:
        st = self.types[type_url]
        st.nonce = secrets.token_hex(8)
        st.pending = True
        st.sent_at = time.monotonic()
        st.inflight = {res.name: res for res in resources}
        st.inflight_removed = tuple(removed or ())
        st.inflight_version = version
        if type_url == CLUSTER_TYPE:
            eds = self.types[ENDPOINT_TYPE]
            for res in resources:
                old = st.sent.get(res.name)
                if old is None or old.digest != res.digest:
                    eds.forced.update(res.refs)
        if type_url in FULL_STATE_TYPES and not self.delta:
            st.sent = dict(st.inflight)
        else:
            st.sent.update(st.inflight)
            st.forced.difference_update(st.inflight)
            for name in st.inflight_removed:
                del st.sent[name]
        st.sent_version = version
        log.debug(
            "Envoy %s: sending %s version %s (%d resource(s), %d removed, nonce %s)",
            self.node,
            SHORT_TYPE_NAMES[type_url],
            version,
            len(resources),
            len(st.inflight_removed),
            st.nonce,
        )
        if self.delta:
            return discovery_pb2.DeltaDiscoveryResponse(
                system_version_info=version,
                resources=[
                    discovery_pb2.Resource(name=res.name, version=res.digest, resource=res.packed())
                    for res in resources
                ],
                type_url=type_url,
                removed_resources=st.inflight_removed,
                nonce=st.nonce,
                control_plane=base_pb2.ControlPlane(identifier="turnout"),
            )
        return discovery_pb2.DiscoveryResponse(
            version_info=version,
            resources=[res.packed() for res in resources],
            type_url=type_url,
            nonce=st.nonce,
            control_plane=base_pb2.ControlPlane(identifier="turnout"),
        )

    def nacks(self) -> list[Nack]:
        return [st.nack for st in self.types.values() if st.nack is not None]


# ---------------------------------------------------------------------------------------------
# The server


class XdsServer:
    """A State-of-the-World ADS server for a fleet of Envoys that all get the same snapshot.

    Call `set_resources`, `readiness` and the other methods from the event loop's thread.

    `on_state_change` is called (in the event loop's thread, synchronously) whenever what
    `listener_state` and `readiness` answer may have changed: an Envoy ACKed or NACKed, connected
    or went away, or a new snapshot was installed. By the time `wait_acked` returns, it has run.
    """

    def __init__(
        self,
        metrics: Metrics | None = None,
        *,
        on_state_change: Callable[[], None] | None = None,
        inline_scopes: bool = False,
    ) -> None:
        # True: Delta streams take the scopes with their route configurations inline
        # (`_InlineScopes`, `--xds-inline-scopes`); False: naming them, as SotW streams do.
        self.inline_scopes = inline_scopes
        self._metrics = metrics
        self._on_state_change = on_state_change
        self._snapshot: _Snapshot | None = None
        # The tuples of the last snapshot built but not installed (the same content as the
        # installed one): a patch of them is a patch of it (`_Snapshot.build`).
        self._equal_sources: Mapping[str, tuple[Any, ...]] | None = None
        self._seq = 0
        self._versions: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._streams: dict[int, _Stream] = {}
        self._next_stream_id = 0
        self._nacks: collections.deque[Nack] = collections.deque(maxlen=_NACK_HISTORY)
        self._progress = asyncio.Event()
        self._server: Any = None
        # The current snapshot was restored from an earlier run's saved resources: the next one
        # is installed even with the same content, so the messages behind it are kept.
        self._restored = False

    # -- lifecycle --------------------------------------------------------------------------

    async def start(
        self, address: str, port: int, *, credentials: grpc.ServerCredentials | None = None
    ) -> int:
        """Listen on address:port (0 picks a free port) and return the bound port; with
        `credentials` (`envoy.xds_tls.server_credentials`) over TLS only."""
        if self._server is not None:
            raise RuntimeError("XdsServer already started")
        server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                # Notice Envoys that vanished without closing the connection, so `connected()`
                # and readiness do not count them.
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.keepalive_timeout_ms", 10_000),
                # Accept the keepalive pings the bootstrap configures on idle ADS streams.
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
        )
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(_AdsServicer(self), server)
        host = f"[{address}]" if ":" in address and not address.startswith("[") else address
        if credentials is None:
            bound = server.add_insecure_port(f"{host}:{port}")
        else:
            bound = server.add_secure_port(f"{host}:{port}", credentials)
        if bound == 0:
            raise OSError(f"xDS server could not bind {host}:{port}")
        await server.start()
        self._server = server
        log.info(
            "xDS server listening on %s:%d%s", host, bound, "" if credentials is None else " (mTLS)"
        )
        return int(bound)

    async def stop(self, grace: float = 0.5) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop(grace)
        self._streams.clear()
        self._update_connected()
        self._notify()

    # -- snapshot ---------------------------------------------------------------------------

    def set_resources(self, resources: EnvoyResources) -> str:
        """Install a new snapshot and return its version. Identical content keeps the version and
        wakes nobody, so nothing is pushed."""
        candidate = _Snapshot.build(
            self._seq + 1, resources, self._snapshot, self._equal_sources, self.inline_scopes
        )
        current = self._snapshot
        if current is not None and candidate.version == current.version and not self._restored:
            self._equal_sources = candidate.sources
            return current.version
        return self._install(candidate)

    def restore(self, saved: Iterable[Serialized], version: str) -> None:
        """Installs resources an earlier run saved (`served`) before anything was compiled; the
        first `set_resources` replaces them (identical content: nothing is sent). ValueError,
        nothing installed, when they do not make a snapshot of `version`."""
        snapshot = _Snapshot.restored(self._seq + 1, saved, self.inline_scopes)
        if snapshot.version != version:
            raise ValueError(f"the resources make version {snapshot.version}, not {version}")
        self._install(snapshot)
        self._restored = True

    def served(self) -> tuple[Serialized, ...]:
        """The current snapshot's resources as plain data (what `restore` takes)."""
        snapshot = self._snapshot
        if snapshot is None:
            return ()
        return tuple(
            Serialized(t, r.name, r.data, r.refs, r.secret_refs)
            for t in TYPE_ORDER
            for r in snapshot.resources[t].values()
        )

    def _install(self, candidate: _Snapshot) -> str:
        self._equal_sources = None
        self._restored = False
        self._seq += 1
        self._snapshot = candidate
        self._versions[candidate.version] = candidate.seq
        self._versions.move_to_end(candidate.version)
        while len(self._versions) > 256:
            self._versions.popitem(last=False)
        log.info(
            "xDS snapshot %s: %s",
            candidate.version,
            ", ".join(
                f"{len(candidate.resources[t])} {SHORT_TYPE_NAMES[t]}(s)" for t in TYPE_ORDER
            ),
        )
        for stream in self._streams.values():
            stream.queue.put_nowait(_WAKE)
        self._notify()
        return candidate.version

    @property
    def version(self) -> str | None:
        return None if self._snapshot is None else self._snapshot.version

    # -- observation ------------------------------------------------------------------------

    def connected(self) -> int:
        return len(self._streams)

    def nacks(self) -> list[Nack]:
        """Recent NACKs from every stream, oldest first."""
        return list(self._nacks)

    def readiness(self, reported: frozenset[str] = frozenset()) -> tuple[bool, str]:
        """(True, ...) when at least one Envoy is connected and every connected Envoy has
        acknowledged the current snapshot; otherwise (False, the first reason why not).

        `reported`: listeners whose rejection the caller reports on the object that declared
        them (a Gateway's port). Envoy rejecting only such listeners, by name, while it has
        everything else of the snapshot in effect, still counts as ready: one tenant's
        unbindable port must not make the whole control plane unready."""
        if self._snapshot is None:
            return False, "no configuration has been built yet"
        if not self._streams:
            return False, "no Envoy is connected"
        excused = {s.id: s.excused_listeners(reported) for s in self._streams.values()}
        for stream in self._streams.values():
            for nack in stream.nacks():
                if nack.type_url == LISTENER_TYPE and excused[stream.id]:
                    continue
                return False, nack.describe()
        for stream in self._streams.values():
            if not stream.fully_synced(excused[stream.id]):
                return False, stream.first_unsynced(excused[stream.id])
        nodes = ", ".join(sorted(s.node for s in self._streams.values()))
        reason = f"Envoy {nodes} acknowledged version {self._snapshot.version}"
        rejected = sorted(set().union(*excused.values()))
        if rejected:
            reason += (
                f" except listener(s) {', '.join(rejected)}, whose rejection is reported on the"
                " objects that declare them"
            )
        return True, reason

    def refused_resources(self) -> tuple[RefusedResource, ...]:
        """The resources of the current configuration some connected Envoy refused (their
        current content), each once, sorted: what the controller reports on the objects that
        wrote them."""
        snapshot = self._snapshot
        if snapshot is None:
            return ()
        found: dict[tuple[str, str], RefusedResource] = {}
        for stream in sorted(self._streams.values(), key=lambda s: s.id):
            for type_url, st in stream.types.items():
                current = stream.current(type_url, snapshot)
                for name, (digest, message) in st.refused.items():
                    res = current.get(name)
                    if res is not None and res.digest == digest:
                        key = (SHORT_TYPE_NAMES[type_url], name)
                        found.setdefault(key, RefusedResource(*key, stream.node, message))
        return tuple(found[k] for k in sorted(found))

    def listener_state(self, name: str) -> ListenerState:
        """Whether the current content of Envoy listener `name`, and of the route
        configurations and secrets it loads, is in effect on every connected Envoy (at least
        one). Other resources do not matter: a change elsewhere (an endpoint, another
        listener) or another resource's rejection leaves this listener's state alone."""
        snapshot = self._snapshot
        if snapshot is None:
            return ListenerState(None, "no configuration has been built yet")
        listener = snapshot.resources[LISTENER_TYPE].get(name)
        if listener is None:
            return self._absent_listener_state(name, set(snapshot.resources[LISTENER_TYPE]))
        if not self._streams:
            return ListenerState(None, "no Envoy is connected")
        needed = [(LISTENER_TYPE, listener)]
        for child_type in (ROUTE_TYPE, SECRET_TYPE):
            available = snapshot.resources[child_type]
            needed.extend(
                (child_type, available[ref])
                for ref in listener.refs_of(child_type)
                if ref in available
            )
        waiting: str | None = None
        for stream in sorted(self._streams.values(), key=lambda s: s.id):
            for type_url, res in needed:
                st = stream.types[type_url]
                refused = st.refused.get(res.name)
                if refused is not None and refused[0] == res.digest:
                    return ListenerState(
                        False,
                        f"Envoy {stream.node} rejected {SHORT_TYPE_NAMES[type_url]} "
                        f"{res.name}: {refused[1]}",
                    )
                if waiting is None and st.in_effect.get(res.name) != res.digest:
                    waiting = (
                        f"waiting for Envoy {stream.node} to acknowledge "
                        f"{SHORT_TYPE_NAMES[type_url]} {res.name}"
                    )
        if waiting is not None:
            return ListenerState(None, waiting)
        nodes = ", ".join(sorted(s.node for s in self._streams.values()))
        return ListenerState(True, f"Envoy {nodes} acknowledged listener {name}")

    def _absent_listener_state(self, name: str, current: set[str]) -> ListenerState:
        """For a listener the configuration does not hold: True once every connected Envoy (at
        least one) has answered the current listener set and has no listener `name` in effect,
        i.e. its port is closed everywhere (a Gateway listener with nothing to serve yet)."""
        if not self._streams:
            return ListenerState(None, "no Envoy is connected", False)
        for stream in sorted(self._streams.values(), key=lambda s: s.id):
            st = stream.types[LISTENER_TYPE]
            answered = st.last_outcome is not None and not st.pending
            held = st.sent if st.delta else st.inflight
            if not answered or set(held) != current or name in st.in_effect:
                return ListenerState(
                    None,
                    f"waiting for Envoy {stream.node} to acknowledge the listeners without {name}",
                    False,
                )
        nodes = ", ".join(sorted(s.node for s in self._streams.values()))
        return ListenerState(True, f"Envoy {nodes} has no listener {name}", False)

    async def wait_acked(self, version: str, timeout: float) -> bool:
        """Wait until every connected Envoy (at least one) has acknowledged `version` or a later
        snapshot. False on timeout."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            event = self._progress
            if self._acked(version):
                return True
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self._acked(version)

    def acked(self, version: str) -> bool:
        """Has every connected Envoy (at least one) acknowledged `version` or a later snapshot?"""
        return self._acked(version)

    def _acked(self, version: str) -> bool:
        seq = self._versions.get(version)
        if seq is None or not self._streams:
            return False
        return all(stream.synced_seq >= seq for stream in self._streams.values())

    # -- stream plumbing --------------------------------------------------------------------

    async def _serve_stream(
        self, request_iterator: AsyncIterator[Any], context: Any, *, delta: bool = False
    ) -> AsyncGenerator[Any, None]:
        self._next_stream_id += 1
        stream = _Stream(self, self._next_stream_id, str(context.peer()), delta)
        stream.switch_snapshot(self._snapshot)
        reader = asyncio.create_task(
            self._read_requests(request_iterator, stream.queue),
            name=f"xds-reader-{stream.id}",
        )
        self._streams[stream.id] = stream
        self._update_connected()
        log.info(
            "ADS stream %d (%s) opened from %s",
            stream.id,
            "delta" if delta else "state of the world",
            stream.peer,
        )
        try:
            while True:
                items = [await stream.queue.get()]
                while not stream.queue.empty():
                    items.append(stream.queue.get_nowait())
                for item in items:
                    if item is _END:
                        return
                    if item is _WAKE:
                        stream.switch_snapshot(self._snapshot)
                    else:
                        stream.on_request(item)
                for response in stream.responses():
                    self._count("push", response.type_url)
                    yield response
                if stream.fully_synced() and stream.snapshot is not None:
                    stream.synced_seq = stream.snapshot.seq
                self._notify()
        finally:
            reader.cancel()
            self._streams.pop(stream.id, None)
            self._update_connected()
            self._notify()
            log.info("ADS stream %d from Envoy %s closed", stream.id, stream.node)

    @staticmethod
    async def _read_requests(
        request_iterator: AsyncIterator[Any], queue: asyncio.Queue[Any]
    ) -> None:
        try:
            async for request in request_iterator:
                queue.put_nowait(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the peer went away mid-message; the stream just ends
            log.debug("ADS stream read ended: %r", exc)
        finally:
            queue.put_nowait(_END)

    def _notify(self) -> None:
        if self._on_state_change is not None:
            try:
                self._on_state_change()
            except Exception:
                # A consumer's bug must not break the ADS streams that called this.
                log.exception("xDS state change callback failed")
        # Waiters hold the old event; a fresh one is armed for the next change.
        self._progress.set()
        self._progress = asyncio.Event()

    def _update_connected(self) -> None:
        if self._metrics is not None:
            self._metrics.connected_envoys.set(len(self._streams))

    def _record_nack(self, nack: Nack) -> None:
        self._nacks.append(nack)
        self._count("nack", nack.type_url)

    def _observe_apply(self, type_url: str, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.xds_apply_seconds.labels(
                type=SHORT_TYPE_NAMES.get(type_url, type_url)
            ).observe(seconds)

    def _count(self, event: Literal["push", "ack", "nack"], type_url: str) -> None:
        if self._metrics is None:
            return
        counter = {
            "push": self._metrics.xds_pushes,
            "ack": self._metrics.xds_acks,
            "nack": self._metrics.xds_nacks,
        }[event]
        counter.labels(type=SHORT_TYPE_NAMES.get(type_url, type_url)).inc()


class _AdsServicer:
    """The gRPC service object; `add_AggregatedDiscoveryServiceServicer_to_server` looks the two
    methods up by name."""

    def __init__(self, server: XdsServer) -> None:
        self._server = server

    # grpc.aio picks the streaming style with inspect.isasyncgenfunction, so this must itself be
    # an async generator rather than a function returning one.
    async def StreamAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        async with contextlib.aclosing(
            self._server._serve_stream(request_iterator, context)
        ) as responses:
            async for response in responses:
                yield response

    async def DeltaAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        async with contextlib.aclosing(
            self._server._serve_stream(request_iterator, context, delta=True)
        ) as responses:
            async for response in responses:
                yield response

"""A translation that patches the one before instead of walking every piece.

The graph stages hand `translate` the very same Listener, VirtualHost, Cluster and TLS secret
objects, in the same order, for what did not change. `LastTranslation` keeps what the last
translation was made of and made (per xDS type a `TypeBook`: the messages by name, the names
sorted, the tuple handed out); `patch_translation` finds the replaced pieces with one
C-speed identity pass per tuple, translates only those and patches the books, so a one-host
change among 10,000 costs that host. The result is byte-identical to a full translation
(`tests/unit/test_translate_memo.py`, `tests/unit/test_translate_patch.py`).

Only the common change is patched: the same options and CA bundles, the same listeners but for
the virtual hosts of scoped listeners (`scoped_routes`) or of a plain HTTP listener (its one
table translated again from the memo: a big host costs its changed routes), and any change of
clusters and TLS secrets. Anything else (a host with client validation or JWT providers
changed, a scope key two hosts share, a host that stops a listener from being scoped, a name
clash) gives up
(`Unpatchable`) and `translate` translates everything, which records the books afresh.

Every patched type also goes to the xDS server as the names it changed
(`EnvoyResources.changes`), so the server does not diff every resource either.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from turnout.compile_inputs import ListenerProtocol
from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    SECRET_TYPE,
    EnvoyResources,
)
from turnout.envoy.translate.http_filters import host_jwts
from turnout.envoy.translate.listeners import ListenerResources, translate_listener
from turnout.envoy.translate.memo import TranslateMemo
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.pieces import cluster_resources, secret_message
from turnout.envoy.translate.scoped_routes import (
    host_scopes,
    scoped_route_name,
    uses_scoped_routes,
)
from turnout.graph.memo import IdentityMemo
from turnout.graph.model import (
    Cluster,
    Listener,
    RoutingGraph,
    TLSSecret,
    VirtualHost,
)

__all__ = [
    "LastTranslation",
    "ScopedBook",
    "TypeBook",
    "Unpatchable",
    "patch_translation",
    "record_translation",
    "replaced",
]

T = TypeVar("T")

# Beyond this many replaced positions an insertion shifted the tuple: compare by identity sets.
_POSITIONAL_LIMIT = 64


class Unpatchable(Exception):
    """The change is not one a patch handles: translate everything."""


def replaced(old: Sequence[T], new: Sequence[T]) -> tuple[list[T], list[T]]:
    """The items of `old` that are not in `new` and those of `new` not in `old`, by identity.
    Position by position when the lengths agree (the usual change replaces pieces in place),
    else by identity sets; C-speed passes either way."""
    if old is new or (len(old) == len(new) and old == new):
        # Tuples compare by identity first: where every piece is the very same object, this is
        # a pass in C; an equal but new piece translates to the same bytes.
        return [], []
    if len(old) == len(new):
        positions = list(itertools.compress(range(len(new)), map(operator.is_not, old, new)))
        if len(positions) <= _POSITIONAL_LIMIT:
            removed = [old[i] for i in positions]
            added = [new[i] for i in positions]
            kept = {id(x) for x in removed} & {id(x) for x in added}
            return [x for x in removed if id(x) not in kept], [
                x for x in added if id(x) not in kept
            ]
    old_ids = dict(zip(map(id, old), old, strict=True))
    new_ids = dict(zip(map(id, new), new, strict=True))
    if len(old_ids) != len(old) or len(new_ids) != len(new):
        raise Unpatchable("a piece occurs twice")
    return [old_ids[i] for i in old_ids.keys() - new_ids.keys()], [
        new_ids[i] for i in new_ids.keys() - old_ids.keys()
    ]


@dataclass(slots=True)
class TypeBook:
    """One xDS type's messages by name, the names sorted with their messages at the same
    positions, the tuple last handed out, and what a patch did: the names it changed ({name:
    message, or None: gone}) and the messages it dropped."""

    by_name: dict[str, Any]
    names: list[str]
    messages: list[Any]
    out: tuple[Any, ...]
    changed: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def of(messages: tuple[Any, ...], name: Any) -> TypeBook:
        names = [name(m) for m in messages]
        if names != sorted(set(names)):
            raise Unpatchable("names repeat")
        return TypeBook(dict(zip(names, messages, strict=True)), names, list(messages), messages)

    def drop(self, name: str) -> None:
        self.dropped.setdefault(name, self.by_name.pop(name))
        i = bisect.bisect_left(self.names, name)
        del self.names[i], self.messages[i]
        self.changed[name] = None

    def put(self, name: str, message: Any) -> None:
        """Adds `name` (a name some other piece holds is a clash: see the module docstring)."""
        if name in self.by_name:
            raise Unpatchable(f"{name!r} is held twice")
        i = bisect.bisect_left(self.names, name)
        self.names.insert(i, name)
        self.messages.insert(i, message)
        self.by_name[name] = message
        if self.dropped.get(name) is message:
            del self.changed[name]  # put back as it was
        else:
            self.changed[name] = message

    def finish(self) -> tuple[Any, ...]:
        """The patched tuple (the very same one when nothing changed)."""
        if self.changed:
            self.out = tuple(self.messages)
        return self.out


@dataclass(slots=True)
class ScopedBook:
    """A scoped listener's hosts per scope key (how many hosts hold each key), the names of the
    tables of each split host (by its key: `split_host`), and how many of its hosts have
    enough routes to be split (`scoped_routes.splits_hosts`)."""

    key_count: dict[str, int]
    split_names: dict[str, tuple[str, ...]]
    big: int


@dataclass(slots=True)
class LastTranslation:
    """What the last translation was made of and made; see the module docstring."""

    graph: RoutingGraph
    books: dict[str, TypeBook]
    scoped: dict[str, ScopedBook]  # by listener name
    clusters: dict[str, tuple[Any, Any] | None]  # by graph cluster name: (Cluster, CLA)
    secrets: dict[str, Any]  # by graph secret name: the Secret (None: left out)
    resources: EnvoyResources


def _message_name(message: Any) -> str:
    return str(message.name)


def _cla_name(message: Any) -> str:
    return str(message.cluster_name)


_BOOK_FIELDS = {
    CLUSTER_TYPE: ("clusters", _message_name),
    ENDPOINT_TYPE: ("endpoints", _cla_name),
    LISTENER_TYPE: ("listeners", _message_name),
    ROUTE_TYPE: ("routes", _message_name),
    SECRET_TYPE: ("secrets", _message_name),
    SCOPED_ROUTE_TYPE: ("scoped_routes", _message_name),
}


def record_translation(
    graph: RoutingGraph,
    resources: EnvoyResources,
    outputs: Mapping[str, ListenerResources | None],
    memo: TranslateMemo,
) -> None:
    """Keeps what a full translation of `graph` (every listener's output in `outputs`, each
    cluster and secret in `memo`) made, for the next translation to patch."""
    memo.last = None
    try:
        books = {
            type_url: TypeBook.of(getattr(resources, attr), name)
            for type_url, (attr, name) in _BOOK_FIELDS.items()
        }
    except Unpatchable:
        return
    scoped = {}
    for lst in graph.listeners:
        out = outputs.get(lst.name)
        if out is not None and out.scoped_routes:
            scoped[lst.name] = _scoped_book(lst, out, memo)
    clusters = _kept_by_name(graph.clusters, memo.clusters)
    secrets = _kept_by_name(graph.secrets, memo.secrets)
    if clusters is None or secrets is None:
        return
    if len(clusters) != len(graph.clusters) or len(secrets) != len(graph.secrets):
        return
    memo.last = LastTranslation(graph, books, scoped, clusters, secrets, resources)


def _scoped_book(lst: Listener, out: ListenerResources, memo: TranslateMemo) -> ScopedBook:
    names: dict[str, list[str]] = {}
    start = len(lst.name) + 1
    for scope in out.scoped_routes:
        # `<listener>/<host>`, or a split host's `<listener>/<host>#<generation>/<path>`.
        key = str(scope.name)[start:].partition("/")[0].partition("#")[0]
        names.setdefault(key, []).append(str(scope.name))
    split = _split_min(memo)
    return ScopedBook(
        dict(Counter(vh.hostname.lower() for vh in lst.virtual_hosts)),
        {key: tuple(held) for key, held in names.items() if len(held) > 1},
        sum(1 for vh in lst.virtual_hosts if 0 < split <= len(vh.routes)),
    )


def _split_min(memo: TranslateMemo) -> int:
    return memo.options.split_host_min_routes if memo.options is not None else 0


_Piece = TypeVar("_Piece", Cluster, TLSSecret)


def _kept_by_name(
    pieces: Sequence[_Piece], kept: IdentityMemo[_Piece, Any]
) -> dict[str, Any] | None:
    """What the memo kept for each piece, by the piece's name; None when one is missing."""
    out: dict[str, Any] = {}
    for piece in pieces:
        known = kept.get(piece)
        if known is None:
            return None
        out[str(piece.name)] = known[0]
    return out


def patch_translation(
    graph: RoutingGraph, options: TranslateOptions, memo: TranslateMemo
) -> EnvoyResources | None:
    """The translation of `graph` patched from the last one, or None when it cannot be (see the
    module docstring); the caller then translates everything."""
    last, opts = memo.last, memo.options
    if last is None or opts is None:
        return None
    if dataclasses.replace(options, jwt_providers=opts.jwt_providers) != opts:
        return None
    old = last.graph
    if graph.ca_bundles is not old.ca_bundles and graph.ca_bundles != old.ca_bundles:
        return None
    if len(graph.listeners) != len(old.listeners):
        return None
    memo.last = None  # until the patch is whole
    try:
        for before, after in zip(old.listeners, graph.listeners, strict=True):
            if before is after:
                continue
            if before.name in last.scoped:
                _patch_scoped(before, after, last, opts, memo)
            else:
                _patch_plain(before, after, last, opts, memo)
        _patch_clusters(old.clusters, graph.clusters, last, opts, memo)
        _patch_secrets(old.secrets, graph.secrets, last, memo)
    except Unpatchable:
        return None
    resources = _assemble(last, memo)
    last.graph, last.resources = graph, resources
    memo.last = last
    return resources


def _patch_scoped(
    old: Listener,
    new: Listener,
    last: LastTranslation,
    opts: TranslateOptions,
    memo: TranslateMemo,
) -> None:
    """A scoped listener whose hosts changed: the scopes and tables of the changed keys."""
    book = last.scoped.get(old.name)
    if (
        book is None
        or (new.name, new.address, new.port, new.protocol)
        != (old.name, old.address, old.port, old.protocol)
        or (new.tcp_proxies is not old.tcp_proxies and new.tcp_proxies != old.tcp_proxies)
    ):
        raise Unpatchable("not a scoped listener's hosts")
    removed, added = replaced(old.virtual_hosts, new.virtual_hosts)
    split = opts.split_host_min_routes
    big = book.big + sum(0 < split <= len(vh.routes) for vh in added)
    big -= sum(0 < split <= len(vh.routes) for vh in removed)
    if not (0 < opts.scoped_routes_min_hosts <= len(new.virtual_hosts) or big):
        raise Unpatchable("the listener is no longer scoped")
    counts = book.key_count
    touched = {vh.hostname.lower() for vh in (*removed, *added)}
    after = {key: counts.get(key, 0) for key in touched}
    for vh in removed:
        after[vh.hostname.lower()] -= 1
    holder = {}
    for vh in added:
        key = vh.hostname.lower()
        after[key] += 1
        holder[key] = vh
    if any(counts.get(k, 0) > 1 or n > 1 for k, n in after.items()):
        raise Unpatchable("hosts share a scope key")  # the first of them holds it: walk
    _patch_keys(new.name, holder, after, book, last, opts, memo)
    # After: a split host's translation notes its JWT providers from its routes' pieces.
    for vh in (*removed, *added):
        _check_host(vh, memo)
    book.big = big
    for key, n in after.items():
        if n:
            counts[key] = n
        else:
            counts.pop(key, None)
    for vh in removed:
        memo.scoped_hosts.discard(vh)
        memo.jwts.discard(vh)
    memo.listeners.discard(old)


def _patch_plain(
    old: Listener,
    new: Listener,
    last: LastTranslation,
    opts: TranslateOptions,
    memo: TranslateMemo,
) -> None:
    """A plain HTTP listener (one table holding every host) whose hosts changed: its table is
    translated again, each unchanged host (and each unchanged route of a big host) kept in the
    memo; the listener message stays the very same when its bytes do."""
    if (
        new.protocol is not ListenerProtocol.HTTP
        or (new.name, new.address, new.port, new.protocol)
        != (old.name, old.address, old.port, old.protocol)
        or (new.tcp_proxies is not old.tcp_proxies and new.tcp_proxies != old.tcp_proxies)
        or uses_scoped_routes(new, opts)
    ):
        raise Unpatchable("not a plain listener's hosts")
    removed, added = replaced(old.virtual_hosts, new.virtual_hosts)
    try:
        # First: translating a big host notes its JWT providers from its routes' pieces.
        out = translate_listener(new, opts, memo)
    except Exception as err:
        raise Unpatchable("the listener does not translate alone") from err
    for vh in (*removed, *added):
        _check_plain_host(vh, memo)
    listeners, routes = last.books[LISTENER_TYPE], last.books[ROUTE_TYPE]
    before = listeners.by_name.get(new.name)
    if out is None or before is None or len(out.route_configurations) != 1:
        raise Unpatchable("not one listener with one table")
    listener, table = out.listener, out.route_configurations[0]
    if listener.SerializeToString(deterministic=True) != before.SerializeToString(
        deterministic=True
    ):
        listeners.drop(new.name)
        listeners.put(new.name, listener)
    else:
        listener = before
    name = str(table.name)
    if name in routes.by_name:
        memo.encoded.discard(routes.by_name[name])
        routes.drop(name)
    routes.put(name, table)
    for vh in removed:
        memo.hosts.discard(vh)
        memo.jwts.discard(vh)
    memo.listeners.discard(old)
    memo.listeners.put(new, (ListenerResources(listener, (table,)),))


def _check_plain_host(vh: VirtualHost, memo: TranslateMemo) -> None:
    """A host a plain listener's patch may add or drop: no client validation, no JWT
    provider (see `_check_host`)."""
    if vh.tls is not None and vh.tls.client_validation is not None:
        raise Unpatchable("a host with client validation")
    jwts = memo.jwts.get(vh)
    if jwts is None:
        jwts = memo.jwts.put(vh, host_jwts(vh))
    if jwts:
        raise Unpatchable("a host with JWT providers")


def _check_host(vh: VirtualHost, memo: TranslateMemo) -> None:
    """A host a patch may add or drop: no wildcard (the listener would not be scoped), no client
    validation (its Secret and `without_unvalidatable`), no JWT provider (the options)."""
    if "*" in vh.hostname or (vh.tls is not None and vh.tls.client_validation is not None):
        raise Unpatchable("a host of another kind")
    jwts = memo.jwts.get(vh)
    if jwts is None:
        jwts = memo.jwts.put(vh, host_jwts(vh))
    if jwts:
        raise Unpatchable("a host with JWT providers")


def _patch_keys(
    listener: str,
    holder: Mapping[str, VirtualHost],
    after: Mapping[str, int],
    book: ScopedBook,
    last: LastTranslation,
    opts: TranslateOptions,
    memo: TranslateMemo,
) -> None:
    """The tables and scopes of the keys `after` counts the hosts of, made again for the hosts
    `holder` names: each name the key held before is dropped and each it holds now put back,
    so a table or scope that is the very same message as before is no change."""
    routes, scopes = last.books[ROUTE_TYPE], last.books[SCOPED_ROUTE_TYPE]
    for key, n in after.items():
        name = scoped_route_name(listener, key)
        held = book.split_names.pop(key, (name,) if name in scopes.by_name else ())
        pairs: tuple[tuple[Any, Any], ...] = ()
        if n:
            found = host_scopes(listener, key, holder[key], opts, memo)
            if found is None:
                raise Unpatchable("a table names the scope key header")
            pairs = found
        for old in held:
            routes.drop(old)
            scopes.drop(old)
        for config, scope in pairs:
            new_name = str(config.name)
            routes.put(new_name, config)
            # A scope is a function of its name and key: the one Envoy has stays.
            scopes.put(new_name, scopes.dropped.get(new_name, scope))
        if len(pairs) > 1:
            book.split_names[key] = tuple(str(p[0].name) for p in pairs)


def _patch_clusters(
    old: tuple[Cluster, ...],
    new: tuple[Cluster, ...],
    last: LastTranslation,
    opts: TranslateOptions,
    memo: TranslateMemo,
) -> None:
    removed, added = replaced(old, new)
    if not removed and not added:
        return
    clusters, endpoints = last.books[CLUSTER_TYPE], last.books[ENDPOINT_TYPE]
    for cluster in removed:
        pair = last.clusters.pop(str(cluster.name))
        memo.clusters.discard(cluster)
        if pair is not None:
            clusters.drop(_message_name(pair[0]))
            if pair[1] is not None:
                endpoints.drop(_cla_name(pair[1]))
    bundles = {b.name: b for b in last.graph.ca_bundles}
    for cluster in added:
        known = memo.clusters.get(cluster)
        if known is None:
            known = memo.clusters.put(cluster, (cluster_resources(cluster, opts, bundles),))
        pair = known[0]
        if str(cluster.name) in last.clusters:
            raise Unpatchable("a cluster name twice")
        last.clusters[str(cluster.name)] = pair
        if pair is not None:
            clusters.put(_message_name(pair[0]), pair[0])
            if pair[1] is not None:
                endpoints.put(_cla_name(pair[1]), pair[1])


def _patch_secrets(
    old: tuple[TLSSecret, ...],
    new: tuple[TLSSecret, ...],
    last: LastTranslation,
    memo: TranslateMemo,
) -> None:
    removed, added = replaced(old, new)
    secrets = last.books[SECRET_TYPE]
    for secret in removed:
        message = last.secrets.pop(str(secret.name))
        memo.secrets.discard(secret)
        if message is not None:
            secrets.drop(_message_name(message))
    for secret in added:
        message = secret_message(secret, memo)
        if str(secret.name) in last.secrets:
            raise Unpatchable("a secret name twice")
        last.secrets[str(secret.name)] = message
        if message is not None:
            secrets.put(_message_name(message), message)


def _assemble(last: LastTranslation, memo: TranslateMemo) -> EnvoyResources:
    """The patched resources, with each changed type's changes for the xDS server."""
    tuples: dict[str, tuple[Any, ...]] = {}
    changes: dict[str, tuple[tuple[Any, ...], Mapping[str, Any]]] = {}
    encoded = last.resources.encoded
    route_book = last.books[ROUTE_TYPE]
    dropped_routes = route_book.dropped
    if dropped_routes and encoded:
        # The tables of the patched hosts are not assembled from bytes: drop what they replaced
        # (a table put back as it was keeps its bytes).
        gone = {
            id(m) for name, m in dropped_routes.items() if route_book.by_name.get(name) is not m
        }
        encoded = {k: v for k, v in encoded.items() if k not in gone}
    fresh = [m for m in last.books[ROUTE_TYPE].changed.values() if m is not None]
    if fresh:
        # A plain listener's table is assembled from bytes: hand those on.
        encoded = {**encoded, **memo.encoded_of(tuple(fresh))}
    for type_url, book in last.books.items():
        base = book.out
        tuples[type_url] = book.finish()
        if book.changed:
            changes[type_url] = (base, book.changed)
        book.changed, book.dropped = {}, {}
    kwargs = {_BOOK_FIELDS[t][0]: v for t, v in tuples.items()}
    return EnvoyResources(**kwargs, encoded=encoded, changes=changes)

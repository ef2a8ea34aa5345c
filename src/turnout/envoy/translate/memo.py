"""What one translation keeps for the next, so that the next costs what its change touches.

`translate` is a pure function of (graph, options). The graph stages keep every unchanged piece
(Listener, VirtualHost, Cluster, TLS secret) the very same object from one compile to the next
(`graph.memo`), so each piece's Envoy messages are looked up by the piece's identity
(`IdentityMemo`) and only what is new is translated: a change to one host costs that host's
routes, not the other 10,000. A memo whose options differ from the translation's is emptied
first: every message depends on the options.

A virtual host is kept serialized as well (`HostPart.entry`): the RouteConfiguration holding
every host of a listener is assembled from those bytes rather than by copying thousands of
messages, and the xDS server is handed the assembled bytes (`EnvoyResources.encoded`) instead of
serializing the whole table again. Inside a big host (`HostRoutes`) each route's serialized
message is kept too, with its matcher-tree placement, and the host's tree per leaf
(`route_tree.TreeBook`): a change to one route of 50,000 translates that route and plans again
only the leaves under its path. `tests/unit/test_translate_memo.py` holds a carried memo to a
fresh translation, byte for byte.

`last` goes further: what the last translation was made of and made, per xDS type by name, so
that the next one patches it (`patch`) instead of looking every piece up here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.route_tree import TreeBook
from turnout.graph.memo import IdentityMemo
from turnout.graph.model import (
    Cluster,
    JwtValidation,
    Listener,
    Route,
    TLSSecret,
    VirtualHost,
)

__all__ = ["HostPart", "HostRoutes", "TLSGroupPart", "TranslateMemo"]


@dataclass(frozen=True, slots=True)
class HostPart:
    """One virtual host's share of a RouteConfiguration: the `virtual_hosts` entry on the wire
    (None: the host cannot be translated and is left out), the largest direct-response body
    its routes answer, and whether a route names the invalid backend."""

    entry: bytes | None
    max_body: int
    invalid_backend: bool


@dataclass(frozen=True, slots=True)
class HostRoutes:
    """A big virtual host's routes as last translated: each route's piece
    (`routes.route_pieces`), kept for the very same Route object in a host whose routes read
    the same host-level context (`authority`: the serialized wildcard authority matcher every
    route's match carries, or None)."""

    authority: bytes | None
    routes: tuple[Route, ...]
    pieces: list[tuple[Any, ...]]  # aligned with `routes`
    # The host's matcher tree, to patch (None: none kept).
    tree: TreeBook | None = None


@dataclass(frozen=True, slots=True)
class TLSGroupPart:
    """One TLS host's filter chain and RouteConfiguration on an HTTPS listener, with what else
    they were made of: the table's name, the stat prefix and the domains answered 421 (which
    depend on the listener's other hosts)."""

    name: str
    stat_prefix: str
    misdirected: tuple[str, ...]
    chain: Any  # envoy.config.listener.v3.FilterChain
    config: Any  # envoy.config.route.v3.RouteConfiguration


class TranslateMemo:
    """A translation's memory of the translation before; see the module docstring.

    Not thread-safe: one translation at a time (the controller serializes its compiles)."""

    def __init__(self) -> None:
        self._options: TranslateOptions | None = None
        self.hosts: IdentityMemo[VirtualHost, HostPart] = IdentityMemo()
        self.tls_groups: IdentityMemo[VirtualHost, TLSGroupPart] = IdentityMemo()
        # One table per host (`routes.host_route_configuration`): (its name, the message).
        self.host_tables: IdentityMemo[VirtualHost, tuple[str, Any]] = IdentityMemo()
        # Scoped routes (`scoped_routes`): (the host's table name, its (RouteConfiguration,
        # scope) pairs, one or a split host's several, or None when it cannot be a scope).
        self.scoped_hosts: IdentityMemo[
            VirtualHost, tuple[str, tuple[tuple[Any, Any], ...] | None]
        ] = IdentityMemo()
        # The scopes of split hosts (`split_host.SplitBook`) by (listener, scope key), so that a
        # change to some routes builds their scopes only. Two generations, like `host_routes`.
        self.split_books: dict[tuple[str, str], Any] = {}
        self.split_books_before: dict[tuple[str, str], Any] = {}
        # The routes of big hosts by (host name, hostname), kept per route: a change to one
        # route of 50,000 translates that route. Two generations, aged like the memos.
        self.host_routes: dict[tuple[str, str], HostRoutes] = {}
        self.host_routes_before: dict[tuple[str, str], HostRoutes] = {}
        # Values are 1-tuples: a piece that translates to nothing is remembered too.
        self.listeners: IdentityMemo[Listener, tuple[Any]] = IdentityMemo()
        self.clusters: IdentityMemo[Cluster, tuple[tuple[Any, Any] | None]] = IdentityMemo()
        self.secrets: IdentityMemo[TLSSecret, tuple[Any]] = IdentityMemo()
        # Options-independent: what the JWT filter's providers are made of.
        self.jwts: IdentityMemo[VirtualHost, frozenset[JwtValidation]] = IdentityMemo()
        # The serialized form of the messages assembled from bytes (route configurations).
        self.encoded: IdentityMemo[Any, bytes] = IdentityMemo()
        # What the last translation was made of and made, for the next to patch
        # (`translate.patch.LastTranslation`; None: translate everything).
        self.last: Any = None

    @property
    def options(self) -> TranslateOptions | None:
        """The options of the last translation (None before the first)."""
        return self._options

    def begin(self, options: TranslateOptions) -> None:
        """Starts a translation with `options` (the JWT providers included): a memo made under
        other options is emptied, else what the translation before did not use is aged out."""
        memos: tuple[IdentityMemo[Any, Any], ...] = (
            self.hosts,
            self.tls_groups,
            self.host_tables,
            self.scoped_hosts,
            self.listeners,
            self.clusters,
            self.secrets,
            self.encoded,
        )
        self.last = None  # a full translation records its own
        if options != self._options:
            self._options = options
            self.hosts, self.listeners = IdentityMemo(), IdentityMemo()
            self.tls_groups, self.host_tables = IdentityMemo(), IdentityMemo()
            self.scoped_hosts = IdentityMemo()
            self.clusters, self.secrets = IdentityMemo(), IdentityMemo()
            self.encoded = IdentityMemo()
            self.host_routes, self.host_routes_before = {}, {}
            self.split_books, self.split_books_before = {}, {}
        else:
            self.host_routes_before, self.host_routes = self.host_routes, {}
            self.split_books_before, self.split_books = self.split_books, {}
            for memo in memos:
                memo.age()

    def kept_routes(self, key: tuple[str, str]) -> HostRoutes | None:
        """The routes of the host `key` as last translated (kept for this translation too)."""
        known = self.host_routes.get(key)
        if known is None:
            known = self.host_routes_before.pop(key, None)
            if known is not None:
                self.host_routes[key] = known
        return known

    def kept_split(self, key: tuple[str, str]) -> Any:
        """The split host `key`'s book as last made (None: none), kept for this translation."""
        known = self.split_books.get(key)
        if known is None:
            known = self.split_books_before.pop(key, None)
            if known is not None:
                self.split_books[key] = known
        return known

    def note_encoded(self, message: Any, data: bytes) -> Any:
        """Records that `data` is `message` serialized (deterministically); returns `message`."""
        self.encoded.put(message, data)
        return message

    def encoded_of(self, messages: tuple[Any, ...]) -> dict[int, tuple[Any, bytes]]:
        """The recorded serializations of `messages`, by identity (see `EnvoyResources`)."""
        out = {}
        for message in messages:
            data = self.encoded.get(message)
            if data is not None:
                out[id(message)] = (message, data)
        return out

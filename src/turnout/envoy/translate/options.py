"""Knobs of the Envoy translation that do not come from the routing graph."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from turnout.compile_inputs import (
    DEFAULT_MATCHER_TREE_MIN_ROUTES,
    DEFAULT_PATH_NORMALIZATION,
    DEFAULT_SCOPED_ROUTES_MIN_HOSTS,
    DEFAULT_SPLIT_HOST_MIN_ROUTES,
    DEFAULT_SYSTEM_CA_FILE,
    PathNormalization,
    RateLimitService,
)

if TYPE_CHECKING:
    from turnout.graph.model import JwtValidation

# `xff_num_trusted_hops` is a uint32.
MAX_TRUSTED_HOPS = 2**32 - 1
DEFAULT_TRACING_SERVICE_NAME = "turnout"
DEFAULT_TRACING_SAMPLING_PERCENT = 100.0
# A path scope of a split host holds at most about this many routes (`path_scopes`).
DEFAULT_SPLIT_SCOPE_MAX_ROUTES = 1024
# A host is not split when the routes placed in several scopes add more than this share of its
# routes (`path_scopes`).
DEFAULT_SPLIT_MAX_EXTRA_SHARE = 0.25


class AccessLogFormat(StrEnum):
    """How an access log line is written (docs/observability.md lists the fields)."""

    TEXT = "text"  # Envoy's default format, one line per request or connection
    JSON = "json"  # one JSON object per line, with Contour's field names


@dataclass(frozen=True, slots=True)
class AccessLog:
    """Where Envoy writes its access log: `path` None is Envoy's stdout, anything else a file
    on Envoy's host (opened and appended to by Envoy)."""

    path: str | None = None
    format: AccessLogFormat = AccessLogFormat.JSON

    def __post_init__(self) -> None:
        if self.path is not None and not self.path:
            raise ValueError("an access log path must not be empty")


@dataclass(frozen=True, slots=True)
class Tracing:
    """OpenTelemetry tracing: spans exported over OTLP/gRPC to `collector_host`:`collector_port`
    as `service_name`, for `sampling_percent` of the requests without a sampling decision."""

    collector_host: str
    collector_port: int
    service_name: str = DEFAULT_TRACING_SERVICE_NAME
    sampling_percent: float = DEFAULT_TRACING_SAMPLING_PERCENT

    def __post_init__(self) -> None:
        if not self.collector_host:
            raise ValueError("a tracing collector needs a host")
        if not 0 < self.collector_port < 65536:
            raise ValueError(f"collector port must be in 1-65535, got {self.collector_port}")
        if not 0 <= self.sampling_percent <= 100:  # NaN fails the comparison too
            raise ValueError(f"sampling_percent must be in 0-100, got {self.sampling_percent}")
        if not self.service_name:
            raise ValueError("a tracing service name must not be empty")


@dataclass(frozen=True, slots=True)
class TranslateOptions:
    """Deployment-wide settings; the same graph and options always give the same resources.

    `connect_timeout_s`: upstream connect timeout of every cluster (Envoy's own default is 5 s,
    which is long for a failed pod).
    `stat_prefix`: prepended to the listener name to form the HTTP connection manager's stat
    prefix, so several turnout deployments can share one metrics backend.
    `access_log`: where every HTTP connection manager and TCP proxy writes its access log, and
    in which format; None: no access log (`serve` defaults to JSON on stdout, see `ServeConfig`).
    `tracing`: the OpenTelemetry collector every HTTP connection manager reports spans to (over
    a cluster of its own, `clusters.tracing_cluster`); None: no tracing.
    `num_trusted_hops`: how many proxies in front of Envoy are trusted to append to
    X-Forwarded-For (the HTTP connection manager's `xff_num_trusted_hops`); the client address
    that `Remote` IP filters see is the one they reported. 0: the peer address, whatever the
    client sends.
    `system_ca_file`: the PEM bundle on Envoy's host that stands for the system trust store:
    upstreams validated against it (BackendTLSPolicy `wellKnownCACertificates: System`) and https
    JWKS servers must chain to it. Envoy is given the file rather than its own notion of a system
    store, so that the installation decides which CAs that is. The default is Debian's and
    Ubuntu's system bundle.
    `paths`: how every HTTP connection manager rewrites paths beyond RFC 3986 normalisation
    (merge slashes, escaped slashes); the evaluator takes the same value.
    `rate_limit_service`: the global rate limit service every HTTP connection manager's
    ratelimit filter asks (over a cluster of its own, `clusters.rate_limit_cluster`); None: no
    ratelimit filter (the compile then lets no global policy into the graph).
    `matcher_tree_min_routes`: a virtual host with at least this many routes is translated to a
    matcher tree (`route_tree`), which finds a request's route without walking the list; 0:
    every host stays a list.
    `scoped_routes_min_hosts`: a plain HTTP listener with at least this many virtual hosts (and no
    wildcard one) gets one RouteConfiguration per host, chosen by a scope keyed on the Host
    (`scoped_routes`), so that a change to one host makes Envoy rebuild that host only; 0: every
    listener keeps one RouteConfiguration.
    `split_host_min_routes`: a virtual host with at least this many routes (none of its
    listener's hosts a wildcard) is split into scopes by a leading path directory, each with at
    most about `split_scope_max_routes` routes (`path_scopes`), so that a change to some of its
    routes makes Envoy rebuild their scopes only; its listener is scoped for it. 0: never. A
    host is not split when the routes placed in several scopes would add more than
    `split_max_extra_share` of its routes.
    `jwt_providers`: set by `translate` from the graph (`http_filters.jwt_providers`), not by
    callers: the JWT providers every HTTP connection manager carries.
    """

    connect_timeout_s: float = 2.0
    stat_prefix: str = ""
    access_log: AccessLog | None = None
    tracing: Tracing | None = None
    num_trusted_hops: int = 0
    system_ca_file: str = DEFAULT_SYSTEM_CA_FILE
    paths: PathNormalization = DEFAULT_PATH_NORMALIZATION
    rate_limit_service: RateLimitService | None = None
    matcher_tree_min_routes: int = DEFAULT_MATCHER_TREE_MIN_ROUTES
    scoped_routes_min_hosts: int = DEFAULT_SCOPED_ROUTES_MIN_HOSTS
    split_host_min_routes: int = DEFAULT_SPLIT_HOST_MIN_ROUTES
    split_scope_max_routes: int = DEFAULT_SPLIT_SCOPE_MAX_ROUTES
    split_max_extra_share: float = DEFAULT_SPLIT_MAX_EXTRA_SHARE
    jwt_providers: tuple[JwtValidation, ...] = ()

    def __post_init__(self) -> None:
        if not self.connect_timeout_s > 0:
            raise ValueError(f"connect_timeout_s must be positive, got {self.connect_timeout_s}")
        if not 0 <= self.num_trusted_hops <= MAX_TRUSTED_HOPS:
            raise ValueError(
                f"num_trusted_hops must be in 0-{MAX_TRUSTED_HOPS}, got {self.num_trusted_hops}"
            )
        if self.matcher_tree_min_routes < 0:
            raise ValueError(
                f"matcher_tree_min_routes must be 0 or more, got {self.matcher_tree_min_routes}"
            )
        if self.scoped_routes_min_hosts < 0:
            raise ValueError(
                f"scoped_routes_min_hosts must be 0 or more, got {self.scoped_routes_min_hosts}"
            )
        if self.split_host_min_routes < 0:
            raise ValueError(
                f"split_host_min_routes must be 0 or more, got {self.split_host_min_routes}"
            )
        if self.split_scope_max_routes < 1:
            raise ValueError(
                f"split_scope_max_routes must be 1 or more, got {self.split_scope_max_routes}"
            )
        if not self.split_max_extra_share >= 0:  # NaN fails the comparison too
            raise ValueError(
                f"split_max_extra_share must be 0 or more, got {self.split_max_extra_share}"
            )

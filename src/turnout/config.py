"""Settings of a running turnout, as the CLI flags give them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from turnout.compile_inputs import (
    DEFAULT_GATEWAY_CONTROLLER_NAME,
    DEFAULT_MATCHER_TREE_MIN_ROUTES,
    DEFAULT_MAX_INCLUDE_REVISITS,
    DEFAULT_SCOPED_ROUTES_MIN_HOSTS,
    DEFAULT_SPLIT_HOST_MIN_ROUTES,
    DEFAULT_SYSTEM_CA_FILE,
    EscapedSlashes,
)
from turnout.envoy.stats import EnvoyStats
from turnout.envoy.xds_tls import XdsTlsFiles
from turnout.sources.files import DEFAULT_EMPTY_FILE_GRACE_S, DEFAULT_MAX_FILE_BYTES
from turnout.sources.kubernetes import leader
from turnout.sources.kubernetes.status_writer import DEFAULT_WRITE_BURST, DEFAULT_WRITES_PER_SECOND

DEFAULT_ENVOY_SERVICE = "turnout-system/envoy"


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """`serve --kubernetes`: where the API server is and what of it is watched."""

    # A kubeconfig file (--kubeconfig); None: the in-cluster service account.
    kubeconfig: Path | None = None
    context: str | None = None  # --context; None: the kubeconfig's current context
    # --watch-namespaces: namespaced kinds are watched in these only; (): in every namespace.
    watch_namespaces: tuple[str, ...] = ()
    # --envoy-service NAMESPACE/NAME: the Service in front of the Envoys, whose
    # `status.loadBalancer` is what Ingress, RouteGroup and Gateway statuses name unless
    # --ingress-status-address is given; "" for none. The Service `deploy/` installs.
    envoy_service: str = DEFAULT_ENVOY_SERVICE


@dataclass(frozen=True, slots=True)
class ServeConfig:
    paths: tuple[Path, ...]
    # Where Envoy's listeners bind (the shared HTTP/HTTPS listeners and Gateway listeners).
    address: str = "127.0.0.1"
    # turnout's admin API and xDS server: loopback unless the operator opens them, since the
    # admin API shows every object and xDS hands out every certificate.
    admin_address: str = "127.0.0.1"
    xds_address: str = "127.0.0.1"
    # Mutual TLS on the xDS server (--xds-tls-cert/-key/-ca); None: plaintext.
    xds_tls: XdsTlsFiles | None = None
    http_port: int = 8080
    https_port: int = 8443
    admin_port: int = 8001
    xds_port: int = 18000
    envoy_admin_port: int = 9901
    log_level: str = "info"
    # Envoy's own log level: its info-level startup dump would drown turnout's log.
    envoy_log_level: str = "warning"
    envoy_stats: EnvoyStats = EnvoyStats.TRIMMED  # `--envoy-stats` (envoy/stats.py)
    run_envoy: bool = True
    watch: bool = True
    demo_backends: bool = True
    root_namespaces: tuple[str, ...] = ()
    max_include_revisits: int = DEFAULT_MAX_INCLUDE_REVISITS
    disable_permit_insecure: bool = False
    ingress_class_name: str = "turnout"
    routegroup_class: str = "skipper"  # Skipper's -kubernetes-routegroup-class
    fallback_certificate: str = ""  # "namespace/name" of a TLS Secret, or ""
    enable_external_name_service: bool = False
    gateway_controller_name: str = DEFAULT_GATEWAY_CONTROLLER_NAME
    # Proxies in front of Envoy trusted to append to X-Forwarded-For (Contour's numTrustedHops).
    num_trusted_hops: int = 0
    # The PEM bundle on Envoy's host that stands for the system trust store: BackendTLSPolicy
    # `wellKnownCACertificates: System` and https JWKS servers (jwtValidation) chain to it.
    system_ca_file: str = DEFAULT_SYSTEM_CA_FILE
    # Path normalisation beyond RFC 3986 (Contour's disableMergeSlashes; the HCM's
    # path_with_escaped_slashes_action): docs/policies.md, "Path normalisation".
    disable_merge_slashes: bool = False
    escaped_slashes: EscapedSlashes = EscapedSlashes.UNESCAPE_AND_REDIRECT
    # A virtual host with this many routes or more is a matcher tree in Envoy (0: never).
    matcher_tree_min_routes: int = DEFAULT_MATCHER_TREE_MIN_ROUTES
    # A plain HTTP listener with this many virtual hosts or more (none of them a wildcard) gets
    # one route configuration per host, chosen by a scope on the Host (0: never).
    scoped_routes_min_hosts: int = DEFAULT_SCOPED_ROUTES_MIN_HOSTS
    # A virtual host with this many routes or more (on a plain HTTP listener without wildcard
    # hosts) is split into route configurations by a leading path directory (0: never).
    split_host_min_routes: int = DEFAULT_SPLIT_HOST_MIN_ROUTES
    # Envoy's access log on every HTTP connection manager and TCP proxy: "off", "stdout" (the
    # child Envoy's stdout is copied to turnout's stdout; turnout logs to stderr) or a file
    # path; "json" (Contour's field names) or "text" (docs/observability.md).
    access_log: str = "stdout"
    access_log_format: str = "json"
    # OpenTelemetry tracing: the OTLP/gRPC collector as HOST:PORT; "" traces nothing.
    tracing_collector: str = ""
    tracing_service_name: str = "turnout"
    tracing_sampling_rate: float = 100.0  # percent of the requests
    # The global rate limit service (Contour's `rateLimitService`) as HOST:PORT; "": none, and
    # global rate limit policies are refused.
    rate_limit_service: str = ""
    rate_limit_domain: str = "contour"
    rate_limit_fail_open: bool = False
    rate_limit_x_headers: bool = False
    rate_limit_resource_exhausted: bool = False
    rate_limit_timeout_s: float = 0.1
    node_id: str = "turnout-envoy"
    # The ADS variant of the child Envoy's bootstrap (`--xds-api`): "delta" or "sotw".
    xds_api: str = "delta"
    # Delta Envoys take each scope with its RouteConfiguration inline (`XdsServer.inline_scopes`).
    xds_inline_scopes: bool = False
    # The Envoy child's bootstrap, pid file and admin socket (`envoy.state`); None: the default
    # per-user directory for this HTTP port (`envoy.state.default_state_dir`).
    state_dir: Path | None = None
    # The quiet window of a burst of changes (`Controller._coalesce`): a change that comes
    # after this long without one compiles at once; one that comes sooner waits until no change
    # came for this long (at most `controller.MAX_DELAY_S`).
    debounce_ms: int = 20
    # A watched file that had objects and yields none keeps them this long (`--empty-file-grace`).
    empty_file_grace_s: float = DEFAULT_EMPTY_FILE_GRACE_S
    # The largest file the files source reads (--max-file-bytes); a larger one is a problem.
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    extra_envoy_args: tuple[str, ...] = field(default=())
    # `--exclude` globs: paths under the given directories (or names) that are not read at all.
    exclude: tuple[str, ...] = ()
    # Kubernetes mode (`serve --kubernetes`): objects come from an API server, not from `paths`.
    kubernetes: KubernetesSettings | None = None
    # Kubernetes mode, status and leader election (docs/kubernetes.md): only the holder of the
    # Lease `turnout` in `leader_election_namespace` writes status (`--no-leader-elect`: this one
    # always does); client-go's timings.
    leader_elect: bool = True
    leader_election_namespace: str = leader.DEFAULT_NAMESPACE
    leader_election_lease_duration_s: float = leader.DEFAULT_LEASE_DURATION_S
    leader_election_renew_deadline_s: float = leader.DEFAULT_RENEW_DEADLINE_S
    leader_election_retry_period_s: float = leader.DEFAULT_RETRY_PERIOD_S
    # The address (IP or hostname) written to Ingress and RouteGroup `status.loadBalancer`;
    # "": `address`.
    ingress_status_address: str = ""
    status_writes_per_second: float = DEFAULT_WRITES_PER_SECOND
    status_write_burst: int = DEFAULT_WRITE_BURST


def split_host_port(value: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); ValueError when it is neither."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)

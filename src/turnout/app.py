"""The composition root: the one module that knows every concrete part of turnout.

It chooses the dialects, turns the flags into settings (one builder for `serve`, `check`,
`explain` and `bootstrap`, so they agree), and wires sources, controller and admin server. The
CLI calls it; nothing else imports a specific dialect (the import contracts in pyproject.toml
hold every other module to that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnout.compile_inputs import CompileOptions, PathNormalization, RateLimitService
from turnout.config import KubernetesSettings, ServeConfig, split_host_port
from turnout.dialects.contour_route import ContourRouteDialect
from turnout.dialects.gatewayapi import GatewayAPIDialect
from turnout.dialects.httpproxy import HTTPProxyDialect
from turnout.dialects.ingress import IngressDialect
from turnout.dialects.ingressroute import IngressRouteDialect
from turnout.dialects.routegroup import RouteGroupDialect
from turnout.envoy.served_state import STATE_NAME, ServedStateFile
from turnout.envoy.state import default_state_dir
from turnout.envoy.translate.options import (
    AccessLog,
    AccessLogFormat,
    Tracing,
    TranslateOptions,
)
from turnout.graph.build import CORE_KINDS, CompileResult, build_graph
from turnout.graph.dialect import Dialect, Dialects
from turnout.graph.load_balancer import service_ref
from turnout.metrics import Metrics
from turnout.objects import ObjectRef
from turnout.sources.base import Source
from turnout.sources.files import FileSource
from turnout.sources.parse_cache import CACHE_NAME, ParseCache
from turnout.status.sink import StatusSink
from turnout.store import Snapshot

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from turnout.controller import Controller
    from turnout.sources.kubernetes.reflector import StatusObserver
    from turnout.sources.kubernetes.status_sink import KubeStatusSink


def default_dialects() -> Dialects:
    """Every dialect turnout reads, in the order their statuses and claims are gathered."""
    return Dialects(
        (
            HTTPProxyDialect(),
            ContourRouteDialect(),
            IngressDialect(),
            IngressRouteDialect(),
            GatewayAPIDialect(),
            RouteGroupDialect(),
        )
    )


def compile_options(config: ServeConfig) -> CompileOptions:
    """The compile's options from the settings: the same for `serve`, `check` and `explain`, so
    a listener `serve` refuses (e.g. on the admin port) is refused by `check` too."""
    return CompileOptions(
        address=config.address,
        http_port=config.http_port,
        https_port=config.https_port,
        root_namespaces=config.root_namespaces,
        max_include_revisits=config.max_include_revisits,
        disable_permit_insecure=config.disable_permit_insecure,
        ingress_class_name=config.ingress_class_name,
        # Files: nothing else could take a classless Ingress; in a cluster, only the default
        # IngressClass gives one to a controller.
        classless_ingress_is_ours=config.kubernetes is None,
        routegroup_class=config.routegroup_class,
        fallback_certificate=config.fallback_certificate,
        enable_external_name_service=config.enable_external_name_service,
        gateway_controller_name=config.gateway_controller_name,
        reserved_ports=(
            (config.admin_port, "--admin-port"),
            (config.xds_port, "--xds-port"),
            (config.envoy_admin_port, "--envoy-admin-port"),
        ),
        rate_limit_service=rate_limit_service(config),
        status_address=config.ingress_status_address,
    )


def translate_options(config: ServeConfig) -> TranslateOptions:
    return TranslateOptions(
        num_trusted_hops=config.num_trusted_hops,
        system_ca_file=config.system_ca_file,
        paths=PathNormalization(
            merge_slashes=not config.disable_merge_slashes,
            escaped_slashes=config.escaped_slashes,
        ),
        access_log=access_log(config),
        tracing=tracing(config),
        rate_limit_service=rate_limit_service(config),
        matcher_tree_min_routes=config.matcher_tree_min_routes,
        scoped_routes_min_hosts=config.scoped_routes_min_hosts,
        split_host_min_routes=config.split_host_min_routes,
    )


def rate_limit_service(config: ServeConfig) -> RateLimitService | None:
    """The `--rate-limit-*` flags; None without `--rate-limit-service`."""
    if not config.rate_limit_service:
        return None
    host, port = split_host_port(config.rate_limit_service)
    return RateLimitService(
        host=host,
        port=port,
        domain=config.rate_limit_domain,
        fail_open=config.rate_limit_fail_open,
        x_ratelimit_headers=config.rate_limit_x_headers,
        resource_exhausted=config.rate_limit_resource_exhausted,
        timeout_s=config.rate_limit_timeout_s,
    )


def access_log(config: ServeConfig) -> AccessLog | None:
    """`--access-log off|stdout|PATH` and `--access-log-format` as the translator takes them."""
    if config.access_log == "off":
        return None
    path = None if config.access_log == "stdout" else config.access_log
    return AccessLog(path=path, format=AccessLogFormat(config.access_log_format))


def tracing(config: ServeConfig) -> Tracing | None:
    """The `--tracing-*` flags as the translator takes them; None without a collector."""
    if not config.tracing_collector:
        return None
    host, port = split_host_port(config.tracing_collector)
    return Tracing(
        collector_host=host,
        collector_port=port,
        service_name=config.tracing_service_name,
        sampling_percent=config.tracing_sampling_rate,
    )


def default_sources(config: ServeConfig) -> list[Source]:
    """Where `serve` reads objects from: the files and directories it was given, or the
    Kubernetes API server (`--kubernetes`)."""
    if config.kubernetes is not None:
        return [kubernetes_source(config.kubernetes)]
    return [
        FileSource(
            config.paths,
            watch=config.watch,
            debounce_ms=config.debounce_ms,
            empty_file_grace_s=config.empty_file_grace_s,
            exclude=config.exclude,
            max_file_bytes=config.max_file_bytes,
            parse_cache=parse_cache(config),
        )
    ]


def parse_cache(config: ServeConfig) -> ParseCache | None:
    """The files source's parse cache, in the state directory `serve` checked (0700, ours):
    only with an Envoy child, whose state directory it is."""
    if not config.run_envoy:
        return None
    state = config.state_dir or default_state_dir(config.http_port)
    return ParseCache(state / CACHE_NAME)


def served_state(config: ServeConfig) -> ServedStateFile | None:
    """The served state (`envoy/served_state.py`) next to the parse cache: files mode with an
    Envoy child only (Kubernetes mode lists from the API server, whose answers no file stat
    can vouch for)."""
    if not config.run_envoy or config.kubernetes is not None:
        return None
    state = config.state_dir or default_state_dir(config.http_port)
    return ServedStateFile(state / STATE_NAME)


def kubernetes_status_sink(
    config: ServeConfig, client: AsyncClient, metrics: Metrics
) -> KubeStatusSink:
    """Kubernetes mode's status writer, behind leader election unless `--no-leader-elect`."""
    # Imported here: file mode never loads the Kubernetes client.
    from turnout.sources.kubernetes import leader
    from turnout.sources.kubernetes.status_api import LightkubeLeaseApi, LightkubeStatusApi
    from turnout.sources.kubernetes.status_sink import KubeStatusSink
    from turnout.sources.kubernetes.status_writer import StatusWriter, WriterSettings

    writer = StatusWriter(
        LightkubeStatusApi(client),
        WriterSettings(
            controller_name=config.gateway_controller_name,
            writes_per_second=config.status_writes_per_second,
            burst=config.status_write_burst,
        ),
        metrics=metrics,
    )
    if not config.leader_elect:
        return KubeStatusSink(writer, None)
    settings = leader.ElectionSettings(
        identity=leader.default_identity(),
        lease_duration_s=config.leader_election_lease_duration_s,
        renew_deadline_s=config.leader_election_renew_deadline_s,
        retry_period_s=config.leader_election_retry_period_s,
    )
    lease = LightkubeLeaseApi(client, config.leader_election_namespace)
    return KubeStatusSink(writer, leader.LeaderElector(lease, settings, writer.set_leading))


def kubernetes_source(
    settings: KubernetesSettings, observer: StatusObserver | None = None
) -> Source:
    """Every kind the dialects (and the compile itself) read, from the API server, telling
    `observer` (the status writer) each object's current status. ValueError when there is no
    usable kubeconfig or in-cluster configuration."""
    # Imported here, as the other Kubernetes parts: serving files never loads the client.
    from turnout.sources.kubernetes.api import load_config
    from turnout.sources.kubernetes.source import KubernetesSource

    return KubernetesSource(
        load_config(settings.kubeconfig, settings.context),
        readable=default_dialects().kinds | CORE_KINDS,
        namespaces=settings.watch_namespaces,
        observer=observer,
        envoy_service=envoy_service(settings),
    )


def envoy_service(settings: KubernetesSettings | None) -> ObjectRef | None:
    """The Envoy Service (`--envoy-service`) whose load balancer addresses statuses name; None
    in file mode or with `--envoy-service ""`."""
    if settings is None or not settings.envoy_service:
        return None
    namespace, _, name = settings.envoy_service.partition("/")
    return service_ref(namespace, name)


def build_controller(
    config: ServeConfig,
    metrics: Metrics | None = None,
    sources: Sequence[Source] | None = None,
    status_sinks: Sequence[StatusSink] = (),
) -> Controller:
    """A controller for `config` with every dialect and `sources` (the files source)."""
    # Imported here: `check` and `explain` never load the gRPC server and Envoy protos.
    from turnout.controller import Controller

    metrics = metrics or Metrics()
    if config.kubernetes is not None and sources is None:
        # The status writer, told each object's current status by the source's watches.
        from lightkube import AsyncClient

        from turnout.sources.kubernetes.api import load_config

        kube = load_config(config.kubernetes.kubeconfig, config.kubernetes.context)
        sink = kubernetes_status_sink(config, AsyncClient(kube), metrics)
        sources = [kubernetes_source(config.kubernetes, observer=sink)]
        status_sinks = (*status_sinks, sink)
    return Controller(
        config,
        sources=default_sources(config) if sources is None else sources,
        dialects=default_dialects(),
        compile_options=compile_options(config),
        translate_options=translate_options(config),
        metrics=metrics,
        status_sinks=status_sinks,
        # The flag wins: the Service's addresses are not even read then.
        envoy_service=None if config.ingress_status_address else envoy_service(config.kubernetes),
        served_state=served_state(config) if sources is None else None,
    )


def compile_snapshot(
    snapshot: Snapshot,
    options: CompileOptions | None = None,
    dialects: Dialects | Sequence[Dialect] | None = None,
) -> CompileResult:
    """`snapshot` compiled by every dialect (or `dialects`), as `check` shows it."""
    if dialects is None:
        dialects = default_dialects()
    chosen = dialects.all if isinstance(dialects, Dialects) else tuple(dialects)
    return build_graph(snapshot, options or CompileOptions(), chosen)

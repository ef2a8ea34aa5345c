"""The `turnout` command: serve, check, explain, translate, bootstrap.

Output is for people by default and `-o json|yaml` for scripts. The flags of `serve` and the exit
codes of `check` are a stable contract: test suites outside this repository drive turnout by them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import importlib.metadata
import ipaddress
import json
import logging
import signal
import socket
import sys
import time
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from turnout import app, certgen
from turnout.compile_inputs import (
    DEFAULT_GATEWAY_CONTROLLER_NAME,
    DEFAULT_MATCHER_TREE_MIN_ROUTES,
    DEFAULT_MAX_INCLUDE_REVISITS,
    DEFAULT_SCOPED_ROUTES_MIN_HOSTS,
    DEFAULT_SPLIT_HOST_MIN_ROUTES,
    DEFAULT_SYSTEM_CA_FILE,
    HTTP_LISTENER,
    HTTPS_LISTENER,
    CompileOptions,
    EscapedSlashes,
    ListenerProtocol,
)
from turnout.config import (
    DEFAULT_ENVOY_SERVICE,
    KubernetesSettings,
    ServeConfig,
    split_host_port,
)
from turnout.controller import envoy_state_dir, running_envoy
from turnout.envoy import xds_tls
from turnout.envoy.bootstrap import XDS_CERTIFICATE_SDS, XDS_VALIDATION_SDS, XdsClientTls
from turnout.envoy.state import StateDirError
from turnout.envoy.stats import EnvoyStats
from turnout.envoy.xds_tls import XdsTlsFiles
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import Decision, authorization_check, evaluate, make_request
from turnout.graph.model import DirectResponse, Forward, Redirect
from turnout.graph.policy_answers import DEFAULT_CLIENT_ADDRESS, PolicyAnswer
from turnout.objects import thaw
from turnout.sources.files import DEFAULT_EMPTY_FILE_GRACE_S, DEFAULT_MAX_FILE_BYTES, FileSource
from turnout.sources.kubernetes import leader
from turnout.sources.kubernetes.status_writer import DEFAULT_WRITE_BURST, DEFAULT_WRITES_PER_SECOND
from turnout.status.model import Condition, IgnoredObject, ObjectStatus
from turnout.store import Store

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2

# `check --discover` in CI must end even when an issuer never answers.
DISCOVER_TIMEOUT_S = 30.0

log = logging.getLogger("turnout")

DIALECTS = app.default_dialects()


def _namespaces(value: str) -> tuple[str, ...]:
    return tuple(sorted({n.strip() for n in value.split(",") if n.strip()}))


def _secret_reference(value: str) -> str:
    if not value:
        return ""  # argparse passes a string default through `type` too
    namespace, sep, name = value.partition("/")
    if not (sep and namespace and name) or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {value!r}")
    return value


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {value!r}")
    return port


def _trusted_hops(value: str) -> int:
    try:
        hops = int(value)
    except ValueError:
        hops = -1
    if not 0 <= hops <= 2**32 - 1:  # Envoy's xff_num_trusted_hops is a uint32
        raise argparse.ArgumentTypeError(f"expected a whole number from 0, got {value!r}")
    return hops


def _route_count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0, got {value!r}")
    return count


def _collector(value: str) -> str:
    if not value:  # argparse passes the default through too: no tracing
        return value
    try:
        split_host_port(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def _float_in(value: str, low: float, high: float, expected: str, *, above: bool = False) -> float:
    """`value` as a number from `low` (or above it, `above`) to `high`, else an argparse error
    saying what was `expected`."""
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    # NaN fails both comparisons.
    if not ((low < number) if above else (low <= number)) or not number <= high:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
    return number


def _percent(value: str) -> float:
    return _float_in(value, 0, 100, "a percentage from 0 to 100")


def _access_log(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("expected off, stdout or a file path")
    return value


def _add_telemetry_flags(p: argparse.ArgumentParser) -> None:
    """Access log and tracing (docs/observability.md). Only `serve` uses them."""
    p.add_argument(
        "--access-log",
        type=_access_log,
        default="stdout",
        metavar="off|stdout|PATH",
        help="where Envoy writes one line per request and TCP connection: off, stdout (copied "
        "to turnout's stdout; turnout's own log is on stderr) or a file on Envoy's host "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--access-log-format",
        choices=["json", "text"],
        default="json",
        help="json: one object per line with Contour's field names; text: Envoy's default "
        "line (default: %(default)s)",
    )
    p.add_argument(
        "--tracing-collector",
        type=_collector,
        default="",
        metavar="HOST:PORT",
        help="OpenTelemetry collector (OTLP over gRPC, usually port 4317) Envoy sends spans to "
        "(default: no tracing)",
    )
    p.add_argument(
        "--tracing-service-name",
        default="turnout",
        metavar="NAME",
        help="the service.name of Envoy's spans (default: %(default)s)",
    )
    p.add_argument(
        "--tracing-sampling-rate",
        type=_percent,
        default=100.0,
        metavar="PERCENT",
        help="percentage of requests traced, unless the client already decided (default: "
        "%(default)g)",
    )


def _file_bytes(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes from 1, got {value!r}")
    return limit


def _add_input_flags(p: argparse.ArgumentParser, paths: str = "+") -> None:
    """What the files source reads (`paths`: the nargs of the file arguments)."""
    p.add_argument("paths", nargs=paths, type=Path, help="YAML/JSON files or directories")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip the files and directories this glob matches, by path relative to a given "
        "directory or by name (e.g. 'kustomization.yaml', 'charts/*'); repeatable",
    )
    p.add_argument(
        "--max-file-bytes",
        type=_file_bytes,
        default=DEFAULT_MAX_FILE_BYTES,
        metavar="BYTES",
        help="refuse (unread) any file larger than this "
        f"(default: {DEFAULT_MAX_FILE_BYTES} bytes, 4 MiB)",
    )


def _add_path_flags(p: argparse.ArgumentParser) -> None:
    """How Envoy normalises request paths before routing (docs/policies.md)."""
    p.add_argument(
        "--disable-merge-slashes",
        action="store_true",
        help="do not merge repeated slashes in request paths before routing (Contour's "
        "disableMergeSlashes; default: merged, so `//admin` is `/admin` and meets its policies)",
    )
    p.add_argument(
        "--escaped-slashes",
        type=EscapedSlashes,
        choices=list(EscapedSlashes),
        default=EscapedSlashes.UNESCAPE_AND_REDIRECT,
        metavar="{" + ",".join(e.value for e in EscapedSlashes) + "}",
        help="what Envoy does with a path holding %%2F or %%5C: redirect (307) to the path "
        "with them decoded, reject (400), forward decoded, or keep them as they are "
        "(default: redirect)",
    )


def _add_compile_flags(p: argparse.ArgumentParser, paths: str = "+") -> None:
    _add_input_flags(p, paths)
    p.add_argument(
        "--root-namespaces",
        type=_namespaces,
        default=(),
        metavar="NS[,NS...]",
        help="namespaces where root HTTPProxies and IngressRoutes may live (default: all)",
    )
    p.add_argument(
        "--max-include-revisits",
        type=_revisits,
        default=DEFAULT_MAX_INCLUDE_REVISITS,
        metavar="N",
        help="how often one root's HTTPProxy include walk (or IngressRoute delegation walk) may "
        "reach an object it already reached on another path before the root is refused "
        "(IncludeGraphTooLarge); distinct objects are not counted",
    )
    p.add_argument(
        "--disable-permit-insecure",
        action="store_true",
        help="ignore permitInsecure: TLS hosts always redirect plain HTTP to HTTPS",
    )
    p.add_argument(
        "--ingress-class-name",
        default="turnout",
        help="the Ingress class this turnout serves (default: turnout)",
    )
    p.add_argument(
        "--gateway-controller-name",
        default=DEFAULT_GATEWAY_CONTROLLER_NAME,
        metavar="NAME",
        help="the Gateway API controllerName this turnout implements: GatewayClasses naming it, "
        "their Gateways and the routes attached to them are served (default: "
        f"{DEFAULT_GATEWAY_CONTROLLER_NAME})",
    )
    p.add_argument(
        "--routegroup-class",
        default="skipper",
        metavar="REGEX",
        help="RouteGroups whose zalando.org/routegroup.class annotation this regular expression "
        "finds are served, and those without the annotation (Skipper's "
        "-kubernetes-routegroup-class; default: skipper)",
    )
    p.add_argument(
        "--fallback-certificate",
        type=_secret_reference,
        default="",
        metavar="NS/NAME",
        help="TLS Secret served to clients without SNI, for hosts that enable the fallback "
        "certificate (tls.enableFallbackCertificate; default: none)",
    )
    p.add_argument(
        "--num-trusted-hops",
        type=_trusted_hops,
        default=0,
        metavar="N",
        help="proxies in front of Envoy trusted to append to X-Forwarded-For: `Remote` IP "
        "filters see the client address they report (default: 0, the peer address). `serve`, "
        "`translate` and `explain` (with -H X-Forwarded-For) use it; `check` accepts it so "
        "that one set of flags fits all",
    )
    p.add_argument(
        "--system-ca-file",
        default=DEFAULT_SYSTEM_CA_FILE,
        metavar="PATH",
        help="PEM CA bundle, where Envoy runs, that stands for the system trust store: backends "
        "of a BackendTLSPolicy with wellKnownCACertificates: System and the https servers of JWKS "
        "key sets (RouteGroup jwtValidation) must chain to it (default: %(default)s). Only "
        "`serve` and `translate` use it",
    )
    _add_path_flags(p)
    _add_route_table_flags(p)
    p.add_argument(
        "--enable-external-name-service",
        action="store_true",
        help="route to ExternalName Services (off by default: such a Service can point Envoy at "
        "any address, its own admin port included)",
    )
    _add_telemetry_flags(p)
    _add_rate_limit_flags(p)


def _add_route_table_flags(p: argparse.ArgumentParser) -> None:
    """How the HTTP route tables are laid out in Envoy (matcher trees, scopes, path scopes)."""
    p.add_argument(
        "--matcher-tree-min-routes",
        type=_route_count,
        default=DEFAULT_MATCHER_TREE_MIN_ROUTES,
        metavar="N",
        help="a virtual host with at least N routes is sent to Envoy as a matcher tree, which "
        "finds a request's route by its path without walking the list; the first match stays "
        "the same for every request (docs/data-plane.md; default: %(default)s, 0: never). Only "
        "`serve` and `translate` use it",
    )
    p.add_argument(
        "--scoped-routes-min-hosts",
        type=_route_count,
        default=DEFAULT_SCOPED_ROUTES_MIN_HOSTS,
        metavar="N",
        help="a plain HTTP listener with at least N virtual hosts, none of them a wildcard, gets "
        "one route configuration per host, chosen by the Host (scoped RDS), so that a change to "
        "one host makes Envoy rebuild that host only (docs/data-plane.md; default: %(default)s, "
        "0: never). Only `serve` and `translate` use it",
    )
    p.add_argument(
        "--split-host-min-routes",
        type=_route_count,
        default=DEFAULT_SPLIT_HOST_MIN_ROUTES,
        metavar="N",
        help="a virtual host with at least N routes on a plain HTTP listener without wildcard "
        "hosts is split into route configurations by a leading path directory (scoped RDS, "
        "the listener is scoped for it), so that a change to some of its routes makes Envoy "
        "rebuild the directories holding them only (docs/data-plane.md; default: %(default)s, "
        "0: never). Only `serve` and `translate` use it",
    )


def _positive_seconds(value: str) -> float:
    return _float_in(value, 0, 3600, "seconds above 0", above=True)


def _add_rate_limit_flags(p: argparse.ArgumentParser) -> None:
    """The global rate limit service (Contour's `rateLimitService`; docs/policies.md)."""
    p.add_argument(
        "--rate-limit-service",
        type=_collector,
        default="",
        metavar="HOST:PORT",
        help="the global rate limit service Envoy asks (gRPC, envoy.service.ratelimit.v3) for "
        "rateLimitPolicy.global and clusterRatelimit (default: none; such policies are refused)",
    )
    p.add_argument(
        "--rate-limit-domain",
        default="contour",
        metavar="DOMAIN",
        help="the rate limit domain every request names (default: %(default)s)",
    )
    p.add_argument(
        "--rate-limit-fail-open",
        action="store_true",
        help="let requests through when the rate limit service fails or does not answer in time "
        "(default: answer them 500)",
    )
    p.add_argument(
        "--rate-limit-x-headers",
        action="store_true",
        help="add the X-RateLimit-Limit, -Remaining and -Reset headers (Contour's "
        "enableXRateLimitHeaders)",
    )
    p.add_argument(
        "--rate-limit-resource-exhausted",
        action="store_true",
        help="answer rate-limited gRPC requests RESOURCE_EXHAUSTED instead of UNAVAILABLE",
    )
    p.add_argument(
        "--rate-limit-timeout",
        type=_positive_seconds,
        default=0.1,
        metavar="SECONDS",
        help="how long Envoy waits for the rate limit service's answer (default: %(default)g)",
    )


def _add_listen_flags(p: argparse.ArgumentParser) -> None:
    """The address and ports of `serve`. `check` and `explain` take them too: a Gateway listener
    on a port turnout or its Envoy uses is refused the same way by all three."""
    p.add_argument("--address", default="127.0.0.1", help="address Envoy's listeners bind")
    p.add_argument(
        "--admin-address",
        default="127.0.0.1",
        help="address turnout's admin API binds (/status shows every object: keep it private)",
    )
    p.add_argument(
        "--xds-address",
        default="127.0.0.1",
        help="address turnout's xDS server binds (it serves every certificate to any client)",
    )
    p.add_argument(
        "--http-port", type=_port, metavar="PORT", default=8080, help="Envoy's HTTP listener"
    )
    p.add_argument(
        "--https-port", type=_port, metavar="PORT", default=8443, help="Envoy's HTTPS listener"
    )
    p.add_argument(
        "--admin-port", type=_port, metavar="PORT", default=8001, help="turnout's admin server"
    )
    p.add_argument(
        "--xds-port", type=_port, metavar="PORT", default=18000, help="turnout's xDS server"
    )
    p.add_argument(
        "--envoy-admin-port",
        type=_port,
        metavar="PORT",
        default=9901,
        help="the TCP admin port of an external Envoy: endpoints on it are refused. The Envoy "
        "`serve` starts opens no admin port: its admin is a Unix socket in --state-dir",
    )


def _discover_seconds(value: str) -> float:
    return _float_in(value, 0, 3600, "seconds above 0, at most 3600", above=True)


def _revisits(value: str) -> int:
    if not value.isdigit() or int(value) > 10_000_000:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 0 to 10000000, got {value!r}"
        )
    return int(value)


def _grace_seconds(value: str) -> float:
    return _float_in(value, 0, 3600, "seconds from 0 to 3600")


def _add_discover_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--discover",
        action="store_true",
        help="run OpenID discovery (GET <issuer>/.well-known/openid-configuration) for the "
        "issuers of RouteGroup jwtValidation filters before compiling, as `serve` does; without "
        "it no network call is made and those routes show IssuerDiscoveryPending",
    )
    p.add_argument(
        "--discover-timeout",
        type=_discover_seconds,
        default=DISCOVER_TIMEOUT_S,
        metavar="SECONDS",
        help="with --discover, the most the discovery of all issuers may take; an issuer "
        "without an answer by then is IssuerDiscoveryFailed (default: %(default)g)",
    )


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {value!r}")
    return int(value)


def _positive_rate(value: str) -> float:
    return _float_in(value, 0, 1e6, "a number above 0", above=True)


def _add_kubernetes_status_flags(p: argparse.ArgumentParser) -> None:
    """Kubernetes mode: leader election and status writing (docs/kubernetes.md)."""
    p.add_argument(
        "--no-leader-elect",
        action="store_true",
        help="Kubernetes mode: write status without holding the leader-election Lease (run one "
        "replica only)",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=leader.DEFAULT_NAMESPACE,
        metavar="NAMESPACE",
        help="Kubernetes mode: the namespace of the Lease `turnout` whose holder writes status",
    )
    for name, default, what in (
        ("lease-duration", leader.DEFAULT_LEASE_DURATION_S, "how long a Lease not renewed holds"),
        (
            "renew-deadline",
            leader.DEFAULT_RENEW_DEADLINE_S,
            "the leader steps down when it could not renew for this long",
        ),
        (
            "retry-period",
            leader.DEFAULT_RETRY_PERIOD_S,
            "how often candidates try and the leader renews",
        ),
    ):
        p.add_argument(
            f"--leader-election-{name}",
            type=_positive_seconds,
            default=default,
            metavar="SECONDS",
            help=f"Kubernetes mode: {what} (client-go's default: %(default)g)",
        )
    p.add_argument(
        "--ingress-status-address",
        default="",
        metavar="ADDRESS",
        help="the IP or hostname written to Ingress and RouteGroup status.loadBalancer and "
        "Gateway status.addresses (default: the load balancer of --envoy-service, else --address)",
    )
    p.add_argument(
        "--status-write-qps",
        type=_positive_rate,
        default=DEFAULT_WRITES_PER_SECOND,
        metavar="N",
        help="Kubernetes mode: status writes per second at most (a token bucket)",
    )
    p.add_argument(
        "--status-write-burst",
        type=_positive_int,
        default=DEFAULT_WRITE_BURST,
        metavar="N",
        help="Kubernetes mode: status writes allowed at once before --status-write-qps applies",
    )


def _kubernetes_status_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ServeConfig fields of `_add_kubernetes_status_flags` (their defaults for `check`
    and `explain`, which do not take them)."""
    d = ServeConfig(paths=())
    return {
        "leader_elect": not getattr(args, "no_leader_elect", not d.leader_elect),
        "leader_election_namespace": getattr(
            args, "leader_election_namespace", d.leader_election_namespace
        ),
        "leader_election_lease_duration_s": getattr(
            args, "leader_election_lease_duration", d.leader_election_lease_duration_s
        ),
        "leader_election_renew_deadline_s": getattr(
            args, "leader_election_renew_deadline", d.leader_election_renew_deadline_s
        ),
        "leader_election_retry_period_s": getattr(
            args, "leader_election_retry_period", d.leader_election_retry_period_s
        ),
        "ingress_status_address": getattr(args, "ingress_status_address", ""),
        "status_writes_per_second": getattr(args, "status_write_qps", d.status_writes_per_second),
        "status_write_burst": getattr(args, "status_write_burst", d.status_write_burst),
    }


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """The settings the flags of `serve`, `check` or `explain` give (one builder for all three;
    the flags only `serve` has keep their defaults for the others)."""
    defaults = ServeConfig(paths=())
    return ServeConfig(
        paths=tuple(args.paths),
        address=args.address,
        admin_address=args.admin_address,
        xds_address=args.xds_address,
        xds_tls=_xds_tls_files(args),
        http_port=args.http_port,
        https_port=args.https_port,
        admin_port=args.admin_port,
        xds_port=args.xds_port,
        envoy_admin_port=args.envoy_admin_port,
        log_level=getattr(args, "log_level", defaults.log_level),
        envoy_log_level=getattr(args, "envoy_log_level", defaults.envoy_log_level),
        envoy_stats=getattr(args, "envoy_stats", defaults.envoy_stats),
        run_envoy=not getattr(args, "no_envoy", not defaults.run_envoy),
        watch=not getattr(args, "no_watch", not defaults.watch),
        demo_backends=not getattr(args, "no_demo_backends", not defaults.demo_backends),
        root_namespaces=args.root_namespaces,
        max_include_revisits=args.max_include_revisits,
        disable_permit_insecure=args.disable_permit_insecure,
        ingress_class_name=args.ingress_class_name,
        routegroup_class=args.routegroup_class,
        fallback_certificate=args.fallback_certificate,
        enable_external_name_service=args.enable_external_name_service,
        gateway_controller_name=args.gateway_controller_name,
        num_trusted_hops=args.num_trusted_hops,
        system_ca_file=args.system_ca_file,
        disable_merge_slashes=args.disable_merge_slashes,
        escaped_slashes=args.escaped_slashes,
        matcher_tree_min_routes=args.matcher_tree_min_routes,
        scoped_routes_min_hosts=args.scoped_routes_min_hosts,
        split_host_min_routes=args.split_host_min_routes,
        access_log=args.access_log,
        access_log_format=args.access_log_format,
        tracing_collector=args.tracing_collector,
        tracing_service_name=args.tracing_service_name,
        tracing_sampling_rate=args.tracing_sampling_rate,
        rate_limit_service=args.rate_limit_service,
        rate_limit_domain=args.rate_limit_domain,
        rate_limit_fail_open=args.rate_limit_fail_open,
        rate_limit_x_headers=args.rate_limit_x_headers,
        rate_limit_resource_exhausted=args.rate_limit_resource_exhausted,
        rate_limit_timeout_s=args.rate_limit_timeout,
        node_id=getattr(args, "node_id", defaults.node_id),
        xds_api=getattr(args, "xds_api", defaults.xds_api),
        xds_inline_scopes=getattr(args, "xds_inline_scopes", defaults.xds_inline_scopes),
        empty_file_grace_s=getattr(args, "empty_file_grace", defaults.empty_file_grace_s),
        exclude=tuple(args.exclude),
        state_dir=getattr(args, "state_dir", defaults.state_dir),
        max_file_bytes=getattr(args, "max_file_bytes", defaults.max_file_bytes),
        **_kubernetes_status_settings(args),
        kubernetes=kubernetes_settings(args),
    )


class _DefaultsFormatter(argparse.HelpFormatter):
    """Every flag's help ends with its default, unless it already names it (a flag that is off
    unless given has none to show)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, "", argparse.SUPPRESS) or not action.option_strings:
            return text
        return text if "default" in text else f"{text} (default: %(default)s)".lstrip()


class _Parser(argparse.ArgumentParser):
    """Usage errors as one `turnout: ...` line (exit 2), like every other error of turnout; help
    shows every default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_UNREADABLE, f"turnout: {message} (see `{self.prog} --help`)\n")


def _version() -> str:
    try:
        return importlib.metadata.version("turnout")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="turnout",
        description="A control plane that lets many teams share one Envoy-based ingress.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_serve,
        _add_check,
        _add_explain,
        _add_translate,
        _add_bootstrap,
        _add_certgen,
    ):
        add(sub)
    _add_manifests(sub)
    return parser


def _add_serve(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout serve`: compile, program Envoy, watch."""
    serve = sub.add_parser("serve", help="compile routing files and program Envoy over xDS")
    # No file arguments with --kubernetes: `_serve` checks that one of the two is given.
    _add_compile_flags(serve, paths="*")
    _add_kubernetes_flags(serve)
    _add_listen_flags(serve)
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="turnout's log level",
    )
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text lines, or JSON lines with time, level, logger and message",
    )
    serve.add_argument(
        "--envoy-stats",
        type=EnvoyStats,
        choices=list(EnvoyStats),
        default=EnvoyStats.TRIMMED,
        help="Envoy's statistics: 'trimmed' keeps all but the per-cluster ones, and of those the "
        "request, latency, connection and endpoint-health ones (docs/observability.md); 'all' "
        "keeps every statistic (several hundred per cluster)",
    )
    serve.add_argument(
        "--envoy-log-level",
        default="warning",
        choices=["trace", "debug", "info", "warning", "error", "critical", "off"],
        help="log level of the Envoy child process (its lines are forwarded to turnout's log)",
    )
    serve.add_argument(
        "--no-envoy",
        action="store_true",
        help="do not start an Envoy child process; serve xDS to external Envoys only",
    )
    serve.add_argument("--no-watch", action="store_true", help="do not reload on file changes")
    serve.add_argument(
        "--empty-file-grace",
        type=_grace_seconds,
        default=DEFAULT_EMPTY_FILE_GRACE_S,
        metavar="SECONDS",
        help="a watched file that had objects and now has none (emptied, or cut short by an "
        "in-place rewrite) keeps them this long before they are removed; 0 removes them at once "
        "(default: %(default)g)",
    )
    serve.add_argument(
        "--no-demo-backends",
        action="store_true",
        help="do not start echo backends for Services annotated turnout.dev/demo-echo",
    )
    _add_xds_tls_flags(serve, server=True)
    serve.add_argument("--node-id", default="turnout-envoy", help="the child Envoy's node id")
    _add_kubernetes_status_flags(serve)
    _add_xds_api(serve, "the child Envoy's")
    serve.add_argument(
        "--xds-inline-scopes",
        action="store_true",
        help="Delta Envoys take each host's scope with its route table inline: a shorter first "
        "configuration and less Envoy memory at thousands of hosts, but a one-host change costs "
        "Envoy a scope update (docs/data-plane.md, 'Inline scopes over Delta')",
    )
    serve.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the Envoy child's bootstrap, pid file and admin socket (mode 0600), the "
        "files' parse cache and the served state (a restart with nothing changed serves it "
        "before its first compile); a turnout "
        "started again with the same directory and ports adopts the Envoy a crashed one left "
        "serving (default: $XDG_RUNTIME_DIR/turnout-<http-port>, else "
        "/tmp/turnout-<uid>-<http-port>)",
    )


def _add_kubernetes_flags(serve: argparse.ArgumentParser) -> None:
    """`serve --kubernetes`: objects from an API server instead of files."""
    kube = serve.add_argument_group("Kubernetes mode")
    kube.add_argument(
        "--kubernetes",
        action="store_true",
        help="read objects from the Kubernetes API server (list and watch) instead of files",
    )
    kube.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        metavar="PATH",
        help="kubeconfig file (default: the in-cluster service account)",
    )
    kube.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    kube.add_argument(
        "--watch-namespaces",
        type=_namespaces,
        default=(),
        metavar="NS[,NS...]",
        help="watch namespaced kinds in these namespaces only (default: all); cluster-scoped "
        "kinds are always read",
    )
    kube.add_argument(
        "--envoy-service",
        type=_secret_reference,
        default=None,
        metavar="NAMESPACE/NAME",
        help="the Service in front of Envoy: its status.loadBalancer is the address Ingress, "
        f"RouteGroup and Gateway statuses name, unless --ingress-status-address is given "
        f'(default: {DEFAULT_ENVOY_SERVICE}; "" for none)',
    )


def kubernetes_settings(args: argparse.Namespace) -> KubernetesSettings | None:
    if not getattr(args, "kubernetes", False):
        return None
    return KubernetesSettings(
        kubeconfig=args.kubeconfig,
        context=args.context,
        watch_namespaces=args.watch_namespaces,
        envoy_service=DEFAULT_ENVOY_SERVICE if args.envoy_service is None else args.envoy_service,
    )


def _kubernetes_usage_problem(args: argparse.Namespace) -> str | None:
    """Files or --kubernetes, not both and not neither; the Kubernetes flags need the mode."""
    if args.kubernetes and args.paths:
        return "serve --kubernetes reads the API server and takes no file arguments"
    if not args.kubernetes and not args.paths:
        return "serve needs files or directories to read, or --kubernetes"
    stray = [
        flag
        for flag, given in (
            ("--kubeconfig", args.kubeconfig is not None),
            ("--context", args.context is not None),
            ("--watch-namespaces", bool(args.watch_namespaces)),
            ("--envoy-service", args.envoy_service is not None),
        )
        if given and not args.kubernetes
    ]
    return f"{', '.join(stray)} only apply with --kubernetes" if stray else None


def _check_kubernetes(args: argparse.Namespace) -> str | None:
    """A one-line problem with the Kubernetes flags or configuration, or None."""
    problem = _kubernetes_usage_problem(args)
    if problem is None and args.kubernetes:
        from turnout.sources.kubernetes.api import load_config

        try:
            load_config(args.kubeconfig, args.context)
        except ValueError as err:
            return str(err)
    return problem


def _add_check(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout check`: every object's status."""
    check = sub.add_parser("check", help="validate files and print every object's status")
    _add_compile_flags(check)
    _add_listen_flags(check)
    _add_discover_flags(check)
    check.add_argument(
        "-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format"
    )


def _add_explain(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout explain`: which route serves a request, and why."""
    explain = sub.add_parser("explain", help="show which route serves a request, and why")
    _add_compile_flags(explain)
    _add_listen_flags(explain)
    _add_discover_flags(explain)
    explain.add_argument("--host", required=True, help="the request's Host (and SNI)")
    explain.add_argument("--path", default="/", help="the request's path")
    explain.add_argument("--method", default="GET", help="the request's method")
    explain.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="'Name: value'",
        dest="headers",
        help="a request header (repeatable; default: none)",
    )
    explain.add_argument(
        "--https",
        action="store_true",
        help="ask the HTTPS listener (the SNI is taken to equal --host)",
    )
    explain.add_argument(
        "--gateway-port",
        type=int,
        metavar="PORT",
        help="ask the Gateway API listener on PORT instead (for an HTTPS one, the SNI is taken "
        "to equal --host; default: the HTTP listener, or HTTPS with --https)",
    )
    explain.add_argument(
        "--client-address",
        type=_client_address,
        default=DEFAULT_CLIENT_ADDRESS,
        metavar="IP",
        help="the address the request's connection comes from, which IP allow/deny lists see "
        "(with --num-trusted-hops, X-Forwarded-For -H decides the client address; default: "
        "%(default)s)",
    )
    explain.add_argument(
        "-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format"
    )


def _add_translate(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout translate`: the xDS resources turnout would send."""
    tr = sub.add_parser("translate", help="print the xDS resources turnout would send Envoy")
    _add_compile_flags(tr)
    _add_listen_flags(tr)
    _add_discover_flags(tr)
    tr.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    tr.add_argument(
        "--type",
        choices=["listeners", "routes", "clusters", "endpoints", "secrets", "all"],
        default="all",
        help="only the resources of this xDS type (default: all); private keys are redacted",
    )


def _add_xds_api(parser: argparse.ArgumentParser, whose: str) -> None:
    from turnout.envoy.bootstrap import XDS_APIS

    parser.add_argument(
        "--xds-api",
        choices=XDS_APIS,
        default="delta",
        help=f"{whose} ADS variant: delta (only changes are sent) or sotw (state of the world; "
        "every change resends all clusters and listeners). turnout serves both "
        "(default: %(default)s)",
    )


def _add_bootstrap(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout bootstrap`: an external Envoy's bootstrap."""
    boot = sub.add_parser("bootstrap", help="write the bootstrap for an external Envoy")
    boot.add_argument(
        "file", metavar="OUTPUT", nargs="?", default="-", help="file to write (default: stdout)"
    )
    boot.add_argument("--xds-address", default="127.0.0.1", help="where turnout's xDS listens")
    boot.add_argument("--xds-port", type=_port, default=18000, help="turnout's xDS port")
    boot.add_argument("--admin-address", default="127.0.0.1", help="Envoy's admin address")
    boot.add_argument("--admin-port", type=_port, default=9901, help="Envoy's admin port")
    boot.add_argument("--node-id", default="turnout-envoy", help="Envoy's node id")
    boot.add_argument(
        "--envoy-stats",
        type=EnvoyStats,
        choices=list(EnvoyStats),
        default=EnvoyStats.TRIMMED,
        help="Envoy's statistics: 'trimmed' keeps all but the per-cluster ones, and of those the "
        "request, latency, connection and endpoint-health ones (docs/observability.md); 'all' "
        "keeps every statistic (several hundred per cluster)",
    )
    _add_xds_tls_flags(boot, server=False)
    boot.add_argument(
        "--xds-server-name",
        default="",
        metavar="NAME",
        help="with --xds-tls-*: the DNS name turnout's certificate must carry, also sent as SNI, "
        "e.g. turnout.turnout-system.svc (default: none, only the chain to the CA is checked)",
    )
    boot.add_argument(
        "--sds-dir",
        type=Path,
        metavar="DIR",
        help=f"with --xds-tls-*: where to write {XDS_CERTIFICATE_SDS} and {XDS_VALIDATION_SDS}, "
        "the SDS files through which Envoy reads (and re-reads on rotation) the three files "
        "(default: OUTPUT's directory; needed when OUTPUT is stdout)",
    )
    _add_xds_api(boot, "Envoy's")
    # `-o` is the output format in every command; `--format` is its old, deprecated name here.
    boot.add_argument(
        "-o",
        "--output",
        "--format",
        dest="format",
        choices=["yaml", "json"],
        default="yaml",
        help="output format (--format is a deprecated alias)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: str = args.command
    if command == "serve":
        return _serve(args)
    if command == "check":
        return _check(args)
    if command == "explain":
        return _explain(args)
    if command == "translate":
        return _translate(args)
    if command == "manifests":
        return _manifests(args)
    if command == "certgen":
        return _certgen(args)
    return _bootstrap(args)


# -- compile from files ------------------------------------------------------------------------


def _load(
    paths: Sequence[Path],
    options: CompileOptions,
    discover_timeout_s: float | None = None,
    exclude: Sequence[str] = (),
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> tuple[CompileResult | None, str]:
    """Compiles `paths`; with `discover_timeout_s`, after OpenID discovery of the issuers the
    RouteGroups' jwtValidation filters name, as the controller runs it for `serve`."""
    # One-shot commands print every problem themselves; the sources' log lines would repeat them
    # through logging's last-resort handler.
    logging.getLogger("turnout").addHandler(logging.NullHandler())
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return None, f"no such file or directory: {', '.join(missing)}"
    store = Store()
    FileSource(list(paths), store, exclude=exclude, max_file_bytes=max_file_bytes).load_all()
    snapshot = store.snapshot()
    if discover_timeout_s is not None:
        from turnout.sources.oidc import discover_once

        issuers = DIALECTS.external_inputs(snapshot, options).oidc_issuers
        if issuers:
            answers = asyncio.run(discover_once(tuple(sorted(issuers)), discover_timeout_s))
            options = dataclasses.replace(options, issuer_discovery=answers)
    return app.compile_snapshot(snapshot, options, DIALECTS), ""


def _discover_timeout(args: argparse.Namespace) -> float | None:
    return float(args.discover_timeout) if args.discover else None


# The reason RouteGroup jwtValidation routes carry until OpenID discovery answers: in `check` and
# `explain` without --discover it is never run, so the status says how to run it.
ISSUER_DISCOVERY_PENDING = "IssuerDiscoveryPending"


def with_discover_hint(status: ObjectStatus, command: str) -> ObjectStatus:
    """`status` with its IssuerDiscoveryPending messages (and summary) telling how to resolve
    the issuer from `turnout <command>`; other statuses unchanged."""
    if not any(c.reason == ISSUER_DISCOVERY_PENDING for c in status.conditions):
        return status
    hint = f"; run `turnout {command} --discover` to resolve the issuer"
    summary = status.summary
    conditions: list[Condition] = []
    for cond in status.conditions:
        if cond.reason == ISSUER_DISCOVERY_PENDING:
            if cond.message and cond.message in summary:
                summary = summary.replace(cond.message, cond.message + hint, 1)
            cond = dataclasses.replace(cond, message=cond.message + hint)
        conditions.append(cond)
    if hint not in summary:
        summary += hint
    return dataclasses.replace(status, summary=summary, conditions=tuple(conditions))


def _dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _status_lines(status: ObjectStatus) -> list[str]:
    """The object's state and summary after where it was written (`file:line: `), then each
    error and warning on its own line."""
    # Cluster-scoped kinds are shown without a namespace.
    meta = DIALECTS.status_json(status)["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    origin = status.origin
    at = ""
    if origin is not None:
        at = f"{origin.source}:{origin.line}: " if origin.line else f"{origin.source}: "
    lines = [f"{at}{status.ref.kind} {where}: {status.state.value}: {status.summary}"]
    for cond in status.body.get("conditions") or ():
        for label in ("errors", "warnings"):
            for sub in cond.get(label) or ():
                kind = "error" if label == "errors" else "warning"
                lines.append(
                    f"  {kind} {sub.get('type')}/{sub.get('reason')}: {sub.get('message')}"
                )
    shown = "\n".join(lines)
    for finding in status.findings:
        if finding.text not in shown:
            lines.append(f"  {finding.severity} {finding.reason}: {finding.text}")
    return lines


def _nothing_found(paths: Sequence[Path]) -> str:
    return f"no routing objects found in {', '.join(str(p) for p in paths)}"


def _ignored_line(ignored: IgnoredObject) -> str:
    """`file:line: Kind ns/name: ignored: reason`, as a status line."""
    meta = DIALECTS.ignored_json(ignored)["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    origin = ignored.origin
    at = ""
    if origin is not None:
        at = f"{origin.source}:{origin.line}: " if origin.line else f"{origin.source}: "
    return f"{at}{ignored.ref.kind} {where}: ignored: {ignored.reason}"


def check_summary(result: CompileResult, statuses: Sequence[ObjectStatus]) -> dict[str, int]:
    """The counts of `check`'s last line: objects with a status (valid or not), objects refused
    before any dialect read them (invalid), ignored objects, and warning problems."""
    valid = sum(1 for s in statuses if s.state.ok)
    invalid = len(statuses) - valid + len(result.rejected)
    ignored = len(result.ignored)
    warnings = sum(1 for p in result.problems if p.severity == "warning")
    return {
        "objects": valid + invalid + ignored,
        "valid": valid,
        "invalid": invalid,
        "ignored": ignored,
        "warnings": warnings,
    }


def _check(args: argparse.Namespace) -> int:
    config = serve_config(args)
    result, error = _load(
        args.paths,
        app.compile_options(config),
        _discover_timeout(args),
        config.exclude,
        config.max_file_bytes,
    )
    if result is None:
        print(f"turnout: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    unreadable = [p for p in result.problems if p.severity == "unreadable"]
    statuses = result.statuses
    if not statuses and not result.problems:
        # Nothing to check is not an error (a fresh directory), but silence would look like
        # success with content: stderr, so that -o json|yaml stays one document.
        print(f"turnout: warning: {_nothing_found(args.paths)}", file=sys.stderr)
    if not args.discover:
        statuses = tuple(with_discover_hint(s, "check") for s in statuses)
    summary = check_summary(result, statuses)
    if args.output == "text":
        for status in statuses:
            print("\n".join(_status_lines(status)))
        for ignored in result.ignored:
            print(_ignored_line(ignored))
        for problem in result.problems:
            print(f"{problem}", file=sys.stderr)
        print(
            f"{summary['objects']} objects: {summary['valid']} valid, {summary['invalid']} "
            f"invalid, {summary['ignored']} ignored, {summary['warnings']} warnings"
        )
    else:
        doc = {
            "objects": [thaw(DIALECTS.status_json(s)) for s in statuses],
            "problems": [p.to_json() for p in result.problems],
            "ignored": [DIALECTS.ignored_json(i) for i in result.ignored],
            "summary": summary,
        }
        print(_dump(doc, args.output), end="" if args.output == "yaml" else "\n")
    if unreadable:
        return EXIT_UNREADABLE
    if any(p.severity == "error" for p in result.problems) or any(not s.state.ok for s in statuses):
        return EXIT_INVALID
    return EXIT_OK


# -- explain -----------------------------------------------------------------------------------


def _parse_headers(values: Sequence[str]) -> list[tuple[str, str]] | str:
    headers: list[tuple[str, str]] = []
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            return f"header {value!r} is not of the form 'Name: value'"
        headers.append((name.strip().lower(), rest.strip()))
    return headers


def _action_text(decision: Decision) -> str:
    route = decision.route
    if decision.rejected_status is not None:
        return f"{decision.rejected_status} before routing: {decision.rejected_reason}"
    if route is None:
        return "404 (no route matched)"
    auth = authorization_check(decision)
    if auth is not None:
        # The server's answer is not in the graph: say what it decides, then the rest.
        vh = decision.virtual_host
        assert vh is not None
        plain = dataclasses.replace(
            vh, policies=dataclasses.replace(vh.policies, authorization=None)
        )
        rest = _action_text(dataclasses.replace(decision, virtual_host=plain))
        unreachable = "allowed" if auth.fail_open else "403"
        return (
            f"depends on the authorization server (cluster {auth.cluster}; {unreachable} when it "
            f"cannot be reached): its denial is answered as it says, otherwise {rest}"
        )
    jwt = route.policies.jwt
    if jwt is not None:
        # Not a routing decision: the route is chosen first, then the token is checked.
        rest = _action_text(
            dataclasses.replace(
                decision,
                route=dataclasses.replace(
                    route, policies=dataclasses.replace(route.policies, jwt=None)
                ),
            )
        )
        issuer = jwt.issuer or "any"
        return f"401 unless a valid JWT of issuer {issuer} (keys {jwt.jwks_uri}), then {rest}"
    action = route.action
    if isinstance(action, Forward):
        parts = [f"{c.cluster} (weight {c.weight})" for c in action.clusters]
        return "forward to " + ", ".join(parts)
    if isinstance(action, DirectResponse):
        return f"direct response {action.status}" + (f": {action.body}" if action.body else "")
    if isinstance(action, Redirect):
        return f"redirect {action.status}"
    return str(action)


def _client_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address") from None


def policy_answer_json(answer: PolicyAnswer) -> dict[str, Any]:
    return {
        "status": answer.status,
        "policy": answer.policy,
        "filter": answer.filter,
        "source": answer.source,
        "definite": answer.definite,
        "reason": answer.reason,
        "headers": [{"name": n, "value": v} for n, v in answer.headers],
    }


def decision_json(decision: Decision) -> dict[str, Any]:
    route = decision.route
    answer = decision.policy_answer
    return {
        "listener": decision.listener.name if decision.listener else None,
        "virtualHost": decision.virtual_host.hostname if decision.virtual_host else None,
        "route": str(route.source) if route else None,
        "action": _action_text(decision),
        "status": decision.status,
        **({"location": decision.location} if decision.location is not None else {}),
        "clusters": [{"name": n, "weight": w} for n, w in decision.clusters],
        "passedOver": [
            {"route": str(m.route.source), "reason": m.reason} for m in decision.passed_over
        ],
        "policyAnswer": policy_answer_json(answer) if answer is not None else None,
        "policyAnswers": [policy_answer_json(a) for a in decision.policy_answers],
    }


def _explain_exit(decision: Decision) -> int:
    # A definite non-2xx policy answer means the request is not served, like a 404.
    answer = decision.definite_policy_answer
    if decision.route is None or (answer is not None and not 200 <= answer.status < 300):
        return EXIT_INVALID
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    headers = _parse_headers(args.headers)
    if isinstance(headers, str):
        print(f"turnout: {headers}", file=sys.stderr)
        return EXIT_UNREADABLE
    config = serve_config(args)
    result, error = _load(
        args.paths,
        app.compile_options(config),
        _discover_timeout(args),
        config.exclude,
        config.max_file_bytes,
    )
    if result is None:
        print(f"turnout: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    if not result.statuses and not result.problems:
        print(f"turnout: warning: {_nothing_found(args.paths)}", file=sys.stderr)
    if not args.discover:
        for status in result.statuses:
            hinted = with_discover_hint(status, "explain")
            if hinted is not status:
                # stderr, so that -o json|yaml stays one document on stdout.
                ref = hinted.ref
                print(
                    f"turnout: note: {ref.kind} {ref.namespace}/{ref.name}: {hinted.summary}",
                    file=sys.stderr,
                )
    listener = HTTPS_LISTENER if args.https else HTTP_LISTENER
    if args.gateway_port is not None:
        on_port = [lst.name for lst in result.graph.listeners if lst.port == args.gateway_port]
        listener = on_port[0] if on_port else f"gateway_{args.gateway_port}"
    request = make_request(
        args.host,
        args.path,
        args.method,
        headers,
        listener=listener,
        client_address=args.client_address,
    )
    options = app.translate_options(config)
    decision = evaluate(result.graph, request, options.paths, options.num_trusted_hops)
    if args.output != "text":
        text = _dump(decision_json(decision), args.output)
        print(text, end="" if text.endswith("\n") else "\n")
        return _explain_exit(decision)
    served = next((lst for lst in result.graph.listeners if lst.name == listener), None)
    secure = args.https or (served is not None and served.protocol is not ListenerProtocol.HTTP)
    scheme = "https" if secure else "http"
    print(f"request: {request.method} {scheme}://{request.host}{request.path}")
    if decision.rejected_status is not None:
        print(f"action: {_action_text(decision)}")
        return EXIT_INVALID
    if decision.virtual_host is None:
        print("virtual host: none matches this host: 404")
        for ignored in (i for i in result.ignored if i.names(request.host)):
            print(f"  {_ignored_line(ignored)}")
        return EXIT_INVALID
    vh = decision.virtual_host
    print(f"virtual host: {vh.hostname} (owned by {vh.owner})")
    for miss in decision.passed_over:
        print(f"  passed over {miss.route.source}: {miss.reason}")
    if decision.route is not None:
        print(f"route: {decision.route.source}")
    for answer in decision.policy_answers:
        print(answer.text)
        for name, value in answer.headers:
            print(f"  {name}: {value}")
    print(f"action: {_action_text(decision)}")
    return _explain_exit(decision)


# -- translate ---------------------------------------------------------------------------------


def _translate(args: argparse.Namespace) -> int:
    """The xDS resources `serve` would send for the files, as Envoy's JSON or YAML (stdout: one
    document; problems on stderr). Exit 2 when a file could not be read, else 0."""
    # Imported here: `check` and `explain` never load the Envoy protos.
    from turnout.envoy.dump import render, resources_document
    from turnout.envoy.translate import translate

    config = serve_config(args)
    result, error = _load(args.paths, app.compile_options(config), _discover_timeout(args))
    if result is None:
        print(f"turnout: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    for problem in result.problems:
        print(f"{problem}", file=sys.stderr)
    resources = translate(result.graph, app.translate_options(config))
    sys.stdout.write(render(resources_document(resources, args.type), args.output))
    return EXIT_UNREADABLE if any(p.severity == "unreadable" for p in result.problems) else EXIT_OK


# -- bootstrap ---------------------------------------------------------------------------------


def _bootstrap(args: argparse.Namespace) -> int:
    from turnout.envoy.bootstrap import bootstrap_config, write_xds_sds_files

    problem = _xds_tls_incomplete(args)
    tls = _client_tls(args)
    if tls is not None and not tls.sds_dir:
        problem = (
            "with --xds-tls-* and the bootstrap on stdout, --sds-dir says where its SDS files go"
        )
    if problem:
        print(f"turnout: {problem}", file=sys.stderr)
        return EXIT_UNREADABLE
    config = bootstrap_config(
        xds_address=args.xds_address,
        xds_port=args.xds_port,
        admin_address=args.admin_address,
        admin_port=args.admin_port,
        node_id=args.node_id,
        stats=args.envoy_stats,
        xds_tls=tls,
        xds_api=args.xds_api,
    )
    text = _dump(config, args.format)
    if tls is not None:
        try:
            write_xds_sds_files(tls, tls.sds_dir)
        except OSError as err:
            print(f"turnout: cannot write {tls.sds_dir}: {err.strerror or err}", file=sys.stderr)
            return EXIT_UNREADABLE
    if args.file == "-":
        sys.stdout.write(text)
        return EXIT_OK
    try:
        Path(args.file).write_text(text)
    except OSError as err:
        print(f"turnout: cannot write {args.file}: {err.strerror or err}", file=sys.stderr)
        return EXIT_UNREADABLE
    return EXIT_OK


# -- xDS TLS and certgen -----------------------------------------------------------------------


def _add_xds_tls_flags(p: argparse.ArgumentParser, *, server: bool) -> None:
    """`--xds-tls-cert/--xds-tls-key/--xds-tls-ca`: all three or none."""
    who = "turnout's xDS server" if server else "Envoy's xDS client"
    off = "(default: none, plain gRPC)"
    p.add_argument(
        "--xds-tls-cert",
        type=Path,
        metavar="PATH",
        help=f"the certificate (PEM) {who} presents: xDS over mutual TLS, with --xds-tls-key "
        f"and --xds-tls-ca {off}",
    )
    p.add_argument(
        "--xds-tls-key",
        type=Path,
        metavar="PATH",
        help=f"the private key (PEM) of --xds-tls-cert {off}",
    )
    other = "every Envoy's client certificate" if server else "turnout's server certificate"
    reload = "; the three files are re-read when they change" if server else ""
    p.add_argument(
        "--xds-tls-ca",
        type=Path,
        metavar="PATH",
        help=f"the CA (PEM) {other} must chain to{reload} {off}",
    )


def _xds_tls_incomplete(args: argparse.Namespace) -> str:
    """Why the --xds-tls-* flags cannot be used as given (not all three), or ""."""
    given = [args.xds_tls_cert, args.xds_tls_key, args.xds_tls_ca]
    if all(given) or not any(given):
        return ""
    names = ("--xds-tls-cert", "--xds-tls-key", "--xds-tls-ca")
    missing = [name for name, value in zip(names, given, strict=True) if not value]
    return f"xDS TLS needs all of {', '.join(names)}; missing {', '.join(missing)}"


def _xds_tls_files(args: argparse.Namespace) -> XdsTlsFiles | None:
    cert, key, ca = (getattr(args, f"xds_tls_{n}", None) for n in ("cert", "key", "ca"))
    if cert is None or key is None or ca is None:
        return None
    return XdsTlsFiles(cert=cert, key=key, ca=ca)


def _xds_tls_unusable(args: argparse.Namespace) -> str:
    """Why the server's TLS files cannot be loaded now (one line naming the file), or ""."""
    files = _xds_tls_files(args)
    if files is None:
        return ""
    try:
        xds_tls.load(files)
    except xds_tls.XdsTlsError as err:
        return f"--xds-tls-*: {err}"
    return ""


def _client_tls(args: argparse.Namespace) -> XdsClientTls | None:
    files = _xds_tls_files(args)
    if files is None:
        return None
    sds_dir = args.sds_dir or ("" if args.file == "-" else str(Path(args.file).parent))
    return XdsClientTls(
        cert=str(files.cert),
        key=str(files.key),
        ca=str(files.ca),
        sds_dir=str(sds_dir),
        server_name=args.xds_server_name,
    )


def _add_certgen(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout certgen`: the CA and key pairs of xDS between pods."""
    gen = sub.add_parser(
        "certgen",
        help="make a CA and the xDS server and client certificates, as files or Secrets",
    )
    out = gen.add_mutually_exclusive_group(required=True)
    out.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write ca.crt, xds-server.crt/.key and xds-client.crt/.key into DIR, keys mode 0600 "
        "(no default: one of --out, -o and --kubernetes is required)",
    )
    out.add_argument(
        "-o",
        "--output",
        choices=["yaml", "json"],
        help="print the Secrets turnout-xds-server and turnout-xds-client as manifests "
        "(default: none; see --out)",
    )
    out.add_argument(
        "--kubernetes",
        action="store_true",
        help="create (or replace) the two Secrets through the API server",
    )
    gen.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="with --kubernetes: the API server and credentials (default: in-cluster, then "
        "$KUBECONFIG, then ~/.kube/config)",
    )
    gen.add_argument(
        "--context",
        metavar="NAME",
        help="with --kubernetes: the kubeconfig context (default: its current context)",
    )
    gen.add_argument(
        "--namespace",
        default=certgen.DEFAULT_NAMESPACE,
        help="the Secrets' namespace, also in the server certificate's names (turnout.NAMESPACE"
        ".svc...)",
    )
    gen.add_argument(
        "--server-san",
        action="append",
        default=[],
        metavar="NAME",
        help="another DNS name for the server certificate, repeatable (default: none)",
    )
    gen.add_argument(
        "--validity",
        type=_validity_days,
        default=certgen.DEFAULT_VALIDITY_DAYS,
        metavar="DAYS",
        help="how long the certificates are valid",
    )
    gen.add_argument(
        "--key-type",
        choices=[k.value for k in certgen.KeyType],
        default="ecdsa",
        help="ECDSA P-256 or RSA 2048",
    )
    gen.add_argument("--overwrite", action="store_true", help="with --out: replace existing files")


def _validity_days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        days = 0
    if not 1 <= days <= 3650:
        raise argparse.ArgumentTypeError(f"expected days from 1 to 3650, got {value!r}")
    return days


def _certgen(args: argparse.Namespace) -> int:
    certs = certgen.generate(
        namespace=args.namespace,
        extra_sans=args.server_san,
        validity_days=args.validity,
        key_type=certgen.KeyType(args.key_type),
    )
    if args.out is not None:
        try:
            written = certgen.write_files(certs, args.out, overwrite=args.overwrite)
        except certgen.ExistingFiles as err:
            print(f"turnout: {err}", file=sys.stderr)
            return EXIT_UNREADABLE
        except OSError as err:
            where = err.filename or args.out
            print(f"turnout: cannot write {where}: {err.strerror or err}", file=sys.stderr)
            return EXIT_UNREADABLE
        for path in written:
            print(path)
        return EXIT_OK
    manifests = certgen.secret_manifests(certs, args.namespace)
    if args.output:
        if args.output == "json":
            print(json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2))
        else:
            sys.stdout.write(yaml.safe_dump_all(manifests, sort_keys=False))
        return EXIT_OK
    return _certgen_apply(manifests, args)


def _certgen_apply(manifests: list[dict[str, Any]], args: argparse.Namespace) -> int:
    try:
        done = certgen.apply_secrets(manifests, args.kubeconfig, args.context)
    except certgen.ApplyError as err:
        print(f"turnout: cannot write the Secrets: {err}", file=sys.stderr)
        return EXIT_UNREADABLE
    for line in done:
        print(line)
    return EXIT_OK


# -- serve -------------------------------------------------------------------------------------


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line: time (RFC 3339, UTC), level, logger, message; Envoy's own
    logger name and a traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        envoy_logger = getattr(record, "envoy_logger", None)
        if envoy_logger:
            line["envoy_logger"] = envoy_logger
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def _setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonLogFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])
    # The Kubernetes client's HTTP library logs every request at info: one line per status
    # write and Lease renewal would drown turnout's own log.
    for name in ("httpx2", "httpcore2"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


def _serve(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level, args.log_format)
    problem = _check_kubernetes(args) or _xds_tls_incomplete(args) or _xds_tls_unusable(args)
    if problem:
        print(f"turnout: {problem}", file=sys.stderr)
        return EXIT_UNREADABLE
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"turnout: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return EXIT_UNREADABLE
    config = serve_config(args)
    timing = leader.timing_problem(
        config.leader_election_lease_duration_s,
        config.leader_election_renew_deadline_s,
        config.leader_election_retry_period_s,
    )
    if timing:
        print(f"turnout: {timing}", file=sys.stderr)
        return EXIT_UNREADABLE
    if config.run_envoy:
        try:
            envoy_state_dir(config).prepare()
        except (StateDirError, OSError) as err:
            print(f"turnout: {err}", file=sys.stderr)
            return EXIT_UNREADABLE
    busy = _busy_ports(config)
    if busy:
        for line in busy:
            print(f"turnout: cannot listen on {line}", file=sys.stderr)
        return EXIT_UNREADABLE
    from turnout.envoy.process import EnvoyNotFoundError

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_run(config))
    except (OSError, EnvoyNotFoundError, ValueError) as err:
        # A port taken between the check above and the bind, an Envoy that cannot be run, no
        # usable kubeconfig.
        print(f"turnout: {err}", file=sys.stderr)
        return EXIT_UNREADABLE
    return EXIT_OK


def _busy_ports(config: ServeConfig) -> list[str]:
    """The ports turnout or its Envoy would fail to bind, checked up front so that a taken port
    is one clear line instead of a traceback or an Envoy that silently rejects its listener.
    The HTTP ports of an Envoy a crashed turnout left in the state directory are its own: this
    turnout adopts (or replaces) that Envoy."""
    wanted = [
        ("--admin-port", config.admin_address, config.admin_port),
        ("--xds-port", config.xds_address, config.xds_port),
    ]
    if config.run_envoy and running_envoy(config) is None:
        wanted += [
            ("--http-port", config.address, config.http_port),
            ("--https-port", config.address, config.https_port),
        ]
    busy: list[str] = []
    for flag, address, port in wanted:
        if port == 0:
            continue
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as err:
                busy.append(f"{address}:{port} ({flag}): {err.strerror or err}")
    return busy


def warn_exposed(config: ServeConfig) -> None:
    """Says so when the admin API or xDS listens beyond this host: both are unauthenticated."""
    exposed = [("--admin-address", config.admin_address, "the admin API (every object and status)")]
    if config.xds_tls is None:  # with mutual TLS only holders of a client certificate get in
        exposed.append(
            ("--xds-address", config.xds_address, "xDS (every route, certificate and key)")
        )
    for flag, address, what in exposed:
        if not _is_loopback(address):
            log.warning(
                "%s %s: %s is reachable from other hosts without authentication; "
                "keep it on 127.0.0.1 or firewall the port",
                flag,
                address,
                what,
            )


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


@contextlib.contextmanager
def cold_start_gc() -> Iterator[None]:
    """Pauses the cyclic garbage collector for the cold start, then freezes what it built.

    A cold start allocates millions of objects that live on (the objects, the graph, the Envoy
    resources) and almost no cyclic garbage; the collector's full passes over that growing heap
    cost seconds at 10,000 objects and found nothing. `gc.freeze` then moves what was built out
    of later passes, which look only at what changes make. Reference counting still frees
    everything that is not a cycle, the replaced objects and graphs included."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


async def _run(config: ServeConfig) -> None:
    from turnout.admin.server import AdminServer

    controller = app.build_controller(config)
    admin = AdminServer(controller)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(controller.reload()))
    try:
        # The admin server first: while a source is still listing, /readyz says which.
        warn_exposed(config)
        await admin.start(config.admin_address, config.admin_port)
        # Only for files: a cluster's list can wait on an unreachable API server for long, and
        # its retries make cyclic garbage (exceptions and their tracebacks).
        pause = cold_start_gc() if config.kubernetes is None else contextlib.nullcontext()
        with pause:
            await controller.start()
        # From now on, what each change's compile builds is frozen too (`freeze_heap`).
        controller.freeze_heap = config.kubernetes is None
        if config.paths and not controller.statuses() and not controller.problems():
            log.warning("%s", _nothing_found(config.paths))
        log.info(
            "turnout serving: HTTP on %s:%d, admin on %s:%d, xDS on %s:%d%s",
            config.address,
            config.http_port,
            config.admin_address,
            config.admin_port,
            config.xds_address,
            controller.xds_port,
            "" if config.run_envoy else " (no Envoy child: connect your own)",
        )
        await stop.wait()
    finally:
        log.info("turnout stopping")
        await admin.stop()
        await controller.stop()


if __name__ == "__main__":
    sys.exit(main())


# -- install manifests -------------------------------------------------------------------------


def _add_manifests(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`turnout manifests`: the CRDs, RBAC, workloads and chart files of deploy/."""
    m = sub.add_parser(
        "manifests", help="write the install manifests (CRDs, RBAC, workloads) into a directory"
    )
    m.add_argument(
        "--out", type=Path, default=Path("deploy"), metavar="DIR", help="where (default: deploy)"
    )


def _manifests(args: argparse.Namespace) -> int:
    from turnout import manifests

    for path in manifests.write(args.out):
        print(path)
    return 0

"""The `turnout` command: serve, check, explain, bootstrap.

Output is for people by default and `-o json|yaml` for scripts. The flags of `serve` and the exit
codes of `check` are a stable contract: test suites outside this repository drive turnout by them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from turnout import app
from turnout.compile_inputs import (
    DEFAULT_GATEWAY_CONTROLLER_NAME,
    DEFAULT_SYSTEM_CA_FILE,
    HTTP_LISTENER,
    HTTPS_LISTENER,
    CompileOptions,
    ListenerProtocol,
)
from turnout.config import ServeConfig
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import Decision, evaluate, make_request
from turnout.graph.model import DirectResponse, Forward, Redirect
from turnout.objects import thaw
from turnout.sources.files import DEFAULT_MAX_FILE_BYTES, FileSource
from turnout.status.model import Condition, ObjectStatus
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


def _trusted_hops(value: str) -> int:
    try:
        hops = int(value)
    except ValueError:
        hops = -1
    if not 0 <= hops <= 2**32 - 1:  # Envoy's xff_num_trusted_hops is a uint32
        raise argparse.ArgumentTypeError(f"expected a whole number from 0, got {value!r}")
    return hops


def _file_bytes(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes from 1, got {value!r}")
    return limit


def _add_compile_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", type=Path, help="YAML/JSON files or directories")
    p.add_argument(
        "--max-file-bytes",
        type=_file_bytes,
        default=DEFAULT_MAX_FILE_BYTES,
        metavar="BYTES",
        help="refuse (unread) any file larger than this "
        f"(default: {DEFAULT_MAX_FILE_BYTES} bytes, 4 MiB)",
    )
    p.add_argument(
        "--root-namespaces",
        type=_namespaces,
        default=(),
        metavar="NS[,NS...]",
        help="namespaces where root HTTPProxies and IngressRoutes may live (default: all)",
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
        "certificate (tls.enableFallbackCertificate)",
    )
    p.add_argument(
        "--num-trusted-hops",
        type=_trusted_hops,
        default=0,
        metavar="N",
        help="proxies in front of Envoy trusted to append to X-Forwarded-For: `Remote` IP "
        "filters see the client address they report (default: 0, the peer address). Only "
        "`serve` uses it; `check` and `explain` accept it so that one set of flags fits all",
    )
    p.add_argument(
        "--system-ca-file",
        default=DEFAULT_SYSTEM_CA_FILE,
        metavar="PATH",
        help="PEM CA bundle, where Envoy runs, that stands for the system trust store: backends "
        "of a BackendTLSPolicy with wellKnownCACertificates: System and the https servers of JWKS "
        "key sets (RouteGroup jwtValidation) must chain to it (default: %(default)s). Only "
        "`serve` uses it",
    )
    p.add_argument(
        "--enable-external-name-service",
        action="store_true",
        help="route to ExternalName Services (off by default: such a Service can point Envoy at "
        "any address, its own admin port included)",
    )


def _add_listen_flags(p: argparse.ArgumentParser) -> None:
    """The address and ports of `serve`. `check` and `explain` take them too: a Gateway listener
    on a port turnout or its Envoy uses is refused the same way by all three."""
    p.add_argument("--address", default="127.0.0.1", help="address Envoy and turnout bind")
    p.add_argument("--http-port", type=int, default=8080)
    p.add_argument("--https-port", type=int, default=8443)
    p.add_argument("--admin-port", type=int, default=8001, help="turnout's admin server")
    p.add_argument("--xds-port", type=int, default=18000)
    p.add_argument("--envoy-admin-port", type=int, default=9901)


def _discover_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 3600:  # NaN fails the comparison too
        raise argparse.ArgumentTypeError(f"expected seconds above 0, at most 3600, got {value!r}")
    return seconds


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


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """The settings the flags of `serve`, `check` or `explain` give (one builder for all three;
    the flags only `serve` has keep their defaults for the others)."""
    defaults = ServeConfig(paths=())
    return ServeConfig(
        paths=tuple(args.paths),
        address=args.address,
        http_port=args.http_port,
        https_port=args.https_port,
        admin_port=args.admin_port,
        xds_port=args.xds_port,
        envoy_admin_port=args.envoy_admin_port,
        log_level=getattr(args, "log_level", defaults.log_level),
        envoy_log_level=getattr(args, "envoy_log_level", defaults.envoy_log_level),
        run_envoy=not getattr(args, "no_envoy", not defaults.run_envoy),
        watch=not getattr(args, "no_watch", not defaults.watch),
        demo_backends=not getattr(args, "no_demo_backends", not defaults.demo_backends),
        root_namespaces=args.root_namespaces,
        disable_permit_insecure=args.disable_permit_insecure,
        ingress_class_name=args.ingress_class_name,
        routegroup_class=args.routegroup_class,
        fallback_certificate=args.fallback_certificate,
        enable_external_name_service=args.enable_external_name_service,
        gateway_controller_name=args.gateway_controller_name,
        num_trusted_hops=args.num_trusted_hops,
        system_ca_file=args.system_ca_file,
        node_id=getattr(args, "node_id", defaults.node_id),
        max_file_bytes=getattr(args, "max_file_bytes", defaults.max_file_bytes),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnout",
        description="A control plane that lets many teams share one Envoy-based ingress.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="compile routing files and program Envoy over xDS")
    _add_compile_flags(serve)
    _add_listen_flags(serve)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
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
        "--no-demo-backends",
        action="store_true",
        help="do not start echo backends for Services annotated turnout.dev/demo-echo",
    )
    serve.add_argument("--node-id", default="turnout-envoy", help="the child Envoy's node id")

    check = sub.add_parser("check", help="validate files and print every object's status")
    _add_compile_flags(check)
    _add_listen_flags(check)
    _add_discover_flags(check)
    check.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")

    explain = sub.add_parser("explain", help="show which route serves a request, and why")
    _add_compile_flags(explain)
    _add_listen_flags(explain)
    _add_discover_flags(explain)
    explain.add_argument("--host", required=True)
    explain.add_argument("--path", default="/")
    explain.add_argument("--method", default="GET")
    explain.add_argument(
        "-H", "--header", action="append", default=[], metavar="'Name: value'", dest="headers"
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
        "to equal --host)",
    )
    explain.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")

    boot = sub.add_parser("bootstrap", help="write the bootstrap for an external Envoy")
    boot.add_argument("output", nargs="?", default="-", help="file to write (default: stdout)")
    boot.add_argument("--xds-address", default="127.0.0.1")
    boot.add_argument("--xds-port", type=int, default=18000)
    boot.add_argument("--admin-address", default="127.0.0.1")
    boot.add_argument("--admin-port", type=int, default=9901)
    boot.add_argument("--node-id", default="turnout-envoy")
    boot.add_argument("-o", "--format", choices=["yaml", "json"], default="yaml")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: str = args.command
    if command == "serve":
        return _serve(args)
    if command == "check":
        return _check(args)
    if command == "explain":
        return _explain(args)
    return _bootstrap(args)


# -- compile from files ------------------------------------------------------------------------


def _load(
    paths: Sequence[Path],
    options: CompileOptions,
    discover_timeout_s: float | None = None,
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
    FileSource(list(paths), store, max_file_bytes=max_file_bytes).load_all()
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


def _check(args: argparse.Namespace) -> int:
    config = serve_config(args)
    result, error = _load(
        args.paths, app.compile_options(config), _discover_timeout(args), config.max_file_bytes
    )
    if result is None:
        print(f"turnout: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    unreadable = [p for p in result.problems if p.severity == "unreadable"]
    statuses = result.statuses
    if not args.discover:
        statuses = tuple(with_discover_hint(s, "check") for s in statuses)
    if args.output == "text":
        for status in statuses:
            print("\n".join(_status_lines(status)))
        for problem in result.problems:
            print(f"{problem}", file=sys.stderr)
    else:
        doc = {
            "objects": [thaw(DIALECTS.status_json(s)) for s in statuses],
            "problems": [p.to_json() for p in result.problems],
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
        return f"401 unless a valid JWT of issuer {jwt.issuer} (keys {jwt.jwks_uri}), then {rest}"
    action = route.action
    if isinstance(action, Forward):
        parts = [f"{c.cluster} (weight {c.weight})" for c in action.clusters]
        return "forward to " + ", ".join(parts)
    if isinstance(action, DirectResponse):
        return f"direct response {action.status}" + (f": {action.body}" if action.body else "")
    if isinstance(action, Redirect):
        return f"redirect {action.status}"
    return str(action)


def decision_json(decision: Decision) -> dict[str, Any]:
    route = decision.route
    return {
        "listener": decision.listener.name if decision.listener else None,
        "virtualHost": decision.virtual_host.hostname if decision.virtual_host else None,
        "route": str(route.source) if route else None,
        "action": _action_text(decision),
        "status": decision.status,
        "clusters": [{"name": n, "weight": w} for n, w in decision.clusters],
        "passedOver": [
            {"route": str(m.route.source), "reason": m.reason} for m in decision.passed_over
        ],
    }


def _explain(args: argparse.Namespace) -> int:
    headers = _parse_headers(args.headers)
    if isinstance(headers, str):
        print(f"turnout: {headers}", file=sys.stderr)
        return EXIT_UNREADABLE
    config = serve_config(args)
    result, error = _load(
        args.paths, app.compile_options(config), _discover_timeout(args), config.max_file_bytes
    )
    if result is None:
        print(f"turnout: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
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
    request = make_request(args.host, args.path, args.method, headers, listener=listener)
    decision = evaluate(result.graph, request)
    if args.output != "text":
        text = _dump(decision_json(decision), args.output)
        print(text, end="" if text.endswith("\n") else "\n")
        return EXIT_OK if decision.route else EXIT_INVALID
    served = next((lst for lst in result.graph.listeners if lst.name == listener), None)
    secure = args.https or (served is not None and served.protocol is not ListenerProtocol.HTTP)
    scheme = "https" if secure else "http"
    print(f"request: {request.method} {scheme}://{request.host}{request.path}")
    if decision.rejected_status is not None:
        print(f"action: {_action_text(decision)}")
        return EXIT_INVALID
    if decision.virtual_host is None:
        print("virtual host: none matches this host: 404")
        return EXIT_INVALID
    vh = decision.virtual_host
    print(f"virtual host: {vh.hostname} (owned by {vh.owner})")
    for miss in decision.passed_over:
        print(f"  passed over {miss.route.source}: {miss.reason}")
    if decision.route is not None:
        print(f"route: {decision.route.source}")
    print(f"action: {_action_text(decision)}")
    return EXIT_OK if decision.route else EXIT_INVALID


# -- bootstrap ---------------------------------------------------------------------------------


def _bootstrap(args: argparse.Namespace) -> int:
    from turnout.envoy.bootstrap import bootstrap_config

    config = bootstrap_config(
        xds_address=args.xds_address,
        xds_port=args.xds_port,
        admin_address=args.admin_address,
        admin_port=args.admin_port,
        node_id=args.node_id,
    )
    text = _dump(config, args.format)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return EXIT_OK


# -- serve -------------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"turnout: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return EXIT_UNREADABLE
    config = serve_config(args)
    busy = _busy_ports(config)
    if busy:
        for line in busy:
            print(f"turnout: cannot listen on {line}", file=sys.stderr)
        return EXIT_UNREADABLE
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(config))
    return EXIT_OK


def _busy_ports(config: ServeConfig) -> list[str]:
    """The ports turnout or its Envoy would fail to bind, checked up front so that a taken port
    is one clear line instead of a traceback or an Envoy that silently rejects its listener."""
    wanted = [("--admin-port", config.admin_port), ("--xds-port", config.xds_port)]
    if config.run_envoy:
        wanted += [
            ("--http-port", config.http_port),
            ("--https-port", config.https_port),
            ("--envoy-admin-port", config.envoy_admin_port),
        ]
    busy: list[str] = []
    for flag, port in wanted:
        if port == 0:
            continue
        with socket.socket(socket.AF_INET6 if ":" in config.address else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((config.address, port))
            except OSError as err:
                busy.append(f"{config.address}:{port} ({flag}): {err.strerror or err}")
    return busy


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
        await admin.start(config.address, config.admin_port)
        await controller.start()
        log.info(
            "turnout serving: HTTP on %s:%d, admin on %s:%d, xDS on %s:%d%s",
            config.address,
            config.http_port,
            config.address,
            config.admin_port,
            config.address,
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

"""Settings of a running turnout, as the CLI flags give them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from turnout.compile_inputs import (
    DEFAULT_GATEWAY_CONTROLLER_NAME,
    DEFAULT_SYSTEM_CA_FILE,
)
from turnout.sources.files import DEFAULT_MAX_FILE_BYTES


@dataclass(frozen=True, slots=True)
class ServeConfig:
    paths: tuple[Path, ...]
    address: str = "127.0.0.1"
    http_port: int = 8080
    https_port: int = 8443
    admin_port: int = 8001
    xds_port: int = 18000
    envoy_admin_port: int = 9901
    log_level: str = "info"
    # Envoy's own log level: its info-level startup dump would drown turnout's log.
    envoy_log_level: str = "warning"
    run_envoy: bool = True
    watch: bool = True
    demo_backends: bool = True
    root_namespaces: tuple[str, ...] = ()
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
    node_id: str = "turnout-envoy"
    # Where the child Envoy's bootstrap is written; a temporary directory when None.
    work_dir: Path | None = None
    debounce_ms: int = 100
    # The largest file the files source reads (--max-file-bytes); a larger one is a problem.
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    extra_envoy_args: tuple[str, ...] = field(default=())

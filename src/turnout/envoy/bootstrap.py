"""The Envoy v3 bootstrap that points an Envoy at turnout's ADS server.

Everything except the `turnout_xds` cluster and the admin interface comes over ADS, so the bootstrap
stays the same while the configuration changes. The dict is plain data (str/int/bool/list/dict)
so it can be written as YAML or JSON, and it passes `envoy --mode validate` on Envoy 1.40 without
deprecation warnings.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from turnout.envoy.stats import CONTROL_PLANE_CLUSTER, EnvoyStats, stats_config

XDS_CLUSTER = CONTROL_PLANE_CLUSTER
# `--xds-api`: the ADS variant Envoy speaks. Delta sends only what changed (the default); the
# State of the World resends every cluster and listener on each change.
XDS_APIS = ("delta", "sotw")
_API_TYPES = {"delta": "DELTA_GRPC", "sotw": "GRPC"}

_HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_DNS_CLUSTER = "type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster"
_DOWNSTREAM_CONNECTIONS = (
    "type.googleapis.com/"
    "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig"
)


# How fast Envoy reconnects to a control plane that went away: a turnout restarted after a crash
# is found within about a second (Envoy's default backoff grows to 30 s).
_XDS_RETRY = {"retry_back_off": {"base_interval": "0.25s", "max_interval": "1s"}}


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _socket_address(address: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": address, "port_value": port}}


def _admin(address: str, port: int, socket_path: Path | None) -> dict[str, Any]:
    if socket_path is None:
        return {"address": _socket_address(address, port)}
    # Only turnout's user may talk to it: the admin interface can stop Envoy and dump secrets.
    return {"address": {"pipe": {"path": str(socket_path), "mode": 0o600}}}


_UPSTREAM_TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
_SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
# The file-based SDS resources the xDS cluster's TLS reads (`xds_sds_files`).
XDS_CERTIFICATE_SDS = "xds-tls-certificate.yaml"
XDS_VALIDATION_SDS = "xds-validation-context.yaml"
_XDS_CERTIFICATE_SECRET = "turnout_xds_certificate"
_XDS_VALIDATION_SECRET = "turnout_xds_validation_context"


@dataclass(frozen=True, slots=True)
class XdsClientTls:
    """Envoy's side of mutual TLS to turnout's xDS server: the client certificate and key it
    presents, the CA turnout's certificate must chain to, the name that certificate must carry
    (sent as SNI too; "" checks the chain only), and the directory of the two SDS files
    (`xds_sds_files`) that name them. Paths as Envoy sees them."""

    cert: str
    key: str
    ca: str
    sds_dir: str
    server_name: str = ""


def xds_sds_files(tls: XdsClientTls) -> dict[str, dict[str, Any]]:
    """File name (in `tls.sds_dir`) → content of the SDS files the xDS cluster's TLS context
    loads. Through file-based SDS, unlike inline file names or static secrets, Envoy re-reads
    the certificate, key and CA when a file is moved into their directories: the rename of a
    rotation, or a Kubernetes Secret volume's `..data` swap. Envoys keep their xDS
    connection across a rotation and present the new certificate when they reconnect."""
    certificate = {
        "certificate_chain": {"filename": tls.cert},
        "private_key": {"filename": tls.key},
        "watched_directory": {"path": os.path.dirname(tls.cert) or "."},
    }
    validation: dict[str, Any] = {
        "trusted_ca": {"filename": tls.ca},
        "watched_directory": {"path": os.path.dirname(tls.ca) or "."},
    }
    if tls.server_name:
        validation["match_typed_subject_alt_names"] = [
            {"san_type": "DNS", "matcher": {"exact": tls.server_name}}
        ]
    return {
        XDS_CERTIFICATE_SDS: {
            "resources": [
                {"@type": _SECRET, "name": _XDS_CERTIFICATE_SECRET, "tls_certificate": certificate}
            ]
        },
        XDS_VALIDATION_SDS: {
            "resources": [
                {"@type": _SECRET, "name": _XDS_VALIDATION_SECRET, "validation_context": validation}
            ]
        },
    }


def _sds(name: str, tls: XdsClientTls, file: str) -> dict[str, Any]:
    path = os.path.join(tls.sds_dir, file)
    return {
        "name": name,
        "sds_config": {"path_config_source": {"path": path}, "resource_api_version": "V3"},
    }


def _xds_transport_socket(tls: XdsClientTls) -> dict[str, Any]:
    context: dict[str, Any] = {
        "@type": _UPSTREAM_TLS,
        "common_tls_context": {
            "tls_certificate_sds_secret_configs": [
                _sds(_XDS_CERTIFICATE_SECRET, tls, XDS_CERTIFICATE_SDS)
            ],
            "validation_context_sds_secret_config": _sds(
                _XDS_VALIDATION_SECRET, tls, XDS_VALIDATION_SDS
            ),
            # gRPC over TLS needs HTTP/2 chosen by ALPN.
            "alpn_protocols": ["h2"],
        },
    }
    if tls.server_name:
        context["sni"] = tls.server_name
    return {"name": "envoy.transport_sockets.tls", "typed_config": context}


def write_xds_sds_files(tls: XdsClientTls, directory: str | os.PathLike[str]) -> list[Path]:
    """Writes `xds_sds_files(tls)` into `directory`, each atomically (Envoy reloads an SDS file
    moved into place and must never read half of one)."""
    return [
        write_bootstrap(Path(directory) / name, doc) for name, doc in xds_sds_files(tls).items()
    ]


def _xds_cluster(address: str, port: int, tls: XdsClientTls | None = None) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": XDS_CLUSTER,
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": XDS_CLUSTER,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": _socket_address(address, port)}}]}
            ],
        },
        "typed_extension_protocol_options": {
            _HTTP_PROTOCOL_OPTIONS: {
                "@type": f"type.googleapis.com/{_HTTP_PROTOCOL_OPTIONS}",
                "explicit_http_config": {
                    "http2_protocol_options": {
                        # Pings detect a control plane that vanished without closing the
                        # connection (a partition, a killed pod); Envoy then reconnects.
                        "connection_keepalive": {"interval": "30s", "timeout": "10s"},
                    }
                },
            }
        },
    }
    if tls is not None:
        cluster["transport_socket"] = _xds_transport_socket(tls)
    if _is_ip(address):
        cluster["type"] = "STATIC"
    else:
        # The DNS cluster extension replaces LOGICAL_DNS plus the deprecated Cluster.dns_* fields.
        # V4_PREFERRED because "localhost" often resolves to ::1 first while servers bind 127.0.0.1.
        cluster["cluster_type"] = {
            "name": "envoy.cluster.dns",
            "typed_config": {
                "@type": _DNS_CLUSTER,
                "dns_lookup_family": "V4_PREFERRED",
                "all_addresses_in_single_endpoint": True,
            },
        }
    return cluster


def bootstrap_config(
    *,
    xds_address: str,
    xds_port: int,
    admin_address: str,
    admin_port: int,
    node_id: str,
    admin_socket: Path | None = None,
    node_cluster: str = "turnout",
    max_downstream_connections: int = 50_000,
    stats: EnvoyStats = EnvoyStats.TRIMMED,
    xds_tls: XdsClientTls | None = None,
    xds_api: str = "delta",
) -> dict[str, Any]:
    """An Envoy v3 bootstrap that takes listeners, clusters and everything they reference over
    one ADS stream to `xds_address:xds_port`: Delta xDS, or State of the World when `xds_api`
    is "sotw".

    Envoy's admin listens on the Unix socket `admin_socket` when given (turnout's own Envoy),
    else on `admin_address:admin_port` (an external Envoy's choice). With `xds_tls` the xDS
    connection is mutual TLS."""
    config: dict[str, Any] = {
        "node": {"id": node_id, "cluster": node_cluster},
        "admin": _admin(admin_address, admin_port, admin_socket),
        "dynamic_resources": {
            "ads_config": {
                "api_type": _API_TYPES[xds_api],
                "transport_api_version": "V3",
                "grpc_services": [
                    {"envoy_grpc": {"cluster_name": XDS_CLUSTER, "retry_policy": _XDS_RETRY}}
                ],
                # turnout reads the node from the first request of a stream; later requests
                # would only repeat it.
                "set_node_on_first_message_only": True,
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3"},
            "lds_config": {"ads": {}, "resource_api_version": "V3"},
        },
        "static_resources": {"clusters": [_xds_cluster(xds_address, xds_port, xds_tls)]},
        # An empty runtime layer stack makes Envoy log a warning about it; an admin layer lets
        # operators flip runtime flags through /runtime_modify when debugging.
        "layered_runtime": {"layers": [{"name": "admin", "admin_layer": {}}]},
        # Without a downstream connection limit Envoy warns at every start, and a flood of
        # connections could exhaust file descriptors for the whole process.
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": _DOWNSTREAM_CONNECTIONS,
                        "max_active_downstream_connections": max_downstream_connections,
                    },
                }
            ]
        },
    }
    matcher = stats_config(stats)
    if matcher is not None:
        config["stats_config"] = matcher
    return config


def bootstrap_yaml(config: dict[str, Any]) -> str:
    """The text `write_bootstrap` writes for `config`."""
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def write_bootstrap(path: str | os.PathLike[str], config: dict[str, Any]) -> Path:
    """Write `config` as YAML, atomically so a (re)starting Envoy never reads half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(bootstrap_yaml(config))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target

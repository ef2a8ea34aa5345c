"""Checks translated resources with the real Envoy binary (`envoy --mode validate`).

The translator emits dynamic resources (EDS clusters, RDS route tables, all over ADS); Envoy can
only validate a bootstrap, and a bootstrap referring to ADS needs a live server. So the resources
are rewritten here, never in the translator, into their static equivalents: each EDS cluster
becomes STATIC with its ClusterLoadAssignment inline, each HCM's `rds` becomes an inline
`route_config` (and its `scoped_rds` an inline list of its scopes, each with its route table),
and each TLS context's SDS reference loses its `sds_config`, so that it names a static secret
of the bootstrap instead (`static_resources.secrets`). Inline route tables also make Envoy check
that every route's cluster exists (`validate_clusters` defaults to true for them), which RDS
would not.

The bootstrap holds private keys: it lives only in a private temporary directory, and neither it
nor a key ever goes into a `ValidationResult` or a log line.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf import json_format

from turnout.envoy import process
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate.common import pack


@dataclass(frozen=True, slots=True)
class ValidationResult:
    ok: bool
    output: str  # Envoy's stderr and stdout, or why Envoy was not run
    returncode: int | None = None  # None when Envoy was not run

    @property
    def deprecation_warnings(self) -> tuple[str, ...]:
        return tuple(line for line in self.output.splitlines() if "deprecated" in line.lower())


class ConversionError(ValueError):
    """The resources cannot be made static, e.g. a listener names a route table that is missing."""


def envoy_binary() -> str | None:
    """The Envoy executable the control plane runs (`process.envoy_binary`), or None."""
    try:
        return process.envoy_binary()
    except process.EnvoyNotFoundError:
        return None


def static_bootstrap(resources: EnvoyResources) -> dict[str, Any]:
    """A bootstrap (as a JSON-ready dict) serving `resources` as static resources."""
    routes = {rc.name: rc for rc in resources.routes}
    scopes = tuple(resources.scoped_routes)
    assignments = {cla.cluster_name: cla for cla in resources.endpoints}
    secrets = {s.name for s in resources.secrets}
    static: dict[str, Any] = {
        "listeners": [
            _to_dict(_static_secrets(_inline_routes(lst, routes, scopes), secrets))
            for lst in resources.listeners
        ],
        "clusters": [_to_dict(_static_cluster(c, assignments)) for c in resources.clusters],
    }
    if resources.secrets:
        static["secrets"] = [_to_dict(s) for s in resources.secrets]
    return {"static_resources": static}


def validate_resources(
    resources: EnvoyResources, *, envoy: str | None = None, timeout_s: float = 60.0
) -> ValidationResult:
    """Runs `envoy --mode validate` on `static_bootstrap(resources)`."""
    binary = envoy or envoy_binary()
    if binary is None:
        return ValidationResult(ok=False, output="no envoy binary on PATH")
    try:
        bootstrap = static_bootstrap(resources)
    except ConversionError as e:
        return ValidationResult(ok=False, output=str(e))
    with tempfile.TemporaryDirectory(prefix="turnout-validate-") as tmp:
        path = Path(tmp) / "bootstrap.json"
        path.write_text(json.dumps(bootstrap, indent=1, sort_keys=True))
        proc = subprocess.run(
            [binary, "--mode", "validate", "-c", str(path), "--use-dynamic-base-id"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    return ValidationResult(
        ok=proc.returncode == 0,
        output=proc.stderr + proc.stdout,
        returncode=proc.returncode,
    )


def _to_dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


def _static_cluster(cluster: Any, assignments: dict[str, Any]) -> Any:
    out = cluster_pb2.Cluster()
    out.CopyFrom(cluster)
    if out.type != cluster_pb2.Cluster.EDS:
        return out
    service = out.eds_cluster_config.service_name or out.name
    out.ClearField("eds_cluster_config")
    out.type = cluster_pb2.Cluster.STATIC
    out.load_assignment.cluster_name = out.name
    if service in assignments:
        out.load_assignment.endpoints.extend(assignments[service].endpoints)
    return out


def _inline_routes(listener: Any, routes: dict[str, Any], scopes: tuple[Any, ...] = ()) -> Any:
    out = type(listener)()
    out.CopyFrom(listener)
    hcm_type = hcm_pb2.HttpConnectionManager.DESCRIPTOR.full_name
    for chain in out.filter_chains:
        for flt in chain.filters:
            if not flt.typed_config.Is(hcm_pb2.HttpConnectionManager.DESCRIPTOR):
                continue
            hcm = hcm_pb2.HttpConnectionManager()
            flt.typed_config.Unpack(hcm)
            if hcm.WhichOneof("route_specifier") == "scoped_routes":
                _inline_scopes(listener.name, hcm, routes, scopes)
                flt.typed_config.CopyFrom(pack(hcm))
                continue
            if hcm.WhichOneof("route_specifier") != "rds":
                continue
            name = hcm.rds.route_config_name
            if name not in routes:
                raise ConversionError(
                    f"listener {listener.name!r}: {hcm_type} refers to the missing route "
                    f"configuration {name!r}"
                )
            hcm.route_config.CopyFrom(routes[name])  # clears `rds` (same oneof)
            flt.typed_config.CopyFrom(pack(hcm))
    return out


def _inline_scopes(
    listener: str, hcm: Any, routes: dict[str, Any], scopes: tuple[Any, ...]
) -> None:
    """`hcm`'s scoped RDS replaced by its scopes, listed inline with their route tables. A
    listener's scopes are the ones named after it (`scoped_routes.scoped_route_name`)."""
    mine = [s for s in scopes if s.name.startswith(hcm.scoped_routes.name + "/")]
    inline = hcm.scoped_routes.scoped_route_configurations_list.scoped_route_configurations
    for scope in mine:
        name = scope.route_configuration_name
        if name not in routes:
            raise ConversionError(
                f"listener {listener!r}: scope {scope.name!r} refers to the missing route "
                f"configuration {name!r}"
            )
        entry = inline.add()
        entry.CopyFrom(scope)
        entry.ClearField("route_configuration_name")
        entry.route_configuration.CopyFrom(routes[name])


def _static_secrets(listener: Any, secrets: set[str]) -> Any:
    """`listener` with every downstream SDS reference pointing at a static secret."""
    out = type(listener)()
    out.CopyFrom(listener)
    for chain in out.filter_chains:
        socket = chain.transport_socket
        if not socket.typed_config.Is(tls_pb2.DownstreamTlsContext.DESCRIPTOR):
            continue
        ctx = tls_pb2.DownstreamTlsContext()
        socket.typed_config.Unpack(ctx)
        common = ctx.common_tls_context
        sds_configs = list(common.tls_certificate_sds_secret_configs)
        if common.HasField("validation_context_sds_secret_config"):
            sds_configs.append(common.validation_context_sds_secret_config)
        for sds in sds_configs:
            if sds.name not in secrets:
                raise ConversionError(
                    f"listener {listener.name!r}, filter chain {chain.name!r}: refers to the "
                    f"missing secret {sds.name!r}"
                )
            sds.ClearField("sds_config")
        socket.typed_config.CopyFrom(pack(ctx))
    return out

"""IngressRoute's upstream validation (seed 000 / Contour v1.0 `services[].validation`).

`validation: {caSecret, subjectName}` verifies a TLS upstream (a port the Service annotates
`upstream-protocol.tls` or `.h2`) against a CA bundle in the IngressRoute's own namespace (v1.0
had no cross-namespace reference) and one DNS subject name. The bundle is read by the shared
`CABundleResolver`; a Secret that is missing or not a CA bundle rejects the whole object, with
Contour v1.0's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnout.dialects.ingressroute.schema import SPEC
from turnout.dialects.openapi import known
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import UpstreamProtocol, UpstreamValidation
from turnout.graph.services import Unresolved

VALIDATION_FIELD = "validation"
_VALIDATION_FIELDS = known(SPEC, "spec.routes[].services[].validation")  # the CRD's table
TLS_UPSTREAM_VALIDATION = "TLSUpstreamValidation"
IGNORED_VALIDATION = "IgnoredField"

_PROTOCOLS = {"h2": UpstreamProtocol.H2, "h2c": UpstreamProtocol.H2C, "tls": UpstreamProtocol.TLS}
# Contour v1.0 read both prefixes, the newer one first.
_PROTOCOL_ANNOTATIONS = (
    "projectcontour.io/upstream-protocol.",
    "contour.heptio.com/upstream-protocol.",
)


class Reader(Protocol):
    def mapping(self, value: Any, path: str) -> Mapping[str, Any] | None: ...

    def check_fields(self, m: Mapping[str, Any], path: str, known: frozenset[str]) -> None: ...

    def string(self, m: Mapping[str, Any], key: str, path: str, required: bool = False) -> str: ...


@dataclass(frozen=True, slots=True)
class ValidationSpec:
    ca_secret: str
    subject_name: str
    field: str


def read_validation(r: Reader, m: Mapping[str, Any], path: str) -> ValidationSpec | None:
    if m.get(VALIDATION_FIELD) is None:
        return None
    where = f"{path}.{VALIDATION_FIELD}"
    v = r.mapping(m[VALIDATION_FIELD], where)
    if v is None:
        return None
    r.check_fields(v, where, _VALIDATION_FIELDS)
    return ValidationSpec(
        ca_secret=r.string(v, "caSecret", where, required=True),
        # Required: a CA alone would accept any certificate it ever signed.
        subject_name=r.string(v, "subjectName", where, required=True),
        field=where,
    )


def upstream_validation(
    spec: ValidationSpec,
    protocol: UpstreamProtocol,
    namespace: str,
    ca_bundles: CABundleResolver,
) -> UpstreamValidation | Unresolved | None:
    """The graph's validation; None when the protocol has no TLS to validate; Unresolved when
    the CA Secret cannot be used."""
    if protocol not in (UpstreamProtocol.TLS, UpstreamProtocol.H2):
        return None
    bundle = ca_bundles.ca_bundle(namespace, spec.ca_secret, for_namespace=namespace)
    if isinstance(bundle, Unresolved):
        return bundle
    return UpstreamValidation(ca_secret=bundle.name, subject_names=(spec.subject_name,))


def validation_error_message(route_match: str, service: str) -> str:
    """Contour v1.0's message (`internal/dag/builder.go`)."""
    return (
        f'route "{route_match}": service "{service}": upstreamValidation requested but secret '
        "not found or misconfigured"
    )


def annotated_protocol(
    annotations: Mapping[str, object], port_name: str, port: int
) -> UpstreamProtocol:
    """Contour's `upstream-protocol.{h2,h2c,tls}` Service annotations: each lists port names or
    numbers; a later protocol in that order wins for a port listed under several."""
    by_port: dict[str, UpstreamProtocol] = {}
    for name, protocol in _PROTOCOLS.items():
        for prefix in _PROTOCOL_ANNOTATIONS:
            value = annotations.get(prefix + name)
            if not isinstance(value, str):
                continue
            for item in value.split(","):
                if item.strip():
                    by_port[item.strip()] = protocol
    return by_port.get(port_name) or by_port.get(str(port)) or UpstreamProtocol.HTTP

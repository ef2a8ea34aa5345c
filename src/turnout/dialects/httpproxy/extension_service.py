"""Contour's ExtensionService (`projectcontour.io/v1alpha1`): an HTTP/2 upstream an HTTPProxy's
`virtualhost.authorization` points at, following Contour's `ExtensionServiceProcessor`.

Each one becomes one graph cluster (h2 over TLS by default, or h2c; with upstream validation
for h2) and a status in Contour's shape: one `Valid` condition with errors and warnings. Its
`services` must be in its own namespace (Contour's rule). Several services share one cluster:
their endpoints are pooled, so `weight` only decides whether a service takes part (0: not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.fields import FieldReader
from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.route_policies import timeout_setting
from turnout.dialects.httpproxy.status import ProxyStatusAccessor
from turnout.dialects.httpproxy.status_names import IGNORED_FIELD, SERVICE_ERROR, SPEC_ERROR
from turnout.dialects.httpproxy.upstream import (
    ValidationSpec,
    check_upstream_validation,
    read_validation,
)
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import (
    Cluster,
    Endpoint,
    LoadBalancerStrategy,
    UpstreamProtocol,
    UpstreamSettings,
    UpstreamValidation,
)
from turnout.graph.services import BackendResolver, Unresolved, is_external_name
from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot

EXTENSION_API_VERSION = "projectcontour.io/v1alpha1"
EXTENSION_KIND = "ExtensionService"

_FIELDS = frozenset(
    {
        "services",
        "protocol",
        "protocolVersion",
        "timeoutPolicy",
        "loadBalancerPolicy",
        "validation",
        "circuitBreakerPolicy",
    }
)
_IGNORED = frozenset({"circuitBreakerPolicy"})
_SERVICE_FIELDS = frozenset({"name", "port", "weight"})
_TIMEOUT_FIELDS = frozenset({"response", "idle", "idleConnection"})
_LB_FIELDS = frozenset({"strategy", "requestHashPolicies"})
_LB_STRATEGIES = {
    "": LoadBalancerStrategy.ROUND_ROBIN,
    "RoundRobin": LoadBalancerStrategy.ROUND_ROBIN,
    "WeightedLeastRequest": LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
    "Random": LoadBalancerStrategy.RANDOM,
}
_PROTOCOLS = {"h2": UpstreamProtocol.H2, "h2c": UpstreamProtocol.H2C}


@dataclass(frozen=True, slots=True)
class ExtensionTarget:
    name: str
    port: int
    weight: int


@dataclass(frozen=True, slots=True)
class ExtensionSpec:
    services: tuple[ExtensionTarget, ...]
    protocol: str = "h2"
    response_timeout: str = ""
    idle_timeout: str = ""
    lb_strategy: str = ""
    validation: ValidationSpec | None = None


class _Reader(FieldReader):
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def field_error(self, where: str, message: str) -> None:
        self.problems.append(Problem(SPEC_ERROR, "FieldNotValid", f"{where}: {message}"))

    def error(self, message: str, reason: str = "FieldNotValid") -> None:
        self.problems.append(Problem(SPEC_ERROR, reason, message))

    def mapping(self, value: Any, path: str) -> dict[str, Any] | None:
        if isinstance(value, Mapping):
            return dict(value)
        self.field_error(path, "must be an object")
        return None

    def ignored_field(self, where: str) -> None:
        self.problems.append(
            Problem(SPEC_ERROR, IGNORED_FIELD, f'ignoring field "{where}"', warning=True)
        )


def read_extension(obj: KubeObject) -> tuple[ExtensionSpec | None, list[Problem]]:
    """The spec as typed records and the CRD's own problems (types, enums, required fields)."""
    r = _Reader()
    spec = r.mapping(obj.spec if obj.spec is not None else {}, "spec")
    if spec is None:
        return None, r.problems
    r.check_fields(spec, "spec", _FIELDS - _IGNORED, _IGNORED)
    targets = [t for p, v in r.items(spec, "services", "spec") if (t := _target(r, v, p))]
    if not targets:
        r.field_error("spec.services", "must have at least 1 item")
    protocol = r.string(spec, "protocol", "spec") or "h2"
    if protocol not in _PROTOCOLS:
        r.field_error("spec.protocol", f'must be "h2" or "h2c", got "{protocol}"')
    version = r.string(spec, "protocolVersion", "spec")
    if version and version != "v3":
        r.field_error("spec.protocolVersion", f'must be "v3", got "{version}"')
    timeouts: Mapping[str, Any] = {}
    if spec.get("timeoutPolicy") is not None:
        timeouts = r.mapping(spec["timeoutPolicy"], "spec.timeoutPolicy") or {}
        r.check_fields(timeouts, "spec.timeoutPolicy", _TIMEOUT_FIELDS)
    strategy = ""
    if spec.get("loadBalancerPolicy") is not None:
        lb = r.mapping(spec["loadBalancerPolicy"], "spec.loadBalancerPolicy") or {}
        r.check_fields(lb, "spec.loadBalancerPolicy", _LB_FIELDS)
        strategy = r.string(lb, "strategy", "spec.loadBalancerPolicy")
    validation = None
    if spec.get("validation") is not None:
        validation = read_validation(r, spec["validation"], "spec.validation")
    return ExtensionSpec(
        services=tuple(targets),
        protocol=protocol,
        response_timeout=r.string(timeouts, "response", "spec.timeoutPolicy"),
        idle_timeout=r.string(timeouts, "idle", "spec.timeoutPolicy"),
        lb_strategy=strategy,
        validation=validation,
    ), r.problems


def _target(r: _Reader, value: Any, path: str) -> ExtensionTarget | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _SERVICE_FIELDS)
    name = r.string(m, "name", path, required=True)
    port = r.integer(m, "port", path, required=True)
    weight = r.integer(m, "weight", path) if m.get("weight") is not None else 1
    if port and not 1 <= port <= 65535:
        r.field_error(f"{path}.port", f"must be between 1 and 65535, got {port}")
        return None
    return ExtensionTarget(name, port, weight) if name and port else None


@dataclass(frozen=True, slots=True)
class ExtensionCluster:
    """A valid ExtensionService: its cluster and its default response timeout."""

    cluster: Cluster
    response_timeout_s: float | None


@dataclass
class ExtensionServices:
    """Every ExtensionService of a snapshot compiled: the valid ones by (namespace, name)."""

    valid: dict[tuple[str, str], ExtensionCluster]
    statuses: list[ObjectStatus]


def compile_extension_services(
    snapshot: Snapshot, backends: BackendResolver, ca_bundles: CABundleResolver
) -> ExtensionServices:
    out = ExtensionServices({}, [])
    for obj in snapshot.kind("projectcontour.io", EXTENSION_KIND):
        if obj.api_version != EXTENSION_API_VERSION:
            continue
        st = ProxyStatusAccessor(obj)
        spec, problems = read_extension(obj)
        for p in problems:
            st.add(p)
        built = (
            None if spec is None or st.has_errors else _build(obj, spec, backends, ca_bundles, st)
        )
        if built is not None and not st.has_errors:
            out.valid[(obj.namespace, obj.name)] = built
        out.statuses.append(st.build_extension())
    return out


def _build(
    obj: KubeObject,
    spec: ExtensionSpec,
    backends: BackendResolver,
    ca_bundles: CABundleResolver,
    st: ProxyStatusAccessor,
) -> ExtensionCluster | None:
    """Contour's `buildExtensionService`: its checks, in its order, with its reasons."""
    try:
        response = timeout_setting(spec.response_timeout)
        timeout_setting(spec.idle_timeout)
    except ValueError as err:
        st.add_error(
            SPEC_ERROR, "TimeoutPolicyNotValid", f"spec.timeoutPolicy failed to parse: {err}"
        )
        return None
    strategy = _LB_STRATEGIES.get(spec.lb_strategy)
    if strategy is None:
        st.add_warning(
            SPEC_ERROR,
            IGNORED_FIELD,
            f'ignoring field ".Spec.LoadBalancerPolicy"; {spec.lb_strategy} load balancer policy '
            "is not supported for ExtensionClusters",
        )
        strategy = LoadBalancerStrategy.ROUND_ROBIN
    if spec.idle_timeout:
        st.add_warning(
            SPEC_ERROR,
            IGNORED_FIELD,
            'ignoring field ".Spec.TimeoutPolicy.Idle"; idle timeouts are not supported for '
            "ExtensionClusters",
        )
    protocol = _PROTOCOLS.get(spec.protocol, UpstreamProtocol.H2)
    validation = _validation(obj, spec, protocol, ca_bundles, st)
    settings = UpstreamSettings(protocol=protocol, lb_strategy=strategy, validation=validation)
    clusters = _services(obj, spec, backends, settings, st)
    if st.has_errors or not clusters:
        return None
    if len(clusters) == 1:
        return ExtensionCluster(clusters[0], response)
    # The pooled cluster's endpoints are part of its identity: it depends on them.
    endpoints: tuple[Endpoint, ...] = tuple(ep for c in clusters for ep in backends.endpoints(c))
    pooled = backends.static(
        obj.namespace,
        f"extension/{obj.name}",
        clusters[0].port,
        endpoints=endpoints,
        settings=settings,
    )
    return ExtensionCluster(pooled, response)


def _validation(
    obj: KubeObject,
    spec: ExtensionSpec,
    protocol: UpstreamProtocol,
    ca_bundles: CABundleResolver,
    st: ProxyStatusAccessor,
) -> UpstreamValidation | None:
    if spec.validation is None:
        return None
    first = spec.services[0] if spec.services else ExtensionTarget("", 0, 0)
    checked = check_upstream_validation(
        spec.validation, first.name, first.port, ca_bundles, obj.namespace
    )
    if not isinstance(checked, UpstreamValidation):
        kind, reason, message = checked
        st.add_error(kind, reason, message)
        return None
    if protocol is not UpstreamProtocol.H2:
        st.add_error(
            SPEC_ERROR,
            "InconsistentProtocol",
            f'upstream TLS validation not supported for "{spec.protocol}" protocol',
        )
        return None
    # Contour defaults the SNI to the name it validates.
    return UpstreamValidation(
        ca_secret=checked.ca_secret,
        subject_names=checked.subject_names,
        sni=checked.subject_names[0],
    )


def _services(
    obj: KubeObject,
    spec: ExtensionSpec,
    backends: BackendResolver,
    settings: UpstreamSettings,
    st: ProxyStatusAccessor,
) -> list[Cluster]:
    out: list[Cluster] = []
    for target in spec.services:
        ref = f"{obj.namespace}/{target.name}"
        found = backends.service_port(obj.namespace, target.name, target.port)
        if not isinstance(found, Unresolved) and is_external_name(found[0]):
            st.add_error(
                SERVICE_ERROR,
                "UnsupportedServiceType",
                f'Service "{ref}" is of unsupported type "ExternalName".',
            )
            continue
        cluster = backends.service(obj.namespace, target.name, target.port, settings=settings)
        if isinstance(cluster, Unresolved):
            st.add_error(
                SERVICE_ERROR,
                "ServiceUnresolvedReference",
                f'unresolved service "{ref}": {cluster.message}',
            )
            continue
        if target.weight != 0:
            out.append(cluster)
    return out

"""Every Kubernetes resource turnout touches, and how: the one list that the informer, the status
writer, leader election and the RBAC manifests in `deploy/` are all derived from, so the verbs the
code uses and the verbs the ClusterRole grants cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

READ_VERBS: tuple[str, ...] = ("get", "list", "watch")
STATUS_VERBS: tuple[str, ...] = ("get", "patch", "update")
LEASE_VERBS: tuple[str, ...] = ("get", "create", "update")


@dataclass(frozen=True, slots=True)
class ApiResource:
    """One resource of the API: `group` is "" for the core API."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    # turnout writes this kind's /status subresource (only the leader does).
    writes_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def _r(group: str, version: str, kind: str, plural: str, **kw: bool) -> ApiResource:
    return ApiResource(group, version, kind, plural, **kw)


GATEWAY = "gateway.networking.k8s.io"

# What turnout reads. A kind whose API the server does not offer is skipped until it appears.
WATCHED: tuple[ApiResource, ...] = (
    _r("", "v1", "Service", "services"),
    _r("", "v1", "Secret", "secrets"),
    _r("", "v1", "ConfigMap", "configmaps"),
    _r("", "v1", "Namespace", "namespaces", namespaced=False),
    _r("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    _r("networking.k8s.io", "v1", "Ingress", "ingresses", writes_status=True),
    _r("networking.k8s.io", "v1", "IngressClass", "ingressclasses", namespaced=False),
    _r("projectcontour.io", "v1", "HTTPProxy", "httpproxies", writes_status=True),
    _r("projectcontour.io", "v1", "TLSCertificateDelegation", "tlscertificatedelegations"),
    _r(
        "projectcontour.io", "v1alpha1", "ExtensionService", "extensionservices", writes_status=True
    ),
    _r("contour.heptio.com", "v1beta1", "IngressRoute", "ingressroutes", writes_status=True),
    _r("contour.heptio.com", "v1beta1", "TLSCertificateDelegation", "tlscertificatedelegations"),
    _r("contour.heptio.com", "v1alpha1", "Route", "routes", writes_status=True),
    _r("zalando.org", "v1", "RouteGroup", "routegroups", writes_status=True),
    _r(GATEWAY, "v1", "GatewayClass", "gatewayclasses", namespaced=False, writes_status=True),
    _r(GATEWAY, "v1", "Gateway", "gateways", writes_status=True),
    _r(GATEWAY, "v1", "HTTPRoute", "httproutes", writes_status=True),
    _r(GATEWAY, "v1", "GRPCRoute", "grpcroutes", writes_status=True),
    _r(GATEWAY, "v1", "TLSRoute", "tlsroutes", writes_status=True),
    _r(GATEWAY, "v1alpha2", "TCPRoute", "tcproutes", writes_status=True),
    _r(GATEWAY, "v1beta1", "ReferenceGrant", "referencegrants"),
    _r(GATEWAY, "v1", "BackendTLSPolicy", "backendtlspolicies", writes_status=True),
)

LEASE = _r("coordination.k8s.io", "v1", "Lease", "leases")


def by_group_kind() -> Mapping[tuple[str, str], ApiResource]:
    return {(r.group, r.kind): r for r in WATCHED}


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rule of an RBAC (Cluster)Role."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    def manifest(self) -> dict[str, list[str]]:
        return {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }


def cluster_rules(resources: Iterable[ApiResource] = WATCHED) -> tuple[PolicyRule, ...]:
    """The ClusterRole: read every watched resource, write the status of those with one."""
    rules: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    for r in resources:
        rules.setdefault((r.group, READ_VERBS), set()).add(r.plural)
        if r.writes_status:
            rules.setdefault((r.group, STATUS_VERBS), set()).add(f"{r.plural}/status")
    return tuple(
        PolicyRule((group,), tuple(sorted(plurals)), verbs)
        for (group, verbs), plurals in sorted(rules.items())
    )


def lease_rules() -> tuple[PolicyRule, ...]:
    """The Role in the leader-election namespace."""
    return (PolicyRule((LEASE.group,), (LEASE.plural,), LEASE_VERBS),)

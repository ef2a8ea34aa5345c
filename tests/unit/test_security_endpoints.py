"""No tenant's backend may be Envoy's or turnout's own interfaces, whatever dialect routes to it:
EndpointSlices and Endpoints are tenant-written, so the graph checks every endpoint once the
compile's listeners are known (the security review's findings 1 and 2)."""

from __future__ import annotations

import pytest

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.graph.build import CompileResult
from turnout.graph.model import Cluster, Endpoint
from turnout.graph.services import forbidden_endpoint
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

ADMIN = CompileOptions(reserved_ports=((9901, "--envoy-admin-port"), (8001, "--admin-port")))


def _compile(text: str, options: CompileOptions = ADMIN) -> CompileResult:
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects), options)


def _service(name: str, address: str, port: int, *, slice_name: str | None = None) -> str:
    """A Service whose one endpoint is `address:port`, by EndpointSlice or by Endpoints."""
    head = f"""
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: team-b}}
spec: {{ports: [{{port: 80, name: http}}]}}
"""
    if slice_name is None:
        return (
            head
            + f"""
---
apiVersion: v1
kind: Endpoints
metadata: {{name: {name}, namespace: team-b}}
subsets: [{{addresses: [{{ip: "{address}"}}], ports: [{{port: {port}, name: http}}]}}]
"""
        )
    return (
        head
        + f"""
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice_name}
  namespace: team-b
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{port: {port}, name: http}}]
endpoints: [{{addresses: ["{address}"]}}]
"""
    )


def _httpproxy(service: str) -> str:
    return f"""
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: b, namespace: team-b}}
spec:
  virtualhost: {{fqdn: b.example.com}}
  routes: [{{services: [{{name: {service}, port: 80}}]}}]
"""


def _endpoints(result: CompileResult, service: str) -> tuple[Endpoint, ...]:
    clusters: list[Cluster] = [c for c in result.graph.clusters if c.service == service]
    assert len(clusters) == 1, result.graph.clusters
    return clusters[0].endpoints


def _errors(result: CompileResult) -> list[str]:
    return [str(p) for p in result.problems if p.severity == "error"]


def test_endpoint_slice_to_envoy_admin_is_left_out_and_reported() -> None:
    result = _compile(_service("adm", "127.0.0.1", 9901, slice_name="adm-x") + _httpproxy("adm"))
    assert _endpoints(result, "adm") == ()
    (error,) = _errors(result)
    assert "Service team-b/adm" in error
    assert "EndpointSlice team-b/adm-x" in error
    assert "127.0.0.1:9901" in error and "--envoy-admin-port" in error


def test_endpoints_at_cloud_metadata_are_left_out_on_any_port() -> None:
    result = _compile(_service("meta", "169.254.169.254", 80) + _httpproxy("meta"))
    assert _endpoints(result, "meta") == ()
    (error,) = _errors(result)
    assert "Endpoints team-b/meta" in error and "link-local" in error


@pytest.mark.parametrize(("port", "flag"), [(8080, "--http-port"), (8443, "--https-port")])
def test_own_listener_ports_are_reserved_without_being_listed(port: int, flag: str) -> None:
    """Re-entering the public listener from 127.0.0.1 would pass another tenant's source-address
    policy; the listener ports are reserved even when `reserved_ports` does not list them."""
    result = _compile(
        _service("self", "127.0.0.1", port, slice_name="self-x") + _httpproxy("self"),
        CompileOptions(),
    )
    assert _endpoints(result, "self") == ()
    (error,) = _errors(result)
    assert flag in error


def test_gateway_listener_ports_of_the_compile_are_reserved() -> None:
    gateway = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turnout}
spec: {controllerName: turnout.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: turnout
  listeners: [{name: web, port: 9090, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
"""
    text = gateway + _service("gwself", "127.0.0.1", 9090, slice_name="s") + _httpproxy("gwself")
    result = _compile(text)
    assert _endpoints(result, "gwself") == ()
    assert any("9090" in e and "listener" in e for e in _errors(result))
    # Without the Gateway, the same port is an ordinary loopback backend.
    plain = _compile(_service("gwself", "127.0.0.1", 9090, slice_name="s") + _httpproxy("gwself"))
    assert _endpoints(plain, "gwself") == (Endpoint("127.0.0.1", 9090, 0),)
    assert _errors(plain) == []


@pytest.mark.parametrize(
    ("address", "port"), [("127.0.0.1", 9000), ("10.0.0.9", 9901), ("10.0.0.9", 8080)]
)
def test_other_loopback_ports_and_other_hosts_stay_allowed(address: str, port: int) -> None:
    result = _compile(_service("ok", address, port, slice_name="ok") + _httpproxy("ok"))
    assert _endpoints(result, "ok") == (Endpoint(address, port, 0),)
    assert _errors(result) == []


def test_ingress_backends_are_checked_too() -> None:
    ingress = """
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i, namespace: team-b}
spec:
  ingressClassName: turnout
  rules:
  - host: i.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: adm, port: {number: 80}}}}]
"""
    result = _compile(_service("adm", "127.0.0.1", 9901) + ingress)
    assert _endpoints(result, "adm") == ()
    assert len(_errors(result)) == 1


def test_one_bad_endpoint_leaves_the_others() -> None:
    text = (
        _service("mix", "127.0.0.1", 9901, slice_name="mix")
        + """
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: mix-good, namespace: team-b, labels: {kubernetes.io/service-name: mix}}
addressType: IPv4
ports: [{port: 9901, name: http}]
endpoints: [{addresses: [10.0.0.7]}]
"""
        + _httpproxy("mix")
    )
    result = _compile(text)
    assert _endpoints(result, "mix") == (Endpoint("10.0.0.7", 9901, 0),)


@pytest.mark.parametrize(
    ("address", "port", "refused"),
    [
        ("127.0.0.1", 9901, True),
        ("127.8.8.8", 8001, True),
        ("::1", 9901, True),
        ("::ffff:127.0.0.1", 9901, True),
        ("0.0.0.0", 1234, True),
        ("::", 80, True),
        ("fe80::1", 80, True),
        ("::ffff:169.254.169.254", 80, True),
        ("192.0.2.1", 9901, True),  # turnout's own --address
        ("192.0.2.2", 9901, False),
        ("127.0.0.1", 9000, False),
    ],
)
def test_forbidden_endpoint(address: str, port: int, refused: bool) -> None:
    reserved = {9901: "--envoy-admin-port", 8001: "--admin-port"}
    assert (forbidden_endpoint(address, port, reserved, "192.0.2.1") is not None) is refused


def test_routegroup_loopback_keeps_envoys_own_listener() -> None:
    """turnout's own upstream (a `loopback` backend: the HTTP listener) is not a tenant's
    endpoint; while a tenant's `lb` endpoint at the same address and port is refused."""
    text = """
---
apiVersion: zalando.org/v1
kind: RouteGroup
metadata: {name: rg, namespace: team-b}
spec:
  hosts: [rg.example.com]
  backends:
  - {name: lo, type: loopback}
  - {name: self, type: lb, endpoints: ["http://127.0.0.1:8080"]}
  routes:
  - {pathSubtree: /, backends: [{backendName: lo}]}
  - {pathSubtree: /self, backends: [{backendName: self}]}
"""
    result = _compile(text, CompileOptions())
    (loopback,) = [c for c in result.graph.clusters if c.service == "loopback"]
    assert loopback.endpoints == (Endpoint("127.0.0.1", 8080, 0),)
    assert not [c for c in result.graph.clusters if c.service == "self"]
    (status,) = [s for s in result.statuses if s.ref.name == "rg"]
    assert "--http-port" in str(status.body)


def test_health_port_on_a_reserved_port_is_refused() -> None:
    text = """
---
apiVersion: v1
kind: Service
metadata: {name: hc, namespace: team-b}
spec: {ports: [{port: 80, name: http}, {port: 81, name: health}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: hc, namespace: team-b, labels: {kubernetes.io/service-name: hc}}
addressType: IPv4
ports: [{port: 9000, name: http}, {port: 9901, name: health}]
endpoints: [{addresses: [127.0.0.1]}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: b, namespace: team-b}
spec:
  virtualhost: {fqdn: b.example.com}
  routes:
  - services: [{name: hc, port: 80, healthPort: 81}]
    healthCheckPolicy: {path: /quitquitquit}
"""
    result = _compile(text)
    assert _endpoints(result, "hc") == ()
    assert any("--envoy-admin-port" in e for e in _errors(result))

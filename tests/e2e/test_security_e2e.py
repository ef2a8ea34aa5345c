"""Cross-tenant holes the security review found, closed, through the session's real Envoy:
tenant-written endpoints that point at Envoy's admin port or at turnout's own listener, and an
owned host falling to another namespace's catch-all."""

from __future__ import annotations

import ipaddress
import socket
import textwrap

import pytest

from tests.e2e.harness import Harness, service_yaml

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _httpproxy(name: str, namespace: str, fqdn: str, routes: str, created: str = "") -> str:
    ts = f', creationTimestamp: "{created}"' if created else ""
    return (
        "apiVersion: projectcontour.io/v1\n"
        "kind: HTTPProxy\n"
        f"metadata: {{name: {name}, namespace: {namespace}{ts}}}\n"
        "spec:\n"
        f"  virtualhost: {{fqdn: {fqdn}}}\n"
        "  routes:\n"
    ) + textwrap.indent(textwrap.dedent(routes), "  ")


async def test_endpoints_at_envoys_admin_or_own_listener_are_not_reachable(
    harness: Harness,
) -> None:
    config = harness.controller.config
    files = {
        "admin.yaml": service_yaml("team-b", "adm", 80, config.envoy_admin_port),
        "self.yaml": service_yaml("team-b", "self", 80, harness.http_port),
        "ok.yaml": await harness.services(("team-b", "ok")),
        "b.yaml": _httpproxy(
            "b",
            "team-b",
            "b.example.com",
            """\
            - conditions: [{prefix: /admin}]
              pathRewritePolicy: {replacePrefix: [{replacement: /}]}
              services: [{name: adm, port: 80}]
            - conditions: [{prefix: /self}]
              requestHeadersPolicy: {set: [{name: Host, value: ok.example.com}]}
              services: [{name: self, port: 80}]
            - services: [{name: ok, port: 80}]
            """,
        ),
    }
    await harness.apply(files)
    admin = await harness.get("b.example.com", "/admin/server_info")
    assert admin.status_code == 503, admin.text[:200]
    assert "command_line_options" not in admin.text
    quit = await harness.get("b.example.com", "/admin/quitquitquit", method="POST")
    assert quit.status_code == 503
    assert (await harness.get("b.example.com", "/self/x")).status_code == 503
    # Envoy still serves, and the Service with an ordinary endpoint is untouched.
    assert await harness.served_by("b.example.com", "/") == "team-b/ok"
    problems = [str(p) for p in harness.controller.applied_problems]
    assert any("team-b/adm" in p and "--envoy-admin-port" in p for p in problems), problems
    assert any("team-b/self" in p and "--http-port" in p for p in problems), problems


async def test_owned_host_never_falls_to_another_namespaces_catch_all(harness: Harness) -> None:
    catch_all = textwrap.dedent("""\
        apiVersion: networking.k8s.io/v1
        kind: Ingress
        metadata: {name: catch-all, namespace: team-b, creationTimestamp: "2024-01-01T00:00:00Z"}
        spec:
          ingressClassName: turnout
          defaultBackend: {service: {name: b, port: {number: 80}}}
        """)
    routes = "- services: [{name: a, port: 80}]\n"
    files = {
        "svc.yaml": await harness.services(("team-a", "a"), ("team-b", "b")),
        "broken.yaml": _httpproxy(
            "broken",
            "team-a",
            "broken.example.com",
            routes + "- conditions: [{prefix: nope}]\n  services: [{name: a, port: 80}]\n",
            created="2020-01-01T00:00:00Z",
        ),
        "good.yaml": _httpproxy(
            "good", "team-a", "good.example.com", routes, created="2020-01-01T00:00:00Z"
        ),
        "catch-all.yaml": catch_all,
    }
    await harness.apply(files)
    assert harness.status_of("HTTPProxy", "team-a", "broken")["currentStatus"] == "invalid"
    assert await harness.served_by("broken.example.com", "/", {"cookie": "s=a"}) == "404"
    assert await harness.served_by("good.example.com.", "/") == "team-a/a"
    assert await harness.served_by(f"good.example.com.:{harness.http_port}", "/") == "team-a/a"
    assert await harness.served_by("nobody.example.com", "/") == "team-b/b"


def _loopback_name() -> str:
    """A name this machine's resolver maps to loopback only and that is none of the `localhost`
    spellings turnout refuses by name (the host name, in /etc/hosts here)."""
    for name in (socket.gethostname(), "runsc", "ip6-localhost", "ip6-loopback"):
        try:
            found = {info[4][0] for info in socket.getaddrinfo(name, None)}
        except OSError:
            continue
        if found and all(ipaddress.ip_address(a).is_loopback for a in found):
            return name
    raise AssertionError("no name resolves to loopback on this machine")


async def test_dns_named_backend_leading_to_this_host_is_not_reachable(harness: Harness) -> None:
    """A RouteGroup `network` backend naming a host that resolves to 127.0.0.1 reaches neither
    Envoy's admin (a reserved port: refused whatever the name) nor, on another port, a server
    of this host (the controller resolved the name and refused it)."""
    name = _loopback_name()
    config = harness.controller.config
    echo = await harness.backend("team-b", "local")
    spec = textwrap.dedent(f"""\
        apiVersion: zalando.org/v1
        kind: RouteGroup
        metadata: {{name: dns, namespace: team-b}}
        spec:
          hosts: [dns.example.com]
          backends:
          - {{name: adm, type: network, address: "http://{name}:{config.envoy_admin_port}"}}
          - {{name: near, type: network, address: "http://{name}:{echo}"}}
          routes:
          - {{path: /server_info, backends: [{{backendName: adm}}]}}
          - {{pathSubtree: /, backends: [{{backendName: near}}]}}
        """)
    await harness.apply({"rg.yaml": spec})
    admin = await harness.get("dns.example.com", "/server_info")
    assert admin.status_code == 500, admin.text[:200]
    assert "command_line_options" not in admin.text
    near = await harness.get("dns.example.com", "/x")
    assert near.status_code == 503, near.text[:200]
    text = str(harness.status_of("RouteGroup", "team-b", "dns"))
    assert "--envoy-admin-port" in text
    assert f'"{name}" resolves to 127.0.0.1' in text

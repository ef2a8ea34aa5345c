"""Gateway-level behaviour of the Gateway API dialect through the real Envoy: listeners bind their
own ports, Programmed follows Envoy's ACK, a listener on turnout's --http-port is refused while
the other dialects keep that port, allowedRoutes and sectionName decide attachment, hostnames
intersect and listeners are isolated, HTTPS listeners terminate with their certificateRefs, TCP
listeners proxy streams."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.certs import CA, tls_secret_yaml
from tests.e2e.gateway_backends import GATEWAY_CLASS, docs, get_when_listening
from tests.e2e.harness import Harness, free_port
from tests.e2e.serve import copy_example, serving

# The sync `turnout serve` test below runs outside the session's event loop.
session_loop = pytest.mark.asyncio(loop_scope="session")


def gateway(name: str, namespace: str, listeners: str) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  gatewayClassName: turnout
  listeners:
{listeners}
"""


def http_route(
    name: str,
    namespace: str,
    parent: str,
    backend: str,
    *,
    hostnames: tuple[str, ...] = (),
    path: str = "/",
) -> str:
    hosts = f"  hostnames: [{', '.join(hostnames)}]\n" if hostnames else ""
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  parentRefs: [{parent}]
{hosts}  rules:
  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    backendRefs: [{{name: {backend}, port: 80}}]
"""


async def served_on(port: int, host: str, path: str = "/") -> str:
    r = await get_when_listening(port, host, path)
    if r.status_code != 200:
        return str(r.status_code)
    body = r.json()
    return f"{body['namespace']}/{body['service']}"


def condition(conditions: Any, type_: str) -> Mapping[str, Any]:
    for c in conditions:
        if c["type"] == type_:
            return dict(c)
    raise AssertionError(f"no {type_} condition in {conditions}")


def listener_status(status: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for lst in status["listeners"]:
        if lst["name"] == name:
            return dict(lst)
    raise AssertionError(f"no listener {name} in {status['listeners']}")


def route_parent_condition(status: Mapping[str, Any], type_: str, index: int = 0) -> Any:
    return condition(status["parents"][index]["conditions"], type_)


@session_loop
async def test_gateway_listener_serves_its_port_and_is_programmed_after_ack(
    harness: Harness,
) -> None:
    port = free_port()
    services = await harness.services(("app", "web"))
    listeners = f"""  - name: http
    port: {port}
    protocol: HTTP
    allowedRoutes: {{namespaces: {{from: All}}}}"""
    await harness.apply(
        {
            "gw.yaml": docs(
                GATEWAY_CLASS,
                gateway("gw", "infra", listeners),
                http_route("web", "app", "{name: gw, namespace: infra}", "web"),
            ),
            "svc.yaml": services,
        }
    )
    assert await served_on(port, "anything.example.com", "/x") == "app/web"
    # The shared HTTP port knows nothing of Gateway routes.
    assert (await harness.get("anything.example.com", "/x")).status_code == 404

    status = harness.status_of("Gateway", "infra", "gw")
    assert condition(status["conditions"], "Accepted")["status"] == "True"
    programmed = condition(status["conditions"], "Programmed")
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed")
    http = listener_status(status, "http")
    assert condition(http["conditions"], "Programmed")["status"] == "True"
    assert http["attachedRoutes"] == 1
    assert status["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]
    # Straight from the compile (no Envoy involved) the same Gateway is still Pending.
    compiled = next(
        s.body
        for s in harness.controller.applied.result.statuses  # type: ignore[union-attr]
        if s.ref.kind == "Gateway" and s.ref.name == "gw"
    )
    pending = condition(compiled["conditions"], "Programmed")
    assert (pending["status"], pending["reason"]) == ("False", "Pending")
    route = harness.status_of("HTTPRoute", "app", "web")
    assert route["parents"][0]["parentRef"] == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": "infra",
        "name": "gw",
    }
    assert route_parent_condition(route, "Accepted")["status"] == "True"


@session_loop
async def test_listener_on_the_default_http_port_is_refused_and_ingress_keeps_it(
    harness: Harness,
) -> None:
    port = free_port()
    services = await harness.services(("app", "web"), ("app", "legacy"))
    listeners = f"""  - name: clash
    port: {harness.http_port}
    protocol: HTTP
  - name: own
    port: {port}
    protocol: HTTP"""
    proxy = """
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: legacy, namespace: app}
spec:
  virtualhost: {fqdn: shared.example.com}
  routes: [{services: [{name: legacy, port: 80}]}]
"""
    await harness.apply(
        {
            "gw.yaml": docs(
                GATEWAY_CLASS,
                gateway("gw", "app", listeners),
                http_route("web", "app", "{name: gw}", "web", hostnames=("shared.example.com",)),
                proxy,
            ),
            "svc.yaml": services,
        }
    )
    status = harness.status_of("Gateway", "app", "gw")
    clash = listener_status(status, "clash")
    accepted = condition(clash["conditions"], "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "PortUnavailable")
    assert "--http-port" in accepted["message"]
    assert condition(clash["conditions"], "Programmed")["status"] == "False"
    gw_accepted = condition(status["conditions"], "Accepted")
    assert (gw_accepted["status"], gw_accepted["reason"]) == ("True", "ListenersNotValid")
    # The same hostname on separate ports does not interact: HTTPProxy owns it on the default
    # port, the HTTPRoute serves it on the Gateway's own port.
    assert await harness.served_by("shared.example.com") == "app/legacy"
    assert await served_on(port, "shared.example.com") == "app/web"


@session_loop
async def test_allowed_routes_and_section_name_decide_attachment(harness: Harness) -> None:
    port = free_port()
    services = await harness.services(("infra", "same"), ("team", "other"), ("labelled", "sel"))
    listeners = f"""  - name: same
    port: {port}
    protocol: HTTP
    hostname: same.example.com
  - name: selected
    port: {port}
    protocol: HTTP
    hostname: selected.example.com
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {{matchLabels: {{gateway-access: "yes"}}}}"""
    namespaces = """
apiVersion: v1
kind: Namespace
metadata: {name: labelled, labels: {gateway-access: "yes"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
"""
    await harness.apply(
        {
            "gw.yaml": docs(
                GATEWAY_CLASS,
                namespaces,
                gateway("gw", "infra", listeners),
                http_route("same", "infra", "{name: gw}", "same"),
                http_route("other", "team", "{name: gw, namespace: infra}", "other"),
                http_route("sel", "labelled", "{name: gw, namespace: infra}", "sel"),
                http_route(
                    "wrong-section",
                    "infra",
                    "{name: gw, sectionName: missing}",
                    "same",
                    path="/wrong",
                ),
            ),
            "svc.yaml": services,
        }
    )
    assert await served_on(port, "same.example.com") == "infra/same"
    assert await served_on(port, "selected.example.com") == "labelled/sel"
    # The route from `team` attached nowhere: no listener admits its namespace.
    other = harness.status_of("HTTPRoute", "team", "other")
    accepted = route_parent_condition(other, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "NotAllowedByListeners")
    wrong = harness.status_of("HTTPRoute", "infra", "wrong-section")
    accepted = route_parent_condition(wrong, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "NoMatchingParent")
    assert await served_on(port, "same.example.com", "/wrong") == "infra/same"  # its own / rule
    status = harness.status_of("Gateway", "infra", "gw")
    assert listener_status(status, "same")["attachedRoutes"] == 1
    assert listener_status(status, "selected")["attachedRoutes"] == 1


@session_loop
async def test_hostnames_intersect_and_listeners_are_isolated(harness: Harness) -> None:
    port = free_port()
    services = await harness.services(("app", "wild"), ("app", "specific"))
    listeners = f"""  - name: wildcard
    port: {port}
    protocol: HTTP
    hostname: "*.example.com"
  - name: specific
    port: {port}
    protocol: HTTP
    hostname: specific.example.com"""
    await harness.apply(
        {
            "gw.yaml": docs(
                GATEWAY_CLASS,
                gateway("gw", "app", listeners),
                # Only www.example.com and deep.sub.example.com intersect *.example.com.
                http_route(
                    "wild",
                    "app",
                    "{name: gw, sectionName: wildcard}",
                    "wild",
                    hostnames=("www.example.com", "www.example.net", '"*.sub.example.com"'),
                ),
                http_route(
                    "specific",
                    "app",
                    "{name: gw, sectionName: specific}",
                    "specific",
                    path="/only",
                ),
                http_route(
                    "nowhere",
                    "app",
                    "{name: gw, sectionName: specific}",
                    "specific",
                    hostnames=("other.example.org",),
                ),
            ),
            "svc.yaml": services,
        }
    )
    assert await served_on(port, "www.example.com") == "app/wild"
    assert await served_on(port, "deep.sub.example.com:1234") == "app/wild"
    assert await served_on(port, "www.example.net") == "404"
    assert await served_on(port, "specific.example.com", "/only") == "app/specific"
    # The request belongs to the most specific listener; its routes do not match: 404, not the
    # wildcard listener's route.
    assert await served_on(port, "specific.example.com", "/elsewhere") == "404"
    nowhere = harness.status_of("HTTPRoute", "app", "nowhere")
    accepted = route_parent_condition(nowhere, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "NoMatchingListenerHostname")


@session_loop
async def test_https_listener_terminates_with_its_certificate_ref(harness: Harness) -> None:
    port = free_port()
    ca = CA()
    issued = ca.issue("secure.example.com")
    services = await harness.services(("app", "web"))
    listeners = f"""  - name: https
    port: {port}
    protocol: HTTPS
    hostname: secure.example.com
    tls:
      certificateRefs: [{{name: cert}}]
  - name: foreign
    port: {port}
    protocol: HTTPS
    hostname: foreign.example.com
    tls:
      certificateRefs: [{{name: cert, namespace: elsewhere}}]"""
    objects = (
        GATEWAY_CLASS,
        gateway("gw", "app", listeners),
        http_route("web", "app", "{name: gw}", "web"),
        tls_secret_yaml("app", "cert", issued.cert_pem, issued.key_pem),
        tls_secret_yaml("elsewhere", "cert", issued.cert_pem, issued.key_pem),
    )
    await harness.apply({"gw.yaml": docs(*objects), "svc.yaml": services})
    status = harness.status_of("Gateway", "app", "gw")
    foreign = listener_status(status, "foreign")
    resolved = condition(foreign["conditions"], "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "RefNotPermitted")
    assert condition(listener_status(status, "https")["conditions"], "Programmed")["status"] == (
        "True"
    )
    context = ca.client_context()
    url = f"https://127.0.0.1:{port}/"
    async with httpx.AsyncClient(verify=context, timeout=5.0) as client:
        for attempt in range(50):
            try:
                r = await client.get(
                    url,
                    headers={"Host": "secure.example.com"},
                    extensions={"sni_hostname": "secure.example.com"},
                )
                break
            except httpx.ConnectError:
                if attempt == 49:
                    raise
                await asyncio.sleep(0.1)
    assert r.status_code == 200
    assert r.json()["service"] == "web"
    # No chain serves the listener whose certificate was refused.
    with pytest.raises((httpx.ConnectError, ssl.SSLError)):
        async with httpx.AsyncClient(verify=context, timeout=5.0) as client:
            await client.get(
                url,
                headers={"Host": "foreign.example.com"},
                extensions={"sni_hostname": "foreign.example.com"},
            )
    # A ReferenceGrant in the Secret's namespace lets the listener use it.
    grant = """
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: gateways, namespace: elsewhere}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: app}]
  to: [{group: "", kind: Secret}]
"""
    await harness.apply({"gw.yaml": docs(*objects, grant), "svc.yaml": services})
    foreign = listener_status(harness.status_of("Gateway", "app", "gw"), "foreign")
    assert condition(foreign["conditions"], "ResolvedRefs")["status"] == "True"


def tcp_listener(port: int) -> str:
    return f"""  - name: tcp
    port: {port}
    protocol: TCP"""


# A TCPRoute on the Gateway `app/gw` to the echo Service `app/stream`.
STREAM_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: stream, namespace: app}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: stream, port: 80}]}]
"""


@session_loop
async def test_tcp_listener_proxies_connections(harness: Harness) -> None:
    port = free_port()
    services = await harness.services(("app", "stream"))
    listeners = tcp_listener(port)
    await harness.apply(
        {
            "gw.yaml": docs(GATEWAY_CLASS, gateway("gw", "app", listeners), STREAM_ROUTE),
            "svc.yaml": services,
        }
    )
    # The echo backend speaks HTTP; through a TCP proxy it answers as itself, whatever the Host.
    assert await served_on(port, "any.host") == "app/stream"
    status = harness.status_of("Gateway", "app", "gw")
    assert listener_status(status, "tcp")["attachedRoutes"] == 1


@session_loop
async def test_empty_tcp_gateway_is_programmed_then_routes_attach(harness: Harness) -> None:
    """Upstream's "wait for Programmed, then add routes" (NamespacesMustBeReady) for a TCP
    Gateway: with no route it has no Envoy listener, Programmed True once Envoy acknowledged
    that (its port refuses connections); a TCPRoute added afterwards is served."""
    port = free_port()
    services = await harness.services(("app", "stream"))
    listeners = tcp_listener(port)
    files = {"gw.yaml": docs(GATEWAY_CLASS, gateway("gw", "app", listeners)), "svc.yaml": services}
    await harness.apply(files)

    async def programmed() -> tuple[str, str]:
        c = condition(harness.status_of("Gateway", "app", "gw")["conditions"], "Programmed")
        return c["status"], c["reason"]

    assert await harness.eventually(programmed, ("True", "Programmed")) == ("True", "Programmed")
    status = harness.status_of("Gateway", "app", "gw")
    tcp = condition(listener_status(status, "tcp")["conditions"], "Programmed")
    assert (tcp["status"], tcp["reason"]) == ("True", "Programmed")
    assert "port stays closed until a route attaches" in tcp["message"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
    files["gw.yaml"] = docs(GATEWAY_CLASS, gateway("gw", "app", listeners), STREAM_ROUTE)
    await harness.apply(files)
    assert await served_on(port, "any.host") == "app/stream"
    assert await harness.eventually(programmed, ("True", "Programmed")) == ("True", "Programmed")


def test_turnout_serve_routes_the_gateway_api_example(tmp_path: Path) -> None:
    """`turnout serve examples/gateway-api` as a user runs it: GatewayClass, Gateway, HTTPRoute
    and demo Services, through turnout's own Envoy, with Programmed in /status after the ACK."""
    # The example's Gateway listens on 8081; a free port instead, so tests never collide.
    gateway_port = free_port()
    example = copy_example(
        "gateway-api", tmp_path, ["services.yaml", "gateway.yaml"], ["9201", "9202", "9203"]
    )
    gateway_file = example / "gateway.yaml"
    gateway_file.write_text(gateway_file.read_text().replace("port: 8081", f"port: {gateway_port}"))
    admin_port = free_port()
    with serving(example, free_port(), admin_port):
        admin = f"http://127.0.0.1:{admin_port}"
        base = f"http://127.0.0.1:{gateway_port}"
        host = {"Host": "shop.gateway.local"}
        r = httpx.get(f"{base}/", headers=host)
        assert r.status_code == 200 and r.json()["service"] == "web"
        r = httpx.get(f"{base}/api/items", headers={**host, "x-canary": "true"})
        assert (r.json()["namespace"], r.json()["service"]) == ("store", "api-canary")
        assert httpx.get(f"{base}/", headers={"Host": "other.example.com"}).status_code == 404
        objects = httpx.get(f"{admin}/status").json()["objects"]
        gw = next(o for o in objects if o["kind"] == "Gateway")
        assert condition(gw["status"]["conditions"], "Programmed")["status"] == "True"
        route = next(o for o in objects if o["kind"] == "HTTPRoute")
        assert route_parent_condition(route["status"], "Accepted")["status"] == "True"
        metrics = httpx.get(f"{admin}/metrics").text
        assert 'turnout_gateways{programmed="True"} 1.0' in metrics
        assert 'turnout_gateways{programmed="False"} 0.0' in metrics


@session_loop
async def test_listener_envoy_cannot_bind_is_invalid_and_the_rest_programmed(
    harness: Harness,
) -> None:
    """Envoy rejects a listener whose port another process holds and adds the others: that
    listener is Programmed False (Invalid, Envoy's message), the Gateway says which listener
    failed, another Gateway is Programmed, and the Gateway's other port serves."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    good, other = free_port(), free_port()
    services = await harness.services(("app", "web"))
    listeners = f"""  - name: busy
    port: {busy}
    protocol: HTTP
  - name: good
    port: {good}
    protocol: HTTP"""
    other_listener = f"""  - name: web
    port: {other}
    protocol: HTTP"""
    try:
        harness.write(
            {
                "gw.yaml": docs(
                    GATEWAY_CLASS,
                    gateway("gw", "app", listeners),
                    gateway("other", "app", other_listener),
                    http_route("web", "app", "{name: gw}", "web"),
                    http_route("other", "app", "{name: other}", "web"),
                ),
                "svc.yaml": services,
            }
        )
        applied = await harness.controller.reload()
        assert applied is not None

        def programmed(gateway_name: str) -> tuple[str, str]:
            status = harness.status_of("Gateway", "app", gateway_name)
            c = condition(status["conditions"], "Programmed")
            return c["status"], c["reason"]

        async def settled() -> tuple[tuple[str, str], tuple[str, str]]:
            return programmed("gw"), programmed("other")

        expected = (("False", "Invalid"), ("True", "Programmed"))
        assert await harness.eventually(settled, expected) == expected
        status = harness.status_of("Gateway", "app", "gw")
        refused = condition(listener_status(status, "busy")["conditions"], "Programmed")
        assert (refused["status"], refused["reason"]) == ("False", "Invalid")
        assert f"gateway_{busy}" in refused["message"]
        assert "Address already in use" in refused["message"]
        assert refused["message"] in condition(status["conditions"], "Programmed")["message"]
        fine = condition(listener_status(status, "good")["conditions"], "Programmed")
        assert (fine["status"], fine["reason"]) == ("True", "Programmed")
        assert await served_on(good, "a.example.com") == "app/web"
        assert await served_on(other, "a.example.com") == "app/web"

        async def ready() -> bool:
            return harness.controller.readiness()[0]

        # Reported on the Gateway listener, the rejection does not fail /readyz for everyone.
        assert await harness.eventually(ready, True), harness.controller.readiness()[1]
        assert f"except listener(s) gateway_{busy}" in harness.controller.readiness()[1]
    finally:
        holder.close()

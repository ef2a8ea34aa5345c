"""`turnout serve --kubernetes --kubeconfig ...` against the fake API server, through its own
Envoy: objects created through the API become routes (HTTPProxy, Ingress, HTTPRoute on a Gateway,
RouteGroup), updates and deletions apply, and watch drops and 410s mid-run lose nothing."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.gateway_backends import GATEWAY_CLASS
from tests.e2e.harness import free_port, service_yaml
from tests.e2e.serve import start_serve, stop_serve, wait_ready
from tests.fake_apiserver import FakeApiServer

NS = "kube-e2e"


@dataclass(frozen=True)
class Running:
    fake: FakeApiServer
    http_port: int
    gateway_port: int
    admin: str


def _create_all(fake: FakeApiServer, text: str) -> None:
    for doc in yaml.safe_load_all(text):
        if doc:
            fake.create(doc, keep_status=False)


def _demo_service(name: str) -> str:
    # The demo-echo annotation makes `serve` start an echo backend on the endpoint.
    text = service_yaml(NS, name, 80, free_port())
    return text.replace(
        f"name: {name}\n  namespace: {NS}\n",
        f"name: {name}\n  namespace: {NS}\n  annotations: {{turnout.dev/demo-echo: 'true'}}\n",
        1,
    )


def _proxy(fqdn: str, service: str, prefix: str = "/") -> dict[str, Any]:
    return {
        "apiVersion": "projectcontour.io/v1",
        "kind": "HTTPProxy",
        "metadata": {"name": "proxy", "namespace": NS},
        "spec": {
            "virtualhost": {"fqdn": fqdn},
            "routes": [
                {"conditions": [{"prefix": prefix}], "services": [{"name": service, "port": 80}]}
            ],
        },
    }


def _ingress(name: str, host: str, service: str) -> dict[str, Any]:
    backend = {"service": {"name": service, "port": {"number": 80}}}
    path = {"path": "/", "pathType": "Prefix", "backend": backend}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "ingressClassName": "turnout",
            "rules": [{"host": host, "http": {"paths": [path]}}],
        },
    }


def _gateway_objects(port: int) -> str:
    return f"""
{GATEWAY_CLASS}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {NS}}}
spec:
  gatewayClassName: turnout
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: route, namespace: {NS}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [route.kube.test]
  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]
---
apiVersion: zalando.org/v1
kind: RouteGroup
metadata: {{name: rg, namespace: {NS}}}
spec:
  hosts: [rg.kube.test]
  backends: [{{name: app, type: service, serviceName: api, servicePort: 80}}]
  defaultBackends: [{{backendName: app}}]
  routes: [{{pathSubtree: /}}]
"""


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("kube")
    with FakeApiServer(bookmark_interval=0.5) as fake:
        _create_all(fake, _demo_service("web") + "---\n" + _demo_service("api"))
        http_port, admin_port, gateway_port = free_port(), free_port(), free_port()
        _create_all(fake, _gateway_objects(gateway_port))
        fake.create(_proxy("proxy.kube.test", "web"), keep_status=False)
        fake.create(_ingress("ing", "ingress.kube.test", "api"), keep_status=False)
        kubeconfig = fake.kubeconfig(tmp / "kubeconfig")
        with tempfile.TemporaryDirectory(prefix="turnout-e2e-") as state_dir:
            proc = start_serve(
                None,
                http_port,
                admin_port,
                state_dir=Path(state_dir),
                extra=["--kubernetes", "--kubeconfig", str(kubeconfig)],
            )
            admin = f"http://127.0.0.1:{admin_port}"
            try:
                wait_ready(admin, proc)
                yield Running(fake, http_port, gateway_port, admin)
            finally:
                output = stop_serve(proc)
            assert proc.returncode == 0, output


def answer(port: int, host: str, path: str = "/") -> str:
    """Who answers: `namespace/service` of the echo backend, or the status code."""
    try:
        r = httpx.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host}, timeout=2.0)
    except httpx.HTTPError as err:
        return type(err).__name__
    if r.status_code != 200:
        return str(r.status_code)
    return f"{r.json()['namespace']}/{r.json()['service']}"


def eventually(probe: Callable[[], str], expected: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    seen = probe()
    while seen != expected:
        assert time.monotonic() < deadline, f"expected {expected}, still {seen}"
        time.sleep(0.1)
        seen = probe()


def test_every_dialect_is_served_from_the_api_server(running: Running) -> None:
    port = running.http_port
    eventually(lambda: answer(port, "proxy.kube.test"), f"{NS}/web")
    eventually(lambda: answer(port, "ingress.kube.test"), f"{NS}/api")
    eventually(lambda: answer(port, "rg.kube.test"), f"{NS}/api")
    eventually(lambda: answer(running.gateway_port, "route.kube.test"), f"{NS}/web")
    status = httpx.get(f"{running.admin}/status").json()
    origins = {o["metadata"]["name"]: o.get("source", {}).get("file") for o in status["objects"]}
    assert origins["proxy"] == f"k8s://HTTPProxy/{NS}/proxy"


def test_updates_and_deletions_apply(running: Running) -> None:
    port, fake = running.http_port, running.fake
    fake.apply(_proxy("proxy.kube.test", "api"))
    eventually(lambda: answer(port, "proxy.kube.test"), f"{NS}/api")
    fake.create(_ingress("doomed", "doomed.kube.test", "web"))
    eventually(lambda: answer(port, "doomed.kube.test"), f"{NS}/web")
    fake.delete("networking.k8s.io/v1", "Ingress", "doomed", NS)
    eventually(lambda: answer(port, "doomed.kube.test"), "404")


def test_watch_drops_and_410_lose_nothing(running: Running) -> None:
    port, fake = running.http_port, running.fake
    fake.create(_ingress("before-drop", "drop.kube.test", "web"))
    assert fake.drop_watches(abort=True) > 0
    fake.create(_ingress("after-drop", "after-drop.kube.test", "api"))
    eventually(lambda: answer(port, "drop.kube.test"), f"{NS}/web")
    eventually(lambda: answer(port, "after-drop.kube.test"), f"{NS}/api")
    # Cut off while objects change, then the versions it knew are compacted: a 410 and a relist.
    fake.set_available(False)
    fake.delete("networking.k8s.io/v1", "Ingress", "before-drop", NS)
    fake.create(_ingress("during-outage", "outage.kube.test", "web"))
    fake.compact()
    fake.set_available(True)
    eventually(lambda: answer(port, "outage.kube.test"), f"{NS}/web")
    eventually(lambda: answer(port, "drop.kube.test"), "404")
    eventually(lambda: answer(port, "after-drop.kube.test"), f"{NS}/api")
    assert httpx.get(f"{running.admin}/readyz").status_code == 200


def test_not_ready_until_the_api_server_was_listed(tmp_path: Path) -> None:
    with FakeApiServer() as fake, tempfile.TemporaryDirectory(prefix="turnout-e2e-") as state:
        fake.set_available(False)
        http_port, admin_port = free_port(), free_port()
        proc = start_serve(
            None,
            http_port,
            admin_port,
            state_dir=Path(state),
            extra=["--kubernetes", "--kubeconfig", str(fake.kubeconfig(tmp_path / "kc"))],
        )
        admin = f"http://127.0.0.1:{admin_port}"
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    r = httpx.get(f"{admin}/readyz", timeout=1.0)
                    if r.status_code == 503 and f"kubernetes {fake.url}" in r.text:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "readyz never named the source"
                time.sleep(0.2)
            fake.set_available(True)
            wait_ready(admin, proc)
        finally:
            output = stop_serve(proc)
        assert proc.returncode == 0, output

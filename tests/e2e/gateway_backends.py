"""Gateway API objects and clients shared by the end-to-end tests of Gateway backends: a Gateway
`infra/gw` whose listeners take routes from every namespace, an HTTPRoute `apps/web`, a
BackendTLSPolicy `apps/secure`, and a GET that waits for a listener still binding."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx

from tests.e2e.harness import Harness

GATEWAY_CLASS = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: turnout
spec:
  controllerName: turnout.dev/gateway-controller
"""


def docs(*parts: str) -> str:
    """One YAML file of the documents `parts`."""
    return "\n---\n".join(p.strip("\n") for p in parts) + "\n"


def gateway(*listeners: str) -> str:
    """The GatewayClass `turnout` and the Gateway `infra/gw` with `listeners`."""
    body = "".join(listeners)
    return f"""\
{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: infra
spec:
  gatewayClassName: turnout
  listeners:
{body}"""


def listener(name: str, port: int, protocol: str, extra: str = "") -> str:
    return f"""\
    - name: {name}
      port: {port}
      protocol: {protocol}
      allowedRoutes:
        namespaces:
          from: All
{extra}"""


HTTP_ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web
  namespace: apps
spec:
  parentRefs:
    - name: gw
      namespace: infra
  hostnames: ["{host}"]
  rules:
    - backendRefs:
{refs}"""

SECURE_REF = "        - name: secure\n          port: 443\n"


def backend_tls_policy(validation: str) -> str:
    """The BackendTLSPolicy `apps/secure` for the Service `secure`, with the YAML lines of its
    `spec.validation` (indented by four spaces)."""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata:
  name: secure
  namespace: apps
spec:
  targetRefs:
    - group: ""
      kind: Service
      name: secure
  validation:
{validation}"""


async def get_when_listening(port: int, host: str, path: str = "/") -> httpx.Response:
    """GET `path` of `host` from Envoy on `port`, retrying while the listener is still binding
    (connect errors only)."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        for attempt in range(50):
            try:
                return await client.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
            except httpx.ConnectError:
                if attempt == 49:
                    raise
                await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


def parent_condition(h: Harness, kind: str, name: str, type_: str) -> Mapping[str, Any]:
    """The condition `type_` of the one parent in the status of route `kind` `apps/name`."""
    (parent,) = h.status_of(kind, "apps", name)["parents"]
    return dict(next(c for c in parent["conditions"] if c["type"] == type_))

"""Gateway API documents as YAML text (a GatewayClass, Gateways, Services with their
EndpointSlices) and the compile of such text, shared by the Gateway API test modules."""

from __future__ import annotations

from typing import Any

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

CLASS = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turnout}
spec: {controllerName: turnout.dev/gateway-controller}
"""


def gateway_doc(name: str, *listeners: str) -> str:
    """A Gateway `app/name` of the class `turnout` with `listeners` (YAML flow mappings)."""
    items = "".join(f"  - {listener}\n" for listener in listeners)
    return (
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n"
        f"metadata: {{name: {name}, namespace: app}}\n"
        f"spec:\n  gatewayClassName: turnout\n  listeners:\n{items}"
    )


def service_doc(name: str, port_name: str, port: int, target: int, address: str) -> str:
    """Service `app/name` and its EndpointSlice with the one endpoint `address`."""
    return f"""\
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: app}}
spec: {{ports: [{{name: {port_name}, port: {port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}, namespace: app, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: {port_name}, port: {target}}}]
endpoints: [{{addresses: ["{address}"]}}]
"""


def compile_docs(text: str, options: CompileOptions | None = None) -> Any:
    """The compile result of the YAML documents in `text`, which must parse without problems."""
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects), options)

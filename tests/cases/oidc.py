"""A RouteGroup guarding /secure with jwtValidation("%s") (the OIDC filter tests and
`turnout discover` serve it), an issuer for it, and its compile."""

from __future__ import annotations

import textwrap
from typing import Any

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions, IssuerDiscovery
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

ISSUER = "https://issuer.example.org/realm"

RG = """\
    apiVersion: zalando.org/v1
    kind: RouteGroup
    metadata: {name: rg, namespace: default}
    spec:
      hosts: [a.example.com]
      backends:
      - {name: app, type: service, serviceName: app, servicePort: 80}
      defaultBackends: [{backendName: app}]
      routes:
      - pathSubtree: /secure
        filters: ['jwtValidation("%s")']
      - pathSubtree: /open
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: app, namespace: default}
    spec:
      ports: [{name: http, port: 80}]
    ---
    apiVersion: discovery.k8s.io/v1
    kind: EndpointSlice
    metadata:
      name: app-1
      namespace: default
      labels: {kubernetes.io/service-name: app}
    addressType: IPv4
    ports: [{name: http, port: 8080}]
    endpoints: [{addresses: ["10.0.0.1"]}]
    """


def compile_rg(issuer: str, *answers: IssuerDiscovery) -> Any:
    """The compile result of RG guarded by `issuer`, with `answers` as the issuer discovery."""
    snapshot = Snapshot.of(parse_text(textwrap.dedent(RG % issuer), "rg.yaml").objects)
    return compile_snapshot(snapshot, CompileOptions(issuer_discovery=tuple(answers)))

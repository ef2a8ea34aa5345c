"""A first compile shares the per-route work of equal inputs (`spec.parse_proxy`'s route memo,
the processor's `_RouteWork`): each proxy still gets exactly what it gets compiled alone, even
where equal routes mean different things in different namespaces or proxies."""

from __future__ import annotations

from typing import Any

from tests.builders import service, snapshot
from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.graph.build import CompileResult, build_graph
from turnout.graph.model import VirtualHost
from turnout.objects import KubeObject
from turnout.sources.parse import parse_text

# The same routes in every proxy, as files written from one template are: the parser builds the
# equal mappings once, so every proxy holds the very same raw routes.
ROUTES = """
  routes:
    - conditions: [{prefix: /a}]
      services: [{name: app, port: 80}]
      requestHeadersPolicy:
        set: [{name: X-Namespace, value: "%CONTOUR_NAMESPACE%"}]
    - conditions: [{prefix: /b}]
      services: [{name: app, port: 80}]
    - conditions: [{prefix: /c}]
      services: [{name: app, port: 80, protocol: h2c}]
    - conditions: [{prefix: /d}]
      services:
        - name: app
          port: 80
          requestHeadersPolicy: {set: [{name: X-Svc, value: "%CONTOUR_NAMESPACE%"}]}
    - conditions: [{prefix: /e}]
      services: [{name: app, port: 80}]
      retryPolicy: {retryOn: [5xx], retriableStatusCodes: [502]}
    - conditions: [{prefix: /f, header: {name: x, regex: "a.*", ignoreCase: true}}]
      services: [{name: app, port: 80}]
"""


def roots(namespaces: list[str]) -> list[KubeObject]:
    text = "".join(
        f"""---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: root, namespace: {ns}}}
spec:
  virtualhost: {{fqdn: {ns}.example.com}}
{ROUTES}"""
        for ns in namespaces
    )
    parsed = parse_text(text, "roots.yaml", {})
    assert not parsed.problems
    return list(parsed.objects)


def compile_objects(objects: list[KubeObject]) -> CompileResult:
    return build_graph(snapshot(objects), CompileOptions(), default_dialects().all)


def host(result: CompileResult, name: str) -> VirtualHost:
    found = [v for lst in result.graph.listeners for v in lst.virtual_hosts if v.hostname == name]
    assert len(found) == 1
    return found[0]


def status(result: CompileResult, namespace: str) -> Any:
    return next(s for s in result.statuses if s.ref.namespace == namespace)


def test_equal_routes_compile_in_each_proxy_as_alone() -> None:
    namespaces = ["a", "b", "c", "d"]
    objects = roots(namespaces)
    assert objects[0].spec["routes"] is objects[1].spec["routes"]  # shared by the parser
    services = [
        service("app", "a"),
        # b: no Service (an error in each route), c: another port, d: the same as a
        service("app", "c", port=81),
        service("app", "d"),
    ]
    together = compile_objects([*objects, *services])
    for ns, obj in zip(namespaces, objects, strict=True):
        alone = compile_objects([obj, *(s for s in services if s.namespace == ns)])
        assert status(together, ns) == status(alone, ns)
        if ns in ("a", "d"):
            assert host(together, f"{ns}.example.com") == host(alone, f"{ns}.example.com")
    # What differs by namespace differs: each route's header and each cluster.
    a, d = host(together, "a.example.com"), host(together, "d.example.com")
    assert a.routes != d.routes
    assert "X-Namespace" in repr(a.routes) and "'a'" in repr(a.routes)
    assert "'d'" in repr(d.routes)
    assert 'service "b/app" not found' in repr(status(together, "b"))
    for ns in namespaces:  # warnings of the compile and of the reading, in each proxy
        assert "retriableStatusCodes" in repr(status(together, ns))
        assert "routes[5].conditions[0].header.ignoreCase" in repr(status(together, ns))
    assert 'port "80" on service "c/app" not matched' in repr(status(together, "c"))

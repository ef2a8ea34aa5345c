"""The Contour family's typed statuses (HTTPProxy, IngressRoute, seed 002's Route): problems found
after the dialects ran (the Envoy-limits net, refused endpoints) show where a user of each API reads
its problems, and collecting problems stays linear."""

from __future__ import annotations

import time
from typing import Any

from turnout.app import compile_snapshot
from turnout.dialects.contour_route.status import RouteStatus
from turnout.dialects.httpproxy.spec import ORPHANED, Problem
from turnout.dialects.httpproxy.status import ERROR_MESSAGE, ProxyStatusAccessor
from turnout.dialects.ingressroute.status import StatusAccessor
from turnout.graph.build import CompileResult
from turnout.objects import KubeObject, freeze
from turnout.sources.parse import parse_text
from turnout.status.model import Finding, ObjectStatus, Severity, State
from turnout.store import Snapshot

SERVICES = """
apiVersion: v1
kind: Service
metadata: {name: s, namespace: default}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: t, namespace: default}
spec: {ports: [{name: http, port: 80}]}
"""

# A Service whose one endpoint is the cloud metadata address: the graph refuses it for any
# dialect, after the dialects ran.
METADATA_SERVICE = """
---
apiVersion: v1
kind: Service
metadata: {name: meta, namespace: default}
spec: {ports: [{port: 80, name: http}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: meta, namespace: default}
subsets: [{addresses: [{ip: "169.254.169.254"}], ports: [{port: 80, name: http}]}]
"""

GOOD_PROXY = """
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: good, namespace: default}
spec: {virtualhost: {fqdn: good.example.com}, routes: [{services: [{name: s, port: 80}]}]}
"""

# Each weight is one the dialect accepts; their sum is beyond the uint32 Envoy takes.
HEAVY_PROXY = """
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: heavy, namespace: default}
spec:
  virtualhost: {fqdn: heavy.example.com}
  routes:
    - conditions: [{prefix: /split}]
      services: [{name: s, port: 80, weight: 3000000000}, {name: t, port: 80, weight: 3000000000}]
    - services: [{name: s, port: 80}]
"""


def _compile(text: str) -> CompileResult:
    parsed = parse_text(text, "status.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects))


def _status(result: CompileResult, kind: str, name: str) -> ObjectStatus:
    (status,) = [s for s in result.statuses if (s.ref.kind, s.ref.name) == (kind, name)]
    return status


def _obj(api: str, kind: str, name: str) -> KubeObject:
    raw = {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "default"}}
    return KubeObject(api, kind, "default", name, freeze(raw))


# --- HTTPProxy ------------------------------------------------------------------------------------


def test_a_route_only_the_envoy_limits_net_refuses_makes_its_httpproxy_invalid() -> None:
    result = _compile(SERVICES + GOOD_PROXY + HEAVY_PROXY)
    heavy = _status(result, "HTTPProxy", "heavy")
    body = heavy.body
    assert (body["currentStatus"], body["description"]) == ("invalid", ERROR_MESSAGE)
    (valid,) = body["conditions"]
    assert (valid["type"], valid["status"], valid["reason"]) == ("Valid", "False", "ErrorPresent")
    (error,) = valid["errors"]
    assert (error["type"], error["reason"]) == ("EnvoyLimit", "EnvoyLimit")
    assert error["message"].startswith("spec.routes[0]: ") and "uint32" in error["message"]
    assert heavy.state is State.INVALID and heavy.summary == error["message"]
    good = _status(result, "HTTPProxy", "good").body
    assert good["currentStatus"] == "valid"
    assert "errors" not in good["conditions"][0]


def test_a_refused_endpoint_shows_on_the_httpproxy_routing_to_it() -> None:
    proxy = GOOD_PROXY.replace("good", "meta").replace("name: s,", "name: meta,")
    result = _compile(SERVICES + METADATA_SERVICE + GOOD_PROXY + proxy)
    (error,) = _status(result, "HTTPProxy", "meta").body["conditions"][0]["errors"]
    assert error["type"] == "EndpointRefused" and error["message"].startswith("spec.routes[0]")
    assert "169.254.169.254" in error["message"]
    assert _status(result, "HTTPProxy", "good").body["currentStatus"] == "valid"


def _proxy_status(*problems: Problem) -> ObjectStatus:
    accessor = ProxyStatusAccessor(_obj("projectcontour.io/v1", "HTTPProxy", "p"))
    for p in problems:
        accessor.add(p)
    return accessor.build()


def test_httpproxy_fold_keeps_the_dialect_errors_first_and_an_orphan_orphaned() -> None:
    limit = Finding(_proxy_status().ref, "spec.routes[1]", "EnvoyLimit", "too long")
    invalid = _proxy_status(Problem("RouteError", "PathError", "bad path"))
    folded = invalid.with_findings([limit, limit])
    errors = folded.body["conditions"][0]["errors"]
    assert [e["message"] for e in errors] == ["bad path", "spec.routes[1]: too long"]
    assert folded.summary == "bad path" and folded.findings == (limit, limit)
    orphan = _proxy_status(Problem(ORPHANED, ORPHANED, "not part of a chain"))
    folded = orphan.with_findings([limit])
    assert folded.state is State.ORPHANED
    assert folded.body["currentStatus"] == "orphaned"
    assert folded.body["description"] == "not part of a chain"


def test_httpproxy_warning_findings_are_warnings_and_leave_it_valid() -> None:
    status = _proxy_status()
    warning = Finding(status.ref, "spec.routes[0]", "EnvoyLimit", "close", Severity.WARNING)
    folded = status.with_findings([warning])
    assert folded.state is State.VALID and folded.body["currentStatus"] == "valid"
    (valid,) = folded.body["conditions"]
    assert valid["status"] == "True" and "errors" not in valid
    assert valid["warnings"][0]["message"] == "spec.routes[0]: close"


def test_the_httpproxy_accessor_adds_20000_problems_in_linear_time() -> None:
    accessor = ProxyStatusAccessor(_obj("projectcontour.io/v1", "HTTPProxy", "p"))
    start = time.perf_counter()
    for i in range(20_000):
        accessor.add_error("RouteError", "Reason", f"problem {i}")
        accessor.add_error("RouteError", "Reason", f"problem {i}")  # repeats are kept once
    elapsed = time.perf_counter() - start
    assert elapsed < 2, elapsed
    errors = accessor.build().body["conditions"][0]["errors"]
    assert len(errors) == 20_000
    assert [e["message"] for e in errors[:2]] == ["problem 0", "problem 1"]


# --- IngressRoute ---------------------------------------------------------------------------------


def _ingressroute(name: str, service: str) -> str:
    return f"""
---
apiVersion: contour.heptio.com/v1beta1
kind: IngressRoute
metadata: {{name: {name}, namespace: default}}
spec:
  virtualhost: {{fqdn: {name}.example.com}}
  routes: [{{match: /, services: [{{name: {service}, port: 80}}]}}]
"""


def test_a_refused_endpoint_makes_its_ingressroute_invalid_and_no_other() -> None:
    result = _compile(
        SERVICES + METADATA_SERVICE + _ingressroute("good", "s") + _ingressroute("meta", "meta")
    )
    body = _status(result, "IngressRoute", "meta").body
    assert body["currentStatus"] == "invalid"
    (error,) = body["errors"]
    assert error["reason"] == "EndpointRefused" and "169.254.169.254" in error["message"]
    assert body["description"] == error["message"]
    good = _status(result, "IngressRoute", "good").body
    assert good == {"currentStatus": "valid", "description": "valid IngressRoute"}


def test_ingressroute_fold_adds_errors_after_the_dialects_and_warnings_apart() -> None:
    accessor = StatusAccessor(_obj("contour.heptio.com/v1beta1", "IngressRoute", "r"), True)
    status = accessor.build()
    limit = Finding(status.ref, "spec.routes[0]", "EnvoyLimit", "refused")
    near = Finding(status.ref, "spec.routes[1]", "EnvoyLimit", "close", Severity.WARNING)
    warned = status.with_findings([near])
    assert warned.body == {
        "currentStatus": "valid",
        "description": "valid IngressRoute",
        "warnings": [{"reason": "EnvoyLimit", "message": "spec.routes[1]: close"}],
    }
    accessor.error(0, "NamespaceNotAllowed", "wrong namespace")
    folded = accessor.build().with_findings([limit])
    assert folded.state is State.INVALID
    assert folded.body == {
        "currentStatus": "invalid",
        "description": "wrong namespace",
        "errors": [
            {"reason": "NamespaceNotAllowed", "message": "wrong namespace"},
            {"reason": "EnvoyLimit", "message": "spec.routes[0]: refused"},
        ],
    }


# --- Route (seed 002) -----------------------------------------------------------------------------


def _route(name: str, service: str) -> str:
    return f"""
---
apiVersion: contour.heptio.com/v1alpha1
kind: Route
metadata: {{name: {name}, namespace: default}}
spec:
  host: {name}.example.com
  routes: [{{pathPrefix: /, upstreams: [{{serviceName: {service}, servicePort: 80}}]}}]
"""


def test_a_refused_endpoint_shows_in_its_route_errors_and_no_other() -> None:
    result = _compile(SERVICES + METADATA_SERVICE + _route("good", "s") + _route("meta", "meta"))
    meta = _status(result, "Route", "meta")
    # The Route is well formed and the rest of it is served: `Error`, not `Invalid`.
    assert meta.body["currentStatus"] == "Error" and meta.state is State.INVALID
    (error,) = meta.body["errors"]
    assert error.startswith("spec.routes[0]") and "169.254.169.254" in error
    assert _status(result, "Route", "good").body == {"currentStatus": "Valid", "errors": []}


def test_route_fold_keeps_invalid_and_reports_each_message_once() -> None:
    st = RouteStatus(_obj("contour.heptio.com/v1alpha1", "Route", "r"), invalid=True)
    st.add("spec.host: required field is missing")
    status = st.build()
    limit = Finding(status.ref, "spec.routes[0]", "EnvoyLimit", "refused")
    folded = status.with_findings([limit, limit])
    expected: dict[str, Any] = {
        "currentStatus": "Invalid",
        "errors": ["spec.host: required field is missing", "spec.routes[0]: refused"],
    }
    assert folded.body == expected
    valid = RouteStatus(_obj("contour.heptio.com/v1alpha1", "Route", "v")).build()
    near = Finding(valid.ref, "spec.routes[0]", "EnvoyLimit", "close", Severity.WARNING)
    assert valid.with_findings([near]).body == {"currentStatus": "Valid", "errors": []}
    assert valid.with_findings([limit]).body == {
        "currentStatus": "Error",
        "errors": ["spec.routes[0]: refused"],
    }

"""Nothing ignored silently (issue 13): the objects turnout leaves alone are listed with the reason
by `check` and `/status`; misspelled kinds fail; files that are not objects warn; `--exclude`;
an Ingress without a class is turnout's in files mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import kube_object, service, snapshot
from turnout.admin.server import status_document
from turnout.app import compile_options, compile_snapshot, default_dialects
from turnout.cli import main
from turnout.compile_inputs import CompileOptions
from turnout.config import ServeConfig
from turnout.graph.build import CompileResult, misspelled_kind
from turnout.metrics import Metrics
from turnout.objects import KubeObject
from turnout.sources.files import discover, excluded
from turnout.sources.parse import parse_text
from turnout.status.model import IgnoredObject, ObjectStatus
from turnout.store import SourceProblem

NET = "networking.k8s.io/v1"
GW = "gateway.networking.k8s.io/v1"
BACKEND = {"service": {"name": "app", "port": {"number": 80}}}


def ingress(name: str, class_name: str | None = None, **kw: Any) -> KubeObject:
    spec: dict[str, Any] = {
        "rules": [
            {
                "host": f"{name}.example.com",
                "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": BACKEND}]},
            }
        ]
    }
    if class_name is not None:
        spec["ingressClassName"] = class_name
    return kube_object(NET, "Ingress", name, spec=spec, **kw)


def compiled(*objects: KubeObject, options: CompileOptions | None = None) -> CompileResult:
    return compile_snapshot(snapshot(service("app"), *objects), options or CompileOptions())


def ignored_reasons(result: CompileResult) -> dict[str, str]:
    return {f"{i.ref.kind} {i.ref.name}": i.reason for i in result.ignored}


# -- each dialect lists what it does not take --------------------------------------------------


def test_an_ingress_of_another_class_and_another_controllers_ingressclass_are_listed() -> None:
    result = compiled(
        ingress("mine", "turnout"),
        ingress("theirs", "nginx"),
        kube_object(NET, "IngressClass", "nginx", spec={"controller": "k8s.io/ingress-nginx"}),
    )
    assert [s.ref.name for s in result.statuses] == ["mine"]
    reasons = ignored_reasons(result)
    assert reasons == {
        "IngressClass nginx": "controller 'k8s.io/ingress-nginx' is not turnout's "
        "('turnout.dev/ingress-controller')",
        "Ingress theirs": "class 'nginx' is another controller's ('k8s.io/ingress-nginx'; "
        "turnout is 'turnout.dev/ingress-controller')",
    }


def test_an_httpproxy_of_another_class_is_listed_without_a_status() -> None:
    proxy = kube_object(
        "projectcontour.io/v1",
        "HTTPProxy",
        "other",
        spec={"virtualhost": {"fqdn": "o.example.com"}, "routes": []},
        annotations={"projectcontour.io/ingress.class": "contour-b"},
    )
    result = compiled(proxy)
    assert result.statuses == ()
    assert ignored_reasons(result) == {
        "HTTPProxy other": "class 'contour-b' is not turnout's (turnout serves 'turnout')"
    }


def test_a_routegroup_whose_class_annotation_does_not_match_is_listed() -> None:
    rg = kube_object(
        "zalando.org/v1",
        "RouteGroup",
        "rg",
        spec={"hosts": ["rg.example.com"], "backends": [{"name": "b", "type": "shunt"}]},
        annotations={"zalando.org/routegroup.class": "other"},
    )
    result = compiled(rg)
    assert result.statuses == ()
    assert ignored_reasons(result) == {
        "RouteGroup rg": "annotation zalando.org/routegroup.class 'other' does not match "
        "turnout's RouteGroup class 'skipper'"
    }


def test_gateway_api_objects_of_another_controller_are_listed_and_get_no_status() -> None:
    result = compiled(
        kube_object(GW, "GatewayClass", "other", spec={"controllerName": "example.com/x"}),
        kube_object(
            GW,
            "Gateway",
            "gw",
            spec={
                "gatewayClassName": "other",
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
            },
        ),
        kube_object(
            GW,
            "Gateway",
            "nowhere",
            spec={"gatewayClassName": "missing", "listeners": []},
        ),
        kube_object(GW, "HTTPRoute", "r", spec={"parentRefs": [{"name": "gw"}]}),
    )
    assert result.statuses == ()  # the spec: another controller's objects get no status
    assert ignored_reasons(result) == {
        "GatewayClass other": "controllerName 'example.com/x' is another controller's "
        "(turnout is 'turnout.dev/gateway-controller')",
        "Gateway gw": "GatewayClass 'other' belongs to controller 'example.com/x'",
        "Gateway nowhere": "GatewayClass 'missing' does not exist",
        "HTTPRoute r": "attached to no Gateway of turnout's (parent Gateways: default/gw)",
    }


def test_unknown_kinds_of_other_groups_are_warnings_and_listed() -> None:
    result = compiled(kube_object("apps/v1", "Deployment", "web"))
    assert ignored_reasons(result) == {
        "Deployment web": "kind Deployment of apiVersion 'apps/v1' is not read by turnout"
    }
    assert [p.severity for p in result.problems] == ["warning"]
    assert result.rejected == ()


# -- misspelled kinds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "meant"),
    [
        ("projectcontour.io/v1", "HTTPProxxy", "HTTPProxy"),
        (GW, "HTTPRoutes", "HTTPRoute"),
        (NET, "Ingres", "Ingress"),
        ("projectcontour.io/v1", "httpproxy", "HTTPProxy"),
    ],
)
def test_a_misspelled_kind_of_a_group_turnout_reads_is_an_error_with_a_suggestion(
    api_version: str, kind: str, meant: str
) -> None:
    result = compiled(kube_object(api_version, kind, "typo"))
    (problem,) = result.problems
    assert problem.severity == "error"
    assert problem.reason.endswith(f"did you mean {meant}?")
    assert problem.object == f"{kind} default/typo"
    assert result.ignored == ()
    assert [r.name for r in result.rejected] == ["typo"]


def test_a_real_kind_turnout_does_not_read_in_its_groups_stays_a_warning() -> None:
    assert misspelled_kind("UDPRoute", ["TCPRoute", "TLSRoute", "HTTPRoute"]) is None
    assert misspelled_kind("NetworkPolicy", ["Ingress", "IngressClass"]) is None
    result = compiled(kube_object(NET, "NetworkPolicy", "np"))
    assert [p.severity for p in result.problems] == ["warning"]
    assert list(ignored_reasons(result)) == ["NetworkPolicy np"]


# -- files that are not objects, --exclude -------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "resources:\n- a.yaml\n",  # kustomization.yaml
        "replicaCount: 2\nimage: {tag: v1}\n",  # Helm values.yaml
        "- one\n- two\n",  # a top-level list of strings
    ],
)
def test_a_document_that_is_no_kubernetes_object_is_skipped_with_a_warning(text: str) -> None:
    parsed = parse_text(text, "dir/file.yaml")
    assert parsed.objects == ()
    (problem,) = parsed.problems
    assert (problem.source, problem.line, problem.severity) == ("dir/file.yaml", 1, "warning")
    assert "not a Kubernetes object" in problem.reason


def test_an_object_that_is_malformed_stays_an_error() -> None:
    parsed = parse_text("apiVersion: v1\nmetadata: {name: x}\n", "a.yaml")
    (problem,) = parsed.problems
    assert (problem.severity, problem.reason) == ("error", "kind is missing or not a string")
    parsed = parse_text("kind: Service\nmetadata: {name: x}\n", "a.yaml")
    assert parsed.problems[0].reason == "apiVersion is missing or not a string"


def test_exclude_matches_the_relative_path_or_the_name(tmp_path: Path) -> None:
    for rel in ("a.yaml", "kustomization.yaml", "charts/values.yaml", "charts/sub/x.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert excluded("charts/sub/x.yaml", ["charts/*"])
    assert excluded("deep/kustomization.yaml", ["kustomization.yaml"])
    assert not excluded("a.yaml", ["charts/*"])
    found = discover([tmp_path], ["kustomization.yaml", "charts"])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a.yaml"]
    assert discover([tmp_path / "kustomization.yaml"], ["kustomization.yaml"]) == []


# -- an Ingress without a class in files mode ---------------------------------------------------


def test_files_mode_serves_an_ingress_without_a_class() -> None:
    files_mode = compile_options(ServeConfig(paths=()))
    assert files_mode.classless_ingress_is_ours
    result = compiled(ingress("classless"), options=files_mode)
    assert [(s.ref.name, s.state.value) for s in result.statuses] == [("classless", "valid")]
    # A cluster (the default options) needs a default IngressClass for that.
    cluster = compiled(ingress("classless"))
    assert cluster.statuses == ()
    assert ignored_reasons(cluster) == {
        "Ingress classless": "no class, and no default IngressClass of turnout's"
    }


def test_files_mode_still_follows_the_default_ingressclass_and_the_class_name_flag() -> None:
    files_mode = compile_options(ServeConfig(paths=()))
    nginx_default = kube_object(
        NET,
        "IngressClass",
        "nginx",
        spec={"controller": "k8s.io/ingress-nginx"},
        annotations={"ingressclass.kubernetes.io/is-default-class": "true"},
    )
    result = compiled(ingress("classless"), nginx_default, options=files_mode)
    assert result.statuses == ()
    assert ignored_reasons(result)["Ingress classless"].startswith(
        "no class; the default IngressClass 'nginx' is another controller's"
    )
    edge = compile_options(ServeConfig(paths=(), ingress_class_name="edge"))
    result = compiled(ingress("classless"), ingress("e", "edge"), options=edge)
    assert [s.ref.name for s in result.statuses] == ["e"]
    assert ignored_reasons(result) == {
        "Ingress classless": "no class; turnout serves class 'edge' only"
    }


# -- sinks: check and /status --------------------------------------------------------------------

SERVED = """\
apiVersion: v1
kind: Service
metadata: {name: app}
spec: {ports: [{port: 80}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: classless}
spec:
  rules:
    - host: a.example.com
      http:
        paths: [{path: /, pathType: Prefix, backend: {service: {name: app, port: {number: 80}}}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: other}
spec:
  ingressClassName: nginx
  rules:
    - host: b.example.com
      http:
        paths: [{path: /, pathType: Prefix, backend: {service: {name: app, port: {number: 80}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: theirs}
spec: {controllerName: example.com/x}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
"""


def line_of(name: str) -> int:
    """The line of the document of SERVED whose metadata names `name` (its `apiVersion` line)."""
    lines = SERVED.splitlines()
    at = next(i for i, line in enumerate(lines) if f"name: {name}}}" in line)
    return next(i for i in range(at, -1, -1) if lines[i].startswith("apiVersion")) + 1


def test_check_lists_ignored_objects_and_ends_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(SERVED)
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\n")
    assert main(["check", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    a = tmp_path / "a.yaml"
    at = {name: f"{a}:{line_of(name)}: " for name in ("classless", "other", "theirs", "web")}
    assert f"{at['classless']}Ingress default/classless: valid: Ingress is served" in lines
    assert (
        f"{at['other']}Ingress default/other: ignored: class 'nginx' is not turnout's "
        "(turnout serves 'turnout')" in lines
    )
    assert (
        f"{at['theirs']}GatewayClass theirs: ignored: controllerName 'example.com/x' is "
        "another controller's (turnout is 'turnout.dev/gateway-controller')" in lines
    )
    assert (
        f"{at['web']}Deployment default/web: ignored: kind Deployment of apiVersion 'apps/v1' "
        "is not read by turnout" in lines
    )
    assert lines[-1] == "4 objects: 1 valid, 0 invalid, 3 ignored, 2 warnings"
    assert f"{tmp_path / 'kustomization.yaml'}:1: warning: not a Kubernetes object" in (
        captured.err
    )

    # Excluded, the kustomization is not read at all; a typo of a kind fails the check.
    (tmp_path / "typo.yaml").write_text(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxxy\nmetadata: {name: t}\n"
    )
    assert main(["check", str(tmp_path), "--exclude", "kustomization.yaml", "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"] == {
        "objects": 5,
        "valid": 1,
        "invalid": 1,
        "ignored": 3,
        "warnings": 1,
    }
    assert {i["metadata"]["name"]: i["reason"] for i in doc["ignored"]}["other"] == (
        "class 'nginx' is not turnout's (turnout serves 'turnout')"
    )
    theirs = next(i for i in doc["ignored"] if i["kind"] == "GatewayClass")
    assert theirs["metadata"] == {"name": "theirs"}  # cluster-scoped
    assert theirs["source"] == {"file": str(a), "line": line_of("theirs")}
    typo = next(p for p in doc["problems"] if p["object"] == "HTTPProxxy default/t")
    assert (typo["severity"], typo["reason"][-23:]) == ("error", "did you mean HTTPProxy?")
    assert not any("kustomization" in p["source"] for p in doc["problems"])


class _Admin:
    """What the admin server reads, from one compile."""

    def __init__(self, result: CompileResult) -> None:
        self.metrics = Metrics()
        self.result = result
        self.dialects = default_dialects()

    def statuses(self) -> tuple[ObjectStatus, ...]:
        return self.result.statuses

    def problems(self) -> tuple[SourceProblem, ...]:
        return self.result.problems

    def readiness(self) -> tuple[bool, str]:
        return True, "ready"

    def status_json(self, status: ObjectStatus) -> dict[str, Any]:
        return self.dialects.status_json(status)

    def ignored(self) -> tuple[IgnoredObject, ...]:
        return self.result.ignored

    def ignored_json(self, ignored: IgnoredObject) -> dict[str, Any]:
        return self.dialects.ignored_json(ignored)


def test_admin_status_lists_the_ignored_objects() -> None:
    result = compiled(ingress("theirs", "nginx"))
    doc = json.loads(status_document(_Admin(result)))
    assert doc["ignored"] == [
        {
            "apiVersion": NET,
            "kind": "Ingress",
            "metadata": {"namespace": "default", "name": "theirs"},
            "reason": "class 'nginx' is not turnout's (turnout serves 'turnout')",
            "source": {"file": "unknown", "line": None},
        }
    ]


def test_explain_names_the_ignored_objects_that_name_an_unserved_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(SERVED)
    assert main(["explain", str(tmp_path), "--host", "B.example.com"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "virtual host: none matches this host: 404" in out
    at = f"{tmp_path / 'a.yaml'}:{line_of('other')}: "
    assert f"  {at}Ingress default/other: ignored: class 'nginx' is not turnout's" in "\n".join(out)
    # A host no object names: nothing to point at.
    assert main(["explain", str(tmp_path), "--host", "c.example.com"]) == 1
    assert "ignored" not in capsys.readouterr().out

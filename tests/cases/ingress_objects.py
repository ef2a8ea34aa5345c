"""Ingress dialect objects (Ingresses, their rules and paths, the Services they name) and the
compile of a set of them, shared by the Ingress and condition-status test modules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests import builders
from tests.builders import kube_object
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.graph.build import CompileResult
from turnout.objects import KubeObject
from turnout.store import Snapshot


def kind_object(
    kind: str,
    name: str,
    namespace: str = "default",
    spec: Any = None,
    created: str | None = None,
    annotations: dict[str, str] | None = None,
    api_version: str | None = None,
    extra: dict[str, Any] | None = None,
) -> KubeObject:
    """An object of `kind` with that kind's apiVersion unless `api_version` is given (Ingress and
    IngressClass networking.k8s.io/v1, HTTPProxy projectcontour.io/v1, any other kind v1);
    `extra` holds further top-level fields."""
    api = api_version or {
        "Ingress": "networking.k8s.io/v1",
        "IngressClass": "networking.k8s.io/v1",
        "HTTPProxy": "projectcontour.io/v1",
    }.get(kind, "v1")
    return kube_object(
        api,
        kind,
        name,
        namespace,
        spec=spec,
        created=created,
        annotations=annotations,
        **(extra or {}),
    )


def service(name: str, namespace: str = "default", port: int = 80) -> KubeObject:
    """Ingress backends name their port "http" (the Ingress tests select it by name too)."""
    return builders.service(name, namespace, port, port_name="http")


def backend(name: str, port: int | str = 80) -> dict[str, Any]:
    """An Ingress backend: Service `name` at port `port`, a number or a port name."""
    key = "number" if isinstance(port, int) else "name"
    return {"service": {"name": name, "port": {key: port}}}


def path(p: str, svc: str = "svc", path_type: str = "Prefix") -> dict[str, Any]:
    """An HTTP path of an Ingress rule, sent to Service `svc` at port 80."""
    return {"path": p, "pathType": path_type, "backend": backend(svc)}


def rule(host: str | None, *paths: dict[str, Any]) -> dict[str, Any]:
    """An Ingress rule for `host` (None: any host) with `paths`."""
    out: dict[str, Any] = {"http": {"paths": list(paths)}}
    if host is not None:
        out["host"] = host
    return out


def ingress(
    name: str,
    *rules: dict[str, Any],
    namespace: str = "default",
    created: str | None = "2024-01-01T00:00:00Z",
    annotations: dict[str, str] | None = None,
    class_name: str | None = "turnout",
    **spec: Any,
) -> KubeObject:
    """An Ingress of class `class_name` with `rules`; `spec` holds further spec fields."""
    body: dict[str, Any] = dict(spec)
    if rules:
        body["rules"] = list(rules)
    if class_name is not None:
        body["ingressClassName"] = class_name
    return kind_object("Ingress", name, namespace, body, created, annotations)


def compile_objects(objects: Iterable[KubeObject], **options: Any) -> CompileResult:
    """The compile result of `objects` with CompileOptions(**options)."""
    return compile_snapshot(Snapshot.of(objects), CompileOptions(**options))

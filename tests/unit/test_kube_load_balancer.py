"""The Envoy Service's load balancer as the address statuses name (`--envoy-service`): kept by
the Kubernetes source for that one Service, read by the controller into the compile's options,
written by Ingress, RouteGroup and Gateway statuses; `--ingress-status-address` wins."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from tests.builders import kube_object
from tests.cases.ingress_objects import ingress, path, rule
from turnout.app import build_controller, compile_snapshot, envoy_service
from turnout.cli import build_parser, serve_config
from turnout.compile_inputs import CompileOptions
from turnout.config import KubernetesSettings, ServeConfig
from turnout.graph.load_balancer import load_balancer_addresses, service_addresses, service_ref
from turnout.objects import KubeObject, thaw
from turnout.sources.base import SourceSink
from turnout.sources.kubernetes.convert import to_object
from turnout.sources.kubernetes.kinds import WATCHED
from turnout.sources.parse import parse_text
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot

ENVOY = service_ref("turnout-system", "envoy")
SERVICE = next(r for r in WATCHED if (r.group, r.kind) == ("", "Service"))

OBJECTS = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {ports: [{port: 80}]}
---
apiVersion: zalando.org/v1
kind: RouteGroup
metadata: {name: rg, namespace: default}
spec:
  hosts: [rg.example.com]
  backends: [{name: b, type: service, serviceName: web, servicePort: 80}]
  defaultBackends: [{backendName: b}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turnout}
spec: {controllerName: turnout.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: turnout
  listeners: [{name: http, port: 8090, protocol: HTTP}]
"""


def envoy_service_raw(*entries: dict[str, Any], name: str = "envoy") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "turnout-system", "resourceVersion": "7"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": list(entries)}, "conditions": [{"type": "X"}]},
    }


def objects() -> list[KubeObject]:
    parsed = parse_text(OBJECTS, "lb.yaml")
    assert not parsed.problems
    return [*parsed.objects, ingress("ing", rule("a.example.com", path("/", "web")))]


def bodies(statuses: Sequence[ObjectStatus]) -> dict[str, Any]:
    return {s.ref.kind: json.loads(json.dumps(thaw(s.body))) for s in statuses}


def addresses_written(statuses: Sequence[ObjectStatus]) -> tuple[Any, Any, Any]:
    by_kind = bodies(statuses)
    return (
        by_kind["Ingress"]["loadBalancer"],
        by_kind["RouteGroup"]["loadBalancer"],
        by_kind["Gateway"]["addresses"],
    )


# --- the source keeps that one Service's load balancer ------------------------------------------


def test_the_envoy_services_load_balancer_is_kept_and_nothing_else_of_status() -> None:
    raw = envoy_service_raw({"ip": "203.0.113.7", "ports": [{"port": 80}]})
    kept = to_object(raw, SERVICE, ENVOY)
    assert kept is not None
    assert thaw(kept.raw["status"]) == {
        "loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ports": [{"port": 80}]}]}
    }
    assert "resourceVersion" not in kept.raw["metadata"]
    # Another Service's status is dropped, and so is the Envoy Service's without the setting.
    other = to_object(envoy_service_raw({"ip": "198.51.100.1"}, name="web"), SERVICE, ENVOY)
    assert other is not None and "status" not in other.raw
    unset = to_object(raw, SERVICE, None)
    assert unset is not None and "status" not in unset.raw


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([{"ip": "203.0.113.7"}], ("203.0.113.7",)),
        ([{"hostname": "lb.example.net"}], ("lb.example.net",)),
        # Contour's order: `ip` before `hostname` in one entry; entries in the Service's order.
        ([{"ip": "203.0.113.7", "hostname": "x"}, {"hostname": "y"}], ("203.0.113.7", "y")),
        ([{"ports": [{"port": 80}]}, {"ip": "192.0.2.1"}, {"ip": "192.0.2.1"}], ("192.0.2.1",)),
        ([], ()),
    ],
)
def test_load_balancer_addresses(entries: list[Any], expected: tuple[str, ...]) -> None:
    assert load_balancer_addresses({"loadBalancer": {"ingress": entries}}) == expected


def test_no_or_malformed_status_names_nothing() -> None:
    for status in (None, {}, {"loadBalancer": "x"}, {"loadBalancer": {"ingress": "x"}}):
        assert load_balancer_addresses(status) == ()


# --- the compile writes it ----------------------------------------------------------------------


def test_statuses_name_the_service_addresses_and_the_flag_wins() -> None:
    snap = Snapshot.of(objects())
    two = CompileOptions(service_addresses=("203.0.113.7", "lb.example.net"))
    ing, rg, gw = addresses_written(compile_snapshot(snap, two).statuses)
    assert ing == {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.net"}]}
    assert rg == {"routegroup": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.net"}]}
    assert gw == [
        {"type": "IPAddress", "value": "203.0.113.7"},
        {"type": "Hostname", "value": "lb.example.net"},
    ]
    flag = CompileOptions(status_address="198.51.100.9", service_addresses=("203.0.113.7",))
    ing, rg, gw = addresses_written(compile_snapshot(snap, flag).statuses)
    assert ing == {"ingress": [{"ip": "198.51.100.9"}]}
    assert gw == [{"type": "IPAddress", "value": "198.51.100.9"}]
    # Neither: --address, as before.
    ing, rg, gw = addresses_written(compile_snapshot(snap, CompileOptions()).statuses)
    assert ing == {"ingress": [{"ip": "127.0.0.1"}]}
    assert gw == [{"type": "IPAddress", "value": "127.0.0.1"}]


# --- the controller reads the Service into the options ------------------------------------------


class OneSource:
    name = "list"

    def __init__(self, objects: Sequence[KubeObject]) -> None:
        self.objects = tuple(objects)
        self.sink: SourceSink | None = None

    async def run(self, sink: SourceSink) -> None:
        self.sink = sink
        sink.replace_partition(self.name, self.objects)
        sink.synced()
        await asyncio.Event().wait()

    async def reload(self) -> None:
        return None


def kube_config(**settings: Any) -> ServeConfig:
    return ServeConfig(
        paths=(),
        run_envoy=False,
        demo_backends=False,
        xds_port=0,
        debounce_ms=20,
        kubernetes=KubernetesSettings(),
        **settings,
    )


def lb_object(ip: str) -> KubeObject:
    obj = to_object(envoy_service_raw({"ip": ip}), SERVICE, ENVOY)
    assert obj is not None
    return obj


def ingress_lb(statuses: Sequence[ObjectStatus]) -> Any:
    return bodies(statuses)["Ingress"]["loadBalancer"]


async def test_a_changed_service_address_recompiles_and_rewrites_the_statuses() -> None:
    source = OneSource([*objects(), lb_object("203.0.113.7")])
    controller = build_controller(kube_config(), sources=[source])
    await controller.start()
    try:
        assert ingress_lb(controller.statuses()) == {"ingress": [{"ip": "203.0.113.7"}]}
        assert source.sink is not None
        source.sink.upsert(source.name, lb_object("203.0.113.8"))
        await controller.recompile()
        assert ingress_lb(controller.statuses()) == {"ingress": [{"ip": "203.0.113.8"}]}
        # The Service gone: --address again.
        source.sink.delete(source.name, ENVOY)
        await controller.recompile()
        assert ingress_lb(controller.statuses()) == {"ingress": [{"ip": "127.0.0.1"}]}
    finally:
        await controller.stop()


async def test_the_flag_wins_over_the_service() -> None:
    source = OneSource([*objects(), lb_object("203.0.113.7")])
    config = kube_config(ingress_status_address="lb.example.net")
    controller = build_controller(config, sources=[source])
    await controller.start()
    try:
        assert ingress_lb(controller.statuses()) == {"ingress": [{"hostname": "lb.example.net"}]}
    finally:
        await controller.stop()


# --- the flag ------------------------------------------------------------------------------------


def test_envoy_service_flag() -> None:
    def settings(*flags: str) -> KubernetesSettings | None:
        return serve_config(build_parser().parse_args(["serve", "--kubernetes", *flags])).kubernetes

    assert envoy_service(settings()) == ENVOY
    assert envoy_service(settings("--envoy-service", "edge/lb")) == service_ref("edge", "lb")
    assert envoy_service(settings("--envoy-service", "")) is None
    assert envoy_service(None) is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--kubernetes", "--envoy-service", "no-slash"])


def test_a_service_without_load_balancer_or_none_configured_names_nothing() -> None:
    svc = kube_object("v1", "Service", "envoy", "turnout-system", spec={"ports": []})
    assert service_addresses(Snapshot.of([svc]), ENVOY) == ()
    assert service_addresses(Snapshot.of([lb_object("203.0.113.7")]), None) == ()
    assert service_addresses(Snapshot.of([lb_object("203.0.113.7")]), ENVOY) == ("203.0.113.7",)


def test_an_unspecified_listen_address_is_never_written_as_the_load_balancer() -> None:
    # Envoy binding 0.0.0.0 (the manifests' --address) names no address a client can use: until
    # the Envoy Service has one, the statuses name none, as Contour's do.
    from turnout.compile_inputs import CompileOptions

    assert CompileOptions(address="0.0.0.0").load_balancer_addresses == ()
    assert CompileOptions(address="::").load_balancer_addresses == ()
    assert CompileOptions(address="192.0.2.7").load_balancer_addresses == ("192.0.2.7",)
    with_service = CompileOptions(address="0.0.0.0", service_addresses=("203.0.113.9",))
    assert with_service.load_balancer_addresses == ("203.0.113.9",)

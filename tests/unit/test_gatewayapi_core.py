"""Gateway API core: hostname intersection, listener conflicts, the Programmed condition after
Envoy's ACK (controller and status), and the compile's Envoy listeners per Gateway port."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import discovery_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cases.gateway_docs import CLASS, compile_docs, gateway_doc, service_doc
from tests.xds_client import AdsClient, FakeEnvoy, resource_names, until
from tests.xds_client import refs as xds_refs
from tests.xds_client import snapshot as xds_snapshot
from turnout.app import build_controller, compile_options, compile_snapshot, default_dialects
from turnout.compile_inputs import CompileOptions, ListenerProtocol
from turnout.config import ServeConfig
from turnout.controller import Controller
from turnout.dialects.gatewayapi.hostnames import (
    ServedKinds,
    covers,
    hostname_problem,
    intersect,
    route_hostnames,
    specificity,
    wider_patterns,
)
from turnout.dialects.gatewayapi.status import programmed_statuses
from turnout.envoy.resources import LISTENER_TYPE, ROUTE_TYPE
from turnout.envoy.translate import translate
from turnout.envoy.xds import XdsServer
from turnout.graph.evaluate import evaluate, make_request
from turnout.objects import KubeObject, freeze
from turnout.sources.parse import parse_text
from turnout.status.model import ObjectStatus
from turnout.store import Snapshot

# --- hostnames (the table of the spec's hostnames concept page, and more) ---------------------


@pytest.mark.parametrize(
    ("listener", "route", "expected"),
    [
        (None, None, "*"),
        (None, "www.example.com", "www.example.com"),
        (None, "*.example.com", "*.example.com"),
        ("www.example.com", None, "www.example.com"),
        ("www.example.com", "www.example.com", "www.example.com"),
        ("www.example.com", "api.example.com", None),
        ("*.example.com", "sub.domain.example.com", "sub.domain.example.com"),
        ("*.example.com", "example.com", None),
        ("*.example.com", "test.example.net", None),
        ("www.example.com", "*.example.com", "www.example.com"),
        ("example.com", "*.example.com", None),
        ("*.com", "*.example.com", "*.example.com"),
        ("*.example.com", "*.com", "*.example.com"),
        ("*.example.com", "*.example.com", "*.example.com"),
        ("*.example.com", "*.example.net", None),
        ("*.a.example.com", "*.b.example.com", None),
    ],
)
def test_intersect(listener: str | None, route: str | None, expected: str | None) -> None:
    assert intersect(listener, route) == expected


def test_route_hostnames_drops_the_ones_that_do_not_intersect() -> None:
    assert route_hostnames("*.example.com", ["test.example.com", "test.example.net"]) == (
        "test.example.com",
    )
    assert route_hostnames("*.example.com", ["Test.Example.com", "test.example.com"]) == (
        "test.example.com",
    )
    assert route_hostnames("*.example.com", []) == ("*.example.com",)
    assert route_hostnames(None, []) == ("*",)
    assert route_hostnames("a.example.com", ["b.example.com"]) == ()


def test_a_wildcard_covers_one_or_more_labels_but_not_its_suffix() -> None:
    assert covers("*.example.com", "a.example.com")
    assert covers("*.example.com", "a.b.example.com")
    assert covers("*.example.com", "*.b.example.com")
    assert not covers("*.example.com", "example.com")
    assert not covers("*.example.com", "aexample.com")
    assert not covers("a.example.com", "*.example.com")
    assert covers(None, "anything.org")


# --- compile: listeners per port ------------------------------------------------------------


def _status(result: Any, kind: str, namespace: str, name: str) -> Mapping[str, Any]:
    for s in result.statuses:
        if (s.ref.kind, s.ref.namespace, s.ref.name) == (kind, namespace, name):
            return dict(s.body)
    raise AssertionError(f"no status for {kind} {namespace}/{name}")


def _messages(conditions: Any) -> dict[str, str]:
    return {c["type"]: c["message"] for c in conditions}


def _conditions(conditions: Any) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in conditions}


def _programmed_of(status: Mapping[str, Any]) -> tuple[str, str]:
    """The status and reason of the Programmed condition of a Gateway's or listener's status."""
    return _conditions(status["conditions"])["Programmed"]


def _programmed_message(status: Mapping[str, Any]) -> str:
    return _messages(status["conditions"])["Programmed"]


GATEWAYS = (
    CLASS
    + gateway_doc(
        "a",
        "{name: web, port: 8081, protocol: HTTP, hostname: a.example.com}",
        "{name: secure, port: 9443, protocol: TLS, tls: {mode: Passthrough}}",
        "{name: stream, port: 9000, protocol: TCP}",
    )
    + gateway_doc("b", "{name: web, port: 8081, protocol: HTTP, hostname: b.example.com}")
)


def test_one_envoy_listener_per_port_shared_by_gateways_on_the_address() -> None:
    result = compile_docs(GATEWAYS, CompileOptions(address="127.0.0.2"))
    by_name = {lst.name: lst for lst in result.graph.listeners}
    assert sorted(by_name) == ["gateway_8081", "gateway_9000", "gateway_9443", "ingress_http"]
    http = by_name["gateway_8081"]
    assert (http.address, http.port, http.protocol) == ("127.0.0.2", 8081, ListenerProtocol.HTTP)
    # Each listener's hostname has its virtual host even without routes (requests answer 404
    # there instead of reaching another listener's routes).
    assert [vh.name for vh in http.virtual_hosts] == ["a.example.com", "b.example.com"]
    assert by_name["gateway_9443"].protocol is ListenerProtocol.TLS_PASSTHROUGH
    assert by_name["gateway_9000"].protocol is ListenerProtocol.TCP
    assert _status(result, "Gateway", "app", "a")["addresses"] == [
        {"type": "IPAddress", "value": "127.0.0.2"}
    ]


def test_gateway_ports_that_are_turnouts_own_are_refused_with_the_flag_named() -> None:
    result = compile_docs(GATEWAYS, CompileOptions(http_port=8081, https_port=9000))
    for gateway, listener, flag in (("a", 0, "--http-port"), ("b", 0, "--http-port")):
        status = _status(result, "Gateway", "app", gateway)["listeners"][listener]
        accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
        assert (accepted["status"], accepted["reason"]) == ("False", "PortUnavailable")
        assert flag in accepted["message"]
    stream = _status(result, "Gateway", "app", "a")["listeners"][2]
    assert "--https-port" in stream["conditions"][0]["message"]
    names = sorted(lst.name for lst in result.graph.listeners)
    assert names == ["gateway_9443", "ingress_http"]
    assert next(lst for lst in result.graph.listeners if lst.name == "ingress_http").port == 8081


def test_ports_turnout_itself_listens_on_are_refused() -> None:
    result = compile_docs(GATEWAYS, CompileOptions(reserved_ports=((9000, "--admin-port"),)))
    stream = _status(result, "Gateway", "app", "a")["listeners"][2]
    accepted = next(c for c in stream["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "PortUnavailable")
    assert "--admin-port" in accepted["message"]
    assert "gateway_9000" not in {lst.name for lst in result.graph.listeners}
    serve = ServeConfig(paths=(), admin_port=1, xds_port=2, envoy_admin_port=3)
    assert dict(compile_options(serve).reserved_ports) == {
        1: "--admin-port",
        2: "--xds-port",
        3: "--envoy-admin-port",
    }


def test_a_gateway_of_another_controller_name_is_not_turnouts() -> None:
    result = compile_docs(GATEWAYS, CompileOptions(gateway_controller_name="example.com/x"))
    assert not [s for s in result.statuses if s.ref.group == "gateway.networking.k8s.io"]
    assert [lst.name for lst in result.graph.listeners] == ["ingress_http"]


def test_bad_listener_values_never_raise() -> None:
    text = CLASS + gateway_doc(
        "odd",
        '"not a listener"',
        '{name: [x], port: "80", protocol: 7, hostname: 5}',
        "{name: sel, port: 8081, protocol: HTTP,\n"
        "     allowedRoutes: {namespaces: {from: Selector,"
        " selector: {matchExpressions: [{key: a}]}}}}",
        '{name: kinds, port: 8082, protocol: HTTP, allowedRoutes: {kinds: ["HTTPRoute"]}}',
        '{name: tls, port: 8443, protocol: HTTPS, tls: {certificateRefs: ["x", {name: 3}]}}',
    )
    result = compile_docs(text, CompileOptions(https_port=10443))
    status = _status(result, "Gateway", "app", "odd")
    reasons = [_conditions(lst["conditions"]) for lst in status["listeners"]]
    assert reasons[0]["Accepted"] == ("False", "UnsupportedValue")
    assert reasons[1]["Accepted"][0] == "False"
    assert reasons[2]["Accepted"] == ("False", "UnsupportedValue")
    assert reasons[3]["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert reasons[4]["ResolvedRefs"] == ("False", "InvalidCertificateRef")


# --- Programmed after ACK -------------------------------------------------------------------


def _gateway_status(programmed_reason: str) -> ObjectStatus:
    from turnout.dialects.gatewayapi.conditions import GATEWAY_SHAPE
    from turnout.objects import ObjectRef
    from turnout.status.model import Condition, ConditionStatus, Section, State

    def cond(type_: str, status: ConditionStatus, reason: str) -> Condition:
        return Condition(type_, status, reason, "m")

    def listener(name: str, reason: str) -> Section:
        conditions = (cond("Programmed", ConditionStatus.FALSE, reason),)
        return Section("listeners", name, conditions, {"name": name})

    return ObjectStatus(
        ref=ObjectRef("gateway.networking.k8s.io", "Gateway", "app", "gw"),
        api_version="gateway.networking.k8s.io/v1",
        state=State.VALID,
        summary="",
        shape=GATEWAY_SHAPE,
        conditions=(
            cond("Accepted", ConditionStatus.TRUE, "Accepted"),
            cond("Programmed", ConditionStatus.FALSE, programmed_reason),
        ),
        sections=(listener("ok", "Pending"), listener("bad", "Invalid")),
    )


def test_programmed_statuses_turn_only_pending_true() -> None:
    (out,) = programmed_statuses([_gateway_status("Pending")])
    assert _programmed_of(out.body) == ("True", "Programmed")
    listeners = out.body["listeners"]
    assert _programmed_of(listeners[0]) == ("True", "Programmed")
    assert _programmed_of(listeners[1]) == ("False", "Invalid")
    (invalid,) = programmed_statuses([_gateway_status("Invalid")])
    assert _programmed_of(invalid.body) == ("False", "Invalid")


GATEWAY_FILE = CLASS + gateway_doc("gw", "{name: web, port: 18081, protocol: HTTP}")


def _programmed(controller: Controller) -> tuple[str, str]:
    status = next(s for s in controller.statuses() if s.ref.kind == "Gateway")
    listener = _programmed_of(status.body["listeners"][0])
    gateway = _programmed_of(status.body)
    assert listener == gateway
    return gateway


async def _controller(tmp_path: Path, text: str = GATEWAY_FILE) -> Controller:
    """A started controller serving `text` as its one file, without Envoy (a FakeEnvoy connects)."""
    (tmp_path / "gw.yaml").write_text(text)
    controller = build_controller(
        ServeConfig(
            paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
        )
    )
    await controller.start()
    return controller


def _applied_version(controller: Controller) -> str:
    applied = controller.applied
    assert applied is not None
    return applied.version


async def test_controller_reports_programmed_once_envoy_acked(tmp_path: Path) -> None:
    controller = await _controller(tmp_path)
    fake: FakeEnvoy | None = None
    try:
        # No Envoy connected yet: the compile's Pending stands.
        assert _programmed(controller) == ("False", "Pending")
        fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
        version = _applied_version(controller)
        assert await controller.xds.wait_acked(version, 5.0)
        assert _programmed(controller) == ("True", "Programmed")
        # A changed listener is Pending again until Envoy acknowledges it too. `reload` returns
        # without yielding to the event loop after installing the snapshot, so no ADS stream
        # has seen it yet: this check cannot race the fake Envoy's ACK.
        (tmp_path / "gw.yaml").write_text(GATEWAY_FILE.replace("18081", "18082"))
        newer = await controller.reload()
        assert newer is not None and newer.version != version
        assert _programmed(controller) == ("False", "Pending")
        assert await controller.xds.wait_acked(newer.version, 5.0)
        assert _programmed(controller) == ("True", "Programmed")
    finally:
        if fake is not None:
            await fake.stop()
        await controller.stop()


def _gateways_gauge(controller: Controller, programmed: str) -> float:
    return float(controller.metrics.gateways.labels(programmed=programmed)._value.get())


async def test_controller_settles_programmed_when_envoy_acks_without_a_status_read(
    tmp_path: Path,
) -> None:
    controller = await _controller(tmp_path)
    fake: FakeEnvoy | None = None
    try:
        assert _gateways_gauge(controller, "False") == 1
        assert _gateways_gauge(controller, "True") == 0
        fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
        # Nothing reads /status or scrapes /metrics: Envoy's ACK alone settles the Gateway.
        await until(lambda: _gateways_gauge(controller, "True") == 1, 5.0)
        assert _gateways_gauge(controller, "False") == 0
        assert _programmed(controller) == ("True", "Programmed")
    finally:
        if fake is not None:
            await fake.stop()
        await controller.stop()


EMPTY_STREAM_GATEWAYS = (
    CLASS
    + gateway_doc("empty-tcp", "{name: tcp, port: 18095, protocol: TCP}")
    + gateway_doc("empty-tls", "{name: tls, port: 18096, protocol: TLS, tls: {mode: Passthrough}}")
)


async def test_a_gateway_with_nothing_to_serve_is_programmed_once_envoy_acked(
    tmp_path: Path,
) -> None:
    """ "Wait for Programmed, then attach routes" must work for TCP and TLS Gateways, which get
    no Envoy listener until a route attaches: Programmed True once every Envoy acknowledged the
    configuration (their ports closed), Pending before."""
    controller = await _controller(tmp_path, EMPTY_STREAM_GATEWAYS)
    fake: FakeEnvoy | None = None
    try:
        for name in ("empty-tcp", "empty-tls"):
            gateway = _gateway(controller, name)
            assert _programmed_of(gateway) == ("False", "Pending")
        fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
        assert await controller.xds.wait_acked(_applied_version(controller), 5.0)
        for name, port in (("empty-tcp", 18095), ("empty-tls", 18096)):
            gateway = _gateway(controller, name)
            assert _programmed_of(gateway) == ("True", "Programmed")
            assert "ports stay closed until a route attaches" in _programmed_message(gateway)
            (listener,) = gateway["listeners"]
            assert _programmed_of(listener) == ("True", "Programmed")
            assert f"nothing on port {port} can be served yet" in _programmed_message(listener)
    finally:
        if fake is not None:
            await fake.stop()
        await controller.stop()


UNRELATED_FILE = (
    service_doc("other", "http", 80, 8080, "10.0.0.9")
    + """\
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: other, namespace: app}
spec:
  ingressClassName: turnout
  rules:
  - host: other.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: other, port: {number: 80}}}}
"""
)


async def test_controller_keeps_programmed_across_unrelated_changes(tmp_path: Path) -> None:
    controller = await _controller(tmp_path)
    fake = FakeEnvoy(AdsClient(controller.xds_port)).start()
    try:
        version = _applied_version(controller)
        assert await controller.xds.wait_acked(version, 5.0)
        assert _programmed(controller) == ("True", "Programmed")
        # A new Service, endpoints and an Ingress on turnout's own HTTP listener: a new
        # configuration, but the Gateway's Envoy listener and route configuration are unchanged.
        (tmp_path / "other.yaml").write_text(UNRELATED_FILE)
        newer = await controller.reload()
        assert newer is not None and newer.version != version
        assert _programmed(controller) == ("True", "Programmed")
        assert await controller.xds.wait_acked(newer.version, 5.0)
        assert _programmed(controller) == ("True", "Programmed")
    finally:
        await fake.stop()
        await controller.stop()


async def test_controller_reports_envoys_rejection_as_invalid(tmp_path: Path) -> None:
    controller = await _controller(tmp_path)
    fake = FakeEnvoy(
        AdsClient(controller.xds_port),
        reject=lambda r: "listener is broken" if r.type_url.endswith("Listener") else None,
    ).start()
    try:
        assert not await controller.xds.wait_acked(_applied_version(controller), 1.0)
        assert _programmed(controller) == ("False", "Invalid")
        status = next(s for s in controller.statuses() if s.ref.kind == "Gateway")
        message = _programmed_message(status.body["listeners"][0])
        assert message == "Envoy node-a rejected listener gateway_18081: listener is broken"
    finally:
        await fake.stop()
        await controller.stop()


TWO_GATEWAYS_FILE = (
    CLASS
    + gateway_doc(
        "good",
        "{name: tcp, port: 18091, protocol: TCP}",
        "{name: idle, port: 18093, protocol: TCP}",
    )
    + """\
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: db, namespace: app}
spec:
  parentRefs: [{name: good, sectionName: tcp}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
"""
    + service_doc("db", "db", 5432, 5432, "10.0.0.7")
    + gateway_doc("busy", "{name: web, port: 18092, protocol: HTTP}")
)
BIND_ERROR = (
    "Error adding/updating listener(s) gateway_18092: cannot bind '127.0.0.1:18092': "
    "Address already in use"
)


def _gateway(controller: Controller, name: str) -> Mapping[str, Any]:
    return next(
        s.body for s in controller.statuses() if s.ref.kind == "Gateway" and s.ref.name == name
    )


def _use_accepted_listeners(fake: FakeEnvoy, response: Any, message: str) -> None:
    """What Envoy does with the listeners of a rejected LDS response that its message does not
    name: it adds them and subscribes to their route configurations."""
    accepted = discovery_pb2.DiscoveryResponse()
    accepted.CopyFrom(response)
    del accepted.resources[:]
    for packed, name in zip(response.resources, resource_names(response), strict=True):
        if name not in message:
            accepted.resources.append(packed)
    fake._subscribe(ROUTE_TYPE, xds_refs(accepted))


def _fake_envoy_refusing(controller: Controller, listener: str, message: str) -> FakeEnvoy:
    """A started FakeEnvoy that refuses each LDS response holding `listener` with `message`
    and, as Envoy does, adds the response's other listeners."""
    fakes: list[FakeEnvoy] = []

    def reject(response: Any) -> str | None:
        if response.type_url.endswith("Listener") and listener in resource_names(response):
            _use_accepted_listeners(fakes[0], response, message)
            return message
        return None

    fake = FakeEnvoy(AdsClient(controller.xds_port), reject=reject).start()
    fakes.append(fake)
    return fake


async def test_controller_programmed_per_gateway_when_one_listener_is_rejected(
    tmp_path: Path,
) -> None:
    """Envoy applies the listeners of a rejected LDS response one by one and names the ones it
    could not add (a port another process holds): those are Invalid with Envoy's message, every
    other Gateway is Programmed; a listener with nothing to serve has no Envoy listener and says
    so."""
    controller = await _controller(tmp_path, TWO_GATEWAYS_FILE)
    fake = _fake_envoy_refusing(controller, "gateway_18092", BIND_ERROR)
    try:

        def settled() -> bool:
            good = _programmed_of(_gateway(controller, "good"))
            return good != ("False", "Pending")

        await until(settled, 5.0)
        good = _gateway(controller, "good")
        assert _programmed_of(good) == ("True", "Programmed")
        tcp, idle = good["listeners"]
        assert _programmed_of(tcp) == ("True", "Programmed")
        # Nothing to serve: no Envoy listener, and Envoy acknowledged that (port closed).
        assert _programmed_of(idle) == ("True", "Programmed")
        assert _programmed_message(idle).startswith(
            "Envoy acknowledged the configuration; nothing on port 18093 can be served yet"
        )
        busy = _gateway(controller, "busy")
        assert _programmed_of(busy) == ("False", "Invalid")
        (web,) = busy["listeners"]
        assert _programmed_of(web) == ("False", "Invalid")
        expected = f"Envoy node-a rejected listener gateway_18092: {BIND_ERROR}"
        assert _programmed_message(web) == expected
        assert _programmed_message(busy) == f"listener 'web': {expected}"
        # Reported on the Gateway, the rejection does not make the controller (/readyz) unready.
        await until(lambda: controller.readiness()[0], 5.0)
        assert "except listener(s) gateway_18092" in controller.readiness()[1]
    finally:
        await fake.stop()
        await controller.stop()


async def test_rejection_of_a_listener_no_gateway_reports_keeps_the_controller_unready(
    tmp_path: Path,
) -> None:
    """Only a rejection that the Gateway listeners report is left out of readiness: Envoy
    refusing the default HTTP listener (reported on no object) keeps /readyz failing."""
    controller = await _controller(tmp_path, TWO_GATEWAYS_FILE)
    refused = "Error adding/updating listener(s) ingress_http: cannot bind '0.0.0.0:8080'"
    fake = _fake_envoy_refusing(controller, "ingress_http", refused)
    try:
        await until(lambda: bool(controller.xds.nacks()), 5.0)
        await until(
            lambda: _programmed_of(_gateway(controller, "busy")) == ("True", "Programmed"),
            5.0,
        )
        ready, reason = controller.readiness()
        assert not ready
        version = fake.last[LISTENER_TYPE].version_info
        assert reason == f"Envoy node-a rejected listener version {version}: {refused}"
    finally:
        await fake.stop()
        await controller.stop()


def test_compile_says_when_a_port_gets_no_envoy_listener() -> None:
    """A TCP listener without a TCPRoute and a TLS passthrough listener without a TLSRoute
    have nothing to serve: no Envoy listener, and their Programmed says so (not "Envoy
    acknowledged")."""
    result = compile_docs(
        CLASS
        + gateway_doc(
            "gw",
            "{name: tcp, port: 9000, protocol: TCP}",
            "{name: tls, port: 9443, protocol: TLS, tls: {mode: Passthrough}}",
        )
    )
    assert not any(lst.name.startswith("gateway_") for lst in translate(result.graph).listeners)
    status = next(s for s in result.statuses if s.ref.kind == "Gateway")
    for lst, port in zip(status.body["listeners"], (9000, 9443), strict=True):
        assert _programmed_of(lst) == ("False", "Pending")
        message = _programmed_message(lst)
        assert message.startswith(f"nothing on port {port} can be served yet")


# --- bad input never raises, never disturbs another Gateway --------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 70000),
    st.sampled_from(["", "*", "HTTP", "TLS", "TCP", "Same", "All", "Selector", "a.example.com"]),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
_listener = st.fixed_dictionaries(
    {},
    optional={
        "name": _values,
        "port": st.one_of(st.sampled_from([8081, 9000, 9443]), _values),
        "protocol": st.one_of(st.sampled_from(["HTTP", "HTTPS", "TLS", "TCP", "UDP"]), _values),
        "hostname": _values,
        "tls": st.one_of(
            st.fixed_dictionaries(
                {}, optional={"mode": _values, "certificateRefs": _values, "options": _values}
            ),
            _values,
        ),
        "allowedRoutes": st.one_of(
            st.fixed_dictionaries({}, optional={"namespaces": _values, "kinds": _values}),
            _values,
        ),
    },
)
_parent_ref = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.just("bad"), _values),
        "namespace": _values,
        "sectionName": _values,
        "port": _values,
        "group": _values,
        "kind": _values,
    },
)


@settings(max_examples=150, deadline=None)
@given(
    listeners=st.one_of(st.lists(_listener, max_size=4), _values),
    parents=st.one_of(st.lists(_parent_ref, max_size=3), _values),
    hostnames=_values,
    addresses=_values,
)
def test_malformed_gateways_and_parent_refs_never_raise_nor_disturb_others(
    listeners: Any, parents: Any, hostnames: Any, addresses: Any
) -> None:
    good = (
        CLASS
        + """
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: good, namespace: app, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  gatewayClassName: turnout
  listeners: [{name: http, port: 8081, protocol: HTTP, hostname: good.example.com}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: good, namespace: app}
spec:
  parentRefs: [{name: good}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec: {ports: [{port: 80}]}
"""
    )
    parsed = parse_text(good, "good.yaml")
    bad_gateway = KubeObject(
        "gateway.networking.k8s.io/v1",
        "Gateway",
        "app",
        "bad",
        freeze(
            {
                "metadata": {"name": "bad", "namespace": "app"},
                "spec": {
                    "gatewayClassName": "turnout",
                    "listeners": listeners,
                    "addresses": addresses,
                },
            }
        ),
    )
    bad_route = KubeObject(
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
        "app",
        "bad",
        freeze(
            {
                "metadata": {"name": "bad", "namespace": "app"},
                "spec": {"parentRefs": parents, "hostnames": hostnames},
            }
        ),
    )
    result = compile_snapshot(Snapshot.of([*parsed.objects, bad_gateway, bad_route]))
    decision = evaluate(
        result.graph, make_request(host="good.example.com", listener="gateway_8081")
    )
    assert decision.route is not None
    assert decision.route.source.object.name == "good"
    assert _status(result, "Gateway", "app", "good")["listeners"][0]["attachedRoutes"] == 1


def test_supported_features_are_sorted_and_match_the_documented_table() -> None:
    from turnout.dialects.gatewayapi.classes import SUPPORTED_FEATURES

    assert list(SUPPORTED_FEATURES) == sorted(SUPPORTED_FEATURES)
    doc = (Path(__file__).resolve().parents[2] / "docs/dialects/gateway-api.md").read_text()
    table = doc.split("## Features", 1)[1]
    documented: set[str] = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[2].startswith("yes") or " " in cells[0]:
            continue
        name = cells[0]
        if name == "HTTPRoute303/307/308RedirectStatusCode":
            documented |= {f"HTTPRoute{code}RedirectStatusCode" for code in (303, 307, 308)}
        else:
            documented.add(name)
    assert documented == set(SUPPORTED_FEATURES)
    result = compile_docs(GATEWAYS)
    features = _status(result, "GatewayClass", "default", "turnout")["supportedFeatures"]
    assert [f["name"] for f in features] == list(SUPPORTED_FEATURES)


# --- the CLI -------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway-api"


def test_check_and_explain_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    from turnout.cli import main

    assert main(["check", str(EXAMPLE), "-o", "json"]) == 0
    objects = json.loads(capsys.readouterr().out)["objects"]
    gateway = next(o for o in objects if o["kind"] == "Gateway")
    assert _conditions(gateway["status"]["conditions"])["Programmed"] == ("False", "Pending")
    args = ["explain", str(EXAMPLE), "--host", "shop.gateway.local", "--path", "/api/x"]
    assert main([*args, "--gateway-port", "8081", "-H", "x-canary: true"]) == 0
    out = capsys.readouterr().out
    assert "HTTPRoute store/shop spec.rules[0].matches[0]" in out
    assert "store/api-canary/80/" in out
    # The shared HTTP port knows nothing of the Gateway's routes.
    assert main(args) == 1
    # Another controller name: nothing is turnout's, nothing routes, nothing has a status; each
    # object is listed as ignored (issue 13: nothing ignored silently).
    assert main(["check", str(EXAMPLE), "--gateway-controller-name", "example.com/x"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not [line for line in lines if ": valid: " in line or ": invalid: " in line]
    ignored = [line.split(": ")[1] for line in lines if ": ignored: " in line]
    assert ignored == ["Gateway infra/demo", "GatewayClass turnout", "HTTPRoute store/shop"]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_check_output_shows_gateway_class_without_namespace(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`turnout check -o json|yaml` writes objects as /status does: a GatewayClass is
    cluster-scoped, so no `metadata.namespace` (a file gives it "default")."""
    import yaml

    from turnout.cli import main

    assert main(["check", str(EXAMPLE), "-o", output]) == 0
    text = capsys.readouterr().out
    doc = json.loads(text) if output == "json" else yaml.safe_load(text)
    (gateway_class,) = [o for o in doc["objects"] if o["kind"] == "GatewayClass"]
    assert gateway_class["metadata"] == {"name": gateway_class["metadata"]["name"]}
    gateway = next(o for o in doc["objects"] if o["kind"] == "Gateway")
    assert set(gateway["metadata"]) == {"namespace", "name"}


def test_status_json_shows_gateway_class_without_namespace() -> None:
    result = compile_docs(GATEWAY_FILE)
    objects = [default_dialects().status_json(s) for s in result.statuses]
    (gateway_class,) = [o for o in objects if o["kind"] == "GatewayClass"]
    assert gateway_class["metadata"] == {"name": "turnout"}
    (gateway,) = [o for o in objects if o["kind"] == "Gateway"]
    assert gateway["metadata"] == {"namespace": "app", "name": "gw"}


@pytest.mark.parametrize(
    ("hostname", "valid"),
    [
        ("localhost", True),
        ("*.local", True),
        ("a-b.example.com", True),
        ("1.2.3", True),
        ("a" * 63 + ".com", True),
        ("a" * 64 + ".com", False),
        (".".join(["a" * 60] * 4) + ".abcdefghi", True),  # 253 characters
        (".".join(["a" * 60] * 4) + ".abcdefghij", False),  # 254 characters
        ("1.2.3.4", False),
        ("::1", False),
        ("*", False),
        ("*.*.example.com", False),
        ("x*.example.com", False),
        ("www.example.com.", False),
        ("www.example.com:80", False),
        ("-a.example.com", False),
        ("a_b.example.com", False),
        ("", False),
    ],
)
def test_hostname_pattern(hostname: str, valid: bool) -> None:
    assert (hostname_problem(hostname) is None) is valid


def test_listener_hostnames_follow_the_hostname_pattern() -> None:
    listeners = [
        f"{{name: l{i}, port: {18100 + i}, protocol: HTTP, hostname: {json.dumps(h)}}}"
        for i, h in enumerate(["localhost", "1.2.3.4", "a" * 250 + ".com"])
    ]
    result = compile_docs(CLASS + gateway_doc("gw", *listeners))
    local, ip, long = _status(result, "Gateway", "app", "gw")["listeners"]
    assert _conditions(local["conditions"])["Accepted"] == ("True", "Accepted")
    assert _conditions(ip["conditions"])["Accepted"] == ("False", "UnsupportedValue")
    message = ip["conditions"][0]["message"]
    assert message.startswith("spec.listeners[1].hostname: '1.2.3.4' is an IP address")
    assert _conditions(long["conditions"])["Accepted"] == ("False", "UnsupportedValue")
    assert "a hostname has at most 253" in long["conditions"][0]["message"]


async def test_listener_state_follows_its_own_resources() -> None:
    """`XdsServer.listener_state`: a rejected route configuration the listener loads makes it
    rejected (Envoy's message); a fixed one makes it programmed; a change elsewhere (a new
    cluster) leaves it programmed; an unknown listener is absent."""
    server = XdsServer()
    port = await server.start("127.0.0.1", 0)

    def reject(response: Any) -> str | None:
        if response.type_url.endswith("RouteConfiguration"):
            config = route_pb2.RouteConfiguration()
            response.resources[0].Unpack(config)
            if config.virtual_hosts[0].routes[0].route.timeout.seconds == 15:
                return "route timeout refused"
        return None

    fake = FakeEnvoy(AdsClient(port), reject=reject).start()
    try:
        server.set_resources(xds_snapshot(["a"]))
        await until(lambda: server.listener_state("http").programmed is not None, 5.0)
        state = server.listener_state("http")
        assert (state.programmed, state.message) == (
            False,
            "Envoy node-a rejected route main: route timeout refused",
        )
        assert not server.listener_state("nothing").exists
        fixed = server.set_resources(xds_snapshot(["a"], route_timeout=5))
        assert await server.wait_acked(fixed, 5.0)
        assert server.listener_state("http").programmed is True
        server.set_resources(xds_snapshot(["a", "b"], route_timeout=5))
        assert server.listener_state("http").programmed is True
    finally:
        await fake.stop()
        await server.stop(0)


# --- the hostname indexes give what the scans they replace gave ------------------------------

_hostnames = st.one_of(
    st.just("*"),
    st.builds(
        lambda wild, labels: ("*." if wild else "") + ".".join(labels),
        st.booleans(),
        st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4),
    ),
)


def _scanned_wider(buckets: set[str], hostname: str) -> list[str]:
    """The scan `_assemble` made before: every bucket covering `hostname`, most specific first."""
    return sorted(
        (h for h in buckets if h != hostname and (h == "*" or covers(h, hostname))),
        key=lambda h: specificity(None if h == "*" else h),
        reverse=True,
    )


def _scanned_clash(
    entries: list[tuple[str, str, int]], kind: str, hostnames: list[str]
) -> tuple[str, int, str] | None:
    """The scan `_kind_clash` made before, over (hostname, kind, value) in the order added."""
    for theirs, other_kind, value in entries:
        if other_kind == kind:
            continue
        for hostname in hostnames:
            if intersect(None if theirs == "*" else theirs, None if hostname == "*" else hostname):
                return theirs, value, hostname
    return None


@settings(max_examples=300, deadline=None)
@given(buckets=st.sets(_hostnames, max_size=12), hostname=_hostnames)
def test_wider_patterns_find_what_the_scan_found(buckets: set[str], hostname: str) -> None:
    assert [h for h in wider_patterns(hostname) if h in buckets] == _scanned_wider(
        buckets, hostname
    )


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.tuples(_hostnames, st.sampled_from(["HTTPRoute", "GRPCRoute"])), max_size=12
    ),
    kind=st.sampled_from(["HTTPRoute", "GRPCRoute"]),
    hostnames=st.lists(_hostnames, min_size=1, max_size=3),
)
def test_served_kinds_find_the_clash_the_scan_found(
    entries: list[tuple[str, str]], kind: str, hostnames: list[str]
) -> None:
    numbered = [(h, k, i) for i, (h, k) in enumerate(entries)]
    served = ServedKinds[int]()
    for h, k, i in numbered:
        served.add(k, h, i)
    assert served.first_clash(kind, hostnames) == _scanned_clash(numbered, kind, hostnames)

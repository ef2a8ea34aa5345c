"""The translator's output is accepted by the real Envoy 1.40, without deprecation warnings."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import TranslateOptions, translate, wildcard_authority_regex
from turnout.envoy.translate.options import AccessLog, AccessLogFormat, Tracing
from turnout.envoy.validate import envoy_binary, static_bootstrap, validate_resources
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Endpoint,
    Forward,
    HeaderMatch,
    HostnameMatch,
    Listener,
    ListenerProtocol,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    StringMatchKind,
    UpstreamProtocol,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

pytestmark = [
    pytest.mark.e2e,
]

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "rich")
# Long enough that the spelled-out authority regex would exceed Envoy's RE2 program size limit.
LONG_SUFFIX = (
    ".a-much-longer-subdomain-name-for-the-payments-service.of-some-team.in-a-large-company"
    ".example.com"
)


def _route(i: int, match: RouteMatch, action: RouteAction) -> Route:
    return Route(match, action, RouteSource(OWNER, f"spec.routes[{i}]"))


def _fwd(*clusters: tuple[str, int]) -> Forward:
    return Forward(tuple(WeightedCluster(c, w) for c, w in clusters))


def _value(kind: StringMatchKind) -> str:
    return "v.*" if kind is StringMatchKind.REGEX else "v"


def rich_graph() -> RoutingGraph:
    """A graph that uses every feature the translator supports."""
    a, b, h2 = "default/a/80/aaaa", "default/b/80/bbbb", "default/grpc/50051/cccc"
    flags: tuple[dict[str, bool], ...] = (
        {},
        {"invert": True, "ignore_case": True, "treat_missing_as_empty": True},
    )
    headers = (
        *(HeaderMatch(f"x-{k.value}", k, _value(k), **kw) for k in StringMatchKind for kw in flags),
        HeaderMatch(":method", StringMatchKind.EXACT, "GET"),
    )
    query = (
        *(QueryMatch(f"q{k.value}", k, _value(k)) for k in StringMatchKind),
        QueryMatch("qi", StringMatchKind.EXACT, "V", ignore_case=True),
    )
    matches = [
        RouteMatch(PathMatch(PathMatchKind.EXACT, "/exact")),
        RouteMatch(PathMatch(PathMatchKind.PREFIX, "/prefix")),
        RouteMatch(PathMatch(PathMatchKind.SEGMENT_PREFIX, "/seg/")),
        RouteMatch(PathMatch(PathMatchKind.SEGMENT_PREFIX, "/")),
        RouteMatch(PathMatch(PathMatchKind.REGEX, "/re/[0-9]+")),
        RouteMatch(PathMatch.prefix("/headers"), headers=headers),
        RouteMatch(PathMatch.prefix("/query"), query=query),
    ]
    actions: list[RouteAction] = [
        _fwd((a, 1)),
        _fwd((a, 80), (b, 20), (h2, 0)),
        _fwd((a, 0), (b, 0)),
        _fwd((a, 0), (b, 5)),
        _fwd((a, 1), (a, 1), (b, 2)),
        DirectResponse(503, "no backend"),
        DirectResponse(204),
        DirectResponse(200, "x" * 10_000),
        *(Redirect(scheme="https", status=s) for s in (301, 302, 303, 307, 308)),
        Redirect(scheme="http", hostname="other.example.com", port=8080, path="/new"),
        Redirect(hostname="other.example.com", prefix="/v2"),
        _fwd((h2, 1)),
    ]
    routes = tuple(_route(i, matches[i % len(matches)], action) for i, action in enumerate(actions))
    vhosts = (
        VirtualHost("*", "*", routes[:3], OWNER),
        VirtualHost("*.one.example.com", "*.one.example.com", routes, OWNER,
                    HostnameMatch.WILDCARD_ONE_LABEL),
        VirtualHost("*" + LONG_SUFFIX, "*" + LONG_SUFFIX, routes[:2], OWNER,
                    HostnameMatch.WILDCARD_ONE_LABEL),
        VirtualHost("*.any.example.com", "*.any.example.com", routes, OWNER,
                    HostnameMatch.WILDCARD_ANY_LABELS),
        VirtualHost("www.example.com", "www.example.com", routes, OWNER),
        VirtualHost("empty.example.com", "empty.example.com", (), OWNER),
    )  # fmt: skip
    return RoutingGraph(
        listeners=(
            Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts),
            Listener("ingress_https", "0.0.0.0", 8443, ListenerProtocol.HTTPS, vhosts),
            Listener("other_http", "127.0.0.1", 9080, ListenerProtocol.HTTP, vhosts[4:]),
        ),
        clusters=(
            Cluster(
                a,
                "default",
                "a",
                80,
                endpoints=(Endpoint("10.0.0.2", 8080), Endpoint("10.0.0.1", 8080)),
            ),
            Cluster(b, "default", "b", 80, endpoints=()),
            Cluster(
                h2,
                "default",
                "grpc",
                50051,
                UpstreamProtocol.H2C,
                endpoints=(Endpoint("10.0.1.1", 50051),),
            ),
        ),
    )


def test_rich_graph_is_valid_without_deprecations() -> None:
    resources = translate(rich_graph(), TranslateOptions(access_log=AccessLog()))
    # Guard against the graph silently losing coverage.
    assert {lst.name for lst in resources.listeners} == {"ingress_http", "other_http"}
    assert len(resources.clusters) == 3
    result = validate_resources(resources)
    assert result.ok, result.output
    assert result.deprecation_warnings == (), result.output
    assert "deprecated" not in result.output.lower()


@pytest.mark.parametrize("fmt", list(AccessLogFormat))
def test_access_logs_and_tracing_are_valid_without_deprecations(
    fmt: AccessLogFormat, tmp_path: Path
) -> None:
    options = TranslateOptions(
        access_log=AccessLog(path=str(tmp_path / "access.log"), format=fmt),
        tracing=Tracing(collector_host="collector.example", collector_port=4317),
    )
    result = validate_resources(translate(rich_graph(), options))
    assert result.ok, result.output
    assert result.deprecation_warnings == (), result.output


def test_long_wildcard_suffix_uses_the_compact_regex() -> None:
    assert LONG_SUFFIX.replace(".", "\\.") not in wildcard_authority_regex("*" + LONG_SUFFIX)


def test_static_bootstrap_inlines_routes_and_endpoints() -> None:
    boot = static_bootstrap(translate(rich_graph()))
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    a = clusters["default/a/80/aaaa"]
    assert a["type"] == "STATIC"
    assert "eds_cluster_config" not in a
    assert len(a["load_assignment"]["endpoints"][0]["lb_endpoints"]) == 2
    hcm = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    assert "rds" not in hcm["typed_config"]
    assert hcm["typed_config"]["route_config"]["name"] == "ingress_http"


def test_validation_reports_a_broken_configuration() -> None:
    """The helper must be able to fail: a route to a cluster that does not exist is rejected."""
    resources = translate(rich_graph())
    broken = EnvoyResources(
        clusters=resources.clusters[1:],
        endpoints=resources.endpoints[1:],
        listeners=resources.listeners,
        routes=resources.routes,
    )
    result = validate_resources(broken)
    assert not result.ok
    assert "default/a/80/aaaa" in result.output


def test_missing_route_configuration_is_reported() -> None:
    resources = translate(rich_graph())
    result = validate_resources(EnvoyResources(listeners=resources.listeners))
    assert not result.ok
    assert result.returncode is None
    assert "missing route configuration" in result.output


# --- Envoy serves what the evaluator predicts ----------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def matching_graph(port: int) -> RoutingGraph:
    """Direct responses whose body names the route, so a response tells which route matched."""
    matches = [
        RouteMatch(PathMatch(PathMatchKind.EXACT, "/exact")),
        RouteMatch(PathMatch(PathMatchKind.SEGMENT_PREFIX, "/seg/")),
        RouteMatch(PathMatch(PathMatchKind.REGEX, "/re/[0-9]+")),
        RouteMatch(PathMatch.prefix("/h"), headers=(
            HeaderMatch("x-a", StringMatchKind.EXACT, "Yes", ignore_case=True),
            HeaderMatch("x-b", StringMatchKind.PRESENT, invert=True),
        )),
        RouteMatch(PathMatch.prefix("/h"), headers=(
            HeaderMatch("x-c", StringMatchKind.PREFIX, "v", invert=True,
                        treat_missing_as_empty=True),
        )),
        RouteMatch(PathMatch.prefix("/q"), query=(
            QueryMatch("p", StringMatchKind.PRESENT), QueryMatch("k", StringMatchKind.SUFFIX, "z"),
        )),
        RouteMatch(PathMatch(PathMatchKind.PREFIX, "/pre")),
    ]  # fmt: skip
    routes = (
        *(_route(i, m, DirectResponse(200, f"route-{i}")) for i, m in enumerate(matches)),
        _route(99, RouteMatch(PathMatch.prefix("/moved")), Redirect(scheme="https", status=308)),
    )
    vhosts = (
        VirtualHost("*.one.example.com", "*.one.example.com", routes, OWNER,
                    HostnameMatch.WILDCARD_ONE_LABEL),
        VirtualHost("*" + LONG_SUFFIX, "*" + LONG_SUFFIX, routes, OWNER,
                    HostnameMatch.WILDCARD_ONE_LABEL),
        VirtualHost("*.any.example.com", "*.any.example.com", routes, OWNER,
                    HostnameMatch.WILDCARD_ANY_LABELS),
    )  # fmt: skip
    return RoutingGraph(
        listeners=(Listener("ingress_http", "127.0.0.1", port, ListenerProtocol.HTTP, vhosts),)
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RoutingGraph, int]]:
    port = _free_port()
    graph = matching_graph(port)
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(static_bootstrap(translate(graph))))
    binary = envoy_binary()
    assert binary is not None
    proc = subprocess.Popen(
        [binary, "-c", str(path), "--use-dynamic-base-id", "--concurrency", "1", "-l", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    _, err = proc.communicate(timeout=10)
                    raise AssertionError(f"envoy did not start: {err.decode()}") from None
                time.sleep(0.05)
        yield graph, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


HOSTS = [
    "a.one.example.com", "A.One.Example.COM:8080", "a.b.one.example.com", "one.example.com",
    "x" + LONG_SUFFIX, "x.y" + LONG_SUFFIX, "x.y.any.example.com", "x.any.example.com:1",
]  # fmt: skip
REQUESTS: list[tuple[str, dict[str, str]]] = [
    ("/exact", {}), ("/exact/", {}), ("/seg", {}), ("/seg/x", {}), ("/segx", {}),
    ("/re/12", {}), ("/re/1x", {}), ("/h", {"x-a": "YES"}), ("/h", {"x-a": "yes", "x-b": "1"}),
    ("/h", {"x-c": "vv"}), ("/h", {}), ("/q?p&k=xyz", {}), ("/q?k=xyz", {}), ("/prefix", {}),
    ("/moved/x", {}), ("/nothing", {"x-c": "v"}),
]  # fmt: skip


def test_envoy_routes_as_the_evaluator_predicts(served: tuple[RoutingGraph, int]) -> None:
    graph, port = served
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    disagreements = []
    try:
        for host in HOSTS:
            for path, headers in REQUESTS:
                conn.request("GET", path, headers={"Host": host, **headers})
                resp = conn.getresponse()
                body = resp.read().decode()
                decision = evaluate(graph, make_request(host, path, headers=headers))
                action = decision.route.action if decision.route is not None else None
                expected = (
                    decision.status,
                    action.body if isinstance(action, DirectResponse) else "",
                )
                got = (resp.status, body if resp.status == 200 else "")
                if got != expected:
                    disagreements.append((host, path, headers, got, expected))
    finally:
        conn.close()
    assert disagreements == []

"""Global rate limiting: the `--rate-limit-*` flags, HTTPProxy's `rateLimitPolicy.global` and
Skipper's `clusterRatelimit` compiled into the graph's `GlobalRateLimit`, and the translator's
ratelimit filter, service cluster and rate limit actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from tests.builders import endpoint_slice, kube_object, service
from turnout.app import compile_options, compile_snapshot, translate_options
from turnout.cli import build_parser, serve_config
from turnout.compile_inputs import CompileOptions, RateLimitService
from turnout.dialects.routegroup.eskip import parse_filters
from turnout.dialects.routegroup.filters import translate_filters
from turnout.envoy.translate import TranslateOptions, translate
from turnout.graph.build import CompileResult
from turnout.graph.model import (
    GenericKeyEntry,
    GlobalRateLimit,
    HeaderMatch,
    HeaderValueMatchEntry,
    RateLimitDescriptor,
    RemoteAddressEntry,
    RequestHeaderEntry,
    RoutePolicies,
    StringMatchKind,
    VirtualHost,
)
from turnout.graph.validate import policies_problem
from turnout.store import Snapshot

SERVICE = RateLimitService("127.0.0.1", 8081)
CLUSTER = "turnout-ratelimit/127.0.0.1:8081"
RATELIMIT = "envoy.filters.http.ratelimit"

VHOST_GLOBAL = {
    "descriptors": [
        {"entries": [{"remoteAddress": {}}]},
        {
            "entries": [
                {"genericKey": {"key": "vhost", "value": "app"}},
                {"requestHeader": {"headerName": "X-Tenant", "descriptorKey": "tenant"}},
            ]
        },
    ]
}
ROUTE_GLOBAL = {
    "descriptors": [
        {
            "entries": [
                {
                    "requestHeaderValueMatch": {
                        "headers": [{"name": "X-Plan", "exact": "free"}],
                        "value": "free-plan",
                        "expectMatch": False,
                    }
                },
                {"genericKey": {"value": "api"}},
            ]
        }
    ]
}
EXPECTED_VHOST = GlobalRateLimit(
    (
        RateLimitDescriptor((RemoteAddressEntry(),)),
        RateLimitDescriptor(
            (GenericKeyEntry("app", "vhost"), RequestHeaderEntry("x-tenant", "tenant"))
        ),
    )
)
EXPECTED_ROUTE = GlobalRateLimit(
    (
        RateLimitDescriptor(
            (
                HeaderValueMatchEntry(
                    "free-plan",
                    (HeaderMatch("x-plan", StringMatchKind.EXACT, "free"),),
                    expect_match=False,
                ),
                GenericKeyEntry("api"),
            )
        ),
    )
)


def proxy(vhost_global: Any = None, route_global: Any = None, off_global: Any = None) -> Any:
    vhost: dict[str, Any] = {"fqdn": "app.example.com"}
    if vhost_global is not None:
        vhost["rateLimitPolicy"] = {"global": vhost_global}
    api: dict[str, Any] = {
        "conditions": [{"prefix": "/api"}],
        "services": [{"name": "app", "port": 80}],
    }
    if route_global is not None:
        api["rateLimitPolicy"] = {"global": route_global}
    off: dict[str, Any] = {
        "conditions": [{"prefix": "/off"}],
        "services": [{"name": "app", "port": 80}],
    }
    if off_global is not None:
        off["rateLimitPolicy"] = {"global": off_global}
    routes = [api, off, {"services": [{"name": "app", "port": 80}]}]
    return kube_object(
        "projectcontour.io/v1", "HTTPProxy", "app", spec={"virtualhost": vhost, "routes": routes}
    )


def compile_proxy(obj: Any, service_: RateLimitService | None = SERVICE) -> CompileResult:
    objects = [obj, service("app"), endpoint_slice("app", ["10.0.0.1"])]
    return compile_snapshot(Snapshot.of(objects), CompileOptions(rate_limit_service=service_))


def vhost_of(result: CompileResult) -> VirtualHost:
    (lst,) = result.graph.listeners
    (vh,) = lst.virtual_hosts
    return vh


def proxy_status(result: CompileResult) -> dict[str, Any]:
    (st,) = [s for s in result.statuses if s.ref.kind == "HTTPProxy"]
    return dict(st.body)


def test_every_descriptor_kind_reaches_the_graph() -> None:
    result = compile_proxy(proxy(VHOST_GLOBAL, ROUTE_GLOBAL, {"disabled": True}))
    assert proxy_status(result)["currentStatus"] == "valid"
    vh = vhost_of(result)
    assert vh.policies.global_rate_limit == EXPECTED_VHOST
    by_prefix = {r.match.path.value: r for r in vh.routes if r.match.path is not None}
    assert by_prefix["/api"].policies.global_rate_limit == EXPECTED_ROUTE
    assert by_prefix["/off"].policies.global_rate_limit == GlobalRateLimit(disabled=True)
    assert by_prefix["/"].policies.global_rate_limit is None


def test_without_a_service_a_global_policy_is_an_error_naming_the_flag() -> None:
    for obj, kind in (
        (proxy(VHOST_GLOBAL), "VirtualHostError"),
        (proxy(None, ROUTE_GLOBAL), "RouteError"),
    ):
        result = compile_proxy(obj, None)
        status = proxy_status(result)
        assert status["currentStatus"] == "invalid"
        (error,) = status["conditions"][0]["errors"]
        assert error["type"] == kind
        assert error["reason"] == "RateLimitPolicyNotValid"
        assert "--rate-limit-service HOST:PORT" in error["message"]
        # Nothing of the proxy is served: its host answers 404.
        assert [
            r for lst in result.graph.listeners for vh in lst.virtual_hosts for r in vh.routes
        ] == []


def test_a_route_opting_out_without_a_service_is_a_warning() -> None:
    result = compile_proxy(proxy(None, None, {"disabled": True}), None)
    status = proxy_status(result)
    assert status["currentStatus"] == "valid"
    (warning,) = status["conditions"][0]["warnings"]
    assert warning["reason"] == "IgnoredField"


def test_malformed_entries_are_spec_errors() -> None:
    bad = [
        {"descriptors": []},
        {"descriptors": [{"entries": []}]},
        {"descriptors": [{"entries": [{"remoteAddress": {}, "genericKey": {"value": "x"}}]}]},
        {"descriptors": [{"entries": [{"genericKey": {"key": "k"}}]}]},
        {"descriptors": [{"entries": [{"requestHeader": {"headerName": "X-A"}}]}]},
        {
            "descriptors": [
                {"entries": [{"requestHeaderValueMatch": {"value": "v", "headers": []}}]}
            ]
        },
        {
            "descriptors": [
                {
                    "entries": [
                        {
                            "requestHeaderValueMatch": {
                                "value": "v",
                                "headers": [{"name": "X-A", "present": True, "exact": "a"}],
                            }
                        }
                    ]
                }
            ]
        },
    ]
    for policy in bad:
        status = proxy_status(compile_proxy(proxy(policy)))
        assert status["currentStatus"] == "invalid", policy
        errors = status["conditions"][0]["errors"]
        assert any(
            e["type"] == "SpecError" and "rateLimitPolicy.global" in e["message"] for e in errors
        )


# --- translation ---------------------------------------------------------------------------------


def hcm_filters(res: Any) -> list[Any]:
    listener = res.listeners[0]
    hcm = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(hcm)
    return list(hcm.http_filters)


def test_no_ratelimit_filter_or_cluster_without_a_service() -> None:
    res = translate(compile_proxy(proxy()).graph, TranslateOptions())
    assert RATELIMIT not in [f.name for f in hcm_filters(res)]
    assert CLUSTER not in [c.name for c in res.clusters]


def test_the_filter_asks_the_service_as_configured() -> None:
    configured = RateLimitService(
        "127.0.0.1",
        8081,
        domain="edge",
        fail_open=True,
        x_ratelimit_headers=True,
        resource_exhausted=True,
        timeout_s=0.25,
    )
    result = compile_proxy(proxy(VHOST_GLOBAL), configured)
    res = translate(result.graph, TranslateOptions(rate_limit_service=configured))
    names = [f.name for f in hcm_filters(res)]
    assert names.index(RATELIMIT) == names.index("envoy.filters.http.local_ratelimit") + 1
    (flt,) = [f for f in hcm_filters(res) if f.name == RATELIMIT]
    config = rate_limit_pb2.RateLimit()
    flt.typed_config.Unpack(config)
    assert config.domain == "edge"
    assert config.failure_mode_deny is False
    assert config.enable_x_ratelimit_headers == rate_limit_pb2.RateLimit.DRAFT_VERSION_03
    assert config.rate_limited_as_resource_exhausted is True
    assert config.timeout.ToMilliseconds() == 250
    assert config.rate_limit_service.grpc_service.envoy_grpc.cluster_name == CLUSTER
    (cluster,) = [c for c in res.clusters if c.name == CLUSTER]
    endpoint = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint
    assert (
        endpoint.address.socket_address.address,
        endpoint.address.socket_address.port_value,
    ) == (
        "127.0.0.1",
        8081,
    )
    assert "envoy.extensions.upstreams.http.v3.HttpProtocolOptions" in (
        cluster.typed_extension_protocol_options
    )


def test_defaults_fail_closed_without_headers() -> None:
    res = translate(compile_proxy(proxy()).graph, TranslateOptions(rate_limit_service=SERVICE))
    (flt,) = [f for f in hcm_filters(res) if f.name == RATELIMIT]
    config = rate_limit_pb2.RateLimit()
    flt.typed_config.Unpack(config)
    assert config.domain == "contour"
    assert config.failure_mode_deny is True
    assert config.enable_x_ratelimit_headers == rate_limit_pb2.RateLimit.OFF


def test_actions_on_the_virtual_host_and_routes() -> None:
    result = compile_proxy(proxy(VHOST_GLOBAL, ROUTE_GLOBAL, {"disabled": True}))
    res = translate(result.graph, TranslateOptions(rate_limit_service=SERVICE))
    (rcfg,) = res.routes
    (vh,) = rcfg.virtual_hosts
    expected_vh = [
        rc.RateLimit(
            actions=[rc.RateLimit.Action(remote_address=rc.RateLimit.Action.RemoteAddress())]
        ),
        rc.RateLimit(
            actions=[
                rc.RateLimit.Action(
                    generic_key=rc.RateLimit.Action.GenericKey(
                        descriptor_key="vhost", descriptor_value="app"
                    )
                ),
                rc.RateLimit.Action(
                    request_headers=rc.RateLimit.Action.RequestHeaders(
                        header_name="x-tenant", descriptor_key="tenant"
                    )
                ),
            ]
        ),
    ]
    assert list(vh.rate_limits) == expected_vh
    routes = {r.match.prefix or r.match.path_separated_prefix: r for r in vh.routes}
    (api_limit,) = routes["/api"].route.rate_limits
    match, generic = api_limit.actions
    assert match.header_value_match.descriptor_value == "free-plan"
    assert match.header_value_match.expect_match.value is False
    (header,) = match.header_value_match.headers
    assert header.name == "x-plan" and header.string_match.exact == "free"
    assert generic.generic_key.descriptor_key == "generic_key"
    assert generic.generic_key.descriptor_value == "api"
    off = routes["/off"]
    assert not off.route.rate_limits
    per_route = rate_limit_pb2.RateLimitPerRoute()
    off.typed_per_filter_config[RATELIMIT].Unpack(per_route)
    assert per_route.vh_rate_limits == rate_limit_pb2.RateLimitPerRoute.IGNORE


# --- flags ---------------------------------------------------------------------------------------


def test_flags_reach_compile_and_translate_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "check",
            str(tmp_path),
            "--rate-limit-service",
            "rls.internal:8081",
            "--rate-limit-domain",
            "edge",
            "--rate-limit-fail-open",
            "--rate-limit-x-headers",
            "--rate-limit-resource-exhausted",
            "--rate-limit-timeout",
            "0.5",
        ]
    )
    config = serve_config(args)
    expected = RateLimitService("rls.internal", 8081, "edge", True, True, True, 0.5)
    assert compile_options(config).rate_limit_service == expected
    assert translate_options(config).rate_limit_service == expected
    plain = serve_config(build_parser().parse_args(["serve", str(tmp_path)]))
    assert compile_options(plain).rate_limit_service is None
    assert translate_options(plain).rate_limit_service is None


# --- Skipper -------------------------------------------------------------------------------------


def skipper(text: str, configured: bool = True, shunt: bool = False) -> Any:
    return translate_filters(parse_filters(text), shunt=shunt, rate_limit_service=configured)


def test_cluster_ratelimit_is_the_groups_generic_key() -> None:
    t = skipper(
        'clusterRatelimit("api", 10, "1m") -> clusterClientRatelimit("per-client", 5, "1h")'
    )
    assert t.problems == ()
    assert t.policies.global_rate_limit == GlobalRateLimit(
        (
            RateLimitDescriptor((GenericKeyEntry("api"),)),
            RateLimitDescriptor((GenericKeyEntry("per-client"), RemoteAddressEntry())),
        )
    )


def test_cluster_client_ratelimit_by_headers() -> None:
    t = skipper('clusterClientRatelimit("g", 5, "1h", "Authorization,X-Org")')
    assert t.policies.global_rate_limit == GlobalRateLimit(
        (
            RateLimitDescriptor(
                (
                    GenericKeyEntry("g"),
                    RequestHeaderEntry("authorization", "authorization"),
                    RequestHeaderEntry("x-org", "x-org"),
                )
            ),
        )
    )


def test_cluster_ratelimit_refused_where_it_cannot_work() -> None:
    cases = {
        'clusterRatelimit("g", 10, "1m")': ("--rate-limit-service HOST:PORT", False, False),
        'clusterRatelimit("g", 10, "1m", 503)': ("other than 429", True, False),
        'clusterRatelimit("g", 10, "1m") ': ("shunt route", True, True),
        'clusterRatelimit("", 10, "1m")': ("group", True, False),
        'clusterRatelimit("g", 0, "1m")': ("number of requests", True, False),
    }
    for text, (reason, configured, shunt) in cases.items():
        t = skipper(text, configured, shunt)
        (problem,) = t.problems
        assert reason in problem.message, (text, problem.message)
        assert t.policies.global_rate_limit is None


def test_envoy_limits_net_refuses_empty_descriptor_values() -> None:
    bad = GlobalRateLimit((RateLimitDescriptor((GenericKeyEntry(""),)),))
    problem = policies_problem(RoutePolicies(global_rate_limit=bad), frozenset())
    assert problem == "global rate limit descriptor[0].entries[0] value is empty"
    header = GlobalRateLimit((RateLimitDescriptor((RequestHeaderEntry("a\nb", "k"),)),))
    assert "header name" in (
        policies_problem(RoutePolicies(global_rate_limit=header), frozenset()) or ""
    )
    assert policies_problem(RoutePolicies(global_rate_limit=EXPECTED_ROUTE), frozenset()) is None

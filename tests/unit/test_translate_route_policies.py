"""Route policies -> Envoy route fields (`envoy/translate/route_policies.py`), field by field, and
the whole set through `envoy --mode validate` without deprecation warnings."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.v3 import percent_pb2

from tests.cases.route_policies import APP, OTHER, REF, SHADOW, rich_policies_graph, route
from tests.proto_checks import chain_hcm, deprecated_fields
from turnout.envoy.translate import translate, translate_cluster, translate_route
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.route_policies import (
    HTTP_PROTOCOL_OPTIONS,
    LUA_FILTER,
    PREVIOUS_ROUTES,
    SAFE_CROSS_SCHEME,
    cookie_rewrite_script,
    lua_string,
    merge_cookie_rewrites,
)
from turnout.graph.model import (
    BackendPolicies,
    Cluster,
    CookieRewrite,
    CrossSchemeRedirect,
    DirectResponse,
    Endpoint,
    Forward,
    HashPolicy,
    HashSource,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    InternalRedirectPolicy,
    Listener,
    ListenerProtocol,
    Mirror,
    PathRewrite,
    Redirect,
    RetryPolicy,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    Timeouts,
    UpstreamProtocol,
    VirtualHost,
    WeightedCluster,
)


def envoy_route(policies: RoutePolicies, action: Any = None) -> Any:
    return translate_route(route(policies, action))


def test_no_policies_changes_nothing() -> None:
    assert envoy_route(RoutePolicies()) == translate_route(
        Route(RouteMatch(), Forward((WeightedCluster(APP, 1),)), RouteSource(REF, "spec.routes[0]"))
    )


def test_timeouts_none_is_envoys_default_and_zero_disables() -> None:
    out = envoy_route(RoutePolicies(timeouts=Timeouts(response_s=1.5, idle_s=0.0))).route
    assert out.timeout.ToMilliseconds() == 1500
    assert out.HasField("idle_timeout") and out.idle_timeout.ToNanoseconds() == 0
    unset = envoy_route(RoutePolicies(timeouts=Timeouts())).route
    assert not unset.HasField("timeout") and not unset.HasField("idle_timeout")


def test_backend_request_timeout_is_the_per_try_timeout() -> None:
    out = envoy_route(RoutePolicies(timeouts=Timeouts(backend_request_s=0.25))).route
    assert out.retry_policy.per_try_timeout.ToMilliseconds() == 250


def test_retry_policy() -> None:
    retry = RetryPolicy(
        count=3, per_try_timeout_s=0.15, retry_on=("5xx", "reset"), retriable_status_codes=(418,)
    )
    out = envoy_route(RoutePolicies(retry=retry)).route.retry_policy
    # As Contour: the conditions as written, the codes passed along (Envoy only uses them under
    # `retriable-status-codes`, which is not added).
    assert out.retry_on == "5xx,reset"
    assert out.num_retries.value == 3
    assert out.per_try_timeout.ToMilliseconds() == 150
    assert list(out.retriable_status_codes) == [418]
    codes = RetryPolicy(retry_on=("retriable-status-codes",), retriable_status_codes=(503, 418))
    out = envoy_route(RoutePolicies(retry=codes)).route.retry_policy
    assert out.retry_on == "retriable-status-codes"
    assert list(out.retriable_status_codes) == [503, 418]


def test_internal_redirect_defaults_leave_envoys() -> None:
    out = envoy_route(RoutePolicies(internal_redirect=InternalRedirectPolicy())).route
    policy = out.internal_redirect_policy
    assert out.HasField("internal_redirect_policy")
    # Unset limit and codes: Envoy's one redirect, on a 302 only; Never: same scheme only.
    assert not policy.HasField("max_internal_redirects")
    assert list(policy.redirect_response_codes) == []
    assert policy.allow_cross_scheme_redirect is False
    assert list(policy.predicates) == []


@pytest.mark.parametrize(
    ("cross", "deny", "allowed", "predicates"),
    [
        (CrossSchemeRedirect.ALWAYS, False, True, []),
        (CrossSchemeRedirect.NEVER, True, False, [PREVIOUS_ROUTES]),
        (CrossSchemeRedirect.SAFE_ONLY, False, True, [SAFE_CROSS_SCHEME]),
        (CrossSchemeRedirect.SAFE_ONLY, True, True, [SAFE_CROSS_SCHEME, PREVIOUS_ROUTES]),
    ],
)
def test_internal_redirect_policy(
    cross: CrossSchemeRedirect, deny: bool, allowed: bool, predicates: list[str]
) -> None:
    policy = InternalRedirectPolicy(
        max_redirects=4, response_codes=(301, 307), cross_scheme=cross, deny_repeated_route=deny
    )
    out = envoy_route(RoutePolicies(internal_redirect=policy)).route.internal_redirect_policy
    assert out.max_internal_redirects.value == 4
    assert list(out.redirect_response_codes) == [301, 307]
    assert out.allow_cross_scheme_redirect is allowed
    assert [p.name for p in out.predicates] == predicates
    types = [p.typed_config.type_url.rsplit(".", 1)[-1] for p in out.predicates]
    assert types == [
        {SAFE_CROSS_SCHEME: "SafeCrossSchemeConfig", PREVIOUS_ROUTES: "PreviousRoutesConfig"}[n]
        for n in predicates
    ]


def test_zero_retries_is_explicit() -> None:
    out = envoy_route(RoutePolicies(retry=RetryPolicy(count=0))).route.retry_policy
    # Unset would be Envoy's default of one retry.
    assert out.HasField("num_retries") and out.num_retries.value == 0
    assert out.retry_on == "5xx"
    assert not out.HasField("per_try_timeout")


def test_header_policies_on_the_route() -> None:
    policies = RoutePolicies(
        request_headers=HeaderPolicy(
            set=(HeaderValue("X-Set", "a"),), add=(HeaderValue("X-Add", "b"),), remove=("X-Gone",)
        ),
        response_headers=HeaderPolicy(set=(HeaderValue("X-Resp", "%%1"),), remove=("Server",)),
    )
    out = envoy_route(policies)
    assert [
        (h.header.key, h.header.value, h.append_action) for h in out.request_headers_to_add
    ] == [
        ("X-Set", "a", base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD),
        ("X-Add", "b", base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD),
    ]
    assert list(out.request_headers_to_remove) == ["X-Gone"]
    assert [(h.header.key, h.header.value) for h in out.response_headers_to_add] == [
        ("X-Resp", "%%1")
    ]
    assert list(out.response_headers_to_remove) == ["Server"]


def test_host_rewrite_literal_or_from_a_header() -> None:
    literal = envoy_route(RoutePolicies(host_rewrite=HostRewrite(literal="in.example.com"))).route
    assert literal.host_rewrite_literal == "in.example.com"
    header = envoy_route(RoutePolicies(host_rewrite=HostRewrite(from_header="x-host"))).route
    assert header.host_rewrite_header == "x-host"


@pytest.mark.parametrize(
    ("rewrite", "field", "value"),
    [
        (PathRewrite(prefix="/new"), "prefix_rewrite", "/new"),
        # Envoy reads an empty prefix_rewrite as none; replacing with nothing is replacing with /.
        (PathRewrite(prefix=""), "prefix_rewrite", "/"),
    ],
)
def test_prefix_rewrite(rewrite: PathRewrite, field: str, value: str) -> None:
    assert getattr(envoy_route(RoutePolicies(path_rewrite=rewrite)).route, field) == value


def test_full_path_and_regex_rewrites() -> None:
    full = envoy_route(RoutePolicies(path_rewrite=PathRewrite(full_path="/x"))).route
    assert (full.regex_rewrite.pattern.regex, full.regex_rewrite.substitution) == ("^/.*$", "/x")
    regex = PathRewrite(regex="^/a/(.*)$", substitution="/b/\\1")
    out = envoy_route(RoutePolicies(path_rewrite=regex)).route
    assert (out.regex_rewrite.pattern.regex, out.regex_rewrite.substitution) == (
        "^/a/(.*)$",
        "/b/\\1",
    )


def test_mirrors_all_or_a_fraction_per_million() -> None:
    out = envoy_route(
        RoutePolicies(mirrors=(Mirror(SHADOW), Mirror(OTHER, percent=0.5)))
    ).route.request_mirror_policies
    assert out[0].cluster == SHADOW and not out[0].HasField("runtime_fraction")
    fraction = out[1].runtime_fraction.default_value
    assert (fraction.numerator, fraction.denominator) == (
        5000,
        percent_pb2.FractionalPercent.MILLION,
    )


def test_websockets_on_the_route_only() -> None:
    out = envoy_route(RoutePolicies(websockets=True)).route
    assert [u.upgrade_type for u in out.upgrade_configs] == ["websocket"]
    assert not envoy_route(RoutePolicies()).route.upgrade_configs


def test_hash_policies_in_order() -> None:
    out = envoy_route(
        RoutePolicies(
            hash_policies=(
                HashPolicy(HashSource.HEADER, "X-User", terminal=True),
                HashPolicy(HashSource.QUERY, "q"),
                HashPolicy(HashSource.SOURCE_IP),
                HashPolicy(HashSource.COOKIE, "sess", cookie_ttl_s=0.0, cookie_path="/"),
                HashPolicy(HashSource.COOKIE, "plain"),
            )
        )
    ).route.hash_policy
    assert out[0].header.header_name == "X-User" and out[0].terminal
    assert out[1].query_parameter.name == "q" and not out[1].terminal
    assert out[2].connection_properties.source_ip
    # A zero TTL is sent: it is what makes Envoy generate a session cookie.
    assert out[3].cookie.name == "sess" and out[3].cookie.HasField("ttl")
    assert out[3].cookie.ttl.ToNanoseconds() == 0 and out[3].cookie.path == "/"
    assert not out[4].cookie.HasField("ttl") and out[4].cookie.path == ""


def test_policies_need_a_route_action() -> None:
    everything = RoutePolicies(
        timeouts=Timeouts(response_s=1),
        request_headers=HeaderPolicy(set=(HeaderValue("X-A", "1"),)),
        websockets=True,
        cookie_rewrites=(CookieRewrite("a", secure=True),),
    )
    for action in (DirectResponse(503), Redirect(scheme="https")):
        out = translate_route(route(everything, action))
        assert out.WhichOneof("action") != "route"
        assert not out.request_headers_to_add and LUA_FILTER not in out.typed_per_filter_config
    # A forward with nowhere to go is a 503 without policies too.
    zero = translate_route(route(everything, Forward((WeightedCluster(APP, 0),))))
    assert zero.direct_response.status == 503 and not zero.request_headers_to_add


def test_backend_policies_turn_a_single_cluster_into_a_weighted_one() -> None:
    backend = BackendPolicies(
        request_headers=HeaderPolicy(set=(HeaderValue("X-Svc", "app"),), remove=("X-Drop",)),
        response_headers=HeaderPolicy(remove=("X-Internal",)),
        host_rewrite=HostRewrite(literal="app.internal"),
    )
    out = envoy_route(RoutePolicies(), Forward((WeightedCluster(APP, 1, backend),))).route
    assert out.WhichOneof("cluster_specifier") == "weighted_clusters"
    (entry,) = out.weighted_clusters.clusters
    assert (entry.name, entry.weight.value) == (APP, 1)
    assert [(h.header.key, h.header.value) for h in entry.request_headers_to_add] == [
        ("X-Svc", "app")
    ]
    assert list(entry.request_headers_to_remove) == ["X-Drop"]
    assert list(entry.response_headers_to_remove) == ["X-Internal"]
    assert entry.host_rewrite_literal == "app.internal"


def test_backend_policies_keep_the_split() -> None:
    backend = BackendPolicies(request_headers=HeaderPolicy(set=(HeaderValue("X-A", "1"),)))
    forward = Forward(
        (
            WeightedCluster(APP, 3, backend),
            WeightedCluster(OTHER, 1),
            WeightedCluster(APP, 2, backend),  # the same backend again: merged
            WeightedCluster(APP, 5),  # the same cluster without policies: its own entry
            WeightedCluster(SHADOW, 0, backend),  # no traffic: left out
        )
    )
    clusters = envoy_route(RoutePolicies(), forward).route.weighted_clusters.clusters
    assert [(c.name, c.weight.value, bool(c.request_headers_to_add)) for c in clusters] == [
        (APP, 5, True),
        (OTHER, 1, False),
        (APP, 5, False),
    ]


def _lua(config: Any) -> str:
    per_route = lua_pb2.LuaPerRoute()
    config.Unpack(per_route)
    return str(per_route.source_code.inline_string)


def test_cookie_rewrites_on_the_route_and_merged_per_backend() -> None:
    route_rules = (CookieRewrite("session", path="/", secure=True),)
    backend = BackendPolicies(cookie_rewrites=(CookieRewrite("session", same_site="Lax"),))
    out = envoy_route(
        RoutePolicies(cookie_rewrites=route_rules),
        Forward((WeightedCluster(APP, 1, backend), WeightedCluster(OTHER, 1))),
    )
    on_route = _lua(out.typed_per_filter_config[LUA_FILTER])
    assert '["session"] = {path = "/", secure = true}' in on_route
    # Envoy uses the most specific script only, so the backend's carries the route's rules too.
    with_backend, plain = out.route.weighted_clusters.clusters
    merged = _lua(with_backend.typed_per_filter_config[LUA_FILTER])
    assert '["session"] = {path = "/", secure = true, samesite = "Lax"}' in merged
    assert LUA_FILTER not in plain.typed_per_filter_config


def test_merge_cookie_rewrites_later_attributes_win() -> None:
    merged = merge_cookie_rewrites(
        [
            CookieRewrite("a", path="/x", secure=True),
            CookieRewrite("b", domain="b.example"),
            CookieRewrite("a", path="/y", same_site="Strict"),
        ]
    )
    assert merged == (
        CookieRewrite("a", path="/y", secure=True, same_site="Strict"),
        CookieRewrite("b", domain="b.example"),
    )


def test_lua_strings_cannot_escape_the_literal() -> None:
    assert lua_string("/a b") == '"/a b"'
    hostile = 'x"]] end os.exit() --\n'
    literal = lua_string(hostile)
    assert '"' not in literal[1:-1] and "\n" not in literal and "]" not in literal
    # Decimal escapes are bytes, so non-ASCII survives as its UTF-8 encoding.
    assert lua_string("é") == '"\\195\\169"'
    assert '["a\\034b"]' in cookie_rewrite_script((CookieRewrite('a"b', secure=False),))


def test_every_http_connection_manager_has_an_idle_lua_filter() -> None:
    graph = RoutingGraph(
        listeners=(
            Listener(
                "ingress_http",
                "0.0.0.0",
                8080,
                ListenerProtocol.HTTP,
                (VirtualHost("a.example.com", "a.example.com", (route(RoutePolicies()),), REF),),
            ),
        ),
        clusters=(Cluster(APP, "default", "app", 80),),
    )
    (chain,) = translate(graph).listeners[0].filter_chains
    hcm = chain_hcm(chain)
    names = [f.name for f in hcm.http_filters]
    assert names[-2:] == [LUA_FILTER, "envoy.filters.http.router"]
    lua = lua_pb2.Lua()
    hcm.http_filters[-2].typed_config.Unpack(lua)
    # No default code: the filter does nothing unless a route names a script.
    assert not lua.HasField("default_source_code") and not lua.inline_code


def _cluster(protocol: UpstreamProtocol, idle: float | None) -> Any:
    endpoints = (Endpoint("127.0.0.1", 1),)
    c = Cluster(APP, "default", "app", 80, protocol, endpoints, idle_connection_timeout_s=idle)
    return translate_cluster(c, TranslateOptions())


def _protocol_options(out: Any) -> Any:
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].Unpack(opts)
    return opts


def test_idle_connection_timeout_on_the_cluster() -> None:
    plain = _protocol_options(_cluster(UpstreamProtocol.HTTP, 30))
    assert plain.common_http_protocol_options.idle_timeout.ToSeconds() == 30
    assert plain.explicit_http_config.HasField("http_protocol_options")
    # Added to the HTTP/2 options a cluster already has, not replacing them.
    h2c = _protocol_options(_cluster(UpstreamProtocol.H2C, 0))
    assert h2c.explicit_http_config.HasField("http2_protocol_options")
    assert h2c.common_http_protocol_options.HasField("idle_timeout")
    assert h2c.common_http_protocol_options.idle_timeout.ToNanoseconds() == 0
    assert (
        HTTP_PROTOCOL_OPTIONS
        not in _cluster(UpstreamProtocol.HTTP, None).typed_extension_protocol_options
    )
    assert (
        HTTP_PROTOCOL_OPTIONS
        not in _cluster(UpstreamProtocol.TCP, 5).typed_extension_protocol_options
    )


def test_translation_is_deterministic_and_uses_no_deprecated_field() -> None:
    first = translate(rich_policies_graph())
    second = translate(rich_policies_graph())
    for a, b in zip(first.routes + first.clusters, second.routes + second.clusters, strict=True):
        assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    for messages in first.by_type().values():
        for m in messages:
            assert deprecated_fields(m) == []


def test_an_unknown_route_field_is_not_set() -> None:
    # Guards against a policy landing on a message where Envoy would ignore it silently.
    out = envoy_route(RoutePolicies(websockets=True))
    assert isinstance(out, rc.Route) and out.route.upgrade_configs


def test_headers_set_only_when_resolved_move_to_the_lua_script() -> None:
    """Every change of a header with a `when_resolved` value runs in the script, in order; the
    route's other headers stay Envoy's route fields."""
    policies = RoutePolicies(
        request_headers=HeaderPolicy(
            set=(
                HeaderValue("X-T", "p-%REQ(X-Id)% 100%%", when_resolved=True),
                HeaderValue("X-Plain", "1"),
            ),
            add=(HeaderValue("X-Ip", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%", True),),
            remove=("x-t", "x-gone"),
        ),
        cookie_rewrites=(CookieRewrite("sid", secure=True),),
    )
    out = envoy_route(policies)
    assert [h.header.key for h in out.request_headers_to_add] == ["X-Plain"]
    assert list(out.request_headers_to_remove) == ["x-gone"]
    script = _lua(out.typed_per_filter_config[LUA_FILTER])
    assert '{"set", "x-t", {{"s", "p-"}, {"h", "x-id"}, {"s", " 100"}, {"s", "%"}}, true}' in (
        script
    )
    assert '{"add", "x-ip", {{"ip"}}, true}' in script
    assert '{"remove", "x-t", {}, false}' in script
    assert "function envoy_on_request" in script and "function envoy_on_response" in script


def test_a_redirect_query_suffix_is_appended_by_the_lua_script() -> None:
    out = envoy_route(RoutePolicies(), Redirect(path="/p", query_suffix="a=1&b"))
    assert out.redirect.path_redirect == "/p"
    script = _lua(out.typed_per_filter_config[LUA_FILTER])
    assert 'local suffix = "a\\0611\\038b"' in script


def test_a_backend_that_answers_itself_responds_from_its_weighted_cluster() -> None:
    answer = DirectResponse(502, "no endpoints")
    out = envoy_route(
        RoutePolicies(),
        Forward(
            (
                WeightedCluster(APP, 1),
                WeightedCluster(OTHER, 1, BackendPolicies(direct_response=answer)),
            )
        ),
    )
    plain, answering = out.route.weighted_clusters.clusters
    assert LUA_FILTER not in plain.typed_per_filter_config
    script = _lua(answering.typed_per_filter_config[LUA_FILTER])
    assert '[":status"] = "502"' in script and '"no endpoints"' in script

"""Virtual-host and filter policies: the translator's HTTP filters and per-filter configurations,
and the HTTPProxy helpers that read Contour's formats (origins, durations, CIDRs, headers)."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.rbac.v3 import rbac_pb2 as rbac_config_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as rbac_filter_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.app import translate_options
from turnout.cli import build_parser
from turnout.config import ServeConfig
from turnout.dialects.httpproxy import vhost_policies as vp
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.translate.http_filters import (
    CORS_FILTER,
    LOCAL_RATELIMIT_FILTER,
    RBAC_FILTER,
    cors_policy,
    local_rate_limit,
    rbac_per_route,
)
from turnout.graph.model import (
    CorsPolicy,
    ExactOrigin,
    Forward,
    HeaderValue,
    IPFilter,
    IPFilterSource,
    IPRule,
    Listener,
    ListenerProtocol,
    LocalRateLimit,
    OriginMatch,
    RegexOrigin,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    VirtualHost,
    VirtualHostPolicies,
    WeightedCluster,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "app")
ROUTER = "envoy.filters.http.router"


def graph(
    vh_policies: VirtualHostPolicies | None = None, route_policies: RoutePolicies | None = None
) -> RoutingGraph:
    route = Route(
        RouteMatch(),
        Forward((WeightedCluster("default/app/80/x", 1),)),
        RouteSource(OWNER, "spec.routes[0]"),
        route_policies or RoutePolicies(),
    )
    vh = VirtualHost(
        "app.example.com",
        "app.example.com",
        (route,),
        OWNER,
        policies=vh_policies or VirtualHostPolicies(),
    )
    lst = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (vh,))
    return RoutingGraph(listeners=(lst,))


def hcm_of(res: Any) -> Any:
    (listener,) = res.listeners
    (chain,) = listener.filter_chains
    hcm = hcm_pb2.HttpConnectionManager()
    assert chain.filters[0].typed_config.Unpack(hcm)
    return hcm


def unpack(any_config: Any, message: Any) -> Any:
    assert any_config.Unpack(message)
    return message


CORS = CorsPolicy(
    allow_origins=(
        ExactOrigin("*"),
        ExactOrigin("https://app.example.com"),
        RegexOrigin("https://.*\\.example\\.org"),
    ),
    allow_methods=("GET", "POST"),
    allow_headers=("x-a", "x-b"),
    expose_headers=("x-c",),
    max_age_s=600,
    allow_credentials=True,
    allow_private_network=True,
)
ALLOW_LOCAL = IPFilter(True, (IPRule("127.0.0.1/32"),))
LIMIT = LocalRateLimit(requests=10, unit_s=60, burst=5, status=503)


# --- the HTTP connection manager ----------------------------------------------------------------


def test_policy_filters_run_in_order_before_the_router_and_do_nothing_by_themselves() -> None:
    hcm = hcm_of(translate(graph()))
    names = [f.name for f in hcm.http_filters]
    assert names[:3] == [CORS_FILTER, RBAC_FILTER, LOCAL_RATELIMIT_FILTER]
    assert names[-1] == ROUTER
    rbac = unpack(hcm.http_filters[1].typed_config, rbac_filter_pb2.RBAC())
    # No rules at all: `rules: {}` would deny every request.
    assert not rbac.HasField("rules")
    limit = unpack(hcm.http_filters[2].typed_config, local_rate_limit_pb2.LocalRateLimit())
    assert limit.stat_prefix
    assert not limit.HasField("token_bucket")
    assert hcm.xff_num_trusted_hops == 0


def test_num_trusted_hops_reaches_every_connection_manager() -> None:
    hcm = hcm_of(translate(graph(), TranslateOptions(num_trusted_hops=2)))
    assert hcm.xff_num_trusted_hops == 2
    assert hcm.use_remote_address.value is True
    with pytest.raises(ValueError, match="num_trusted_hops"):
        TranslateOptions(num_trusted_hops=-1)


def test_a_policy_change_touches_route_tables_only() -> None:
    plain = translate(graph())
    policed = translate(
        graph(
            VirtualHostPolicies(cors=CORS, ip_filter=ALLOW_LOCAL, rate_limit=LIMIT),
            RoutePolicies(rate_limit=LIMIT),
        )
    )
    assert [x.SerializeToString(deterministic=True) for x in plain.listeners] == [
        x.SerializeToString(deterministic=True) for x in policed.listeners
    ]
    assert plain.routes != policed.routes


# --- per-filter configuration -------------------------------------------------------------------


def test_virtual_host_policies_are_typed_per_filter_configs() -> None:
    (config,) = translate(
        graph(VirtualHostPolicies(cors=CORS, ip_filter=ALLOW_LOCAL, rate_limit=LIMIT))
    ).routes
    (vh,) = config.virtual_hosts
    assert not vh.HasField("cors")  # the deprecated field
    assert set(vh.typed_per_filter_config) == {CORS_FILTER, RBAC_FILTER, LOCAL_RATELIMIT_FILTER}
    assert not vh.routes[0].typed_per_filter_config
    cors = unpack(vh.typed_per_filter_config[CORS_FILTER], cors_pb2.CorsPolicy())
    assert cors == cors_policy(CORS)
    limit = unpack(
        vh.typed_per_filter_config[LOCAL_RATELIMIT_FILTER], local_rate_limit_pb2.LocalRateLimit()
    )
    assert limit.stat_prefix == "vhost.app.example.com"


def test_route_policies_replace_the_virtual_hosts_for_that_route() -> None:
    deny = IPFilter(False, (IPRule("10.0.0.0/8", IPFilterSource.REMOTE),))
    (config,) = translate(
        graph(
            VirtualHostPolicies(ip_filter=ALLOW_LOCAL),
            RoutePolicies(ip_filter=deny, rate_limit=LIMIT),
        )
    ).routes
    route = config.virtual_hosts[0].routes[0]
    assert set(route.typed_per_filter_config) == {RBAC_FILTER, LOCAL_RATELIMIT_FILTER}
    rbac = unpack(route.typed_per_filter_config[RBAC_FILTER], rbac_filter_pb2.RBACPerRoute())
    assert rbac.rbac.rules.action == rbac_config_pb2.RBAC.DENY
    limit = unpack(
        route.typed_per_filter_config[LOCAL_RATELIMIT_FILTER], local_rate_limit_pb2.LocalRateLimit()
    )
    # Stat sinks get a name without "/" or "[".
    assert limit.stat_prefix == "route.HTTPProxy_default_app_spec.routes_0_"


def test_cors_policy_fields() -> None:
    out = cors_policy(CORS)
    star, exact, regex = out.allow_origin_string_match
    assert (star.exact, star.ignore_case) == ("*", True)
    assert (exact.exact, exact.ignore_case) == ("https://app.example.com", True)
    assert regex.safe_regex.regex == "https://.*\\.example\\.org"
    assert out.allow_methods == "GET,POST"
    assert out.allow_headers == "x-a,x-b"
    assert out.expose_headers == "x-c"
    assert out.max_age == "600"
    assert out.allow_credentials.value is True
    assert out.allow_private_network_access.value is True
    no_cache = cors_policy(CorsPolicy(allow_origins=(ExactOrigin("*"),), max_age_s=None))
    assert no_cache.max_age == ""  # Envoy's default


def test_rbac_sources_and_actions() -> None:
    allow = rbac_per_route(
        IPFilter(True, (IPRule("10.1.2.3/8"), IPRule("2001:db8::/32", IPFilterSource.REMOTE)))
    )
    rules = allow.rbac.rules
    assert rules.action == rbac_config_pb2.RBAC.ALLOW
    (policy,) = rules.policies.values()
    assert policy.permissions[0].any is True
    peer, remote = policy.principals
    assert peer.direct_remote_ip.address_prefix == "10.0.0.0"
    assert peer.direct_remote_ip.prefix_len.value == 8
    assert remote.remote_ip.address_prefix == "2001:db8::"
    assert remote.remote_ip.prefix_len.value == 32


def test_rbac_fails_closed() -> None:
    # No rules left to admit anyone: an ALLOW without policies denies everybody.
    empty_allow = rbac_per_route(IPFilter(True, ())).rbac.rules
    assert empty_allow.action == rbac_config_pb2.RBAC.ALLOW and not empty_allow.policies
    # An allow list loses a rule that does not parse (it admits fewer addresses) ...
    allow = rbac_per_route(IPFilter(True, (IPRule("bogus"), IPRule("10.0.0.0/8")))).rbac.rules
    assert len(allow.policies["ip-filter"].principals) == 1
    # ... but a deny list with a hole would let in what it meant to keep out: deny everybody.
    deny = rbac_per_route(IPFilter(False, (IPRule("bogus"), IPRule("10.0.0.0/8")))).rbac.rules
    assert deny.action == rbac_config_pb2.RBAC.ALLOW and not deny.policies
    # A netmask or a zone is not a prefix length Envoy takes.
    for cidr in ("10.0.0.0/255.0.0.0", "fe80::1%eth0/64"):
        assert not rbac_per_route(IPFilter(True, (IPRule(cidr),))).rbac.rules.policies


def test_local_rate_limit_bucket_status_and_headers() -> None:
    out = local_rate_limit(
        LocalRateLimit(
            requests=10,
            unit_s=60,
            burst=5,
            status=503,
            response_headers=(HeaderValue("X-Limited", "yes"),),
        ),
        "vhost.a",
    )
    assert out.token_bucket.max_tokens == 15
    assert out.token_bucket.tokens_per_fill.value == 10
    assert out.token_bucket.fill_interval.seconds == 60
    assert out.status.code == 503
    for fraction in (out.filter_enabled, out.filter_enforced):
        assert fraction.default_value.numerator == 100
    (header,) = out.response_headers_to_add
    assert (header.header.key, header.header.value) == ("X-Limited", "yes")
    # 429 is Envoy's default; a status Envoy cannot send falls back to it.
    for status in (429, 418):
        assert not local_rate_limit(LocalRateLimit(1, 1, status=status), "s").HasField("status")


def test_local_rate_limit_keeps_within_envoys_bounds() -> None:
    # A header Envoy would refuse is dropped; past 10 the rest are.
    headers = (HeaderValue("X-Bad", "a\r\nb"), *(HeaderValue(f"X-H{i}", "v") for i in range(12)))
    out = local_rate_limit(LocalRateLimit(2**32, 1, burst=2**32, response_headers=headers), "s")
    assert out.token_bucket.max_tokens == 2**32 - 1
    assert out.token_bucket.tokens_per_fill.value == 2**32 - 1
    assert [h.header.key for h in out.response_headers_to_add] == [f"X-H{i}" for i in range(10)]
    assert local_rate_limit(LocalRateLimit(0, 0), "s").token_bucket.tokens_per_fill.value == 1


# --- HTTPProxy helpers (Contour's formats) ------------------------------------------------------


@pytest.mark.parametrize(
    ("max_age", "expected"),
    [
        ("", None),
        ("0", 0),
        ("0s", 0),
        ("10m", 600),
        ("1h10m10s", 4210),
        # Go's "%.0f" rounds half to even.
        ("2500ms", 2),
        ("3500ms", 4),
        ("10", 'unable to parse timeout string "10": time: missing unit in duration "10"'),
        ("1d", 'unable to parse timeout string "1d": time: unknown unit "d" in duration "1d"'),
        ("-10s", 'invalid max age value "-10s"'),
    ],
)
def test_cors_max_age(max_age: str, expected: int | str | None) -> None:
    got = vp._cors_policy(vp.CorsSpec(("*",), ("GET",), max_age=max_age))
    if isinstance(expected, str):
        assert got == expected
    else:
        assert isinstance(got, CorsPolicy) and got.max_age_s == expected


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ("*", ExactOrigin("*")),
        ("https://app.example.com", ExactOrigin("https://app.example.com")),
        ("http://localhost:8080", ExactOrigin("http://localhost:8080")),
        # Not exactly scheme://host: Contour compiles it as a regex.
        ("https://app.example.com/", RegexOrigin("https://app.example.com/")),
        ("HTTPS://app.example.com", RegexOrigin("HTTPS://app.example.com")),
        ("https://user@app.example.com", RegexOrigin("https://user@app.example.com")),
        ("https://.*\\.example\\.com", RegexOrigin("https://.*\\.example\\.com")),
        ("app.example.com", RegexOrigin("app.example.com")),
        # Neither: a bare wildcard is no regex.
        ("*.example.com", None),
        ("(unclosed", None),
    ],
)
def test_allow_origin_classification(origin: str, expected: OriginMatch | None) -> None:
    assert vp._allow_origin(origin) == expected


@pytest.mark.parametrize(
    ("cidr", "expected"),
    [
        ("10.1.2.3", ("10.1.2.3/32", "")),
        ("10.1.2.3/8", ("10.0.0.0/8", "")),
        ("2001:db8::1", ("2001:db8::1/128", "")),
        ("2001:db8::1/32", ("2001:db8::/32", "")),
        ("1.2.3.4/33", ("", "invalid CIDR address: 1.2.3.4/33")),
        ("01.2.3.4", ("", "invalid CIDR address: 01.2.3.4/32")),
        ("10.0.0.0/255.0.0.0", ("", "invalid CIDR address: 10.0.0.0/255.0.0.0")),
        ("fe80::1%eth0", ("", "invalid CIDR address: fe80::1%eth0/128")),
        ("", ("", "invalid CIDR address: /32")),
    ],
)
def test_cidrs_as_go_parses_them(cidr: str, expected: tuple[str, str]) -> None:
    assert vp._parse_cidr(cidr) == expected


def test_rate_limit_headers_as_contour_writes_them() -> None:
    got = vp._rate_limit(
        vp.LocalRateLimitSpec(
            requests=1,
            unit="second",
            response_headers=(
                vp.HeaderSpec("x-rate-limited", "100%"),
                vp.HeaderSpec("x-host", "%HOSTNAME%"),
            ),
        )
    )
    assert isinstance(got, LocalRateLimit)
    assert got.response_headers == (
        HeaderValue("X-Rate-Limited", "100%%"),
        HeaderValue("X-Host", "%HOSTNAME%"),
    )
    too_many = tuple(vp.HeaderSpec(f"x-h{i}", "v") for i in range(11))
    got = vp._rate_limit(vp.LocalRateLimitSpec(1, "second", response_headers=too_many))
    assert got == "at most 10 responseHeadersToAdd are supported, got 11"
    got = vp._rate_limit(vp.LocalRateLimitSpec(2**32 - 1, "second", burst=1))
    assert got == "requests + burst must be at most 4294967295 in local rate limit policy"
    got = vp._rate_limit(
        vp.LocalRateLimitSpec(1, "second", response_headers=(vp.HeaderSpec("x-a", "a\nb"),))
    )
    assert got == 'invalid header value for "X-A": must not contain NUL, CR or LF'


# --- the flag -----------------------------------------------------------------------------------


def test_num_trusted_hops_flag() -> None:
    parser = build_parser()
    for command in ("serve", "check", "explain"):
        extra = ["--host", "x"] if command == "explain" else []
        args = parser.parse_args([command, "f.yaml", "--num-trusted-hops", "2", *extra])
        assert args.num_trusted_hops == 2
    assert parser.parse_args(["check", "f.yaml"]).num_trusted_hops == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "f.yaml", "--num-trusted-hops", "-1"])
    config = ServeConfig(paths=(), num_trusted_hops=3)
    assert translate_options(config).num_trusted_hops == 3

"""The Envoy translator, field by field, on small hand-built graphs."""

from __future__ import annotations

from typing import Any

import pytest
import re2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from tests.proto_checks import chain_hcm, deprecated_fields
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import (
    TranslateOptions,
    downstream_tls_context,
    route_name,
    translate,
    translate_virtual_host,
    wildcard_authority_regex,
)
from turnout.envoy.translate.options import AccessLog
from turnout.envoy.validate import ConversionError, static_bootstrap
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
    TLSSecret,
    TLSTermination,
    UpstreamProtocol,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.regex import envoy_program_size
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "team-a", "app")


def route(
    match: RouteMatch | None = None,
    action: RouteAction | None = None,
    field: str = "spec.routes[0]",
) -> Route:
    return Route(
        match or RouteMatch(),
        action if action is not None else fwd(("c1", 1)),
        RouteSource(OWNER, field),
    )


def fwd(*clusters: tuple[str, int]) -> Forward:
    return Forward(tuple(WeightedCluster(c, w) for c, w in clusters))


def vhost(
    *routes: Route, host: str = "app.example.com", kind: HostnameMatch = HostnameMatch.EXACT
) -> VirtualHost:
    return VirtualHost(host.lower(), host, routes, OWNER, kind)


def graph(*vhosts: VirtualHost, clusters: tuple[Cluster, ...] = ()) -> RoutingGraph:
    lst = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts)
    return RoutingGraph(listeners=(lst,), clusters=clusters)


def one_route(r: Route) -> Any:
    """The Envoy route produced for a graph holding only `r`."""
    (config,) = translate(graph(vhost(r))).routes
    return config.virtual_hosts[0].routes[0]


def unpack_hcm(listener: Any) -> Any:
    (chain,) = listener.filter_chains
    (flt,) = chain.filters
    assert flt.name == "envoy.filters.network.http_connection_manager"
    hcm = hcm_pb2.HttpConnectionManager()
    assert flt.typed_config.Unpack(hcm)
    return hcm


# --- listeners and route configurations ---------------------------------------------------------


def test_http_listener_has_an_hcm_with_rds_over_ads() -> None:
    res = translate(graph(vhost(route())))
    (listener,) = res.listeners
    assert listener.name == "ingress_http"
    assert listener.address.socket_address.address == "0.0.0.0"
    assert listener.address.socket_address.port_value == 8080
    hcm = unpack_hcm(listener)
    assert hcm.stat_prefix == "ingress_http"
    assert hcm.WhichOneof("route_specifier") == "rds"
    assert hcm.rds.route_config_name == "ingress_http"
    assert hcm.rds.config_source.HasField("ads")
    assert hcm.rds.config_source.resource_api_version == 2  # V3
    assert hcm.normalize_path.value is True
    assert hcm.use_remote_address.value is True
    router = hcm.http_filters[-1]
    assert router.name == "envoy.filters.http.router"
    assert router.typed_config.type_url.endswith("envoy.extensions.filters.http.router.v3.Router")
    assert not hcm.access_log


def test_options_set_stat_prefix_and_access_log() -> None:
    res = translate(graph(), TranslateOptions(stat_prefix="edge-", access_log=AccessLog()))
    hcm = unpack_hcm(res.listeners[0])
    assert hcm.stat_prefix == "edge-ingress_http"
    (log,) = hcm.access_log
    assert log.name == "envoy.access_loggers.stdout"
    assert log.typed_config.type_url.endswith("StdoutAccessLog")


def test_options_reject_a_nonpositive_timeout() -> None:
    with pytest.raises(ValueError):
        TranslateOptions(connect_timeout_s=0)


def test_route_configuration_per_http_listener() -> None:
    g = graph(vhost(route(), host="b.example.com"), vhost(route(), host="a.example.com"))
    (config,) = translate(g).routes
    assert config.name == "ingress_http"
    assert config.ignore_port_in_host_matching is True
    assert [v.name for v in config.virtual_hosts] == ["b.example.com", "a.example.com"]
    assert [list(v.domains) for v in config.virtual_hosts] == [["b.example.com"], ["a.example.com"]]


def test_listener_without_virtual_hosts_still_gets_an_empty_route_table() -> None:
    res = translate(graph())
    assert [lst.name for lst in res.listeners] == ["ingress_http"]
    assert [(c.name, len(c.virtual_hosts)) for c in res.routes] == [("ingress_http", 0)]


def test_non_http_listeners_are_skipped() -> None:
    listeners = tuple(
        Listener(f"l_{p.name.lower()}", "0.0.0.0", 8000 + i, p, (vhost(route()),))
        for i, p in enumerate(ListenerProtocol)
    )
    res = translate(RoutingGraph(listeners=listeners))
    assert [lst.name for lst in res.listeners] == ["l_http"]
    assert [c.name for c in res.routes] == ["l_http"]


def test_duplicate_hostname_keeps_the_first_virtual_host() -> None:
    first = vhost(route(action=DirectResponse(201)), host="App.example.com")
    second = vhost(route(action=DirectResponse(202)), host="app.example.com")
    (config,) = translate(graph(first, second)).routes
    (vh,) = config.virtual_hosts
    assert vh.routes[0].direct_response.status == 201


# --- route order and names ----------------------------------------------------------------------


def test_routes_keep_the_graph_order() -> None:
    paths = ["/b", "/", "/a/long/prefix", "/a", "/z"]
    routes = [
        route(RouteMatch(PathMatch.prefix(p)), field=f"spec.routes[{i}]")
        for i, p in enumerate(paths)
    ]
    (config,) = translate(graph(vhost(*routes))).routes
    out = config.virtual_hosts[0].routes
    assert [r.match.prefix for r in out] == paths
    assert [r.name for r in out] == [f"HTTPProxy/team-a/app/spec.routes[{i}]" for i in range(5)]


def test_translate_virtual_host_stands_alone() -> None:
    vh = translate_virtual_host(vhost(route(), route(action=DirectResponse(418))))
    assert vh.name == "app.example.com"
    assert [r.WhichOneof("action") for r in vh.routes] == ["route", "direct_response"]


def test_long_route_names_are_shortened_deterministically() -> None:
    def src(field: str) -> RouteSource:
        return RouteSource(OWNER, field)

    a, b = src("spec." + "x" * 300 + ".a"), src("spec." + "x" * 300 + ".b")
    assert len(route_name(a)) == 200
    assert route_name(a) == route_name(src("spec." + "x" * 300 + ".a"))
    assert route_name(a) != route_name(b)
    assert route_name(a).startswith("HTTPProxy/team-a/app/spec.xxx")


# --- matches ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "value", "field", "expected"),
    [
        (PathMatchKind.EXACT, "/exact", "path", "/exact"),
        (PathMatchKind.PREFIX, "/pre", "prefix", "/pre"),
        (PathMatchKind.SEGMENT_PREFIX, "/api/", "path_separated_prefix", "/api"),
        (PathMatchKind.SEGMENT_PREFIX, "/api", "path_separated_prefix", "/api"),
        (PathMatchKind.SEGMENT_PREFIX, "/", "prefix", "/"),
        (PathMatchKind.SEGMENT_PREFIX, "", "prefix", "/"),
    ],
)
def test_path_match(kind: PathMatchKind, value: str, field: str, expected: str) -> None:
    match = one_route(route(RouteMatch(PathMatch(kind, value)))).match
    assert match.WhichOneof("path_specifier") == field
    assert getattr(match, field) == expected


def test_regex_path_uses_safe_regex_without_engine() -> None:
    match = one_route(route(RouteMatch(PathMatch(PathMatchKind.REGEX, "/v[0-9]+/.*")))).match
    assert match.WhichOneof("path_specifier") == "safe_regex"
    assert match.safe_regex.regex == "/v[0-9]+/.*"
    assert not match.safe_regex.HasField("google_re2")


@pytest.mark.parametrize(
    ("kind", "pattern"),
    [
        (StringMatchKind.EXACT, "exact"),
        (StringMatchKind.PREFIX, "prefix"),
        (StringMatchKind.SUFFIX, "suffix"),
        (StringMatchKind.CONTAINS, "contains"),
        (StringMatchKind.REGEX, "safe_regex"),
    ],
)
def test_header_string_matches(kind: StringMatchKind, pattern: str) -> None:
    plain = HeaderMatch("x-a", kind, "v")
    flagged = HeaderMatch(
        "x-b", kind, "w", invert=True, ignore_case=True, treat_missing_as_empty=True
    )
    h1, h2 = one_route(route(RouteMatch(headers=(plain, flagged)))).match.headers
    for h, name, value in ((h1, "x-a", "v"), (h2, "x-b", "w")):
        assert h.name == name
        assert h.WhichOneof("header_match_specifier") == "string_match"
        assert h.string_match.WhichOneof("match_pattern") == pattern
        got = h.string_match.safe_regex.regex if pattern == "safe_regex" else (
            getattr(h.string_match, pattern)
        )  # fmt: skip
        assert got == value
    assert (h1.invert_match, h1.treat_missing_header_as_empty) == (False, False)
    assert (h2.invert_match, h2.treat_missing_header_as_empty) == (True, True)
    assert h1.string_match.ignore_case is False
    # ignore_case has no effect on regexes in Envoy, so it is not emitted for them.
    assert h2.string_match.ignore_case is (kind is not StringMatchKind.REGEX)


def test_header_present_match() -> None:
    present = HeaderMatch("x-p", StringMatchKind.PRESENT)
    absent = HeaderMatch("x-q", StringMatchKind.PRESENT, invert=True, treat_missing_as_empty=True)
    h1, h2 = one_route(route(RouteMatch(headers=(present, absent)))).match.headers
    assert h1.WhichOneof("header_match_specifier") == "present_match"
    assert h1.present_match is True and h1.invert_match is False
    assert h2.present_match is True and h2.invert_match is True
    # With treat_missing_header_as_empty Envoy would call a missing header "present".
    assert h2.treat_missing_header_as_empty is False


def test_query_matches() -> None:
    query = (
        QueryMatch("a", StringMatchKind.EXACT, "1", ignore_case=True),
        QueryMatch("b", StringMatchKind.PRESENT),
        QueryMatch("c", StringMatchKind.REGEX, "[0-9]+"),
    )
    qa, qb, qc = one_route(route(RouteMatch(query=query))).match.query_parameters
    assert (qa.name, qa.string_match.exact, qa.string_match.ignore_case) == ("a", "1", True)
    assert qb.name == "b"
    assert qb.WhichOneof("query_parameter_match_specifier") == "present_match"
    assert qb.present_match is True
    assert qc.string_match.safe_regex.regex == "[0-9]+"


# --- wildcard hostnames -------------------------------------------------------------------------


def test_one_label_wildcard_adds_an_authority_match_to_every_route() -> None:
    own = HeaderMatch("x-a", StringMatchKind.EXACT, "1")
    vh = vhost(
        route(RouteMatch(headers=(own,))),
        route(action=DirectResponse(404)),
        host="*.example.com",
        kind=HostnameMatch.WILDCARD_ONE_LABEL,
    )
    (config,) = translate(graph(vh)).routes
    (out,) = config.virtual_hosts
    assert list(out.domains) == ["*.example.com"]
    for r in out.routes:
        authority = r.match.headers[0]
        assert authority.name == ":authority"
        assert authority.string_match.safe_regex.regex == wildcard_authority_regex("*.example.com")
    assert [h.name for h in out.routes[0].match.headers] == [":authority", "x-a"]


def test_any_labels_wildcard_needs_no_authority_match() -> None:
    vh = vhost(route(), host="*.example.com", kind=HostnameMatch.WILDCARD_ANY_LABELS)
    (config,) = translate(graph(vh)).routes
    assert list(config.virtual_hosts[0].domains) == ["*.example.com"]
    assert not config.virtual_hosts[0].routes[0].match.headers


# Its spelled-out regex is 112 as Envoy counts RE2 programs: over the limit of 100.
LONG = (
    "*.a-much-longer-subdomain-name-for-the-payments-service.of-some-team.in-a-large-company"
    ".example.com"
)
# Its spelled-out regex is exactly 100 as Envoy counts it (112 in RE2's default UTF-8 mode).
AT_LIMIT = "*.a-rather-long-subdomain-name-for-payments.of-some-team.in-a-large-company.example.com"


@pytest.mark.parametrize("hostname", ["*.example.com", "*.b.example.com", AT_LIMIT, LONG])
def test_authority_regex_matches_exactly_one_label_and_any_port(hostname: str) -> None:
    rx = re2.compile(wildcard_authority_regex(hostname))
    suffix = hostname[1:]
    assert envoy_program_size(wildcard_authority_regex(hostname)) <= 100  # Envoy's default limit
    for host in ("a" + suffix, "a-1" + suffix, "A" + suffix.upper(), "a" + suffix + ":8080"):
        assert rx.fullmatch(host), host
    for host in ("a.b" + suffix, "x.y.z" + suffix, suffix, suffix[1:], "a" + suffix + ":x"):
        assert not rx.fullmatch(host), host
    if hostname != LONG:
        # The compact form used for long suffixes leaves the suffix to Envoy's domain match.
        assert not rx.fullmatch("a" + suffix + "x")


def test_long_suffix_falls_back_to_counting_labels() -> None:
    assert "payments" not in wildcard_authority_regex(LONG)
    assert "payments" in wildcard_authority_regex(AT_LIMIT)
    assert "example" in wildcard_authority_regex("*.example.com")


# --- actions ------------------------------------------------------------------------------------


def test_single_cluster_forward() -> None:
    r = one_route(route(action=fwd(("default/a/80/x", 1))))
    assert r.WhichOneof("action") == "route"
    assert r.route.cluster == "default/a/80/x"


def test_weighted_clusters_keep_weights_and_drop_zeroes() -> None:
    r = one_route(route(action=fwd(("b", 30), ("a", 70), ("z", 0), ("c", 5))))
    split = r.route.weighted_clusters
    assert [(c.name, c.weight.value) for c in split.clusters] == [("b", 30), ("a", 70), ("c", 5)]
    assert not split.HasField("total_weight")


def test_duplicate_weighted_clusters_are_summed() -> None:
    r = one_route(route(action=fwd(("a", 1), ("b", 2), ("a", 3))))
    assert [(c.name, c.weight.value) for c in r.route.weighted_clusters.clusters] == [
        ("a", 4),
        ("b", 2),
    ]


def test_one_nonzero_weight_is_a_plain_cluster() -> None:
    r = one_route(route(action=fwd(("a", 0), ("b", 5))))
    assert r.route.cluster == "b"


@pytest.mark.parametrize("action", [fwd(("a", 0), ("b", 0)), fwd(("a", 0)), fwd()])
def test_no_weight_at_all_is_a_503(action: Forward) -> None:
    r = one_route(route(action=action))
    assert r.WhichOneof("action") == "direct_response"
    assert r.direct_response.status == 503


def test_direct_response() -> None:
    r = one_route(route(action=DirectResponse(502, "bad gateway")))
    assert r.direct_response.status == 502
    assert r.direct_response.body.inline_string == "bad gateway"
    empty = one_route(route(action=DirectResponse(404)))
    assert empty.direct_response.status == 404
    assert not empty.direct_response.HasField("body")


def test_direct_response_status_out_of_envoys_range_becomes_500() -> None:
    assert one_route(route(action=DirectResponse(99))).direct_response.status == 500


def test_large_direct_response_body_raises_the_route_table_limit() -> None:
    (small,) = translate(graph(vhost(route(action=DirectResponse(200, "x" * 4096))))).routes
    assert not small.HasField("max_direct_response_body_size_bytes")
    (big,) = translate(graph(vhost(route(action=DirectResponse(200, "é" * 3000))))).routes
    assert big.max_direct_response_body_size_bytes.value == 6000


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (301, rc.RedirectAction.MOVED_PERMANENTLY),
        (302, rc.RedirectAction.FOUND),
        (303, rc.RedirectAction.SEE_OTHER),
        (307, rc.RedirectAction.TEMPORARY_REDIRECT),
        (308, rc.RedirectAction.PERMANENT_REDIRECT),
        (399, rc.RedirectAction.FOUND),
    ],
)
def test_redirect_status(status: int, code: int) -> None:
    assert one_route(route(action=Redirect(status=status))).redirect.response_code == code


def test_https_redirect_with_host_port_and_path() -> None:
    red = Redirect(scheme="https", hostname="new.example.com", port=8443, path="/p", status=301)
    r = one_route(route(action=red)).redirect
    assert r.WhichOneof("scheme_rewrite_specifier") == "https_redirect"
    assert r.https_redirect is True
    assert (r.host_redirect, r.port_redirect) == ("new.example.com", 8443)
    assert r.WhichOneof("path_rewrite_specifier") == "path_redirect"
    assert r.path_redirect == "/p"


def test_scheme_redirect_and_prefix_rewrite() -> None:
    r = one_route(route(action=Redirect(scheme="HTTP", prefix="/v2"))).redirect
    assert r.scheme_redirect == "http"
    assert r.WhichOneof("path_rewrite_specifier") == "prefix_rewrite"
    assert r.prefix_rewrite == "/v2"
    assert (r.host_redirect, r.port_redirect) == ("", 0)


def test_plain_redirect_sets_only_the_code() -> None:
    r = one_route(route(action=Redirect())).redirect
    assert r.WhichOneof("scheme_rewrite_specifier") is None
    assert r.WhichOneof("path_rewrite_specifier") is None


# --- clusters and endpoints ---------------------------------------------------------------------


def test_eds_cluster() -> None:
    c = Cluster("default/a/80/x", "default", "a", 80)
    (out,) = translate(RoutingGraph(clusters=(c,))).clusters
    assert out.name == "default/a/80/x"
    assert out.type == cluster_pb2.Cluster.EDS
    assert out.eds_cluster_config.service_name == "default/a/80/x"
    assert out.eds_cluster_config.eds_config.HasField("ads")
    assert out.eds_cluster_config.eds_config.resource_api_version == 2  # V3
    assert out.connect_timeout.ToMilliseconds() == 2000
    assert out.lb_policy == cluster_pb2.Cluster.ROUND_ROBIN
    assert not out.typed_extension_protocol_options
    assert not out.HasField("http2_protocol_options")


def test_connect_timeout_from_options() -> None:
    c = Cluster("a", "default", "a", 80)
    (out,) = translate(
        RoutingGraph(clusters=(c,)), TranslateOptions(connect_timeout_s=0.25)
    ).clusters
    assert out.connect_timeout.ToMilliseconds() == 250


def test_h2c_cluster_gets_explicit_http2() -> None:
    c = Cluster("g", "default", "grpc", 50051, UpstreamProtocol.H2C)
    (out,) = translate(RoutingGraph(clusters=(c,))).clusters
    key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    assert list(out.typed_extension_protocol_options) == [key]
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    assert out.typed_extension_protocol_options[key].Unpack(opts)
    assert opts.explicit_http_config.HasField("http2_protocol_options")
    assert not out.HasField("http2_protocol_options")


def test_load_assignment_lists_sorted_endpoints_in_one_locality() -> None:
    eps = (Endpoint("10.0.0.2", 80), Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.1", 80))
    c = Cluster("a", "default", "a", 80, endpoints=eps)
    (cla,) = translate(RoutingGraph(clusters=(c,))).endpoints
    assert cla.cluster_name == "a"
    (locality,) = cla.endpoints
    got = [
        (e.endpoint.address.socket_address.address, e.endpoint.address.socket_address.port_value)
        for e in locality.lb_endpoints
    ]
    assert got == [("10.0.0.1", 80), ("10.0.0.1", 8080), ("10.0.0.2", 80)]


def test_cluster_without_endpoints_has_an_empty_load_assignment() -> None:
    (cla,) = translate(RoutingGraph(clusters=(Cluster("a", "default", "a", 80),))).endpoints
    assert cla.cluster_name == "a"
    assert not cla.endpoints


# --- the whole translation ----------------------------------------------------------------------


def rich_graph(reverse: bool = False) -> RoutingGraph:
    routes = (
        route(RouteMatch(PathMatch(PathMatchKind.REGEX, "/r.*"))),
        route(action=fwd(("c1", 1), ("c2", 3))),
        route(
            RouteMatch(headers=(HeaderMatch("x", StringMatchKind.PRESENT),)),
            Redirect(scheme="https"),
        ),
    )
    vhosts = (
        vhost(*routes),
        vhost(*routes, host="*.w.example.com", kind=HostnameMatch.WILDCARD_ONE_LABEL),
    )
    listeners = (
        Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, vhosts),
        Listener("alt_http", "127.0.0.1", 9090, ListenerProtocol.HTTP, vhosts[:1]),
    )
    clusters = (
        Cluster("c1", "default", "a", 80, endpoints=(Endpoint("10.0.0.1", 80),)),
        Cluster("c2", "default", "b", 80, UpstreamProtocol.H2C),
    )
    if reverse:
        listeners, clusters = listeners[::-1], clusters[::-1]
    return RoutingGraph(listeners=listeners, clusters=clusters)


def serialized(res: EnvoyResources) -> dict[str, list[bytes]]:
    return {
        type_url: [m.SerializeToString(deterministic=True) for m in msgs]
        for type_url, msgs in res.by_type().items()
    }


def test_translation_is_deterministic_and_sorted() -> None:
    first, second = translate(rich_graph()), translate(rich_graph())
    assert serialized(first) == serialized(second)
    # Input order of listeners and clusters does not matter: resources are sorted by name.
    assert serialized(translate(rich_graph(reverse=True))) == serialized(first)
    assert [m.name for m in first.listeners] == ["alt_http", "ingress_http"]
    assert [m.name for m in first.routes] == ["alt_http", "ingress_http"]
    assert [m.name for m in first.clusters] == ["c1", "c2"]
    assert [m.cluster_name for m in first.endpoints] == ["c1", "c2"]


def test_no_deprecated_field_is_ever_set() -> None:
    res = translate(rich_graph(), TranslateOptions(access_log=AccessLog()))
    for msgs in res.by_type().values():
        for m in msgs:
            assert deprecated_fields(m) == []
    # The checker itself finds a deprecated field when one is set.
    bad = rc.HeaderMatcher(name="x", exact_match="y")
    assert deprecated_fields(bad) == [".exact_match"]


# --- HTTPS: TLS termination, SNI filter chains, SDS secrets -------------------------------------

# Placeholders: the translator never parses PEM (the SecretResolver did), so any text does here.
CERT = "-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n"


def tls_secret(name: str = "team-a/cert/0123456789") -> TLSSecret:
    namespace, secret, _ = name.split("/")
    return TLSSecret(name, namespace, secret, CERT + name, KEY + name)


def tls_vhost(
    host: str,
    *routes: Route,
    secret: str = "team-a/cert/0123456789",
    min_version: str = "1.2",
    max_version: str = "1.3",
) -> VirtualHost:
    kind = HostnameMatch.WILDCARD_ONE_LABEL if host.startswith("*.") else HostnameMatch.EXACT
    return VirtualHost(
        host,
        host,
        routes or (route(),),
        OWNER,
        kind,
        TLSTermination(secret, min_version, max_version),
    )


def https_graph(*vhosts: VirtualHost, secrets: tuple[TLSSecret, ...] = ()) -> RoutingGraph:
    lst = Listener("ingress_https", "0.0.0.0", 8443, ListenerProtocol.HTTPS, vhosts)
    return RoutingGraph(listeners=(lst,), secrets=secrets or (tls_secret(),))


def unpack_tls_context(chain: Any) -> Any:
    assert chain.transport_socket.name == "envoy.transport_sockets.tls"
    ctx = tls_pb2.DownstreamTlsContext()
    assert chain.transport_socket.typed_config.Unpack(ctx)
    return ctx


def test_https_listener_has_a_tls_inspector_and_one_sni_chain_per_host() -> None:
    res = translate(https_graph(tls_vhost("b.example.com"), tls_vhost("a.example.com")))
    (listener,) = res.listeners
    assert listener.name == "ingress_https"
    assert listener.address.socket_address.port_value == 8443
    (inspector,) = listener.listener_filters
    assert inspector.name == "envoy.filters.listener.tls_inspector"
    assert inspector.typed_config.type_url.endswith(
        "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
    )
    # The graph's order (the builder sorts by hostname) is kept.
    assert [list(c.filter_chain_match.server_names) for c in listener.filter_chains] == [
        ["b.example.com"],
        ["a.example.com"],
    ]
    assert not listener.HasField("default_filter_chain")
    for chain in listener.filter_chains:
        host = chain.filter_chain_match.server_names[0]
        assert chain.name == f"https/{host}"
        hcm = chain_hcm(chain)
        assert hcm.stat_prefix == "ingress_https"
        assert hcm.rds.route_config_name == f"https/{host}"
        assert hcm.rds.config_source.HasField("ads")
        assert hcm.http_filters[-1].name == "envoy.filters.http.router"


def test_tls_context_takes_the_certificate_from_sds_over_ads() -> None:
    vh = tls_vhost("a.example.com", min_version="1.3", max_version="1.3")
    (chain,) = translate(https_graph(vh)).listeners[0].filter_chains
    common = unpack_tls_context(chain).common_tls_context
    (sds,) = common.tls_certificate_sds_secret_configs
    assert sds.name == "team-a/cert/0123456789"
    assert sds.sds_config.HasField("ads")
    assert sds.sds_config.resource_api_version == 2  # V3
    assert not common.tls_certificates  # never inline in the listener
    assert list(common.alpn_protocols) == ["h2", "http/1.1"]
    assert common.tls_params.tls_minimum_protocol_version == common_pb2.TlsParameters.TLSv1_3
    assert common.tls_params.tls_maximum_protocol_version == common_pb2.TlsParameters.TLSv1_3


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        ("1.2", "1.3", ("TLSv1_2", "TLSv1_3")),
        ("1.2", "1.2", ("TLSv1_2", "TLSv1_2")),
        # Unknown values fall back to the defaults instead of Envoy's build-dependent TLS_AUTO.
        ("1.0", "", ("TLSv1_2", "TLSv1_3")),
        # An inverted range would make Envoy reject the listener and every host on it.
        ("1.3", "1.2", ("TLSv1_3", "TLSv1_3")),
    ],
)
def test_tls_versions(low: str, high: str, expected: tuple[str, str]) -> None:
    ctx = downstream_tls_context(TLSTermination("s", low, high))
    params = ctx.common_tls_context.tls_params
    names = common_pb2.TlsParameters.TlsProtocol.Name
    assert (
        names(params.tls_minimum_protocol_version),
        names(params.tls_maximum_protocol_version),
    ) == expected


def test_each_tls_host_has_its_own_route_configuration_with_a_421_catch_all() -> None:
    res = translate(https_graph(tls_vhost("a.example.com", route(action=DirectResponse(201)))))
    (config,) = res.routes
    assert config.name == "https/a.example.com"
    assert config.ignore_port_in_host_matching is True
    own, misdirected = config.virtual_hosts
    assert list(own.domains) == ["a.example.com"]
    assert own.routes[0].direct_response.status == 201
    assert list(misdirected.domains) == ["*"]
    (catch_all,) = misdirected.routes
    assert catch_all.match.prefix == "/"
    assert catch_all.direct_response.status == 421


def test_a_wildcard_chain_sends_hosts_of_more_specific_chains_to_421() -> None:
    hosts = ["*.example.com", "*.b.example.com", "www.example.com", "other.org", "x.b.example.com"]
    res = translate(https_graph(*(tls_vhost(h) for h in hosts)))
    by_name = {c.name: c for c in res.routes}
    misdirected = {name: list(c.virtual_hosts[1].domains) for name, c in by_name.items()}
    # Envoy prefers an exact domain, then the longest wildcard: these hosts would otherwise be
    # served by *.example.com on a connection whose SNI chose it.
    assert misdirected["https/*.example.com"] == [
        "*",
        "*.b.example.com",
        "www.example.com",
        "x.b.example.com",
    ]
    assert misdirected["https/*.b.example.com"] == ["*", "x.b.example.com"]
    # Exact hosts win over every wildcard by themselves.
    assert misdirected["https/www.example.com"] == ["*"]
    assert misdirected["https/other.org"] == ["*"]


def test_https_hosts_without_tls_or_repeated_are_dropped() -> None:
    plain = vhost(route(), host="plain.example.com")
    first = tls_vhost("a.example.com", route(action=DirectResponse(201)))
    again = tls_vhost("A.example.com", route(action=DirectResponse(202)))
    res = translate(https_graph(plain, first, again))
    (listener,) = res.listeners
    assert [c.name for c in listener.filter_chains] == ["https/a.example.com"]
    (config,) = res.routes
    assert config.virtual_hosts[0].routes[0].direct_response.status == 201


def test_https_listener_without_tls_hosts_is_not_emitted() -> None:
    # Envoy rejects a listener without filter chains; the port simply stays closed.
    res = translate(https_graph(vhost(route())))
    assert res.listeners == ()
    assert res.routes == ()


def test_secrets_become_sds_resources_sorted_by_name() -> None:
    secrets = (tls_secret("team-b/cert/bbbbbbbbbb"), tls_secret("team-a/cert/aaaaaaaaaa"))
    res = translate(https_graph(tls_vhost("a.example.com"), secrets=secrets))
    assert [s.name for s in res.secrets] == ["team-a/cert/aaaaaaaaaa", "team-b/cert/bbbbbbbbbb"]
    first = res.secrets[0].tls_certificate
    assert first.certificate_chain.inline_string == CERT + "team-a/cert/aaaaaaaaaa"
    assert first.private_key.inline_string == KEY + "team-a/cert/aaaaaaaaaa"
    assert res.by_type()["type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"]


def test_key_material_stays_out_of_the_graphs_repr() -> None:
    assert KEY not in repr(tls_secret())
    assert CERT not in repr(https_graph(tls_vhost("a.example.com")))


def tls_rich_graph(reverse: bool = False) -> RoutingGraph:
    secrets = (tls_secret("team-a/a/1111111111"), tls_secret("team-a/w/2222222222"))
    vhosts = (
        tls_vhost("a.example.com", secret=secrets[0].name),
        tls_vhost("*.example.com", secret=secrets[1].name, min_version="1.3"),
    )
    http = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (vhost(route()),))
    https = Listener("ingress_https", "0.0.0.0", 8443, ListenerProtocol.HTTPS, vhosts)
    listeners = (http, https)
    if reverse:
        listeners, secrets = listeners[::-1], secrets[::-1]
    return RoutingGraph(listeners=listeners, secrets=secrets)


def test_https_translation_is_deterministic_and_uses_no_deprecated_field() -> None:
    first = translate(tls_rich_graph(), TranslateOptions(access_log=AccessLog()))
    again = translate(tls_rich_graph(reverse=True), TranslateOptions(access_log=AccessLog()))
    assert serialized(first) == serialized(again)
    assert [m.name for m in first.routes] == [
        "https/*.example.com",
        "https/a.example.com",
        "ingress_http",
    ]
    for msgs in first.by_type().values():
        for m in msgs:
            assert deprecated_fields(m) == []


def test_static_bootstrap_points_sds_references_at_static_secrets() -> None:
    res = translate(tls_rich_graph())
    bootstrap = static_bootstrap(res)
    static = bootstrap["static_resources"]
    assert sorted(s["name"] for s in static["secrets"]) == [
        "team-a/a/1111111111",
        "team-a/w/2222222222",
    ]
    https = next(lst for lst in static["listeners"] if lst["name"] == "ingress_https")
    for chain in https["filter_chains"]:
        common = chain["transport_socket"]["typed_config"]["common_tls_context"]
        for sds in common["tls_certificate_sds_secret_configs"]:
            assert set(sds) == {"name"}
        hcm = chain["filters"][0]["typed_config"]
        assert "route_config" in hcm and "rds" not in hcm
    # The translated resources themselves are untouched.
    https_listener = next(lst for lst in res.listeners if lst.name == "ingress_https")
    sds = unpack_tls_context(
        https_listener.filter_chains[0]
    ).common_tls_context.tls_certificate_sds_secret_configs[0]
    assert sds.sds_config.HasField("ads")


def test_static_bootstrap_refuses_a_missing_secret() -> None:
    res = translate(https_graph(tls_vhost("a.example.com"), secrets=(tls_secret("x/y/z"),)))
    with pytest.raises(ConversionError, match="missing secret 'team-a/cert/0123456789'"):
        static_bootstrap(res)

"""Scoped RDS for large plain-HTTP listeners (`envoy/translate/scoped_routes.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.envoy.resources import ROUTE_TYPE, SCOPED_ROUTE_TYPE
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.translate.scoped_routes import SCOPE_KEY_FILTER, SCOPE_KEY_HEADER, scope_key
from turnout.envoy.validate import static_bootstrap, validate_resources
from turnout.graph.model import (
    DirectResponse,
    HeaderMatch,
    HostnameMatch,
    Listener,
    ListenerProtocol,
    Route,
    RouteMatch,
    RouteSource,
    RoutingGraph,
    StringMatchKind,
    VirtualHost,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "team-a", "app")
SCOPED = TranslateOptions(scoped_routes_min_hosts=2)


def vhost(host: str, *routes: Route, kind: HostnameMatch = HostnameMatch.EXACT) -> VirtualHost:
    answer = Route(RouteMatch(), DirectResponse(200, host), RouteSource(OWNER, "spec.routes[0]"))
    return VirtualHost(host.lower(), host, routes or (answer,), OWNER, kind)


def graph(*vhosts: VirtualHost, protocol: ListenerProtocol = ListenerProtocol.HTTP) -> RoutingGraph:
    lst = Listener("ingress_http", "0.0.0.0", 8080, protocol, vhosts)
    return RoutingGraph(listeners=(lst,))


def hcm_of(listener: Any) -> Any:
    (chain,) = listener.filter_chains
    hcm = hcm_pb2.HttpConnectionManager()
    assert chain.filters[0].typed_config.Unpack(hcm)
    return hcm


def test_from_the_threshold_each_host_gets_a_scope_and_a_route_configuration() -> None:
    res = translate(graph(vhost("b.example.com"), vhost("a.example.com")), SCOPED)
    assert [s.name for s in res.scoped_routes] == [
        "ingress_http/a.example.com",
        "ingress_http/b.example.com",
    ]
    for scope in res.scoped_routes:
        assert scope.route_configuration_name == scope.name
        (fragment,) = scope.key.fragments
        assert fragment.string_key == scope.name.removeprefix("ingress_http/")
    assert [c.name for c in res.routes] == [s.name for s in res.scoped_routes]
    for config in res.routes:
        (vh,) = config.virtual_hosts
        assert list(vh.domains) == [config.name.removeprefix("ingress_http/")]
        assert config.ignore_port_in_host_matching
        assert list(config.request_headers_to_remove) == [SCOPE_KEY_HEADER]
    assert res.by_type()[SCOPED_ROUTE_TYPE] == res.scoped_routes
    assert res.by_type()[ROUTE_TYPE] == res.routes


def test_the_hcm_takes_its_scope_from_the_key_header_set_by_the_first_filter() -> None:
    (listener,) = translate(graph(vhost("a.example.com"), vhost("b.example.com")), SCOPED).listeners
    hcm = hcm_of(listener)
    assert hcm.WhichOneof("route_specifier") == "scoped_routes"
    scoped = hcm.scoped_routes
    assert scoped.name == "ingress_http"
    (fragment,) = scoped.scope_key_builder.fragments
    assert fragment.header_value_extractor.name == SCOPE_KEY_HEADER
    assert fragment.header_value_extractor.index == 0
    assert scoped.scoped_rds.scoped_rds_config_source.HasField("ads")
    assert scoped.rds_config_source.HasField("ads")
    assert hcm.strip_trailing_host_dot
    first = hcm.http_filters[0]
    assert first.name == SCOPE_KEY_FILTER
    lua = lua_pb2.Lua()
    assert first.typed_config.Unpack(lua)
    assert SCOPE_KEY_HEADER in lua.default_source_code.inline_string
    assert hcm.http_filters[-1].name == "envoy.filters.http.router"


def test_below_the_threshold_or_at_zero_the_listener_keeps_one_route_configuration() -> None:
    one = graph(vhost("a.example.com"))
    for res in (
        translate(one, SCOPED),
        translate(graph(vhost("a.example.com"), vhost("b.example.com"))),  # default threshold
        translate(one, TranslateOptions(scoped_routes_min_hosts=0)),
    ):
        assert not res.scoped_routes
        assert [c.name for c in res.routes] == ["ingress_http"]


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("*.example.com", HostnameMatch.WILDCARD_ONE_LABEL),
        ("*.example.com", HostnameMatch.WILDCARD_ANY_LABELS),
        ("*", HostnameMatch.EXACT),
    ],
)
def test_a_wildcard_host_keeps_the_single_route_configuration(
    host: str, kind: HostnameMatch
) -> None:
    res = translate(graph(vhost("a.example.com"), vhost(host, kind=kind)), SCOPED)
    assert not res.scoped_routes
    assert [c.name for c in res.routes] == ["ingress_http"]
    assert hcm_of(res.listeners[0]).WhichOneof("route_specifier") == "rds"


def test_a_route_naming_the_key_header_keeps_the_single_route_configuration() -> None:
    match = RouteMatch(headers=(HeaderMatch(SCOPE_KEY_HEADER, StringMatchKind.EXACT, "x"),))
    named = Route(match, DirectResponse(200), RouteSource(OWNER, "spec.routes[0]"))
    res = translate(graph(vhost("a.example.com"), vhost("b.example.com", named)), SCOPED)
    assert not res.scoped_routes
    assert [c.name for c in res.routes] == ["ingress_http"]


def test_hosts_differing_only_in_case_are_one_scope_the_first_wins() -> None:
    first, second = vhost("A.example.com"), vhost("a.example.com")
    res = translate(graph(first, second, vhost("b.example.com")), SCOPED)
    assert [s.name for s in res.scoped_routes] == [
        "ingress_http/a.example.com",
        "ingress_http/b.example.com",
    ]
    assert res.routes[0].virtual_hosts[0].domains == ["A.example.com"]


def test_tls_listeners_are_never_scoped() -> None:
    res = translate(graph(vhost("a.example.com"), protocol=ListenerProtocol.HTTPS), SCOPED)
    assert not res.scoped_routes


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("a.example.com", "a.example.com"),
        ("A.Example.COM", "a.example.com"),
        ("a.example.com:8080", "a.example.com"),
        ("A.EXAMPLE.COM:80", "a.example.com"),
        ("[::1]", "[::1]"),
        ("[::1]:8080", "[::1]"),
        ("[2001:DB8::1]:80", "[2001:db8::1]"),
        ("a.example.com:x:80", "a.example.com:x"),
        ("", ""),
    ],
)
def test_scope_key_is_envoys_virtual_host_lookup_name(host: str, key: str) -> None:
    assert scope_key(host) == key


def test_static_bootstrap_lists_the_scopes_inline_and_envoy_accepts_it() -> None:
    res = translate(graph(vhost("a.example.com"), vhost("b.example.com")), SCOPED)
    (listener,) = static_bootstrap(res)["static_resources"]["listeners"]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    scopes = hcm["scoped_routes"]["scoped_route_configurations_list"]["scoped_route_configurations"]
    assert [s["route_configuration"]["name"] for s in scopes] == [
        "ingress_http/a.example.com",
        "ingress_http/b.example.com",
    ]
    assert "scoped_rds" not in hcm["scoped_routes"]
    result = validate_resources(res)
    assert result.ok, result.output


def test_a_held_host_without_routes_keeps_a_scope_of_its_own() -> None:
    # `graph.build` holds an owned hostname whose root is invalid with a virtual host without
    # routes: Envoy answers 404 for it, in its scope as in the single route table.
    held = VirtualHost("held.example.com", "held.example.com", (), OWNER)
    res = translate(graph(vhost("a.example.com"), held), SCOPED)
    assert [s.name for s in res.scoped_routes] == [
        "ingress_http/a.example.com",
        "ingress_http/held.example.com",
    ]
    (vh,) = res.routes[1].virtual_hosts
    assert list(vh.domains) == ["held.example.com"]
    assert not vh.routes

"""Skipper's `jwtValidation` from the filter to Envoy: the filter with each discovery answer,
the RouteGroup status, the safety net, and the JWT filter, per-route requirement and JWKS
clusters the translator emits."""

from __future__ import annotations

import textwrap
from typing import Any

from google.protobuf import json_format

from tests.cases.oidc import ISSUER, RG, compile_rg
from turnout.app import compile_snapshot
from turnout.cli import decision_json
from turnout.compile_inputs import CompileOptions, IssuerDiscovery
from turnout.dialects.routegroup.eskip import parse_filters
from turnout.dialects.routegroup.filters import (
    FilterTranslation,
    routegroup_issuers,
    translate_filters,
)
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.translate.http_filters import JWT_AUTHN_FILTER
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import DirectResponse, Forward, JwtValidation, RoutePolicies
from turnout.graph.validate import policies_problem
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

JWKS = "https://keys.example.org/realm/jwks.json"


def translate_with(text: str, *answers: IssuerDiscovery) -> FilterTranslation:
    found = {a.issuer: a for a in answers}
    return translate_filters(parse_filters(text), discovery=found.get)


# --- the filter ----------------------------------------------------------------------------------


def test_a_discovered_issuer_becomes_the_routes_jwt_policy() -> None:
    t = translate_with(
        f'setRequestHeader("X-A", "1") -> jwtValidation("{ISSUER}")',
        IssuerDiscovery(ISSUER, jwks_uri=JWKS),
    )
    assert not t.problems and not t.unavailable
    assert t.policies.jwt == JwtValidation(ISSUER, JWKS)
    assert t.policies.request_headers is not None  # the other filters still apply


def test_no_answer_yet_or_a_failed_discovery_makes_the_filter_unavailable() -> None:
    pending = translate_with(f'status(200) -> jwtValidation("{ISSUER}")')
    [u] = pending.unavailable
    assert (u.name, u.index, u.reason) == ("jwtValidation", 1, "IssuerDiscoveryPending")
    assert ISSUER in u.message and "not answered yet" in u.message
    assert pending.policies.jwt is None and not pending.problems

    failed = translate_with(
        f'jwtValidation("{ISSUER}")', IssuerDiscovery(ISSUER, error="GET ... answered HTTP 500")
    )
    [u] = failed.unavailable
    assert u.reason == "IssuerDiscoveryFailed" and "HTTP 500" in u.message
    assert failed.policies.jwt is None


def test_invalid_jwt_validation_arguments_are_refused() -> None:
    for text in (
        "jwtValidation()",
        'jwtValidation("a", "b")',
        "jwtValidation(3)",
        'jwtValidation("issuer.example.org")',
        'jwtValidation("ftp://issuer.example.org")',
        'jwtValidation("https://issuer.example.org/?q=1")',
        'jwtValidation("https://issuer.example.org:99999")',
    ):
        t = translate_with(text)
        [p] = t.problems
        assert p.name == "jwtValidation" and "invalid filter parameters" in p.message, text
        assert not t.unavailable and t.policies.jwt is None


def test_two_issuers_on_one_route_are_refused_the_same_one_twice_is_not() -> None:
    other = "https://other.example.org"
    answers = (IssuerDiscovery(ISSUER, jwks_uri=JWKS), IssuerDiscovery(other, jwks_uri=JWKS))
    t = translate_with(f'jwtValidation("{ISSUER}") -> jwtValidation("{other}")', *answers)
    [p] = t.problems
    assert p.index == 1 and "second issuer" in p.message
    same = translate_with(f'jwtValidation("{ISSUER}") -> jwtValidation("{ISSUER}")', *answers)
    assert not same.problems and same.policies.jwt == JwtValidation(ISSUER, JWKS)


def test_the_issuers_a_snapshot_names() -> None:
    text = """\
        apiVersion: zalando.org/v1
        kind: RouteGroup
        metadata: {name: a, namespace: default}
        spec:
          routes:
          - filters: ['jwtValidation("https://b.example.org")', 'status(200)']
          - filters: ['setPath("/") -> jwtValidation("https://a.example.org")']
          - filters: ['jwtValidation("not a url")', 'jwtValidation(']
          - filters: 'jwtValidation("https://c.example.org")'
        ---
        apiVersion: zalando.org/v1
        kind: RouteGroup
        metadata: {name: b, namespace: default}
        spec:
          routes:
          - filters: ['jwtValidation("https://b.example.org")']
        ---
        apiVersion: zalando.org/v1
        kind: RouteGroup
        metadata:
          name: other
          namespace: default
          annotations: {zalando.org/routegroup.class: other}
        spec:
          routes:
          - filters: ['jwtValidation("https://other.example.org")']
        """
    snapshot = Snapshot.of(parse_text(textwrap.dedent(text), "t.yaml").objects)
    ours = ("https://a.example.org", "https://b.example.org")
    assert routegroup_issuers(snapshot, "skipper") == ours
    assert routegroup_issuers(snapshot) == (*ours, "https://other.example.org")


# --- the dialect and its status ------------------------------------------------------------------


def secure_route(result: Any) -> Any:
    decision = evaluate(result.graph, make_request("a.example.com", "/secure/x"))
    assert decision.route is not None
    return decision.route


def conditions(result: Any) -> dict[str, dict[str, Any]]:
    [status] = [s for s in result.statuses if s.ref.kind == "RouteGroup"]
    return {c["type"]: c for c in status.body["conditions"]}


def test_until_discovery_answers_the_route_answers_503_and_the_status_says_why() -> None:
    result = compile_rg(ISSUER)
    assert secure_route(result).action == DirectResponse(503)
    refs = conditions(result)["ResolvedRefs"]
    assert (refs["status"], refs["reason"]) == ("False", "IssuerDiscoveryPending")
    assert refs["message"].startswith("spec.routes[0].filters[0]: filter jwtValidation: ")
    assert ISSUER in refs["message"] and "answers 503" in refs["message"]
    # The other route is served as usual.
    open_route = evaluate(result.graph, make_request("a.example.com", "/open")).route
    assert open_route is not None and isinstance(open_route.action, Forward)


def test_a_failed_discovery_names_its_cause() -> None:
    result = compile_rg(ISSUER, IssuerDiscovery(ISSUER, error="GET x timed out after 10 s"))
    assert secure_route(result).action == DirectResponse(503)
    refs = conditions(result)["ResolvedRefs"]
    assert refs["reason"] == "IssuerDiscoveryFailed" and "timed out after 10 s" in refs["message"]


def test_a_discovered_issuer_protects_the_route_and_explain_shows_it() -> None:
    result = compile_rg(ISSUER, IssuerDiscovery(ISSUER, jwks_uri=JWKS))
    route = secure_route(result)
    assert isinstance(route.action, Forward)
    assert route.policies.jwt == JwtValidation(ISSUER, JWKS)
    assert conditions(result)["ResolvedRefs"]["status"] == "True"
    assert conditions(result)["Accepted"]["status"] == "True"


# --- the safety net ------------------------------------------------------------------------------


def test_the_net_refuses_jwks_uris_envoy_cannot_fetch() -> None:
    def problem(issuer: str, jwks: str) -> str | None:
        return policies_problem(RoutePolicies(jwt=JwtValidation(issuer, jwks)), frozenset())

    assert problem(ISSUER, JWKS) is None
    assert problem(ISSUER, "http://10.0.0.1:8080/keys") is None
    assert problem(ISSUER, "http://[::1]:8080/keys") is None
    for bad in (
        "keys.example.org/jwks",
        "ftp://keys.example.org/jwks",
        "https:///jwks",
        "https://keys.example.org:0/jwks",
        "https://keys.example.org:70000/jwks",
        "https://*.example.org/jwks",
        "https://keys.example.org/a b",
        "https://keys.example.org/\r\n",
    ):
        assert problem(ISSUER, bad) is not None, bad
    assert problem("", JWKS) is not None
    assert problem("https://a\r\nb", JWKS) is not None


# --- the translator ------------------------------------------------------------------------------


def as_dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


def hcm_filters(resources: Any, listener: str = "ingress_http") -> list[dict[str, Any]]:
    [lst] = [x for x in resources.listeners if x.name == listener]
    hcm = as_dict(lst)["filter_chains"][0]["filters"][0]["typed_config"]
    filters: list[dict[str, Any]] = hcm["http_filters"]
    return filters


def routes_by_prefix(resources: Any) -> dict[str, dict[str, Any]]:
    [rc] = [r for r in resources.routes if r.name == "ingress_http"]
    out: dict[str, dict[str, Any]] = {}
    for vh in as_dict(rc)["virtual_hosts"]:
        for route in vh["routes"]:
            match = route["match"]
            path = match.get("path_separated_prefix") or match.get("prefix") or match.get("path")
            out.setdefault(str(path), route)
    return out


def test_the_jwt_filter_checks_tokens_as_skipper_does_on_the_routes_that_ask() -> None:
    resources = translate(compile_rg(ISSUER, IssuerDiscovery(ISSUER, jwks_uri=JWKS)).graph)
    filters = hcm_filters(resources)
    names = [f["name"] for f in filters]
    assert names.index(JWT_AUTHN_FILTER) == names.index("envoy.filters.http.local_ratelimit") + 1
    config = filters[names.index(JWT_AUTHN_FILTER)]["typed_config"]
    name = f"{ISSUER} {JWKS}"
    assert config["strip_failure_response"] is True
    assert "rules" not in config  # no route is checked unless it asks
    assert config["requirement_map"] == {name: {"provider_name": name}}
    provider = config["providers"][name]
    assert provider["issuer"] == ISSUER
    assert provider["forward"] is True
    assert provider["from_headers"] == [{"name": "Authorization", "value_prefix": "Bearer "}]
    assert provider["subjects"] == {"safe_regex": {"regex": ".+"}}
    remote = provider["remote_jwks"]
    assert remote["http_uri"] == {
        "uri": JWKS,
        "cluster": "turnout-jwks/https/keys.example.org:443",
        "timeout": "10s",
    }
    assert remote["cache_duration"] == "3600s"
    assert remote["async_fetch"]["fast_listener"] is True

    routes = routes_by_prefix(resources)
    secure = [r for p, r in routes.items() if p.startswith("/secure")]
    assert secure and all(
        r["typed_per_filter_config"][JWT_AUTHN_FILTER]["requirement_name"] == name for r in secure
    )
    opened = [r for p, r in routes.items() if p.startswith("/open")]
    assert opened and all(
        JWT_AUTHN_FILTER not in r.get("typed_per_filter_config", {}) for r in opened
    )


def test_jwks_clusters_verify_https_servers_and_take_ip_addresses_statically() -> None:
    options = TranslateOptions(system_ca_file="/etc/turnout/ca.pem")
    resources = translate(compile_rg(ISSUER, IssuerDiscovery(ISSUER, jwks_uri=JWKS)).graph, options)
    [https] = [as_dict(c) for c in resources.clusters if c.name.startswith("turnout-jwks/")]
    tls = https["transport_socket"]["typed_config"]
    assert tls["sni"] == "keys.example.org"
    validation = tls["common_tls_context"]["validation_context"]
    assert validation["trusted_ca"] == {"filename": "/etc/turnout/ca.pem"}
    assert validation["match_typed_subject_alt_names"] == [
        {"san_type": "DNS", "matcher": {"exact": "keys.example.org"}}
    ]
    assert https["cluster_type"]["name"] == "envoy.cluster.dns"

    plain = translate(
        compile_rg(ISSUER, IssuerDiscovery(ISSUER, jwks_uri="http://127.0.0.1:8081/k")).graph
    )
    [static] = [as_dict(c) for c in plain.clusters if c.name.startswith("turnout-jwks/")]
    assert static["name"] == "turnout-jwks/http/127.0.0.1:8081"
    assert static["type"] == "STATIC" and "transport_socket" not in static
    address = static["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "127.0.0.1", "port_value": 8081}


def test_listeners_do_not_change_with_routes_only_with_the_set_of_issuers() -> None:
    def listeners(issuer_answers: tuple[IssuerDiscovery, ...], extra_route: bool) -> bytes:
        text = RG % ISSUER
        if extra_route:
            text = text.replace(
                "      - pathSubtree: /open\n",
                "      - pathSubtree: /open\n"
                f"      - pathSubtree: /more\n        filters: ['jwtValidation(\"{ISSUER}\")']\n",
            )
        snapshot = Snapshot.of(parse_text(textwrap.dedent(text), "rg.yaml").objects)
        result = compile_snapshot(snapshot, CompileOptions(issuer_discovery=issuer_answers))
        return b"".join(
            x.SerializeToString(deterministic=True) for x in translate(result.graph).listeners
        )

    found = (IssuerDiscovery(ISSUER, jwks_uri=JWKS),)
    assert listeners(found, False) == listeners(found, True)
    # Without any route validating tokens the listeners carry no JWT filter at all.
    without = listeners((), False)
    assert JWT_AUTHN_FILTER.encode() not in without
    assert JWT_AUTHN_FILTER.encode() in listeners(found, False)


def test_explain_shows_the_token_requirement_of_the_chosen_route() -> None:
    result = compile_rg(ISSUER, IssuerDiscovery(ISSUER, jwks_uri=JWKS))
    secure = evaluate(result.graph, make_request("a.example.com", "/secure/x"))
    action = decision_json(secure)["action"]
    assert action.startswith(f"401 unless a valid JWT of issuer {ISSUER} (keys {JWKS}), then ")
    assert "forward to default/app/80/" in action
    opened = evaluate(result.graph, make_request("a.example.com", "/open"))
    assert decision_json(opened)["action"].startswith("forward to ")

"""What turnout's policies answer before the route (`graph.policy_answers`, `turnout explain`):
CORS preflights, IP allow/deny lists, local rate limits and JWT validation, in Envoy's filter
order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cases.oidc import ISSUER, compile_rg
from turnout.cli import main
from turnout.compile_inputs import IssuerDiscovery
from turnout.graph.evaluate import Decision, evaluate, make_request
from turnout.graph.model import (
    CorsPolicy,
    DirectResponse,
    ExactOrigin,
    Forward,
    IPFilter,
    IPFilterSource,
    IPRule,
    JwtValidation,
    Listener,
    ListenerProtocol,
    LocalRateLimit,
    RegexOrigin,
    Route,
    RouteAction,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    VirtualHost,
    VirtualHostPolicies,
    WeightedCluster,
)
from turnout.graph.policy_answers import (
    PolicyAnswer,
    PolicyContext,
    answer_policies,
    ip_filter_denies,
    remote_address,
)
from turnout.objects import ObjectRef

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "app")
FORWARD = Forward((WeightedCluster("default/app/80/x", 1),))
FIXTURES = Path(__file__).parent.parent / "fixtures" / "httpproxy"
JWKS = "https://keys.example.org/realm/jwks.json"
PREFLIGHT = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT"}


NO_VH_POLICIES = VirtualHostPolicies()
NO_ROUTE_POLICIES = RoutePolicies()


def graph(
    vh_policies: VirtualHostPolicies = NO_VH_POLICIES,
    route_policies: RoutePolicies = NO_ROUTE_POLICIES,
    action: RouteAction = FORWARD,
) -> RoutingGraph:
    route = Route(RouteMatch(), action, RouteSource(OWNER, "spec.routes[0]"), route_policies)
    vh = VirtualHost("a.example.com", "a.example.com", (route,), OWNER, policies=vh_policies)
    listener = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (vh,))
    return RoutingGraph(listeners=(listener,))


def ask(
    g: RoutingGraph,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    client: str = "127.0.0.1",
    hops: int = 0,
) -> Decision:
    request = make_request("a.example.com", "/", method, headers or {}, client_address=client)
    return evaluate(g, request, num_trusted_hops=hops)


# --- CORS ----------------------------------------------------------------------------------------

CORS = CorsPolicy(
    (ExactOrigin("https://APP.example.com"), RegexOrigin(r"https://.*\.example\.org")),
    allow_methods=("GET",),
    allow_credentials=True,
    allow_private_network=True,
)


def test_a_preflight_from_an_allowed_origin_is_answered_200_with_the_allow_headers() -> None:
    d = ask(graph(VirtualHostPolicies(cors=CORS)), "OPTIONS", PREFLIGHT)
    answer = d.policy_answer
    assert answer is not None and answer.definite and d.status == 200
    assert (answer.policy, answer.filter) == ("CORS", "envoy.filters.http.cors")
    assert answer.source == "virtual host a.example.com (HTTPProxy default/app)"
    # Envoy lists the allowed methods and does not compare the requested one (PUT) with them.
    assert answer.headers == (
        ("access-control-allow-origin", "https://app.example.com"),
        ("access-control-allow-credentials", "true"),
        ("access-control-allow-methods", "GET"),
    )
    regex = ask(
        graph(VirtualHostPolicies(cors=CORS)),
        "OPTIONS",
        {
            **PREFLIGHT,
            "Origin": "https://x.example.org",
            "Access-Control-Request-Private-Network": "true",
        },
    )
    assert regex.policy_answer is not None
    assert ("access-control-allow-private-network", "true") in regex.policy_answer.headers


def test_cors_passes_other_origins_non_preflights_and_self_answering_routes_on() -> None:
    g = graph(VirtualHostPolicies(cors=CORS))
    assert ask(g, "OPTIONS", {**PREFLIGHT, "Origin": "https://evil.example"}).policy_answers == ()
    assert ask(g, "GET", PREFLIGHT).policy_answers == ()
    assert ask(g, "OPTIONS", {"Origin": "https://app.example.com"}).policy_answers == ()
    # Envoy bypasses the CORS filter on a direct response or redirect.
    direct = graph(VirtualHostPolicies(cors=CORS), action=DirectResponse(204))
    assert ask(direct, "OPTIONS", PREFLIGHT).status == 204


def test_a_routes_cors_policy_is_merged_with_the_virtual_hosts_field_by_field() -> None:
    # Envoy's CORS filter takes each field from the most specific policy that sets it; the
    # translator always sets the credentials flag, so the route's (false) counts.
    star = CorsPolicy((ExactOrigin("*"),), max_age_s=5)
    evil = {**PREFLIGHT, "Origin": "https://evil.example"}
    d = ask(graph(VirtualHostPolicies(cors=CORS), RoutePolicies(cors=star)), "OPTIONS", evil)
    assert d.policy_answer is not None
    assert d.policy_answer.source == "route HTTPProxy default/app spec.routes[0]"
    assert d.policy_answer.headers == (
        ("access-control-allow-origin", "https://evil.example"),
        ("access-control-allow-methods", "GET"),
        ("access-control-max-age", "5"),
    )


# --- IP allow/deny lists -------------------------------------------------------------------------


def test_an_allow_list_answers_403_to_addresses_it_does_not_name() -> None:
    allow = IPFilter(True, (IPRule("10.0.0.0/8"),))
    g = graph(VirtualHostPolicies(ip_filter=allow))
    denied = ask(g)  # the default client address, 127.0.0.1
    assert denied.status == 403
    assert denied.policy_answer is not None and denied.policy_answer.policy == "IP allow list"
    assert ask(g, client="10.9.9.9").policy_answers == ()


def test_remote_rules_see_the_forwarded_address_only_through_trusted_hops() -> None:
    deny = IPFilter(False, (IPRule("192.0.2.0/24", IPFilterSource.REMOTE),))
    g = graph(route_policies=RoutePolicies(ip_filter=deny))
    xff = {"X-Forwarded-For": "192.0.2.9, 10.0.0.1"}
    assert ask(g, headers=xff).status == 200  # no trusted hop: the peer, 127.0.0.1
    assert ask(g, headers=xff, hops=1).status == 200  # 10.0.0.1
    blocked = ask(g, headers=xff, hops=2)
    assert blocked.status == 403 and blocked.policy_answer is not None
    assert blocked.policy_answer.reason == "Remote address 192.0.2.9 is in 192.0.2.0/24"


def test_remote_address_follows_envoys_xff_rules() -> None:
    assert remote_address("10.0.0.5", ["1.1.1.1, 2.2.2.2"], 0) == "10.0.0.5"
    assert remote_address("10.0.0.5", ["1.1.1.1, 2.2.2.2"], 1) == "2.2.2.2"
    assert remote_address("10.0.0.5", ["1.1.1.1", "2.2.2.2"], 2) == "1.1.1.1"
    assert remote_address("10.0.0.5", ["1.1.1.1"], 2) == "10.0.0.5"  # too few entries
    assert remote_address("10.0.0.5", ["nonsense"], 1) == "10.0.0.5"


def test_an_unparsable_rule_fails_closed_as_the_translator_emits_it() -> None:
    broken_deny = IPFilter(False, (IPRule("10.0.0.0/33"), IPRule("192.0.2.0/24")))
    assert ip_filter_denies(broken_deny, "198.51.100.1", "198.51.100.1") is not None
    broken_allow = IPFilter(True, (IPRule("nonsense"), IPRule("127.0.0.1")))
    assert ip_filter_denies(broken_allow, "127.0.0.1", "127.0.0.1") is None
    assert ip_filter_denies(IPFilter(False, ()), "127.0.0.1", "127.0.0.1") is None


# --- rate limits, JWT and the order --------------------------------------------------------------


def test_a_rate_limit_is_a_conditional_answer_that_leaves_the_status_to_the_route() -> None:
    limit = LocalRateLimit(requests=5, unit_s=60, burst=2)
    d = ask(graph(VirtualHostPolicies(rate_limit=limit)))
    [answer] = d.policy_answers
    assert (answer.status, answer.definite, d.status) == (429, False, 200)
    assert answer.reason == "once the limit of 5 per minute (burst 2) is reached"


def test_a_routegroup_jwt_route_answers_401_without_a_bearer_token() -> None:
    result = compile_rg(ISSUER, IssuerDiscovery(ISSUER, jwks_uri=JWKS))
    bare = evaluate(result.graph, make_request("a.example.com", "/secure/x"))
    assert bare.status == 401
    answer = bare.policy_answer
    assert answer is not None and answer.definite and answer.policy == "JWT validation"
    assert answer.source == "route RouteGroup default/rg spec.routes[0]"
    assert ISSUER in answer.reason
    token = {"Authorization": "Bearer abc.def.ghi"}
    with_token = evaluate(result.graph, make_request("a.example.com", "/secure/x", headers=token))
    assert with_token.status == 200
    assert with_token.policy_answer is not None and not with_token.policy_answer.definite
    assert evaluate(result.graph, make_request("a.example.com", "/open")).policy_answers == ()


def test_filters_answer_in_envoys_order_and_stop_at_the_first_definite_answer() -> None:
    deny_all = IPFilter(True, ())
    limit = LocalRateLimit(requests=1, unit_s=1)
    jwt = JwtValidation(ISSUER, JWKS)
    g = graph(VirtualHostPolicies(cors=CORS, ip_filter=deny_all, rate_limit=limit))
    # CORS runs first: a preflight is answered even from a denied address.
    assert ask(g, "OPTIONS", PREFLIGHT).status == 200
    assert [a.policy for a in ask(g).policy_answers] == ["IP allow list"]
    g = graph(VirtualHostPolicies(rate_limit=limit), RoutePolicies(jwt=jwt))
    both = ask(g)
    assert [a.policy for a in both.policy_answers] == ["local rate limit", "JWT validation"]
    assert both.policy_answer is not None and both.policy_answer.status == 401


def test_a_step_list_can_be_extended_with_another_filter() -> None:
    def deny_everything(ctx: PolicyContext) -> PolicyAnswer:
        return PolicyAnswer(403, "ext_authz", "envoy.filters.http.ext_authz", "test", True, "no")

    g = graph()
    [lst] = g.listeners
    [vh] = lst.virtual_hosts
    ctx = PolicyContext(make_request("a.example.com"), vh, vh.routes[0])
    assert [a.policy for a in answer_policies(ctx, (deny_everything,))] == ["ext_authz"]


# --- explain -------------------------------------------------------------------------------------


def test_explain_prints_the_policy_answer_and_exits_1_for_a_definite_403(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = str(FIXTURES / "vhost-policy-ip-filters" / "input.yaml")
    args = ["explain", case, "--host", "deny.example.com"]
    assert main([*args, "--client-address", "203.0.113.9"]) == 1
    out = capsys.readouterr().out
    assert (
        "answered by IP deny list of virtual host deny.example.com (HTTPProxy default/deny) "
        "before the route: 403 (Peer address 203.0.113.9 is in 203.0.113.0/24)"
    ) in out
    assert main([*args, "--client-address", "203.0.113.9", "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == 403
    assert doc["policyAnswer"]["status"] == 403 and doc["policyAnswer"]["definite"] is True
    assert main(args) == 0  # 127.0.0.1 is not on the deny list
    assert "answered by" not in capsys.readouterr().out


def test_explain_says_a_rate_limit_may_answer_and_a_preflight_is_answered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    limited = str(FIXTURES / "vhost-policy-rate-limit" / "input.yaml")
    assert main(["explain", limited, "--host", "limited.example.com", "--path", "/login"]) == 0
    assert (
        "may be answered 503 by local rate limit of route HTTPProxy default/limited "
        "spec.routes[0] once the limit of 5 per hour is reached"
    ) in capsys.readouterr().out
    cors = str(FIXTURES / "vhost-policy-cors" / "input.yaml")
    preflight = [
        "-H",
        "Origin: https://app.example.com",
        "-H",
        "Access-Control-Request-Method: GET",
    ]
    assert (
        main(["explain", cors, "--host", "zero.example.com", "--method", "OPTIONS", *preflight])
        == 0
    )
    out = capsys.readouterr().out
    assert "answered by CORS of virtual host zero.example.com" in out
    assert "  access-control-allow-origin: https://app.example.com" in out


def test_explain_refuses_a_client_address_that_is_no_ip(capsys: pytest.CaptureFixture[str]) -> None:
    case = str(FIXTURES / "vhost-policy-ip-filters" / "input.yaml")
    with pytest.raises(SystemExit) as exited:
        main(["explain", case, "--host", "deny.example.com", "--client-address", "nope"])
    assert exited.value.code == 2
    assert "'nope' is not an IP address" in capsys.readouterr().err

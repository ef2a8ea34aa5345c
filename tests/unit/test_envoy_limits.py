"""The safety net (`graph.validate.enforce_envoy_limits`): what Envoy would refuse is confined to
the object that wrote it, and everything else reaches Envoy unchanged."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.envoy.translate import translate
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    Cluster,
    DirectResponse,
    Endpoint,
    Forward,
    HeaderMatch,
    HeaderPolicy,
    HeaderValue,
    HostnameMatch,
    HTTPHealthCheck,
    InternalRedirectPolicy,
    Listener,
    ListenerProtocol,
    Mirror,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    StringMatchKind,
    Timeouts,
    TLSTermination,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.validate import (
    MAX_DIRECT_RESPONSE_BODY_BYTES,
    MAX_DURATION_S,
    UINT32_MAX,
    enforce_envoy_limits,
)
from turnout.objects import KubeObject, ObjectRef, Origin, freeze
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

GOOD = ObjectRef("projectcontour.io", "HTTPProxy", "team-a", "good")
BAD = ObjectRef("projectcontour.io", "HTTPProxy", "team-b", "bad")
A, B = "team-a/a/80/aaaa", "team-b/b/80/bbbb"
CLUSTERS = (
    Cluster(A, "team-a", "a", 80, endpoints=(Endpoint("10.0.0.1", 8080),)),
    Cluster(B, "team-b", "b", 80, endpoints=(Endpoint("10.0.0.2", 8080),)),
)


def route(
    match: RouteMatch | None = None,
    action: RouteAction | None = None,
    owner: ObjectRef = BAD,
    field: str = "spec.routes[0]",
    policies: RoutePolicies | None = None,
) -> Route:
    return Route(
        match or RouteMatch(),
        action if action is not None else Forward((WeightedCluster(B, 1),)),
        RouteSource(owner, field),
        policies or RoutePolicies(),
    )


GOOD_ROUTE = route(RouteMatch(PathMatch.prefix("/good")), Forward((WeightedCluster(A, 1),)), GOOD)
GOOD_VHOST = VirtualHost("good.example.com", "good.example.com", (GOOD_ROUTE,), GOOD)


def graph(
    *bad_routes: Route,
    vhosts: tuple[VirtualHost, ...] = (),
    clusters: tuple[Cluster, ...] = CLUSTERS,
) -> RoutingGraph:
    """The good object's virtual host, plus a shared one where the bad routes follow a good one."""
    shared = VirtualHost("shared.example.com", "shared.example.com", (*bad_routes, GOOD_ROUTE), BAD)
    listener = Listener(
        "ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (GOOD_VHOST, shared, *vhosts)
    )
    return RoutingGraph(listeners=(listener,), clusters=clusters)


def _vhost(g: RoutingGraph, name: str) -> VirtualHost | None:
    return next((v for v in g.listeners[0].virtual_hosts if v.name == name), None)


def test_an_acceptable_graph_comes_back_as_the_same_object() -> None:
    g = graph(route(RouteMatch(PathMatch.prefix("/b"))))
    out, problems = enforce_envoy_limits(g)
    assert out is g
    assert problems == ()


def P(kind: PathMatchKind, value: str) -> RouteMatch:
    return RouteMatch(PathMatch(kind, value))


def H(kind: StringMatchKind, value: str = "v", name: str = "x-a") -> RouteMatch:
    return RouteMatch(headers=(HeaderMatch(name, kind, value),))


def Q(name: str, kind: StringMatchKind = StringMatchKind.EXACT, value: str = "v") -> RouteMatch:
    return RouteMatch(query=(QueryMatch(name, kind, value),))


E, PX, SP, RX = (
    PathMatchKind.EXACT,
    PathMatchKind.PREFIX,
    PathMatchKind.SEGMENT_PREFIX,
    PathMatchKind.REGEX,
)


@pytest.mark.parametrize(
    "match, words",
    [
        (P(PX, "no-slash"), "does not start with '/'"),
        (P(E, "/a\r\nb"), "CR, LF or NUL"),
        (P(SP, "/a?b"), "path_separated_prefix"),
        (P(RX, "/(unclosed"), "invalid RE2"),
        (P(RX, "/" + "a" * 120), "program size of 125"),
        (H(StringMatchKind.EXACT, name=""), "requires a header name"),
        (H(StringMatchKind.EXACT, name="x\na"), "CR, LF or NUL"),
        (H(StringMatchKind.EXACT, "a\x00b"), "CR, LF or NUL"),
        (H(StringMatchKind.PREFIX, ""), "non-empty prefix"),
        (H(StringMatchKind.CONTAINS, ""), "non-empty contains"),
        (H(StringMatchKind.REGEX, ""), "empty regex"),
        (H(StringMatchKind.EXACT, "\ud800"), "not valid UTF-8"),
        (Q("q" * 1025), "1025 bytes; Envoy allows 1 to 1024"),
        (Q(""), "0 bytes"),
        (Q("q", StringMatchKind.SUFFIX, ""), "non-empty suffix"),
        (
            RouteMatch(headers=(HeaderMatch("x-a", StringMatchKind.EXACT, "v", invert=2),)),  # type: ignore[arg-type]
            "where a flag (true/false) belongs",
        ),
    ],
)
def test_a_route_whose_match_envoy_refuses_is_left_out(match: RouteMatch, words: str) -> None:
    out, problems = enforce_envoy_limits(graph(route(match)))
    shared = _vhost(out, "shared.example.com")
    assert shared is not None and shared.routes == (GOOD_ROUTE,)
    assert _vhost(out, "good.example.com") is GOOD_VHOST
    [problem] = problems
    assert (problem.object, problem.field) == (BAD, "spec.routes[0]")
    assert words in problem.reason and "left out" in problem.reason


@pytest.mark.parametrize(
    "action, policies, words",
    [
        (Forward((WeightedCluster(A, 5_000_000_000), WeightedCluster(B, 1))), None, "uint32"),
        (
            Forward((WeightedCluster(A, 3_000_000_000), WeightedCluster(B, 3_000_000_000))),
            None,
            f"sum to 6000000000, above Envoy's limit of {UINT32_MAX}",
        ),
        (Forward((WeightedCluster(A, 2**32 - 1), WeightedCluster(B, 1))), None, "sum to"),
        (Forward((WeightedCluster("nowhere", 1),)), None, "'nowhere' is not a usable cluster"),
        (Forward((WeightedCluster(A, True), WeightedCluster(B, 1))), None, "not an integer"),
        (DirectResponse(700), None, "outside Envoy's range [200, 599]"),
        (DirectResponse(200, "x" * (MAX_DIRECT_RESPONSE_BODY_BYTES + 1)), None, "65536 bytes"),
        (Redirect(hostname="evil.example.com\r\nSet-Cookie: a=b"), None, "hostname holds CR"),
        (Redirect(path="/a\nb"), None, "redirect path holds CR"),
        (Redirect(prefix="/a\x00"), None, "redirect prefix holds CR"),
        (Redirect(scheme="ht tp"), None, "not a URI scheme"),
        (Redirect(port=70000), None, "[1, 65535]"),
        (None, RoutePolicies(timeouts=Timeouts(response_s=1e12)), f"limit of {MAX_DURATION_S} s"),
        (None, RoutePolicies(timeouts=Timeouts(idle_s=float("nan"))), "finite duration"),
        (None, RoutePolicies(mirrors=(Mirror("nowhere"),)), "mirror[0] cluster 'nowhere'"),
        (
            None,
            RoutePolicies(request_headers=HeaderPolicy(set=(HeaderValue("host", "x"),))),
            "':'-prefixed headers and host",
        ),
        (
            None,
            RoutePolicies(response_headers=HeaderPolicy(add=(HeaderValue("x-a", "50%"),))),
            "starts no %COMMAND%",
        ),
        (
            None,
            RoutePolicies(request_headers=HeaderPolicy(add=(HeaderValue("x-a", "%NOPE%"),))),
            "%NOPE%",
        ),
        (
            None,
            RoutePolicies(internal_redirect=InternalRedirectPolicy(max_redirects=2**32)),
            "internal redirect limit is 4294967296, outside",
        ),
        (
            None,
            RoutePolicies(internal_redirect=InternalRedirectPolicy(response_codes=(302, 200))),
            "internal redirect code[1] 200 is not one of 301, 302, 303, 307, 308",
        ),
    ],
)
def test_a_route_whose_action_or_policies_envoy_refuses_answers_500(
    action: RouteAction | None, policies: RoutePolicies | None, words: str
) -> None:
    bad = route(RouteMatch(PathMatch.prefix("/bad")), action, policies=policies)
    out, problems = enforce_envoy_limits(graph(bad))
    shared = _vhost(out, "shared.example.com")
    assert shared is not None
    replaced, good = shared.routes
    assert replaced.match == bad.match and replaced.source == bad.source
    assert replaced.action == DirectResponse(500)
    assert replaced.policies == RoutePolicies()
    assert good is GOOD_ROUTE
    assert _vhost(out, "good.example.com") is GOOD_VHOST
    [problem] = problems
    assert (problem.object, problem.field) == (BAD, "spec.routes[0]")
    assert words in problem.reason and "answers 500" in problem.reason
    assert evaluate(out, make_request("shared.example.com", "/bad")).status == 500


def test_acceptable_policies_and_values_at_the_limits_pass() -> None:
    ok = (
        route(
            RouteMatch(PathMatch.prefix("/a")),
            Forward((WeightedCluster(A, 2**32 - 2), WeightedCluster(B, 1))),
            policies=RoutePolicies(
                timeouts=Timeouts(response_s=0, idle_s=MAX_DURATION_S),
                request_headers=HeaderPolicy(
                    set=(HeaderValue("x-from", "%REQ(x-a)% 100%% %DOWNSTREAM_REMOTE_ADDRESS%"),),
                    remove=("x-remove",),
                ),
                mirrors=(Mirror(A, 50.0),),
                internal_redirect=InternalRedirectPolicy(
                    max_redirects=UINT32_MAX, response_codes=(301, 302, 303, 307, 308)
                ),
            ),
        ),
        route(Q("q" * 1024), field="spec.routes[1]"),
        route(P(PX, "/body"), DirectResponse(599, "x" * MAX_DIRECT_RESPONSE_BODY_BYTES)),
        route(P(SP, "/seg/"), Redirect(scheme="https", hostname="x.example.com", port=0)),
        route(P(RX, "/" + "a" * 95)),
        route(H(StringMatchKind.EXACT, "", name=":authority")),
    )
    g = graph(*ok)
    out, problems = enforce_envoy_limits(g)
    assert problems == ()
    assert out is g


def test_a_single_backend_may_carry_any_weight_because_envoy_never_sees_it() -> None:
    g = graph(route(action=Forward((WeightedCluster(B, 5_000_000_000),))))
    assert enforce_envoy_limits(g) == (g, ())
    [config] = translate(g).routes
    assert config.virtual_hosts[1].routes[0].route.cluster == B


@pytest.mark.parametrize(
    "vhost, words",
    [
        (VirtualHost("a b", "a b.example.com", (), BAD), "is not a DNS name"),
        (VirtualHost("x", "x.example.com\r\n", (), BAD), "CR, LF or NUL"),
        (VirtualHost("p", "www*.example.com", (), BAD), "is not a DNS name"),
        (VirtualHost("", "empty.example.com", (), BAD), "virtual host name is empty"),
        (VirtualHost("dup", "GOOD.example.com", (), BAD), "already served"),
        (
            VirtualHost(
                "long", "*." + ".".join(["abcdefghijkl"] * 19),
                (route(RouteMatch(PathMatch.prefix("/"))),), BAD, HostnameMatch.WILDCARD_ONE_LABEL,
            ),
            "too long for a one-label wildcard",
        ),
        (
            VirtualHost("tls", "tls.example.com", (), BAD, tls=TLSTermination("missing/secret")),
            "TLS secret 'missing/secret' is not in the graph",
        ),
    ],
)  # fmt: skip
def test_a_virtual_host_envoy_refuses_is_left_out_of_its_listener(
    vhost: VirtualHost, words: str
) -> None:
    out, problems = enforce_envoy_limits(graph(vhosts=(vhost,)))
    names = [v.name for v in out.listeners[0].virtual_hosts]
    assert names == ["good.example.com", "shared.example.com"]
    assert out.listeners[0].virtual_hosts[0] is GOOD_VHOST
    [problem] = problems
    assert problem.object == BAD
    assert words in problem.reason and "left out of listener ingress_http" in problem.reason


def test_a_long_one_label_wildcard_without_routes_needs_no_authority_regex() -> None:
    host = "*." + ".".join(["abcdefghijkl"] * 19)
    g = graph(vhosts=(VirtualHost(host, host, (), BAD, HostnameMatch.WILDCARD_ONE_LABEL),))
    assert enforce_envoy_limits(g) == (g, ())


def test_a_long_one_label_wildcard_stays_while_envoy_can_take_its_authority_regex() -> None:
    # Python's RE2 binding counts this one at 137, Envoy at 77: it must not be dropped.
    host = "*." + ".".join(["abcdefghijklmnopq"] * 9)
    vh = VirtualHost(host, host, (GOOD_ROUTE,), BAD, HostnameMatch.WILDCARD_ONE_LABEL)
    g = graph(vhosts=(vh,))
    assert enforce_envoy_limits(g) == (g, ())


def test_a_cluster_loses_only_the_endpoints_envoy_refuses() -> None:
    mixed = replace(
        CLUSTERS[1],
        endpoints=(
            Endpoint("10.0.0.2", 8080),
            Endpoint("not-an-ip", 8080),
            Endpoint("10.0.0.3", 0),
            Endpoint("10.0.0.4", 70000),
        ),
    )
    out, problems = enforce_envoy_limits(graph(clusters=(CLUSTERS[0], mixed)))
    assert out.clusters[0] is CLUSTERS[0]
    assert out.clusters[1].endpoints == (Endpoint("10.0.0.2", 8080),)
    assert len(problems) == 3
    assert {p.object for p in problems} == {ObjectRef("", "Service", "team-b", "b")}
    assert all(p.field == "endpoints" for p in problems)


@pytest.mark.parametrize(
    "health_check, words",
    [
        (HTTPHealthCheck("/h", interval_s=1e10), f"limit of {MAX_DURATION_S} s"),
        (HTTPHealthCheck("/h", timeout_s=float("inf")), "finite duration"),
        (HTTPHealthCheck("/h\r\n"), "control character"),
        (HTTPHealthCheck("/h", host="a\x01b"), "control character"),
    ],
)
def test_a_cluster_with_settings_envoy_refuses_is_left_out_and_its_routes_answer_500(
    health_check: HTTPHealthCheck, words: str
) -> None:
    bad_cluster = replace(CLUSTERS[1], health_check=health_check)
    g = graph(route(RouteMatch(PathMatch.prefix("/b"))), clusters=(CLUSTERS[0], bad_cluster))
    out, problems = enforce_envoy_limits(g)
    assert out.clusters == (CLUSTERS[0],)
    shared = _vhost(out, "shared.example.com")
    assert shared is not None and shared.routes[0].action == DirectResponse(500)
    assert _vhost(out, "good.example.com") is GOOD_VHOST
    cluster_problem, route_problem = problems
    assert cluster_problem.object == ObjectRef("", "Service", "team-b", "b")
    assert words in cluster_problem.reason
    assert route_problem.object == BAD and B in route_problem.reason


def test_translating_the_enforced_graph_never_raises_where_the_raw_one_would() -> None:
    bad = route(action=Forward((WeightedCluster(A, 5_000_000_000), WeightedCluster(B, 1))))
    g, _ = enforce_envoy_limits(graph(bad))
    resources = translate(g)
    [config] = resources.routes
    shared = next(v for v in config.virtual_hosts if v.name == "shared.example.com")
    assert shared.routes[0].direct_response.status == 500


# --- wired into compile_snapshot -----------------------------------------------------------------


class RawDialect(Dialect):
    """A dialect that copies graph pieces straight from its objects, validating nothing: it
    stands for any dialect check that was forgotten."""

    name = "raw"
    kinds: frozenset[tuple[str, str]] = frozenset({("example.com/v1", "Raw")})

    def claims(self, snapshot: Snapshot, options: CompileOptions) -> Iterable[HostClaim]:
        return ()

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        out = []
        for obj in snapshot.kind("example.com", "Raw"):
            spec: Any = obj.raw["spec"]
            routes = tuple(
                Route(
                    RouteMatch(PathMatch(PathMatchKind.PREFIX, r["prefix"])),
                    Redirect(hostname=r["redirect"])
                    if "redirect" in r
                    else DirectResponse(int(r["status"]), r.get("body", "")),
                    RouteSource(obj.ref, f"spec.routes[{i}]"),
                )
                for i, r in enumerate(spec["routes"])
            )
            host = spec["host"]
            out.append(("ingress_http", VirtualHost(host.lower(), host, routes, obj.ref)))
        return DialectOutput(virtual_hosts=tuple(out))


def raw(name: str, spec: dict[str, Any]) -> KubeObject:
    body = {"apiVersion": "example.com/v1", "kind": "Raw", "metadata": {"name": name}}
    return KubeObject(
        "example.com/v1", "Raw", "default", name, freeze({**body, "spec": spec}),
        Origin(f"{name}.yaml", 7),
    )  # fmt: skip


def test_compile_reports_what_the_net_removed_on_the_object_and_field() -> None:
    good = raw("good", {"host": "good.example.com", "routes": [{"prefix": "/", "status": 200}]})
    bad = raw(
        "bad",
        {
            "host": "bad.example.com",
            "routes": [
                {"prefix": "/x\r\n", "status": 200},
                {"prefix": "/r", "redirect": "evil\r\nSet-Cookie: a"},
                {"prefix": "/", "status": 204},
            ],
        },
    )
    broken_host = raw("host", {"host": "bad host", "routes": [{"prefix": "/", "status": 200}]})
    result = compile_snapshot(Snapshot.of([good, bad, broken_host]), dialects=[RawDialect()])
    errors = {(p.object, p.reason.split(":")[0]): p for p in result.problems}
    left_out = errors[("Raw default/bad", "spec.routes[0]")]
    assert (left_out.source, left_out.line, left_out.severity) == ("bad.yaml", 7, "error")
    assert "CR, LF or NUL" in left_out.reason and "left out" in left_out.reason
    redirect = errors[("Raw default/bad", "spec.routes[1]")]
    assert "redirect hostname" in redirect.reason and "answers 500" in redirect.reason
    assert "is not a DNS name" in errors[("Raw default/host", "virtual host 'bad host'")].reason
    assert len(result.problems) == 3

    def status(host: str, path: str) -> int:
        return evaluate(result.graph, make_request(host, path)).status

    assert status("good.example.com", "/") == 200
    assert status("bad.example.com", "/r") == 500
    assert status("bad.example.com", "/") == 204
    translate(result.graph)


def test_an_httpproxy_weight_beyond_uint32_costs_nobody_else_their_routes() -> None:
    text = (
        "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: default}\n"
        "spec: {ports: [{name: http, port: 80}]}\n---\n"
        "apiVersion: v1\nkind: Service\nmetadata: {name: t, namespace: default}\n"
        "spec: {ports: [{name: http, port: 80}]}\n---\n"
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        "metadata: {name: good, namespace: default}\n"
        "spec: {virtualhost: {fqdn: good.example.com},"
        " routes: [{services: [{name: s, port: 80}]}]}\n"
        "---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"
        "metadata: {name: heavy, namespace: default}\n"
        "spec:\n  virtualhost: {fqdn: heavy.example.com}\n  routes:\n"
        "    - conditions: [{prefix: /split}]\n"
        "      services: [{name: s, port: 80, weight: 3000000000},"
        " {name: t, port: 80, weight: 3000000000}]\n"
        "    - services: [{name: s, port: 80}]\n"
    )
    result = compile_snapshot(Snapshot.of(parse_text(text, "heavy.yaml").objects))
    translate(result.graph)
    good = evaluate(result.graph, make_request("good.example.com", "/"))
    assert good.status == 200 and good.clusters[0][0].startswith("default/s/80/")
    assert evaluate(result.graph, make_request("heavy.example.com", "/")).status == 200
    split = evaluate(result.graph, make_request("heavy.example.com", "/split"))
    rejected_by_dialect = any(
        s.ref.name == "heavy" and s.body.get("currentStatus") == "invalid" for s in result.statuses
    )
    if not rejected_by_dialect:
        assert split.status == 500
        assert any(
            p.object == "HTTPProxy default/heavy" and "uint32" in p.reason for p in result.problems
        )


# --- the net keeps up with the model --------------------------------------------------------------

CHECKED = "checked by graph/validate.py"
ENUM = "an enum: the translator maps every member"
FROM_OPTIONS = "set from turnout's own options, not from objects"
TRANSLATOR = "the translator maps any value to a valid one"
NOT_EMITTED = "never reaches Envoy"
RESOLVER = "parsed and checked by the resolver that builds it"

# Every field of the routing graph, and what the net does about it. A field added to the model
# makes the next test fail until it is listed: teach graph/validate.py the Envoy limits of what
# the translator emits for it, or say why it needs none.
MODEL_FIELDS: dict[str, str] = {
    **{f"BackendPolicies.{f}": CHECKED for f in
       ("request_headers", "response_headers", "host_rewrite", "cookie_rewrites",
        "direct_response")},
    **{f"CABundle.{f}": RESOLVER for f in
       ("name", "namespace", "secret", "ca_certificates", "crl")},
    "ClientValidation.ca_bundle": "a missing bundle fails closed in the translator",
    "ClientValidation.crl_bundle": "a missing bundle fails closed in the translator",
    **{f"ClientValidation.{f}": "a flag of the TLS context, set by the dialect" for f in
       ("skip_verification", "optional", "crl_only_verify_leaf")},
    **{f"Cluster.{f}": CHECKED for f in
       ("name", "port", "endpoints", "health_check", "outlier_detection", "validation",
        "slow_start", "connect_timeout_s", "idle_connection_timeout_s", "tcp_health_check",
        "dns_name")},
    "Cluster.namespace": "names the Service in problems; the SNI candidate is length-checked",
    "Cluster.service": "names the Service in problems; the SNI candidate is length-checked",
    "Cluster.protocol": ENUM,
    "Cluster.source_address": "set by the dialect from compile_inputs.OWN_HOP_SOURCE_ADDRESS only",
    "Cluster.lb_strategy": ENUM,
    **{f"CookieRewrite.{f}": CHECKED for f in ("name", "path", "domain", "same_site")},
    "CookieRewrite.secure": CHECKED,
    **{f"CorsPolicy.{f}": CHECKED for f in
       ("allow_origins", "allow_methods", "allow_headers", "expose_headers", "max_age_s")},
    "CorsPolicy.allow_credentials": CHECKED,
    "CorsPolicy.allow_private_network": CHECKED,
    "ExactOrigin.origin": CHECKED,
    "RegexOrigin.pattern": CHECKED,
    "DirectResponse.status": CHECKED,
    "DirectResponse.body": CHECKED,
    "DirectResponse.headers": CHECKED,
    "Cluster.hash_balance_factor": CHECKED,
    "Compression.content_types": CHECKED,
    "RouteMatch.runtime_fraction": CHECKED,
    "RoutePolicies.cors": CHECKED,
    "RoutePolicies.compression": CHECKED,
    "RoutePolicies.jwt": CHECKED,
    "RoutePolicies.internal_redirect": CHECKED,
    **{f"InternalRedirectPolicy.{f}": CHECKED for f in
       ("max_redirects", "response_codes", "deny_repeated_route")},
    "InternalRedirectPolicy.cross_scheme": ENUM,
    "RoutePolicies.authorization": CHECKED,
    **{f"RouteAuthorization.{f}": CHECKED for f in ("disabled", "context")},
    **{f"ExternalAuthorization.{f}": CHECKED for f in
       ("cluster", "fail_open", "response_timeout_s", "with_request_body")},
    **{f"AuthorizationBody.{f}": CHECKED for f in
       ("max_request_bytes", "allow_partial_message", "pack_as_bytes")},
    "JwtValidation.issuer": CHECKED,
    "JwtValidation.jwks_uri": CHECKED,
    "JwtValidation.audiences": CHECKED,
    "JwtValidation.forward": "a flag",
    "JwtValidation.require_subject": "a flag",
    "JwtValidation.bearer_header_only": "a flag",
    "JwtValidation.timeout_s": CHECKED,
    "JwtValidation.cache_s": CHECKED,
    "JwtValidation.validation": "its subject names are checked; a missing bundle fails closed",
    "JwtValidation.dns_lookup_family": "an enum the translator maps completely",
    "Endpoint.address": CHECKED,
    "Endpoint.port": CHECKED,
    "Endpoint.health_port": CHECKED,
    "Cluster.health_port": CHECKED,  # EDS endpoints carry their own; a DNS cluster uses it
    "Forward.clusters": CHECKED,
    "Forward.invalid_backend_status": "the translator answers 500 for any status Envoy's "
    "cluster_not_found_response_code cannot (invalid_backend_status)",
    **{f"HTTPHealthCheck.{f}": CHECKED for f in
       ("path", "host", "interval_s", "timeout_s", "unhealthy_threshold", "healthy_threshold",
        "expected_statuses")},
    **{f"HashPolicy.{f}": CHECKED for f in ("name", "cookie_ttl_s", "cookie_path")},
    "HashPolicy.source": ENUM,
    "HashPolicy.terminal": CHECKED,
    "HeaderMatch.name": CHECKED,
    "HeaderMatch.value": CHECKED,
    "HeaderMatch.kind": CHECKED,
    **{f"HeaderMatch.{f}": CHECKED for f in ("invert", "ignore_case", "treat_missing_as_empty")},
    **{f"HeaderPolicy.{f}": CHECKED for f in ("set", "add", "remove")},
    "HeaderValue.name": CHECKED,
    "HeaderValue.value": CHECKED,
    "HeaderValue.when_resolved": "a flag: the value is checked; the Lua script escapes strings",
    "HostRewrite.literal": CHECKED,
    "HostRewrite.from_header": CHECKED,
    "IPFilter.rules": CHECKED,
    "IPFilter.allow": CHECKED,
    "IPRule.cidr": CHECKED,
    "IPRule.source": ENUM,
    **{f"Listener.{f}": FROM_OPTIONS for f in ("name", "address", "port", "protocol")},
    "Listener.virtual_hosts": CHECKED,
    "Listener.tcp_proxies": CHECKED,
    **{f"LocalRateLimit.{f}": CHECKED for f in
       ("requests", "unit_s", "burst", "status", "response_headers")},
    "Mirror.cluster": CHECKED,
    "Mirror.percent": CHECKED,
    "ObjectRef.group": "part of problems only",
    **{f"ObjectRef.{f}": "checked where it names a route (RouteSource.object)" for f in
       ("kind", "namespace", "name")},
    **{f"OutlierDetection.{f}": CHECKED for f in
       ("consecutive_5xx", "consecutive_gateway_errors", "interval_s", "base_ejection_time_s",
        "max_ejection_percent")},
    "PathMatch.value": CHECKED,
    "PathMatch.kind": CHECKED,
    **{f"PathRewrite.{f}": CHECKED for f in ("prefix", "full_path", "regex", "substitution")},
    "QueryMatch.name": CHECKED,
    "QueryMatch.value": CHECKED,
    "QueryMatch.kind": CHECKED,
    "QueryMatch.ignore_case": CHECKED,
    **{f"Redirect.{f}": CHECKED for f in
       ("scheme", "hostname", "port", "path", "prefix", "query_suffix")},
    "Redirect.status": TRANSLATOR,
    **{f"RetryPolicy.{f}": CHECKED for f in
       ("count", "per_try_timeout_s", "retry_on", "retriable_status_codes")},
    **{f"Route.{f}": CHECKED for f in ("match", "action", "source", "policies")},
    **{f"RouteMatch.{f}": CHECKED for f in ("path", "headers", "query")},
    **{f"RoutePolicies.{f}": CHECKED for f in
       ("timeouts", "retry", "request_headers", "response_headers", "host_rewrite",
        "path_rewrite", "mirrors", "cookie_rewrites", "ip_filter", "rate_limit",
        "hash_policies")},
    "RoutePolicies.websockets": CHECKED,
    "RouteSource.object": CHECKED,
    "RouteSource.field": CHECKED,
    "RouteSource.via": NOT_EMITTED,
    **{f"RoutingGraph.{f}": CHECKED for f in ("listeners", "clusters")},
    "RoutingGraph.secrets": RESOLVER,
    "RoutingGraph.ca_bundles": RESOLVER,
    **{f"SlowStart.{f}": CHECKED for f in ("window_s", "aggression", "min_weight_percent")},
    **{f"TCPHealthCheck.{f}": CHECKED for f in
       ("interval_s", "timeout_s", "unhealthy_threshold", "healthy_threshold")},
    **{f"TCPProxy.{f}": CHECKED for f in ("hostname", "clusters", "tls")},
    "TCPProxy.name": "names the filter chain; deterministic from the hostname",
    "TCPProxy.owner": "part of problems only",
    **{f"TLSSecret.{f}": RESOLVER for f in
       ("name", "namespace", "secret", "certificate_chain", "private_key")},
    "TLSTermination.secret": CHECKED,
    "TLSTermination.fallback_secret": CHECKED,
    "TLSTermination.min_version": TRANSLATOR,
    "TLSTermination.max_version": TRANSLATOR,
    "TLSTermination.client_validation": "a missing bundle fails closed in the translator",
    **{f"Timeouts.{f}": CHECKED for f in ("response_s", "idle_s", "backend_request_s")},
    "UpstreamValidation.ca_secret": "a missing bundle fails closed in the translator",
    "UpstreamValidation.subject_names": CHECKED,
    "UpstreamValidation.sni": CHECKED,
    "UpstreamValidation.system_trust_store": CHECKED,
    "UpstreamValidation.subject_uris": CHECKED,
    **{f"VirtualHost.{f}": CHECKED for f in ("name", "hostname", "routes", "tls", "policies")},
    "VirtualHost.owner": "part of problems only",
    "VirtualHost.sni": CHECKED,
    "VirtualHost.hostname_match": ENUM,
    **{f"VirtualHostPolicies.{f}": CHECKED for f in
       ("cors", "ip_filter", "rate_limit", "global_rate_limit", "authorization")},
    "RoutePolicies.global_rate_limit": CHECKED,
    "GlobalRateLimit.descriptors": CHECKED,
    "GlobalRateLimit.disabled": TRANSLATOR,
    "RateLimitDescriptor.entries": CHECKED,
    "GenericKeyEntry.key": CHECKED,
    "GenericKeyEntry.value": CHECKED,
    "RequestHeaderEntry.header_name": CHECKED,
    "RequestHeaderEntry.descriptor_key": CHECKED,
    "HeaderValueMatchEntry.value": CHECKED,
    "HeaderValueMatchEntry.headers": CHECKED,
    "HeaderValueMatchEntry.expect_match": TRANSLATOR,
    "WeightedCluster.cluster": CHECKED,
    "WeightedCluster.weight": CHECKED,
    "WeightedCluster.policies": CHECKED,
}  # fmt: skip


def _model_fields() -> set[str]:
    seen: set[type] = set()

    def visit(tp: Any) -> None:
        if typing.get_origin(tp) is not None:
            for arg in typing.get_args(tp):
                visit(arg)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp not in seen:
            seen.add(tp)
            for hint in typing.get_type_hints(tp).values():
                visit(hint)

    visit(RoutingGraph)
    return {f"{cls.__name__}.{f.name}" for cls in seen for f in dataclasses.fields(cls)}


def test_the_net_knows_every_field_of_the_model() -> None:
    fields = _model_fields()
    new = sorted(fields - set(MODEL_FIELDS))
    assert not new, (
        f"routing graph fields the safety net does not know: {new}. Teach "
        "src/turnout/graph/validate.py what Envoy accepts for them, then list them in "
        "MODEL_FIELDS (or say there why they need no check)."
    )
    assert not set(MODEL_FIELDS) - fields, sorted(set(MODEL_FIELDS) - fields)

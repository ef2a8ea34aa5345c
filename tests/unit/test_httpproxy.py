"""The HTTPProxy dialect's tricky parts: condition merging, route order, RE2 limits, ownership
across dialects, statuses, and a fuzz property: any spec compiles without raising, every proxy
gets a status, and a proxy never changes the routes of an unrelated one."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import kube_object, service
from tests.unit.fuzzing import json_values, mutations, mutator, typed_leaf
from turnout.app import compile_snapshot
from turnout.compile_inputs import DEFAULT_MAX_INCLUDE_REVISITS, HTTP_LISTENER, CompileOptions
from turnout.dialects.contour.order import contour_route_order, sorted_headers
from turnout.dialects.httpproxy import HTTPProxyDialect
from turnout.dialects.httpproxy.classes import serves
from turnout.dialects.httpproxy.conditions import (
    header_conditions_error,
    include_conditions_identical,
    merge_path,
)
from turnout.dialects.httpproxy.spec import HeaderCondition, MatchCondition
from turnout.graph.build import CompileResult
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import (
    DirectResponse,
    HeaderMatch,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Route,
    RouteMatch,
    RouteSource,
    StringMatchKind,
    VirtualHost,
)
from turnout.graph.regex import regex_error
from turnout.objects import KubeObject, ObjectRef
from turnout.store import Snapshot

# --- helpers ------------------------------------------------------------------------------------


def obj(
    kind: str,
    name: str,
    namespace: str = "default",
    spec: Any = None,
    created: str | None = None,
    api_version: str | None = None,
    annotations: dict[str, str] | None = None,
) -> KubeObject:
    api = api_version or {"HTTPProxy": "projectcontour.io/v1"}.get(kind, "v1")
    return kube_object(
        api, kind, name, namespace, spec=spec, created=created, annotations=annotations
    )


def proxy(
    name: str, spec: Any, namespace: str = "default", created: str | None = None
) -> KubeObject:
    return obj("HTTPProxy", name, namespace, spec, created)


def compile_objects(objects: Iterable[KubeObject], **options: Any) -> CompileResult:
    return compile_snapshot(Snapshot.of(objects), CompileOptions(**options))


def status_of(result: CompileResult, name: str, namespace: str = "default") -> dict[str, Any]:
    for s in result.statuses:
        if s.ref.name == name and s.ref.namespace == namespace:
            return dict(s.body)
    raise AssertionError(f"no status for {namespace}/{name}")


def errors_of(result: CompileResult, name: str, namespace: str = "default") -> list[str]:
    cond = status_of(result, name, namespace)["conditions"][0]
    return [e["reason"] for e in cond.get("errors", [])]


def vhost(result: CompileResult, host: str) -> VirtualHost | None:
    for listener in result.graph.listeners:
        for vh in listener.virtual_hosts:
            if vh.name == host:
                return vh
    return None


def has_routes(result: CompileResult, host: str) -> bool:
    """Whether `host` has routes; an owned host whose root is invalid is held by a virtual host
    without routes (404), so it never falls to another namespace's `*` one."""
    vh = vhost(result, host)
    return vh is not None and bool(vh.routes)


def prefix(p: str) -> MatchCondition:
    return MatchCondition(prefix=p)


def header(**kw: Any) -> MatchCondition:
    return MatchCondition(header=HeaderCondition(**kw), field="c")


# --- condition merging --------------------------------------------------------------------------


def test_merge_path_concatenates_and_collapses_slashes() -> None:
    assert merge_path([prefix("/api/"), prefix("/v1"), prefix("/users")]) == PathMatch(
        PathMatchKind.PREFIX, "/api/v1/users"
    )
    # A child "prefix: /" under /foo is the string prefix /foo/ (not /foo).
    assert merge_path([prefix("/foo"), prefix("/")]).value == "/foo/"
    assert merge_path([prefix("/"), prefix("/")]).value == "/"


def test_merge_path_defaults_to_slash_prefix() -> None:
    assert merge_path([]) == PathMatch(PathMatchKind.PREFIX, "/")
    assert merge_path([header(name="x", present=True)]) == PathMatch(PathMatchKind.PREFIX, "/")


def test_merge_path_last_path_condition_decides_kind() -> None:
    merged = merge_path([prefix("/static"), MatchCondition(exact="/main.js")])
    assert merged == PathMatch(PathMatchKind.EXACT, "/static/main.js")
    # Contour would make this a prefix match because the last condition is a header.
    merged = merge_path([MatchCondition(exact="/only"), header(name="x", present=True)])
    assert merged == PathMatch(PathMatchKind.EXACT, "/only")


def test_merge_path_keeps_a_regex_inside_the_delegated_prefix() -> None:
    merged = merge_path([prefix("/a.b/"), MatchCondition(regex="/x|/admin")])
    assert merged.kind is PathMatchKind.REGEX
    assert merged.value == r"/a\.b(?:/x|/admin)"
    assert regex_error(merged.value) is None
    import re2

    assert re2.fullmatch(merged.value, "/a.b/x")
    assert re2.fullmatch(merged.value, "/a.b/admin")
    assert not re2.fullmatch(merged.value, "/admin")
    assert not re2.fullmatch(merged.value, "/aXb/x")


def test_duplicate_include_conditions_ignore_order_and_lone_slash() -> None:
    seen: set[Any] = set()
    a = [prefix("/foo"), header(name="x-a", exact="1")]
    b = [header(name="x-a", exact="1"), prefix("/foo")]
    assert not include_conditions_identical(a, seen)
    assert include_conditions_identical(b, seen)
    # Contour compares the conditions as structs: a header name spelled differently is another
    # include (Envoy still matches both spellings alike).
    assert not include_conditions_identical([prefix("/foo"), header(name="X-A", exact="1")], seen)
    # A different header value is a different include.
    assert not include_conditions_identical([prefix("/foo"), header(name="x-a", exact="2")], seen)
    # "/" alone (or nothing) never counts, however often it appears.
    for _ in range(3):
        assert not include_conditions_identical([prefix("/")], seen)
        assert not include_conditions_identical([], seen)


def test_header_contradictions_are_case_insensitive_on_names() -> None:
    err = header_conditions_error(
        [header(name="X-Foo", present=True), header(name="x-foo", notpresent=True)]
    )
    assert err == (
        "cannot specify contradictory 'present' and 'notpresent' conditions "
        "for the same route and header"
    )
    # Contour looks up the opposite condition with default flags among the earlier ones, so an
    # earlier `notexact` with ignoreCase is not found by a later `exact` (but the reverse is).
    later_exact = [header(name="x", notexact="a", ignore_case=True), header(name="x", exact="a")]
    assert header_conditions_error(later_exact) is None
    later_notexact = [header(name="x", exact="a"), header(name="x", notexact="a", ignore_case=True)]
    assert header_conditions_error(later_notexact) is not None
    # Different values do not contradict.
    assert (
        header_conditions_error([header(name="x", contains="a"), header(name="x", notcontains="b")])
        is None
    )


def test_regex_program_size_limit_is_envoys() -> None:
    assert regex_error("[a-z]{96}") is None  # program size 100
    err = regex_error("[a-z]{97}")  # program size 101
    assert err == "RE2 program size 101 exceeds Envoy's limit of 100"
    err = regex_error("(?<name>x)(")
    assert err is not None and err.startswith("invalid RE2 syntax")
    assert regex_error("\ud800") == "the regex is not valid UTF-8"


# --- route order --------------------------------------------------------------------------------

SRC = RouteSource(ObjectRef("projectcontour.io", "HTTPProxy", "default", "x"), "spec.routes[0]")


def route(
    path: PathMatch, headers: Iterable[HeaderMatch] = (), query: Iterable[QueryMatch] = ()
) -> Route:
    match = RouteMatch(path, sorted_headers(tuple(headers)), tuple(query))
    return Route(match, DirectResponse(200), SRC)


def hm(
    name: str,
    kind: StringMatchKind = StringMatchKind.PRESENT,
    value: str = "",
    invert: bool = False,
) -> HeaderMatch:
    return HeaderMatch(name, kind, value, invert)


ORDERED = [
    route(PathMatch(PathMatchKind.EXACT, "/b")),
    route(PathMatch(PathMatchKind.EXACT, "/a")),
    route(PathMatch(PathMatchKind.REGEX, "/longer.*")),
    route(PathMatch(PathMatchKind.REGEX, "/b.*")),
    route(PathMatch(PathMatchKind.REGEX, "/a.*")),
    route(PathMatch(PathMatchKind.PREFIX, "/foo/bar")),
    # Equal length: reverse-lexicographic.
    route(PathMatch(PathMatchKind.PREFIX, "/foo")),
    route(PathMatch(PathMatchKind.PREFIX, "/bar")),
    # Same prefix: a :method match first, then more headers, then more query matches.
    route(PathMatch.prefix("/"), [hm(":method", StringMatchKind.EXACT, "GET")]),
    route(PathMatch.prefix("/"), [hm("a"), hm("b")]),
    route(
        PathMatch.prefix("/"),
        [hm("a", StringMatchKind.EXACT, "1")],
        [QueryMatch("q", StringMatchKind.PRESENT)],
    ),
    # One header each: by name, then exact before regex before contains before present.
    route(PathMatch.prefix("/"), [hm("a", StringMatchKind.EXACT, "1")]),
    route(PathMatch.prefix("/"), [hm("a", StringMatchKind.REGEX, "1.*")]),
    route(PathMatch.prefix("/"), [hm("a", StringMatchKind.CONTAINS, "1")]),
    route(PathMatch.prefix("/"), [hm("a")]),
    route(PathMatch.prefix("/"), [hm("a", invert=True)]),
    route(PathMatch.prefix("/"), [hm("b", StringMatchKind.EXACT, "1")]),
    route(PathMatch.prefix("/")),
]


def test_contour_route_order() -> None:
    shuffled = list(reversed(ORDERED))
    assert list(contour_route_order(shuffled)) == ORDERED


@given(st.permutations(ORDERED))
def test_route_order_does_not_depend_on_input_order(routes: list[Route]) -> None:
    assert list(contour_route_order(routes)) == ORDERED


def test_headers_inside_a_route_are_sorted_by_name_then_kind() -> None:
    got = sorted_headers(
        [hm("b"), hm("a", StringMatchKind.CONTAINS, "x"), hm("a", StringMatchKind.EXACT, "x")]
    )
    assert [(h.name, h.kind) for h in got] == [
        ("a", StringMatchKind.EXACT),
        ("a", StringMatchKind.CONTAINS),
        ("b", StringMatchKind.PRESENT),
    ]


# --- compile behaviour --------------------------------------------------------------------------

ROOT_SPEC = {
    "virtualhost": {"fqdn": "example.com"},
    "routes": [{"services": [{"name": "svc", "port": 80}]}],
}


def test_every_httpproxy_gets_a_status_and_output_is_deterministic() -> None:
    objects = [
        service("svc"),
        proxy(
            "root", {**ROOT_SPEC, "includes": [{"name": "child", "conditions": [{"prefix": "/c"}]}]}
        ),
        proxy("child", {"routes": [{"services": [{"name": "svc", "port": 80}]}]}),
        proxy("orphan", {"routes": []}),
        proxy("garbage", "not a spec"),
        proxy("nospec", None),
    ]
    first = compile_objects(objects)
    second = compile_objects(reversed(objects))
    names = {s.ref.name for s in first.statuses}
    assert names == {"root", "child", "orphan", "garbage", "nospec"}
    dump = [json.dumps(s.to_json(), sort_keys=True) for s in first.statuses]
    assert dump == [json.dumps(s.to_json(), sort_keys=True) for s in second.statuses]
    assert first.graph == second.graph
    assert "lastTransitionTime" not in json.dumps(dump)


def test_claims_skip_roots_that_may_not_own_a_hostname() -> None:
    snapshot = Snapshot.of(
        [
            proxy("ok", ROOT_SPEC),
            proxy("upper", {"virtualhost": {"fqdn": "UPPER.example.com"}}),
            proxy("star", {"virtualhost": {"fqdn": "*"}}),
            proxy("typed", {"virtualhost": {"fqdn": ["x"]}}),
            proxy("elsewhere", {"virtualhost": {"fqdn": "other.com"}}, namespace="tenant"),
            proxy("leaf", {"routes": []}),
        ]
    )
    claims = HTTPProxyDialect().claims(snapshot, CompileOptions(root_namespaces=("default",)))
    assert sorted((c.listener, c.hostname, c.claimant.name) for c in claims) == [
        (HTTP_LISTENER, "example.com", "ok"),
        (HTTP_LISTENER, "upper.example.com", "upper"),
    ]


class _OlderIngress(Dialect):
    """A stand-in for another dialect whose root is older and claims the same hostname."""

    name = "fake"
    kinds: frozenset[tuple[str, str]] = frozenset()

    def __init__(self) -> None:
        self.ingress = obj(
            "Ingress",
            "legacy",
            "web",
            {},
            created="2019-01-01T00:00:00Z",
            api_version="networking.k8s.io/v1",
        )

    def claims(self, snapshot: Snapshot, options: CompileOptions) -> list[HostClaim]:
        return [HostClaim(HTTP_LISTENER, "example.com", self.ingress)]

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        return DialectOutput()


def test_ownership_spans_dialects_and_names_the_owner() -> None:
    snapshot = Snapshot.of(
        [service("svc"), proxy("root", ROOT_SPEC, created="2024-01-01T00:00:00Z")]
    )
    result = compile_snapshot(snapshot, dialects=[HTTPProxyDialect(), _OlderIngress()])
    cond = status_of(result, "root")["conditions"][0]
    assert cond["errors"] == [
        {
            "type": "VirtualHostError",
            "status": "True",
            "reason": "DuplicateVhost",
            "message": 'fqdn "example.com" is already owned by Ingress web/legacy',
        }
    ]
    # The owner (a stub that serves nothing) holds its host with a virtual host without routes.
    held = vhost(result, "example.com")
    assert held is not None and held.owner.kind == "Ingress" and held.routes == ()


def test_child_reached_from_two_roots_reports_each_error_once() -> None:
    child = proxy(
        "child",
        {
            "routes": [
                {
                    "conditions": [{"header": {"name": "x", "exact": "b"}}],
                    "services": [{"name": "svc", "port": 80}],
                }
            ]
        },
    )
    # Root a's include adds a conflicting exact header for "x"; root b's does not.
    root_a = proxy(
        "a",
        {
            "virtualhost": {"fqdn": "a.com"},
            "includes": [
                {"name": "child", "conditions": [{"header": {"name": "x", "exact": "a"}}]}
            ],
        },
    )
    root_b = proxy("b", {"virtualhost": {"fqdn": "b.com"}, "includes": [{"name": "child"}]})
    root_c = proxy(
        "c",
        {
            "virtualhost": {"fqdn": "c.com"},
            "includes": [
                {"name": "child", "conditions": [{"header": {"name": "x", "exact": "a"}}]}
            ],
        },
    )
    result = compile_objects([service("svc"), child, root_a, root_b, root_c])
    assert errors_of(result, "child") == ["HeaderMatchConditionsNotValid"]
    assert not has_routes(result, "a.com")
    decision = evaluate(result.graph, make_request("b.com", "/", headers={"x": "b"}))
    assert decision.status == 200


def test_exponential_include_graphs_are_cut_off() -> None:
    # Each level includes the next one twice (under two prefixes): 2**30 paths to the bottom.
    levels = 30
    objects = [service("svc")]
    objects.append(
        proxy(
            "root",
            {
                "virtualhost": {"fqdn": "big.com"},
                "includes": [{"name": "l0", "conditions": [{"prefix": "/x"}]}],
            },
        )
    )
    for i in range(levels):
        nxt = f"l{i + 1}" if i + 1 < levels else None
        spec: dict[str, Any] = {"routes": [{"services": [{"name": "svc", "port": 80}]}]}
        if nxt:
            spec["includes"] = [
                {"name": nxt, "conditions": [{"prefix": "/a"}]},
                {"name": nxt, "conditions": [{"prefix": "/b"}]},
            ]
        objects.append(proxy(f"l{i}", spec))
    result = compile_objects(objects)
    assert errors_of(result, "root") == ["IncludeGraphTooLarge"]
    assert not has_routes(result, "big.com")
    assert "more than 2048 proxies and routes (--max-include-revisits)" in str(
        status_of(result, "root")
    )
    assert 2**levels >= DEFAULT_MAX_INCLUDE_REVISITS


def _team_includes(teams: int) -> list[KubeObject]:
    """One shared host including `teams` distinct children, one route each."""
    includes = [{"name": f"team{i}", "conditions": [{"prefix": f"/t{i}"}]} for i in range(teams)]
    objects = [
        service("svc"),
        proxy("root", {"virtualhost": {"fqdn": "shared.com"}, "includes": includes}),
    ]
    route = {"routes": [{"services": [{"name": "svc", "port": 80}]}]}
    objects.extend(proxy(f"team{i}", route) for i in range(teams))
    return objects


def test_distinct_includes_do_not_count_against_the_revisit_limit() -> None:
    # A platform team's shared host including many teams walks each child once: more children
    # than the limit is still served.
    result = compile_objects(_team_includes(50), max_include_revisits=5)
    assert errors_of(result, "root") == []
    for i in (0, 49):
        decision = evaluate(result.graph, make_request("shared.com", f"/t{i}"))
        assert decision.status == 200


def test_the_revisit_limit_is_the_flags_and_named_in_the_status() -> None:
    # A child of one route included twice is walked twice: one revisit, costing 1 + 1.
    shared = {"routes": [{"services": [{"name": "svc", "port": 80}]}]}
    includes = [
        {"name": "child", "conditions": [{"prefix": "/a"}]},
        {"name": "child", "conditions": [{"prefix": "/b"}]},
    ]
    objects = [
        service("svc"),
        proxy("root", {"virtualhost": {"fqdn": "twice.com"}, "includes": includes}),
        proxy("child", shared),
    ]
    assert errors_of(compile_objects(objects, max_include_revisits=2), "root") == []
    refused = compile_objects(objects, max_include_revisits=1)
    assert errors_of(refused, "root") == ["IncludeGraphTooLarge"]
    assert "more than 1 proxies and routes (--max-include-revisits)" in str(
        status_of(refused, "root")
    )
    assert not has_routes(refused, "twice.com")


# --- ingress class -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "spec_class", "configured", "served"),
    [
        ({}, None, "turnout", True),
        ({}, "turnout", "turnout", True),
        ({}, "contour", "turnout", False),
        # An empty configured class is "none configured" too, like Contour's default.
        ({}, None, "", True),
        ({}, "turnout", "", True),
        ({}, None, "internal", False),
        ({}, "internal", "internal", True),
        ({"kubernetes.io/ingress.class": "internal"}, "turnout", "internal", True),
        (
            {"projectcontour.io/ingress.class": "a", "kubernetes.io/ingress.class": "b"},
            None,
            "a",
            True,
        ),
        (
            {"projectcontour.io/ingress.class": "a", "kubernetes.io/ingress.class": "b"},
            None,
            "b",
            False,
        ),
        # Contour's annotation.IngressClass: the first annotation present decides, even empty.
        (
            {"projectcontour.io/ingress.class": "", "kubernetes.io/ingress.class": "b"},
            None,
            "b",
            False,
        ),
    ],
)
def test_ingress_class_selection(
    annotations: dict[str, str], spec_class: str | None, configured: str, served: bool
) -> None:
    spec: dict[str, Any] = {"virtualhost": {"fqdn": "c.example.com"}}
    if spec_class is not None:
        spec["ingressClassName"] = spec_class
    p = obj("HTTPProxy", "p", spec=spec, annotations=annotations)
    assert serves(p, CompileOptions(ingress_class_name=configured)) is served
    result = compile_objects([p], ingress_class_name=configured)
    assert any(s.ref.name == "p" for s in result.statuses) is served


# --- fuzz ---------------------------------------------------------------------------------------

FIELD_NAMES = [
    "virtualhost",
    "fqdn",
    "routes",
    "includes",
    "conditions",
    "services",
    "prefix",
    "exact",
    "regex",
    "header",
    "queryParameter",
    "name",
    "namespace",
    "port",
    "weight",
    "present",
    "notpresent",
    "contains",
    "notcontains",
    "notexact",
    "ignoreCase",
    "treatMissingAsEmpty",
    "protocol",
    "mirror",
    "requestRedirectPolicy",
    "directResponsePolicy",
    "statusCode",
    "tcpproxy",
    "tls",
    "timeoutPolicy",
    "suffix",
    "path",
    "hostname",
    "scheme",
    "body",
    "cookie",
    "userAgent",
    "user-agent",
    "ingressClassName",
]
STRINGS = st.one_of(
    st.sampled_from(
        [
            "/",
            "/a",
            "a",
            "",
            "svc",
            "anchor",
            "anchor.example.com",
            "*.example.com",
            "*",
            "x-a",
            ":method",
            "(",
            "[a-z]{200}",
            "/(?=x)",
            "//",
            "h2",
            "default",
            "other",
            "child",
            "fuzz",
            "\x00",
        ]
    ),
    st.text(max_size=8),
)
_, JSON = json_values(STRINGS, FIELD_NAMES)

TEMPLATE: dict[str, Any] = {
    "virtualhost": {"fqdn": "fuzz.example.com"},
    "includes": [
        {
            "name": "child",
            "namespace": "default",
            "conditions": [{"prefix": "/a"}, {"header": {"name": "x-a", "present": True}}],
        }
    ],
    "routes": [
        {
            "conditions": [
                {"prefix": "/"},
                {"header": {"name": "x-b", "regex": "v[0-9]"}},
                {"queryParameter": {"name": "q", "exact": "1"}},
            ],
            "services": [{"name": "svc", "port": 80, "weight": 1}, {"name": "svc", "port": 80}],
        },
        {"conditions": [{"exact": "/e"}], "directResponsePolicy": {"statusCode": 200}},
    ],
}
# The same proxy as a leaf: the fixed root "other" includes it, so its routes are compiled too.
LEAF_TEMPLATE = {k: v for k, v in TEMPLATE.items() if k != "virtualhost"}


mutated = mutator(JSON, FIELD_NAMES, typed_leaf(JSON, STRINGS, [0, 1, 80, 81, 65536, -1, 100]))


ANCHOR = [
    service("svc"),
    proxy(
        "anchor",
        {
            **TEMPLATE,
            "virtualhost": {"fqdn": "anchor.example.com"},
            "routes": [
                *TEMPLATE["routes"],
                {
                    "conditions": [{"prefix": "/child-free"}],
                    "services": [{"name": "svc", "port": 80}],
                },
            ],
        },
        created="2020-01-01T00:00:00Z",
    ),
    proxy("child", {"routes": [{"services": [{"name": "svc", "port": 80}]}]}),
    proxy(
        "other",
        {
            "virtualhost": {"fqdn": "other.example.com"},
            "includes": [
                {"name": "fuzz", "namespace": "default", "conditions": [{"prefix": "/f"}]}
            ],
        },
        created="2020-01-01T00:00:00Z",
    ),
]
BASELINE = compile_objects(ANCHOR)


def _assert_envoy_would_accept(result: CompileResult) -> None:
    for listener in result.graph.listeners:
        for vh in listener.virtual_hosts:
            for r in vh.routes:
                if r.match.path.kind is PathMatchKind.REGEX:
                    assert regex_error(r.match.path.value) is None
                assert r.match.path.value.startswith("/")
                for h in r.match.headers:
                    assert h.name and not any(c in h.name for c in "\x00\r\n")
                    if h.kind is StringMatchKind.REGEX:
                        assert regex_error(h.value) is None
                for q in r.match.query:
                    assert q.name
                    if q.kind is StringMatchKind.REGEX:
                        assert regex_error(q.value) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.one_of(
        JSON,
        *(mutations(mutated, t, depth) for t in (TEMPLATE, LEAF_TEMPLATE) for depth in (1, 2, 3)),
    ),
    namespace=st.sampled_from(["default", "other"]),
    root_namespaces=st.sampled_from([(), ("default",), ("other",)]),
)
def test_any_spec_compiles_and_leaves_unrelated_routes_alone(
    spec: Any, namespace: str, root_namespaces: tuple[str, ...]
) -> None:
    fuzz = proxy("fuzz", spec, namespace=namespace, created="2030-01-01T00:00:00Z")
    baseline = (
        BASELINE
        if not root_namespaces
        else compile_objects(ANCHOR, root_namespaces=root_namespaces)
    )
    result = compile_objects([*ANCHOR, fuzz], root_namespaces=root_namespaces)

    # Every proxy of turnout's class gets a status; one of another class is not turnout's.
    fuzz_status = {(namespace, "fuzz")} if serves(fuzz, CompileOptions()) else set()
    assert {(s.ref.namespace, s.ref.name) for s in result.statuses} == {
        ("default", "anchor"),
        ("default", "child"),
        ("default", "other"),
        *fuzz_status,
    }
    for s in result.statuses:
        body = dict(s.body)
        assert body["currentStatus"] in {"valid", "invalid", "orphaned"}
        json.dumps(body)
    # Where the anchor may not be a root, its hostname is free: the fuzzed proxy may take it.
    if not root_namespaces or "default" in root_namespaces:
        assert vhost(result, "anchor.example.com") == vhost(baseline, "anchor.example.com")
    assert status_of(result, "anchor") == status_of(baseline, "anchor")
    _assert_envoy_would_accept(result)
    # The evaluator copes with whatever the fuzzed proxy produced.
    hosts = ["anchor.example.com", "fuzz.example.com", "other.example.com", "x.example.com"]
    for host, path in itertools.product(hosts, ["/", "/a/e", "/f/a"]):
        evaluate(result.graph, make_request(host, path, headers={"x-a": "1", "x-b": "v1"}))


@pytest.mark.parametrize("spec", [TEMPLATE, LEAF_TEMPLATE])
def test_fuzz_template_is_valid(spec: Any) -> None:
    """The mutation template must itself compile cleanly, or the fuzz explores only errors."""
    result = compile_objects([service("svc"), proxy("child", {"routes": []}), proxy("t", spec)])
    assert status_of(result, "t")["currentStatus"] in {"valid", "orphaned"}
    assert not [
        e
        for e in status_of(result, "t")["conditions"][0].get("errors", [])
        if e["type"] != "Orphaned"
    ]


def test_upstream_protocol_from_the_service_or_its_annotations() -> None:
    annotated = obj(
        "Service",
        "grpc",
        spec={"ports": [{"name": "grpc", "port": 9000}, {"port": 9001}]},
        annotations={
            "projectcontour.io/upstream-protocol.h2c": " grpc ",
            "projectcontour.io/upstream-protocol.tls": "9001",
        },
    )
    spec = {
        "virtualhost": {"fqdn": "example.com"},
        "routes": [
            {"conditions": [{"prefix": "/a"}], "services": [{"name": "grpc", "port": 9000}]},
            {"conditions": [{"prefix": "/b"}], "services": [{"name": "grpc", "port": 9001}]},
            {
                "conditions": [{"prefix": "/c"}],
                "services": [{"name": "grpc", "port": 9001, "protocol": "h2"}],
            },
        ],
    }
    result = compile_objects([annotated, proxy("root", spec)])
    protocols = {(c.port, c.protocol.value) for c in result.graph.clusters}
    assert protocols == {(9000, "h2c"), (9001, "tls"), (9001, "h2")}

    bad = {**spec, "routes": [{"services": [{"name": "grpc", "port": 9000, "protocol": "h3"}]}]}
    result = compile_objects([annotated, proxy("root", bad)])
    assert status_of(result, "root")["conditions"][0]["errors"] == [
        {
            "type": "ServiceError",
            "status": "True",
            "reason": "UnsupportedProtocol",
            "message": "unsupported protocol: h3",
        }
    ]
    assert not has_routes(result, "example.com")

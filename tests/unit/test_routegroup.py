"""The RouteGroup dialect beyond its fixtures: Skipper's path-tree order, robustness against any
spec, determinism, the example, and the class option."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cases.routegroup_objects import routegroup, shop_object, web_service
from turnout.app import compile_options, compile_snapshot
from turnout.cli import build_parser, serve_config
from turnout.compile_inputs import CompileOptions
from turnout.dialects.fields import go_duration_seconds
from turnout.dialects.routegroup.backends import Target, parse_target
from turnout.dialects.routegroup.eskip import parse_filters, parse_predicates
from turnout.dialects.routegroup.filters import SUPPORTED_FILTERS, translate_filters
from turnout.dialects.routegroup.predicates import SUPPORTED_PREDICATES, translate_predicates
from turnout.dialects.routegroup.priority import Node, path_key, priority, tree_nodes
from turnout.envoy.translate import translate
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import PathMatch, PathMatchKind, Redirect, UpstreamProtocol
from turnout.objects import KubeObject, Origin, freeze
from turnout.sources.files import discover, load_file
from turnout.status.model import State
from turnout.store import Snapshot

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "routegroup"


def test_path_tree_order() -> None:
    """Skipper's lookup: static before :param before catch-all at the first segment that differs;
    where a path ends (a node that takes only that path) sorts before its trailing-slash node and
    its catch-all; a route without a path comes last."""
    paths = ["/", "/a", "/a/", "/a/:id", "/a/b", "/a/b/c", "/:x", "/:x/b", "/a/*rest", "/b", "/*x"]
    shuffled = paths[:]
    random.Random(7).shuffle(shuffled)
    ordered = sorted(shuffled, key=path_key)
    assert ordered.index("/a/b/c") < ordered.index("/a/b") < ordered.index("/a/:id")
    assert ordered.index("/a/:id") < ordered.index("/a") < ordered.index("/a/")
    assert ordered.index("/a/") < ordered.index("/a/*rest")
    assert ordered.index("/a/*rest") < ordered.index("/:x/b") < ordered.index("/:x")
    assert ordered.index("/b") < ordered.index("/:x")
    assert ordered[-2:] == ["/", "/*x"]
    # A free wildcard is the catch-all node PathSubtree registers below its base.
    assert path_key("/a/*rest") == path_key("/a/**") == tree_nodes("/a", True)[2][1]
    assert tree_nodes("/a/*rest", True) == tree_nodes("/a/", True) == tree_nodes("/a", True)
    assert [n for n, _ in tree_nodes("/a", True)] == [Node.BASE, Node.SLASH, Node.CATCH_ALL]
    assert [k for _, k in tree_nodes("/", True)] == [path_key("/"), path_key("/*rest")]
    # Same node: the weight decides, then the input order.
    assert priority("/a", 2, (1,)) < priority("/a", 1, (0,)) < priority("/a", 1, (1,))
    assert priority("/", 0, (9,)) < priority(None, 50, (0,))


def test_class_option_reaches_the_compile_options() -> None:
    args = build_parser().parse_args(["check", "x.yaml", "--routegroup-class", "^edge-.*"])
    assert compile_options(serve_config(args)).routegroup_class == "^edge-.*"
    assert CompileOptions().routegroup_class == "skipper"


def test_class_option_that_is_not_a_regex_is_compared_literally() -> None:
    rg = routegroup(
        "odd",
        {
            "hosts": ["odd.example.com"],
            "backends": [{"name": "s", "type": "shunt"}],
            "defaultBackends": [{"backendName": "s"}],
        },
    )
    annotated = KubeObject(
        rg.api_version,
        rg.kind,
        rg.namespace,
        rg.name,
        freeze(
            {
                **rg.raw,
                "metadata": {**rg.metadata, "annotations": {"zalando.org/routegroup.class": "a[b"}},
            }
        ),
        rg.origin,
    )
    result = compile_snapshot(Snapshot.of([annotated]), CompileOptions(routegroup_class="a[b"))
    assert [s.state for s in result.statuses] == [State.VALID]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70000) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
_keys = st.sampled_from(
    [
        "name", "type", "serviceName", "servicePort", "address", "endpoints", "algorithm",
        "backendName", "weight", "path", "pathSubtree", "pathRegexp", "methods", "predicates",
        "filters", "backends", "hosts", "secretName",
    ]
)  # fmt: skip
_values = _json | st.sampled_from(
    ["service", "shunt", "lb", "network", "web", "/a", "GET", 'Header("a", "b")', "status(418)",
     "http://10.0.0.9:80", "Traffic(.5)", "modPath(/x/, \"y\")", "False()", "shop.example.com"]
)  # fmt: skip
_entries = st.lists(st.dictionaries(_keys, _values, max_size=6), max_size=4)
_specs = st.fixed_dictionaries(
    {},
    optional={
        "hosts": st.lists(
            st.sampled_from(["shop.example.com", "x.example.com", "BAD"]), max_size=3
        ),
        "backends": _entries,
        "defaultBackends": _entries,
        "routes": _entries,
        "tls": _entries,
        "extra": _json,
    },
)


@settings(max_examples=150, deadline=None)
@given(spec=_specs | _json)
def test_any_spec_compiles_without_raising_and_leaves_others_alone(spec: Any) -> None:
    """Whatever a RouteGroup holds, the compile does not raise, the RouteGroup gets a status, the
    translator takes the graph, and an HTTPProxy's host keeps routing."""
    proxy = shop_object(
        "HTTPProxy",
        "proxy",
        {
            "spec": {
                "virtualhost": {"fqdn": "proxy.example.com"},
                "routes": [{"services": [{"name": "web", "port": 80}]}],
            }
        },
        "projectcontour.io/v1",
    )
    result = compile_snapshot(Snapshot.of([*web_service(), proxy, routegroup("any", spec)]))
    assert any(s.ref.kind == "RouteGroup" for s in result.statuses)
    translate(result.graph)
    decision = evaluate(result.graph, make_request(host="proxy.example.com", path="/"))
    assert decision.status == 200


def test_compile_is_deterministic_whatever_the_object_order() -> None:
    objects = [
        *web_service(),
        routegroup(
            "a",
            {
                "hosts": ["shop.example.com"],
                "backends": [
                    {"name": "web", "type": "service", "serviceName": "web", "servicePort": 80}
                ],
                "defaultBackends": [{"backendName": "web"}],
                "routes": [
                    {"pathSubtree": "/"},
                    {"path": "/x", "methods": ["GET", "PUT"], "predicates": ['Header("A", "1")']},
                ],
            },
        ),
        routegroup(
            "b",
            {
                "hosts": ["shop.example.com"],
                "backends": [{"name": "s", "type": "shunt"}],
                "defaultBackends": [{"backendName": "s"}],
                "routes": [
                    {"pathSubtree": "/x"},
                    {"path": "/x", "predicates": ['Header("B", "1")']},
                ],
            },
        ),
    ]
    first = compile_snapshot(Snapshot.of(objects))
    again = compile_snapshot(Snapshot.of(list(reversed(objects))))
    assert first.graph == again.graph
    assert first.statuses == again.statuses
    routes = first.graph.listeners[0].virtual_hosts[0].routes
    # Header routes at /x first (equal weights: RouteGroup a before b), then the plain ones.
    assert [(r.source.object.name, r.source.field) for r in routes] == [
        ("a", "spec.routes[1]"),
        ("a", "spec.routes[1]"),
        ("b", "spec.routes[1]"),
        ("b", "spec.routes[0]"),
        ("a", "spec.routes[0]"),
    ]


def test_the_example_is_valid_and_routes_as_documented() -> None:
    objects: list[KubeObject] = []
    for path in discover([EXAMPLE]):
        loaded = load_file(path)
        assert not loaded.problems
        objects.extend(loaded.objects)
    result = compile_snapshot(Snapshot.of(objects))
    assert {(s.ref.name, s.state) for s in result.statuses if s.ref.kind == "RouteGroup"} == {
        ("shop", State.VALID),
        ("ab-test", State.VALID),
    }

    def decide(host: str, path: str, method: str = "GET", **headers: str) -> Any:
        return evaluate(
            result.graph, make_request(host=host, path=path, method=method, headers=headers)
        )

    split = decide("shop.turnout.local", "/cart")
    assert [(c.split("/")[1], w) for c, w in split.clusters] == [("shop-v1", 80), ("shop-v2", 20)]
    write = decide("shop.turnout.local", "/cart", "POST")
    assert [c.split("/")[1] for c, w in write.clusters if w] == ["shop-v1"]
    assert decide("shop.turnout.local", "/login").status == 308
    canary = decide("ab.turnout.local", "/", cookie="canary=A")
    assert [c.split("/")[1] for c, _ in canary.clusters] == ["service-a"]
    stays = decide("ab.turnout.local", "/", cookie="canary=B")
    assert [c.split("/")[1] for c, _ in stays.clusters] == ["shop-v1"]
    assert stays.route is not None and stays.route.source.field == "spec.routes[2]"


def test_fixture_set_covers_every_seed_use_case() -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "routegroup"
    cases = {p.name for p in fixtures.iterdir() if (p / "input.yaml").is_file()}
    assert len(cases) >= 40
    # Seed 003's use cases: each as written (where it is not valid RouteGroup) and as served.
    for use_case in (
        "seed-simplicity",
        "seed-simplicity-default-backends",
        "seed-redirect-migration",
        "seed-authnz",
        "seed-ratelimits",
        "seed-traffic-switching",
        "seed-ab-test",
        "seed-ab-step1",
        "seed-ab-step3",
        "seed-minimal",
        "seed-ingress-and-redirect",
    ):
        assert use_case in cases


def test_traffic_routes_at_one_node_chain_their_shares() -> None:
    """Skipper draws anew for each Traffic predicate; Envoy draws once per request, so the second
    route's threshold covers what the first left: 0.2, then 0.2 + 0.8 * 0.3."""
    backends = [{"name": "s", "type": "shunt"}]
    routes = [
        {
            "path": "/",
            "predicates": ["Traffic(.2)"],
            "filters": ["status(201)", 'inlineContent("a")'],
        },
        {
            "path": "/",
            "predicates": ["Traffic(.3)"],
            "filters": ["status(202)", 'inlineContent("b")'],
        },
        {"path": "/", "predicates": ["Traffic(.5)", 'Header("X-Other", "1")']},
        {"path": "/"},
    ]
    spec = {
        "hosts": ["t.example.com"],
        "backends": backends,
        "defaultBackends": [{"backendName": "s"}],
        "routes": routes,
    }
    result = compile_snapshot(Snapshot.of([routegroup("t", spec)]))
    vhost = result.graph.listeners[0].virtual_hosts[0]
    fractions = [(r.source.field, r.match.runtime_fraction) for r in vhost.routes]
    assert fractions[0] == ("spec.routes[2]", 0.5)  # heavier, and its own match
    assert fractions[1] == ("spec.routes[0]", 0.2)
    assert fractions[2][0] == "spec.routes[1]"
    assert abs((fractions[2][1] or 0) - 0.44) < 1e-9
    assert fractions[3] == ("spec.routes[3]", None)


def test_traffic_segments_share_one_draw() -> None:
    """Skipper compares one draw per request with every TrafficSegment: segments [0, .3) and
    [0, .6) at one node are the thresholds .3 and .6 as written. A Traffic route after them takes
    its chance of what they left."""
    spec = {
        "hosts": ["t.example.com"],
        "backends": [{"name": "s", "type": "shunt"}],
        "defaultBackends": [{"backendName": "s"}],
        "routes": [
            {"path": "/", "predicates": [f"TrafficSegment(0, {m})", "Weight(2)"]}
            for m in (".3", ".6", ".5")
        ]
        + [
            {"path": "/", "predicates": ["Traffic(.5)"]},
            {"path": "/"},
        ],
    }
    result = compile_snapshot(Snapshot.of([routegroup("t", spec)]))
    vhost = result.graph.listeners[0].virtual_hosts[0]
    fractions = [(r.source.field, r.match.runtime_fraction) for r in vhost.routes]
    assert fractions[:3] == [
        ("spec.routes[0]", 0.3),
        ("spec.routes[1]", 0.6),
        ("spec.routes[2]", 0.6),
    ]
    assert fractions[3][0] == "spec.routes[3]"
    assert abs((fractions[3][1] or 0) - (0.6 + 0.4 * 0.5)) < 1e-9
    assert fractions[4] == ("spec.routes[4]", None)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "dialects" / "routegroup.md"


def test_not_supported_names_the_call_and_points_to_the_docs_that_list_the_supported() -> None:
    """The message stays the same as filters are added: it names the call and the docs, whose
    tables list every supported predicate and filter."""
    filters = translate_filters(parse_filters('oauthTokeninfoAnyScope("x")'))
    predicates = translate_predicates(parse_predicates('Cron("* * * * *")'))
    assert [p.message for p in filters.problems] == [
        "filter oauthTokeninfoAnyScope is not supported: turnout translates only filters Envoy "
        "can express, listed in docs/dialects/routegroup.md"
    ]
    assert [p.message for p in predicates.problems] == [
        "predicate Cron is not supported: turnout translates only predicates Envoy can express, "
        "listed in docs/dialects/routegroup.md"
    ]
    docs = DOCS.read_text()
    for name in (*SUPPORTED_FILTERS, *SUPPORTED_PREDICATES):
        assert f"`{name}" in docs, name


def test_values_go_refuses_are_refused() -> None:
    assert go_duration_seconds("2562047h") == 2562047 * 3600
    assert go_duration_seconds("999999999h") is None  # time: invalid duration (int64 nanoseconds)
    for location in ("ht tp://x y", "http://x y", ":x", "http://a.org:x/"):
        problems = translate_filters(parse_filters(f'redirectTo(308, "{location}")')).problems
        assert [p.message.split(" is not a URL")[0] for p in problems] == [
            f"filter redirectTo: invalid filter parameters: {location!r}"
        ], location
    ok = translate_filters(parse_filters('redirectTo(308, "https://a.org:8443/b c?d=1")'))
    assert not ok.problems and isinstance(ok.action, Redirect) and ok.action.port == 8443


def test_backend_addresses_envoy_cannot_use_are_refused() -> None:
    assert (
        parse_target("http://10.1.1.1:0")
        == '"http://10.1.1.1:0": port 0 is not a port a backend can listen on'
    )
    assert "Envoy has no FastCGI upstream" in str(parse_target("fastcgi://10.1.1.1:9000"))
    assert parse_target("http://10.1.1.1:1") == Target(UpstreamProtocol.HTTP, "10.1.1.1", 1)


def test_a_free_wildcard_takes_a_non_empty_rest_only() -> None:
    """Skipper's Path("/a/*rest") is the catch-all node below /a/: not /a, not /a/."""
    (match,) = translate_predicates(parse_predicates('Path("/a/*rest")')).route_matches()
    assert match.path == PathMatch(PathMatchKind.REGEX, "/a/.+")
    refused = translate_predicates(parse_predicates('PathSubtree("/a/*rest/b")')).problems
    assert [p.message for p in refused] == [
        "predicate PathSubtree: invalid predicate parameters: free wildcard param should be last"
    ]


def test_backends_may_not_be_envoys_or_turnouts_own_interfaces() -> None:
    """A tenant's network, lb or tee backend cannot reach Envoy's admin interface (nor turnout's
    admin or xDS), cloud metadata (link-local) or this host through an unspecified address;
    loopback backends on other ports stay allowed."""
    options = CompileOptions(reserved_ports=((9901, "--envoy-admin-port"), (8001, "--admin-port")))
    for url in ("http://127.0.0.1:9901", "http://127.9.9.9:8001", "http://[::1]:9901"):
        assert "--" in str(parse_target(url, options)), url
    for url in (
        "http://169.254.169.254",
        "http://[fe80::1]:80",
        "http://0.0.0.0:8080",
        "http://[::]:80",
        "http://[::ffff:169.254.169.254]:80",
    ):
        assert isinstance(parse_target(url, options), str), url
    assert parse_target("http://127.0.0.1:9000", options) == Target(
        UpstreamProtocol.HTTP, "127.0.0.1", 9000
    )
    assert parse_target("http://10.0.0.9:9901", options) == Target(
        UpstreamProtocol.HTTP, "10.0.0.9", 9901
    )
    spec = {
        "hosts": ["adm.example.org"],
        "backends": [
            {"name": "admin", "type": "network", "address": "http://127.0.0.1:9901"},
            {"name": "pool", "type": "lb", "endpoints": ["http://169.254.169.254:80"]},
            {"name": "ok", "type": "network", "address": "http://127.0.0.1:9000"},
        ],
        "routes": [
            {"pathSubtree": "/", "backends": [{"backendName": "admin"}]},
            {"pathSubtree": "/pool", "backends": [{"backendName": "pool"}]},
            {
                "path": "/tee",
                "filters": ['tee("http://127.0.0.1:8001")'],
                "backends": [{"backendName": "ok"}],
            },
        ],
    }
    result = compile_snapshot(Snapshot.of([routegroup("adm", spec)]), options)
    (status,) = result.statuses
    assert status.state is State.INVALID
    (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
    assert accepted["reason"] == "AddressNotValid"
    message = accepted["message"]
    admin = 'spec.backends[0].address (backend "admin"): "http://127.0.0.1:9901": port 9901'
    assert admin in message
    assert "(--envoy-admin-port)" in message and "(--admin-port)" in message
    assert 'spec.backends[1].endpoints[0] (backend "pool")' in message and "link-local" in message
    assert "spec.routes[2].filters[0]: filter tee" in message
    for path in ("/", "/pool/x", "/tee"):
        decision = evaluate(result.graph, make_request("adm.example.org", path))
        assert not decision.clusters, (path, decision)


def test_a_loopback_may_route_again_only_within_its_own_hosts() -> None:
    """A loopback route that sets another tenant's Host would reach that tenant's routes as a
    request from Envoy itself (past ClientIP allow-lists): refused, naming the filter."""

    def spec(host: str) -> dict[str, Any]:
        return {
            "hosts": ["a.example.org", "www.a.example.org"],
            "backends": [{"name": "loop", "type": "loopback"}],
            "routes": [
                {
                    "pathSubtree": "/x",
                    "filters": [f'setRequestHeader("Host", "{host}")', 'setPath("/admin")'],
                    "backends": [{"backendName": "loop"}],
                }
            ],
        }

    foreign = compile_snapshot(Snapshot.of([routegroup("a", spec("b.example.org"))]))
    (status,) = foreign.statuses
    (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
    assert accepted["status"] == "False" and accepted["reason"] == "FilterNotSupported"
    assert accepted["message"].startswith(
        'spec.routes[0].filters[0]: filter setRequestHeader: with the loopback backend "loop"'
    )
    assert '"b.example.org", which is not one of this RouteGroup\'s hosts' in accepted["message"]
    refused = evaluate(foreign.graph, make_request("a.example.org", "/x"))
    assert refused.status == 500 and not refused.clusters
    for own in ("www.a.example.org", "WWW.A.example.org:8080"):
        ok = compile_snapshot(Snapshot.of([routegroup("a", spec(own))]))
        assert [s.state for s in ok.statuses] == [State.VALID], own
        assert evaluate(ok.graph, make_request("a.example.org", "/x")).clusters, own


def _one_route(filters: list[str], backend: str = "loop") -> dict[str, Any]:
    return {
        "hosts": ["b.example.org"],
        "backends": [
            {"name": "loop", "type": "loopback"},
            {"name": "web", "type": "service", "serviceName": "web", "servicePort": 80},
        ],
        "routes": [
            {"pathSubtree": "/", "filters": filters, "backends": [{"backendName": backend}]}
        ],
    }


def _accepted(filters: list[str], backend: str = "loop") -> dict[str, Any]:
    result = compile_snapshot(
        Snapshot.of([*web_service(), routegroup("b", _one_route(filters, backend))])
    )
    (status,) = result.statuses
    (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
    if accepted["status"] == "False":
        refused = evaluate(result.graph, make_request("b.example.org", "/x"))
        assert refused.status == 500 and not refused.clusters
    return dict(accepted)


def test_a_loopback_path_must_stay_origin_form() -> None:
    """The looped request line carries the rewritten path; one that does not start with "/" is an
    absolute URI to the second hop, which takes its host from it and so reaches another tenant's
    virtual host from 127.0.0.1: refused on loopback routes, naming the filter."""
    for replacement in ("http://a.example.org/anything", "$1", "a.example.org/x", "/x y", "//"):
        filters = [f'modPath("^(.*)$", "{replacement}")']
        accepted = _accepted(filters)
        if replacement == "//":
            assert accepted["status"] == "True", accepted
            continue
        assert accepted["reason"] == "FilterNotSupported", (replacement, accepted)
        assert accepted["message"].startswith(
            "spec.routes[0].filters[0]: filter modPath is not supported with the loopback backend "
            '"loop" (spec.backends[0]): the looped request line would carry a path'
        ), accepted
    for ok in ('modPath("^/api", "/")', 'modPath("^/v1(.*)$", "/v2$1")', 'setPath("/moved")'):
        assert _accepted([ok])["status"] == "True", ok
    # To a Service the request line is the backend's business: unchanged.
    assert _accepted(['modPath("^.*$", "http://a.example.org/")'], "web")["status"] == "True"


def test_a_loopback_route_may_not_change_the_clients_forwarding_headers() -> None:
    """The second hop comes from 127.0.0.1 and trusts X-Forwarded-For (--num-trusted-hops) and
    x-envoy-* headers on it: a loopback route may not set, add or drop them."""
    for call in (
        'setRequestHeader("X-Forwarded-For", "10.20.30.40")',
        'appendRequestHeader("x-forwarded-for", "10.20.30.40")',
        'dropRequestHeader("X-Forwarded-Proto")',
        'setRequestHeader("Forwarded", "for=10.20.30.40")',
        'setRequestHeader("X-Real-IP", "10.20.30.40")',
        'setRequestHeader("X-Envoy-Upstream-Rq-Timeout-Ms", "1")',
    ):
        accepted = _accepted([call])
        assert accepted["reason"] == "FilterNotSupported", (call, accepted)
        assert "may not change the client's forwarding headers" in accepted["message"], call
        assert _accepted([call], "web")["status"] == "True", call


def test_no_route_may_name_the_loop_mark() -> None:
    """Envoy applies the loopback cluster's mark before the route's own header changes, so a
    route that dropped it would loop without end: any filter naming it is refused, everywhere."""
    for backend in ("loop", "web"):
        for call in (
            'dropRequestHeader("X-Turnout-Loopback")',
            'setRequestHeader("x-TURNOUT-loopback", "1")',
            'setResponseHeader("X-Turnout-Loopback", "1")',
            'setRequestHeader("X-Copy", "${request.header.X-Turnout-Loopback}")',
        ):
            accepted = _accepted([call], backend)
            assert accepted["reason"] == "FilterNotSupported", (call, accepted)
            assert 'with the header "x-turnout-loopback"' in accepted["message"], call


def test_the_loop_replaces_x_forwarded_for_with_the_client_address() -> None:
    """The loopback share sets the mark and X-Forwarded-For to the address the first hop took for
    the client, so the second hop sees no client-supplied list, and sends that address for the
    second hop's ClientIP."""
    result = compile_snapshot(Snapshot.of([routegroup("b", _one_route([]))]))
    decision = evaluate(result.graph, make_request("b.example.org", "/x"))
    assert decision.route is not None
    (share,) = decision.route.action.clusters  # type: ignore[union-attr]
    assert share.policies is not None and share.policies.request_headers is not None
    assert {(h.name, h.value) for h in share.policies.request_headers.set} == {
        ("x-turnout-loopback", "1"),
        ("x-forwarded-for", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"),
        ("x-turnout-loopback-client", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"),
    }


def test_traffic_segments_that_tile_share_the_draw_in_order() -> None:
    """Skipper's documented TrafficSegment(0, .5), (.5, .8), (.8, 1), written in any order: each
    route takes its segment of the one draw. A segment that leaves a gap below it is refused."""
    segments = [("0.8", "1"), ("0", "0.5"), ("0.5", "0.8")]
    spec = {
        "hosts": ["t.example.com"],
        "backends": [{"name": n, "type": "shunt"} for n in ("a", "b", "c")],
        "routes": [
            {
                "path": "/",
                "predicates": [f"TrafficSegment({low}, {high})"],
                "filters": [f"status({200 + i})", f'inlineContent("{i}")'],
                "backends": [{"backendName": "a"}],
            }
            for i, (low, high) in enumerate(segments)
        ]
        + [
            {
                "path": "/gap",
                "predicates": ["TrafficSegment(0.5, 1)"],
                "backends": [{"backendName": "a"}],
            },
        ],
    }
    result = compile_snapshot(Snapshot.of([routegroup("t", spec)]))
    vhost = result.graph.listeners[0].virtual_hosts[0]
    fractions = [(r.source.field, r.match.runtime_fraction) for r in vhost.routes]
    assert fractions == [("spec.routes[1]", 0.5), ("spec.routes[2]", 0.8), ("spec.routes[0]", 1.0)]
    for draw, answer in ((0.0, 201), (0.49, 201), (0.5, 202), (0.79, 202), (0.8, 200), (0.99, 200)):
        request = dataclasses.replace(make_request("t.example.com", "/"), draw=draw)
        assert evaluate(result.graph, request).status == answer, draw
    (status,) = result.statuses
    (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
    assert accepted["reason"] == "PredicateNotSupported"
    assert accepted["message"].startswith(
        "spec.routes[3]: predicate TrafficSegment: its segment starts at 0.5, but the segments "
        "of routes with the same other predicates end at 0"
    )
    miss = evaluate(result.graph, make_request("t.example.com", "/"))
    assert "no random draw given" in miss.passed_over[0].reason


def test_path_literals_match_as_clients_escape_them() -> None:
    """Skipper matches the decoded path; Envoy routes on the path as sent: Path("/café") takes
    /caf%C3%A9 in either hex case, PathSubtree("/a b") takes /a%20b and below it."""
    spec = {
        "hosts": ["p.example.com"],
        "backends": [{"name": "s", "type": "shunt"}],
        "routes": [
            {"path": "/café", "filters": ["status(201)", 'inlineContent("cafe")']},
            {"pathSubtree": "/a b", "filters": ["status(202)", 'inlineContent("ab")']},
            {"path": "/x+y", "filters": ["status(203)", 'inlineContent("xy")']},
        ],
        "defaultBackends": [{"backendName": "s"}],
    }
    result = compile_snapshot(Snapshot.of([routegroup("p", spec)]))
    assert [s.state for s in result.statuses] == [State.VALID]

    def status(path: str) -> int:
        return evaluate(result.graph, make_request("p.example.com", path)).status

    for path in ("/caf%C3%A9", "/caf%c3%a9"):
        assert status(path) == 201, path
    for path in ("/a%20b", "/a%20b/", "/a%20b/c%20d"):
        assert status(path) == 202, path
    for path in ("/x+y", "/x%2By", "/x%2by"):
        assert status(path) == 203, path
    for path in ("/caf", "/cafe", "/a%20bc", "/ab", "/x%20y"):
        assert status(path) == 404, path


def test_empty_hosts_or_routes_are_refused_as_the_crd_does() -> None:
    """The CRD's minItems 1: `hosts: []` and `routes: []` never reach Skipper; absent fields
    (a catch-all RouteGroup, default backends only) stay valid."""
    base: dict[str, Any] = {
        "backends": [{"name": "x", "type": "shunt"}],
        "defaultBackends": [{"backendName": "x"}],
    }
    for key in ("hosts", "routes"):
        result = compile_snapshot(Snapshot.of([routegroup("e", {**base, key: []})]))
        (status,) = result.statuses
        assert status.state is State.INVALID, key
        (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
        assert accepted["reason"] == "InvalidField"
        assert accepted["message"] == (
            f"spec.{key}: Invalid value: 0: spec.{key} in body should have at least 1 items"
        )
    absent = compile_snapshot(Snapshot.of([routegroup("e", base)]))
    assert [s.state for s in absent.statuses] == [State.VALID]


def test_messages_in_skippers_words() -> None:
    """Go's url.Parse wording for unparsable addresses, and a NotValid reason for arguments a
    predicate refuses (Skipper: invalid predicate parameters), not a NotSupported one."""
    spec = {
        "hosts": ["m.example.com"],
        "backends": [{"name": "x", "type": "network", "address": "http://[::1"}],
        "defaultBackends": [{"backendName": "x"}],
    }
    (status,) = compile_snapshot(Snapshot.of([routegroup("m", spec)])).statuses
    (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
    assert accepted["message"] == (
        'spec.backends[0].address: failed to parse backend address "http://[::1": '
        "parse \"http://[::1\": missing ']' in host"
    )
    assert parse_target("http://10.0.0.1:x") == (
        '"http://10.0.0.1:x" is not a URL: parse "http://10.0.0.1:x": invalid port ":x" after host'
    )
    spec = {
        "hosts": ["m.example.com"],
        "backends": [{"name": "s", "type": "shunt"}],
        "defaultBackends": [{"backendName": "s"}],
        "routes": [{"predicates": ['PathRegexp("(")']}],
    }
    (status,) = compile_snapshot(Snapshot.of([routegroup("m", spec)])).statuses
    (accepted,) = [c for c in status.body["conditions"] if c["type"] == "Accepted"]
    assert accepted["reason"] == "PredicateNotValid", accepted


def test_a_loopback_cannot_re_enter_a_host_shared_with_another_namespace() -> None:
    """RouteGroups of several namespaces may share a host (Skipper merges them); a loopback route
    on it would reach the other namespace's routes as a request from Envoy itself."""

    def in_namespace(namespace: str, name: str, spec: dict[str, Any]) -> KubeObject:
        meta = {"name": name, "namespace": namespace, "creationTimestamp": "2024-01-01T00:00:00Z"}
        raw = {"apiVersion": "zalando.org/v1", "kind": "RouteGroup", "metadata": meta, "spec": spec}
        return KubeObject("zalando.org/v1", "RouteGroup", namespace, name, freeze(raw), Origin("t"))

    guarded = {
        "hosts": ["b.example.org"],
        "backends": [{"name": "s", "type": "shunt"}],
        "routes": [
            {
                "path": "/admin",
                "predicates": ['ClientIP("127.0.0.1/32")'],
                "filters": ["status(200)", 'inlineContent("secret")'],
                "backends": [{"backendName": "s"}],
            }
        ],
    }
    looping = {
        "hosts": ["b.example.org"],
        "backends": [{"name": "loop", "type": "loopback"}],
        "routes": [
            {
                "path": "/steal",
                "filters": ['setPath("/admin")'],
                "backends": [{"backendName": "loop"}],
            }
        ],
    }
    result = compile_snapshot(
        Snapshot.of([in_namespace("b", "owner", guarded), in_namespace("a", "intruder", looping)])
    )
    states = {s.ref.namespace: s for s in result.statuses}
    assert states["b"].state is State.VALID
    (accepted,) = [c for c in states["a"].body["conditions"] if c["type"] == "Accepted"]
    assert accepted["reason"] == "BackendNotSupported"
    assert accepted["message"].startswith(
        'spec.routes[0]: the loopback backend "loop" (spec.backends[0]) is not supported on host '
        '"b.example.org", which RouteGroup b/owner of another namespace also serves'
    )
    steal = evaluate(result.graph, make_request("b.example.org", "/steal"))
    assert steal.status == 500 and not steal.clusters
    # In one namespace the loop stays allowed.
    same = compile_snapshot(
        Snapshot.of([in_namespace("b", "owner", guarded), in_namespace("b", "loops", looping)])
    )
    assert all(s.state is State.VALID for s in same.statuses)


def test_a_backend_without_endpoints_answers_502_for_its_share_only() -> None:
    """Skipper's route for a backend of a Service without endpoints answers 502 itself; in a
    split, that backend's share does, and the evaluator reports the share."""
    spec = {
        "hosts": ["split.example.org"],
        "backends": [
            {"name": "a", "type": "service", "serviceName": "web", "servicePort": 80},
            {"name": "e", "type": "service", "serviceName": "empty", "servicePort": 80},
        ],
        "routes": [
            {
                "pathSubtree": "/",
                "backends": [{"backendName": "a", "weight": 3}, {"backendName": "e", "weight": 1}],
            }
        ],
    }
    empty = shop_object("Service", "empty", {"spec": {"ports": [{"name": "http", "port": 80}]}})
    result = compile_snapshot(Snapshot.of([routegroup("split", spec), *web_service(), empty]))
    decision = evaluate(result.graph, make_request("split.example.org", "/x"))
    assert decision.status == 200
    assert decision.answered_shares == ((502, 0.25),)

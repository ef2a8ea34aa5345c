"""The IngressRoute dialect's tricky parts: prefix containment, claims and ownership across
dialects and listeners, rejection in one delegation context only, statuses, cut-off delegation
graphs, and a fuzz property: any spec compiles without raising, every IngressRoute gets a status,
and an object never changes the routes of an unrelated one."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import kube_object, service
from tests.unit.fuzzing import json_values, mutations, mutator, typed_leaf
from turnout.app import compile_snapshot
from turnout.compile_inputs import (
    DEFAULT_MAX_INCLUDE_REVISITS,
    HTTP_LISTENER,
    HTTPS_LISTENER,
    CompileOptions,
)
from turnout.dialects.httpproxy import HTTPProxyDialect
from turnout.dialects.ingressroute import IngressRouteDialect
from turnout.dialects.ingressroute.processor import contained
from turnout.dialects.ingressroute.spec import parse_ingressroute
from turnout.envoy.translate import translate
from turnout.graph.build import CompileResult
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import DirectResponse, Forward, PathMatchKind, VirtualHost
from turnout.objects import KubeObject, freeze
from turnout.store import Snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ingressroute"
BETA = "contour.heptio.com/v1beta1"
ALPHA = "contour.heptio.com/v1alpha1"

# --- helpers ------------------------------------------------------------------------------------


def obj(
    kind: str,
    name: str,
    namespace: str = "default",
    spec: Any = None,
    created: str | None = None,
    api_version: str | None = None,
) -> KubeObject:
    api = api_version or {"IngressRoute": BETA, "HTTPProxy": "projectcontour.io/v1"}.get(kind, "v1")
    return kube_object(api, kind, name, namespace, spec=spec, created=created)


def ir(
    name: str,
    spec: Any,
    namespace: str = "default",
    created: str | None = None,
    api_version: str = BETA,
) -> KubeObject:
    return obj("IngressRoute", name, namespace, spec, created, api_version)


def compile_objects(objects: Iterable[KubeObject], **options: Any) -> CompileResult:
    return compile_snapshot(
        Snapshot.of(objects),
        CompileOptions(**options),
        dialects=[HTTPProxyDialect(), IngressRouteDialect()],
    )


def status_of(result: CompileResult, name: str, namespace: str = "default") -> dict[str, Any]:
    for s in result.statuses:
        if s.ref.kind == "IngressRoute" and (s.ref.name, s.ref.namespace) == (name, namespace):
            return dict(s.body)
    raise AssertionError(f"no status for IngressRoute {namespace}/{name}")


def reasons(result: CompileResult, name: str, namespace: str = "default") -> list[str]:
    return [e["reason"] for e in status_of(result, name, namespace).get("errors", [])]


def vhost(result: CompileResult, host: str, listener: str = HTTP_LISTENER) -> VirtualHost | None:
    for lst in result.graph.listeners:
        if lst.name == listener:
            for vh in lst.virtual_hosts:
                if vh.name == host:
                    return vh
    return None


def has_routes(result: CompileResult, host: str) -> bool:
    """Whether `host` has routes; an owned host whose root is invalid is held by a virtual host
    without routes (404), so it never falls to another namespace's `*` one."""
    vh = vhost(result, host)
    return vh is not None and bool(vh.routes)


def route(match: str, *services: str, **extra: Any) -> dict[str, Any]:
    return {"match": match, "services": [{"name": s, "port": 80} for s in services], **extra}


def delegate(match: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    target = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"match": match, "delegate": target}


def root_spec(fqdn: str, *routes: dict[str, Any], **vhost_extra: Any) -> dict[str, Any]:
    return {"virtualhost": {"fqdn": fqdn, **vhost_extra}, "routes": list(routes)}


# --- containment --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("match", "prefix", "inside"),
    [
        ("/foo", "/foo", True),
        ("/foo/", "/foo", True),
        ("/foo/bar", "/foo", True),
        ("/foobar", "/foo", False),
        ("/fo", "/foo", False),
        ("/", "/foo", False),
        ("/anything", "/", True),
        ("/", "/", True),
        ("/foo/bar", "/foo/", True),
        ("/foo/", "/foo/", True),
        # Below /foo/, the string prefix /foo would also route /foobar (Contour accepted it).
        ("/foo", "/foo/", False),
        ("/static/css", "/static", True),
        ("/css", "/static", False),
        ("", "/", False),
    ],
)
def test_containment_is_segment_aware(match: str, prefix: str, inside: bool) -> None:
    assert contained(match, prefix) is inside


# --- reading ------------------------------------------------------------------------------------


def test_v1alpha1_reads_the_seeds_service_key_as_list_or_mapping() -> None:
    spec = {
        "routes": [
            {"match": "/a", "service": [{"name": "x", "port": 80}, {"name": "y", "port": 81}]},
            {"match": "/b", "service": {"name": "z", "port": 82}},
        ]
    }
    parsed = parse_ingressroute(ir("alpha", spec, api_version=ALPHA))
    assert parsed.valid, parsed.problems
    assert [[(s.name, s.port) for s in r.services] for r in parsed.spec.routes] == [
        [("x", 80), ("y", 81)],
        [("z", 82)],
    ]
    # v1beta1 does not know `service`: a typo must not silently drop the upstreams.
    beta = parse_ingressroute(ir("beta", spec))
    assert not beta.valid
    assert [p.message for p in beta.problems if not p.warning] == [
        'spec.routes[0].service: unknown field "service"',
        'spec.routes[1].service: unknown field "service"',
    ]


def test_a_root_with_any_bad_hostname_keeps_none() -> None:
    parsed = parse_ingressroute(
        ir("r", root_spec("Good.Example.com", route("/", "s"), aliases=["ok.example.com", "*.x"]))
    )
    assert parsed.spec.virtualhost is not None
    assert parsed.spec.virtualhost.hostnames == ()
    fine = parse_ingressroute(
        ir("r", root_spec("Good.Example.com", route("/", "s"), aliases=["OK.example.com"]))
    )
    assert fine.spec.virtualhost is not None
    assert fine.spec.virtualhost.hostnames == ("good.example.com", "ok.example.com")


# --- claims and ownership -----------------------------------------------------------------------


def test_claims_cover_aliases_and_the_https_listener_for_tls_roots() -> None:
    snapshot = Snapshot.of(
        [
            ir("plain", root_spec("plain.com", route("/", "s"), aliases=["www.plain.com"])),
            ir("secure", root_spec("secure.com", route("/", "s"), tls={"secretName": "t"})),
            ir("bad", root_spec("bad.com", route("/", "s"), aliases=["*.bad.com"])),
            ir("elsewhere", root_spec("else.com", route("/", "s")), namespace="tenant"),
            ir("edge", {"routes": [route("/", "s")]}),
        ]
    )
    claims = IngressRouteDialect().claims(snapshot, CompileOptions(root_namespaces=("default",)))
    assert sorted((c.listener, c.hostname, c.claimant.name) for c in claims) == [
        (HTTP_LISTENER, "plain.com", "plain"),
        (HTTP_LISTENER, "secure.com", "secure"),
        (HTTP_LISTENER, "www.plain.com", "plain"),
        (HTTPS_LISTENER, "secure.com", "secure"),
    ]


class _OlderIngress(Dialect):
    """A stand-in for another dialect whose older root claims a hostname."""

    name = "fake"
    kinds: frozenset[tuple[str, str]] = frozenset()

    def __init__(self, listener: str, host: str) -> None:
        self.listener = listener
        self.host = host
        self.ingress = obj(
            "Ingress", "legacy", "web", {}, "2019-01-01T00:00:00Z", "networking.k8s.io/v1"
        )

    def claims(self, snapshot: Snapshot, options: CompileOptions) -> list[HostClaim]:
        return [HostClaim(self.listener, self.host, self.ingress)]

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        return DialectOutput()


@pytest.mark.parametrize(
    ("listener", "host", "message"),
    [
        (HTTP_LISTENER, "www.example.com", 'alias "www.example.com" is already owned by'),
        (HTTPS_LISTENER, "example.com", 'fqdn "example.com" is already owned by'),
    ],
)
def test_losing_any_hostname_on_any_listener_rejects_the_root(
    listener: str, host: str, message: str
) -> None:
    spec = root_spec(
        "example.com",
        route("/", "svc"),
        aliases=["www.example.com"],
        tls={"secretName": "missing-is-never-looked-up"},
    )
    snapshot = Snapshot.of([service("svc"), ir("root", spec, created="2024-01-01T00:00:00Z")])
    result = compile_snapshot(
        snapshot, dialects=[IngressRouteDialect(), _OlderIngress(listener, host)]
    )
    status = status_of(result, "root")
    assert status["errors"] == [
        {"reason": "DuplicateVhost", "message": f"{message} Ingress web/legacy"}
    ]
    assert all(not vh.routes for lst in result.graph.listeners for vh in lst.virtual_hosts)


# --- delegation ---------------------------------------------------------------------------------


def test_an_edge_rejected_under_one_parent_is_still_served_under_another() -> None:
    objects = [
        service("docs"),
        ir("a", root_spec("a.com", delegate("/docs", "docs"))),
        ir("b", root_spec("b.com", delegate("/help", "docs"))),
        ir("docs", {"routes": [route("/docs", "docs")]}),
    ]
    result = compile_objects(objects)
    assert evaluate(result.graph, make_request("a.com", "/docs/x")).status == 200
    assert evaluate(result.graph, make_request("b.com", "/help/x")).status == 502
    # Reached from two roots, the error is reported once.
    assert reasons(result, "docs") == ["PathPrefixMismatch"]
    # Without the second parent, the first one's routes are the same.
    alone = compile_objects([o for o in objects if o.name != "b"])
    assert vhost(alone, "a.com") == vhost(result, "a.com")


def test_one_route_reached_twice_replaces_only_itself() -> None:
    objects = [
        service("docs"),
        ir("site", root_spec("site.com", delegate("/", "docs"), delegate("/docs", "docs"))),
        ir("docs", {"routes": [route("/docs", "docs")]}),
    ]
    result = compile_objects(objects)
    assert "warnings" not in status_of(result, "docs")
    site = vhost(result, "site.com")
    assert site is not None and len(site.routes) == 1


def test_every_ingressroute_gets_a_status_and_output_is_deterministic() -> None:
    objects = [
        service("svc"),
        ir("root", root_spec("example.com", route("/", "svc"), delegate("/c", "child"))),
        ir("child", {"routes": [route("/c", "svc")]}),
        ir("orphan", {"routes": [route("/o", "svc")]}),
        ir("garbage", "not a spec"),
        ir("nospec", None),
        ir(
            "alpha",
            {"routes": [{"match": "/a", "service": {"name": "svc", "port": 80}}]},
            "x",
            None,
            ALPHA,
        ),
    ]
    first = compile_objects(objects)
    second = compile_objects(reversed(objects))
    names = {s.ref.name for s in first.statuses}
    assert names == {"root", "child", "orphan", "garbage", "nospec", "alpha"}
    dump = [json.dumps(s.to_json(), sort_keys=True) for s in first.statuses]
    assert dump == [json.dumps(s.to_json(), sort_keys=True) for s in second.statuses]
    assert first.graph == second.graph
    assert {s.ref.name: s.state.value for s in first.statuses} == {
        "root": "valid",
        "child": "valid",
        "orphan": "orphaned",
        "garbage": "invalid",
        "nospec": "invalid",
        "alpha": "orphaned",
    }
    assert next(s for s in first.statuses if s.ref.name == "alpha").api_version == ALPHA


def test_exponential_delegation_graphs_are_cut_off() -> None:
    # Each level delegates its whole space to the next one twice: 2**30 paths to the bottom.
    levels = 30
    objects = [service("svc"), ir("root", root_spec("big.com", delegate("/", "l0")))]
    for i in range(levels):
        routes = [route(f"/{i}", "svc")]
        if i + 1 < levels:
            routes += [delegate("/", f"l{i + 1}"), delegate("/", f"l{i + 1}")]
        objects.append(ir(f"l{i}", {"routes": routes}))
    result = compile_objects(objects)
    assert reasons(result, "root") == ["DelegationGraphTooLarge"]
    assert not has_routes(result, "big.com")
    assert "(--max-include-revisits)" in str(status_of(result, "root"))
    assert 2**levels >= DEFAULT_MAX_INCLUDE_REVISITS
    # Each level's two delegations reach the next one twice: with room for every revisit the
    # same shape (shortened) is served.
    short = objects[: 2 + 8]
    short[-1] = ir("l7", {"routes": [route("/7", "svc")]})
    assert reasons(compile_objects(short, max_include_revisits=2**12), "root") == []
    assert reasons(compile_objects(short, max_include_revisits=2), "root") == [
        "DelegationGraphTooLarge"
    ]


def test_a_missing_service_in_a_child_only_costs_its_prefix() -> None:
    objects = [
        service("web"),
        ir("root", root_spec("example.com", route("/", "web"), delegate("/team", "team"))),
        ir("team", {"routes": [route("/team", "gone")]}),
    ]
    result = compile_objects(objects)
    assert status_of(result, "root")["currentStatus"] == "valid"
    assert reasons(result, "team") == ["ServiceUnresolvedReference"]
    decision = evaluate(result.graph, make_request("example.com", "/team/x"))
    assert decision.route is not None and decision.route.action == DirectResponse(502)
    assert evaluate(result.graph, make_request("example.com", "/")).status == 200


def test_dialect_identity() -> None:
    dialect = IngressRouteDialect()
    assert dialect.name == "ingressroute"
    assert {(BETA, "IngressRoute"), (ALPHA, "IngressRoute")} <= dialect.kinds


def test_there_are_fixtures() -> None:
    cases = [p for p in FIXTURES.iterdir() if (p / "input.yaml").is_file()]
    assert len(cases) >= 25
    assert len([p for p in cases if p.name.startswith("seed000-")]) >= 4


# --- fuzz ---------------------------------------------------------------------------------------

FIELD_NAMES = [
    "virtualhost",
    "fqdn",
    "aliases",
    "tls",
    "secretName",
    "minimumProtocolVersion",
    "passthrough",
    "routes",
    "match",
    "services",
    "service",
    "delegate",
    "name",
    "namespace",
    "port",
    "weight",
    "strategy",
    "healthCheck",
    "path",
    "host",
    "intervalSeconds",
    "timeoutSeconds",
    "unhealthyThresholdCount",
    "healthyThresholdCount",
    "enableWebsockets",
    "permitInsecure",
    "prefixRewrite",
    "timeoutPolicy",
    "retryPolicy",
    "request",
    "count",
    "perTryTimeout",
    "tcpproxy",
    "validation",
]
STRINGS = st.one_of(
    st.sampled_from(
        [
            "/",
            "/a",
            "/a/b",
            "/f",
            "/f/x",
            "a",
            "",
            "svc",
            "child",
            "fuzz",
            "anchor",
            "other",
            "default",
            "team",
            "anchor.example.com",
            "other.example.com",
            "fuzz.example.com",
            "*.example.com",
            "*",
            "Random",
            "RingHash",
            "Cookie",
            "1.3",
            "1m",
            "infinity",
            "tls",
            "\x00",
            "a\nb",
        ]
    ),
    st.text(max_size=8),
)
_, JSON = json_values(STRINGS, FIELD_NAMES)

TEMPLATE: dict[str, Any] = {
    "virtualhost": {
        "fqdn": "fuzz.example.com",
        "aliases": ["www.fuzz.example.com"],
        "tls": {"secretName": "tls", "minimumProtocolVersion": "1.3"},
    },
    "routes": [
        {
            "match": "/f",
            "services": [
                {
                    "name": "svc",
                    "port": 80,
                    "weight": 3,
                    "strategy": "Random",
                    "healthCheck": {"path": "/healthz", "intervalSeconds": 5},
                },
                {"name": "svc", "port": 80},
            ],
            "permitInsecure": True,
            "timeoutPolicy": {"request": "1s"},
        },
        {"match": "/f/x", "delegate": {"name": "leaf", "namespace": "default"}},
    ],
}
# The same object as an edge: the fixed root "other" delegates /f to it, so its routes compile.
LEAF_TEMPLATE = {k: v for k, v in TEMPLATE.items() if k != "virtualhost"}


mutated = mutator(
    JSON, FIELD_NAMES, typed_leaf(JSON, STRINGS, [0, 1, 80, 81, 65536, -1, 4294967296])
)


def _tls_secret() -> KubeObject:
    crt = (FIXTURES / "seed000-google" / "input.yaml").read_text()
    # The fixture's PEM blocks, re-indented out of its YAML.
    blocks = [
        "\n".join(line.strip() for line in block.splitlines()) + "\n" for block in _pem_blocks(crt)
    ]
    raw = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "tls", "namespace": "default"},
        "stringData": {"tls.crt": blocks[0], "tls.key": blocks[1]},
    }
    return KubeObject("v1", "Secret", "default", "tls", freeze(raw))


def _pem_blocks(text: str) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if "-----BEGIN" in line:
            current = [line]
        elif current:
            current.append(line)
            if "-----END" in line:
                out.append("\n".join(current))
                current = []
    return out


ANCHOR = [
    service("svc"),
    _tls_secret(),
    ir(
        "anchor",
        root_spec(
            "anchor.example.com",
            route("/", "svc"),
            delegate("/child", "child"),
            aliases=["www.anchor.example.com"],
        ),
        created="2020-01-01T00:00:00Z",
    ),
    ir("child", {"routes": [route("/child", "svc"), route("/child/deep", "svc")]}),
    # Only the fuzzed object delegates here (it is orphaned without it).
    ir("leaf", {"routes": [route("/f/x", "svc")]}),
    ir(
        "other",
        root_spec("other.example.com", delegate("/f", "fuzz")),
        created="2020-01-01T00:00:00Z",
    ),
]
BASELINE = compile_objects(ANCHOR)


def _assert_envoy_would_accept(result: CompileResult) -> None:
    for listener in result.graph.listeners:
        for vh in listener.virtual_hosts:
            for r in vh.routes:
                assert r.match.path.kind is PathMatchKind.PREFIX
                assert r.match.path.value.startswith("/")
                assert not any(c in r.match.path.value for c in "\x00\r\n")
                if isinstance(r.action, Forward):
                    assert sum(c.weight for c in r.action.clusters) <= 2**32 - 1
    for cluster in result.graph.clusters:
        hc = cluster.health_check
        if hc is not None:
            assert hc.path and hc.interval_s > 0 and hc.timeout_s > 0
    translate(result.graph)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.one_of(
        JSON,
        *(mutations(mutated, t, depth) for t in (TEMPLATE, LEAF_TEMPLATE) for depth in (1, 2, 3)),
    ),
    namespace=st.sampled_from(["default", "other"]),
    api_version=st.sampled_from([BETA, ALPHA]),
    root_namespaces=st.sampled_from([(), ("default",), ("other",)]),
)
def test_any_spec_compiles_and_leaves_unrelated_routes_alone(
    spec: Any, namespace: str, api_version: str, root_namespaces: tuple[str, ...]
) -> None:
    fuzz = ir("fuzz", spec, namespace, "2030-01-01T00:00:00Z", api_version)
    baseline = (
        BASELINE
        if not root_namespaces
        else compile_objects(ANCHOR, root_namespaces=root_namespaces)
    )
    result = compile_objects([*ANCHOR, fuzz], root_namespaces=root_namespaces)

    assert {(s.ref.namespace, s.ref.name) for s in result.statuses} == {
        ("default", "anchor"),
        ("default", "child"),
        ("default", "other"),
        ("default", "leaf"),
        (namespace, "fuzz"),
    }
    for s in result.statuses:
        body = dict(s.body)
        assert body["currentStatus"] in {"valid", "invalid", "orphaned"}
        assert (body["currentStatus"] == "invalid") == bool(body.get("errors"))
        json.dumps(body)
    # The anchor's tree (its own routes and its child's) is untouched, whatever the fuzzed object
    # claims or delegates to, including the anchor's child.
    for host in ("anchor.example.com", "www.anchor.example.com"):
        assert vhost(result, host) == vhost(baseline, host)
    assert status_of(result, "anchor") == status_of(baseline, "anchor")
    _assert_envoy_would_accept(result)
    hosts = ["anchor.example.com", "fuzz.example.com", "other.example.com", "x.example.com"]
    for host, path in itertools.product(hosts, ["/", "/f/x", "/child/deep"]):
        evaluate(result.graph, make_request(host, path))


@pytest.mark.parametrize("spec", [TEMPLATE, LEAF_TEMPLATE])
def test_fuzz_template_is_valid(spec: Any) -> None:
    """The mutation template must itself compile cleanly, or the fuzz explores only errors."""
    result = compile_objects([*ANCHOR, ir("fuzz", spec)])
    status = status_of(result, "fuzz")
    assert status["currentStatus"] == "valid", status
    assert status_of(result, "leaf")["currentStatus"] == "valid"
    root = "virtualhost" in spec
    decision = evaluate(
        result.graph,
        make_request(
            "fuzz.example.com" if root else "other.example.com",
            "/f/x/1",
            listener=HTTPS_LISTENER if root else HTTP_LISTENER,
        ),
    )
    assert decision.route is not None and decision.route.source.object.name == "leaf"

"""The Ingress dialect's tricky parts: class selection, claims and ownership across dialects, TLS
choice, merge order, the status shape, Prefix semantics against the Ingress spec's element-wise
definition, and a fuzz property: any Ingress compiles without raising, every Ingress of turnout's
class gets a status (and no other does), and an Ingress never changes another host's routes."""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.cases.ingress_objects import (
    backend,
    compile_objects,
    ingress,
    kind_object,
    path,
    rule,
    service,
)
from tests.unit.fuzzing import json_values, mutations, mutator, typed_leaf
from turnout.app import compile_snapshot
from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER, CompileOptions
from turnout.dialects.contour.order import contour_route_order
from turnout.dialects.ingress import IngressDialect
from turnout.dialects.ingress.classes import CONTROLLER, ClassIndex
from turnout.dialects.ingress.spec import parse_ingress
from turnout.dialects.ingress.status import load_balancer_entry
from turnout.graph.build import CompileResult
from turnout.graph.dialect import CompileContext, Dialect, DialectOutput, HostClaim
from turnout.graph.evaluate import evaluate, make_request
from turnout.graph.model import HostnameMatch, PathMatchKind, VirtualHost
from turnout.graph.regex import regex_error
from turnout.objects import KubeObject
from turnout.store import Snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ingress"

# --- helpers ------------------------------------------------------------------------------------


@functools.cache
def _certificate() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "example.com")])
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )


def tls_secret(name: str, namespace: str = "default") -> KubeObject:
    crt, key = _certificate()
    return kind_object(
        "Secret",
        name,
        namespace,
        extra={"type": "kubernetes.io/tls", "stringData": {"tls.crt": crt, "tls.key": key}},
    )


def status_of(result: CompileResult, name: str, namespace: str = "default") -> dict[str, Any]:
    for s in result.statuses:
        if s.ref.kind == "Ingress" and (s.ref.namespace, s.ref.name) == (namespace, name):
            body: dict[str, Any] = json.loads(json.dumps(dict(s.body)))
            return body
    raise AssertionError(f"no status for Ingress {namespace}/{name}")


def condition(result: CompileResult, name: str, type_: str = "Accepted") -> dict[str, Any]:
    conditions = status_of(result, name)["conditions"]
    found: dict[str, Any] = next(c for c in conditions if c["type"] == type_)
    return found


def vhost(result: CompileResult, host: str, listener: str = HTTP_LISTENER) -> VirtualHost | None:
    for lst in result.graph.listeners:
        if lst.name == listener:
            for vh in lst.virtual_hosts:
                if vh.name == host:
                    return vh
    return None


def served_by(result: CompileResult, host: str, p: str, listener: str = HTTP_LISTENER) -> str:
    decision = evaluate(result.graph, make_request(host, p, listener=listener))
    if decision.clusters:
        return decision.clusters[0][0].rsplit("/", 2)[0]
    return str(decision.status)


# --- class selection ----------------------------------------------------------------------------


def test_ingresses_of_other_classes_get_no_status_at_all() -> None:
    """Writing any status to another controller's Ingress would overwrite its address."""
    result = compile_objects(
        [
            service("svc"),
            ingress("mine", rule("a.example.com", path("/"))),
            ingress("nginx", rule("b.example.com", path("/")), class_name="nginx"),
            ingress("classless", rule("c.example.com", path("/")), class_name=None),
            ingress(
                "annotated-away",
                rule("d.example.com", path("/")),
                annotations={"kubernetes.io/ingress.class": "nginx"},
            ),
            kind_object("IngressClass", "turnout", spec={"controller": CONTROLLER}),
        ]
    )
    assert [(s.ref.kind, s.ref.name) for s in result.statuses] == [("Ingress", "mine")]
    assert served_by(result, "b.example.com", "/") == "404"
    assert served_by(result, "d.example.com", "/") == "404"


def test_a_class_name_is_ours_by_its_ingressclass_controller_first() -> None:
    index = ClassIndex.of(
        Snapshot.of(
            [
                kind_object("IngressClass", "turnout", spec={"controller": "k8s.io/ingress-nginx"}),
                kind_object("IngressClass", "internal", spec={"controller": CONTROLLER}),
                kind_object("IngressClass", "broken", spec={"controller": 42}),
                kind_object("IngressClass", "nospec"),
            ]
        ),
        served_name="turnout",
    )
    assert index.is_ours("internal")
    assert not index.is_ours("turnout")  # the name belongs to another controller's class
    assert not index.is_ours("broken")
    assert not index.is_ours("nospec")
    assert not index.is_ours("unknown")
    assert index.default_class is None


def test_default_class_is_the_newest_then_the_first_name() -> None:
    def default(name: str, created: str, controller: str = CONTROLLER) -> KubeObject:
        return kind_object(
            "IngressClass",
            name,
            spec={"controller": controller},
            created=created,
            annotations={"ingressclass.kubernetes.io/is-default-class": "true"},
        )

    snapshot = Snapshot.of(
        [
            default("old", "2020-01-01T00:00:00Z"),
            default("zeta", "2024-01-01T00:00:00Z", "other"),
            default("alpha", "2024-01-01T00:00:00Z"),
            kind_object(
                "IngressClass",
                "not-default",
                created="2025-01-01T00:00:00Z",
                spec={"controller": CONTROLLER},
                annotations={"ingressclass.kubernetes.io/is-default-class": "True"},
            ),
        ]
    )
    index = ClassIndex.of(snapshot, "turnout")
    assert index.default_class == "alpha"
    assert index.selects(ingress("x", class_name=None))


def test_ingressclass_is_cluster_scoped_whatever_namespace_a_file_gives_it() -> None:
    result = compile_objects(
        [
            service("svc", "apps"),
            kind_object("IngressClass", "edge", "some-namespace", spec={"controller": CONTROLLER}),
            ingress("x", rule("x.example.com", path("/")), namespace="apps", class_name="edge"),
        ]
    )
    assert served_by(result, "x.example.com", "/") == "apps/svc"


# --- claims and ownership -----------------------------------------------------------------------


def test_claims_one_per_host_by_the_oldest_ingress_and_https_for_tls_hosts() -> None:
    snapshot = Snapshot.of(
        [
            ingress("new", rule("a.example.com", path("/x")), created="2024-02-01T00:00:00Z"),
            ingress(
                "old",
                rule("a.example.com", path("/")),
                rule(None, path("/")),
                created="2024-01-01T00:00:00Z",
                tls=[{"hosts": ["a.example.com"], "secretName": "cert"}],
            ),
            # Refused by the API server's rules: claims nothing, however old.
            ingress("broken", rule("a.example.com", path("relative")), created="2000-01-01"),
            # A rule without paths serves nothing and claims nothing.
            ingress("empty", {"host": "b.example.com"}, created="2000-01-01"),
        ]
    )
    claims = IngressDialect().claims(snapshot, CompileOptions())
    assert sorted((c.listener, c.hostname, c.claimant.name) for c in claims) == [
        (HTTP_LISTENER, "*", "old"),
        (HTTP_LISTENER, "a.example.com", "old"),
        (HTTPS_LISTENER, "a.example.com", "old"),
    ]


def test_a_tls_entry_claims_https_only_for_hosts_of_its_own_ingress() -> None:
    # Another namespace's Ingress naming a.example.com under tls (it routes only b.example.com)
    # must not put that host on the HTTPS listener, nor b's.
    snapshot = Snapshot.of(
        [
            ingress("a", rule("a.example.com", path("/")), namespace="team-a"),
            ingress(
                "b",
                rule("b.example.com", path("/")),
                namespace="team-b",
                created="2000-01-01T00:00:00Z",
                tls=[{"hosts": ["a.example.com", "b.example.com"], "secretName": "cert"}],
            ),
        ]
    )
    claims = IngressDialect().claims(snapshot, CompileOptions())
    assert sorted((c.listener, c.hostname, c.claimant.name) for c in claims) == [
        (HTTP_LISTENER, "a.example.com", "a"),
        (HTTP_LISTENER, "b.example.com", "b"),
        (HTTPS_LISTENER, "b.example.com", "b"),
    ]


class _HTTPSClaimer(Dialect):
    """A stand-in for a dialect that claims a hostname on the HTTPS listener only."""

    name = "fake"
    kinds: frozenset[tuple[str, str]] = frozenset()

    def __init__(self, claimant: KubeObject, host: str) -> None:
        self.claimant, self.host = claimant, host

    def claims(self, snapshot: Snapshot, options: CompileOptions) -> list[HostClaim]:
        return [HostClaim(HTTPS_LISTENER, self.host, self.claimant)]

    def compile(self, snapshot: Snapshot, ctx: CompileContext) -> DialectOutput:
        return DialectOutput()


def test_https_owned_by_another_object_leaves_the_host_plain_http() -> None:
    other = kind_object("HTTPProxy", "proxy", created="2000-01-01T00:00:00Z")
    objects = [
        service("svc"),
        tls_secret("cert"),
        ingress(
            "ing",
            rule("a.example.com", path("/")),
            tls=[{"hosts": ["a.example.com"], "secretName": "cert"}],
        ),
    ]
    result = compile_snapshot(
        Snapshot.of(objects),
        CompileOptions(),
        dialects=[IngressDialect(), _HTTPSClaimer(other, "a.example.com")],
    )
    assert vhost(result, "a.example.com", HTTPS_LISTENER) is None
    assert served_by(result, "a.example.com", "/") == "default/svc"
    accepted = condition(result, "ing")
    assert accepted["reason"] == "HostnameConflict"
    assert "HTTPProxy default/proxy" in accepted["message"]


def test_losing_a_host_keeps_the_ingress_other_hosts() -> None:
    result = compile_objects(
        [
            service("svc"),
            kind_object(
                "HTTPProxy",
                "proxy",
                spec={
                    "virtualhost": {"fqdn": "a.example.com"},
                    "routes": [{"services": [{"name": "svc", "port": 80}]}],
                },
                created="2000-01-01T00:00:00Z",
            ),
            ingress("ing", rule("a.example.com", path("/i")), rule("b.example.com", path("/"))),
        ]
    )
    owner = vhost(result, "a.example.com")
    assert owner is not None and owner.owner.kind == "HTTPProxy"
    assert served_by(result, "b.example.com", "/") == "default/svc"
    assert status_of(result, "ing")["loadBalancer"] == {"ingress": [{"ip": "127.0.0.1"}]}


@pytest.mark.parametrize(
    ("address", "entry"),
    [("203.0.113.7", {"ip": "203.0.113.7"}), ("lb.example.net", {"hostname": "lb.example.net"})],
)
def test_ingress_status_address_is_the_load_balancer(address: str, entry: dict[str, str]) -> None:
    """--ingress-status-address (the Envoy Service's external address) rather than --address."""
    result = compile_objects(
        [service("svc"), ingress("ing", rule("a.example.com", path("/")))],
        status_address=address,
    )
    assert status_of(result, "ing")["loadBalancer"] == {"ingress": [entry]}


# --- merging and precedence ---------------------------------------------------------------------


def _merge_objects() -> list[KubeObject]:
    return [
        service("svc"),
        service("a"),
        service("b"),
        ingress(
            "first",
            rule("m.example.com", path("/"), path("/api", "a"), path("/x", "a", "Exact")),
            created="2024-01-01T00:00:00Z",
        ),
        ingress(
            "second",
            rule(
                "m.example.com",
                path("/api/v2", "b"),
                path("/api", "b", "Exact"),
                path("/x", "b", "Exact"),  # conflicts with the older "first"
                path("/img/.*[.]png", "b", "ImplementationSpecific"),
            ),
            created="2024-02-01T00:00:00Z",
        ),
    ]


def test_merged_routes_follow_contour_order_across_ingresses() -> None:
    result = compile_objects(_merge_objects())
    vh = vhost(result, "m.example.com")
    assert vh is not None
    assert vh.routes == contour_route_order(vh.routes)
    assert [(r.match.path.kind, r.match.path.value, r.source.object.name) for r in vh.routes] == [
        (PathMatchKind.EXACT, "/x", "first"),
        (PathMatchKind.EXACT, "/api", "second"),
        (PathMatchKind.REGEX, "/img/.*[.]png", "second"),
        (PathMatchKind.SEGMENT_PREFIX, "/api/v2", "second"),
        (PathMatchKind.SEGMENT_PREFIX, "/api", "first"),
        (PathMatchKind.PREFIX, "/", "first"),
    ]
    assert condition(result, "second")["reason"] == "PathConflict"
    assert condition(result, "first")["status"] == "True"


def test_compile_does_not_depend_on_the_order_objects_arrive_in() -> None:
    objects = _merge_objects()
    baseline = compile_objects(objects)
    shuffled = list(objects)
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        again = compile_objects(shuffled)
        assert again.graph == baseline.graph
        assert again.statuses == baseline.statuses


def test_the_older_ingress_wins_a_conflict_whatever_its_name() -> None:
    def build(first_created: str, second_created: str) -> str:
        result = compile_objects(
            [
                service("a"),
                service("b"),
                ingress("aaa", rule("h.example.com", path("/p", "a")), created=first_created),
                ingress("zzz", rule("h.example.com", path("/p", "b")), created=second_created),
            ]
        )
        return served_by(result, "h.example.com", "/p")

    assert build("2024-01-01T00:00:00Z", "2024-02-01T00:00:00Z") == "default/a"
    assert build("2024-02-01T00:00:00Z", "2024-01-01T00:00:00Z") == "default/b"
    # Same age: namespace/name decides.
    assert build("2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z") == "default/a"


def test_wildcard_hosts_are_one_label_virtual_hosts() -> None:
    result = compile_objects([service("svc"), ingress("w", rule("*.example.com", path("/")))])
    vh = vhost(result, "*.example.com")
    assert vh is not None and vh.hostname_match is HostnameMatch.WILDCARD_ONE_LABEL
    assert served_by(result, "a.example.com", "/") == "default/svc"
    assert served_by(result, "a.b.example.com", "/") == "404"


# --- TLS ----------------------------------------------------------------------------------------


def test_tls_versions_come_from_the_ingress_whose_entry_is_used() -> None:
    result = compile_objects(
        [
            service("svc"),
            tls_secret("cert"),
            tls_secret("other-cert"),
            ingress(
                "old",
                rule("s.example.com", path("/")),
                tls=[{"hosts": ["s.example.com"], "secretName": "cert"}],
                annotations={"projectcontour.io/tls-minimum-protocol-version": "1.3"},
                created="2024-01-01T00:00:00Z",
            ),
            ingress(
                "new",
                rule("s.example.com", path("/new")),
                tls=[{"hosts": ["s.example.com"], "secretName": "other-cert"}],
                annotations={"projectcontour.io/tls-minimum-protocol-version": "1.2"},
                created="2024-02-01T00:00:00Z",
            ),
        ]
    )
    vh = vhost(result, "s.example.com", HTTPS_LISTENER)
    assert vh is not None and vh.tls is not None
    assert vh.tls.min_version == "1.3"
    assert vh.tls.secret.startswith("default/cert/")
    assert [s.name for s in result.graph.secrets] == [vh.tls.secret]
    # Both Ingresses' paths are served over HTTPS; the newer one hears which certificate won.
    assert served_by(result, "s.example.com", "/new", HTTPS_LISTENER) == "default/svc"
    accepted = condition(result, "new")
    assert accepted["status"] == "True"
    assert 'already uses Secret "default/cert" from Ingress default/old' in accepted["message"]


def test_a_broken_older_tls_entry_gives_way_to_a_newer_usable_one() -> None:
    result = compile_objects(
        [
            service("svc"),
            tls_secret("good"),
            ingress(
                "old",
                rule("s.example.com", path("/")),
                tls=[{"hosts": ["s.example.com"], "secretName": "missing"}],
                created="2024-01-01T00:00:00Z",
            ),
            ingress(
                "new",
                rule("s.example.com", path("/n")),
                tls=[{"hosts": ["s.example.com"], "secretName": "good"}],
                created="2024-02-01T00:00:00Z",
            ),
        ]
    )
    vh = vhost(result, "s.example.com", HTTPS_LISTENER)
    assert vh is not None and vh.tls is not None and vh.tls.secret.startswith("default/good/")
    assert condition(result, "old", "ResolvedRefs")["reason"] == "SecretNotFound"


def test_tls_minimum_above_maximum_is_reported_and_the_maximum_ignored() -> None:
    result = compile_objects(
        [
            service("svc"),
            tls_secret("cert"),
            ingress(
                "i",
                rule("s.example.com", path("/")),
                tls=[{"hosts": ["s.example.com"], "secretName": "cert"}],
                annotations={
                    "projectcontour.io/tls-minimum-protocol-version": "1.3",
                    "projectcontour.io/tls-maximum-protocol-version": "1.2",
                },
            ),
        ]
    )
    vh = vhost(result, "s.example.com", HTTPS_LISTENER)
    assert vh is not None and vh.tls is not None
    assert (vh.tls.min_version, vh.tls.max_version) == ("1.3", "1.3")
    assert condition(result, "i")["reason"] == "TLSVersionNotValid"


def test_empty_secret_name_is_a_warning_not_an_error() -> None:
    result = compile_objects(
        [
            service("svc"),
            ingress("i", rule("s.example.com", path("/")), tls=[{"hosts": ["s.example.com"]}]),
        ]
    )
    assert vhost(result, "s.example.com", HTTPS_LISTENER) is None
    accepted = condition(result, "i")
    assert accepted["status"] == "True"
    assert "no secretName" in accepted["message"]
    assert next(s for s in result.statuses if s.ref.name == "i").state.ok


# --- status -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "entry"),
    [
        ("127.0.0.1", {"ip": "127.0.0.1"}),
        ("::1", {"ip": "::1"}),
        ("lb.example.net", {"hostname": "lb.example.net"}),
    ],
)
def test_load_balancer_entry(address: str, entry: dict[str, str]) -> None:
    assert load_balancer_entry(address) == entry


def test_status_is_deterministic_and_summarises_the_first_error() -> None:
    objects = [
        ingress(
            "i",
            rule(
                "a.example.com",
                path("/svc", "missing"),
                path("/re[", "x", "ImplementationSpecific"),
            ),
        )
    ]
    first, second = compile_objects(objects), compile_objects(objects)
    assert first.statuses == second.statuses
    (status,) = first.statuses
    assert not status.state.ok
    assert status.summary.startswith("spec.rules[0].http.paths[1].path:")
    body = json.loads(json.dumps(dict(status.body)))
    assert [c["type"] for c in body["conditions"]] == ["Accepted", "ResolvedRefs"]
    assert all("lastTransitionTime" not in c for c in body["conditions"])


# --- the spec reader ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        None,
        "spec",
        [],
        {"rules": "x"},
        {"rules": [None]},
        {"rules": [{"http": {}}]},
        {"rules": [{"http": {"paths": [None, 1, "x", {"backend": []}]}}]},
        {"defaultBackend": {"service": {"name": None, "port": {"number": True}}}},
        {"defaultBackend": {"resource": "bucket"}},
        {"tls": [{"hosts": [1, None, "*.a.b"], "secretName": 5}]},
        {"ingressClassName": ["turnout"]},
        {"rules": [{"host": "\ud800", "http": {"paths": []}}]},
    ],
)
def test_the_reader_never_raises_and_refuses_what_the_api_server_would(spec: Any) -> None:
    parsed = parse_ingress(kind_object("Ingress", "i", spec=spec))
    assert not parsed.admitted
    assert all(p.message for p in parsed.problems)


# --- Prefix semantics against the Ingress spec --------------------------------------------------


def _element_wise_prefix(prefix: str, request_path: str) -> bool:
    """The Ingress API's definition: a match when the prefix's '/'-separated elements are the
    first elements of the request path's, a trailing '/' ignored on both sides."""
    p = prefix.strip("/").split("/") if prefix.strip("/") else []
    r = request_path[1:].split("/")
    if r and r[-1] == "":
        r = r[:-1]
    return r[: len(p)] == p


SEGMENTS = st.lists(st.sampled_from(["a", "b", "ab", "a.b"]), min_size=0, max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    prefix=SEGMENTS,
    trailing=st.booleans(),
    request=st.lists(st.sampled_from(["a", "b", "ab", "a.b", ""]), min_size=0, max_size=4),
)
def test_prefix_paths_match_element_wise(
    prefix: list[str], trailing: bool, request: list[str]
) -> None:
    # "//" inside a request path: the spec does not say what it means.
    assume("" not in request[:-1])
    prefix_path = "/" + "/".join(prefix) + ("/" if trailing and prefix else "")
    request_path = "/" + "/".join(request)
    result = compile_objects(
        [service("svc"), ingress("i", rule("p.example.com", path(prefix_path)))]
    )
    got = served_by(result, "p.example.com", request_path) == "default/svc"
    assert got == _element_wise_prefix(prefix_path, request_path), (prefix_path, request_path)


# --- fuzz ---------------------------------------------------------------------------------------

FIELD_NAMES = [
    "ingressClassName",
    "defaultBackend",
    "rules",
    "tls",
    "host",
    "http",
    "paths",
    "path",
    "pathType",
    "backend",
    "service",
    "resource",
    "name",
    "port",
    "number",
    "hosts",
    "secretName",
    "apiGroup",
    "kind",
]
STRINGS = st.one_of(
    st.sampled_from(
        [
            "/",
            "/a",
            "/a/",
            "a",
            "",
            "svc",
            "http",
            "turnout",
            "nginx",
            "Exact",
            "Prefix",
            "ImplementationSpecific",
            "fuzz.example.com",
            "*.fuzz.example.com",
            "anchor.example.com",
            "*",
            "10.0.0.1",
            "/re[",
            "/[a-z]{300}",
            "/x?y",
            "/x#y",
            "//",
            "/a/..",
            "cert",
            "\x00",
            "\t",
        ]
    ),
    st.text(max_size=8),
)
_, JSON = json_values(STRINGS, FIELD_NAMES)

TEMPLATE: dict[str, Any] = {
    "ingressClassName": "turnout",
    "defaultBackend": {"service": {"name": "svc", "port": {"name": "http"}}},
    "tls": [{"hosts": ["fuzz.example.com"], "secretName": "cert"}],
    "rules": [
        {
            "host": "fuzz.example.com",
            "http": {
                "paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend("svc")},
                    {"path": "/e", "pathType": "Exact", "backend": backend("svc")},
                    {"path": "/r/[0-9]+", "pathType": "ImplementationSpecific", "backend": {}},
                    {"path": "/s", "pathType": "ImplementationSpecific", "backend": backend("svc")},
                ]
            },
        },
        {"host": "*.fuzz.example.com", "http": {"paths": [path("/w/")]}},
        {"http": {"paths": [path("/hostless")]}},
    ],
}
TEMPLATE["rules"][0]["http"]["paths"][2]["backend"] = backend("svc")


mutated = mutator(
    JSON,
    FIELD_NAMES,
    typed_leaf(JSON, STRINGS, [0, 1, 80, 81, 65536, -1], keep_booleans=False),
)


ANCHOR = [
    service("svc"),
    tls_secret("cert"),
    ingress(
        "anchor",
        rule("anchor.example.com", path("/"), path("/api", path_type="Exact")),
        tls=[{"hosts": ["anchor.example.com"], "secretName": "cert"}],
        created="2020-01-01T00:00:00Z",
    ),
    kind_object(
        "HTTPProxy",
        "proxy",
        spec={
            "virtualhost": {"fqdn": "proxy.example.com"},
            "routes": [{"services": [{"name": "svc", "port": 80}]}],
        },
        created="2020-01-01T00:00:00Z",
    ),
]
BASELINE = compile_objects(ANCHOR)
ANCHOR_HOSTS = [
    (HTTP_LISTENER, "anchor.example.com"),
    (HTTPS_LISTENER, "anchor.example.com"),
    (HTTP_LISTENER, "proxy.example.com"),
]


def _assert_left_alone(result: CompileResult, host: str, listener: str) -> None:
    """The older objects keep what they serve. A newer Ingress of turnout's class may add paths
    to a host an older Ingress routes (Ingresses of one host merge, as every Ingress controller
    does), but never takes a path, the owner or the certificate; any other host is unchanged."""
    before, after = vhost(BASELINE, host, listener), vhost(result, host, listener)
    assert before is not None and after is not None
    if before.owner.kind != "Ingress":
        assert after == before
        return
    assert (after.owner, after.tls, after.policies) == (before.owner, before.tls, before.policies)
    kept = [r for r in after.routes if r.source.object.name == "anchor"]
    assert kept == list(before.routes)


def _assert_envoy_would_accept(result: CompileResult) -> None:
    for listener in result.graph.listeners:
        for vh in listener.virtual_hosts:
            for r in vh.routes:
                p = r.match.path
                assert p.value.startswith("/")
                assert not any(ord(c) < 0x20 for c in p.value)
                if p.kind is PathMatchKind.REGEX:
                    assert regex_error(p.value) is None
                if p.kind is PathMatchKind.SEGMENT_PREFIX:
                    # Envoy's path_separated_prefix: ^[^?#]+[^?#/]$
                    assert p.value and not p.value.endswith("/")
                    assert "?" not in p.value and "#" not in p.value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.one_of(JSON, *(mutations(mutated, TEMPLATE, depth) for depth in (1, 2, 3))),
    annotations=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(
                [
                    "kubernetes.io/ingress.class",
                    "kubernetes.io/ingress.allow-http",
                    "ingress.kubernetes.io/force-ssl-redirect",
                    "projectcontour.io/tls-cert-namespace",
                    "projectcontour.io/tls-minimum-protocol-version",
                ]
            ),
            st.sampled_from(["turnout", "nginx", "true", "false", "1.3", "", "default"]),
            max_size=3,
        ),
    ),
)
def test_any_ingress_compiles_and_leaves_other_hosts_alone(
    spec: Any, annotations: dict[str, str] | None
) -> None:
    fuzz = kind_object(
        "Ingress", "fuzz", spec=spec, created="2030-01-01T00:00:00Z", annotations=annotations
    )
    result = compile_objects([*ANCHOR, fuzz])

    names = {s.ref.name for s in result.statuses if s.ref.kind == "Ingress"}
    assert names in ({"anchor"}, {"anchor", "fuzz"})
    assert ("fuzz" in names) == ClassIndex.of(Snapshot.of([fuzz]), "turnout").selects(fuzz)
    for s in result.statuses:
        json.dumps(dict(s.body))
    for listener, host in ANCHOR_HOSTS:
        _assert_left_alone(result, host, listener)
    assert status_of(result, "anchor") == status_of(BASELINE, "anchor")
    _assert_envoy_would_accept(result)
    hosts = ["anchor.example.com", "fuzz.example.com", "a.fuzz.example.com", "other.example.com"]
    for host, p in itertools.product(hosts, ["/", "/e", "/r/1", "/w/x"]):
        for listener in (HTTP_LISTENER, HTTPS_LISTENER):
            evaluate(result.graph, make_request(host, p, listener=listener))


def test_fuzz_template_is_valid() -> None:
    """The mutation template must itself compile cleanly, or the fuzz explores only errors."""
    result = compile_objects([*ANCHOR, kind_object("Ingress", "t", spec=TEMPLATE)])
    assert [c["status"] for c in status_of(result, "t")["conditions"]] == ["True", "True"]
    assert served_by(result, "fuzz.example.com", "/r/12", HTTPS_LISTENER) == "default/svc"


def test_there_are_enough_fixtures() -> None:
    assert len([p for p in FIXTURES.iterdir() if (p / "input.yaml").is_file()]) >= 20

"""Bad input in core objects and YAML never raises out of a compile and never touches others."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.builders import kube_object
from turnout.app import compile_snapshot
from turnout.envoy.translate import translate
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import evaluate, make_request
from turnout.objects import KubeObject, Origin
from turnout.sources.parse import parse_text
from turnout.store import Snapshot


def obj(
    api_version: str,
    kind: str,
    name: str,
    body: dict[str, Any],
    ns: str = "default",
    created: str | None = None,
) -> KubeObject:
    return kube_object(api_version, kind, name, ns, created=created, origin=Origin("test"), **body)


def proxy(name: str, fqdn: str, service: str, created: str | None = None) -> KubeObject:
    return obj(
        "projectcontour.io/v1",
        "HTTPProxy",
        name,
        {
            "spec": {
                "virtualhost": {"fqdn": fqdn},
                "routes": [{"services": [{"name": service, "port": 80}]}],
            }
        },
        created=created,
    )


GOOD = [
    obj("v1", "Service", "good", {"spec": {"ports": [{"name": "http", "port": 80}]}}),
    obj(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "good-1",
        {
            "metadata": {
                "name": "good-1",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "good"},
            },
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["10.0.0.1"]}],
        },
    ),
    proxy("good", "good.example.com", "good"),
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "ports",
                    "port",
                    "name",
                    "targetPort",
                    "addresses",
                    "endpoints",
                    "ip",
                    "subsets",
                    "delegations",
                    "secretName",
                    "targetNamespaces",
                    "conditions",
                ]
            ),
            children,
            max_size=3,
        )
    ),
    max_leaves=12,
)


def _good_decision(snapshot: Snapshot) -> tuple[Any, ...]:
    result = compile_snapshot(snapshot)
    translate(result.graph)  # must never raise either
    decision = evaluate(result.graph, make_request("good.example.com", "/"))
    cluster = result.graph.cluster(decision.clusters[0][0]) if decision.clusters else None
    return decision.status, cluster.endpoints if cluster else None


BASELINE = _good_decision(Snapshot.of(GOOD))


@settings(max_examples=150, deadline=None)
@example(spec={"ports": 5}, kind=("v1", "Service", "spec"))
@example(
    spec={"ports": [{"port": 99999999999, "targetPort": 2**40}]}, kind=("v1", "Service", "spec")
)
@example(spec=[{"addresses": 7}], kind=("discovery.k8s.io/v1", "EndpointSlice", "endpoints"))
@example(
    spec=[{"addresses": ["x"], "conditions": 3}],
    kind=("discovery.k8s.io/v1", "EndpointSlice", "endpoints"),
)
@example(spec=3, kind=("v1", "Endpoints", "subsets"))
@given(
    spec=json_values,
    kind=st.sampled_from(
        [
            ("v1", "Service", "spec"),
            ("v1", "Endpoints", "subsets"),
            ("discovery.k8s.io/v1", "EndpointSlice", "endpoints"),
            ("discovery.k8s.io/v1", "EndpointSlice", "ports"),
            ("projectcontour.io/v1", "TLSCertificateDelegation", "spec"),
        ]
    ),
)
def test_malformed_core_objects_never_raise_nor_disturb_others(
    spec: Any, kind: tuple[str, str, str]
) -> None:
    api_version, k, field = kind
    bad = obj(
        api_version,
        k,
        "bad",
        {
            field: spec,
            "metadata": {
                "name": "bad",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "bad"},
            },
        },
    )
    other = proxy("other", "other.example.com", "bad")
    assert _good_decision(Snapshot.of([*GOOD, bad, other])) == BASELINE


def test_invalid_endpoint_addresses_and_ports_are_dropped() -> None:
    slice_ = obj(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "good-2",
        {
            "metadata": {
                "name": "good-2",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "good"},
            },
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["not-an-ip", "10.0.0.2", "fd00::1"]}],
        },
    )
    result = compile_snapshot(Snapshot.of([*GOOD, slice_]))
    endpoints = {(e.address, e.port) for e in result.graph.clusters[0].endpoints}
    assert endpoints == {("10.0.0.1", 8080), ("10.0.0.2", 8080), ("fd00::1", 8080)}


@pytest.mark.parametrize(
    "text, reason",
    [
        ("data: &a [*a]\n", "nested more than"),
        (
            "a: &a [1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n"
                for i in range(8)
            ),
            "expands to more than",
        ),
        ("a: " + "[" * 150 + "]" * 150 + "\n", "nested more than"),
    ],
)
def test_yaml_alias_bombs_and_deep_documents_are_refused(text: str, reason: str) -> None:
    result = parse_text(text, "bomb.yaml")
    assert result.failed and reason in result.problems[0].reason


def _owner(result: CompileResult, hostname: str) -> str:
    """The name of the object that owns the virtual host for `hostname`."""
    return next(
        v.owner.name
        for lst in result.graph.listeners
        for v in lst.virtual_hosts
        if v.hostname == hostname
    )


def test_ownership_compares_creation_timestamps_as_instants() -> None:
    # 09:30 at UTC-2 is 11:30Z: later than 10:00Z, so it must lose although it sorts first as text.
    early = proxy("early", "same.example.com", "good", created="2024-01-01T10:00:00Z")
    late = proxy("late", "same.example.com", "good", created="2024-01-01T09:30:00-02:00")
    result = compile_snapshot(Snapshot.of([*GOOD, late, early]))
    assert _owner(result, "same.example.com") == "early"


def test_unparsable_creation_timestamp_never_wins_and_is_reported() -> None:
    garbage = proxy("garbage", "same.example.com", "good", created="yesterday")
    fine = proxy("fine", "same.example.com", "good", created="2030-01-01T00:00:00Z")
    result = compile_snapshot(Snapshot.of([*GOOD, garbage, fine]))
    assert _owner(result, "same.example.com") == "fine"
    assert any("'yesterday' is not an RFC 3339" in p.reason for p in result.problems)


@pytest.mark.parametrize(
    "delegations", [5, [{"secretName": "cert", "targetNamespaces": 5}], ["x"], None]
)
def test_malformed_certificate_delegation_is_not_a_delegation(delegations: Any) -> None:
    delegation = obj(
        "projectcontour.io/v1",
        "TLSCertificateDelegation",
        "d",
        {"spec": {"delegations": delegations}},
        ns="certs",
    )
    tls_proxy = obj(
        "projectcontour.io/v1",
        "HTTPProxy",
        "secure",
        {
            "spec": {
                "virtualhost": {"fqdn": "secure.example.com", "tls": {"secretName": "certs/cert"}},
                "routes": [{"services": [{"name": "good", "port": 80}]}],
            }
        },
    )
    result = compile_snapshot(Snapshot.of([*GOOD, delegation, tls_proxy]))
    status = next(s for s in result.statuses if s.ref.name == "secure")
    reasons = {e["reason"] for c in status.body["conditions"] for e in c.get("errors", [])}
    assert "DelegationNotPermitted" in reasons
    assert _good_decision(Snapshot.of([*GOOD, delegation, tls_proxy])) == BASELINE

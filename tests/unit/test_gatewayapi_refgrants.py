"""ReferenceGrant (`dialects/gatewayapi/refgrants.py`): which cross-namespace references a grant
in the target's namespace permits, for both served versions, and that a removed grant permits
nothing at the next compile."""

from __future__ import annotations

from typing import Any

import pytest

from turnout.dialects.gatewayapi.refgrants import ReferenceGrants
from turnout.objects import KubeObject, freeze
from turnout.store import Snapshot

GROUP = "gateway.networking.k8s.io"


def grant(
    name: str,
    namespace: str,
    from_: list[dict[str, Any]],
    to: list[dict[str, Any]],
    version: str = "v1beta1",
) -> KubeObject:
    raw = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"from": from_, "to": to},
    }
    return KubeObject(f"{GROUP}/{version}", "ReferenceGrant", namespace, name, freeze(raw))


def from_routes(namespace: str = "apps", kind: str = "HTTPRoute") -> dict[str, Any]:
    return {"group": GROUP, "kind": kind, "namespace": namespace}


def permits(grants: ReferenceGrants, **kw: str) -> bool:
    ref = {
        "from_group": GROUP,
        "from_kind": "HTTPRoute",
        "from_namespace": "apps",
        "to_group": "",
        "to_kind": "Service",
        "to_namespace": "backends",
        "to_name": "web",
    }
    ref.update(kw)
    return grants.permits(**ref)


def grants_of(*objects: KubeObject) -> ReferenceGrants:
    return ReferenceGrants.from_snapshot(Snapshot.of(objects))


def test_same_namespace_needs_no_grant() -> None:
    assert permits(grants_of(), to_namespace="apps")


def test_cross_namespace_without_grant_is_refused() -> None:
    assert not permits(grants_of())


@pytest.mark.parametrize("version", ["v1beta1", "v1"])
def test_grant_for_all_services_of_the_namespace(version: str) -> None:
    g = grants_of(
        grant("g", "backends", [from_routes()], [{"group": "", "kind": "Service"}], version)
    )
    assert permits(g)
    assert permits(g, to_name="other")


def test_grant_lives_in_the_target_namespace() -> None:
    # A grant in the route's own namespace grants nothing.
    g = grants_of(grant("g", "apps", [from_routes()], [{"group": "", "kind": "Service"}]))
    assert not permits(g)


def test_grant_to_one_name_only() -> None:
    g = grants_of(
        grant("g", "backends", [from_routes()], [{"group": "", "kind": "Service", "name": "web"}])
    )
    assert permits(g, to_name="web")
    assert not permits(g, to_name="db")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("from_kind", "GRPCRoute"),
        ("from_namespace", "elsewhere"),
        ("from_group", "example.com"),
        ("to_kind", "Secret"),
        ("to_group", "example.com"),
    ],
)
def test_every_part_of_from_and_to_must_match(field: str, value: str) -> None:
    g = grants_of(grant("g", "backends", [from_routes()], [{"group": "", "kind": "Service"}]))
    assert permits(g)
    assert not permits(g, **{field: value})


def test_entries_are_ored() -> None:
    g = grants_of(
        grant(
            "g",
            "backends",
            [from_routes("a", "TCPRoute"), from_routes("b", "TLSRoute")],
            [{"group": "", "kind": "Secret"}, {"group": "core", "kind": "Service", "name": "web"}],
        )
    )
    assert permits(g, from_kind="TCPRoute", from_namespace="a")
    assert permits(g, from_kind="TLSRoute", from_namespace="b")
    assert not permits(g, from_kind="TCPRoute", from_namespace="b")
    assert permits(g, from_kind="TLSRoute", from_namespace="b", to_kind="Secret", to_name="any")
    # "core" is read as the core group on either side.
    assert permits(g, from_kind="TLSRoute", from_namespace="b", to_group="core")


@pytest.mark.parametrize(
    "spec",
    [
        None,
        "text",
        {"from": [from_routes()]},  # no `to`
        {"to": [{"group": "", "kind": "Service"}]},  # no `from`
        {"from": [{"group": GROUP, "kind": "HTTPRoute"}], "to": [{"group": "", "kind": "Service"}]},
        {"from": [from_routes()], "to": [{"group": "", "kind": "Service", "name": 5}]},
        {"from": [{**from_routes(), "group": 1}], "to": [{"group": "", "kind": "Service"}]},
        {"from": "everyone", "to": [{"group": "", "kind": "Service"}]},
    ],
)
def test_malformed_grants_grant_nothing(spec: Any) -> None:
    raw = {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "g", "namespace": "backends"},
        "spec": spec,
    }
    obj = KubeObject(f"{GROUP}/v1beta1", "ReferenceGrant", "backends", "g", freeze(raw))
    assert not permits(grants_of(obj))


def test_removing_the_grant_revokes_at_the_next_compile() -> None:
    service_grant = grant("g", "backends", [from_routes()], [{"group": "", "kind": "Service"}])
    assert permits(grants_of(service_grant))
    assert not permits(grants_of())

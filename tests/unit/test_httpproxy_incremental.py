"""The incremental HTTPProxy compile (issue 11): with the compile memo carried from the compile
before, each compile gives exactly what a fresh one gives, and what did not change is the very
same object (a change recompiles the roots that read it, and only those)."""

from __future__ import annotations

import base64
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.builders import from_dict, kube_object, secret, service, snapshot
from tests.cases.tcp_tls import LEAF, ROOT_CA
from tests.fixture_cases import CASES, case_options
from turnout.app import default_dialects
from turnout.compile_inputs import HTTP_LISTENER, CompileOptions
from turnout.dialects.httpproxy import HTTPProxyDialect
from turnout.dialects.httpproxy.problem import Problem
from turnout.dialects.httpproxy.recording import Changed, Trace, reached_of, statuses_of, units
from turnout.dialects.httpproxy.root_index import RootIndex, problems_by_proxy
from turnout.dialects.httpproxy.status_names import ROUTE_ERROR
from turnout.graph.build import CompileResult, build_graph
from turnout.graph.dialect import Dialect
from turnout.graph.memo import CompileMemo
from turnout.graph.model import DirectResponse, Forward, VirtualHost
from turnout.objects import KubeObject, thaw
from turnout.sources.parse import parse_text
from turnout.status.model import ObjectStatus, State
from turnout.store import Snapshot

API = "projectcontour.io/v1"


def proxy(name: str, spec: dict[str, Any], namespace: str = "default", **kw: Any) -> KubeObject:
    return kube_object(API, "HTTPProxy", name, namespace, spec=spec, **kw)


def root(
    name: str, fqdn: str, *, services: Sequence[str] = ("app",), created: str | None = None
) -> KubeObject:
    routes = [
        {"conditions": [{"prefix": f"/{s}"}], "services": [{"name": s, "port": 80}]}
        for s in services
    ]
    return proxy(name, {"virtualhost": {"fqdn": fqdn}, "routes": routes}, created=created)


def child(name: str, prefix: str, svc: str = "app") -> KubeObject:
    routes = [{"conditions": [{"prefix": prefix}], "services": [{"name": svc, "port": 80}]}]
    return proxy(name, {"routes": routes})


def includes(name: str, fqdn: str, *children: str, created: str | None = None) -> KubeObject:
    spec = {
        "virtualhost": {"fqdn": fqdn},
        "includes": [{"name": c, "conditions": [{"prefix": f"/{c}"}]} for c in children],
    }
    return proxy(name, spec, created=created)


class Carried:
    """Compiles snapshot after snapshot with one memo, checking each against a fresh compile."""

    def __init__(
        self, options: CompileOptions | None = None, dialects: Sequence[Dialect] | None = None
    ) -> None:
        self.memo = CompileMemo()
        self.options = options or CompileOptions()
        self.dialects = default_dialects().all if dialects is None else tuple(dialects)

    def compile(self, snap: Snapshot) -> CompileResult:
        carried = build_graph(snap, self.options, self.dialects, self.memo)
        fresh = build_graph(snap, self.options, self.dialects)
        assert carried == fresh
        return carried


def vhosts(result: CompileResult, listener: str = HTTP_LISTENER) -> dict[str, VirtualHost]:
    lst = next(x for x in result.graph.listeners if x.name == listener)
    return {v.name: v for v in lst.virtual_hosts}


def status(result: CompileResult, name: str) -> ObjectStatus:
    return next(s for s in result.statuses if s.ref.kind == "HTTPProxy" and s.ref.name == name)


def dialect_status(result: CompileResult, name: str) -> ObjectStatus:
    """The status the dialect made (before the graph stages folded findings into it)."""
    assert result.endpoint_basis is not None
    found = result.endpoint_basis.statuses
    return next(s for s in found if s.ref.kind == "HTTPProxy" and s.ref.name == name)


def test_a_change_to_one_root_leaves_the_others_the_very_same_objects() -> None:
    roots = [root(f"r{i}", f"r{i}.example.com", services=(f"s{i}",)) for i in range(5)]
    services = [service(f"s{i}") for i in range(5)]
    run = Carried()
    before = run.compile(snapshot(roots, services))
    changed = root("r2", "r2.example.com", services=("s2", "s3"))
    after = run.compile(snapshot(roots[:2], changed, roots[3:], services))
    old, new = vhosts(before), vhosts(after)
    for i in (0, 1, 3, 4):
        host = f"r{i}.example.com"
        assert new[host] is old[host]
        assert dialect_status(after, f"r{i}") is dialect_status(before, f"r{i}")
    assert new["r2.example.com"] is not old["r2.example.com"]
    assert len(new["r2.example.com"].routes) == 2


def test_a_change_to_an_included_child_recompiles_its_root_and_keeps_its_siblings() -> None:
    run = Carried()
    kids = [child(f"c{i}", f"/c{i}/x") for i in range(4)]
    objects = [includes("root", "a.example.com", "c0", "c1", "c2", "c3"), service("app")]
    before = run.compile(snapshot(objects, kids))
    after = run.compile(snapshot(objects, kids[:1], child("c1", "/c1/y"), kids[2:]))
    old, new = vhosts(before)["a.example.com"], vhosts(after)["a.example.com"]
    assert new is not old
    assert {r.match.path.value for r in new.routes} == {
        "/c0/c0/x",
        "/c1/c1/y",
        "/c2/c2/x",
        "/c3/c3/x",
    }
    kept = {r.match.path.value: r for r in old.routes}
    for r in new.routes:
        if r.source.object.name != "c1":
            assert r is kept[r.match.path.value]  # the siblings' subtrees were not walked again


def test_an_include_of_a_missing_proxy_recompiles_when_it_appears() -> None:
    run = Carried()
    objects = [includes("root", "a.example.com", "c0"), service("app")]
    before = run.compile(snapshot(objects))
    assert status(before, "root").state is State.INVALID
    after = run.compile(snapshot(objects, child("c0", "/x")))
    assert status(after, "root").state is State.VALID
    assert status(after, "c0").state is State.VALID
    assert len(vhosts(after)["a.example.com"].routes) == 1


def test_a_service_change_recompiles_the_roots_that_read_it() -> None:
    run = Carried()
    objects = [root("r0", "a.example.com"), root("r1", "b.example.com", services=("other",))]
    before = run.compile(snapshot(objects, service("other")))
    assert status(before, "r0").state is State.INVALID  # the Service is missing: a 503
    after = run.compile(snapshot(objects, service("other"), service("app")))
    assert status(after, "r0").state is State.VALID
    assert vhosts(after)["b.example.com"] is vhosts(before)["b.example.com"]
    moved = run.compile(snapshot(objects, service("other"), service("app", port=81)))
    assert status(moved, "r0").state is State.INVALID


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def tls_secret(name: str, namespace: str) -> KubeObject:
    data = {"tls.crt": _b64(LEAF.cert_pem), "tls.key": _b64(LEAF.key_pem)}
    return secret(name, namespace, data, secret_type="kubernetes.io/tls")


def delegation(to: str) -> KubeObject:
    spec = {"delegations": [{"secretName": "cert", "targetNamespaces": [to]}]}
    return kube_object(API, "TLSCertificateDelegation", "d", "certs", spec=spec)


def test_a_secret_or_delegation_change_recompiles_a_tls_root() -> None:
    run = Carried()
    spec = {
        "virtualhost": {"fqdn": "a.example.com", "tls": {"secretName": "certs/cert"}},
        "routes": [{"services": [{"name": "app", "port": 80}]}],
    }
    tls_root = proxy("r0", spec)
    base = [tls_root, service("app"), root("r1", "b.example.com")]
    assert status(run.compile(snapshot(base)), "r0").state is State.INVALID  # no Secret
    missing = run.compile(snapshot(base, tls_secret("cert", "certs")))
    assert "DelegationNotPermitted" in str(status(missing, "r0").conditions)
    served = run.compile(snapshot(base, tls_secret("cert", "certs"), delegation("default")))
    assert status(served, "r0").state is State.VALID
    assert served.graph.secrets
    revoked = run.compile(snapshot(base, tls_secret("cert", "certs"), delegation("other")))
    assert status(revoked, "r0").state is State.INVALID
    assert vhosts(revoked)["b.example.com"] is vhosts(served)["b.example.com"]


def test_ownership_moves_between_two_roots_claiming_one_fqdn() -> None:
    run = Carried()
    old = root("old", "a.example.com", created="2020-01-01T00:00:00Z")
    new = root("new", "a.example.com", services=("other",), created="2021-01-01T00:00:00Z")
    services = [service("app"), service("other")]
    first = run.compile(snapshot(old, new, services))
    assert vhosts(first)["a.example.com"].owner.name == "old"
    assert status(first, "new").state is State.INVALID
    second = run.compile(snapshot(new, services))
    assert vhosts(second)["a.example.com"].owner.name == "new"
    assert status(second, "new").state is State.VALID
    third = run.compile(snapshot(old, new, services))
    assert vhosts(third)["a.example.com"].owner.name == "old"


def test_an_orphan_becomes_included() -> None:
    run = Carried()
    objects = [child("c0", "/x"), service("app"), root("r0", "a.example.com")]
    assert status(run.compile(snapshot(objects)), "c0").state is State.ORPHANED
    linked = includes("r0", "a.example.com", "c0")
    after = run.compile(snapshot(objects[:2], linked))
    assert status(after, "c0").state is State.VALID
    again = run.compile(snapshot(objects))
    assert status(again, "c0").state is State.ORPHANED


def test_the_include_revisit_budget_is_the_same_with_the_memo_carried() -> None:
    # A diamond of diamonds: every path reaches the leaves again, so a small budget is spent.
    layers = [includes("root", "a.example.com", "m0", "m1")]
    layers += [proxy(f"m{i}", {"includes": [{"name": "n0"}, {"name": "n1"}]}) for i in range(2)]
    layers += [
        proxy(f"n{i}", {"includes": [{"name": "leaf", "conditions": [{"prefix": f"/n{i}"}]}]})
        for i in range(2)
    ]
    options = CompileOptions(max_include_revisits=6)
    run = Carried(options)
    objects = [*layers, service("app")]
    for leaf_routes in (1, 3, 1, 0, 2):
        spec = {
            "routes": [
                {"conditions": [{"prefix": f"/r{j}"}], "services": [{"name": "app", "port": 80}]}
                for j in range(leaf_routes)
            ]
        }
        run.compile(snapshot(objects, proxy("leaf", spec)))
    # The same subtree (m0's, second include) reached after more or less of the budget was
    # spent: kept, but its walk would now go over it, so it runs again to stop where a full walk
    # stops.
    leaf = proxy("leaf", {"routes": [{"services": [{"name": "app", "port": 80}]}]})
    solo = proxy("solo", {"routes": [{"services": [{"name": "app", "port": 80}]}]})
    outcomes = []
    for first in ("solo", "m1", "solo", "m1"):
        top = includes("root", "a.example.com", first, "m0")
        result = run.compile(snapshot(top, layers[1:], service("app"), leaf, solo))
        outcomes.append(status(result, "root").state)
    assert outcomes == [State.VALID, State.INVALID, State.VALID, State.INVALID]


# --- random changes over the HTTPProxy fixture cases -------------------------------------------

HTTPPROXY_CASES = [c for c in CASES if c.parent.name in ("httpproxy", "ownership")]


def _load(case: Path) -> list[KubeObject]:
    return list(parse_text((case / "input.yaml").read_text(), str(case / "input.yaml")).objects)


def _mutated(obj: KubeObject, rng: random.Random) -> KubeObject:
    """The object with a change a tenant would make: its routes or includes shortened,
    reversed or renamed, a Service port moved, or the same content as a new object."""
    raw = thaw(obj.raw)
    spec = raw.get("spec")
    if isinstance(spec, dict):
        field = rng.choice(("routes", "includes", "ports", "virtualhost", None))
        items = spec.get(field) if field else None
        if isinstance(items, list) and items:
            choice = rng.randrange(3)
            if choice == 0:
                spec[field] = items[:-1]
            elif choice == 1:
                spec[field] = list(reversed(items))
            elif isinstance(items[0], dict) and "port" in items[0]:
                items[0]["port"] = (
                    int(items[0]["port"]) + 1 if str(items[0]["port"]).isdigit() else 1
                )
            elif isinstance(items[0], dict) and "name" in items[0]:
                items[0]["name"] = str(items[0]["name"]) + "x"
        elif field == "virtualhost" and isinstance(spec.get("virtualhost"), dict):
            spec["virtualhost"].pop("tls", None)
    return from_dict(raw, obj.origin)


def _random_steps(objects: list[KubeObject], rng: random.Random, steps: int) -> list[Snapshot]:
    live = {o.ref: o for o in objects}
    gone: dict[Any, KubeObject] = {}
    out = [Snapshot.of(list(live.values()))]
    for _ in range(steps):
        action = rng.randrange(3)
        if action == 0 and live:
            ref = rng.choice(sorted(live, key=str))
            gone[ref] = live.pop(ref)
        elif action == 1 and gone:
            ref = rng.choice(sorted(gone, key=str))
            live[ref] = gone.pop(ref)
        elif live:
            ref = rng.choice(sorted(live, key=str))
            live[ref] = _mutated(live[ref], rng)
        out.append(Snapshot.of(list(live.values())))
    return out


@pytest.mark.parametrize("case", HTTPPROXY_CASES, ids=lambda c: f"{c.parent.name}/{c.name}")
def test_random_changes_over_a_fixture_give_what_a_fresh_compile_gives(case: Path) -> None:
    rng = random.Random(case.name)
    # The HTTPProxy dialect alone: it is the one under test, and the ownership cases' other
    # dialects are reused whole by the graph builder (not this module's subject).
    run = Carried(case_options(case), [HTTPProxyDialect()])
    for snap in _random_steps(_load(case), rng, 12):
        run.compile(snap)


# --- what the index of the roots' reads must find (`root_index.py`) ----------------------------


def test_problems_on_a_child_shared_by_two_roots_keep_the_compile_order_when_one_changes() -> None:
    # c and d include each other: the cycle is reported on c once per root, naming the root.
    cycle = [
        proxy("c", {"includes": [{"name": "d"}]}),
        proxy("d", {"includes": [{"name": "c"}]}),
        service("app"),
    ]
    run = Carried()
    a, b = includes("a", "a.example.com", "c"), includes("b", "b.example.com", "c")
    first = run.compile(snapshot(a, b, cycle))

    def roots_named() -> list[str]:
        errors = status(result, "c").conditions[0].errors
        return [e.message.split(": ")[1].split(" -> ")[0] for e in errors]

    result = first
    assert roots_named() == ["default/a", "default/b"]
    b2 = includes("b", "b.example.com", "c", "x")  # b changes; a is not compiled again
    result = run.compile(snapshot(a, b2, cycle))
    assert roots_named() == ["default/a", "default/b"]
    result = run.compile(snapshot(includes("a", "a.example.com", "c", "y"), b2, cycle))
    assert roots_named() == ["default/a", "default/b"]
    result = run.compile(snapshot(b2, cycle))
    assert roots_named() == ["default/b"]


def test_a_service_read_under_a_shared_child_recompiles_every_root_including_it() -> None:
    run = Carried()
    objects = [
        includes("a", "a.example.com", "c"),
        includes("b", "b.example.com", "c"),
        root("r", "r.example.com", services=("other",)),
        child("c", "/x", svc="late"),
        service("other"),
    ]
    before = run.compile(snapshot(objects))
    assert status(before, "c").state is State.INVALID  # "late" is missing: a 503
    after = run.compile(snapshot(objects, service("late")))
    assert status(after, "c").state is State.VALID
    for host in ("a.example.com", "b.example.com"):
        assert vhosts(after)[host] is not vhosts(before)[host]
        assert vhosts(after)[host].routes[0].action != vhosts(before)[host].routes[0].action
    assert vhosts(after)["r.example.com"] is vhosts(before)["r.example.com"]


def test_a_child_turning_into_a_root_is_seen_by_the_roots_including_it() -> None:
    run = Carried()
    objects = [includes("a", "a.example.com", "c"), service("app")]
    before = run.compile(snapshot(objects, child("c", "/x")))
    assert status(before, "a").state is State.VALID
    promoted = proxy("c", {"virtualhost": {"fqdn": "c.example.com"}, **child("c", "/x").spec})
    after = run.compile(snapshot(objects, promoted))
    assert "RootIncludesRoot" in str(status(after, "a").conditions)
    assert set(vhosts(after)) == {"a.example.com", "c.example.com"}
    assert [r.action for r in vhosts(after)["a.example.com"].routes] == [DirectResponse(502)]
    again = run.compile(snapshot(objects, child("c", "/x")))
    assert status(again, "a").state is State.VALID
    assert set(vhosts(again)) == {"a.example.com"}
    assert isinstance(vhosts(again)["a.example.com"].routes[0].action, Forward)


def test_a_child_is_orphaned_only_when_the_last_root_including_it_lets_go() -> None:
    run = Carried()
    kid = child("c", "/x")
    a, b = includes("a", "a.example.com", "c"), includes("b", "b.example.com", "c")
    plain_a, plain_b = root("a", "a.example.com"), root("b", "b.example.com")
    assert status(run.compile(snapshot(a, b, kid, service("app"))), "c").state is State.VALID
    assert status(run.compile(snapshot(plain_a, b, kid, service("app"))), "c").state is State.VALID
    gone = run.compile(snapshot(plain_a, plain_b, kid, service("app")))
    assert status(gone, "c").state is State.ORPHANED
    back = run.compile(snapshot(plain_a, b, kid, service("app")))
    assert status(back, "c").state is State.VALID


def ingress(host: str, class_name: str, created: str) -> KubeObject:
    rule = {
        "host": host,
        "http": {
            "paths": [
                {
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": "app", "port": {"number": 80}}},
                }
            ]
        },
    }
    spec = {"ingressClassName": class_name, "rules": [rule]}
    return kube_object("networking.k8s.io/v1", "Ingress", "ing", spec=spec, created=created)


def test_a_hostname_taken_by_another_dialect_without_its_object_changing_recompiles_the_root() -> (
    None
):
    # The Ingress (older) becomes turnout's when its IngressClass appears: its claim, and the
    # owner of the fqdn, change although neither it nor anything the root read did.
    run = Carried()
    proxy_root = root("r", "a.example.com", created="2021-01-01T00:00:00Z")
    objects = [proxy_root, ingress("a.example.com", "other", "2020-01-01T00:00:00Z")]
    objects += [service("app"), root("s", "s.example.com")]
    ours = kube_object(
        "networking.k8s.io/v1",
        "IngressClass",
        "other",
        spec={"controller": "turnout.dev/ingress-controller"},
    )
    first = run.compile(snapshot(objects))
    assert vhosts(first)["a.example.com"].owner.kind == "HTTPProxy"
    taken = run.compile(snapshot(objects, ours))
    assert vhosts(taken)["a.example.com"].owner.kind == "Ingress"
    assert "DuplicateVhost" in str(status(taken, "r").conditions)
    assert vhosts(taken)["s.example.com"] is vhosts(first)["s.example.com"]
    back = run.compile(snapshot(objects))
    assert vhosts(back)["a.example.com"].owner.kind == "HTTPProxy"
    assert status(back, "r").state is State.VALID


def test_a_newer_root_for_a_taken_fqdn_and_its_owners_edits() -> None:
    run = Carried()
    old = root("old", "a.example.com", created="2020-01-01T00:00:00Z")
    new = root("new", "a.example.com", services=("other",), created="2021-01-01T00:00:00Z")
    services = [service("app"), service("other")]
    run.compile(snapshot(old, services))
    second = run.compile(snapshot(old, new, services))
    assert "DuplicateVhost" in str(status(second, "new").conditions)
    edited = root("old", "a.example.com", services=("app", "other"), created="2020-01-01T00:00:00Z")
    third = run.compile(snapshot(edited, new, services))  # the owner is a new object
    assert len(vhosts(third)["a.example.com"].routes) == 2
    assert "DuplicateVhost" in str(status(third, "new").conditions)
    younger = root("old", "a.example.com", created="2022-01-01T00:00:00Z")
    fourth = run.compile(snapshot(younger, new, services))  # the owner is now the other root
    assert vhosts(fourth)["a.example.com"].owner.name == "new"
    assert "DuplicateVhost" in str(status(fourth, "old").conditions)
    assert status(fourth, "new").state is State.VALID


def test_a_proxy_changing_class_leaves_and_rejoins_the_roots_that_include_it() -> None:
    run = Carried()
    objects = [includes("a", "a.example.com", "c"), service("app")]
    before = run.compile(snapshot(objects, child("c", "/x")))
    assert status(before, "a").state is State.VALID
    spec = child("c", "/x").spec
    other = proxy("c", {**spec, "ingressClassName": "other"})
    after = run.compile(snapshot(objects, other))
    assert "IncludeNotFound" in str(status(after, "a").conditions)
    assert [i.ref.name for i in after.ignored if i.ref.kind == "HTTPProxy"] == ["c"]
    again = run.compile(snapshot(objects, child("c", "/x")))
    assert status(again, "a").state is State.VALID
    assert not [i for i in again.ignored if i.ref.kind == "HTTPProxy"]


def test_roots_added_and_removed_keep_the_key_order_of_hosts_and_statuses() -> None:
    run = Carried()
    services = [service("app")]
    roots = {name: root(name, f"{name}.example.com") for name in ("b", "d", "f")}
    run.compile(snapshot(list(roots.values()), services))
    for name in ("a", "e", "g"):
        roots[name] = root(name, f"{name}.example.com")
        result = run.compile(snapshot(list(roots.values()), services))
        names = [s.ref.name for s in result.statuses if s.ref.kind == "HTTPProxy"]
        assert names == sorted(roots)
    del roots["d"]
    result = run.compile(snapshot(list(roots.values()), services))
    assert sorted(vhosts(result)) == [f"{n}.example.com" for n in sorted(roots)]


def test_a_root_gaining_and_losing_its_https_host_keeps_the_others_in_place() -> None:
    run = Carried()
    plain = [root(n, f"{n}.example.com") for n in ("a", "c")]
    spec = {
        "virtualhost": {"fqdn": "b.example.com", "tls": {"secretName": "cert"}},
        "routes": [{"services": [{"name": "app", "port": 80}]}],
    }
    objects = [*plain, service("app"), tls_secret("cert", "default")]
    first = run.compile(snapshot(objects, root("b", "b.example.com")))
    tls = run.compile(snapshot(objects, proxy("b", spec)))
    assert list(vhosts(tls)) == ["a.example.com", "b.example.com", "c.example.com"]
    assert list(vhosts(tls, "ingress_https")) == ["b.example.com"]
    assert vhosts(tls)["c.example.com"] is vhosts(first)["c.example.com"]
    back = run.compile(snapshot(objects, root("b", "b.example.com")))
    assert list(vhosts(back)) == ["a.example.com", "b.example.com", "c.example.com"]
    assert "ingress_https" not in {lst.name for lst in back.graph.listeners}


# --- one host including a tree: the root's trace kept in parts ---------------------------------


class Tree:
    """A root including groups that include children (each group under its own prefix), with
    what makes a root's parts interesting: a child two groups include (its reads counted twice
    in the root), children with a bad route (problems on them, in walk order), missing children
    (a 502 and `IncludeNotFound` on the group), two groups including each other (a cycle),
    children reading shared Services or their own (a cluster that leaves with the child's last
    route), and the root's own routes."""

    def __init__(self, rng: random.Random, groups: int = 4, children: int = 24) -> None:
        self.rng = rng
        self.members = {
            f"g{g}": [f"c{i}" for i in range(children) if i % groups == g] for g in range(groups)
        }
        self.children = {f"c{i}": self.child(f"c{i}") for i in range(children)}
        self.services = {f"s{i}" for i in range(6)} | set(self.children)
        self.cycle = False
        self.own = "/own"

    def child(self, name: str) -> KubeObject:
        rng = self.rng
        routes: list[dict[str, Any]] = [
            {
                "conditions": [{"prefix": f"/{name}/r{r}"}],
                # Shared Services, or the child's own: its cluster leaves with its routes.
                "services": [{"name": rng.choice((f"s{rng.randrange(8)}", name)), "port": 80}],
            }
            for r in range(rng.randrange(1, 4))
        ]
        if rng.random() < 0.15:
            routes.append(
                {"conditions": [{"prefix": "no-slash"}], "services": routes[0]["services"]}
            )
        return proxy(name, {"routes": routes})

    def group(self, name: str) -> KubeObject:
        incs = [{"name": c, "conditions": [{"prefix": f"/{c}"}]} for c in self.members[name]]
        if self.cycle and name in ("g0", "g1"):
            incs.append({"name": "g1" if name == "g0" else "g0", "conditions": [{"prefix": "/x"}]})
        return proxy(name, {"includes": incs})

    def objects(self) -> list[KubeObject]:
        spec = {
            "virtualhost": {"fqdn": "tree.example.com"},
            "includes": [{"name": g, "conditions": [{"prefix": f"/{g}"}]} for g in self.members],
            "routes": [
                {"conditions": [{"prefix": self.own}], "services": [{"name": "s0", "port": 80}]}
            ],
        }
        out = [proxy("root", spec), *(self.group(g) for g in self.members)]
        out += self.children.values()
        return out + [service(s) for s in sorted(self.services)]

    def step(self) -> str:
        rng = self.rng
        roll = rng.random()
        name = rng.choice(sorted(self.children))
        if roll < 0.45:
            self.children[name] = self.child(name)
            return f"change {name}"
        if roll < 0.55:
            del self.children[name]
            return f"remove {name}"
        if roll < 0.65:
            gone = sorted(n for ns in self.members.values() for n in ns if n not in self.children)
            if gone:
                self.children[gone[0]] = self.child(gone[0])
                return f"restore {gone[0]}"
            return "nothing"
        if roll < 0.75:
            group = rng.choice(sorted(self.members))
            if name not in self.members[group]:
                self.members[group].append(name)  # shared by two groups, or moved back
            else:
                self.members[group].remove(name)
            return f"membership {group} {name}"
        if roll < 0.85:
            self.services ^= {f"s{rng.randrange(8)}"}
            return "service"
        if roll < 0.92:
            self.cycle = not self.cycle
            return "cycle"
        self.own = rng.choice(("/own", "/g0", "/own2"))  # may replace a group's route space
        return "root"


@pytest.mark.parametrize("seed", range(4))
def test_a_big_include_tree_changed_at_random_gives_what_a_fresh_compile_gives(seed: int) -> None:
    rng = random.Random(seed)
    tree = Tree(rng)
    run = Carried()  # asserts every compile equals a fresh one
    before = run.compile(snapshot(tree.objects()))
    kept = 0
    for _ in range(30):
        what = tree.step()
        after = run.compile(snapshot(tree.objects()))
        old_host, new_host = vhosts(before)["tree.example.com"], vhosts(after)["tree.example.com"]
        # A change to one child leaves the other children's routes the very same objects
        # (a group's 502s for a missing child are made again when the group is walked again).
        if what.startswith("change"):
            old = {(r.source.object.name, r.source.field, r.match): r for r in old_host.routes}
            owner = what.split()[1]
            same = [r for r in new_host.routes if r.source.object.name[0] == "c"]
            kept += all(
                old.get((r.source.object.name, r.source.field, r.match)) is r
                for r in same
                if r.source.object.name != owner
            )
        before = after
    assert kept  # the root was patched, not rebuilt


def test_a_trace_in_parts_reads_and_reports_as_one_merged_trace() -> None:
    # A root's trace keeps its subtrees' traces as parts: its problems come out in the order,
    # and its reads are those, of a trace that merged them.
    rng = random.Random(3)
    keys = [("default", f"p{i}") for i in range(6)]
    problems = [Problem(ROUTE_ERROR, "R", f"m{i}") for i in range(4)]
    for _ in range(200):
        flat, parts = Trace(), Trace(parts=[])
        for _ in range(rng.randrange(8)):
            sub = Trace()
            for _ in range(rng.randrange(4)):
                sub.statuses[(rng.choice(keys), rng.choice(problems))] = None
                sub.proxies.add(rng.choice(keys))
                sub.reached.add(rng.choice(keys))
            mine = [(rng.choice(keys[:2]), rng.choice(problems)) for _ in range(rng.randrange(3))]
            for own in (flat, parts):  # the root's own problems between its subtrees'
                own.statuses.update(dict.fromkeys(mine))
                own.merge(sub)
        assert list(statuses_of(parts)) == list(flat.statuses)
        assert problems_by_proxy(parts) == problems_by_proxy(flat)
        assert reached_of(parts) == flat.reached
        assert set().union(*(u.proxies for u in units(parts))) == flat.proxies


def test_the_index_finds_every_reader_as_readers_come_and_go() -> None:
    # One reader is kept as a 1-tuple, two or more as a set (memory): the roots a change
    # affects are the same either way, as readers are added, replaced and removed.
    app, db = ("default", "app"), ("default", "db")
    a, b, c = ("default", "a"), ("default", "b"), ("default", "c")
    changed = Changed(frozenset(), frozenset({app}), False, False)
    index = RootIndex()
    for root in (a, b, c):
        index.add(root, Trace(services={app}), {})
    assert index.affected(changed, {}) == {a, b, c}
    index.remove(b, Trace(services={app}), {})
    index.replace(c, (Trace(services={app}), {}), (Trace(services={db}), {}))
    assert index.affected(changed, {}) == {a}
    index.add(b, Trace(services={app, db}), {})
    assert index.affected(changed, {}) == {a, b}
    index.remove(a, Trace(services={app}), {})
    index.remove(b, Trace(services={app, db}), {})
    assert index.affected(changed, {}) == set()
    assert index.services == {db: (c,)}


def test_a_ca_secret_read_for_a_child_shared_by_two_roots_recompiles_both() -> None:
    """The second root reaching a validated upstream reuses the first one's answer within the
    compile; it must still be recorded as reading Secrets, so removing the CA drops the route
    from both hosts, as a fresh compile does."""
    ca = secret("backend-ca", "default", {"ca.crt": _b64(ROOT_CA.cert_pem)})
    validated = {
        "name": "backend",
        "port": 443,
        "protocol": "tls",
        "validation": {"caSecret": "backend-ca", "subjectName": "backend.example.com"},
    }
    shared = proxy("shared", {"routes": [{"services": [validated]}]})
    roots = [includes(f"r{i}", f"r{i}.example.com", "shared") for i in range(2)]
    objects = [*roots, shared, service("backend", port=443)]
    run = Carried()
    served = run.compile(snapshot(objects, ca))
    assert all(isinstance(r.action, Forward) for v in vhosts(served).values() for r in v.routes)
    removed = run.compile(snapshot(objects))  # Carried compares each with a fresh compile
    assert status(removed, "shared").state is State.INVALID

"""The fixture cases of every dialect, run through `turnout serve --kubernetes` against the fake
API server: each case's objects are created through the official `kubernetes` client (its
dynamic client, which discovers the kinds as against a real cluster), the statuses turnout
writes are read back from the objects and compared with what file mode computes for the same
objects; then one object per case is updated and one deleted through the API, with a watch drop
and a 410 between the changes, and the statuses must follow.

**The reference is file mode on the objects as the API server holds them**: the objects are
listed back through the client (without `status`, `managedFields` and `resourceVersion`) and
compiled by `turnout.app.compile_snapshot` with `app.compile_options` of the very flags the
`serve --kubernetes` child runs with (so `classless_ingress_is_ours=False`). The API server
stamps `creationTimestamp`, `uid` and `generation` itself, as a real one does, so "older wins"
and `observedGeneration` are decided on its values in both modes.

**Compared**: the whole status of every object, ignoring `lastTransitionTime` and Route's
`lastProcessTime` (a writer's stamps). Gateway API `parents` entries of other controllers are
the ones the object had before turnout ran (set through the status subresource), followed by
turnout's. An object file mode gives no status must have none (or only the one it was given).

**`Programmed`** (Gateways and their listeners) depends on an Envoy ACK. The child runs with
`--no-envoy`, so it is compared separately: it is left out of both sides, and every Gateway
turnout accepts must carry a `Programmed` condition that is not `True` (no Envoy acknowledged
anything). The Envoy-backed path is covered by `test_kubernetes_status.py`.

**Cases**: a sample per dialect, chosen for class selection, cross-namespace references,
orphans, delegation, ownership and preset foreign status (`CASES`; about 50 s in all). One
`serve` runs the cases in turn (the previous case's objects deleted first). Cases with an
`options.yaml` are left out (one `serve` runs with one set of flags) and so are those using API
versions the fake does not serve (TLSRoute `v1alpha2`, IngressRoute `v1` and `v1alpha1`).
`TURNOUT_KUBE_FIXTURES=all` loads every other case instead (load and compare only; about 15
minutes). A Secret's `stringData` is sent as `data`, as a real API server stores it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, dynamic

from tests.e2e.harness import free_port
from tests.e2e.serve import stop_serve
from tests.fake_apiserver import BUILTIN, CRDS, FakeApiServer
from tests.fixture_cases import FIXTURES
from turnout.app import compile_options, compile_snapshot
from turnout.cli import build_parser, serve_config
from turnout.compile_inputs import DEFAULT_GATEWAY_CONTROLLER_NAME as OURS
from turnout.objects import DEFAULT_NAMESPACE
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

Obj = dict[str, Any]
VOLATILE = frozenset({"lastTransitionTime", "lastProcessTime"})
STATUS_KINDS = [r for r in (*BUILTIN, *CRDS) if r.status]
ALL_KINDS = [r for r in (*BUILTIN, *CRDS) if r.kind != "Lease"]


@dataclass(frozen=True)
class Change:
    """One update (a JSON merge patch on the object) and one deletion, through the API."""

    update: tuple[str, str, str, Obj]  # kind, namespace, name, patch
    delete: tuple[str, str, str]  # kind, namespace, name


WEB_MISSING = {"name": "no-such-service", "port": 80}
OTHER_PREFIX = {"match": "/other", "services": [{"name": "blog", "port": 80}]}
SEED002_ROUTES = [
    {"pathPrefix": "/", "upstreams": [{"serviceName": "www", "servicePort": 8080}]},
    {"pathPrefix": "/ticker", "upstreams": [{"serviceName": "tickersvc", "servicePort": 80}]},
    {"pathPrefix": "/gone", "upstreams": [{"serviceName": "gone", "servicePort": 80}]},
]
GONE_BACKEND = {"service": {"name": "gone", "port": {"number": 80}}}
GONE_RULE = {
    "host": "field.example.com",
    "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": GONE_BACKEND}]},
}
# Per case: the change made after the case's statuses were compared (None: load only).
CASES: dict[str, Change | None] = {
    "httpproxy/basic-root": None,
    "httpproxy/include-across-namespaces": Change(
        ("HTTPProxy", "marketing", "blog", {"spec": {"routes": [{"services": [WEB_MISSING]}]}}),
        ("HTTPProxy", "marketing", "blog"),
    ),
    "httpproxy/orphaned": None,
    "httpproxy/class-other-class-frees-host": None,
    "ingressroute/delegation-across-namespaces": Change(
        ("IngressRoute", "marketing", "blog", {"spec": {"routes": [OTHER_PREFIX]}}),
        ("IngressRoute", "marketing", "blog"),
    ),
    "ingressroute/seed000-orphaned": None,
    "route/seed002-example": Change(
        ("Route", "finance", "finance-route", {"spec": {"routes": SEED002_ROUTES}}),
        ("Service", "finance", "tickersvc"),
    ),
    "route/service-missing": None,
    "ingress/class-default": None,
    "ingress/class-annotation": Change(
        ("Ingress", "default", "by-field", {"spec": {"rules": [GONE_RULE]}}),
        ("Service", "default", "svc"),
    ),
    "ingress/tls-secret": None,
    "routegroup/class-annotation": None,
    "routegroup/missing-backend-reference": Change(
        ("RouteGroup", "shop", "shop", {"spec": {"defaultBackends": [{"backendName": "web"}]}}),
        ("Service", "shop", "web"),
    ),
    "routegroup/merge-routegroups-on-host": None,
    "gatewayapi/route-status-generation-and-other-controllers": Change(
        (
            "HTTPRoute",
            "app",
            "web",
            {"spec": {"parentRefs": [{"name": "gw"}]}},
        ),
        ("Gateway", "app", "gw"),
    ),
    "gatewayapi/listener-conflicts-within-gateway": None,
    "gatewayapi/allowed-routes-namespaces": None,
}

UNSERVED = (
    "gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute",
    "contour.heptio.com/v1\n",
    "contour.heptio.com/v1alpha1\nkind: IngressRoute",
)


def every_case() -> list[str]:
    """`TURNOUT_KUBE_FIXTURES=all`: every case that one `serve` can run (load only)."""
    out = []
    for case in sorted(FIXTURES.glob("*/*")):
        text = (case / "input.yaml").read_text() if (case / "input.yaml").is_file() else ""
        if text and not (case / "options.yaml").exists() and not any(u in text for u in UNSERVED):
            out.append(f"{case.parent.name}/{case.name}")
    return out


RUN = every_case() if os.environ.get("TURNOUT_KUBE_FIXTURES") == "all" else sorted(CASES)


def case_objects(case: str) -> list[Obj]:
    """The case's objects as written (the items of a `List` on their own)."""
    out: list[Obj] = []
    for doc in yaml.safe_load_all((FIXTURES / case / "input.yaml").read_text()):
        if doc:
            out.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return out


def as_stored(obj: Obj) -> Obj:
    """A Secret's `stringData` merged into `data`, base64-encoded: what a real API server
    stores and returns (`stringData` is write-only); the fake keeps it as written."""
    if obj.get("kind") != "Secret" or "stringData" not in obj:
        return obj
    encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in obj["stringData"].items()}
    out = {k: v for k, v in obj.items() if k != "stringData"}
    out["data"] = {**(obj.get("data") or {}), **encoded}
    return out


class Api:
    """The fake API server through the official client's dynamic client."""

    def __init__(self, fake: FakeApiServer) -> None:
        config = client.Configuration()
        config.host = fake.url
        config.api_key = {"authorization": f"Bearer {fake.token}"}
        self.dyn = dynamic.DynamicClient(client.ApiClient(config))

    def kind(self, api_version: str, kind: str) -> Any:
        return self.dyn.resources.get(api_version=api_version, kind=kind)

    def by_kind(self, kind: str) -> Any:
        (res,) = [r for r in ALL_KINDS if r.kind == kind and r.group != "contour.heptio.com"] or [
            r for r in ALL_KINDS if r.kind == kind
        ]
        return self.kind(res.group_version, kind)

    def create(self, obj: Obj) -> None:
        obj = as_stored(obj)
        meta = obj.setdefault("metadata", {})
        res = self.kind(obj["apiVersion"], obj["kind"])
        if res.namespaced:
            meta.setdefault("namespace", "default")
        ns = meta.get("namespace") if res.namespaced else None
        res.create(body={k: v for k, v in obj.items() if k != "status"}, namespace=ns)
        if "status" in obj and "status" in res.subresources:
            res.subresources["status"].patch(
                body={"status": obj["status"]},
                name=meta["name"],
                namespace=ns,
                content_type="application/merge-patch+json",
            )

    def listed(self) -> list[Obj]:
        items: list[Obj] = []
        for r in ALL_KINDS:
            for item in self.kind(r.group_version, r.kind).get().to_dict()["items"]:
                items.append({"apiVersion": r.group_version, "kind": r.kind, **item})
        return items

    def clear(self) -> None:
        for obj in self.listed():
            meta = obj["metadata"]
            res = self.kind(obj["apiVersion"], obj["kind"])
            res.delete(name=meta["name"], namespace=meta.get("namespace"))


def comparable(value: Any) -> Any:
    """`value` as JSON without the writer's stamps and without `Programmed` conditions (see
    the module docstring)."""
    if isinstance(value, dict):
        out = {k: comparable(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(out.get("conditions"), list):
            out["conditions"] = [c for c in out["conditions"] if c.get("type") != "Programmed"]
        return out
    if isinstance(value, list | tuple):
        return [comparable(v) for v in value]
    return value


def key_of(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    # A cluster-scoped object's ref has the default namespace (turnout's convention).
    return (obj["kind"], meta.get("namespace") or DEFAULT_NAMESPACE, meta["name"])


def file_mode(objects: list[Obj], argv: list[str]) -> dict[tuple[str, str, str], Any]:
    """What file mode computes for `objects` with the compile options of `argv`."""
    bare = [{k: v for k, v in o.items() if k != "status"} for o in objects]
    for o in bare:
        o["metadata"] = {
            k: v for k, v in o["metadata"].items() if k not in ("managedFields", "resourceVersion")
        }
    # Key order kept: problems are reported in the order the fields come.
    parsed = parse_text(yaml.safe_dump_all(bare, sort_keys=False), "from-the-api-server.yaml")
    assert not parsed.problems, parsed.problems
    options = compile_options(serve_config(build_parser().parse_args(argv)))
    result = compile_snapshot(Snapshot.of(parsed.objects), options)
    return {
        (s.ref.kind, s.ref.namespace, s.ref.name): json.loads(json.dumps(s.body, default=list))
        for s in result.statuses
    }


def expected_status(computed: Any, before: Any) -> Any:
    """What the object should say: file mode's status, with the Gateway API entries of other
    controllers the object had before (`before`: the status it was created with). Without a
    status from file mode, the object keeps what it had but turnout's own shared entries (the
    writer takes them out of an object it gave a status before; in the sample, the only object
    created with one of turnout's entries is given a status first)."""
    if computed is None:
        if not before:
            return None
        return comparable({k: without_ours(v) for k, v in before.items()})
    out = dict(computed)
    for shared in ("parents", "ancestors"):
        if shared in out:
            ours = [e for e in out[shared] if e.get("controllerName") == OURS]
            out[shared] = without_ours((before or {}).get(shared, [])) + ours
    return comparable(out)


def without_ours(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [e for e in value if not (isinstance(e, dict) and e.get("controllerName") == OURS)]


def mismatches(api: Api, argv: list[str], preset: dict[tuple[str, str, str], Any]) -> list[str]:
    objects = api.listed()
    computed = file_mode(objects, argv)
    out = []
    for obj in objects:
        key = key_of(obj)
        if key[0] not in {r.kind for r in STATUS_KINDS}:
            continue
        want = expected_status(computed.get(key), preset.get(key))
        got = comparable(obj.get("status"))
        if want != got:
            out.append(f"{'/'.join(key)}:\n  file mode: {want}\n  kubernetes: {got}")
    return out


def settle(api: Api, argv: list[str], preset: dict[tuple[str, str, str], Any]) -> None:
    """Until the statuses match file mode, and still do a second later (an object that must
    have none has had the time to get one)."""
    deadline = time.monotonic() + 20
    while found := mismatches(api, argv, preset):
        assert time.monotonic() < deadline, "statuses differ from file mode:\n" + "\n".join(found)
        time.sleep(0.2)
    time.sleep(1.0)
    found = mismatches(api, argv, preset)
    assert not found, "statuses differ from file mode:\n" + "\n".join(found)


def gateways_not_programmed(api: Api) -> None:
    for gw in api.by_kind("Gateway").get().to_dict()["items"]:
        conditions = {c["type"]: c for c in (gw.get("status") or {}).get("conditions", [])}
        if conditions.get("Accepted", {}).get("status") == "True":
            assert conditions["Programmed"]["status"] != "True", gw["status"]


@dataclass(frozen=True)
class Running:
    fake: FakeApiServer
    api: Api
    argv: list[str]  # serve's flags, for the compile options of file mode


def admin_up(admin: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{admin}/metrics", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    with FakeApiServer(bookmark_interval=0.5) as fake, tempfile.TemporaryDirectory() as tmp:
        admin = free_port()
        argv = ["serve", "--kubernetes", "--kubeconfig", str(fake.kubeconfig(Path(tmp) / "kc"))]
        for flag in ("--http-port", "--https-port", "--xds-port", "--envoy-admin-port"):
            argv += [flag, str(free_port())]
        argv += ["--admin-port", str(admin), "--state-dir", tmp, "--no-demo-backends"]
        argv += ["--no-envoy", "--no-leader-elect", "--log-level", "warning"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnout", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            eventually(lambda: proc.poll() is not None or admin_up(admin), 60)
            assert proc.poll() is None, proc.communicate()[0].decode()
            yield Running(fake, Api(fake), argv)
        finally:
            output = stop_serve(proc)
        assert proc.returncode == 0, output


def eventually(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not reached in {timeout} s"
        time.sleep(0.1)


def load(running: Running, case: str) -> dict[tuple[str, str, str], Any]:
    """Clears the API server of the previous case, creates this one's objects (in the order
    of the file, so that creation times order them as written); returns the statuses they were
    created with."""
    running.api.clear()
    preset = {}
    for obj in case_objects(case):
        running.api.create(obj)
        if "status" in obj:
            preset[key_of(obj)] = obj["status"]
    return preset


def patch(api: Api, change: tuple[str, str, str, Obj]) -> None:
    kind, ns, name, body = change
    api.by_kind(kind).patch(
        body=body, name=name, namespace=ns, content_type="application/merge-patch+json"
    )


@pytest.mark.parametrize("case", RUN)
def test_statuses_match_file_mode(running: Running, case: str) -> None:
    preset = load(running, case)
    settle(running.api, running.argv, preset)
    gateways_not_programmed(running.api)
    change = CASES.get(case)
    if change is None:
        return
    before = file_mode(running.api.listed(), running.argv)
    patch(running.api, change.update)
    # The watches cut right after the change: it must arrive through the resumed watch.
    assert running.fake.drop_watches(abort=True) > 0
    settle(running.api, running.argv, preset)
    updated = file_mode(running.api.listed(), running.argv)
    assert updated != before, "the update changes no status: not a test of it"
    # Deleted while the API server is away, and the versions compacted: a 410 and a relist.
    running.fake.set_available(False)
    kind, ns, name = change.delete
    running.fake.delete(running.api.by_kind(kind).group_version, kind, name, ns)
    running.fake.compact()
    running.fake.set_available(True)
    settle(running.api, running.argv, preset)
    after = file_mode(running.api.listed(), running.argv)
    others = (after.keys() | updated.keys()) - {(kind, ns, name)}
    changed = [k for k in others if after.get(k) != updated.get(k)]
    assert changed, "the deletion changes no other object's status: not a test of it"

"""The fake API server (tests/fake_apiserver) speaks the real protocol: the official `kubernetes`
client and lightkube, neither of which knows it is a fake, work against it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from tests.fake_apiserver import FakeApiServer, Resource

HP = ("projectcontour.io", "v1", "default", "httpproxies")


def _proxy(name: str, fqdn: str = "a.example.com") -> dict[str, Any]:
    return {
        "apiVersion": "projectcontour.io/v1",
        "kind": "HTTPProxy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"virtualhost": {"fqdn": fqdn}},
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture(scope="module")
def api(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> k8s.ApiClient:
    path = fake.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    return k8s_config.new_client_from_config(config_file=str(path))


def test_discovery_lists_groups_versions_and_status_subresources(api: k8s.ApiClient) -> None:
    groups = {g.name: g for g in k8s.ApisApi(api).get_api_versions().groups}
    assert groups["projectcontour.io"].preferred_version.version == "v1"
    found = k8s.CustomObjectsApi(api).get_api_resources("projectcontour.io", "v1")
    names = {r.name: r for r in found.resources}
    assert names["httpproxies"].namespaced is True
    assert "httpproxies/status" in names
    core = {r.name for r in k8s.CoreV1Api(api).get_api_resources().resources}
    assert {"services", "secrets", "namespaces", "services/status"} <= core
    assert "secrets/status" not in core
    assert k8s.VersionApi(api).get_code().git_version.startswith("v1.")


def test_wrong_token_is_refused(fake: FakeApiServer, tmp_path: Path) -> None:
    path = fake.kubeconfig(tmp_path / "config", token="wrong")
    bad = k8s_config.new_client_from_config(config_file=str(path))
    with pytest.raises(ApiException) as err:
        k8s.CoreV1Api(bad).list_namespaced_service("default")
    assert err.value.status == 401


def test_custom_object_create_get_list_delete(api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    made = co.create_namespaced_custom_object(*HP, _proxy("crud"))
    assert made["metadata"]["generation"] == 1
    got = co.get_namespaced_custom_object(*HP, "crud")
    assert got["spec"]["virtualhost"]["fqdn"] == "a.example.com"
    listed = co.list_namespaced_custom_object(*HP)
    assert "crud" in {i["metadata"]["name"] for i in listed["items"]}
    assert int(listed["metadata"]["resourceVersion"]) >= int(made["metadata"]["resourceVersion"])
    every = co.list_cluster_custom_object("projectcontour.io", "v1", "httpproxies", limit=10)
    assert "crud" in {i["metadata"]["name"] for i in every["items"]}
    co.delete_namespaced_custom_object(*HP, "crud")
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object(*HP, "crud")
    assert err.value.status == 404


def test_stale_update_is_a_conflict_and_generation_follows_spec(api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    first = co.create_namespaced_custom_object(*HP, _proxy("conflict"))
    changed = {**first, "spec": {"virtualhost": {"fqdn": "b.example.com"}}}
    second = co.replace_namespaced_custom_object(*HP, "conflict", changed)
    assert second["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(*HP, "conflict", first)
    assert err.value.status == 409
    labelled = co.patch_namespaced_custom_object(
        *HP, "conflict", {"metadata": {"labels": {"a": "b"}}}
    )
    assert labelled["metadata"]["labels"] == {"a": "b"}
    assert labelled["metadata"]["generation"] == 2


def test_status_subresource_changes_only_status(api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    co.create_namespaced_custom_object(*HP, {**_proxy("st"), "status": {"ignored": True}})
    assert "status" not in co.get_namespaced_custom_object(*HP, "st")
    body = {"status": {"currentStatus": "valid"}, "spec": {"virtualhost": {"fqdn": "x"}}}
    patched = co.patch_namespaced_custom_object_status(*HP, "st", body)
    assert patched["status"] == {"currentStatus": "valid"}
    assert patched["spec"]["virtualhost"]["fqdn"] == "a.example.com"
    assert patched["metadata"]["generation"] == 1
    replaced = co.replace_namespaced_custom_object_status(
        *HP, "st", {**patched, "status": {"currentStatus": "invalid"}}
    )
    assert replaced["status"] == {"currentStatus": "invalid"}
    # A spec write keeps the status.
    spec = co.patch_namespaced_custom_object(*HP, "st", {"spec": {"virtualhost": {"fqdn": "y"}}})
    assert spec["status"] == {"currentStatus": "invalid"}
    assert spec["metadata"]["generation"] == 2


def test_status_writes_are_logged(fake: FakeApiServer, api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    co.create_namespaced_custom_object(*HP, _proxy("logged"))
    before = len(fake.status_writes("httpproxies"))
    co.patch_namespaced_custom_object_status(*HP, "logged", {"status": {"a": 1}})
    assert len(fake.status_writes("httpproxies")) == before + 1


def test_core_objects_through_typed_api(fake: FakeApiServer, api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    svc = k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="web", namespace="default"),
        spec=k8s.V1ServiceSpec(ports=[k8s.V1ServicePort(port=80)]),
    )
    core.create_namespaced_service("default", svc)
    listed = core.list_service_for_all_namespaces()
    assert "web" in [s.metadata.name for s in listed.items]
    assert fake.get("v1", "Service", "web", "default")["spec"]["ports"] == [{"port": 80}]


def test_watch_streams_events_and_bookmarks(fake: FakeApiServer, api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    rv = co.list_namespaced_custom_object(*HP)["metadata"]["resourceVersion"]
    co.create_namespaced_custom_object(*HP, _proxy("w1"))
    co.patch_namespaced_custom_object(*HP, "w1", {"spec": {"virtualhost": {"fqdn": "z"}}})
    co.delete_namespaced_custom_object(*HP, "w1")
    seen: list[tuple[str, str]] = []
    w = k8s_watch.Watch()
    for event in w.stream(
        co.list_namespaced_custom_object,
        *HP,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=2,
    ):
        name = event["object"]["metadata"].get("name", "")
        seen.append((event["type"], name))
        if event["type"] == "BOOKMARK":
            w.stop()
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1"), ("BOOKMARK", "")]


def test_watch_from_a_compacted_version_is_410(fake: FakeApiServer, api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    old = co.list_namespaced_custom_object(*HP)["metadata"]["resourceVersion"]
    co.create_namespaced_custom_object(*HP, _proxy("gone"))
    fake.compact()
    w = k8s_watch.Watch()
    with pytest.raises(ApiException) as err:
        for _ in w.stream(
            co.list_namespaced_custom_object, *HP, resource_version=old, timeout_seconds=2
        ):
            pass
    assert err.value.status == 410


def test_drop_watches_ends_open_streams(fake: FakeApiServer, api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    ended = threading.Event()
    rv = co.list_namespaced_custom_object(*HP)["metadata"]["resourceVersion"]

    def watch() -> None:
        for _ in k8s_watch.Watch().stream(
            co.list_namespaced_custom_object, *HP, resource_version=rv, timeout_seconds=30
        ):
            pass
        ended.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    for _ in range(50):
        if fake.open_watches():
            break
        threading.Event().wait(0.05)
    assert fake.drop_watches() >= 1
    assert ended.wait(5)


def test_crd_offered_at_runtime(fake: FakeApiServer, api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    widget = Resource("example.com", "v1", "Widget", "widgets")
    with pytest.raises(ApiException):
        co.list_cluster_custom_object("example.com", "v1", "widgets")
    fake.offer(widget)
    assert co.list_cluster_custom_object("example.com", "v1", "widgets")["items"] == []
    groups = {g.name for g in k8s.ApisApi(api).get_api_versions().groups}
    assert "example.com" in groups
    fake.withdraw(widget)
    assert "example.com" not in {g.name for g in k8s.ApisApi(api).get_api_versions().groups}


def test_leases_with_optimistic_concurrency(api: k8s.ApiClient) -> None:
    coord = k8s.CoordinationV1Api(api)
    lease = k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="turnout", namespace="turnout-system"),
        spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    made = coord.create_namespaced_lease("turnout-system", lease)
    made.spec.holder_identity = "b"
    coord.replace_namespaced_lease("turnout", "turnout-system", made)
    made.spec.holder_identity = "c"
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("turnout", "turnout-system", made)
    assert err.value.status == 409
    got = coord.read_namespaced_lease("turnout", "turnout-system")
    assert got.spec.holder_identity == "b"


def test_lightkube_generic_list_watch_and_status(fake: FakeApiServer, tmp_path: Path) -> None:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.generic_resource import create_namespaced_resource

    proxy = create_namespaced_resource("projectcontour.io", "v1", "HTTPProxy", "httpproxies")
    config = KubeConfig.from_file(fake.kubeconfig(tmp_path / "config"))

    async def run() -> list[str]:
        client = AsyncClient(config)
        await client.create(proxy(_proxy("lk")))
        names = [p.metadata.name async for p in client.list(proxy, namespace="default")]
        await client.apply(
            proxy.Status(status={"currentStatus": "valid"}),
            name="lk",
            namespace="default",
            field_manager="turnout",
        )
        got = await client.get(proxy, "lk", namespace="default")
        assert got.status == {"currentStatus": "valid"}
        await client.close()
        return names

    assert "lk" in asyncio.run(run())

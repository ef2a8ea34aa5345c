"""A fake Kubernetes API server speaking the real HTTP protocol, in a background thread.

Simplifications (documented so a test does not rely on them): server-side apply and strategic
merge patch are applied as a JSON merge patch without field ownership; `limit`/`continue` and
label/field selectors are ignored (a list is always complete); versions of one resource share
storage without conversion (an object read through another version only has its apiVersion
rewritten); a bookmark is sent every `bookmark_interval` seconds on an idle watch."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from tests.fake_apiserver.state import (
    ApiError,
    Event,
    Obj,
    Resource,
    State,
    as_resource,
    status_body,
)

T = TypeVar("T")

BUILTIN: tuple[Resource, ...] = (
    Resource("", "v1", "Namespace", "namespaces", namespaced=False),
    Resource("", "v1", "Service", "services"),
    Resource("", "v1", "Secret", "secrets", status=False),
    Resource("", "v1", "ConfigMap", "configmaps", status=False),
    Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", status=False),
    Resource("networking.k8s.io", "v1", "Ingress", "ingresses"),
    Resource("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False, False),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", status=False),
)

GW = "gateway.networking.k8s.io"
# The CRDs turnout reads, for tests to offer.
CRDS: tuple[Resource, ...] = (
    Resource("projectcontour.io", "v1", "HTTPProxy", "httpproxies"),
    Resource("projectcontour.io", "v1", "TLSCertificateDelegation", "tlscertificatedelegations"),
    Resource("projectcontour.io", "v1alpha1", "ExtensionService", "extensionservices"),
    Resource("contour.heptio.com", "v1beta1", "IngressRoute", "ingressroutes"),
    Resource(
        "contour.heptio.com", "v1beta1", "TLSCertificateDelegation", "tlscertificatedelegations"
    ),
    Resource("contour.heptio.com", "v1alpha1", "Route", "routes"),
    Resource("zalando.org", "v1", "RouteGroup", "routegroups"),
    Resource(GW, "v1", "GatewayClass", "gatewayclasses", namespaced=False),
    Resource(GW, "v1", "Gateway", "gateways"),
    Resource(GW, "v1", "HTTPRoute", "httproutes"),
    Resource(GW, "v1", "GRPCRoute", "grpcroutes"),
    Resource(GW, "v1", "TLSRoute", "tlsroutes"),
    Resource(GW, "v1alpha2", "TCPRoute", "tcproutes"),
    Resource(GW, "v1beta1", "ReferenceGrant", "referencegrants"),
    Resource(GW, "v1", "BackendTLSPolicy", "backendtlspolicies"),
)


_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    path: str
    subresource: str
    watch: bool


class FakeApiServer:
    """Start with `start()` (or as a context manager); `url`, `port` and the test hooks below."""

    def __init__(
        self,
        token: str = "test-token",
        crds: Iterable[Any] = CRDS,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.state = State()
        self.resources: list[Resource] = list(BUILTIN) + [as_resource(r) for r in crds]
        self.preferred: dict[str, str] = {}
        self.requests: list[LoggedRequest] = []
        self.available = True
        self._watches: set[asyncio.Queue[Event | None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._thread.start()
        self._call_async(self._serve())
        return self

    def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            self._call_async(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def _call(self, fn: Callable[[], T]) -> T:
        """Runs `fn` on the server's loop (where all state lives) and returns its result."""
        if threading.current_thread() is self._thread:
            return fn()

        async def run() -> T:
            return fn()

        return self._call_async(run())

    def _call_async(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    # -- test hooks --------------------------------------------------------------------------

    def resource(self, kind: str, group: str | None = None) -> Resource:
        for r in self.resources:
            if r.kind == kind and group in (None, r.group):
                return r
        raise KeyError(kind)

    def _res_of(self, obj: Obj) -> Resource:
        group = obj["apiVersion"].rpartition("/")[0]
        for r in self.resources:
            if (r.group, r.kind) == (group, obj["kind"]):
                return r
        raise KeyError(f"{obj['apiVersion']} {obj['kind']} is not offered")

    def create(self, obj: Obj, keep_status: bool = True) -> Obj:
        """Stores an object as given (status included unless `keep_status=False`)."""
        res = self._res_of(obj)
        ns = obj.get("metadata", {}).get("namespace", "")
        return self._call(lambda: self.state.create(res, ns, obj, keep_status))

    def update(self, obj: Obj) -> Obj:
        """Replaces an object (a stale metadata.resourceVersion is a 409 `ApiError`)."""
        res = self._res_of(obj)
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        return self._call(lambda: self.state.replace(res, ns, name, obj, ""))

    def apply(self, obj: Obj) -> Obj:
        """Creates or replaces, ignoring resourceVersion (what a test usually wants)."""
        obj = {
            **obj,
            "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"},
        }
        try:
            return self.update(obj)
        except ApiError as e:
            if e.code != 404:
                raise
            return self.create(obj)

    def set_status(self, obj: Obj, status: Obj) -> Obj:
        res = self._res_of(obj)
        meta = obj["metadata"]
        body = {"status": status}
        ns, name = meta.get("namespace", ""), meta["name"]
        return self._call(lambda: self.state.replace(res, ns, name, body, "status"))

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Obj:
        res = self._res_of({"apiVersion": api_version, "kind": kind})
        return self._call(lambda: self.state.get(res, namespace if res.namespaced else "", name))

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> Obj:
        res = self._res_of({"apiVersion": api_version, "kind": kind})
        return self._call(lambda: self.state.delete(res, namespace if res.namespaced else "", name))

    def drop_watches(self, abort: bool = False) -> int:
        """Ends every open watch stream (cleanly, or by resetting the connection); returns how
        many there were."""

        def drop() -> int:
            for q in self._watches:
                q.put_nowait(None if not abort else Event(-1, ("", ""), "", "ABORT", {}))
            return len(self._watches)

        return self._call(drop)

    def open_watches(self) -> int:
        return self._call(lambda: len(self._watches))

    def compact(self) -> int:
        """After this, a watch from any earlier resourceVersion gets a 410 Gone ERROR event."""
        return self._call(self.state.compact)

    def offer(self, resource: Any, preferred: bool = False) -> None:
        """Serves a resource from now on (a CRD installed at runtime)."""
        res = as_resource(resource)

        def add() -> None:
            if res not in self.resources:
                self.resources.append(res)
            if preferred:
                self.preferred[res.group] = res.version

        self._call(add)

    def withdraw(self, resource: Any) -> None:
        """Stops serving a resource (its objects are kept, unreachable)."""
        res = as_resource(resource)

        def remove() -> None:
            self.resources = [r for r in self.resources if r != res]

        self._call(remove)

    def status_writes(self, plural: str | None = None) -> list[LoggedRequest]:
        return [
            r
            for r in list(self.requests)
            if r.subresource == "status"
            and r.method in ("PUT", "PATCH")
            and (plural is None or f"/{plural}/" in r.path)
        ]

    def kubeconfig(self, path: Path, token: str | None = None, context: str = "fake") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token or self.token}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": "fake", "user": "fake", "namespace": "default"},
                }
            ],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- HTTP --------------------------------------------------------------------------------

    def set_available(self, available: bool) -> None:
        """While unavailable every request is a 503 and open watches are cut (a partition or an
        API server restart); objects may still be changed through the hooks meanwhile."""
        self.available = available
        if not available:
            self.drop_watches(abort=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not self.available:
            self.requests.append(LoggedRequest(request.method, request.path, "", False))
            return _json(status_body(503, "ServiceUnavailable", "unavailable"), 503)
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return _json(status_body(401, "Unauthorized", "Unauthorized"), 401)
        try:
            return await self._route(request)
        except ApiError as e:
            return _json(e.status(), e.code)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        discovery = self._discovery(parts)
        if discovery is not None:
            self.requests.append(LoggedRequest(request.method, request.path, "", False))
            return _json(discovery)
        res, namespace, name, sub = self._locate(parts)
        watch = request.query.get("watch", "") in ("1", "true", "True")
        self.requests.append(LoggedRequest(request.method, request.path, sub, watch))
        if request.method == "GET" and name is None:
            if watch:
                return await self._watch(request, res, namespace)
            return self._list(res, namespace)
        return await self._object(request, res, namespace or "", name, sub)

    def _discovery(self, parts: list[str]) -> Obj | None:
        if parts == ["version"]:
            return _VERSION
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["apis"]:
            return self._group_list()
        if parts == ["api", "v1"]:
            return self._resource_list("", "v1")
        if len(parts) == 3 and parts[0] == "apis":
            found = self._resource_list(parts[1], parts[2])
            if not found["resources"]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return found
        return None

    def _group_list(self) -> Obj:
        groups: dict[str, list[str]] = {}
        for r in self.resources:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        out = []
        for group, versions in groups.items():
            pref = self.preferred.get(group, versions[0])
            if pref not in versions:
                pref = versions[0]
            out.append(
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{group}/{pref}", "version": pref},
                }
            )
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources: list[Obj] = []
        for r in self.resources:
            if (r.group, r.version) != (group, version):
                continue
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            base = {"singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind}
            resources.append({"name": r.plural, **base, "verbs": verbs})
            if r.status:
                resources.append(
                    {"name": f"{r.plural}/status", **base, "verbs": ["get", "patch", "update"]}
                )
        gv = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": resources,
        }

    def _locate(self, parts: list[str]) -> tuple[Resource, str | None, str | None, str]:
        """/api/v1/... or /apis/G/V/... -> (resource, namespace, name, subresource)."""
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = self._find(group, version, rest[0])
        if namespace is not None and not res.namespaced:
            raise ApiError(404, "NotFound", f"{res.plural} is not namespaced")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and (sub != "status" or not res.status):
            raise ApiError(404, "NotFound", f"no subresource {sub}")
        return res, namespace, name, sub

    def _find(self, group: str, version: str, plural: str) -> Resource:
        for r in self.resources:
            if (r.group, r.version, r.plural) == (group, version, plural):
                return r
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _list(self, res: Resource, namespace: str | None) -> web.Response:
        items = self.state.list(res, namespace)
        for item in items:
            _present(res, item, in_list=True)
        body = {
            "kind": f"{res.kind}List",
            "apiVersion": res.group_version,
            "metadata": {"resourceVersion": str(self.state.rv)},
            "items": items,
        }
        return _json(body)

    async def _object(
        self, request: web.Request, res: Resource, namespace: str, name: str | None, sub: str
    ) -> web.Response:
        ns = namespace if res.namespaced else ""
        if request.method == "POST" and name is None:
            body = await request.json()
            return _json(_present(res, self.state.create(res, ns, body)), 201)
        if name is None:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} needs a name")
        if request.method == "GET":
            return _json(_present(res, self.state.get(res, ns, name)))
        if request.method == "DELETE":
            return _json(_present(res, self.state.delete(res, ns, name)))
        if request.method == "PUT":
            body = await request.json()
            return _json(_present(res, self.state.replace(res, ns, name, body, sub)))
        if request.method == "PATCH":
            return await self._patch(request, res, ns, name, sub)
        raise ApiError(405, "MethodNotAllowed", request.method)

    async def _patch(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.Response:
        ctype = request.content_type
        text = await request.text()
        if ctype == "application/apply-patch+yaml":
            body = yaml.safe_load(text) or {}
            try:
                return _json(_present(res, self.state.patch(res, ns, name, body, sub)))
            except ApiError as e:
                if e.code != 404 or sub:
                    raise
                return _json(_present(res, self.state.create(res, ns, body)), 201)
        if ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            body = json.loads(text)
            return _json(_present(res, self.state.patch(res, ns, name, body, sub)))
        raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype}")

    async def _watch(
        self, request: web.Request, res: Resource, namespace: str | None
    ) -> web.StreamResponse:
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        rv_param = request.query.get("resourceVersion", "")
        backlog = self._backlog(res, namespace, rv_param)
        listener = _listener(queue, res.key, namespace)
        self.state.listeners.append(listener)
        self._watches.add(queue)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            with contextlib.suppress(ConnectionResetError):
                await self._stream(request, resp, res, queue, backlog)
        finally:
            self._watches.discard(queue)
            self.state.listeners.remove(listener)
        return resp

    def _backlog(self, res: Resource, namespace: str | None, rv_param: str) -> list[Obj] | Obj:
        """The events a new watch starts with, or the 410 Status to end it with."""
        if rv_param in ("", "0"):
            return [{"type": "ADDED", "object": o} for o in self.state.list(res, namespace)]
        try:
            events = self.state.events_since(res.key, namespace, int(rv_param))
        except ApiError as e:
            return e.status()
        return [{"type": e.type, "object": e.obj} for e in events]

    async def _stream(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        res: Resource,
        queue: asyncio.Queue[Event | None],
        backlog: list[Obj] | Obj,
    ) -> None:
        if isinstance(backlog, dict):
            await _send(resp, res, {"type": "ERROR", "object": backlog})
            return
        for event in backlog:
            await _send(resp, res, event)
        timeout = float(request.query.get("timeoutSeconds", "0") or 0) or None
        bookmarks = request.query.get("allowWatchBookmarks", "") in ("1", "true", "True")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        while True:
            wait = self.bookmark_interval if bookmarks else None
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    return
                wait = min(wait, left) if wait is not None else left
            try:
                event = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                if bookmarks and queue.empty():
                    await _send(resp, res, _bookmark(res, self.state.rv))
                continue
            if event is None:
                return
            if event.type == "ABORT":
                if request.transport is not None:
                    request.transport.abort()
                return
            await _send(resp, res, {"type": event.type, "object": event.obj})


def _listener(
    queue: asyncio.Queue[Event | None], key: tuple[str, str], namespace: str | None
) -> Callable[[Event], None]:
    def listen(event: Event) -> None:
        if event.key == key and namespace in (None, event.namespace):
            queue.put_nowait(event)

    return listen


def _bookmark(res: Resource, rv: int) -> Obj:
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": res.kind,
            "apiVersion": res.group_version,
            "metadata": {"resourceVersion": str(rv)},
        },
    }


def _present(res: Resource, obj: Obj, in_list: bool = False) -> Obj:
    """As the real server: items of a built-in kind's list carry no kind/apiVersion."""
    if in_list and res.group in (
        "",
        "discovery.k8s.io",
        "networking.k8s.io",
        "coordination.k8s.io",
    ):
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
    elif "kind" in obj:
        obj["apiVersion"] = res.group_version
    return obj


async def _send(resp: web.StreamResponse, res: Resource, event: Obj) -> None:
    obj = event["object"]
    if event["type"] != "ERROR":
        obj = _present(res, dict(obj))
    await resp.write(json.dumps({"type": event["type"], "object": obj}).encode() + b"\n")


def _json(body: Obj, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")

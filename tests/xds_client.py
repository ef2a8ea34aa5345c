"""A scripted ADS client and a fake Envoy that ACKs what it is sent, with the xDS resources
and snapshots the xDS server tests feed them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2, scoped_route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2, duration_pb2

from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    SECRET_TYPE,
    EnvoyResources,
)

SHORT = {
    CLUSTER_TYPE: "cluster",
    ENDPOINT_TYPE: "endpoint",
    LISTENER_TYPE: "listener",
    ROUTE_TYPE: "route",
    SECRET_TYPE: "secret",
    SCOPED_ROUTE_TYPE: "scoped_route",
}


MESSAGE_CLASSES = {
    CLUSTER_TYPE: cluster_pb2.Cluster,
    ENDPOINT_TYPE: endpoint_pb2.ClusterLoadAssignment,
    LISTENER_TYPE: listener_pb2.Listener,
    ROUTE_TYPE: route_pb2.RouteConfiguration,
    SECRET_TYPE: secret_pb2.Secret,
    SCOPED_ROUTE_TYPE: scoped_route_pb2.ScopedRouteConfiguration,
}


ADS = config_source_pb2.ConfigSource(ads={}, resource_api_version=config_source_pb2.V3)


def pack(message: Any) -> Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def cluster(name: str, *, timeout: int = 1, eds: bool = True) -> Any:
    c = cluster_pb2.Cluster(name=name, connect_timeout=duration_pb2.Duration(seconds=timeout))
    if eds:
        c.type = cluster_pb2.Cluster.EDS
        c.eds_cluster_config.eds_config.CopyFrom(ADS)
    else:
        c.type = cluster_pb2.Cluster.STATIC
    return c


def cla(name: str, port: int = 8080) -> Any:
    endpoint = endpoint_components_pb2.LbEndpoint(
        endpoint=endpoint_components_pb2.Endpoint(
            address=address_pb2.Address(
                socket_address=address_pb2.SocketAddress(address="127.0.0.1", port_value=port)
            )
        )
    )
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=name,
        endpoints=[endpoint_components_pb2.LocalityLbEndpoints(lb_endpoints=[endpoint])],
    )


def listener(name: str, route_name: str, port: int = 10080) -> Any:
    hcm = hcm_pb2.HttpConnectionManager(
        stat_prefix=name,
        rds=hcm_pb2.Rds(route_config_name=route_name, config_source=ADS),
        http_filters=[
            hcm_pb2.HttpFilter(
                name="envoy.filters.http.router", typed_config=pack(router_pb2.Router())
            )
        ],
    )
    return listener_pb2.Listener(
        name=name,
        address=address_pb2.Address(
            socket_address=address_pb2.SocketAddress(address="127.0.0.1", port_value=port)
        ),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    listener_components_pb2.Filter(
                        name="envoy.filters.network.http_connection_manager",
                        typed_config=pack(hcm),
                    )
                ]
            )
        ],
    )


def route(name: str, cluster_name: str, *, timeout: int = 15) -> Any:
    action = route_components_pb2.RouteAction(
        cluster=cluster_name, timeout=duration_pb2.Duration(seconds=timeout)
    )
    return route_pb2.RouteConfiguration(
        name=name,
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name="all",
                domains=["*"],
                routes=[
                    route_components_pb2.Route(
                        match=route_components_pb2.RouteMatch(prefix="/"), route=action
                    )
                ],
            )
        ],
    )


def secret(name: str, key: str) -> Any:
    return secret_pb2.Secret(
        name=name,
        tls_certificate=common_pb2.TlsCertificate(
            certificate_chain=base_pb2.DataSource(inline_string="-----BEGIN CERTIFICATE-----"),
            private_key=base_pb2.DataSource(inline_string=key),
        ),
    )


def snapshot(
    clusters: Iterable[str] = ("a",),
    *,
    route_to: str = "a",
    route_timeout: int = 15,
    listener_port: int = 10080,
    cluster_timeout: int = 1,
    secrets: Iterable[Any] = (),
) -> EnvoyResources:
    names = sorted(clusters)
    return EnvoyResources(
        clusters=tuple(cluster(n, timeout=cluster_timeout) for n in names),
        endpoints=tuple(cla(n) for n in names),
        listeners=(listener("http", "main", listener_port),),
        routes=(route("main", route_to, timeout=route_timeout),),
        secrets=tuple(secrets),
    )


def resource_names(response: Any) -> list[str]:
    names = []
    for packed in response.resources:
        message = MESSAGE_CLASSES[response.type_url]()
        packed.Unpack(message)
        names.append(message.cluster_name if response.type_url == ENDPOINT_TYPE else message.name)
    return names


def refs(response: Any) -> list[str]:
    """The names Envoy would subscribe to after this CDS or LDS response."""
    messages = []
    for packed in response.resources:
        message = MESSAGE_CLASSES[response.type_url]()
        packed.Unpack(message)
        messages.append(message)
    return message_refs(response.type_url, messages)


def message_refs(type_url: str, messages: Iterable[Any]) -> list[str]:
    """The names Envoy subscribes to while it holds these clusters or listeners."""
    out: set[str] = set()
    for message in messages:
        if type_url == CLUSTER_TYPE and message.type == cluster_pb2.Cluster.EDS:
            out.add(message.eds_cluster_config.service_name or message.name)
        if type_url == LISTENER_TYPE:
            for chain in message.filter_chains:
                for f in chain.filters:
                    hcm = hcm_pb2.HttpConnectionManager()
                    f.typed_config.Unpack(hcm)
                    out.add(hcm.rds.route_config_name)
    return sorted(out)


class AdsClient:
    """One ADS stream; requests go out in order, responses collect in `inbox`."""

    def __init__(
        self,
        port: int,
        node_id: str = "node-a",
        *,
        credentials: grpc.ChannelCredentials | None = None,
        server_name: str = "turnout",
    ) -> None:
        self.node_id = node_id
        target = f"127.0.0.1:{port}"
        if credentials is None:
            self.channel = grpc.aio.insecure_channel(target)
        else:  # mutual TLS: `server_name` is the name turnout's certificate must carry
            options = [("grpc.ssl_target_name_override", server_name)]
            self.channel = grpc.aio.secure_channel(target, credentials, options=options)
        self._outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._node_sent = False
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        self.call = stub.StreamAggregatedResources(self._requests())
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _requests(self) -> AsyncIterator[Any]:
        while (request := await self._outbox.get()) is not None:
            yield request

    async def _read(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for response in self.call:
                self.inbox.put_nowait(response)

    def send(
        self,
        type_url: str,
        names: Iterable[str] = (),
        *,
        nonce: str = "",
        version: str = "",
        error: str | None = None,
    ) -> None:
        request = discovery_pb2.DiscoveryRequest(
            type_url=type_url,
            resource_names=list(names),
            response_nonce=nonce,
            version_info=version,
        )
        if not self._node_sent:  # like Envoy with set_node_on_first_message_only
            request.node.id = self.node_id
            self._node_sent = True
        if error is not None:
            request.error_detail.code = 3
            request.error_detail.message = error
        self._outbox.put_nowait(request)

    def ack(self, response: Any, names: Iterable[str] = ()) -> None:
        self.send(response.type_url, names, nonce=response.nonce, version=response.version_info)

    async def recv(self, timeout: float = 2.0) -> Any:
        return await asyncio.wait_for(self.inbox.get(), timeout)

    async def expect_nothing(self, wait: float = 0.15) -> None:
        await asyncio.sleep(wait)
        assert self.inbox.empty(), f"unexpected response: {self.inbox.get_nowait()}"

    async def close(self) -> None:
        self._outbox.put_nowait(None)
        self.call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self.channel.close()


@dataclass
class FakeEnvoy:
    """Answers like Envoy: ACK (or NACK when `reject` says so), subscribe to referenced names,
    request listeners once the first clusters and their endpoints are in."""

    client: AdsClient
    reject: Callable[[Any], str | None] = lambda response: None
    events: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)  # last response per type
    good_version: dict[str, str] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def start(self) -> FakeEnvoy:
        self.client.send(CLUSTER_TYPE)
        self._task = asyncio.create_task(self._run())
        return self

    def received(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(t, n) for kind, t, n in self.events if kind == "recv"]

    def index(self, kind: str, type_short: str, names: tuple[str, ...] | None = None) -> int:
        for i, (k, t, n) in enumerate(self.events):
            if k == kind and t == type_short and (names is None or n == names):
                return i
        raise AssertionError(f"no {kind} {type_short} {names} in {self.events}")

    def clear(self) -> None:
        self.events.clear()

    def _subscribe(self, type_url: str, names: list[str]) -> None:
        if self.names.get(type_url) == names:
            return
        self.names[type_url] = names
        last = self.last.get(type_url)
        self.client.send(
            type_url,
            names,
            nonce=last.nonce if last is not None else "",
            version=self.good_version.get(type_url, ""),
        )

    async def _run(self) -> None:
        listeners_requested = False
        while True:
            response = await self.client.inbox.get()
            t = response.type_url
            self.last[t] = response
            self.events.append(("recv", SHORT[t], tuple(resource_names(response))))
            problem = self.reject(response)
            names = self.names.get(t, [])
            if problem is not None:
                self.events.append(("nack", SHORT[t], tuple(resource_names(response))))
                self.client.send(
                    t,
                    names,
                    nonce=response.nonce,
                    version=self.good_version.get(t, ""),
                    error=problem,
                )
                continue
            self.good_version[t] = response.version_info
            if t == CLUSTER_TYPE:
                self.client.ack(response)
                self._subscribe(ENDPOINT_TYPE, refs(response))
            elif t == LISTENER_TYPE:
                # Envoy creates the listener (and its RDS subscription) before it ACKs.
                self._subscribe(ROUTE_TYPE, refs(response))
                self.client.ack(response)
            else:
                self.client.ack(response, names)
            self.events.append(("ack", SHORT[t], tuple(resource_names(response))))
            acked_endpoints = {
                n for kind, ty, ns in self.events if kind == "ack" and ty == "endpoint" for n in ns
            }
            if (
                not listeners_requested
                and CLUSTER_TYPE in self.last
                and set(self.names.get(ENDPOINT_TYPE, [])) <= acked_endpoints
            ):
                listeners_requested = True
                self.client.send(LISTENER_TYPE)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.close()


async def until(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def delta_names(response: Any) -> tuple[str, ...]:
    return tuple(res.name for res in response.resources)


def unpacked(response: Any) -> list[Any]:
    out = []
    for res in response.resources:
        message = MESSAGE_CLASSES[response.type_url]()
        res.resource.Unpack(message)
        out.append(message)
    return out


class DeltaClient:
    """One Delta ADS stream; requests go out in order, responses collect in `inbox`."""

    def __init__(self, port: int, node_id: str = "node-a") -> None:
        self.node_id = node_id
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self._outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._node_sent = False
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        self.call = stub.DeltaAggregatedResources(self._requests())
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _requests(self) -> AsyncIterator[Any]:
        while (request := await self._outbox.get()) is not None:
            yield request

    async def _read(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for response in self.call:
                self.inbox.put_nowait(response)

    def send(
        self,
        type_url: str,
        subscribe: Iterable[str] = (),
        unsubscribe: Iterable[str] = (),
        *,
        nonce: str = "",
        error: str | None = None,
        initial: dict[str, str] | None = None,
    ) -> None:
        request = discovery_pb2.DeltaDiscoveryRequest(
            type_url=type_url,
            resource_names_subscribe=list(subscribe),
            resource_names_unsubscribe=list(unsubscribe),
            initial_resource_versions=initial or {},
            response_nonce=nonce,
        )
        if not self._node_sent:  # like Envoy with set_node_on_first_message_only
            request.node.id = self.node_id
            self._node_sent = True
        if error is not None:
            request.error_detail.code = 3
            request.error_detail.message = error
        self._outbox.put_nowait(request)

    def ack(self, response: Any) -> None:
        self.send(response.type_url, nonce=response.nonce)

    async def recv(self, timeout: float = 2.0) -> Any:
        return await asyncio.wait_for(self.inbox.get(), timeout)

    async def expect_nothing(self, wait: float = 0.15) -> None:
        await asyncio.sleep(wait)
        assert self.inbox.empty(), f"unexpected response: {self.inbox.get_nowait()}"

    async def close(self) -> None:
        self._outbox.put_nowait(None)
        self.call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self.channel.close()


@dataclass
class DeltaFakeEnvoy:
    """Answers a delta stream like Envoy: keeps what it was sent (name -> version), ACKs (or
    NACKs when `reject` says so), subscribes to the CLAs of its EDS clusters and the route
    configurations of its listeners and unsubscribes what they stop naming, requests listeners
    once its clusters' endpoints are in. `resume`: the fake Envoy whose state this one starts
    with, as Envoy reconnecting to a control plane: it reports what it has
    (`initial_resource_versions`) and renews its subscriptions."""

    client: DeltaClient
    reject: Callable[[Any], str | None] = lambda response: None
    resume: DeltaFakeEnvoy | None = None
    # ("recv" | "ack" | "nack", type, names sent, names removed)
    events: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    have: dict[str, dict[str, str]] = field(default_factory=dict)  # type -> name -> version
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    names: dict[str, set[str]] = field(default_factory=dict)  # explicit subscriptions
    _task: asyncio.Task[None] | None = None

    def start(self) -> DeltaFakeEnvoy:
        if self.resume is not None:
            self.have = {t: dict(v) for t, v in self.resume.have.items()}
            self.messages = {t: dict(v) for t, v in self.resume.messages.items()}
            self.names = {t: set(v) for t, v in self.resume.names.items()}
        for type_url in (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE):
            if type_url == CLUSTER_TYPE or type_url in self.have:
                self.client.send(
                    type_url, sorted(self.names.get(type_url, ())), initial=self.have.get(type_url)
                )
        self._task = asyncio.create_task(self._run(LISTENER_TYPE in self.have))
        return self

    def index(self, kind: str, type_short: str, names: tuple[str, ...] | None = None) -> int:
        for i, (k, t, n, _) in enumerate(self.events):
            if k == kind and t == type_short and (names is None or n == names):
                return i
        raise AssertionError(f"no {kind} {type_short} {names} in {self.events}")

    def received(self) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        return [(t, n, r) for kind, t, n, r in self.events if kind == "recv"]

    def clear(self) -> None:
        self.events.clear()

    def _refs(self, type_url: str) -> set[str]:
        return set(message_refs(type_url, self.messages.get(type_url, {}).values()))

    def _follow(self, type_url: str, wanted: set[str]) -> None:
        first = type_url not in self.names
        old = self.names.get(type_url, set())
        self.names[type_url] = wanted
        if wanted != old or first:
            self.client.send(type_url, sorted(wanted - old), sorted(old - wanted))

    def _take(self, response: Any) -> None:
        t = response.type_url
        have = self.have.setdefault(t, {})
        messages = self.messages.setdefault(t, {})
        for res, message in zip(response.resources, unpacked(response), strict=True):
            have[res.name] = res.version
            messages[res.name] = message
        for name in response.removed_resources:
            have.pop(name, None)
            messages.pop(name, None)

    async def _run(self, listeners_requested: bool) -> None:
        while True:
            response = await self.client.inbox.get()
            t = response.type_url
            names, removed = delta_names(response), tuple(response.removed_resources)
            self.events.append(("recv", SHORT[t], names, removed))
            problem = self.reject(response)
            if problem is not None:
                # Like Envoy's listener and cluster updates: removals apply, the rest is refused.
                for name in removed:
                    self.have.get(t, {}).pop(name, None)
                    self.messages.get(t, {}).pop(name, None)
                self.events.append(("nack", SHORT[t], names, removed))
                self.client.send(t, nonce=response.nonce, error=problem)
                continue
            self._take(response)
            if t == CLUSTER_TYPE:
                self.client.ack(response)
                self._follow(ENDPOINT_TYPE, self._refs(CLUSTER_TYPE))
            elif t == LISTENER_TYPE:
                # Envoy creates the listener (and its RDS subscription) before it ACKs.
                self._follow(ROUTE_TYPE, self._refs(LISTENER_TYPE))
                self.client.ack(response)
            else:
                self.client.ack(response)
            self.events.append(("ack", SHORT[t], names, removed))
            endpoints = set(self.have.get(ENDPOINT_TYPE, {}))
            if (
                not listeners_requested
                and CLUSTER_TYPE in self.have
                and self.names.get(ENDPOINT_TYPE, set()) <= endpoints
            ):
                listeners_requested = True
                self.client.send(LISTENER_TYPE)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.close()

"""Envoy's apply time for a one-host change: one RouteConfiguration holding every virtual host
(what turnout sends today) against VHDS (each virtual host its own Delta xDS resource
`<route configuration>/<host>`, the RouteConfiguration only naming the VHDS source).

A minimal Delta ADS server (this script, so both designs are served by the same code) feeds a
real Envoy (`--concurrency 1`): one listener, one RouteConfiguration "main", H hosts x R routes
with direct responses. It measures, for each design and for C changes of one host's routes,
the time from the push to Envoy's ACK and to the new answer being served (polled through Envoy),
and the cold start (first push to every host served). Run from the repository root:

    PYTHONPATH=src python3 bench/vhds_bench.py --hosts 10000 --routes 5 --changes 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import platform
import secrets
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import yaml
from envoy.config.core.v3 import address_pb2, config_source_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2, scoped_route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener"
CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
VHOST_TYPE = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
SCOPE_TYPE = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
ADS = config_source_pb2.ConfigSource(ads={}, resource_api_version=config_source_pb2.V3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pack(message: Any) -> Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def host(i: int) -> str:
    return f"host-{i}.example.com"


def vhost(i: int, routes: int, generation: int, name: str) -> Any:
    return route_components_pb2.VirtualHost(
        name=name,
        domains=[host(i)],
        routes=[
            route_components_pb2.Route(
                match=route_components_pb2.RouteMatch(prefix=f"/r{j}"),
                direct_response=route_components_pb2.DirectResponseAction(
                    status=200, body={"inline_string": f"{host(i)} r{j} g{generation}"}
                ),
            )
            for j in range(routes)
        ],
    )


def listener(port: int, design: str) -> Any:
    hcm = hcm_pb2.HttpConnectionManager(
        stat_prefix="bench",
        http_filters=[
            hcm_pb2.HttpFilter(
                name="envoy.filters.http.router", typed_config=pack(router_pb2.Router())
            )
        ],
    )
    if design == "srds":
        # One scope per host, keyed by the Host header (exact); each scope its own
        # RouteConfiguration over RDS.
        scoped = hcm.scoped_routes
        scoped.name = "main"
        extractor = scoped.scope_key_builder.fragments.add().header_value_extractor
        extractor.name = ":authority"
        extractor.element_separator = ","
        extractor.index = 0
        scoped.rds_config_source.CopyFrom(ADS)
        scoped.scoped_rds.scoped_rds_config_source.CopyFrom(ADS)
    else:
        hcm.rds.CopyFrom(hcm_pb2.Rds(route_config_name="main", config_source=ADS))
    return listener_pb2.Listener(
        name="http",
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


class DeltaServer:
    """Serves `resources` (type -> name -> message) over Delta ADS to one Envoy: everything of
    a type on its first request, and `push` afterwards; records ACK times by nonce."""

    def __init__(self, resources: dict[str, dict[str, Any]]) -> None:
        self.resources = resources
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.acked: dict[str, float] = {}
        self.ack_event = asyncio.Event()
        self.subscriptions: dict[str, list[str]] = {}
        self.nacks: list[str] = []

    def response(self, type_url: str, names: list[str]) -> tuple[Any, str]:
        nonce = secrets.token_hex(8)
        out = []
        for name in names:
            data = pack(self.resources[type_url][name])
            version = hashlib.sha256(data.value).hexdigest()[:16]
            out.append(discovery_pb2.Resource(name=name, version=version, resource=data))
        return (
            discovery_pb2.DeltaDiscoveryResponse(
                type_url=type_url, resources=out, nonce=nonce, system_version_info=nonce
            ),
            nonce,
        )

    def push(self, type_url: str, names: list[str]) -> tuple[str, float]:
        response, nonce = self.response(type_url, names)
        sent = time.monotonic()
        self.queue.put_nowait(response)
        return nonce, sent

    async def wait_ack(self, nonce: str, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while nonce not in self.acked:
            self.ack_event.clear()
            await asyncio.wait_for(self.ack_event.wait(), deadline - time.monotonic())
        return self.acked[nonce]

    def on_request(self, request: Any) -> None:
        if request.response_nonce:
            if request.HasField("error_detail"):
                self.nacks.append(request.error_detail.message)
            self.acked.setdefault(request.response_nonce, time.monotonic())
            self.ack_event.set()
        subscribe = list(request.resource_names_subscribe)
        first = request.type_url not in self.subscriptions
        if first or subscribe:
            self.subscriptions.setdefault(request.type_url, []).extend(subscribe)
            available = self.resources.get(request.type_url, {})
            # Wildcard, explicit names, or (VHDS) the route configuration's name: send all.
            names = sorted(available)
            if subscribe and request.type_url != VHOST_TYPE:
                names = [n for n in subscribe if n in available]
            if names or first:  # an empty first answer ends Envoy's initial fetch
                self.queue.put_nowait(self.response(request.type_url, names)[0])

    async def StreamAggregatedResources(
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "delta only")
        yield None

    async def DeltaAggregatedResources(
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        async def read() -> None:
            async for request in requests:
                self.on_request(request)

        reader = asyncio.create_task(read())
        try:
            while True:
                yield await self.queue.get()
        finally:
            reader.cancel()


def get(port: int, host_name: str, path: str) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host_name})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except OSError:
        return 0, ""


async def until_served(port: int, host_name: str, path: str, body: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(get, port, host_name, path) == (200, body):
            return time.monotonic()
        await asyncio.sleep(0.002)
    raise TimeoutError(f"{host_name}{path} never answered {body!r}")


def bootstrap(xds_port: int, admin_port: int) -> dict[str, Any]:
    return {
        "node": {"id": "bench", "cluster": "bench"},
        "admin": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}
        },
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [{"envoy_grpc": {"cluster_name": "xds"}}],
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3"},
            "lds_config": {"ads": {}, "resource_api_version": "V3"},
        },
        "static_resources": {
            "clusters": [
                {
                    "name": "xds",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/"
                            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "xds",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "127.0.0.1",
                                                    "port_value": xds_port,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ]
        },
        "layered_runtime": {"layers": [{"name": "admin", "admin_layer": {}}]},
    }


def resources_for(design: str, hosts: int, routes: int, listen_port: int) -> dict[str, Any]:
    config = route_pb2.RouteConfiguration(name="main")
    vhosts: dict[str, Any] = {}
    if design == "srds":
        scopes, configs = {}, {}
        for i in range(hosts):
            name = f"scope/{host(i)}"
            configs[name] = route_pb2.RouteConfiguration(
                name=name, virtual_hosts=[vhost(i, routes, 0, host(i))]
            )
            scope = scoped_route_pb2.ScopedRouteConfiguration(
                name=name, route_configuration_name=name
            )
            scope.key.fragments.add().string_key = host(i)
            scopes[name] = scope
        return {
            CLUSTER_TYPE: {},
            LISTENER_TYPE: {"http": listener(listen_port, design)},
            SCOPE_TYPE: scopes,
            ROUTE_TYPE: configs,
        }
    if design == "vhds":
        config.vhds.config_source.CopyFrom(ADS)
        for i in range(hosts):
            name = f"main/{host(i)}"
            vhosts[name] = vhost(i, routes, 0, name)
    else:
        config.virtual_hosts.extend(vhost(i, routes, 0, host(i)) for i in range(hosts))
    return {
        CLUSTER_TYPE: {},
        LISTENER_TYPE: {"http": listener(listen_port, design)},
        ROUTE_TYPE: {"main": config},
        VHOST_TYPE: vhosts,
    }


async def run_design(design: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    listen_port, admin_port = free_port(), free_port()
    resources = resources_for(design, args.hosts, args.routes, listen_port)
    server = DeltaServer(resources)
    grpc_server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ]
    )
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(server, grpc_server)
    xds_port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    path = workdir / f"{design}.yaml"
    path.write_text(yaml.safe_dump(bootstrap(xds_port, admin_port)))
    envoy = shutil.which("envoy") or "envoy"
    started = time.monotonic()
    proc = subprocess.Popen(
        [envoy, "-c", str(path), "--concurrency", "1", "--use-dynamic-base-id", "-l", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        last = args.hosts - 1
        await until_served(listen_port, host(last), "/r0", f"{host(last)} r0 g0", 300)
        cold = time.monotonic() - started
        unknown = (await asyncio.to_thread(get, listen_port, "nobody.example.com", "/r0"))[0]
        acks, served = [], []
        for change in range(1, args.changes + 1):
            i = (change * 7919) % args.hosts
            if design == "srds":
                name = f"scope/{host(i)}"
                config = resources[ROUTE_TYPE][name]
                config.virtual_hosts[0].CopyFrom(vhost(i, args.routes, change, host(i)))
                nonce, sent = server.push(ROUTE_TYPE, [name])
            elif design == "vhds":
                name = f"main/{host(i)}"
                resources[VHOST_TYPE][name] = vhost(i, args.routes, change, name)
                nonce, sent = server.push(VHOST_TYPE, [name])
            else:
                config = resources[ROUTE_TYPE]["main"]
                config.virtual_hosts[i].CopyFrom(vhost(i, args.routes, change, host(i)))
                nonce, sent = server.push(ROUTE_TYPE, ["main"])
            body = f"{host(i)} r0 g{change}"
            served_at = await until_served(listen_port, host(i), "/r0", body, 120)
            acked_at = await server.wait_ack(nonce)
            acks.append(acked_at - sent)
            served.append(served_at - sent)
        new_host = "-"
        if design == "vhds":
            # A host the route configuration never had, pushed proactively (no on_demand filter).
            name = f"main/{host(args.hosts)}"
            resources[VHOST_TYPE][name] = vhost(args.hosts, args.routes, 0, name)
            server.push(VHOST_TYPE, [name])
            body = f"{host(args.hosts)} r0 g0"
            try:
                await until_served(listen_port, host(args.hosts), "/r0", body, 10)
                new_host = "served"
            except TimeoutError:
                new_host = "not served"
        return {
            "design": design,
            "cold": cold,
            "ack": statistics.median(acks),
            "ack_max": max(acks),
            "served": statistics.median(served),
            "unknown_host": unknown,
            "new_host": new_host,
            "subscriptions": {
                t.rsplit(".", 1)[-1]: sorted(n)[:3] for t, n in server.subscriptions.items()
            },
            "nacks": server.nacks,
        }
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        await grpc_server.stop(0)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--routes", type=int, default=5)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--designs", default="rds,vhds,srds")
    args = parser.parse_args()
    print(
        f"{platform.python_version()} on {os.cpu_count()} CPUs; {args.hosts} hosts x "
        f"{args.routes} routes, {args.changes} one-host changes"
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for design in args.designs.split(","):
            result = await run_design(design, args, Path(tmp))
            results.append(result)
            print(result)
    base = results[0]
    print("| design | cold start | push -> ACK (median) | push -> served (median) |")
    print("|---|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['design']} | {r['cold']:.2f} s ({r['cold'] / base['cold']:.2f}x) "
            f"| {1000 * r['ack']:.1f} ms ({r['ack'] / base['ack']:.2f}x) "
            f"| {1000 * r['served']:.1f} ms ({r['served'] / base['served']:.2f}x) |"
        )


if __name__ == "__main__":
    asyncio.run(main())

"""In process: what one HTTPProxy change among N costs after the compile, with the memos carried
over: `translate` (with its `TranslateMemo`) and `XdsServer.set_resources` (a new snapshot: what
is serialized, hashed and diffed), in CPU time (the machines are shared).

The graph stages keep unchanged pieces the very same objects (issue 11); until every stage does,
`--intern` stands in for them: each compiled graph's VirtualHosts, Listeners, Clusters and
Secrets equal to the last graph's are replaced by those objects, outside the timing. Run from
the repository root (on code without a translate memo, `translate` runs without one):

    PYTHONPATH=src python3 bench/incremental_xds.py --objects 10000 --changes 3 --intern
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import inspect
import pstats
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import change_latency as shapes
import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from incremental_compile import load

from turnout.app import default_dialects
from turnout.compile_inputs import CompileOptions
from turnout.envoy import translate as translate_module
from turnout.envoy.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SCOPED_ROUTE_TYPE,
    SECRET_TYPE,
    EnvoyResources,
)
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.xds import XdsServer
from turnout.graph.build import build_graph
from turnout.graph.memo import CompileMemo
from turnout.graph.model import RoutingGraph
from turnout.sources.parse import parse_text


def intern(graph: RoutingGraph, prev: RoutingGraph | None) -> RoutingGraph:
    """`graph` with every piece equal to `prev`'s replaced by `prev`'s object."""
    if prev is None:
        return graph
    old_listeners = {lst.name: lst for lst in prev.listeners}
    listeners = []
    for lst in graph.listeners:
        old = old_listeners.get(lst.name)
        if old is None:
            listeners.append(lst)
            continue
        hosts = {vh.name: vh for vh in old.virtual_hosts}
        vhs = tuple(hosts[vh.name] if hosts.get(vh.name) == vh else vh for vh in lst.virtual_hosts)
        new = dataclasses.replace(lst, virtual_hosts=vhs)
        listeners.append(old if new == old else new)
    clusters = {c.name: c for c in prev.clusters}
    secrets = {s.name: s for s in prev.secrets}
    return dataclasses.replace(
        graph,
        listeners=tuple(listeners),
        clusters=tuple(
            clusters[c.name] if clusters.get(c.name) == c else c for c in graph.clusters
        ),
        secrets=tuple(secrets[s.name] if secrets.get(s.name) == s else s for s in graph.secrets),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=3)
    parser.add_argument("--intern", action="store_true", help="keep equal pieces identical")
    parser.add_argument("--stream", action="store_true", help="serve one Delta ADS stream")
    parser.add_argument("--profile", action="store_true", help="cProfile the changes")
    args = parser.parse_args()
    asyncio.run(run(args))


async def run(args: argparse.Namespace) -> None:
    shape = shapes.Shape("hosts", args.objects)
    store = load(shape)
    dialects = default_dialects().all
    options, topts = CompileOptions(), TranslateOptions()
    memo = CompileMemo()
    translate: Any = translate_module.translate
    tmemo: Any = None
    if "memo" in inspect.signature(translate).parameters:
        tmemo = translate_module.TranslateMemo()  # type: ignore[attr-defined]
    server = XdsServer()
    graph = build_graph(store.snapshot(), options, dialects, memo).graph
    resources = translate(graph, topts, *([tmemo] if tmemo is not None else []))
    version = server.set_resources(resources)
    envoy = None
    if args.stream:
        port = await server.start("127.0.0.1", 0)
        envoy = FakeEnvoy(port, resources)
        if not await server.wait_acked(version, 120):
            raise SystemExit("the stream did not take the first snapshot")
    rng = random.Random(1)
    translate_s: list[float] = []
    xds_s: list[float] = []
    stream_s: list[float] = []
    profile = cProfile.Profile() if args.profile else None
    for k in range(args.changes):
        i = rng.randrange(args.objects)
        name = f"proxy-{i}.yaml"
        parsed = parse_text(shapes.proxy_text(shape, i, k + 1), name)
        old = store.snapshot()
        store.replace_partition(name, parsed.objects, parsed.problems)
        snapshot = store.snapshot()
        result = build_graph(snapshot, options, dialects, memo, store.changes(old, snapshot))
        graph = intern(result.graph, graph) if args.intern else result.graph
        if profile is not None:
            profile.enable()
        t0 = time.process_time()
        resources = translate(graph, topts, *([tmemo] if tmemo is not None else []))
        t1 = time.process_time()
        version = server.set_resources(resources)
        t2 = time.process_time()
        if envoy is not None and not await server.wait_acked(version, 30):
            raise SystemExit("the stream did not take a change")
        t3 = time.process_time()
        if profile is not None:
            profile.disable()
        translate_s.append(t1 - t0)
        xds_s.append(t2 - t1)
        stream_s.append(t3 - t2)
    line = (
        f"{args.objects} hosts, one change, CPU time p50: translate "
        f"{statistics.median(translate_s) * 1000:.1f} ms, set_resources "
        f"{statistics.median(xds_s) * 1000:.1f} ms"
    )
    if envoy is not None:
        line += (
            f", push to ACK (stream, gRPC, fake Envoy) {statistics.median(stream_s) * 1000:.1f} ms"
        )
        await envoy.stop()
        await server.stop(0)
    print(f"{line} (memo: {tmemo is not None})")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


class FakeEnvoy:
    """One Delta ADS stream subscribed to every resource of the first snapshot, ACKing every
    response at once."""

    def __init__(self, port: int, resources: EnvoyResources) -> None:
        self.channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)]
        )
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        self.call = stub.DeltaAggregatedResources(self.requests())
        wanted = {
            CLUSTER_TYPE: (),
            ENDPOINT_TYPE: [m.cluster_name for m in resources.endpoints],
            LISTENER_TYPE: (),
            SCOPED_ROUTE_TYPE: (),
            ROUTE_TYPE: [m.name for m in resources.routes],
            SECRET_TYPE: [m.name for m in resources.secrets],
        }
        for type_url, names in wanted.items():
            if type_url in (CLUSTER_TYPE, LISTENER_TYPE, SCOPED_ROUTE_TYPE) or names:
                request = discovery_pb2.DeltaDiscoveryRequest(
                    type_url=type_url, resource_names_subscribe=list(names)
                )
                request.node.id = "bench"
                self.outbox.put_nowait(request)
        self.task = asyncio.create_task(self.ack())

    async def requests(self) -> Any:
        while True:
            yield await self.outbox.get()

    async def ack(self) -> None:
        async for response in self.call:
            self.outbox.put_nowait(
                discovery_pb2.DeltaDiscoveryRequest(
                    type_url=response.type_url, response_nonce=response.nonce
                )
            )

    async def stop(self) -> None:
        self.task.cancel()
        self.call.cancel()
        await self.channel.close()


if __name__ == "__main__":
    main()

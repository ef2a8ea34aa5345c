"""turnout's ADS server, bootstrap and process supervisor against a real Envoy 1.40 on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.type.matcher.v3 import regex_pb2
from google.protobuf import any_pb2, duration_pb2

from turnout.envoy.bootstrap import bootstrap_config, write_bootstrap
from turnout.envoy.process import EnvoyProcess, envoy_binary
from turnout.envoy.resources import ROUTE_TYPE, EnvoyResources
from turnout.envoy.state import admin_node_id
from turnout.envoy.xds import XdsServer
from turnout.metrics import Metrics

pytestmark = pytest.mark.e2e

NODE = "e2e-envoy"
ADS = config_source_pb2.ConfigSource(ads={}, resource_api_version=config_source_pb2.V3)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pack(message: Any) -> Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def direct_response(
    listen_port: int, body: str, *, path_regex: str | None = None
) -> EnvoyResources:
    """A listener whose one route answers `body`, over RDS, plus an (unrouted) EDS cluster so that
    CDS, EDS, LDS and RDS all take part."""
    hcm = hcm_pb2.HttpConnectionManager(
        stat_prefix="e2e",
        rds=hcm_pb2.Rds(route_config_name="local", config_source=ADS),
        http_filters=[
            hcm_pb2.HttpFilter(
                name="envoy.filters.http.router", typed_config=pack(router_pb2.Router())
            )
        ],
    )
    listener = listener_pb2.Listener(
        name="http",
        address=address_pb2.Address(
            socket_address=address_pb2.SocketAddress(address="127.0.0.1", port_value=listen_port)
        ),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    listener_components_pb2.Filter(
                        name="envoy.filters.network.http_connection_manager", typed_config=pack(hcm)
                    )
                ]
            )
        ],
    )
    match = route_components_pb2.RouteMatch(prefix="/")
    if path_regex is not None:
        match = route_components_pb2.RouteMatch(safe_regex=regex_pb2.RegexMatcher(regex=path_regex))
    routes = route_pb2.RouteConfiguration(
        name="local",
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name="all",
                domains=["*"],
                routes=[
                    route_components_pb2.Route(
                        match=match,
                        direct_response=route_components_pb2.DirectResponseAction(
                            status=200, body=base_pb2.DataSource(inline_string=body)
                        ),
                    )
                ],
            )
        ],
    )
    cluster = cluster_pb2.Cluster(
        name="spare",
        type=cluster_pb2.Cluster.EDS,
        connect_timeout=duration_pb2.Duration(seconds=1),
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ADS),
    )
    endpoint = endpoint_components_pb2.LbEndpoint(
        endpoint=endpoint_components_pb2.Endpoint(
            address=address_pb2.Address(
                socket_address=address_pb2.SocketAddress(address="127.0.0.1", port_value=1)
            )
        )
    )
    cla = endpoint_pb2.ClusterLoadAssignment(
        cluster_name="spare",
        endpoints=[endpoint_components_pb2.LocalityLbEndpoints(lb_endpoints=[endpoint])],
    )
    return EnvoyResources(
        clusters=(cluster,), endpoints=(cla,), listeners=(listener,), routes=(routes,)
    )


@dataclass
class Stack:
    server: XdsServer
    envoy: EnvoyProcess
    metrics: Metrics
    listen_port: int
    admin_port: int


@pytest.fixture(params=["delta", "sotw"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    # Both ADS variants turnout serves, against the real Envoy.
    metrics = Metrics()
    server = XdsServer(metrics)
    xds_port = await server.start("127.0.0.1", 0)
    admin_port = free_port()
    config = bootstrap_config(
        xds_address="127.0.0.1",
        xds_port=xds_port,
        admin_address="127.0.0.1",
        admin_port=admin_port,
        node_id=NODE,
        xds_api=request.param,
    )
    envoy = EnvoyProcess(write_bootstrap(tmp_path / "envoy.yaml", config), metrics=metrics)
    await envoy.start()
    try:
        yield Stack(server, envoy, metrics, free_port(), admin_port)
    finally:
        await envoy.stop()
        await server.stop(0)


async def http_get(port: int, path: str = "/") -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=2)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def eventually(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Poll an async or sync check until it returns a truthy value (which is returned)."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return result
            last = result
        except (aiohttp.ClientError, OSError) as exc:
            last = exc
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition not reached within {timeout}s (last: {last!r})")


async def body_is(port: int, expected: str) -> bool:
    return await http_get(port) == (200, expected)


def process_gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie waiting for a reaper counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("xds_address", ["127.0.0.1", "localhost"])
def test_bootstrap_passes_envoy_validate(tmp_path: Path, xds_address: str) -> None:
    config = bootstrap_config(
        xds_address=xds_address,
        xds_port=18000,
        admin_address="127.0.0.1",
        admin_port=19000,
        node_id="validate",
    )
    path = write_bootstrap(tmp_path / "bootstrap.yaml", config)
    result = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--use-dynamic-base-id"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"configuration '{path}' OK" in output
    assert "deprecat" not in output.lower()
    assert "][warning][" not in output


async def test_envoy_serves_the_snapshot_and_survives_a_nack(stack: Stack) -> None:
    server, port = stack.server, stack.listen_port
    v1 = server.set_resources(direct_response(port, "hello from turnout"))
    assert await server.wait_acked(v1, 10)
    assert server.readiness() == (True, f"Envoy {NODE} acknowledged version {v1}")
    await eventually(lambda: body_is(port, "hello from turnout"))

    v2 = server.set_resources(direct_response(port, "never served", path_regex="("))
    await eventually(lambda: "rejected" in server.readiness()[1])
    nack = server.nacks()[-1]
    assert (nack.node, nack.type_url) == (NODE, ROUTE_TYPE)
    assert "missing )" in nack.message
    assert server.readiness() == (
        False,
        f"Envoy {NODE} rejected route version {nack.version}: {nack.message}",
    )
    assert not await server.wait_acked(v2, 0.2)
    assert (
        stack.metrics.registry.get_sample_value("turnout_xds_nacks_total", {"type": "route"}) == 1
    )
    # The old configuration keeps serving, and Envoy itself counted the rejected update.
    assert await http_get(port) == (200, "hello from turnout")
    _, stats = await http_get(stack.admin_port, "/stats?filter=rds.local.update_rejected")
    assert "http.e2e.rds.local.update_rejected: 1" in stats

    v3 = server.set_resources(direct_response(port, "fixed"))
    assert await server.wait_acked(v3, 10)
    assert server.readiness()[0]
    await eventually(lambda: body_is(port, "fixed"))
    # One Envoy served all of this: a child that died at spawn would have been restarted silently.
    assert stack.envoy.restarts == 0


async def test_envoy_is_restarted_after_a_crash_and_stopped_for_good(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnout.envoy")
    v1 = stack.server.set_resources(direct_response(stack.listen_port, "before crash"))
    assert await stack.server.wait_acked(v1, 10)
    first = stack.envoy.pid
    assert first is not None

    os.kill(first, signal.SIGKILL)
    second = await eventually(lambda: stack.envoy.pid not in (None, first) and stack.envoy.pid)
    assert stack.envoy.restarts == 1
    assert stack.metrics.registry.get_sample_value("turnout_envoy_restarts_total") == 1
    # The new Envoy fetches the configuration again and serves it.
    await eventually(lambda: body_is(stack.listen_port, "before crash"))
    await eventually(lambda: stack.server.readiness()[0])

    await stack.envoy.stop()
    assert process_gone(first) and process_gone(second)
    assert stack.envoy.pid is None
    assert stack.envoy.restarts == 1

    # Envoy's lines arrive on the `turnout.envoy` logger with Envoy's own level, except that the
    # warnings of a stop turnout asked for are INFO (tests/unit/test_cli_polish.py shows a
    # warning while running stays one).
    envoy_records = [r for r in caplog.records if r.name == "turnout.envoy"]
    assert any(
        r.levelno == logging.INFO and "caught ENVOY_SIGTERM" in r.getMessage()
        for r in envoy_records
    )
    assert not any(
        r.levelno >= logging.WARNING for r in envoy_records if "SIGTERM" in r.getMessage()
    )
    assert any(r.levelno == logging.INFO for r in envoy_records)
    assert not any(r.getMessage().startswith("[info]") for r in envoy_records)


async def test_envoy_outlives_a_killed_turnout(tmp_path: Path) -> None:
    """The data plane outlives the control plane: SIGKILL of the process supervising Envoy
    leaves Envoy running (a later turnout adopts it), and its admin is on the Unix socket."""
    config = bootstrap_config(
        xds_address="127.0.0.1",
        xds_port=free_port(),  # nobody listens: Envoy just keeps retrying
        admin_address="127.0.0.1",
        admin_port=free_port(),
        node_id="orphan-check",
        admin_socket=tmp_path / "admin.sock",
    )
    path = write_bootstrap(tmp_path / "envoy.yaml", config)
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from turnout.envoy.process import EnvoyProcess

        async def main():
            envoy = EnvoyProcess(Path(sys.argv[1]), log_level="error")
            await envoy.start()
            print(envoy.pid, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(path), stdout=asyncio.subprocess.PIPE
    )
    assert parent.stdout is not None
    envoy_pid = int(await asyncio.wait_for(parent.stdout.readline(), 10))
    try:
        assert not process_gone(envoy_pid)
        parent.kill()  # no stop(): as after a crash or an OOM kill
        await parent.wait()
        await asyncio.sleep(2)
        assert not process_gone(envoy_pid)
        assert admin_node_id(tmp_path / "admin.sock") == "orphan-check"
        assert stat.S_IMODE((tmp_path / "admin.sock").stat().st_mode) == 0o600
    finally:
        if not process_gone(envoy_pid):
            os.kill(envoy_pid, signal.SIGKILL)

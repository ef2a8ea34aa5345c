"""Access logs and OpenTelemetry tracing through the session Envoy: `--access-log PATH` in JSON
and text writes the request's line into the file, and `--tracing-collector` exports its span
over OTLP/gRPC to a collector (a minimal TraceService in the test) with the service name and
the request's method and URL (docs/observability.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.e2e.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOST = "telemetry.e2e.example.com"
PROXY = f"""\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: telemetry, namespace: default}}
spec:
  virtualhost: {{fqdn: {HOST}}}
  routes:
    - services: [{{name: app, port: 80}}]
"""
TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


async def apply(harness: Harness, options: dict[str, Any]) -> None:
    services = await harness.services(("default", "app"))
    await harness.apply({"svc.yaml": services, "proxy.yaml": PROXY}, options=options)


async def eventually_line(path: Path, wanted: Callable[[str], bool], timeout: float = 10.0) -> str:
    """The first line of `path` that `wanted` accepts; Envoy flushes its file logs every second."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        found = [line for line in lines if wanted(line)]
        if found:
            return found[0]
        assert loop.time() < deadline, f"no such line in {path}: {lines}"
        await asyncio.sleep(0.2)


async def test_json_access_log_file_has_contours_fields(harness: Harness, tmp_path: Path) -> None:
    log = tmp_path / "access.json"
    await apply(harness, {"access_log": str(log), "access_log_format": "json"})
    r = await harness.get(HOST, "/logged/json?x=1", headers={"User-Agent": "e2e-agent"})
    assert r.status_code == 200
    line = await eventually_line(log, lambda s: "/logged/json" in s)
    entry = json.loads(line)
    assert entry["method"] == "GET"
    assert entry["path"] == "/logged/json?x=1"
    assert str(entry["response_code"]) == "200"
    assert entry["authority"] == HOST
    assert entry["user_agent"] == "e2e-agent"
    assert entry["upstream_cluster"].startswith("default/app/80/")
    assert entry["protocol"] == "HTTP/1.1"
    assert entry["request_id"]
    assert "@timestamp" in entry and "duration" in entry


async def test_text_access_log_file_has_envoys_default_line(
    harness: Harness, tmp_path: Path
) -> None:
    log = tmp_path / "access.txt"
    await apply(harness, {"access_log": str(log), "access_log_format": "text"})
    r = await harness.get(HOST, "/logged/text")
    assert r.status_code == 200
    line = await eventually_line(log, lambda s: "/logged/text" in s)
    assert line.startswith("[")
    assert '"GET /logged/text HTTP/1.1" 200 ' in line
    assert line.endswith(f'"{HOST}" "127.0.0.1:{await harness.backend("default", "app")}"')


@pytest_asyncio.fixture(loop_scope="session")
async def collector() -> AsyncIterator[tuple[int, list[Any]]]:
    """A minimal OTLP/gRPC trace collector on loopback: (its port, the requests it received)."""
    received: list[Any] = []

    async def export(request: Any, context: Any) -> Any:
        received.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    handler = grpc.method_handlers_generic_handler(
        TRACE_SERVICE,
        {
            "Export": grpc.unary_unary_rpc_method_handler(
                export,
                request_deserializer=trace_service_pb2.ExportTraceServiceRequest.FromString,
                response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port, received
    finally:
        await server.stop(None)


def attributes(kvs: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in kvs}


def spans(received: list[Any]) -> list[tuple[dict[str, str], Any]]:
    """Every span received, with its resource's attributes."""
    out = []
    for request in received:
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            # Field 2 is `scope_spans`; the OTLP protos xds-protos ships predate its renaming
            # from `instrumentation_library_spans`, which has the same wire format.
            scoped = resource_spans.DESCRIPTOR.fields_by_number[2].name
            for scope_spans in getattr(resource_spans, scoped):
                out.extend((resource, span) for span in scope_spans.spans)
    return out


def traced_spans(received: list[Any]) -> list[tuple[dict[str, str], Any]]:
    return [
        (resource, span)
        for resource, span in spans(received)
        if "/traced/" in attributes(span.attributes).get("http.url", "")
    ]


async def test_tracing_exports_the_requests_span_to_the_collector(
    harness: Harness, collector: tuple[int, list[Any]]
) -> None:
    port, received = collector
    await apply(
        harness,
        {
            "tracing_collector": f"127.0.0.1:{port}",
            "tracing_service_name": "turnout-e2e",
            "tracing_sampling_rate": 100.0,
        },
    )
    # Envoy exports once 5 spans are buffered, or every 5 seconds.
    for i in range(5):
        r = await harness.get(HOST, f"/traced/{i}", method="POST")
        assert r.status_code == 200
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while len(traced := traced_spans(received)) < 5:
        assert loop.time() < deadline, f"spans of /traced/*: {traced}"
        await asyncio.sleep(0.2)
    for resource, span in traced:
        tags = attributes(span.attributes)
        assert resource["service.name"] == "turnout-e2e"
        assert tags["http.method"] == "POST"
        assert tags["http.url"].startswith(f"http://{HOST}/traced/")
        assert tags["http.status_code"] == "200"
        assert tags["upstream_cluster"].startswith("default/app/80/")
        assert len(span.trace_id) == 16
    assert len({s.trace_id for _, s in traced}) == 5

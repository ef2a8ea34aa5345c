"""Access logs and OpenTelemetry tracing: translation (every HTTP connection manager and TCP
proxy) and the flags that set them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from envoy.config.trace.v3 import opentelemetry_pb2
from envoy.extensions.access_loggers.file.v3 import file_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from tests.cases.tcp_tls import DB, OWNER, every_tls_feature_graph, vhost
from turnout.app import translate_options
from turnout.cli import build_parser, serve_config
from turnout.compile_inputs import ListenerProtocol
from turnout.config import ServeConfig
from turnout.envoy.resources import EnvoyResources
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.translate.options import AccessLog, AccessLogFormat, Tracing
from turnout.graph.model import Listener, RoutingGraph, TCPProxy, TLSTermination, WeightedCluster

HCM = "envoy.filters.network.http_connection_manager"
TCP_PROXY = "envoy.filters.network.tcp_proxy"


def every_listener_graph() -> RoutingGraph:
    """HTTPS with TLS hosts, TCP proxies and the fallback chain, plus plain HTTP and TCP."""
    tls_graph = every_tls_feature_graph()
    plain = vhost("plain.example.com", TLSTermination("unused"))
    http = Listener(
        "ingress_http",
        "127.0.0.1",
        8080,
        ListenerProtocol.HTTP,
        (dataclasses.replace(plain, tls=None),),
    )
    tcp_proxy = TCPProxy("", "", (WeightedCluster(DB.name, 1),), OWNER)
    tcp = Listener("tcp-5432", "127.0.0.1", 5432, ListenerProtocol.TCP, (), (tcp_proxy,))
    return dataclasses.replace(tls_graph, listeners=(*tls_graph.listeners, http, tcp))


def network_filters(resources: EnvoyResources) -> list[tuple[str, Any]]:
    """Every HCM and `tcp_proxy` of every chain, unpacked, with the chain's name."""
    out = []
    for listener in resources.listeners:
        for chain in listener.filter_chains:
            for flt in chain.filters:
                msg: Any = hcm_pb2.HttpConnectionManager() if flt.name == HCM else None
                if flt.name == TCP_PROXY:
                    msg = tcp_proxy_pb2.TcpProxy()
                assert msg is not None, flt.name
                flt.typed_config.Unpack(msg)
                out.append((f"{listener.name}/{chain.name}", msg))
    return out


def test_every_connection_manager_and_tcp_proxy_logs_to_stdout_in_json() -> None:
    res = translate(every_listener_graph(), TranslateOptions(access_log=AccessLog()))
    filters = network_filters(res)
    kinds = {type(msg).__name__ for _, msg in filters}
    assert kinds == {"HttpConnectionManager", "TcpProxy"}
    assert len(filters) >= 7  # http, 3 TLS hosts + fallback, 2 SNI TCP proxies, the TCP port
    for where, msg in filters:
        (log,) = msg.access_log
        assert log.name == "envoy.access_loggers.stdout", where
        stdout = stream_pb2.StdoutAccessLog()
        log.typed_config.Unpack(stdout)
        fields = stdout.log_format.json_format.fields
        assert fields["method"].string_value == "%REQ(:METHOD)%"
        assert fields["response_code"].string_value == "%RESPONSE_CODE%"
        assert fields["@timestamp"].string_value == "%START_TIME%"
        assert fields["upstream_cluster"].string_value == "%UPSTREAM_CLUSTER%"


def test_a_path_is_a_file_logger_and_text_is_envoys_default_line(tmp_path: Path) -> None:
    path = str(tmp_path / "access.log")
    options = TranslateOptions(access_log=AccessLog(path=path, format=AccessLogFormat.TEXT))
    for where, msg in network_filters(translate(every_listener_graph(), options)):
        (log,) = msg.access_log
        assert log.name == "envoy.access_loggers.file", where
        file_log = file_pb2.FileAccessLog()
        log.typed_config.Unpack(file_log)
        assert file_log.path == path
        text = file_log.log_format.text_format_source.inline_string
        assert text.startswith('[%START_TIME%] "%REQ(:METHOD)% ')
        assert text.endswith('"%UPSTREAM_HOST%"\n')


def test_no_access_log_and_no_tracing_by_default() -> None:
    res = translate(every_listener_graph())
    for _, msg in network_filters(res):
        assert not msg.access_log
        if isinstance(msg, hcm_pb2.HttpConnectionManager):
            assert not msg.HasField("tracing")
    assert not [c for c in res.clusters if c.name.startswith("turnout-tracing/")]


def test_tracing_on_every_connection_manager_through_an_h2_collector_cluster() -> None:
    tracing = Tracing("10.0.0.7", 4317, service_name="edge", sampling_percent=2.5)
    res = translate(every_listener_graph(), TranslateOptions(tracing=tracing))
    hcms = [m for _, m in network_filters(res) if isinstance(m, hcm_pb2.HttpConnectionManager)]
    assert len(hcms) >= 5
    for hcm in hcms:
        assert hcm.tracing.provider.name == "envoy.tracers.opentelemetry"
        assert hcm.tracing.random_sampling.value == 2.5
        otel = opentelemetry_pb2.OpenTelemetryConfig()
        hcm.tracing.provider.typed_config.Unpack(otel)
        assert otel.service_name == "edge"
        assert otel.grpc_service.envoy_grpc.cluster_name == "turnout-tracing/10.0.0.7:4317"
    (cluster,) = [c for c in res.clusters if c.name == "turnout-tracing/10.0.0.7:4317"]
    (lb,) = cluster.load_assignment.endpoints[0].lb_endpoints
    assert lb.endpoint.address.socket_address.address == "10.0.0.7"
    assert lb.endpoint.address.socket_address.port_value == 4317
    protocol = http_protocol_options_pb2.HttpProtocolOptions()
    cluster.typed_extension_protocol_options[
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ].Unpack(protocol)
    assert protocol.explicit_http_config.HasField("http2_protocol_options")


def test_a_collector_named_by_dns_is_resolved_by_envoy() -> None:
    res = translate(every_listener_graph(), TranslateOptions(tracing=Tracing("otel.local", 4317)))
    (cluster,) = [c for c in res.clusters if c.name.startswith("turnout-tracing/")]
    assert cluster.cluster_type.name == "envoy.cluster.dns"
    (lb,) = cluster.load_assignment.endpoints[0].lb_endpoints
    assert lb.endpoint.address.socket_address.address == "otel.local"


def test_flag_defaults_log_json_to_stdout_and_trace_nothing(tmp_path: Path) -> None:
    config = serve_config(build_parser().parse_args(["serve", str(tmp_path)]))
    assert (config.access_log, config.access_log_format) == ("stdout", "json")
    assert config.tracing_collector == ""
    options = translate_options(config)
    assert options.access_log == AccessLog(path=None, format=AccessLogFormat.JSON)
    assert options.tracing is None
    # `check` and `explain` take the flags too (one set of flags fits all three).
    check = serve_config(build_parser().parse_args(["check", str(tmp_path)]))
    assert translate_options(check) == options


def test_flags_reach_the_translate_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            str(tmp_path),
            "--access-log",
            "/var/log/envoy/access.log",
            "--access-log-format",
            "text",
            "--tracing-collector",
            "[::1]:4317",
            "--tracing-service-name",
            "edge",
            "--tracing-sampling-rate",
            "1",
        ]
    )
    options = translate_options(serve_config(args))
    assert options.access_log == AccessLog("/var/log/envoy/access.log", AccessLogFormat.TEXT)
    assert options.tracing == Tracing("::1", 4317, service_name="edge", sampling_percent=1.0)
    off = build_parser().parse_args(["serve", str(tmp_path), "--access-log", "off"])
    assert translate_options(serve_config(off)).access_log is None


@pytest.mark.parametrize(
    "flags",
    [
        ["--tracing-collector", "collector"],
        ["--tracing-collector", "collector:0"],
        ["--tracing-collector", ":4317"],
        ["--tracing-sampling-rate", "101"],
        ["--tracing-sampling-rate", "nan"],
        ["--access-log-format", "xml"],
        ["--access-log", ""],
    ],
)
def test_bad_telemetry_flags_are_refused(flags: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", str(tmp_path), *flags])


def test_serve_config_defaults_match_the_flags() -> None:
    defaults = ServeConfig(paths=())
    assert translate_options(defaults).access_log == AccessLog()
    assert translate_options(defaults).tracing is None

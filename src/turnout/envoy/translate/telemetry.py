"""Access logs and OpenTelemetry tracing: the parts of every HTTP connection manager and TCP
proxy that do not depend on the routing graph (`TranslateOptions.access_log`, `.tracing`).

**Access log.** One logger per HCM and per `tcp_proxy`: Envoy's stdout logger, or its file
logger for a path. The JSON format uses Contour's field names and operators (Contour's
`DefaultFields`, `pkg/config/parameters.go`), so dashboards and queries written for Contour's
`accesslog-format: json` read turnout's lines unchanged. The text format is Envoy's own default
line, written out so that the documentation and the configuration cannot drift apart.
HTTP-only operators (method, path, ...) read `-` on a TCP proxy's line.

**Tracing.** Envoy's OpenTelemetry tracer exports spans over OTLP/gRPC through the cluster
`tracing_cluster_name` (built in `clusters.tracing_cluster`, HTTP/2 since OTLP/gRPC is gRPC).
`random_sampling` is the share of requests without an earlier sampling decision (a traced
client's `traceparent` keeps its own) that are traced.
"""

from __future__ import annotations

from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import substitution_format_string_pb2
from envoy.config.trace.v3 import http_tracer_pb2, opentelemetry_pb2
from envoy.extensions.access_loggers.file.v3 import file_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.envoy.translate.common import pack
from turnout.envoy.translate.options import AccessLog, AccessLogFormat, Tracing

STDOUT_ACCESS_LOG = "envoy.access_loggers.stdout"
FILE_ACCESS_LOG = "envoy.access_loggers.file"
OPENTELEMETRY_TRACER = "envoy.tracers.opentelemetry"

# Contour's default JSON fields, in its order, with its operators.
JSON_FIELDS: tuple[tuple[str, str], ...] = (
    ("@timestamp", "%START_TIME%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("duration", "%DURATION%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("uber_trace_id", "%REQ(UBER-TRACE-ID)%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    ("upstream_service_time", "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%"),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("grpc_status", "%GRPC_STATUS%"),
    ("grpc_status_number", "%GRPC_STATUS_NUMBER%"),
)

# Envoy's default access log format (docs: "Default format string").
TEXT_FORMAT = (
    '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" '
    "%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% "
    '%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" '
    '"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"\n'
)


def access_logs(access_log: AccessLog | None) -> list[Any]:
    """The `access_log` entries of an HCM or a `tcp_proxy`: none, or the one logger."""
    if access_log is None:
        return []
    log_format = _log_format(access_log.format)
    if access_log.path is None:
        logger: Any = stream_pb2.StdoutAccessLog(log_format=log_format)
        name = STDOUT_ACCESS_LOG
    else:
        logger = file_pb2.FileAccessLog(path=access_log.path, log_format=log_format)
        name = FILE_ACCESS_LOG
    return [accesslog_pb2.AccessLog(name=name, typed_config=pack(logger))]


def _log_format(fmt: AccessLogFormat) -> Any:
    out = substitution_format_string_pb2.SubstitutionFormatString()
    if fmt is AccessLogFormat.JSON:
        for field, operator in JSON_FIELDS:
            out.json_format.fields[field].string_value = operator
    else:
        out.text_format_source.inline_string = TEXT_FORMAT
    return out


def tracing_cluster_name(tracing: Tracing) -> str:
    """Service clusters are `namespace/service/port/hash` and JWKS ones `turnout-jwks/...`, so
    this name meets neither."""
    return f"turnout-tracing/{tracing.collector_host}:{tracing.collector_port}"


def hcm_tracing(tracing: Tracing) -> Any:
    """The HCM's `tracing`: the OpenTelemetry tracer and the sampling rate."""
    otel = opentelemetry_pb2.OpenTelemetryConfig(service_name=tracing.service_name)
    otel.grpc_service.envoy_grpc.cluster_name = tracing_cluster_name(tracing)
    out = hcm_pb2.HttpConnectionManager.Tracing()
    out.provider.CopyFrom(
        http_tracer_pb2.Tracing.Http(name=OPENTELEMETRY_TRACER, typed_config=pack(otel))
    )
    out.random_sampling.value = tracing.sampling_percent
    return out

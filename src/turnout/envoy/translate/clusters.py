"""Graph clusters -> EDS Clusters and their ClusterLoadAssignments.

Upstream protocols handled here: HTTP (HTTP/1.1, Envoy's default, so no options) and H2C (HTTP/2
in clear text, via `HttpProtocolOptions.explicit_http_config`). TLS upstreams (TLS, H2) gain their
`UpstreamTlsContext` with the policies issue; until then TLS is sent as plain HTTP/1.1 and H2 as
h2c, which keeps the cluster shape stable so that issue only adds a transport socket. TCP clusters
need no HTTP options.
"""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from turnout.envoy.translate.common import ads_config_source, duration, pack
from turnout.envoy.translate.options import TranslateOptions
from turnout.graph.model import Cluster, UpstreamProtocol

HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

_HTTP2_PROTOCOLS = frozenset({UpstreamProtocol.H2C, UpstreamProtocol.H2})


def translate_cluster(cluster: Cluster, options: TranslateOptions) -> Any:
    """An EDS cluster named like the graph cluster; its endpoints come as a separate resource."""
    out = cluster_pb2.Cluster(
        name=cluster.name,
        type=cluster_pb2.Cluster.EDS,
        connect_timeout=duration(options.connect_timeout_s),
        lb_policy=cluster_pb2.Cluster.ROUND_ROBIN,
    )
    out.eds_cluster_config.eds_config.CopyFrom(ads_config_source())
    out.eds_cluster_config.service_name = cluster.name
    if cluster.protocol in _HTTP2_PROTOCOLS:
        out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(
            pack(_http2_protocol_options())
        )
    return out


def _http2_protocol_options() -> Any:
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    opts.explicit_http_config.http2_protocol_options.SetInParent()
    return opts


def translate_load_assignment(cluster: Cluster) -> Any:
    """The endpoints of `cluster` in one (unnamed) locality, sorted.

    No endpoints gives a CLA without localities: Envoy then answers 503 "no healthy upstream",
    which is what a Service without ready endpoints should do.
    """
    cla = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster.name)
    if not cluster.endpoints:
        return cla
    locality = cla.endpoints.add()
    for ep in sorted(set(cluster.endpoints)):
        lb = endpoint_components_pb2.LbEndpoint()
        lb.endpoint.address.socket_address.address = ep.address
        lb.endpoint.address.socket_address.port_value = ep.port
        locality.lb_endpoints.append(lb)
    return cla

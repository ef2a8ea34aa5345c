"""Global rate limiting: Envoy's `envoy.filters.http.ratelimit` asking the operator's rate limit
service (`TranslateOptions.rate_limit_service`, `--rate-limit-service`), and the rate limit
actions of virtual hosts and routes (`GlobalRateLimit`), as Contour programs them
(`internal/envoy/v3/ratelimit.go`).

The filter is on every HTTP connection manager while a service is configured, after the local
rate limiter; it calls the service only for requests whose route or virtual host has actions, so
adding a policy changes route tables only. Envoy applies a virtual host's actions to a route
without actions of its own (`vh_rate_limits: OVERRIDE`, Envoy's default); a route opting out
(`disabled`) sets `IGNORE`. Only routes that forward are asked about: Envoy does not rate limit
redirects and direct responses globally.

The service is reached over gRPC (HTTP/2 in clear text) through the cluster
`rate_limit_cluster_name` (built in `clusters.rate_limit_cluster`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envoy.config.core.v3 import config_source_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from turnout.compile_inputs import RateLimitService
from turnout.envoy.translate.common import duration, pack
from turnout.graph.model import (
    DescriptorEntry,
    GenericKeyEntry,
    GlobalRateLimit,
    HeaderMatch,
    HeaderValueMatchEntry,
    RateLimitDescriptor,
    RemoteAddressEntry,
    RequestHeaderEntry,
)

RATELIMIT_FILTER = "envoy.filters.http.ratelimit"

HeaderMatcher = Callable[[HeaderMatch], Any]


def rate_limit_cluster_name(service: RateLimitService) -> str:
    """The cluster of the rate limit service; Service clusters are `namespace/service/...`, so
    the names never meet."""
    return f"turnout-ratelimit/{service.host}:{service.port}"


def rate_limit_filter(service: RateLimitService) -> Any:
    """The HCM's `envoy.filters.http.ratelimit`: the domain every request names, fail open or
    closed (`failure_mode_deny`), the X-RateLimit headers and RESOURCE_EXHAUSTED for gRPC when
    asked for."""
    config = rate_limit_pb2.RateLimit(
        domain=service.domain,
        failure_mode_deny=not service.fail_open,
        rate_limited_as_resource_exhausted=service.resource_exhausted,
        timeout=duration(service.timeout_s),
    )
    if service.x_ratelimit_headers:
        config.enable_x_ratelimit_headers = rate_limit_pb2.RateLimit.DRAFT_VERSION_03
    rls = config.rate_limit_service
    rls.grpc_service.envoy_grpc.cluster_name = rate_limit_cluster_name(service)
    rls.transport_api_version = config_source_pb2.ApiVersion.V3
    return hcm_pb2.HttpFilter(name=RATELIMIT_FILTER, typed_config=pack(config))


def rate_limits(policy: GlobalRateLimit, header_matcher: HeaderMatcher) -> list[Any]:
    """One Envoy `RateLimit` (a list of actions) per descriptor. `header_matcher` translates
    the graph's header matches (the route translator's own, so both match alike)."""
    return [_rate_limit(d, header_matcher) for d in policy.descriptors]


def opt_out() -> Any:
    """A route's per-filter configuration ignoring its virtual host's actions."""
    return pack(
        rate_limit_pb2.RateLimitPerRoute(vh_rate_limits=rate_limit_pb2.RateLimitPerRoute.IGNORE)
    )


def _rate_limit(descriptor: RateLimitDescriptor, header_matcher: HeaderMatcher) -> Any:
    out = rc.RateLimit()
    for entry in descriptor.entries:
        out.actions.append(_action(entry, header_matcher))
    return out


def _action(entry: DescriptorEntry, header_matcher: HeaderMatcher) -> Any:
    action = rc.RateLimit.Action()
    if isinstance(entry, RemoteAddressEntry):
        action.remote_address.SetInParent()
    elif isinstance(entry, RequestHeaderEntry):
        action.request_headers.header_name = entry.header_name
        action.request_headers.descriptor_key = entry.descriptor_key
    elif isinstance(entry, GenericKeyEntry):
        action.generic_key.descriptor_key = entry.key
        action.generic_key.descriptor_value = entry.value
    elif isinstance(entry, HeaderValueMatchEntry):
        match = action.header_value_match
        match.descriptor_value = entry.value
        match.expect_match.value = entry.expect_match
        match.headers.extend(header_matcher(h) for h in entry.headers)
    return action

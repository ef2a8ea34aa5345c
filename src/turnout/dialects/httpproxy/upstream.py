"""HTTPProxy's upstream policies: how a route's services are talked to.

Read from the spec (`read_service_upstream`, `read_route_upstream`, called by `spec.py`'s reader)
and turned into `UpstreamSettings` for the `BackendResolver` (`service_settings`, called by
`processor.py` for each resolved service):

- `services[].protocol` (`h2`, `h2c`, `tls`; seed 001's `http`, `https`, `http2`, `https2` as
  turnout's aliases), else the port's `appProtocol`, else the Service annotations
  `projectcontour.io/upstream-protocol.{h2,h2c,tls}`, as Contour decides;
- `services[].validation{caSecret, subjectName, subjectNames}`: the upstream certificate must
  chain to the CA bundle and carry one of the names (Contour's `TLSUpstreamValidation` and
  `CACertificateNotDelegated` errors);
- `services[].slowStartPolicy{window, aggression, minWeightPercent}` (`SlowStartInvalid`);
- `routes[].failurePolicy{count, perTryTimeout, passiveHealthCheckEnabled, retryPolicyEnabled}`,
  seed 001's successor of `retryPolicy` that Contour never shipped: turnout's extension. Its
  passive health check is outlier detection on every service of the route; its retries apply
  only when the route has no `retryPolicy` of its own.

Nothing here imports `spec.py` (which imports this module): the reader is a protocol, and
problems are plain (type, reason, message) triples.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnout.dialects.contour.names import namespaced_name
from turnout.dialects.fields import NANOS_PER_SECOND, go_duration_seconds, parse_go_duration
from turnout.dialects.httpproxy.status_names import (
    IGNORED_FIELD,
    SERVICE_ERROR,
    SPEC_ERROR,
    TLS_ERROR,
)
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import (
    LoadBalancerStrategy,
    OutlierDetection,
    RetryPolicy,
    RoutePolicies,
    SlowStart,
    UpstreamProtocol,
    UpstreamSettings,
    UpstreamValidation,
)
from turnout.graph.services import ServicePort, Unresolved
from turnout.objects import KubeObject

# `protocol` values: Contour's, then seed 001's names for the same protocols.
PROTOCOLS: dict[str, UpstreamProtocol] = {
    "h2": UpstreamProtocol.H2,
    "h2c": UpstreamProtocol.H2C,
    "tls": UpstreamProtocol.TLS,
    "http": UpstreamProtocol.HTTP,
    "https": UpstreamProtocol.TLS,
    "http2": UpstreamProtocol.H2C,
    "https2": UpstreamProtocol.H2,
    # Seed 001's `tcp`: only a root's TCP route (`tcp_route.py`) or a tcpproxy service gets here.
    "tcp": UpstreamProtocol.TCP,
}
_ANNOTATED = {"h2": UpstreamProtocol.H2, "h2c": UpstreamProtocol.H2C, "tls": UpstreamProtocol.TLS}
PROTOCOL_ANNOTATION = "projectcontour.io/upstream-protocol."
# Contour's `toContourProtocol`: a port's appProtocol decides alone when it is set; values it does
# not know mean plain HTTP.
_APP_PROTOCOLS = {"kubernetes.io/h2c": UpstreamProtocol.H2C, "https": UpstreamProtocol.TLS}

MAX_SUBJECT_NAMES = 8  # the CRD's maxItems
_SLOW_START_STRATEGIES = (
    LoadBalancerStrategy.ROUND_ROBIN,
    LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
)

Problem = tuple[str, str, str]  # (type, reason, message)


class Reader(Protocol):
    """What `spec.py`'s `_Reader` offers; every problem lands in its list with its field path."""

    def error(self, message: str, reason: str = ...) -> None: ...

    def mapping(self, value: Any, path: str) -> dict[str, Any] | None: ...

    def check_fields(
        self,
        m: Mapping[str, Any],
        path: str,
        known: frozenset[str],
        ignored: frozenset[str] = ...,
        refused: frozenset[str] = ...,
    ) -> None: ...

    def string(self, m: Mapping[str, Any], key: str, path: str, required: bool = False) -> str: ...

    def boolean(self, m: Mapping[str, Any], key: str, path: str) -> bool: ...

    def integer(self, m: Mapping[str, Any], key: str, path: str, required: bool = False) -> int: ...

    def items(self, m: Mapping[str, Any], key: str, path: str) -> list[tuple[str, Any]]: ...


class WarningReader(Reader, Protocol):
    """`spec._Reader`: warnings go straight into its list of problems."""

    problems: list[Any]


# --- the spec ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidationSpec:
    ca_secret: str
    subject_name: str
    subject_names: tuple[str, ...]
    field: str


@dataclass(frozen=True, slots=True)
class SlowStartSpec:
    window: str
    aggression: str  # "" means Contour's default "1.0"
    min_weight_percent: int  # 10 when unset, the CRD's default


@dataclass(frozen=True, slots=True)
class ServiceUpstream:
    """The upstream fields of one `routes[].services[]` entry."""

    validation: ValidationSpec | None = None
    slow_start: SlowStartSpec | None = None


@dataclass(frozen=True, slots=True)
class FailurePolicySpec:
    count: int = 1
    per_try_timeout: str = ""
    passive_health_check: bool = True
    retry_policy: bool = True
    field: str = ""


@dataclass(frozen=True, slots=True)
class RouteUpstream:
    """The upstream fields of one route."""

    failure_policy: FailurePolicySpec | None = None
    # Whether the route has a `retryPolicy`, which wins over failurePolicy's retries.
    has_retry_policy: bool = False


# Shared defaults: the records are frozen.
NO_SERVICE_UPSTREAM = ServiceUpstream()
NO_ROUTE_UPSTREAM = RouteUpstream()

SERVICE_FIELDS = frozenset({"validation", "slowStartPolicy"})
ROUTE_FIELDS = frozenset({"failurePolicy"})
_VALIDATION_FIELDS = frozenset({"caSecret", "subjectName", "subjectNames"})
_SLOW_START_FIELDS = frozenset({"window", "aggression", "minWeightPercent"})
_FAILURE_FIELDS = frozenset(
    {"count", "perTryTimeout", "passiveHealthCheckEnabled", "retryPolicyEnabled"}
)
# The CRD's pattern for `aggression`.
_AGGRESSION = re.compile(r"([0-9]+([.][0-9]+)?|[.][0-9]+)")


def read_service_upstream(r: Reader, m: Mapping[str, Any], path: str) -> ServiceUpstream:
    validation = None
    if m.get("validation") is not None:
        validation = read_validation(r, m["validation"], f"{path}.validation")
    slow_start = None
    if m.get("slowStartPolicy") is not None:
        slow_start = _slow_start(r, m["slowStartPolicy"], f"{path}.slowStartPolicy")
    return ServiceUpstream(validation=validation, slow_start=slow_start)


def read_validation(r: Reader, value: Any, path: str) -> ValidationSpec | None:
    """A `validation` block (services, and JWT providers' `remoteJWKS`)."""
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _VALIDATION_FIELDS)
    ca_secret = r.string(m, "caSecret", path, required=True)
    # Not required here: Contour reports a missing subjectName as TLSUpstreamValidation.
    subject_name = r.string(m, "subjectName", path)
    names: list[str] = []
    for p, v in r.items(m, "subjectNames", path):
        if not isinstance(v, str) or not v:
            r.error(f"{p}: must be a non-empty string")
            continue
        names.append(v)
    if len(names) > MAX_SUBJECT_NAMES:
        r.error(f"{path}.subjectNames: must have at most {MAX_SUBJECT_NAMES} items")
    return ValidationSpec(ca_secret, subject_name, tuple(names), path)


def _slow_start(r: Reader, value: Any, path: str) -> SlowStartSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _SLOW_START_FIELDS)
    window = r.string(m, "window", path, required=True)
    aggression = r.string(m, "aggression", path)
    if aggression and not _AGGRESSION.fullmatch(aggression):
        r.error(
            f'{path}.aggression: must match "^([0-9]+([.][0-9]+)?|[.][0-9]+)$", got "{aggression}"'
        )
    percent = r.integer(m, "minWeightPercent", path) if "minWeightPercent" in m else 10
    if not 0 <= percent <= 100:
        r.error(f"{path}.minWeightPercent: must be in the range 0-100, got {percent}")
        percent = 10
    return SlowStartSpec(window, aggression, percent)


def read_route_upstream(r: Reader, m: Mapping[str, Any], path: str) -> RouteUpstream:
    failure = None
    if m.get("failurePolicy") is not None:
        failure = _failure_policy(r, m["failurePolicy"], f"{path}.failurePolicy")
    return RouteUpstream(failure_policy=failure, has_retry_policy=m.get("retryPolicy") is not None)


def _failure_policy(r: Reader, value: Any, path: str) -> FailurePolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _FAILURE_FIELDS)
    count = r.integer(m, "count", path) if "count" in m else 1
    if count < -1:
        r.error(f"{path}.count: must be greater than or equal to -1, got {count}")
        count = 1
    return FailurePolicySpec(
        count=count,
        per_try_timeout=r.string(m, "perTryTimeout", path),
        # Seed 001: both halves are on unless switched off; `false` is an explicit choice here.
        passive_health_check=_flag(r, m, "passiveHealthCheckEnabled", path),
        retry_policy=_flag(r, m, "retryPolicyEnabled", path),
        field=path,
    )


def _flag(r: Reader, m: Mapping[str, Any], key: str, path: str) -> bool:
    return r.boolean(m, key, path) if m.get(key) is not None else True


# --- compiling -----------------------------------------------------------------------------------


def service_protocol(service: KubeObject, port: ServicePort) -> UpstreamProtocol:
    """The protocol a Service port declares (Contour's `upstreamProtocol`): its `appProtocol`
    when set, else the `projectcontour.io/upstream-protocol.{h2,h2c,tls}` annotations, each
    listing port names or numbers (a later protocol in that order wins for a port in several)."""
    if port.app_protocol is not None:
        return _APP_PROTOCOLS.get(port.app_protocol, UpstreamProtocol.HTTP)
    by_port: dict[str, UpstreamProtocol] = {}
    annotations = service.annotations
    for name, protocol in _ANNOTATED.items():
        value = annotations.get(PROTOCOL_ANNOTATION + name)
        if not isinstance(value, str):
            continue
        for item in value.split(","):
            if item.strip():
                by_port[item.strip()] = protocol
    return by_port.get(port.name) or by_port.get(str(port.port)) or UpstreamProtocol.HTTP


def service_settings(
    *,
    service: KubeObject,
    port: ServicePort,
    name: str,
    requested_port: int,
    protocol: str,
    upstream: ServiceUpstream,
    route: RouteUpstream,
    lb_strategy: LoadBalancerStrategy,
    ca_bundles: CABundleResolver,
    namespace: str,
) -> UpstreamSettings | Problem:
    """The settings of one service of a route, or the error that drops the proxy's routes
    (Contour's order: protocol, validation, slow start)."""
    if protocol:
        chosen = PROTOCOLS.get(protocol)
        if chosen is None:
            return (SERVICE_ERROR, "UnsupportedProtocol", f"unsupported protocol: {protocol}")
    else:
        chosen = service_protocol(service, port)
    validation: UpstreamValidation | None = None
    if upstream.validation is not None and chosen in (UpstreamProtocol.TLS, UpstreamProtocol.H2):
        checked = _upstream_validation(
            upstream.validation, name, requested_port, ca_bundles, namespace
        )
        if not isinstance(checked, UpstreamValidation):
            return checked
        validation = checked
    slow_start: SlowStart | None = None
    if upstream.slow_start is not None:
        if lb_strategy not in _SLOW_START_STRATEGIES:
            return (
                SERVICE_ERROR,
                "SlowStartInvalid",
                "slow start is only supported with RoundRobin or WeightedLeastRequest load "
                "balancer strategy",
            )
        parsed = _slow_start_config(upstream.slow_start)
        if isinstance(parsed, str):
            return (SERVICE_ERROR, "SlowStartInvalid", f"{parsed} on slow start")
        slow_start = parsed
    failure = route.failure_policy
    return UpstreamSettings(
        protocol=chosen,
        lb_strategy=lb_strategy,
        outlier_detection=OutlierDetection()
        if failure is not None and failure.passive_health_check
        else None,
        validation=validation,
        slow_start=slow_start,
    )


def validation_ignored(upstream: ServiceUpstream, settings: UpstreamSettings) -> bool:
    """Whether the service asked for validation on a protocol without TLS, where Contour drops
    the field without a word (the traffic is clear text, so there is nothing to validate)."""
    return upstream.validation is not None and settings.validation is None


def _upstream_validation(
    spec: ValidationSpec,
    service: str,
    port: int,
    ca_bundles: CABundleResolver,
    namespace: str,
) -> UpstreamValidation | Problem:
    """Contour's `LookupUpstreamValidation`: delegation, the CA Secret, then the names."""
    ns, secret = namespaced_name(spec.ca_secret, namespace)
    ref = f"{ns}/{secret}"
    where = f"Service [{service}:{port}] TLS upstream validation policy error"
    bundle = ca_bundles.ca_bundle(ns, secret, for_namespace=namespace)
    if isinstance(bundle, Unresolved):
        if bundle.reason == "DelegationNotPermitted":
            return (
                TLS_ERROR,
                "CACertificateNotDelegated",
                f'service.UpstreamValidation.CACertificate Secret "{ref}" is not configured for '
                "certificate delegation",
            )
        detail = "Secret not found" if bundle.reason == "SecretNotFound" else _detail(bundle, ref)
        return (
            SERVICE_ERROR,
            "TLSUpstreamValidation",
            f'{where}: invalid CA Secret "{ref}": {detail}',
        )
    if not spec.subject_name:
        return (
            SERVICE_ERROR,
            "TLSUpstreamValidation",
            f"{where}: missing subject alternative name",
        )
    names = spec.subject_names or (spec.subject_name,)
    if names[0] != spec.subject_name:
        return (
            SERVICE_ERROR,
            "TLSUpstreamValidation",
            f"{where}: first entry of SubjectNames ({names[0]}) does not match SubjectName "
            f"({spec.subject_name})",
        )
    return UpstreamValidation(ca_secret=bundle.name, subject_names=names)


def _detail(unresolved: Unresolved, ref: str) -> str:
    """The resolver's message without the Secret's name, which the caller already gives."""
    message = unresolved.message
    prefix = f'Secret "{ref}"'
    if message.startswith(prefix):
        message = message[len(prefix) :].lstrip(":").strip()
    return message


def _slow_start_config(spec: SlowStartSpec) -> SlowStart | str:
    try:
        window = parse_go_duration(spec.window) / NANOS_PER_SECOND
    except ValueError as err:
        return f"error parsing window: {err}"
    aggression = 1.0
    if spec.aggression:
        try:
            aggression = float(spec.aggression)
        except ValueError:
            return f'error parsing aggression: "{spec.aggression}" is not a decimal number'
        if not aggression > 0:
            # Envoy divides by it; Contour passes 0 on and Envoy refuses the cluster.
            return f'error parsing aggression: "{spec.aggression}" must be greater than 0'
    return SlowStart(
        window_s=window, aggression=aggression, min_weight_percent=spec.min_weight_percent
    )


def failure_retry(route: RouteUpstream) -> RetryPolicy | None:
    """The retries a route's failurePolicy asks for, with retryPolicy's rules (`count: -1` is no
    retry, 0 means 1; an invalid perTryTimeout falls back to Envoy's default); None when it
    asks for none or the route's own retryPolicy wins."""
    failure = route.failure_policy
    if failure is None or not failure.retry_policy or route.has_retry_policy:
        return None
    per_try = go_duration_seconds(failure.per_try_timeout) if failure.per_try_timeout else None
    return RetryPolicy(
        count=0 if failure.count == -1 else max(1, failure.count),
        per_try_timeout_s=per_try if per_try is not None and per_try > 0 else None,
        retry_on=("5xx",),
    )


def with_failure_retry(policies: RoutePolicies, route: RouteUpstream) -> RoutePolicies:
    retry = failure_retry(route)
    if retry is None or policies.retry is not None:
        return policies
    return dataclasses.replace(policies, retry=retry)


def failure_policy_warning(route: RouteUpstream) -> Problem | None:
    """A warning when failurePolicy's retries give way to the route's retryPolicy."""
    failure = route.failure_policy
    if failure is None or not failure.retry_policy or not route.has_retry_policy:
        return None
    return (
        SPEC_ERROR,
        IGNORED_FIELD,
        f'ignoring the retries of "{failure.field}"; the route\'s retryPolicy applies',
    )


def check_upstream_validation(
    spec: ValidationSpec, service: str, port: int, ca_bundles: CABundleResolver, namespace: str
) -> UpstreamValidation | Problem:
    """Contour's `LookupUpstreamValidation` for an ExtensionService."""
    return _upstream_validation(spec, service, port, ca_bundles, namespace)

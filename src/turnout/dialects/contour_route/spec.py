"""The seed 002 Route spec as typed records, read defensively from whatever YAML a user wrote.

The seed asks for "field level validation on CRD": the API server would refuse an object with a
field of the wrong type, an unknown field or a value out of range. turnout also reads plain files,
so this reader does that job. Every problem becomes an error string that starts with the field
path (`spec.routes[0].upstreams[1].weight: ...`), and nothing here ever raises.

A Route with any such error is `Invalid` and serves nothing: the seed's Contour rejected a whole
object on a validation error (seed 000), and serving part of an object the API server would not
have admitted would guess at what the user meant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.dialects.contour.health_check import DEFAULT_HEALTHY as CONTOUR_DEFAULT_HEALTHY
from turnout.dialects.contour_route.schema import MAX_SECONDS, MAX_THRESHOLD, SPEC, STRATEGY_NAMES
from turnout.dialects.fields import FieldReader, total_backends_problem
from turnout.dialects.openapi import known
from turnout.graph.model import HTTPHealthCheck, LoadBalancerStrategy
from turnout.objects import KubeObject

API_VERSION = "contour.heptio.com/v1alpha1"
GROUP = "contour.heptio.com"
KIND = "Route"

# The seed's three strategies. RequestHash and Cookie (HTTPProxy) need a hash policy on the route,
# which the Route kind has no field for, so they are refused rather than silently degraded.
STRATEGIES: Mapping[str, LoadBalancerStrategy] = dict(
    zip(
        STRATEGY_NAMES,
        (
            LoadBalancerStrategy.ROUND_ROBIN,
            LoadBalancerStrategy.WEIGHTED_LEAST_REQUEST,
            LoadBalancerStrategy.RANDOM,
        ),
        strict=True,
    )
)

# Seed defaults. The seed gives none for healthyThresholdCount: Contour's applies.
DEFAULT_INTERVAL_S = 5
DEFAULT_TIMEOUT_S = 2
DEFAULT_UNHEALTHY_THRESHOLD = 3
DEFAULT_HEALTHY_THRESHOLD = CONTOUR_DEFAULT_HEALTHY


# A lower-case RFC 1123 hostname. The seed's host is a plain name ("heptio.com"): no wildcard.
HOST_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Paths go to Envoy as a health-check request line and a route prefix: no spaces or control
# characters, which Envoy refuses or which would split the request line. A prefix has no query or
# fragment either: Envoy matches a prefix against the path with its query, so a `?` in a prefix
# would match on the query string, which is not what a path prefix means.
_PATH_PATTERN = re.compile(r"/[^\x00-\x20\x7f]*")
_PREFIX_PATTERN = re.compile(r"/[^\x00-\x20\x7f?#]*")

# The keys each object may have: the CRD's field table (schema.py), so reader and schema agree.
_SPEC_FIELDS = known(SPEC, "spec")
_ROUTE_FIELDS = known(SPEC, "spec.routes[]")
_UPSTREAM_FIELDS = known(SPEC, "spec.routes[].upstreams[]")
# The seed lists healthyThresholdCount only on upstreams; the spec-level check is the default for
# those same upstreams, so it takes the same fields.
_HEALTH_CHECK_FIELDS = known(SPEC, "spec.lbHealthCheck")


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    service_name: str
    service_port: int
    weight: int | None  # a percentage; None when not given
    health_check: HTTPHealthCheck | None  # this upstream's own, before inheritance
    field: str


@dataclass(frozen=True, slots=True)
class RouteSpec:
    path_prefix: str
    strategy: LoadBalancerStrategy | None  # None: inherit spec.strategy
    upstreams: tuple[UpstreamSpec, ...]
    field: str


@dataclass(frozen=True, slots=True)
class Spec:
    host: str | None  # lower-cased; None when missing or not a valid hostname
    strategy: LoadBalancerStrategy | None
    health_check: HTTPHealthCheck | None
    routes: tuple[RouteSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class ParsedRoute:
    obj: KubeObject
    spec: Spec
    errors: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.obj.namespace, self.obj.name)

    @property
    def valid(self) -> bool:
        return not self.errors


class _Reader(FieldReader):
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, where: str, message: str) -> None:
        self.errors.append(f"{where}: {message}")

    def field_error(self, where: str, message: str) -> None:
        self.error(where, message)

    def string_problem(self, value: str) -> str | None:
        return None  # Contour's Route took any string

    def range_problem(self, value: int, minimum: int | None, maximum: int | None) -> str | None:
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            return f"must be in the range {minimum}-{maximum}, got {value}"
        return None

    def required_items(
        self, m: Mapping[str, Any], key: str, path: str
    ) -> list[tuple[str, Any]] | None:
        """The entries of a required, non-empty list; None (reported) otherwise."""
        where = f"{path}.{key}"
        if m.get(key) is None:
            self.error(where, "required field is missing")
            return None
        value = self.sequence(m, key, path)
        if value is None:
            return None
        if not value:
            self.error(where, "must not be empty")
            return None
        value = self.capped(value, where, self.list_cap(key))
        return [(f"{where}[{i}]", item) for i, item in enumerate(value)]

    def strategy(self, m: Mapping[str, Any], path: str) -> LoadBalancerStrategy | None:
        if m.get("strategy") is None:
            return None
        name = self.string(m, "strategy", path)
        if not name:
            return None  # a wrong type is already reported; "" means unset (Go's omitempty)
        strategy = STRATEGIES.get(name)
        if strategy is None:
            self.error(
                f"{path}.strategy",
                f'must be one of {", ".join(STRATEGIES)}, got "{name}"',
            )
        return strategy

    def path(self, m: Mapping[str, Any], key: str, path: str, prefix: bool = False) -> str:
        value = self.string(m, key, path, required=True)
        pattern, what = (
            (_PREFIX_PATTERN, "spaces, control characters, ? or #")
            if prefix
            else (_PATH_PATTERN, "spaces or control characters")
        )
        if value and not pattern.fullmatch(value):
            self.error(f"{path}.{key}", f'must start with "/" and contain no {what}, got {value!r}')
            return ""
        return value


def parse_route(obj: KubeObject) -> ParsedRoute:
    """Reads `obj` into a `Spec`; never raises, whatever the object holds."""
    r = _Reader()
    empty = Spec(host=None, strategy=None, health_check=None)
    if obj.spec is None:
        r.error("spec", "required field is missing")
        return ParsedRoute(obj, empty, tuple(r.errors))
    spec = r.mapping(obj.spec, "spec")
    if spec is None:
        return ParsedRoute(obj, empty, tuple(r.errors))
    r.check_fields(spec, "spec", _SPEC_FIELDS)
    # Fields are read in the seed's order so that errors are listed as a reader of the seed expects.
    strategy = r.strategy(spec, "spec")
    health_check = _health_check(r, spec, "spec")
    host = _host(r, spec)
    routes: list[RouteSpec] = []
    over = total_backends_problem(spec.get("routes"), "upstreams")
    if over is not None:
        r.field_error("spec.routes", over)  # the Route is invalid: its routes are not read
    for p, v in () if over else r.required_items(spec, "routes", "spec") or ():
        route = _route(r, v, p)
        if route is not None:
            routes.append(route)
    _check_duplicate_prefixes(r, routes)
    return ParsedRoute(
        obj,
        Spec(host=host, strategy=strategy, health_check=health_check, routes=tuple(routes)),
        tuple(r.errors),
    )


def _host(r: _Reader, spec: Mapping[str, Any]) -> str | None:
    raw = r.string(spec, "host", "spec", required=True)
    if not raw:
        return None
    host = raw.lower()
    if not HOST_PATTERN.fullmatch(host):
        r.error(
            "spec.host", f'"{raw}" is not a valid hostname: it must be DNS labels (no wildcard)'
        )
        return None
    return host


def _health_check(r: _Reader, m: Mapping[str, Any], path: str) -> HTTPHealthCheck | None:
    if m.get("lbHealthCheck") is None:
        return None
    where = f"{path}.lbHealthCheck"
    hc = r.mapping(m["lbHealthCheck"], where)
    if hc is None:
        return None
    r.check_fields(hc, where, _HEALTH_CHECK_FIELDS)
    check_path = r.path(hc, "path", where)
    interval = r.optional_integer(hc, "intervalSeconds", where, minimum=1, maximum=MAX_SECONDS)
    timeout = r.optional_integer(hc, "timeoutSeconds", where, minimum=1, maximum=MAX_SECONDS)
    unhealthy = r.optional_integer(
        hc, "unhealthyThresholdCount", where, minimum=1, maximum=MAX_THRESHOLD
    )
    healthy = r.optional_integer(
        hc, "healthyThresholdCount", where, minimum=1, maximum=MAX_THRESHOLD
    )
    if not check_path:
        return None
    return HTTPHealthCheck(
        path=check_path,
        interval_s=float(interval or DEFAULT_INTERVAL_S),
        timeout_s=float(timeout or DEFAULT_TIMEOUT_S),
        unhealthy_threshold=unhealthy or DEFAULT_UNHEALTHY_THRESHOLD,
        healthy_threshold=healthy or DEFAULT_HEALTHY_THRESHOLD,
    )


def _route(r: _Reader, value: Any, path: str) -> RouteSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _ROUTE_FIELDS)
    prefix = r.path(m, "pathPrefix", path, prefix=True)
    strategy = r.strategy(m, path)
    upstreams: list[UpstreamSpec] = []
    for p, v in r.required_items(m, "upstreams", path) or ():
        upstream = _upstream(r, v, p)
        if upstream is not None:
            upstreams.append(upstream)
    _check_weights(r, upstreams, f"{path}.upstreams")
    return RouteSpec(prefix, strategy, tuple(upstreams), path)


def _upstream(r: _Reader, value: Any, path: str) -> UpstreamSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _UPSTREAM_FIELDS)
    return UpstreamSpec(
        service_name=r.string(m, "serviceName", path, required=True),
        service_port=r.optional_integer(
            m, "servicePort", path, required=True, minimum=1, maximum=65535
        )
        or 0,
        weight=r.optional_integer(m, "weight", path, minimum=0, maximum=100),
        health_check=_health_check(r, m, path),
        field=path,
    )


def _check_weights(r: _Reader, upstreams: Sequence[UpstreamSpec], where: str) -> None:
    """Weights are percentages. When every upstream has one they must add up to 100; when only
    some do, theirs may not exceed 100 (the others share what is left)."""
    given = [u.weight for u in upstreams if u.weight is not None]
    if not given:
        return
    total = sum(given)
    if len(given) == len(upstreams) and total != 100:
        r.error(where, f"weights are percentages and must add up to 100, got {total}")
    elif total > 100:
        r.error(where, f"weights are percentages and must not add up to more than 100, got {total}")


def _check_duplicate_prefixes(r: _Reader, routes: Sequence[RouteSpec]) -> None:
    # Two routes with one prefix: only one could ever match, and which one is the user's guess.
    first: dict[str, str] = {}
    for route in routes:
        if not route.path_prefix:
            continue
        earlier = first.setdefault(route.path_prefix, route.field)
        if earlier != route.field:
            r.error(
                f"{route.field}.pathPrefix",
                f'"{route.path_prefix}" is also the pathPrefix of {earlier}',
            )


def percentages(upstreams: Sequence[UpstreamSpec]) -> list[int]:
    """Envoy weights with the proportions the user's percentages describe.

    No weight anywhere: an even split. Some weights: the upstreams without one share what the
    others leave of 100 evenly; every weight is scaled by their number so the share stays whole.
    """
    missing = [u for u in upstreams if u.weight is None]
    if len(missing) == len(upstreams):
        return [1] * len(upstreams)
    rest = 100 - sum(u.weight for u in upstreams if u.weight is not None)
    scale = max(len(missing), 1)
    return [rest if u.weight is None else u.weight * scale for u in upstreams]

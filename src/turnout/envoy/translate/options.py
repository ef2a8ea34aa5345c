"""Knobs of the Envoy translation that do not come from the routing graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from turnout.compile_inputs import (
    DEFAULT_PATH_NORMALIZATION,
    DEFAULT_SYSTEM_CA_FILE,
    PathNormalization,
)

if TYPE_CHECKING:
    from turnout.graph.model import JwtValidation

# `xff_num_trusted_hops` is a uint32.
MAX_TRUSTED_HOPS = 2**32 - 1


@dataclass(frozen=True, slots=True)
class TranslateOptions:
    """Deployment-wide settings; the same graph and options always give the same resources.

    `connect_timeout_s`: upstream connect timeout of every cluster (Envoy's own default is 5 s,
    which is long for a failed pod).
    `stat_prefix`: prepended to the listener name to form the HTTP connection manager's stat
    prefix, so several turnout deployments can share one metrics backend.
    `access_log`: add a stdout access log to every HTTP connection manager (handy in tests and
    standalone mode; off by default because a fleet usually logs elsewhere).
    `num_trusted_hops`: how many proxies in front of Envoy are trusted to append to
    X-Forwarded-For (the HTTP connection manager's `xff_num_trusted_hops`); the client address
    that `Remote` IP filters see is the one they reported. 0: the peer address, whatever the
    client sends.
    `system_ca_file`: the PEM bundle on Envoy's host that stands for the system trust store:
    upstreams validated against it (BackendTLSPolicy `wellKnownCACertificates: System`) and https
    JWKS servers must chain to it. Envoy is given the file rather than its own notion of a system
    store, so that the installation decides which CAs that is. The default is Debian's and
    Ubuntu's system bundle.
    `paths`: how every HTTP connection manager rewrites paths beyond RFC 3986 normalisation
    (merge slashes, escaped slashes); the evaluator takes the same value.
    `jwt_providers`: set by `translate` from the graph (`http_filters.jwt_providers`), not by
    callers: the JWT providers every HTTP connection manager carries.
    """

    connect_timeout_s: float = 2.0
    stat_prefix: str = ""
    access_log: bool = False
    num_trusted_hops: int = 0
    system_ca_file: str = DEFAULT_SYSTEM_CA_FILE
    paths: PathNormalization = DEFAULT_PATH_NORMALIZATION
    jwt_providers: tuple[JwtValidation, ...] = ()

    def __post_init__(self) -> None:
        if not self.connect_timeout_s > 0:
            raise ValueError(f"connect_timeout_s must be positive, got {self.connect_timeout_s}")
        if not 0 <= self.num_trusted_hops <= MAX_TRUSTED_HOPS:
            raise ValueError(
                f"num_trusted_hops must be in 0-{MAX_TRUSTED_HOPS}, got {self.num_trusted_hops}"
            )

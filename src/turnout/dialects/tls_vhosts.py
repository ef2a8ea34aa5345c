"""How a TLS virtual host appears on the two default listeners, for every dialect that has one.

Contour's rule, shared by HTTPProxy, IngressRoute and Ingress: a host with TLS serves its routes
on the HTTPS listener; on the HTTP listener each route answers with a 301 to HTTPS, except routes
that permit insecure traffic (unless the installation disables permitInsecure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER
from turnout.graph.model import (
    HostnameMatch,
    Redirect,
    Route,
    TLSTermination,
    VirtualHost,
)
from turnout.objects import ObjectRef


@dataclass(frozen=True, slots=True)
class SecureRoute:
    route: Route
    permit_insecure: bool = False


def https_upgrade(route: Route) -> Route:
    """The plain-HTTP stand-in for a TLS-only route: a 301 to the same URL over HTTPS."""
    return Route(
        match=route.match, action=Redirect(scheme="https", status=301), source=route.source
    )


def tls_virtual_hosts(
    *,
    hostname: str,
    owner: ObjectRef,
    routes: Sequence[SecureRoute],
    tls: TLSTermination,
    disable_permit_insecure: bool,
    hostname_match: HostnameMatch = HostnameMatch.EXACT,
) -> list[tuple[str, VirtualHost]]:
    """The (listener, virtual host) pairs of one TLS host, routes in the given first-match order."""
    name = hostname.lower()
    secure = VirtualHost(
        name=name,
        hostname=name,
        routes=tuple(r.route for r in routes),
        owner=owner,
        hostname_match=hostname_match,
        tls=tls,
    )
    insecure = VirtualHost(
        name=name,
        hostname=name,
        routes=tuple(
            r.route if r.permit_insecure and not disable_permit_insecure else https_upgrade(r.route)
            for r in routes
        ),
        owner=owner,
        hostname_match=hostname_match,
    )
    return [(HTTPS_LISTENER, secure), (HTTP_LISTENER, insecure)]

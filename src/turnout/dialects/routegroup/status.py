"""RouteGroup status: Skipper's `status.loadBalancer.routegroup` plus turnout's conditions.

Skipper writes no RouteGroup status (kube-ingress-aws-controller fills `loadBalancer` for
external-dns). turnout writes, in the shape of metav1.Condition (`type`, `status`, `reason`,
`message`, `observedGeneration`; no `lastTransitionTime`, so the same input always gives the same
status):

- `Accepted`: False when the RouteGroup, or part of it, is not served as written. The reason is
  the first problem's (`UnknownField`, `DuplicateBackend`, `PredicateNotSupported`,
  `FilterNotSupported`, `HostnameConflict`, ...); the message lists every problem, each starting
  with the field it is about and naming the route, predicate, filter or backend at fault.
- `ResolvedRefs`: False when a Service, port or TLS Secret cannot be used.

`loadBalancer.routegroup` lists the listener address while some route of the RouteGroup is served.
"""

from __future__ import annotations

from turnout.dialects.condition_status import ConditionStatus


class RouteGroupStatus(ConditionStatus):
    LOAD_BALANCER_KEY = "routegroup"  # status.loadBalancer.routegroup[]
    ACCEPTED_MESSAGE = "RouteGroup is served"

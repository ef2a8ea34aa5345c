"""Ingress status: `status.loadBalancer` as the Ingress API defines it, plus turnout's conditions.

The Ingress API has no conditions, so an Ingress can only say where it is served. turnout also
needs to say what is wrong, for `turnout check` and `/status`: the body carries `conditions` in
the shape of metav1.Condition (`type`, `status`, `reason`, `message`, `observedGeneration`; no
`lastTransitionTime`, so the same input always gives the same status). This is a turnout
extension: the API server drops unknown status fields, so in Kubernetes mode the same problems
are to be written as Events instead.

- `Accepted`: False when part of the Ingress is not served as written: a field the API server
  would refuse (then nothing is served), a path turnout cannot serve, a path another Ingress
  already serves, a host another object owns. The message lists every such problem.
- `ResolvedRefs`: False when a Service or TLS Secret cannot be used (paths answer 503; hosts are
  not served over HTTPS).
"""

from __future__ import annotations

from turnout.dialects.condition_status import ConditionStatus
from turnout.dialects.condition_status import load_balancer_entry as load_balancer_entry

VALID_MESSAGE = "Ingress is served"


class IngressStatusAccessor(ConditionStatus):
    LOAD_BALANCER_KEY = "ingress"  # status.loadBalancer.ingress[]
    ACCEPTED_MESSAGE = VALID_MESSAGE

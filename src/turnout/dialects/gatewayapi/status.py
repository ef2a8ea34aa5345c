"""Gateway and route status bodies (reference notes §1.3, §1.5), and the Programmed update the
controller makes once Envoy acknowledged a configuration.

A compile cannot know whether Envoy will accept what it produced, so it reports an accepted
Gateway (and each listener that is configured) as `Programmed: False, reason Pending`. The
running controller, once every connected Envoy acknowledged the version holding it, reports
`Programmed: True` (`programmed_statuses`). `turnout check`, which runs no Envoy, shows Pending.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any

from turnout.dialects.gatewayapi.attachment import Attachment
from turnout.dialects.gatewayapi.conditions import (
    ACCEPTED,
    FALSE,
    GATEWAY_SHAPE,
    PENDING,
    PROGRAMMED,
    RESOLVED_REFS,
    ROUTE_SHAPE,
    TRUE,
    Condition,
    ConditionStatus,
    RouteProblem,
    observed,
)
from turnout.dialects.gatewayapi.kinds import (
    GATEWAY,
    GATEWAY_CLASS,
    GROUP,
    gateway_listener_name,
    integer,
    mapping,
    sequence,
    text,
)
from turnout.dialects.gatewayapi.listeners import (
    MAX_LISTENERS,
    GatewayListener,
    closed_message,
    idle_message,
)
from turnout.graph.model import RoutingGraph
from turnout.objects import KubeObject, ObjectRef, thaw
from turnout.status.model import ObjectStatus, Section, State

# Kinds without a namespace: a file gives every object one ("default"); what turnout shows of
# them (/status, `turnout check -o json|yaml`) has none, as the API server's objects have none.
CLUSTER_SCOPED = frozenset({(GROUP, GATEWAY_CLASS)})


def object_json(status: ObjectStatus) -> dict[str, Any]:
    """`status.to_json()`, with no `metadata.namespace` for a cluster-scoped kind."""
    out = status.to_json()
    if (status.ref.group, status.ref.kind) in CLUSTER_SCOPED:
        out["metadata"] = {"name": status.ref.name}
    return out


def _gateway_conditions(
    listeners: Sequence[GatewayListener], refused: tuple[str, str] | None
) -> list[Condition]:
    """The Gateway's own Accepted and Programmed (Pending when accepted)."""
    valid = [lst for lst in listeners if lst.ready]
    if refused is not None:
        accepted = Condition(ACCEPTED, FALSE, *refused)
    elif not listeners:
        accepted = Condition(ACCEPTED, FALSE, "Invalid", "spec.listeners: none")
    elif len(valid) == len(listeners):
        accepted = Condition(ACCEPTED, TRUE, "Accepted", "Gateway is accepted")
    else:
        bad = ", ".join(lst.name for lst in listeners if not lst.ready)
        accepted = Condition(
            ACCEPTED,
            ConditionStatus.of(bool(valid)),
            "ListenersNotValid",
            f"listeners not valid: {bad}"
            + ("; the others are served" if valid else "; no listener is served"),
        )
    if accepted.status is not TRUE:
        reason = "AddressNotAssigned" if accepted.reason == "UnsupportedAddress" else "Invalid"
        return [accepted, Condition(PROGRAMMED, FALSE, reason, "Gateway is not accepted")]
    pending = "Waiting for Envoy to acknowledge the configuration"
    return [accepted, Condition(PROGRAMMED, FALSE, PENDING, pending)]


def _listener_section(
    lst: GatewayListener, attached: int, accepted: bool, idle: bool, generation: int
) -> Section:
    if accepted:
        conditions = lst.conditions(programmed=False, idle=idle)
    else:
        conditions = [
            replace(c, status=FALSE, reason="Invalid", message="Gateway is not accepted")
            if c.type == PROGRAMMED
            else c
            for c in lst.conditions(programmed=False)
        ]
    return Section(
        group="listeners",
        key=lst.name,
        conditions=observed(conditions, generation),
        fields={
            "name": lst.name,
            "supportedKinds": [{"group": GROUP, "kind": k} for k in lst.kinds],
            "attachedRoutes": attached,
        },
    )


def gateway_address(address: str) -> dict[str, str]:
    """A `status.addresses` entry: the Envoy Service's load balancer may be a DNS name."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return {"type": "Hostname", "value": address}
    return {"type": "IPAddress", "value": address}


def gateway_status(
    gateway: KubeObject,
    listeners: Sequence[GatewayListener],
    attached: Mapping[int, int],
    *,
    addresses: Sequence[str],
    refused: tuple[str, str] | None,
    idle_ports: Set[int] = frozenset(),
) -> ObjectStatus:
    """`attached`: listener index -> number of accepted routes attached to it. `idle_ports`:
    ports that get no Envoy listener (nothing on them can be served)."""
    generation = gateway.generation
    conditions = _gateway_conditions(listeners, refused)
    accepted = conditions[0].status is TRUE
    sections = tuple(
        _listener_section(
            lst, attached.get(lst.index, 0), accepted, lst.port in idle_ports, generation
        )
        for lst in listeners
    )
    # Listeners that are not valid make the Gateway invalid for `turnout check`, even when the
    # others are served (Accepted True, reason ListenersNotValid).
    first_problem = None if conditions[0].reason == "Accepted" else conditions[0].message
    return ObjectStatus(
        ref=gateway.ref,
        api_version=gateway.api_version,
        state=State.VALID if first_problem is None else State.INVALID,
        summary=first_problem or "Gateway is accepted",
        shape=GATEWAY_SHAPE,
        generation=generation,
        conditions=observed(conditions, generation),
        sections=sections,
        fields={"addresses": [gateway_address(address) for address in addresses]},
    )


@dataclass(frozen=True, slots=True)
class ParentOutcome:
    """One parentRef's result for a route: how it attached and what the route's rules reported."""

    attachment: Attachment
    problems: tuple[RouteProblem, ...] = ()
    rejected: bool = False  # the route compiler refused the whole route
    # What an accepted route should know, said in its Accepted True message: e.g. an older
    # TCPRoute serves the listener, so this one gets no connections.
    notes: tuple[str, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.attachment.problem is None and not self.rejected


def _route_conditions(outcome: ParentOutcome) -> list[Condition]:
    if outcome.attachment.problem is not None:
        p = outcome.attachment.problem
        accepted = Condition(ACCEPTED, FALSE, p.reason, p.message)
    else:
        rejections = [p for p in outcome.problems if p.condition == ACCEPTED]
        if rejections and outcome.rejected:
            accepted = Condition(
                ACCEPTED,
                FALSE,
                rejections[0].reason,
                "; ".join(p.message for p in rejections),
            )
        elif outcome.rejected:
            accepted = Condition(ACCEPTED, FALSE, "UnsupportedValue", "the route is not valid")
        else:
            accepted = Condition(
                ACCEPTED, TRUE, "Accepted", "; ".join(("Route is accepted", *outcome.notes))
            )
    unresolved = [p for p in outcome.problems if p.condition == RESOLVED_REFS]
    if unresolved:
        resolved = Condition(
            RESOLVED_REFS, FALSE, unresolved[0].reason, "; ".join(p.message for p in unresolved)
        )
    else:
        resolved = Condition(RESOLVED_REFS, TRUE, "ResolvedRefs", "References are resolved")
    return [accepted, resolved]


def parent_key(outcome: ParentOutcome) -> str:
    """A parent's identity in the route's status, stable across compiles: the parentRef's
    group, kind, namespace, name, sectionName and port."""
    p = outcome.attachment.parent
    port = "" if p.port is None else str(p.port)
    return "/".join((p.group, p.kind, p.namespace, p.name, p.section_name or "", port))


def route_status(
    route: KubeObject, outcomes: Iterable[ParentOutcome], controller_name: str
) -> ObjectStatus | None:
    """The route's `status.parents`: one entry per parentRef of turnout's, after the entries of
    other controllers that the object already carries (only turnout's own are written; the
    others are kept as they are, in `fields`). None when no parentRef is turnout's."""
    ours = list(outcomes)
    if not ours:
        return None
    generation = route.generation
    foreign = tuple(
        thaw(entry)
        for entry in sequence(mapping(route.raw.get("status")).get("parents"))
        if isinstance(entry, Mapping) and text(entry.get("controllerName")) != controller_name
    )
    summaries: list[str] = []
    sections: list[Section] = []
    for outcome in ours:
        conditions = _route_conditions(outcome)
        summaries.extend(c.message for c in conditions if c.status is not TRUE)
        sections.append(
            Section(
                group="parents",
                key=parent_key(outcome),
                conditions=observed(conditions, generation),
                fields={
                    "parentRef": outcome.attachment.parent.to_json(),
                    "controllerName": controller_name,
                },
            )
        )
    return ObjectStatus(
        ref=route.ref,
        api_version=route.api_version,
        state=State.INVALID if summaries else State.VALID,
        summary=summaries[0] if summaries else "Route is accepted",
        shape=ROUTE_SHAPE,
        generation=generation,
        sections=tuple(sections),
        fields={"parents": foreign} if foreign else {},
    )


# What the running controller learned about one Envoy listener: "programmed" (its current
# content is in effect on every connected Envoy), "rejected" (an Envoy refused it), "pending",
# "closed" (the configuration has no such listener, nothing on the port can be served, and every
# connected Envoy acknowledged that: the port is closed as configured) or "absent" (no such
# listener, not yet acknowledged); with a message (Envoy's reason for a rejection).
ListenerProbe = Callable[[str], tuple[str, str]]


def _pending(condition: Condition) -> bool:
    return (
        condition.type == PROGRAMMED and condition.reason == PENDING and condition.status is FALSE
    )


def _set_programmed(
    conditions: Iterable[Condition], state: str, message: str
) -> tuple[Condition, ...]:
    """The conditions with the Pending Programmed settled by `state`."""
    out: list[Condition] = []
    for c in conditions:
        if _pending(c):
            if state in ("programmed", "closed"):
                c = replace(c, status=TRUE, reason="Programmed", message=message)
            elif state == "rejected":
                c = replace(c, reason="Invalid", message=message)
            else:
                c = replace(c, message=message)
        out.append(c)
    return tuple(out)


def _listener_ports(gateway: KubeObject | None) -> list[int | None]:
    if gateway is None:
        return []
    return [
        integer(mapping(raw).get("port"))
        for raw in sequence(mapping(gateway.spec).get("listeners"))[:MAX_LISTENERS]
    ]


def _gateway_programmed(results: Sequence[tuple[str, str, str]]) -> tuple[str, str]:
    """The Gateway's Programmed from its listeners' (name, state, message)."""
    rejected = [(n, m) for n, state, m in results if state == "rejected"]
    if rejected:
        return "rejected", "; ".join(f"listener {n!r}: {m}" for n, m in rejected)
    pending = [(n, m) for n, state, m in results if state == "pending"]
    if pending:
        return "pending", f"listener {pending[0][0]!r}: {pending[0][1]}"
    idle = [n for n, state, _ in results if state == "absent"]
    closed = [n for n, state, _ in results if state == "closed"]
    if any(state == "programmed" for _, state, _ in results):
        note = f"; nothing to serve yet on listener(s) {', '.join(idle)}" if idle else ""
        if closed:
            note += f"; listener(s) {', '.join(closed)} have nothing to serve: ports closed"
        return "programmed", "Envoy acknowledged the Gateway's listeners" + note
    if closed and not idle:
        # "Wait for Programmed, then attach routes" (upstream NamespacesMustBeReady) must work
        # for a TCP or TLS Gateway too: what it configures, closed ports, is in effect.
        return "closed", (
            "Envoy acknowledged the configuration; no listener has anything to serve yet "
            f"({', '.join(closed)}): their ports stay closed until a route attaches"
        )
    return "absent", "no listener of the Gateway has anything Envoy can serve yet"


def _listener_state(port: int | None, probe: ListenerProbe | None) -> tuple[str, str]:
    if probe is None:
        return "programmed", "Envoy acknowledged the configuration"
    if port is None:
        return "pending", "the listener's port is not known yet"
    state, message = probe(gateway_listener_name(port))
    if state == "absent":
        message = idle_message(port)
    elif state == "closed":
        message = closed_message(port)
    return state, message


def _settled_gateway(
    status: ObjectStatus, ports: Sequence[int | None], probe: ListenerProbe | None
) -> ObjectStatus:
    """One Gateway's status with its listeners' and its own Pending Programmed settled."""
    sections: list[Section] = []
    results: list[tuple[str, str, str]] = []
    index = 0  # the listener's index in the Gateway's spec, which names its port
    for section in status.sections:
        if section.group != "listeners":
            sections.append(section)
            continue
        i, index = index, index + 1
        if not any(_pending(c) for c in section.conditions):
            sections.append(section)
            continue
        state, message = _listener_state(ports[i] if i < len(ports) else None, probe)
        results.append((str(section.fields.get("name", section.key)), state, message))
        settled = _set_programmed(section.conditions, state, message)
        sections.append(replace(section, conditions=settled))
    conditions = status.conditions
    if any(_pending(c) for c in conditions):
        state, message = _gateway_programmed(results)
        conditions = _set_programmed(conditions, state, message)
    return replace(status, conditions=conditions, sections=tuple(sections))


def programmed_statuses(
    statuses: Iterable[ObjectStatus],
    probe: ListenerProbe | None = None,
    gateways: Callable[[ObjectRef], KubeObject | None] | None = None,
) -> tuple[ObjectStatus, ...]:
    """The statuses with the Pending Programmed conditions of Gateways and their listeners
    settled by what Envoy has: each listener by its port's Envoy listener (`probe` of
    `gateway_<port>`; `gateways` gives the Gateway object, whose listeners name the ports), the
    Gateway by its listeners. A rejected listener is Programmed False reason Invalid with
    Envoy's message. Without a probe every Pending condition turns True (a controller whose
    Envoys acknowledged the whole configuration)."""
    out: list[ObjectStatus] = []
    for status in statuses:
        if status.ref.group != GROUP or status.ref.kind != GATEWAY:
            out.append(status)
            continue
        ports = _listener_ports(gateways(status.ref) if gateways is not None else None)
        out.append(_settled_gateway(status, ports, probe))
    return tuple(out)


def gateway_listener_names(graph: RoutingGraph) -> frozenset[str]:
    """The Envoy listeners of the graph that serve Gateway ports (`gateway_<port>`): Envoy's
    rejection of one of them is reported on the Gateway listeners of that port
    (`programmed_statuses`), so it need not fail the controller's readiness."""
    return frozenset(
        lst.name for lst in graph.listeners if lst.name == gateway_listener_name(lst.port)
    )

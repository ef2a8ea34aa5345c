"""The admin web view (`/ui`): listeners, hosts and their owners, the delegation tree, routes in
first-match order, endpoints, problems and an "explain this request" form.

Pure functions from a `CompileResult` and the published statuses to HTML strings. The admin
server serves them with htmx, which polls the graph fragment and submits the explain form; there
is no build step. Every string an object carries (names, hosts, paths, headers, messages) is
written by a tenant, so everything interpolated goes through `esc`.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from html import escape

from turnout.compile_inputs import HTTP_LISTENER
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import Decision, Request
from turnout.graph.model import (
    INVALID_BACKEND,
    Cluster,
    DirectResponse,
    Forward,
    HeaderMatch,
    Listener,
    PathMatchKind,
    QueryMatch,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RoutingGraph,
    VirtualHost,
)
from turnout.objects import ObjectRef
from turnout.status.model import ObjectStatus
from turnout.store import SourceProblem

StatusIndex = Mapping[ObjectRef, ObjectStatus]

# How often the page asks for the graph fragment; an unchanged graph answers 204 (no swap), so
# the expanded parts of the page stay as the reader left them.
POLL = "every 2s"

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .5em; } h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; margin: .3em 0 .8em; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } code { font-size: .95em; }
details { margin: .2em 0 .2em 1em; } summary { cursor: pointer; }
details.tree > .leaf { margin-left: 1.6em; }
.state-valid { color: #1a7f37; } .state-invalid { color: #c62828; font-weight: bold; }
.state-orphaned { color: #b26a00; } .state-unknown { color: #666; }
.muted { color: #666; } .error { color: #c62828; } .warning { color: #b26a00; }
form.explain input, form.explain select, form.explain textarea { margin-right: .5em; }
#explain-result { margin: .5em 0; padding: .5em; background: #f7f7f7; }
"""


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def ref_name(ref: ObjectRef) -> str:
    return f"{ref.kind} {ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind} {ref.name}"


def state_class(status: ObjectStatus | None) -> str:
    return f"state-{status.state.value}" if status is not None else "state-unknown"


def ref_html(ref: ObjectRef, statuses: StatusIndex) -> str:
    """An object's name coloured by its state, its summary as the tooltip."""
    status = statuses.get(ref)
    state = status.state.value if status is not None else "unknown"
    title = f"{state}: {status.summary}" if status is not None else state
    return (
        f'<span class="obj {state_class(status)}" title="{esc(title)}">{esc(ref_name(ref))}</span>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """`rows` hold HTML already escaped; `headers` are turnout's own words."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>" if body else '<p class="muted">none</p>'


def section(title: str, body: str, section_id: str) -> str:
    return f'<section id="{esc(section_id)}"><h2>{esc(title)}</h2>{body}</section>'


# -- matches and actions -------------------------------------------------------------------------


def path_text(match: RouteMatch) -> str:
    kind = match.path.kind
    if kind is PathMatchKind.SEGMENT_PREFIX:
        return f"path prefix (whole segments) {match.path.value}"
    return f"path {kind.value} {match.path.value}"


def header_text(m: HeaderMatch) -> str:
    negation = "not " if m.invert else ""
    value = "" if m.kind.value == "present" else f" {m.value!r}"
    return f"header {m.name} {negation}{m.kind.value}{value}"


def query_text(m: QueryMatch) -> str:
    value = "" if m.kind.value == "present" else f" {m.value!r}"
    return f"query {m.name} {m.kind.value}{value}"


def match_html(match: RouteMatch) -> str:
    parts = [path_text(match)]
    parts += [header_text(h) for h in match.headers]
    parts += [query_text(q) for q in match.query]
    if match.runtime_fraction is not None:
        parts.append(f"{match.runtime_fraction:.0%} of requests")
    return "<br>".join(f"<code>{esc(p)}</code>" for p in parts)


def action_text(action: RouteAction) -> str:
    if isinstance(action, Forward):
        backends = [
            f"invalid backend ({action.invalid_backend_status})"
            if c.cluster == INVALID_BACKEND
            else f"{c.cluster} (weight {c.weight})"
            for c in action.clusters
        ]
        return "forward to " + ", ".join(backends)
    if isinstance(action, DirectResponse):
        return f"direct response {action.status}" + (f": {action.body}" if action.body else "")
    if isinstance(action, Redirect):
        parts = [("scheme", action.scheme), ("host", action.hostname), ("port", action.port)]
        parts += [("path", action.path), ("prefix", action.prefix)]
        where = ", ".join(f"{k} {v}" for k, v in parts if v is not None)
        return f"redirect {action.status}" + (f" ({where})" if where else "")
    return str(action)


def route_text(route: Route) -> str:
    text = action_text(route.action)
    jwt = route.policies.jwt
    # Not a routing decision: the route is chosen first, then the token is checked.
    return f"401 unless a valid JWT of {jwt.issuer or 'any issuer'}, then {text}" if jwt else text


# -- listeners, hosts and routes -----------------------------------------------------------------


def routes_html(vh: VirtualHost, statuses: StatusIndex) -> str:
    rows = (
        (
            str(i),
            match_html(route.match),
            esc(route_text(route)),
            ref_html(route.source.object, statuses) + f" <code>{esc(route.source.field)}</code>",
        )
        for i, route in enumerate(vh.routes, 1)
    )
    return table(("#", "conditions", "action", "from"), rows)


def vhost_html(vh: VirtualHost, statuses: StatusIndex) -> str:
    tls = " (TLS)" if vh.tls is not None else ""
    return (
        f'<details class="vhost"><summary><b>{esc(vh.hostname)}</b>{tls}: owned by '
        f"{ref_html(vh.owner, statuses)} "
        f'<span class="muted">({len(vh.routes)} routes, first match wins)</span></summary>'
        f"{routes_html(vh, statuses)}</details>"
    )


def listener_html(listener: Listener, statuses: StatusIndex) -> str:
    hosts = "".join(vhost_html(vh, statuses) for vh in listener.virtual_hosts)
    tcp = "".join(
        f"<li>TCP {esc(t.hostname or '*')}: owned by {ref_html(t.owner, statuses)} &rarr; "
        f"{esc(', '.join(c.cluster for c in t.clusters))}</li>"
        for t in listener.tcp_proxies
    )
    return (
        f"<h3>{esc(listener.name)} <code>{esc(listener.address)}:{listener.port}</code> "
        f'<span class="muted">{esc(listener.protocol.value)}</span></h3>'
        f"{hosts}{f'<ul>{tcp}</ul>' if tcp else ''}"
    )


def listeners_html(graph: RoutingGraph, statuses: StatusIndex) -> str:
    rule = (
        '<p class="muted">A host belongs to the root object that claimed it first (the oldest '
        "claimant); a later object claiming it is refused. Click a host for its routes.</p>"
    )
    body = "".join(listener_html(lst, statuses) for lst in graph.listeners)
    return rule + (body or '<p class="muted">no listeners</p>')


# -- delegation ----------------------------------------------------------------------------------


def delegation_edges(
    graph: RoutingGraph,
) -> tuple[list[ObjectRef], dict[ObjectRef, list[ObjectRef]]]:
    """The owners of hosts, and each object's children: the objects it includes (the `via`
    chain of every route, root first) or whose routes it serves (a Gateway's routes)."""
    roots: list[ObjectRef] = []
    children: dict[ObjectRef, list[ObjectRef]] = {}

    def link(parent: ObjectRef, child: ObjectRef) -> None:
        below = children.setdefault(parent, [])
        if child != parent and child not in below:
            below.append(child)

    for listener in graph.listeners:
        for owner in [vh.owner for vh in listener.virtual_hosts] + [
            t.owner for t in listener.tcp_proxies
        ]:
            if owner not in roots:
                roots.append(owner)
        for vh in listener.virtual_hosts:
            for route in vh.routes:
                chain = (vh.owner, *route.source.via, route.source.object)
                for parent, child in itertools.pairwise(chain):
                    link(parent, child)
    return roots, children


def tree_html(
    ref: ObjectRef,
    children: Mapping[ObjectRef, Sequence[ObjectRef]],
    statuses: StatusIndex,
    seen: frozenset[ObjectRef] = frozenset(),
) -> str:
    below = [c for c in children.get(ref, ()) if c not in seen and c != ref]
    if not below:
        return f'<div class="leaf">{ref_html(ref, statuses)}</div>'
    inner = "".join(tree_html(c, children, statuses, seen | {ref}) for c in below)
    return f'<details class="tree"><summary>{ref_html(ref, statuses)}</summary>{inner}</details>'


def delegation_html(graph: RoutingGraph, statuses: StatusIndex) -> str:
    roots, children = delegation_edges(graph)
    trees = "".join(tree_html(root, children, statuses) for root in roots)
    note = '<p class="muted">Root objects; click one for what it includes.</p>'
    return note + trees if trees else '<p class="muted">no root objects</p>'


# -- objects, endpoints, problems ----------------------------------------------------------------


def objects_html(statuses: Sequence[ObjectStatus]) -> str:
    def where(s: ObjectStatus) -> str:
        if s.origin is None:
            return ""
        line = f":{s.origin.line}" if s.origin.line is not None else ""
        return esc(f"{s.origin.source}{line}")

    rows = (
        (
            ref_html(s.ref, {s.ref: s}),
            f'<span class="{state_class(s)}">{esc(s.state.value)}</span>',
            esc(s.summary),
            where(s),
        )
        for s in statuses
    )
    return table(("object", "state", "summary", "source"), rows)


def endpoints_text(cluster: Cluster) -> str:
    if cluster.dns_name is not None:
        return f"DNS {cluster.dns_name}"
    return ", ".join(f"{e.address}:{e.port}" for e in cluster.endpoints) or "no ready endpoints"


def clusters_html(graph: RoutingGraph) -> str:
    rows = (
        (
            f"<code>{esc(c.name)}</code>",
            esc(f"{c.namespace}/{c.service}:{c.port}"),
            esc(c.protocol.value),
            esc(endpoints_text(c)),
        )
        for c in graph.clusters
    )
    return table(("cluster", "service", "protocol", "endpoints"), rows)


def severity_html(severity: str) -> str:
    css = "warning" if severity == "warning" else "error"
    return f'<span class="{css}">{esc(severity)}</span>'


def problems_html(problems: Sequence[SourceProblem], statuses: Sequence[ObjectStatus]) -> str:
    rows = [(severity_html(p.severity), esc(p)) for p in problems]
    rows += [
        (severity_html(f.severity.value), esc(f"{ref_name(f.ref)}: {f.text}"))
        for s in statuses
        for f in s.findings
    ]
    return table(("severity", "problem"), rows)


# -- the graph fragment and the page -------------------------------------------------------------


def graph_body(
    result: CompileResult | None,
    statuses: Sequence[ObjectStatus],
    problems: Sequence[SourceProblem],
    waiting: str = "",
) -> str:
    if result is None:
        return f'<p class="muted">no configuration compiled yet: {esc(waiting)}</p>'
    index = {s.ref: s for s in statuses}
    graph = result.graph
    names = "".join(f'<option value="{esc(lst.name)}">' for lst in graph.listeners)
    return "".join(
        (
            section("Objects", objects_html(statuses), "objects"),
            section("Listeners, hosts and routes", listeners_html(graph, index), "listeners"),
            section("Delegation", delegation_html(graph, index), "delegation"),
            section("Endpoints", clusters_html(graph), "endpoints"),
            section("Problems", problems_html(problems, statuses), "problems"),
            f'<datalist id="listener-names">{names}</datalist>',
        )
    )


def body_token(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def graph_fragment(body: str) -> str:
    """The polled element: it asks again with the token of what it shows, and replaces itself
    only when the server has something else."""
    return (
        f'<div id="graph" hx-get="/ui/graph?seen={body_token(body)}" hx-trigger="{POLL}" '
        f'hx-swap="outerHTML">{body}</div>'
    )


def explain_form() -> str:
    return (
        '<form class="explain" hx-get="/ui/explain" hx-target="#explain-result">'
        '<input name="host" placeholder="host" required aria-label="host"> '
        '<input name="path" value="/" aria-label="path"> '
        '<select name="method" aria-label="method">'
        + "".join(f"<option>{m}</option>" for m in ("GET", "POST", "PUT", "DELETE", "HEAD"))
        + "</select> "
        f'<input name="listener" value="{esc(HTTP_LISTENER)}" list="listener-names" '
        'aria-label="listener"> '
        '<textarea name="headers" rows="1" cols="30" placeholder="Name: value, one a line" '
        'aria-label="headers"></textarea> '
        '<button type="submit">Explain</button></form><div id="explain-result"></div>'
    )


def page(fragment: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>turnout</title><style>{CSS}</style>"
        '<script src="/ui/htmx.min.js"></script></head><body>'
        "<h1>turnout: routing graph</h1><h2>Explain a request</h2>"
        f"{explain_form()}{fragment}</body></html>"
    )


# -- explain -------------------------------------------------------------------------------------


def parse_headers(text: str) -> list[tuple[str, str]] | str:
    """`Name: value` lines → lower-cased pairs, or what is wrong with a line."""
    headers: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, rest = line.partition(":")
        if not sep or not name.strip():
            return f"header {line!r} is not of the form 'Name: value'"
        headers.append((name.strip().lower(), rest.strip()))
    return headers


def decision_lines(decision: Decision) -> list[str]:
    """What `turnout explain` prints, as HTML lines."""
    if decision.listener is None:
        return ["no such listener"]
    if decision.rejected_status is not None:
        reason = f"{decision.rejected_status} before routing: {decision.rejected_reason}"
        return [f"action: {esc(reason)}"]
    vh = decision.virtual_host
    if vh is None:
        return ["virtual host: none matches this host: 404"]
    lines = [f"virtual host: <b>{esc(vh.hostname)}</b> (owned by {esc(ref_name(vh.owner))})"]
    lines += [
        f'<span class="muted">passed over {esc(m.route.source)}: {esc(m.reason)}</span>'
        for m in decision.passed_over
    ]
    route = decision.route
    if route is None:
        return [*lines, "action: 404 (no route matched)"]
    # What the policies answer before the route (IP rules, CORS, rate limits, JWT), as
    # `turnout explain` prints it.
    answers = [f'<span class="policy">{esc(a.text)}</span>' for a in decision.policy_answers]
    return [
        *lines,
        f'route: <b class="route">{esc(route.source)}</b>',
        *answers,
        f"action: {esc(route_text(route))}",
    ]


def explain_html(request: Request, decision: Decision) -> str:
    head = f"request: <code>{esc(request.method)} {esc(request.host)}{esc(request.path)}</code>"
    head += f" on <code>{esc(request.listener)}</code>"
    return "<br>".join([head, *decision_lines(decision)])

"""The admin web view's HTML: what it shows of a compiled graph, and that nothing a tenant wrote
(names, hosts, paths, headers, messages) reaches the page as markup."""

from __future__ import annotations

from tests.builders import kube_object, service, snapshot
from turnout.admin import ui
from turnout.app import compile_snapshot
from turnout.graph.build import CompileResult
from turnout.graph.evaluate import evaluate, make_request
from turnout.objects import KubeObject

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'


def proxy(name: str, spec: dict[str, object]) -> KubeObject:
    return kube_object("projectcontour.io/v1", "HTTPProxy", name, spec=spec)


def compiled() -> CompileResult:
    root = proxy(
        f"root{SCRIPT}",
        {
            "virtualhost": {"fqdn": "shop.example.com"},
            "routes": [
                {
                    "conditions": [{"prefix": f"/a{IMG}"}, {"header": {"name": "x", "exact": IMG}}],
                    "services": [{"name": "app", "port": 80}],
                },
                {"services": [{"name": "app", "port": 80}]},
            ],
            "includes": [{"name": "child", "conditions": [{"prefix": "/child"}]}],
        },
    )
    child = proxy("child", {"routes": [{"services": [{"name": "app", "port": 80}]}]})
    broken = proxy(
        "broken",
        {"virtualhost": {"fqdn": "b.example.com"}, "routes": [{"services": [{"port": SCRIPT}]}]},
    )
    return compile_snapshot(snapshot(root, child, broken, service("app")))


def body() -> str:
    result = compiled()
    return ui.graph_body(result, result.statuses, result.problems)


def test_tenant_strings_are_escaped() -> None:
    html = body()
    assert "<script" not in html and "<img" not in html
    assert "root&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in html


def test_graph_shows_owner_routes_in_order_tree_and_states() -> None:
    html = body()
    owner = "HTTPProxy default/root&lt;script&gt;alert(1)&lt;/script&gt;"
    assert '<b>shop.example.com</b>: owned by <span class="obj state-valid"' in html
    assert owner in html
    # First-match order: the longer prefix (with a header) before the include's and `/`.
    rows = html.split('<section id="listeners">', 1)[1].split("</section>", 1)[0]
    assert rows.index("/a&quot;") < rows.index("path prefix /child") < rows.index("path prefix /<")
    tree = html.split('<section id="delegation">', 1)[1]
    assert tree.index(owner) < tree.index("HTTPProxy default/child")
    assert 'class="obj state-invalid" title="invalid: ' in html  # the broken proxy, in red


def test_unchanged_body_has_the_same_poll_token() -> None:
    first, second = body(), body()
    assert ui.body_token(first) == ui.body_token(second)
    fragment = ui.graph_fragment(first)
    assert f'hx-get="/ui/graph?seen={ui.body_token(first)}"' in fragment
    assert 'hx-trigger="every 2s"' in fragment


def test_explain_renders_the_decision_escaped() -> None:
    result = compiled()
    request = make_request("shop.example.com", "/child/x", headers=[("x", IMG)])
    html = ui.explain_html(request, evaluate(result.graph, request))
    assert 'route: <b class="route">HTTPProxy default/root&lt;script&gt;' in html
    assert "-&gt; default/child" in html
    assert "forward to default/app/80/" in html
    assert "<script" not in html


def test_explain_says_why_nothing_matched() -> None:
    result = compiled()
    request = make_request("nobody.example.com", f"/{SCRIPT}")
    html = ui.explain_html(request, evaluate(result.graph, request))
    assert "none matches this host: 404" in html
    assert "<script" not in html


def test_headers_form_field() -> None:
    assert ui.parse_headers("X-A: 1\n\nx-b:two") == [("x-a", "1"), ("x-b", "two")]
    assert isinstance(ui.parse_headers("no colon"), str)


def test_explain_shows_what_a_policy_answers_before_the_route() -> None:
    allowed = proxy(
        "admin",
        {
            "virtualhost": {
                "fqdn": "admin.example.com",
                "ipAllowPolicy": [{"source": "Peer", "cidr": "10.0.0.0/8"}],
            },
            "routes": [{"services": [{"name": "app", "port": 80}]}],
        },
    )
    result = compile_snapshot(snapshot(allowed, service("app")))
    request = make_request("admin.example.com", "/")  # from 127.0.0.1, not allow-listed
    html = ui.explain_html(request, evaluate(result.graph, request))
    assert '<span class="policy">answered by ' in html
    assert "before the route: 403" in html

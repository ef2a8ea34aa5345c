"""Random HTTPProxy route policies: any values (`fuzz`) or only values that compile."""

from __future__ import annotations

import random
from typing import Any

import yaml

from turnout.app import compile_snapshot
from turnout.compile_inputs import CompileOptions
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

DURATIONS = ["1s", "0s", "infinity", "infinite", "600", "-3s", "1.5h", "x", "", "250ms", 7]


HEADER_NAMES = ["x-a", "X-A", "host", "Host", "x_b", "x b", ":path", "", "set-cookie", 3]


HEADER_VALUES = [
    "v",
    "%",
    "%CONTOUR_NAMESPACE%",
    "%CONTOUR_SERVICE_NAME%:%CONTOUR_SERVICE_PORT%",
    "%REQ(x-a)%",
    "%REQ(x a)%",
    "%HOSTNAME%",
    "%START_TIME%",
    "a\nb",
    "",
    "é",
    None,
]


VALUES: dict[str, list[Any]] = {
    "enableWebsockets": [True, False, "yes"],
    "timeoutPolicy": [
        {"response": d, "idle": e, "idleConnection": f}
        for d, e, f in zip(
            DURATIONS, reversed(DURATIONS), DURATIONS[3:] + DURATIONS[:3], strict=True
        )
    ]
    + [{"request": "2s"}, {"request": "1s", "response": "1s"}, {"bogus": 1}, "1s"],
    "retryPolicy": [
        {},
        {"count": -1},
        {"count": 0},
        {"count": 4294967296},
        {"count": 3, "perTryTimeout": "soon", "retryOn": ["5xx", "reset"]},
        {"retryOn": ["bogus"], "retriableStatusCodes": [503, 99, "x"]},
        {"perTryTimeout": "-1s", "retriableStatusCodes": [418]},
    ],
    "loadBalancerPolicy": [
        {"strategy": "Cookie"},
        {"strategy": "RequestHash"},
        {"strategy": "Random", "requestHashPolicies": [{"hashSourceIP": True}]},
        {
            "strategy": "RequestHash",
            "requestHashPolicies": [
                {"headerHashOptions": {"headerName": "x-u"}, "terminal": True},
                {"headerHashOptions": {"headerName": ""}},
                {"queryParameterHashOptions": {"parameterName": "Q"}},
                {"hashSourceIP": True},
                {"hashSourceIP": True},
                {},
            ],
        },
        {"strategy": 3},
    ],
    "pathRewritePolicy": [
        {"replacePrefix": [{"replacement": "/"}]},
        {"replacePrefix": [{"prefix": "/p", "replacement": "/q/"}, {"replacement": "/r"}]},
        {"replacePrefix": [{"replacement": "/a"}, {"replacement": "/b"}]},
        {
            "replacePrefix": [
                {"prefix": "/p", "replacement": "/a"},
                {"prefix": "/p", "replacement": "/b"},
            ]
        },
        {"replacePrefix": [{"prefix": "/p"}]},
        {"replacePrefix": [{"replacement": "a\rb"}]},
    ],
    "cookieRewritePolicies": [
        [{"name": "s", "pathRewrite": {"value": "/"}, "secure": True, "sameSite": "Lax"}],
        [
            {"name": "s", "secure": False},
            {"name": "t", "domainRewrite": {"value": "a.example.com"}},
        ],
        [{"name": "s"}],
        [{"name": "s", "secure": True}, {"name": "s", "secure": False}],
        [{"name": "a'!#$%&*+-.^_`|~z", "secure": True, "sameSite": "None"}],
        [{"name": 'a";os.exit()--', "secure": True}],
        [{"name": "s", "sameSite": "Loose", "domainRewrite": {"value": "Bad Domain"}}],
        [{"name": "é", "pathRewrite": {"value": "/é]]"}}],
    ],
    "internalRedirectPolicy": [
        {},
        {"maxInternalRedirects": 4, "redirectResponseCodes": [301, 308]},
        {"allowCrossSchemeRedirect": "SafeOnly", "denyRepeatedRouteRedirect": True},
        {"allowCrossSchemeRedirect": "Always", "maxInternalRedirects": 0},
        {"maxInternalRedirects": -1, "redirectResponseCodes": [200]},
        {"allowCrossSchemeRedirect": "Sometimes", "denyRepeatedRouteRedirect": 1},
    ],
}


# Values that compile (for the Envoy test), by field; the fuzz test draws from VALUES too.
VALID: dict[str, list[Any]] = {
    "enableWebsockets": [True, False],
    "timeoutPolicy": [
        {"response": "1s", "idle": "infinity", "idleConnection": "90s"},
        {"request": "250ms", "idleConnection": "infinite"},
        {"response": "0s"},
    ],
    "retryPolicy": [VALUES["retryPolicy"][i] for i in (0, 1, 2, 4, 6)],
    "loadBalancerPolicy": VALUES["loadBalancerPolicy"][:4],
    "pathRewritePolicy": VALUES["pathRewritePolicy"][:2],
    "cookieRewritePolicies": [VALUES["cookieRewritePolicies"][i] for i in (0, 1, 4, 7)],
    "internalRedirectPolicy": VALUES["internalRedirectPolicy"][:4],
}


VALID_HEADER_NAMES = ["x-a", "X-B", "set-cookie", "x-c"]


VALID_HEADER_VALUES = [v for v in HEADER_VALUES if isinstance(v, str) and v and "\n" not in v]


def headers_policy(rng: random.Random, valid: bool) -> dict[str, Any]:
    names = VALID_HEADER_NAMES if valid else HEADER_NAMES
    values = VALID_HEADER_VALUES if valid else HEADER_VALUES
    chosen = rng.sample(names, rng.randint(0, 3))
    return {
        "set": [{"name": n, "value": rng.choice(values)} for n in chosen],
        "remove": [n for n in rng.sample(names, rng.randint(0, 2)) if not valid or n not in chosen],
    }


def random_route(rng: random.Random, fuzz: bool) -> dict[str, Any]:
    """A route with a random subset of policies; without `fuzz`, only values that compile."""
    table = VALUES if fuzz else VALID
    route: dict[str, Any] = {"conditions": [{"prefix": rng.choice(["/", "/p", "/p/", "/q"])}]}
    for key, options in table.items():
        if rng.random() < 0.4:
            route[key] = rng.choice(options)
    for key in ("requestHeadersPolicy", "responseHeadersPolicy"):
        if rng.random() < 0.4:
            route[key] = headers_policy(rng, valid=not fuzz)
    services: list[dict[str, Any]] = [{"name": "app", "port": 80, "weight": rng.randint(0, 3)}]
    if rng.random() < 0.5:
        services.append({"name": "other", "port": 80, "weight": rng.randint(0, 3)})
    if rng.random() < 0.4:
        services.append(
            {"name": "shadow", "port": 80, "mirror": True, "weight": rng.randint(0, 150)}
        )
    for svc in services:
        if rng.random() < 0.3:
            svc["requestHeadersPolicy"] = headers_policy(rng, valid=not fuzz)
        if rng.random() < 0.2:
            svc["responseHeadersPolicy"] = headers_policy(rng, valid=not fuzz)
        if rng.random() < 0.2:
            svc["cookieRewritePolicies"] = rng.choice(table["cookieRewritePolicies"])
    route["services"] = services
    if fuzz and rng.random() < 0.3:
        route[rng.choice(list(route))] = rng.choice([None, 1, "x", [], {}])
    return route


SERVICES = "\n---\n".join(
    f"apiVersion: v1\nkind: Service\nmetadata: {{name: {n}, namespace: default}}\n"
    "spec: {ports: [{port: 80}]}\n"
    f"---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    f"metadata: {{name: {n}, namespace: default, labels: {{kubernetes.io/service-name: {n}}}}}\n"
    "addressType: IPv4\nendpoints: [{addresses: [127.0.0.1]}]\n"
    for n in ("app", "other", "shadow")
)


def compile_proxies(routes_per_proxy: list[list[dict[str, Any]]]) -> Any:
    docs = [SERVICES]
    for i, routes in enumerate(routes_per_proxy):
        docs.append(
            yaml.safe_dump(
                {
                    "apiVersion": "projectcontour.io/v1",
                    "kind": "HTTPProxy",
                    "metadata": {"name": f"p{i}", "namespace": "default"},
                    "spec": {"virtualhost": {"fqdn": f"p{i}.example.com"}, "routes": routes},
                }
            )
        )
    parsed = parse_text("\n---\n".join(docs), "fuzz.yaml")
    assert not parsed.problems
    return compile_snapshot(Snapshot.of(parsed.objects), CompileOptions())

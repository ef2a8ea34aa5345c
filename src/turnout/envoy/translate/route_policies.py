"""Route policies (`Route.policies`, `WeightedCluster.policies`) -> fields of an Envoy route.

`apply_route_policies` runs after the route's action is set and only touches routes that forward
(`Route.route`): a redirect or a direct response has no upstream to time out, retry, mirror or
rewrite for, as in Contour. The one exception is a redirect's response headers, which Envoy adds
to the redirect it answers (a Gateway API RequestRedirect with a ResponseHeaderModifier).

What goes where (docs/policies.md, "Route policies", has the full table):
- timeouts -> `RouteAction.timeout` / `idle_timeout` (0 disables; unset is Envoy's default), and a
  per-attempt timeout -> `retry_policy.per_try_timeout`;
- retries -> `RouteAction.retry_policy` (`num_retries` always set, so 0 means none; the codes are
  passed as written, and Envoy only uses them under the `retriable-status-codes` condition);
- internal redirects -> `RouteAction.internal_redirect_policy`, with the `safe_cross_scheme` and
  `previous_routes` predicates for SafeOnly and a refused repeated route;
- header changes -> `Route.request_headers_to_add` / `..._to_remove` (and the response pair), Host
  -> `host_rewrite_literal` / `host_rewrite_header`, prefix -> `prefix_rewrite`;
- mirrors -> `request_mirror_policies` with a `runtime_fraction` per million;
- websockets -> `RouteAction.upgrade_configs`; hashing -> `RouteAction.hash_policy`, in order;
- cookie rewrites -> a Lua script in `typed_per_filter_config` (below);
- per-backend changes (`WeightedCluster.policies`) -> the same fields on that `ClusterWeight`.

Cookie rewriting. Envoy 1.40 has no filter that edits the attributes of a `Set-Cookie` header (the
header mutation filter sets whole values; its formatters cannot parse a cookie), so, like Contour,
turnout runs a small Lua script on the response. Unlike Contour's, the script is generated from
data (one table of rules, strings escaped for Lua), keeps untouched attributes in their original
order, and is only present where a route or backend asks for it. Every HCM carries the Lua
filter without default code (`lua_http_filter`), like the policy filters of `http_filters.py`:
switching cookie rewriting on or off then changes route tables only, never a listener, so Envoy
never drains connections for it.

Per-backend changes need a `ClusterWeight`, so a route whose single backend has policies is
emitted as a one-entry `weighted_clusters`. Two entries for one cluster with different policies
stay two entries (Envoy picks among them by weight); identical ones are merged, as the plain
translation merges repeated clusters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.internal_redirect.previous_routes.v3 import previous_routes_config_pb2
from envoy.extensions.internal_redirect.safe_cross_scheme.v3 import safe_cross_scheme_config_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.matcher.v3 import regex_pb2
from envoy.type.v3 import percent_pb2

from turnout.envoy.translate.common import duration, pack
from turnout.envoy.translate.lua_scripts import (
    location_query_script,
    lua_string,
    request_header_script,
    respond_script,
    split_conditional_headers,
)
from turnout.graph.model import (
    BackendPolicies,
    Cluster,
    CookieRewrite,
    CrossSchemeRedirect,
    Forward,
    HashPolicy,
    HashSource,
    HeaderPolicy,
    HostRewrite,
    InternalRedirectPolicy,
    Mirror,
    PathRewrite,
    Redirect,
    RetryPolicy,
    Route,
    RoutePolicies,
    Timeouts,
    UpstreamProtocol,
)

LUA_FILTER = "envoy.filters.http.lua"
HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
WEBSOCKET = "websocket"
SAFE_CROSS_SCHEME = "envoy.internal_redirect_predicates.safe_cross_scheme"
PREVIOUS_ROUTES = "envoy.internal_redirect_predicates.previous_routes"

# Envoy's bounds: `num_retries` is a uint32, and a FractionalPercent numerator over a million.
_MAX_UINT32 = 2**32 - 1
_MILLION = 1_000_000

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_APPEND = base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD


def apply_route_policies(out: Any, route: Route) -> None:
    """Sets the policies of `route` on its translated Envoy `out` (a `Route` whose action is
    already set). Routes without a `RouteAction` are left alone."""
    if out.WhichOneof("action") != "route":
        if out.WhichOneof("action") == "redirect" and route.policies.response_headers is not None:
            # Envoy adds a route's response headers to the redirect it answers as well.
            headers = route.policies.response_headers
            _set_headers(out.response_headers_to_add, out.response_headers_to_remove, headers)
        if isinstance(route.action, Redirect) and route.action.query_suffix:
            config = lua_pb2.LuaPerRoute()
            config.source_code.inline_string = location_query_script(route.action.query_suffix)
            out.typed_per_filter_config[LUA_FILTER].CopyFrom(pack(config))
        return
    p = route.policies
    action = out.route
    if p.timeouts is not None:
        _set_timeouts(action, p.timeouts)
    if p.retry is not None:
        _set_retry(action.retry_policy, p.retry)
    if p.timeouts is not None and p.timeouts.backend_request_s:
        # One upstream attempt (Gateway API backendRequest) is Envoy's per-try timeout; a retry
        # policy without conditions only carries it.
        action.retry_policy.per_try_timeout.CopyFrom(duration(p.timeouts.backend_request_s))
    native, scripted = split_conditional_headers(p.request_headers)
    if native is not None:
        _set_headers(out.request_headers_to_add, out.request_headers_to_remove, native)
    if p.response_headers is not None:
        _set_headers(
            out.response_headers_to_add, out.response_headers_to_remove, p.response_headers
        )
    if p.host_rewrite is not None:
        _set_host_rewrite(action, p.host_rewrite)
    if p.path_rewrite is not None:
        _set_path_rewrite(action, p.path_rewrite)
    action.request_mirror_policies.extend(translate_mirror(m) for m in p.mirrors)
    if p.websockets:
        action.upgrade_configs.add(upgrade_type=WEBSOCKET)
    action.hash_policy.extend(translate_hash_policy(h) for h in p.hash_policies)
    if p.cookie_rewrites or scripted is not None:
        config = lua_config(p.cookie_rewrites, scripted)
        out.typed_per_filter_config[LUA_FILTER].CopyFrom(config)
    if p.internal_redirect is not None:
        _set_internal_redirect(action.internal_redirect_policy, p.internal_redirect)
    if isinstance(route.action, Forward):
        _set_backend_policies(action, route.action, p, scripted)


# --- timeouts and retries ------------------------------------------------------------------------


def _set_timeouts(action: Any, t: Timeouts) -> None:
    if t.response_s is not None:
        action.timeout.CopyFrom(duration(max(t.response_s, 0.0)))
    if t.idle_s is not None:
        action.idle_timeout.CopyFrom(duration(max(t.idle_s, 0.0)))


def _set_retry(out: Any, r: RetryPolicy) -> None:
    # As Contour: the codes go to Envoy as written, and Envoy only retries on them when the
    # conditions include `retriable-status-codes` (the dialect warns when they do not).
    out.retry_on = ",".join(c for c in r.retry_on if c)
    # Set even when 0: an unset num_retries is Envoy's default of 1, not "no retries".
    out.num_retries.value = min(max(r.count, 0), _MAX_UINT32)
    if r.per_try_timeout_s:
        out.per_try_timeout.CopyFrom(duration(r.per_try_timeout_s))
    out.retriable_status_codes.extend(c for c in r.retriable_status_codes if 0 <= c <= _MAX_UINT32)


def _set_internal_redirect(out: Any, r: InternalRedirectPolicy) -> None:
    # Unset is Envoy's default of one redirect, as Contour sends for 0.
    if r.max_redirects:
        out.max_internal_redirects.value = min(r.max_redirects, _MAX_UINT32)
    out.redirect_response_codes.extend(r.response_codes)
    out.allow_cross_scheme_redirect = r.cross_scheme is not CrossSchemeRedirect.NEVER
    if r.cross_scheme is CrossSchemeRedirect.SAFE_ONLY:
        config = safe_cross_scheme_config_pb2.SafeCrossSchemeConfig()
        out.predicates.add(name=SAFE_CROSS_SCHEME).typed_config.CopyFrom(pack(config))
    if r.deny_repeated_route:
        previous = previous_routes_config_pb2.PreviousRoutesConfig()
        out.predicates.add(name=PREVIOUS_ROUTES).typed_config.CopyFrom(pack(previous))


# --- headers and rewrites ------------------------------------------------------------------------


def _set_headers(to_add: Any, to_remove: Any, policy: HeaderPolicy) -> None:
    for hv in policy.set:
        to_add.add(append_action=_OVERWRITE).header.CopyFrom(
            base_pb2.HeaderValue(key=hv.name, value=hv.value)
        )
    for hv in policy.add:
        to_add.add(append_action=_APPEND).header.CopyFrom(
            base_pb2.HeaderValue(key=hv.name, value=hv.value)
        )
    to_remove.extend(policy.remove)


def _set_host_rewrite(action: Any, host: HostRewrite) -> None:
    if host.from_header:
        action.host_rewrite_header = host.from_header
    elif host.literal:
        action.host_rewrite_literal = host.literal


def _set_path_rewrite(action: Any, rewrite: PathRewrite) -> None:
    if rewrite.prefix is not None:
        # Envoy treats an empty prefix_rewrite as unset; replacing a prefix with nothing is
        # replacing it with "/".
        action.prefix_rewrite = rewrite.prefix or "/"
    elif rewrite.full_path is not None:
        action.regex_rewrite.pattern.CopyFrom(regex_pb2.RegexMatcher(regex="^/.*$"))
        action.regex_rewrite.substitution = rewrite.full_path
    elif rewrite.regex is not None:
        action.regex_rewrite.pattern.CopyFrom(regex_pb2.RegexMatcher(regex=rewrite.regex))
        action.regex_rewrite.substitution = rewrite.substitution or ""


# --- mirrors and hashing -------------------------------------------------------------------------


def translate_mirror(m: Mirror) -> Any:
    out = rc.RouteAction.RequestMirrorPolicy(cluster=m.cluster)
    per_million = round(min(max(m.percent, 0.0), 100.0) * _MILLION / 100)
    if per_million < _MILLION:
        fraction = out.runtime_fraction.default_value
        fraction.numerator = per_million
        fraction.denominator = percent_pb2.FractionalPercent.MILLION
    return out


def translate_hash_policy(h: HashPolicy) -> Any:
    out = rc.RouteAction.HashPolicy(terminal=h.terminal)
    if h.source is HashSource.HEADER:
        out.header.header_name = h.name
    elif h.source is HashSource.QUERY:
        out.query_parameter.name = h.name
    elif h.source is HashSource.SOURCE_IP:
        out.connection_properties.source_ip = True
    else:
        out.cookie.name = h.name
        if h.cookie_ttl_s is not None:
            # A TTL of zero is set on purpose: Envoy then generates a session cookie when the
            # request has none; without a TTL it would generate nothing.
            out.cookie.ttl.CopyFrom(duration(max(h.cookie_ttl_s, 0.0)))
        if h.cookie_path:
            out.cookie.path = h.cookie_path
    return out


# --- per-backend policies ------------------------------------------------------------------------


def _set_backend_policies(
    action: Any, forward: Forward, route: RoutePolicies, scripted: HeaderPolicy | None
) -> None:
    if all(wc.policies is None for wc in forward.clusters):
        return
    entries: list[tuple[str, int, BackendPolicies | None]] = []
    for wc in forward.clusters:
        if wc.weight <= 0:
            continue
        for i, (name, weight, policies) in enumerate(entries):
            if name == wc.cluster and policies == wc.policies:
                entries[i] = (name, weight + wc.weight, policies)
                break
        else:
            entries.append((wc.cluster, wc.weight, wc.policies))
    if not entries:
        return  # nothing forwards; the action was already turned into a direct response
    action.ClearField("cluster")
    action.ClearField("weighted_clusters")
    split = action.weighted_clusters
    for name, weight, policies in entries:
        entry = split.clusters.add(name=name)
        entry.weight.value = min(weight, _MAX_UINT32)
        if policies is not None:
            _set_cluster_weight_policies(entry, policies, route.cookie_rewrites, scripted)


def _set_cluster_weight_policies(
    entry: Any,
    p: BackendPolicies,
    route_cookies: Sequence[CookieRewrite],
    scripted: HeaderPolicy | None,
) -> None:
    if p.request_headers is not None:
        _set_headers(
            entry.request_headers_to_add, entry.request_headers_to_remove, p.request_headers
        )
    if p.response_headers is not None:
        _set_headers(
            entry.response_headers_to_add, entry.response_headers_to_remove, p.response_headers
        )
    if p.host_rewrite is not None and p.host_rewrite.literal:
        entry.host_rewrite_literal = p.host_rewrite.literal
    if p.direct_response is not None:
        answer = p.direct_response
        config = lua_pb2.LuaPerRoute()
        config.source_code.inline_string = respond_script(
            answer.status, answer.body, answer.headers
        )
        entry.typed_per_filter_config[LUA_FILTER].CopyFrom(pack(config))
    elif p.cookie_rewrites:
        # The most specific per-filter config wins in Envoy, so the backend's script must also
        # carry the route's rules (the backend's own win for the same cookie and attribute)
        # and the route's scripted request headers.
        merged = merge_cookie_rewrites([*route_cookies, *p.cookie_rewrites])
        entry.typed_per_filter_config[LUA_FILTER].CopyFrom(lua_config(merged, scripted))


# --- cookie rewriting ----------------------------------------------------------------------------


def merge_cookie_rewrites(rules: Iterable[CookieRewrite]) -> tuple[CookieRewrite, ...]:
    """One rule per cookie name, in first-seen order; a later rule's set attributes win."""
    merged: dict[str, CookieRewrite] = {}
    for r in rules:
        prev = merged.get(r.name)
        if prev is None:
            merged[r.name] = r
            continue
        merged[r.name] = CookieRewrite(
            name=r.name,
            path=r.path if r.path is not None else prev.path,
            domain=r.domain if r.domain is not None else prev.domain,
            secure=r.secure if r.secure is not None else prev.secure,
            same_site=r.same_site if r.same_site is not None else prev.same_site,
        )
    return tuple(merged.values())


def cookie_rewrite_config(rules: Sequence[CookieRewrite]) -> Any:
    """`LuaPerRoute` running `cookie_rewrite_script(rules)`."""
    return lua_config(rules, None)


def lua_config(rules: Sequence[CookieRewrite], headers: HeaderPolicy | None) -> Any:
    """`LuaPerRoute` with one script (Envoy takes one per route): the scripted request headers
    on the request, the cookie rewrites on the response."""
    scripts = []
    if headers is not None:
        scripts.append(request_header_script(headers))
    if rules:
        scripts.append(cookie_rewrite_script(merge_cookie_rewrites(rules)))
    config = lua_pb2.LuaPerRoute()
    config.source_code.inline_string = "\n".join(scripts)
    return pack(config)


def _lua_rule(rule: CookieRewrite) -> str:
    fields = []
    if rule.path is not None:
        fields.append(f"path = {lua_string(rule.path)}")
    if rule.domain is not None:
        fields.append(f"domain = {lua_string(rule.domain)}")
    if rule.secure is not None:
        fields.append(f"secure = {'true' if rule.secure else 'false'}")
    if rule.same_site is not None:
        fields.append(f"samesite = {lua_string(rule.same_site)}")
    return f"  [{lua_string(rule.name)}] = {{{', '.join(fields)}}},"


# The script rewrites every Set-Cookie header whose cookie has a rule: attributes the rule sets
# are dropped where they were (compared without case, as browsers do) and appended with their new
# value; the others keep their order. Headers are collected before any is changed because Envoy
# forbids modifying headers while iterating over them.
_COOKIE_SCRIPT = """\
local rules = {
%s
}

local function trim(s)
  return (string.gsub(s, "^%%s*(.-)%%s*$", "%%1"))
end

local function rewrite(cookie)
  local first = string.find(cookie, ";", 1, true)
  local pair = first and string.sub(cookie, 1, first - 1) or cookie
  local eq = string.find(pair, "=", 1, true)
  if eq == nil then
    return cookie
  end
  local rule = rules[trim(string.sub(pair, 1, eq - 1))]
  if rule == nil then
    return cookie
  end
  local parts = {trim(pair)}
  if first then
    for attr in string.gmatch(string.sub(cookie, first + 1), "[^;]+") do
      attr = trim(attr)
      local key = string.lower(string.match(attr, "^[^=]*"))
      key = trim(key)
      local replaced = (key == "path" and rule.path ~= nil)
        or (key == "domain" and rule.domain ~= nil)
        or (key == "secure" and rule.secure ~= nil)
        or (key == "samesite" and rule.samesite ~= nil)
      if attr ~= "" and not replaced then
        table.insert(parts, attr)
      end
    end
  end
  if rule.path ~= nil then table.insert(parts, "Path=" .. rule.path) end
  if rule.domain ~= nil then table.insert(parts, "Domain=" .. rule.domain) end
  if rule.secure then table.insert(parts, "Secure") end
  if rule.samesite ~= nil then table.insert(parts, "SameSite=" .. rule.samesite) end
  return table.concat(parts, "; ")
end

function envoy_on_response(response_handle)
  local headers = response_handle:headers()
  if headers:get("set-cookie") == nil then
    return
  end
  local cookies = {}
  for name, value in pairs(headers) do
    if name == "set-cookie" then
      table.insert(cookies, rewrite(value))
    end
  end
  headers:remove("set-cookie")
  for _, value in ipairs(cookies) do
    headers:add("set-cookie", value)
  end
end
"""


def cookie_rewrite_script(rules: Sequence[CookieRewrite]) -> str:
    return _COOKIE_SCRIPT % "\n".join(_lua_rule(r) for r in rules)


def lua_http_filter() -> Any:
    """The Lua filter with no default code: it only runs where a route names a script, and does
    nothing else (Envoy logs that the default code has no hooks, once, at info level)."""
    return hcm_pb2.HttpFilter(name=LUA_FILTER, typed_config=pack(lua_pb2.Lua()))


# --- the cluster side of timeouts ----------------------------------------------------------------


def apply_idle_connection_timeout(out: Any, cluster: Cluster) -> None:
    """Sets `Cluster.idle_connection_timeout_s` on the translated cluster `out`: the
    `common_http_protocol_options.idle_timeout` of its `HttpProtocolOptions`, added to the
    options the cluster already has (HTTP/2 settings) or created as plain HTTP/1.1 ones."""
    timeout = cluster.idle_connection_timeout_s
    if timeout is None or cluster.protocol is UpstreamProtocol.TCP:
        return
    options = http_protocol_options_pb2.HttpProtocolOptions()
    existing = out.typed_extension_protocol_options.get(HTTP_PROTOCOL_OPTIONS)
    if existing is not None:
        existing.Unpack(options)
    if options.WhichOneof("upstream_protocol_options") is None:
        # The oneof is required; HTTP/1.1 is what a cluster without options speaks.
        options.explicit_http_config.http_protocol_options.SetInParent()
    # 0 disables the idle timeout in Envoy, which is what Contour's "infinity" means.
    options.common_http_protocol_options.idle_timeout.CopyFrom(duration(max(timeout, 0.0)))
    out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(pack(options))

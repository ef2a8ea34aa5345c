"""Lua scripts for what Envoy's route fields cannot say, generated from graph data.

Two behaviours need a script (both Skipper's, in dialect-neutral graph terms):

- request headers marked `HeaderValue.when_resolved`: set or appended only when every
  substitution in the value comes out non-empty, otherwise left as the request has them. Envoy's
  `request_headers_to_add` skips a header only when the whole value is empty, so every change of
  such a header (its removal, sets and appends, in `HeaderPolicy` order) runs in the script, on
  the request before the router; the route's other headers stay native. Values are computed from
  the request as it arrived, before any change, as Envoy's formatter would.
- a redirect's `query_suffix`: Envoy's redirect keeps the request's query when its path has none;
  the script appends `&<suffix>` to the Location (`?&<suffix>` without a request query, exactly as
  Skipper's `RawQuery + "&" + query`). Local replies pass the encoder filters before the router,
  so the script sees the redirect Envoy answered.

Only the substitutions the dialects produce are translated (`%REQ(h)%`, `%%`,
`%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%`); a value with any other stays native.
Every string from a user reaches the script through `lua_string`, so none can end its literal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from turnout.graph.model import HeaderPolicy, HeaderValue

_SUBSTITUTION = re.compile(r"%%|%REQ\(([^()%]+)\)%|%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%")
_ANY_SUBSTITUTION = re.compile(r"%[^%]*%")


def lua_string(value: str) -> str:
    """A Lua string literal for `value`: anything but plain characters as a decimal byte escape,
    so no user-supplied text can end the literal or the script."""
    out = []
    for byte in value.encode("utf-8"):
        ch = chr(byte)
        out.append(ch if ch.isascii() and (ch.isalnum() or ch in " -_./:") else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def _lua_parts(value: str) -> str | None:
    """The value as a Lua table of parts (`{"s", text}`, `{"h", header}`, `{"ip"}`), or None when
    it uses a substitution the script does not know."""
    parts: list[str] = []
    pos = 0
    for m in _ANY_SUBSTITUTION.finditer(value):
        known = _SUBSTITUTION.fullmatch(m.group(0))
        if known is None:
            return None
        if m.start() > pos:
            parts.append(f'{{"s", {lua_string(value[pos : m.start()])}}}')
        if m.group(0) == "%%":
            parts.append('{"s", "%"}')
        elif known.group(1) is not None:
            parts.append(f'{{"h", {lua_string(known.group(1).lower())}}}')
        else:
            parts.append('{"ip"}')
        pos = m.end()
    if pos < len(value):
        parts.append(f'{{"s", {lua_string(value[pos:])}}}')
    return "{" + ", ".join(parts) + "}"


def _scripted(h: HeaderValue) -> bool:
    return h.when_resolved and _lua_parts(h.value) is not None and "%" in h.value


def split_conditional_headers(
    policy: HeaderPolicy | None,
) -> tuple[HeaderPolicy | None, HeaderPolicy | None]:
    """(what stays in the route's header fields, what the script does): every change of a header
    that has a scripted value moves to the script, so their order is kept."""
    if policy is None:
        return None, None
    names = {h.name.lower() for h in (*policy.set, *policy.add) if _scripted(h)}
    if not names:
        return policy, None

    def split(headers: Sequence[HeaderValue], moved: bool) -> tuple[HeaderValue, ...]:
        return tuple(h for h in headers if (h.name.lower() in names) == moved)

    native = HeaderPolicy(
        split(policy.set, False),
        split(policy.add, False),
        tuple(r for r in policy.remove if r.lower() not in names),
    )
    script = HeaderPolicy(
        split(policy.set, True),
        split(policy.add, True),
        tuple(r for r in policy.remove if r.lower() in names),
    )
    empty = not (native.set or native.add or native.remove)
    return (None if empty else native), script


def _op(kind: str, h: HeaderValue) -> str:
    parts = _lua_parts(h.value) if "%" in h.value else f'{{{{"s", {lua_string(h.value)}}}}}'
    if parts is None:  # not reachable for split_conditional_headers' output
        parts = f'{{{{"s", {lua_string(h.value)}}}}}'
    resolved = "true" if h.when_resolved else "false"
    return f"  {{{lua_string(kind)}, {lua_string(h.name.lower())}, {parts}, {resolved}}},"


_REQUEST_SCRIPT = """\
local ops = {
%s
}

local function peer(handle)
  local address = handle:streamInfo():downstreamDirectRemoteAddress()
  local host = string.match(address, "^%%[(.*)%%]:%%d+$") or string.match(address, "^(.*):%%d+$")
  return host or address
end

local function value(headers, handle, parts, resolved)
  local out = {}
  for _, part in ipairs(parts) do
    local v = part[2]
    if part[1] == "h" then
      v = headers:getAtIndex(part[2], 0) or ""
    elseif part[1] == "ip" then
      v = peer(handle)
    end
    if v == "" and part[1] ~= "s" and resolved then
      return nil
    end
    table.insert(out, v)
  end
  return table.concat(out)
end

function envoy_on_request(handle)
  local headers = handle:headers()
  local values = {}
  for i, op in ipairs(ops) do
    if op[1] ~= "remove" then
      values[i] = value(headers, handle, op[3], op[4])
    end
  end
  for i, op in ipairs(ops) do
    if op[1] == "remove" then
      headers:remove(op[2])
    elseif values[i] ~= nil and values[i] ~= "" then
      if op[1] == "set" then
        headers:replace(op[2], values[i])
      else
        headers:add(op[2], values[i])
      end
    end
  end
end
"""


def request_header_script(policy: HeaderPolicy) -> str:
    """`envoy_on_request` applying `policy` (removals, sets, appends) with Skipper's rule for
    `when_resolved` values."""
    ops = [
        *(f'  {{"remove", {lua_string(r.lower())}, {{}}, false}},' for r in policy.remove),
        *(_op("set", h) for h in policy.set),
        *(_op("add", h) for h in policy.add),
    ]
    return _REQUEST_SCRIPT % "\n".join(ops)


_LOCATION_SCRIPT = """\
local suffix = %s

function envoy_on_response(handle)
  local headers = handle:headers()
  local location = headers:get("location")
  if location == nil then
    return
  end
  local at = string.find(location, "#", 1, true)
  local fragment = ""
  if at then
    fragment = string.sub(location, at)
    location = string.sub(location, 1, at - 1)
  end
  if string.find(location, "?", 1, true) then
    location = location .. "&" .. suffix
  else
    location = location .. "?&" .. suffix
  end
  headers:replace("location", location .. fragment)
end
"""


def location_query_script(suffix: str) -> str:
    """`envoy_on_response` appending `suffix` to the query of the Location Envoy's redirect
    wrote."""
    return _LOCATION_SCRIPT % lua_string(suffix)


_RESPOND_SCRIPT = """\
function envoy_on_request(handle)
  handle:respond({%s}, %s)
end
"""


def respond_script(status: int, body: str, headers: Sequence[HeaderValue]) -> str:
    """`envoy_on_request` answering `status` with `body` and `headers` (literal values) instead
    of forwarding: a weighted cluster's own direct response, which Envoy's route fields cannot
    give one share of a split. Envoy picks the weighted cluster before the filters run, so the
    cluster's per-filter config decides."""
    fields = [f'[":status"] = "{status if 200 <= status < 600 else 500}"']
    names = {h.name.lower() for h in headers}
    if body and "content-type" not in names:
        fields.append('["content-type"] = "text/plain"')
    fields.extend(
        f"[{lua_string(h.name.lower())}] = {lua_string(h.value.replace('%%', '%'))}"
        for h in headers
    )
    return _RESPOND_SCRIPT % (", ".join(fields), lua_string(body))

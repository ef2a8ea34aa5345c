"""Match conditions: Contour's validation rules and how conditions merge along an include chain.

Validation functions return the error message Contour would write (or None); the caller picks the
sub-condition type and reason, because the same check is an `IncludeError` on an include and a
`RouteError` on a route.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from turnout.dialects.httpproxy.spec import HeaderCondition, MatchCondition, QueryCondition
from turnout.graph.model import (
    HeaderMatch,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    StringMatchKind,
)
from turnout.graph.regex import escape, regex_error

_SLASHES = re.compile(r"//+")

HEADER_REGEX_INVALID = "invalid regular expression specified for 'regex' condition"


def include_conditions_error(conds: Sequence[MatchCondition]) -> str | None:
    """Includes delegate a prefix (and headers/queries); exact and regex would not delegate."""
    for c in conds:
        if c.exact:
            return "exact conditions are not allowed in includes block"
        if c.regex:
            return "regex conditions are not allowed in includes block"
    return None


def path_conditions_error(conds: Sequence[MatchCondition]) -> str | None:
    """At most one path condition per block, each starting with `/`, regexes usable by Envoy."""
    count = 0
    for c in conds:
        if c.prefix:
            count += 1
            if not c.prefix.startswith("/"):
                return f"prefix conditions must start with /, {c.prefix} was supplied"
        if c.exact:
            count += 1
            if not c.exact.startswith("/"):
                return f"exact conditions must start with /, {c.exact} was supplied"
        if c.regex:
            count += 1
            if not c.regex.startswith("/"):
                return f"regex conditions must start with /, {c.regex} was supplied"
            err = regex_error(c.regex)
            if err is not None:
                return f"supplied regex: {c.regex} invalid. error: {c.field}.regex: {err}"
    if count > 1:
        return "more than one prefix, exact or regex is not allowed in a condition block"
    return None


def header_conditions_error(conds: Sequence[MatchCondition]) -> str | None:
    """Contour's `headerMatchConditionsValid`, plus the CRD's "exactly one operator" rule.

    `seen` holds each condition with its flags and its name lower-cased; a contradiction is looked
    up as the opposite condition with default flags, so (as in Contour) the result depends on the
    order: `exact: a` then `notexact: a, ignoreCase: true` contradict, the other way round they
    do not. The cookie and user-agent shorthands take part as the header conditions they are.
    """
    seen: set[HeaderCondition] = set()
    with_exact: set[str] = set()
    for field, h in ((c.field, h) for c in conds for h in c.headers()):
        ops = h.operators()
        if len(ops) != 1:
            found = ", ".join(ops) if ops else "none"
            return (
                f"{field}.header: must set exactly one of present, notpresent, contains, "
                f"notcontains, exact, notexact or regex; found {found}"
            )
        name = h.name.lower()
        if h.present:
            if HeaderCondition(name=name, notpresent=True) in seen:
                return _contradiction("present", "notpresent")
        elif h.notpresent:
            if HeaderCondition(name=name, present=True) in seen:
                return _contradiction("present", "notpresent")
        elif h.exact:
            if name in with_exact:
                return "cannot specify duplicate header 'exact match' conditions in the same route"
            with_exact.add(name)
            if HeaderCondition(name=name, notexact=h.exact) in seen:
                return _contradiction("exact", "notexact")
        elif h.notexact:
            if HeaderCondition(name=name, exact=h.notexact) in seen:
                return _contradiction("exact", "notexact")
        elif h.contains:
            if HeaderCondition(name=name, notcontains=h.contains) in seen:
                return _contradiction("contains", "notcontains")
        elif h.notcontains:
            if HeaderCondition(name=name, contains=h.notcontains) in seen:
                return _contradiction("contains", "notcontains")
        elif h.regex:
            err = regex_error(h.regex)
            if err is not None:
                return f"{HEADER_REGEX_INVALID}: {field}.header.regex: {err}"
        # Most names are written in lower case already: no copy then.
        seen.add(h if h.name == name else replace(h, name=name))
    return None


def _contradiction(a: str, b: str) -> str:
    return f"cannot specify contradictory '{a}' and '{b}' conditions for the same route and header"


def query_conditions_error(conds: Sequence[MatchCondition]) -> str | None:
    """Contour's `queryParameterMatchConditionsValid`."""
    with_exact: set[str] = set()
    for c in conds:
        q = c.query
        if q is None:
            continue
        ops = q.operators()
        if not ops:
            return "must specify at least one query parameter condition"
        if len(ops) > 1:
            return "cannot specify more than one condition in the same match condition branch"
        name = q.name.lower()
        if q.exact:
            if name in with_exact:
                return (
                    "cannot specify duplicate query parameter 'exact match' conditions "
                    "in the same route"
                )
            with_exact.add(name)
        if q.regex:
            err = regex_error(q.regex)
            if err is not None:
                return f"{HEADER_REGEX_INVALID}: {c.field}.queryParameter.regex: {err}"
    return None


def _path_part(c: MatchCondition) -> tuple[PathMatchKind, str] | None:
    # Contour's switch order when a block sets several (rejected by validation anyway).
    if c.prefix:
        return (PathMatchKind.PREFIX, c.prefix)
    if c.exact:
        return (PathMatchKind.EXACT, c.exact)
    if c.regex:
        return (PathMatchKind.REGEX, c.regex)
    return None


def merge_path(conds: Iterable[MatchCondition]) -> PathMatch:
    """One path match for the conditions of a whole include chain (Contour's
    `mergePathMatchConditions`), with two deliberate differences:

    - the last *path* condition decides between prefix and exact; Contour looks at the last
      condition of any kind, so `[exact: /a, header: ...]` silently became a prefix match;
    - when a regex is merged with the prefixes delegated by includes, the prefixes are escaped and
      the regex is grouped, so the result cannot match outside the delegated prefix (Contour
      concatenates the strings: an include at `/a.b` let `.` match any character, and a child
      regex `/x|/admin` matched `/admin` anywhere on the virtual host).
    """
    parts = [p for p in (_path_part(c) for c in conds) if p is not None]
    if not parts:
        return PathMatch(PathMatchKind.PREFIX, "/")
    if any(kind is PathMatchKind.REGEX for kind, _ in parts):
        regex = ""
        literal = ""
        for kind, value in parts:
            if kind is PathMatchKind.REGEX:
                regex += escape(_SLASHES.sub("/", literal).rstrip("/")) + f"(?:{value})"
                literal = ""
            else:
                literal += value
        regex += escape(_SLASHES.sub("/", literal))
        return PathMatch(PathMatchKind.REGEX, regex)
    value = _SLASHES.sub("/", "".join(v for _, v in parts)) or "/"
    return PathMatch(parts[-1][0], value)


def header_match(h: HeaderCondition) -> HeaderMatch | None:
    """The graph matcher for one header condition; Contour only honours `treatMissingAsEmpty`
    on negative matches and `ignoreCase` on non-regex ones."""
    name = h.name.lower()
    if h.present:
        return HeaderMatch(name, StringMatchKind.PRESENT)
    if h.notpresent:
        return HeaderMatch(name, StringMatchKind.PRESENT, invert=True)
    if h.contains:
        return HeaderMatch(name, StringMatchKind.CONTAINS, h.contains, ignore_case=h.ignore_case)
    if h.notcontains:
        return HeaderMatch(
            name,
            StringMatchKind.CONTAINS,
            h.notcontains,
            invert=True,
            ignore_case=h.ignore_case,
            treat_missing_as_empty=h.treat_missing_as_empty,
        )
    if h.exact:
        return HeaderMatch(name, StringMatchKind.EXACT, h.exact, ignore_case=h.ignore_case)
    if h.notexact:
        return HeaderMatch(
            name,
            StringMatchKind.EXACT,
            h.notexact,
            invert=True,
            ignore_case=h.ignore_case,
            treat_missing_as_empty=h.treat_missing_as_empty,
        )
    if h.regex:
        return HeaderMatch(name, StringMatchKind.REGEX, h.regex)
    return None


def query_match(q: QueryCondition) -> QueryMatch | None:
    if q.exact:
        return QueryMatch(q.name, StringMatchKind.EXACT, q.exact, ignore_case=q.ignore_case)
    if q.prefix:
        return QueryMatch(q.name, StringMatchKind.PREFIX, q.prefix, ignore_case=q.ignore_case)
    if q.suffix:
        return QueryMatch(q.name, StringMatchKind.SUFFIX, q.suffix, ignore_case=q.ignore_case)
    if q.regex:
        return QueryMatch(q.name, StringMatchKind.REGEX, q.regex)
    if q.contains:
        return QueryMatch(q.name, StringMatchKind.CONTAINS, q.contains, ignore_case=q.ignore_case)
    if q.present:
        return QueryMatch(q.name, StringMatchKind.PRESENT)
    return None


def merge_headers(conds: Iterable[MatchCondition]) -> tuple[HeaderMatch, ...]:
    """Header conditions along the chain are ANDed: every one is kept (the cookie and
    user-agent shorthands are header conditions like any other)."""
    out = (header_match(h) for c in conds for h in c.headers())
    return tuple(m for m in out if m is not None)


def merge_query(conds: Iterable[MatchCondition]) -> tuple[QueryMatch, ...]:
    out = (query_match(c.query) for c in conds if c.query is not None)
    return tuple(m for m in out if m is not None)


_HeaderKey = tuple[str, str, str, bool, bool, bool]
_QueryKey = tuple[str, str, str, bool]
IncludeKey = tuple[str, tuple[_HeaderKey, ...], tuple[_QueryKey, ...]]


def _include_header_keys(conds: Sequence[MatchCondition]) -> list[_HeaderKey]:
    # Contour compares its merged header conditions as structs, so the name counts as written:
    # `X-Tenant` and `x-tenant` are different conditions to this check (not to Envoy).
    out: list[_HeaderKey] = []
    for h in (h for c in conds for h in c.headers()):
        m = header_match(h)
        if m is not None:
            out.append(
                (h.name, m.kind.value, m.value, m.invert, m.ignore_case, m.treat_missing_as_empty)
            )
    return out


def _query_key(q: QueryMatch) -> _QueryKey:
    return (q.name, q.kind.value, q.value, q.ignore_case)


def include_conditions_identical(conds: Sequence[MatchCondition], seen: set[IncludeKey]) -> bool:
    """Contour's `includeMatchConditionsIdentical`: True when an earlier include of the same
    parent had the same conditions, in any order. No conditions, or a lone `prefix: /`, never
    counts, because existing include trees rely on several includes sharing the whole space."""
    return include_identical(include_key(conds), seen)


def include_key(conds: Sequence[MatchCondition]) -> IncludeKey | None:
    """What `include_conditions_identical` compares; None for conditions that never count."""
    path = merge_path(conds)
    headers = tuple(sorted(_include_header_keys(conds)))
    query = tuple(sorted(_query_key(q) for q in merge_query(conds)))
    if path.value == "/" and not headers and not query:
        return None
    return (path.value, headers, query)


def include_identical(key: IncludeKey | None, seen: set[IncludeKey]) -> bool:
    """`include_conditions_identical` from the conditions' `include_key`."""
    if key is None:
        return False
    if key in seen:
        return True
    seen.add(key)
    return False

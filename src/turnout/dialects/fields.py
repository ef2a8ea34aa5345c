"""The lenient field reader the dialects' spec parsers share.

Each dialect reads its objects field by field, never raising: a wrong type, a missing required
field or an unknown key becomes a problem naming the field. `FieldReader` holds the typed
accessors; a dialect subclasses it and says, through `field_error`, how a problem is recorded
(a `Problem` with its reason and type, or a plain message), so that every dialect keeps its own
wording while the checks themselves live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The largest uint32, the type of Envoy's weights, thresholds and counts.
MAX_UINT32 = 2**32 - 1
# The most seconds Envoy takes in a google.protobuf.Duration (10000 years).
MAX_DURATION_SECONDS = 315_576_000_000

# Turnout's caps on list lengths, for the APIs that set none (HTTPProxy, IngressRoute, Route,
# RouteGroup, Ingress): one object's list is read up to its cap and no further, so one file cannot
# make every tenant's compile wait (issue 14: 20,000 routes in one list froze changes for 30 s+).
# Each cap is far above anything a real object writes. docs/policies.md lists them. The lists of
# routes are capped at 256: a route costs 50-250 us to compile, and issue 14 keeps the worst
# object under 100 ms (bench/worst_object.py); larger route tables are split over objects
# (HTTPProxy includes, IngressRoute delegation, more RouteGroups or Ingresses).
LIST_CAPS: Mapping[str, int] = {
    "routes": 256,
    "rules": 256,
    "paths": 256,
    "includes": 256,
    "services": 1024,
    "backends": 1024,
    "defaultBackends": 1024,
    "conditions": 256,
    "headers": 256,
    "predicates": 256,
    "filters": 256,
}
# Every other list (hosts, aliases, methods, header policies, retry codes, ...).
DEFAULT_LIST_CAP = 1024
# The most routes one object may make, whatever its lists multiply to: a RouteGroup serves each
# route on every host (and once per method), an Ingress has paths in each of its rules. Within
# their caps those lists still multiply to a million routes; this keeps the object to what the
# `routes` cap allows.
MAX_OBJECT_ROUTES = 256
# The most backend references (services, upstreams, backends) all routes of one object may name
# together: each costs about as much as a route (its Service, port and upstream settings are
# read), and 256 routes of 1,024 services each would be a quarter of a million.
MAX_OBJECT_BACKENDS = 512


def list_length(value: Any, *keys: str) -> int:
    """The length of the list at `value[keys[0]][keys[1]]...`; 0 when a step is missing or of
    another type. For totals over lists, counted before any entry is read."""
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return len(value) if isinstance(value, tuple | list) else 0


def total_routes_problem(total: int, what: str) -> str | None:
    """Why an object that would make `total` routes is refused (over `MAX_OBJECT_ROUTES`);
    `what` names what is counted, e.g. "paths over all rules"."""
    if total <= MAX_OBJECT_ROUTES:
        return None
    return f"may make at most {MAX_OBJECT_ROUTES} routes in total ({what}), got {total}"


def total_backends_problem(routes: Any, key: str) -> str | None:
    """Why an object whose `routes` (as written) name more than `MAX_OBJECT_BACKENDS` backends
    in their `key` lists, together, is refused; None when they do not (or when a list is over its
    own cap, which is reported as such)."""
    if not isinstance(routes, tuple | list) or len(routes) > LIST_CAPS["routes"]:
        return None
    counts = [list_length(route, key) for route in routes]
    if any(count > LIST_CAPS.get(key, DEFAULT_LIST_CAP) for count in counts):
        return None
    return backends_over_problem(sum(counts), key)


def backends_over_problem(total: int, what: str) -> str | None:
    if total <= MAX_OBJECT_BACKENDS:
        return None
    return f"may name at most {MAX_OBJECT_BACKENDS} {what} over all routes, got {total}"


def list_cap(key: str) -> int:
    """The most entries a list at `key` may have: the reader's cap and the CRD's maxItems."""
    return LIST_CAPS.get(key, DEFAULT_LIST_CAP)


def describe(value: Any) -> str:
    """What a value read from YAML is, for "must be X, got Y" messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, Sequence):
        return "a list"
    return type(value).__name__


class FieldReader:
    """Reads fields with their types checked; every problem goes to `field_error` with its path.

    Subclasses implement `field_error` and, when they pass `ignored`/`refused` to
    `check_fields`, `ignored_field`/`refused_field`; the other hooks have defaults.
    """

    def field_error(self, where: str, message: str) -> None:
        """Records that the field at `where` is wrong: `message` says how."""
        raise NotImplementedError

    def refused_field(self, where: str) -> None:
        """A field turnout knows but does not support is set."""
        raise NotImplementedError

    def ignored_field(self, where: str) -> None:
        """A field turnout knows and ignores is set."""
        raise NotImplementedError

    # Whether any field error refuses the whole object (HTTPProxy, IngressRoute, Ingress, a Gateway
    # API route): then a list over its cap is not read at all, since nothing of it is served.
    # Lenient readers (RouteGroup, Route drop only the invalid entry) read the first `cap`.
    refuses_whole_object = False

    def is_set(self, value: Any) -> bool:
        """Whether a refused or ignored field counts as set."""
        return value is not None

    def is_list(self, value: Any) -> bool:
        """Whether `value` is read as a list."""
        return isinstance(value, tuple | list) or (
            not isinstance(value, str | bytes | Mapping) and isinstance(value, Sequence)
        )

    def string_problem(self, value: str) -> str | None:
        """Why a string value is refused beyond its type; None when it is fine."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must be valid UTF-8"
        return None

    def range_problem(self, value: int, minimum: int | None, maximum: int | None) -> str | None:
        """Why an integer is out of bounds; None when it is within them."""
        if minimum is not None and value < minimum:
            return f"must be at least {minimum}, got {value}"
        if maximum is not None and value > maximum:
            return f"must be at most {maximum}, got {value}"
        return None

    def mapping(self, value: Any, path: str) -> Mapping[str, Any] | None:
        if isinstance(value, Mapping):
            return value
        self.field_error(path, f"must be an object, got {describe(value)}")
        return None

    def check_fields(
        self,
        m: Mapping[str, Any],
        path: str,
        known: frozenset[str],
        ignored: frozenset[str] = frozenset(),
        refused: frozenset[str] = frozenset(),
    ) -> None:
        for key in m:
            if key in known:
                continue
            where = f"{path}.{key}"
            if key in refused:
                if self.is_set(m[key]):
                    self.refused_field(where)
            elif key in ignored:
                if self.is_set(m[key]):
                    self.ignored_field(where)
            else:
                self.unknown_field(where, key)

    def unknown_field(self, where: str, key: str) -> None:
        """A key the API does not have is set."""
        # A typo ("pathprefix") would otherwise silently widen or drop what the user meant.
        self.field_error(where, f'unknown field "{key}"')

    def string(self, m: Mapping[str, Any], key: str, path: str, required: bool = False) -> str:
        value = m.get(key)
        where = f"{path}.{key}"
        if value is None:
            if required:
                self.field_error(where, "required field is missing")
            return ""
        if not isinstance(value, str):
            self.field_error(where, f"must be a string, got {describe(value)}")
            return ""
        problem = self.string_problem(value)
        if problem is not None:
            self.field_error(where, problem)
            return ""
        if required and not value:
            self.field_error(where, "must not be empty")
        return value

    def boolean(self, m: Mapping[str, Any], key: str, path: str) -> bool:
        value = m.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.field_error(f"{path}.{key}", f"must be a boolean, got {describe(value)}")
            return False
        return value

    def optional_integer(
        self,
        m: Mapping[str, Any],
        key: str,
        path: str,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        """The integer at `key`; None when it is missing, or wrong (and reported)."""
        value = m.get(key)
        where = f"{path}.{key}"
        if value is None:
            if required:
                self.field_error(where, "required field is missing")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.field_error(where, f"must be an integer, got {describe(value)}")
            return None
        problem = self.range_problem(value, minimum, maximum)
        if problem is not None:
            self.field_error(where, problem)
            return None
        return value

    def integer(
        self,
        m: Mapping[str, Any],
        key: str,
        path: str,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        """The integer at `key`; 0 when it is missing, or wrong (and reported)."""
        value = self.optional_integer(m, key, path, required, minimum, maximum)
        return 0 if value is None else value

    def sequence(self, m: Mapping[str, Any], key: str, path: str) -> Sequence[Any] | None:
        """The list at `key`; None when it is missing, or not a list (and reported)."""
        value = m.get(key)
        if value is None:
            return None
        if not self.is_list(value):
            self.field_error(f"{path}.{key}", f"must be a list, got {describe(value)}")
            return None
        return value  # type: ignore[no-any-return]

    def list_cap(self, key: str) -> int:
        """The most entries a list at `key` may have (turnout's cap, `LIST_CAPS`)."""
        return list_cap(key)

    def capped(self, value: Sequence[Any], path: str, cap: int) -> Sequence[Any]:
        """`value`, or when it is longer than `cap` (reported at `path`) its first `cap` entries,
        or none when the error refuses the whole object anyway."""
        if len(value) <= cap:
            return value
        self.field_error(path, f"must have at most {cap} items, got {len(value)}")
        return () if self.refuses_whole_object else value[:cap]

    def items(
        self, m: Mapping[str, Any], key: str, path: str, maximum: int | None = None
    ) -> list[tuple[str, Any]]:
        """(path, entry) for each entry of the list at `key`; [] when it is missing or wrong.
        A list longer than `maximum` (the API's maxItems; turnout's cap when None) is reported
        and only its first `maximum` entries are read."""
        value = self.sequence(m, key, path)
        if value is None:
            return []
        cap = self.list_cap(key) if maximum is None else maximum
        value = self.capped(value, f"{path}.{key}", cap)
        return [(f"{path}.{key}[{i}]", item) for i, item in enumerate(value)]


# --- Go durations --------------------------------------------------------------------------------

_NANOS_PER_UNIT = {
    b"ns": 1,
    b"us": 1_000,
    "µs".encode(): 1_000,  # U+00B5: Go accepts both micro signs
    "μs".encode(): 1_000,  # U+03BC
    b"ms": 1_000_000,
    b"s": 1_000_000_000,
    b"m": 60_000_000_000,
    b"h": 3_600_000_000_000,
}
_MAX_INT64 = 2**63 - 1
NANOS_PER_SECOND = 1_000_000_000


def time_quote(s: bytes) -> str:
    """The `time` package's own quoting (not strconv.Quote), so that messages match Go's."""
    out = ['"']
    for byte in s:
        if byte >= 0x80 or byte < 0x20:
            out.append(f"\\x{byte:02x}")
        else:
            ch = chr(byte)
            out.append("\\" + ch if ch in '"\\' else ch)
    out.append('"')
    return "".join(out)


def parse_go_duration(text: str) -> int:
    """Go's `time.ParseDuration`: a signed sequence of decimal numbers, each with an optional
    fraction and a unit (ns, us, µs, ms, s, m, h), or "0". Returns nanoseconds (Go's int64,
    overflow included); raises ValueError whose message is Go's error text, word for word."""
    orig = text.encode("utf-8")
    s = orig
    neg = False
    if s[:1] in (b"-", b"+"):
        neg = s[:1] == b"-"
        s = s[1:]
    if s == b"0":
        return 0
    if not s:
        raise _invalid_duration(orig)
    total = 0
    while s:
        value, s = _duration_term(orig, s)
        total += value
        if total > 1 << 63:
            raise _invalid_duration(orig)
    if neg:
        return -total
    if total > _MAX_INT64:
        raise _invalid_duration(orig)
    return total


def _invalid_duration(orig: bytes) -> ValueError:
    return ValueError("time: invalid duration " + time_quote(orig))


def _duration_term(orig: bytes, s: bytes) -> tuple[int, bytes]:
    """The nanoseconds of the leading `<number><unit>` of `s`, and the rest of `s`."""
    if not (s[:1] == b"." or s[:1].isdigit()):
        raise _invalid_duration(orig)
    whole, pre, s = _leading_int(orig, s)
    frac, scale, post = 0, 1.0, False
    if s[:1] == b".":
        frac, scale, post, s = _leading_fraction(s[1:])
    if not pre and not post:
        raise _invalid_duration(orig)
    i = 0
    while i < len(s) and not (s[i] == 0x2E or 0x30 <= s[i] <= 0x39):
        i += 1
    if i == 0:
        raise ValueError("time: missing unit in duration " + time_quote(orig))
    unit_name, s = s[:i], s[i:]
    unit = _NANOS_PER_UNIT.get(unit_name)
    if unit is None:
        raise ValueError(
            "time: unknown unit " + time_quote(unit_name) + " in duration " + time_quote(orig)
        )
    if whole > (1 << 63) // unit:
        raise _invalid_duration(orig)
    value = whole * unit
    if frac > 0:
        # Go scales the fraction in float64, so very long fractions round as Go's do.
        value += int(float(frac) * (float(unit) / scale))
        if value > 1 << 63:
            raise _invalid_duration(orig)
    return value, s


def _leading_int(orig: bytes, s: bytes) -> tuple[int, bool, bytes]:
    """Go's `leadingInt`: the digits at the start of `s` (refused past 2**63), whether there were
    any, and the rest."""
    i = 0
    v = 0
    while i < len(s) and 0x30 <= s[i] <= 0x39:
        if v > (1 << 63) // 10:
            raise _invalid_duration(orig)
        v = v * 10 + s[i] - 0x30
        if v > 1 << 63:  # 2**63 itself is allowed: "-9223372036854775808ns"
            raise _invalid_duration(orig)
        i += 1
    return v, i > 0, s[i:]


def _leading_fraction(s: bytes) -> tuple[int, float, bool, bytes]:
    """Go's `leadingFraction`: digits past int64 precision are dropped, not refused."""
    i = 0
    frac, scale = 0, 1.0
    overflow = False
    while i < len(s) and 0x30 <= s[i] <= 0x39:
        if not overflow:
            if frac > _MAX_INT64 // 10:
                overflow = True
            else:
                frac = frac * 10 + s[i] - 0x30
                scale *= 10
        i += 1
    return frac, scale, i > 0, s[i:]


def go_duration_seconds(text: str) -> float | None:
    """`parse_go_duration` in seconds, or None where Go refuses `text`."""
    try:
        return parse_go_duration(text) / NANOS_PER_SECOND
    except ValueError:
        return None

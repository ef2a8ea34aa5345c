"""The lenient field reader the dialects' spec parsers share.

Each dialect reads its objects field by field, never raising: a wrong type, a missing required
field or an unknown key becomes a problem naming the field. `FieldReader` holds the typed
accessors; a dialect subclasses it and says, through `field_error`, how a problem is recorded
(a `Problem` with its reason and type, or a plain message), so that every dialect keeps its own
wording while the checks themselves live in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# The largest uint32, the type of Envoy's weights, thresholds and counts.
MAX_UINT32 = 2**32 - 1
# The most seconds Envoy takes in a google.protobuf.Duration (10000 years).
MAX_DURATION_SECONDS = 315_576_000_000


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

    def items(self, m: Mapping[str, Any], key: str, path: str) -> list[tuple[str, Any]]:
        """(path, entry) for each entry of the list at `key`; [] when it is missing or wrong."""
        value = self.sequence(m, key, path)
        if value is None:
            return []
        return [(f"{path}.{key}[{i}]", item) for i, item in enumerate(value)]


# --- Go durations --------------------------------------------------------------------------------

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs (U+00B5 and U+03BC)
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")


def parse_go_duration(text: str) -> float | str:
    """Seconds, or Go's `time.ParseDuration` error message for `text` (no int64 overflow
    check: callers bound their durations themselves)."""
    invalid = f'time: invalid duration "{text}"'
    s = text
    negative = False
    if s[:1] in ("+", "-"):
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        return invalid
    total = 0.0
    while s:
        match = _DURATION_PART.match(s)
        assert match is not None  # the pattern matches the empty string
        number, unit = match.group(1), match.group(2)
        if number in ("", "."):
            return invalid
        if not unit:
            return f'time: missing unit in duration "{text}"'
        if unit not in _UNITS:
            return f'time: unknown unit "{unit}" in duration "{text}"'
        total += float(number) * _UNITS[unit]
        s = s[match.end() :]
    return -total if negative else total

"""RE2 as Envoy uses it: one place for whether Envoy accepts a regex, and how it matches.

Envoy compiles every `safe_regex` with Google RE2 and rejects (NACKs) a whole resource when a
regex does not parse or when its compiled program is larger than the runtime key
`re2.max_program_size.error_level` (100 by default). A dialect must catch both cases itself, on the
object that wrote the regex, so that one bad regex never takes down anybody else's routes.

Envoy 1.40 compiles the pattern's UTF-8 bytes with RE2 in Latin-1 mode, measured against the real
binary's `--mode validate` ("RE2 program size of N", and which patterns it refuses): `.` and
`[^/]` are one byte (`/x.{20}` is 46, where RE2's default UTF-8 mode counts 166), `[本-日]` parses
(a range between the bytes A5 and E6) although UTF-8 RE2 refuses it, and `\\x{100}` does not
parse. Everything here therefore compiles the same way, so that the verdict is Envoy's.
"""

from __future__ import annotations

from functools import lru_cache

import re2

# Envoy's default for `re2.max_program_size.error_level`.
ENVOY_MAX_PROGRAM_SIZE = 100

# RE2 metacharacters; escaping only these keeps merged regexes readable in `explain` output.
_META = frozenset("\\.+*?()|[]{}^$")

_LATIN1 = re2.Options()
_LATIN1.encoding = re2.Options.Encoding.LATIN1
# RE2 logs parse errors to stderr by default; the error is reported in the status instead.
_LATIN1.log_errors = False


@lru_cache(maxsize=8192)
def envoy_regex(pattern: str) -> re2._Regexp:
    """`pattern` compiled as Envoy compiles it; match it against a value's UTF-8 bytes.

    Raises re2.error when Envoy would not parse it (and UnicodeEncodeError for a lone surrogate).
    """
    return re2.compile(pattern.encode("utf-8"), _LATIN1)


def envoy_program_size(pattern: str) -> int:
    """The program size Envoy 1.40 compares with `re2.max_program_size.error_level`.

    Raises re2.error when Envoy would not parse `pattern`.
    """
    return int(envoy_regex(pattern).programsize)


def regex_error(pattern: str, max_program_size: int = ENVOY_MAX_PROGRAM_SIZE) -> str | None:
    """Why Envoy would reject `pattern`, or None when it is usable."""
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        return "the regex is not valid UTF-8"
    try:
        size = envoy_program_size(pattern)
    except Exception as err:  # re2 raises its own error type, and TypeError on odd input
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return f"invalid RE2 syntax: {detail}"
    if size > max_program_size:
        return f"RE2 program size {size} exceeds Envoy's limit of {max_program_size}"
    return None


def escape(literal: str) -> str:
    """A regex that matches `literal` exactly (RE2 accepts a backslash before any punctuation)."""
    return "".join(f"\\{c}" if c in _META else c for c in literal)

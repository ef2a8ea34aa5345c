"""RE2 checks shared by the dialects: a regex is only usable if Envoy will accept it.

Envoy compiles every `safe_regex` with Google RE2 and rejects (NACKs) a whole resource when a
regex does not parse or when its compiled program is larger than the runtime key
`re2.max_program_size.error_level` (100 by default). A dialect must catch both cases itself, on the
object that wrote the regex, so that one bad regex never takes down anybody else's routes.
"""

from __future__ import annotations

import re2

# Envoy's default for `re2.max_program_size.error_level`.
ENVOY_MAX_PROGRAM_SIZE = 100

# RE2 metacharacters; escaping only these keeps merged regexes readable in `explain` output.
_META = frozenset("\\.+*?()|[]{}^$")


def regex_error(pattern: str, max_program_size: int = ENVOY_MAX_PROGRAM_SIZE) -> str | None:
    """Why Envoy would reject `pattern`, or None when it is usable."""
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        return "the regex is not valid UTF-8"
    options = re2.Options()
    # RE2 logs parse errors to stderr by default; the error is reported in the status instead.
    options.log_errors = False
    try:
        compiled = re2.compile(pattern, options)
    except Exception as err:  # re2 raises its own error type, and TypeError on odd input
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return f"invalid RE2 syntax: {detail}"
    size = int(compiled.programsize)
    if size > max_program_size:
        return f"RE2 program size {size} exceeds Envoy's limit of {max_program_size}"
    return None


def escape(literal: str) -> str:
    """A regex that matches `literal` exactly (RE2 accepts a backslash before any punctuation)."""
    return "".join(f"\\{c}" if c in _META else c for c in literal)

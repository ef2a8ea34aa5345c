"""Skipper's eskip route language: a hand-written parser for the whole grammar, as Skipper ships it.

The grammar is Skipper's `eskip/parser.y` (goyacc) and the tokens its `eskip/lexer.go`:

    document   := routes | route
    routes     := ε | routedef | routes ';' routedef | routes ';'
    routedef   := symbol ':' route
    route      := predicates '->' backend | predicates '->' filters '->' backend
    predicates := predicate | predicates '&&' predicate
    predicate  := '*' | symbol '(' args ')'
    filters    := filter | filters '->' filter
    filter     := symbol '(' args ')'
    args       := ε | arg | args ',' arg
    arg        := number | string | regexp
    backend    := string | <shunt> | <loopback> | <dynamic> | <forward>
                | '<' [symbol ','] string {',' string} '>'

What the lexer accepts, exactly as Skipper's does (so that the same text is accepted or refused):

- whitespace is space, `\\t`, `\\n`, `\\v`, `\\f`, `\\r`; `//` starts a comment to the end of line;
- a symbol is `[A-Za-z_][A-Za-z0-9_]*` (ASCII only);
- a number is digits with at most one `.` (`.5` is one, `1.` is an incomplete token); there is
  no sign and no exponent: `-1` is an unexpected token. Every number is a float, as Skipper's
  parser yields float64 (`status(200)` has the argument `200.0`);
- strings are `"..."` or `` `...` `` with the escapes `\\a \\b \\f \\n \\r \\t \\v`, the
  delimiter and `\\\\`; any other escaped character keeps its backslash;
- a regexp is `/.../`: `\\/` is a slash, `\\\\` one backslash, other escapes are kept as written
  (`\\d`), and a `/` inside `[...]` does not end it.

Errors are worded as Skipper's: `parse failed after token <last token>[, last route id: <id>],
position <bytes consumed>: <reason>`, the reason being `syntax error` when the grammar refuses a
token, or the lexer's own (`unexpected token`, `incomplete token`, `invalid character`) when the
text ends validly right before the character the lexer could not read. `EskipError.position`
points at the offending token itself (line and column are 1-based; the offset counts characters
of the text given), which is more useful to a user than Skipper's byte count, kept in the
message.

`parse` also applies what Skipper's `eskip.Parse` checks after the grammar (duplicate `Path` or
`Method`, repeated `Header` names, argument types of the predicates it folds into route fields,
load-balancer endpoint URLs); `parse_predicates` and `parse_filters` do not, as Skipper's
`ParsePredicates` / `ParseFilters`, which RouteGroup validation uses, do not.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

__all__ = [
    "Arg",
    "Backend",
    "BackendKind",
    "Call",
    "EskipError",
    "EskipRoute",
    "Position",
    "Regexp",
    "format_arg",
    "format_call",
    "number_arg",
    "parse",
    "parse_filters",
    "parse_predicates",
    "string_arg",
]


@dataclass(frozen=True, slots=True)
class Position:
    offset: int  # characters from the start of the text
    line: int  # 1-based
    column: int  # 1-based, in characters


@dataclass(frozen=True, slots=True)
class Regexp:
    """A `/.../` argument. Skipper passes it on as a plain string, so predicates and filters
    accept a regexp wherever they take a string and the other way round."""

    pattern: str


Arg = str | float | int | Regexp


def string_arg(arg: Arg) -> str | None:
    """A string argument (or a regexp's pattern: Skipper takes one for the other), or None."""
    if isinstance(arg, Regexp):
        return arg.pattern
    return arg if isinstance(arg, str) else None


def number_arg(arg: Arg) -> float | None:
    """A finite number argument, or None."""
    if isinstance(arg, bool) or not isinstance(arg, int | float):
        return None
    try:
        value = float(arg)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class Call:
    """A predicate or a filter: `Name(args...)`; the catch-all predicate `*` has the name "*"."""

    name: str
    args: tuple[Arg, ...]
    position: Position


class BackendKind(enum.Enum):
    NETWORK = "network"  # "https://example.org"
    SHUNT = "shunt"
    LOOPBACK = "loopback"
    DYNAMIC = "dynamic"
    LB = "lb"  # <algorithm, "endpoint", ...>
    FORWARD = "forward"


@dataclass(frozen=True, slots=True)
class Backend:
    kind: BackendKind
    address: str = ""  # NETWORK
    algorithm: str = ""  # LB; "" is Skipper's default algorithm
    endpoints: tuple[str, ...] = ()  # LB


@dataclass(frozen=True, slots=True)
class EskipRoute:
    id: str  # "" for a document that is a single route expression without an id
    predicates: tuple[Call, ...]
    filters: tuple[Call, ...]
    backend: Backend
    position: Position


class EskipError(ValueError):
    """A parse error: `message` is Skipper's wording, `position` where in the text it is."""

    def __init__(self, message: str, position: Position) -> None:
        super().__init__(message, position)
        self.message = message
        self.position = position

    def __str__(self) -> str:
        return f"{self.message} (line {self.position.line}, column {self.position.column})"


# --- the lexer -----------------------------------------------------------------------------------


class _T(enum.Enum):
    AND = "&&"
    ANY = "*"
    ARROW = "->"
    CLOSEPAREN = ")"
    COLON = ":"
    COMMA = ","
    OPENPAREN = "("
    SEMICOLON = ";"
    OPENARROW = "<"
    CLOSEARROW = ">"
    SHUNT = "<shunt>"
    LOOPBACK = "<loopback>"
    DYNAMIC = "<dynamic>"
    FORWARD = "<forward>"
    NUMBER = "number"
    STRING = "string"
    REGEXP = "regexp"
    SYMBOL = "symbol"
    EOF = "eof"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _T
    value: str
    start: int  # index in the text


_SINGLE = {
    ",": _T.COMMA,
    ")": _T.CLOSEPAREN,
    "(": _T.OPENPAREN,
    ":": _T.COLON,
    ";": _T.SEMICOLON,
    ">": _T.CLOSEARROW,
    "*": _T.ANY,
}
_ARROW_PREFIXED = (
    ("<shunt>", _T.SHUNT),
    ("<loopback>", _T.LOOPBACK),
    ("<dynamic>", _T.DYNAMIC),
    ("<forward>", _T.FORWARD),
)
# Skipper's scanWhitespace compares single bytes; 0x85 and 0xA0 never start a character of UTF-8
# text, so for a Python string the set is the ASCII one.
_WHITESPACE = frozenset(" \t\n\v\f\r")
_STRING_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_SYMBOL_START = re.compile(r"[A-Za-z_]")
_SYMBOL = re.compile(r"[A-Za-z0-9_]*")


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


class _LexError(Exception):
    def __init__(self, reason: str, index: int, consumed: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.index = index  # where the offending character is
        self.consumed = consumed  # how far Skipper's lexer has advanced


class _Lexer:
    def __init__(self, text: str, start: int, end: int) -> None:
        self.text = text
        self.start = start
        self.end = end
        self.i = start
        self.last_token = ""
        self.last_route_id = ""
        # The lexer's own error, kept until the parse ends: Skipper reports it only if the
        # parser accepts the text up to it, otherwise the parser's "syntax error" replaces it.
        self.error: EskipError | None = None

    def next(self) -> _Token:
        try:
            token = self._scan()
        except _LexError as err:
            self.i = err.consumed
            self.error = self.make_error(err.reason, err.index)
            return _Token(_T.EOF, "", err.index)
        if token.kind is not _T.EOF:
            self.last_token = token.value
        return token

    def make_error(self, reason: str, index: int) -> EskipError:
        route = f", last route id: {self.last_route_id}" if self.last_route_id else ""
        consumed = len(self.text[self.start : self.i].encode("utf-8", "surrogatepass"))
        message = (
            f"parse failed after token {self.last_token}{route}, position {consumed}: {reason}"
        )
        return EskipError(message, position_of(self.text, index))

    def _skip_void(self) -> None:
        text, end = self.text, self.end
        while True:
            while self.i < end and text[self.i] in _WHITESPACE:
                self.i += 1
            if self.i + 1 < end and text[self.i] == "/" and text[self.i + 1] == "/":
                newline = text.find("\n", self.i, end)
                self.i = end if newline < 0 else newline
                continue
            return

    def _scan(self) -> _Token:
        self._skip_void()
        text, i, end = self.text, self.i, self.end
        if i >= end:
            return _Token(_T.EOF, "", end)
        c = text[i]
        kind = _SINGLE.get(c)
        if kind is not None:
            return self._fixed(kind, c, i)
        if c == "&" and text.startswith("&&", i, end):
            return self._fixed(_T.AND, "&&", i)
        if c == "-" and text.startswith("->", i, end):
            return self._fixed(_T.ARROW, "->", i)
        if c == "/":
            if i + 1 >= end:
                raise _LexError("invalid character", i, i)
            return self._regexp(i)
        if c in '"`':
            return self._string(i, c)
        if c == "<":
            for literal, arrow_kind in _ARROW_PREFIXED:
                if text.startswith(literal, i, end):
                    return self._fixed(arrow_kind, literal, i)
            return self._fixed(_T.OPENARROW, "<", i)
        if _is_digit(c) or c == ".":
            return self._number(i)
        if _SYMBOL_START.match(c):
            m = _SYMBOL.match(text, i + 1, end)
            stop = m.end() if m else i + 1
            self.i = stop
            return _Token(_T.SYMBOL, text[i:stop], i)
        raise _LexError("unexpected token", i, i)

    def _fixed(self, kind: _T, literal: str, i: int) -> _Token:
        self.i = i + len(literal)
        return _Token(kind, literal, i)

    def _string(self, i: int, delimiter: str) -> _Token:
        text, end = self.text, self.end
        out: list[str] = []
        j = i + 1
        escaped = False
        while j < end:
            c = text[j]
            if escaped:
                if c in _STRING_ESCAPES:
                    out.append(_STRING_ESCAPES[c])
                elif c in (delimiter, "\\"):
                    out.append(c)
                else:
                    out.append("\\" + c)
                escaped = False
            elif c == delimiter:
                self.i = j + 1
                return _Token(_T.STRING, "".join(out), i)
            elif c == "\\":
                escaped = True
            else:
                out.append(c)
            j += 1
        raise _LexError("incomplete token", i, end)

    def _regexp(self, i: int) -> _Token:
        text, end = self.text, self.end
        out: list[str] = []
        j = i + 1
        escaped = False
        inside_class = False
        while j < end:
            c = text[j]
            # Skipper tracks [...] before looking at escapes, with the escape state of the
            # previous character: a "/" inside a character class does not end the literal.
            if not escaped and not inside_class and c == "[":
                inside_class = True
            elif not escaped and inside_class and c == "]":
                inside_class = False
            if escaped:
                if c not in ("/", "\\"):
                    out.append("\\")
                out.append(c)
                escaped = False
            elif c == "/" and not inside_class:
                self.i = j + 1
                return _Token(_T.REGEXP, "".join(out), i)
            elif c == "\\":
                escaped = True
            else:
                out.append(c)
            j += 1
        raise _LexError("incomplete token", i, end)

    def _number(self, i: int) -> _Token:
        text, end = self.text, self.end
        j = i
        decimal = False
        while j < end:
            c = text[j]
            if c == ".":
                if decimal:
                    break
                decimal = True
            elif not _is_digit(c):
                break
            j += 1
        if text[j - 1] == ".":
            raise _LexError("incomplete token", i, j)
        self.i = j
        return _Token(_T.NUMBER, text[i:j], i)


def position_of(text: str, index: int) -> Position:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return Position(index, line, column)


# --- the parser ----------------------------------------------------------------------------------

_BACKEND_TOKENS = {
    _T.SHUNT: BackendKind.SHUNT,
    _T.LOOPBACK: BackendKind.LOOPBACK,
    _T.DYNAMIC: BackendKind.DYNAMIC,
    _T.FORWARD: BackendKind.FORWARD,
}


class _Parser:
    """Recursive descent with one token of look-ahead, read lazily as goyacc does, so that a
    syntax error is reported at the same token (and with the same "last token") as Skipper's
    LALR parser: the first token that cannot continue a valid prefix."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.lexer = _Lexer(text, start, end)
        self.text = text
        self._ahead: _Token | None = None

    def peek(self) -> _Token:
        if self._ahead is None:
            self._ahead = self.lexer.next()
        return self._ahead

    def take(self) -> _Token:
        token = self.peek()
        self._ahead = None
        return token

    def expect(self, kind: _T) -> _Token:
        if self.peek().kind is not kind:
            raise self.syntax_error()
        return self.take()

    def syntax_error(self) -> EskipError:
        return self.lexer.make_error("syntax error", self.peek().start)

    def finish(self) -> None:
        if self.peek().kind is not _T.EOF:
            raise self.syntax_error()
        if self.lexer.error is not None:
            raise self.lexer.error

    # --- grammar ---------------------------------------------------------------------------------

    def document(self) -> list[EskipRoute]:
        first = self.peek()
        if first.kind is _T.EOF:
            return []
        if first.kind is _T.ANY:
            return [self.route("", first.start)]
        if first.kind is _T.SYMBOL:
            self.take()
            if self.peek().kind is _T.OPENPAREN:
                # A single route expression without an id: `Path("/") -> <shunt>`.
                return [self.route("", first.start, first)]
            return self.routes(first)
        if first.kind is _T.SEMICOLON:
            return self.routes(None)
        raise self.syntax_error()

    def routes(self, first_symbol: _Token | None) -> list[EskipRoute]:
        out: list[EskipRoute] = []
        if first_symbol is not None:
            out.append(self.routedef(first_symbol))
        while True:
            token = self.peek()
            if token.kind is _T.EOF:
                return out
            if token.kind is not _T.SEMICOLON:
                raise self.syntax_error()
            self.take()
            token = self.peek()
            if token.kind is _T.SYMBOL:
                out.append(self.routedef(self.take()))
            elif token.kind not in (_T.SEMICOLON, _T.EOF):
                raise self.syntax_error()

    def routedef(self, symbol: _Token) -> EskipRoute:
        self.expect(_T.COLON)
        # Skipper records the id as soon as `id:` is read, so later errors name the route.
        self.lexer.last_route_id = symbol.value
        return self.route(symbol.value, symbol.start)

    def route(self, route_id: str, start: int, first: _Token | None = None) -> EskipRoute:
        predicates = [self.predicate(first)]
        while self.peek().kind is _T.AND:
            self.take()
            predicates.append(self.predicate())
        self.expect(_T.ARROW)
        filters: list[Call] = []
        while self.peek().kind is _T.SYMBOL:
            filters.append(self.call(self.take()))
            self.expect(_T.ARROW)
        backend = self.backend()
        return EskipRoute(
            route_id,
            tuple(predicates),
            tuple(filters),
            backend,
            position_of(self.text, start),
        )

    def predicate(self, name: _Token | None = None) -> Call:
        if name is None:
            token = self.peek()
            if token.kind is _T.ANY:
                self.take()
                return Call("*", (), position_of(self.text, token.start))
            name = self.expect(_T.SYMBOL)
        return self.call(name)

    def predicates(self) -> list[Call]:
        out = [self.predicate()]
        while self.peek().kind is _T.AND:
            self.take()
            out.append(self.predicate())
        return out

    def filters(self) -> list[Call]:
        out = [self.call(self.expect(_T.SYMBOL))]
        while self.peek().kind is _T.ARROW:
            self.take()
            out.append(self.call(self.expect(_T.SYMBOL)))
        return out

    def call(self, name: _Token) -> Call:
        self.expect(_T.OPENPAREN)
        # Skipper's `args: | arg | args comma arg`: the empty list may go on with `, arg`, so
        # `Header(, "a", "b")` is `Header("a", "b")`.
        args: list[Arg] = []
        if self.peek().kind not in (_T.CLOSEPAREN, _T.COMMA):
            args.append(self.arg())
        while self.peek().kind is _T.COMMA:
            self.take()
            args.append(self.arg())
        self.expect(_T.CLOSEPAREN)
        return Call(name.value, tuple(args), position_of(self.text, name.start))

    def arg(self) -> Arg:
        token = self.peek()
        if token.kind is _T.NUMBER:
            self.take()
            return float(token.value)
        if token.kind is _T.STRING:
            self.take()
            return token.value
        if token.kind is _T.REGEXP:
            self.take()
            return Regexp(token.value)
        raise self.syntax_error()

    def backend(self) -> Backend:
        token = self.peek()
        if token.kind is _T.STRING:
            self.take()
            return Backend(BackendKind.NETWORK, address=token.value)
        kind = _BACKEND_TOKENS.get(token.kind)
        if kind is not None:
            self.take()
            return Backend(kind)
        if token.kind is not _T.OPENARROW:
            raise self.syntax_error()
        self.take()
        algorithm = ""
        if self.peek().kind is _T.SYMBOL:
            algorithm = self.take().value
            self.expect(_T.COMMA)
        endpoints = [self.expect(_T.STRING).value]
        while self.peek().kind is _T.COMMA:
            self.take()
            endpoints.append(self.expect(_T.STRING).value)
        self.expect(_T.CLOSEARROW)
        return Backend(BackendKind.LB, algorithm=algorithm, endpoints=tuple(endpoints))


# --- entry points --------------------------------------------------------------------------------

# Go's strings.TrimSpace: unicode.IsSpace, i.e. the Latin-1 spaces plus the White_Space property.
_GO_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _trimmed(text: str) -> tuple[int, int]:
    start, end = 0, len(text)
    while start < end and text[start] in _GO_SPACE:
        start += 1
    while end > start and text[end - 1] in _GO_SPACE:
        end -= 1
    return start, end


def parse_predicates(text: str) -> tuple[Call, ...]:
    """Skipper's `eskip.ParsePredicates`: `Method("GET") && Header("a", "b")`. Empty text (or
    comments only) is no predicate; `*` is dropped. Raises EskipError."""
    start, end = _trimmed(text)
    if start == end:
        return ()
    parser = _Parser(text, start, end)
    calls: list[Call] = []
    if parser.peek().kind is not _T.EOF:
        calls = parser.predicates()
    parser.finish()
    return tuple(c for c in calls if c.name != "*")


def parse_filters(text: str) -> tuple[Call, ...]:
    """Skipper's `eskip.ParseFilters`: `setPath("/") -> status(200)`. Empty text (or comments
    only) is no filter. Raises EskipError."""
    start, end = _trimmed(text)
    if start == end:
        return ()
    parser = _Parser(text, start, end)
    calls: list[Call] = []
    if parser.peek().kind is not _T.EOF:
        calls = parser.filters()
    parser.finish()
    return tuple(calls)


def parse(text: str) -> tuple[EskipRoute, ...]:
    """Skipper's `eskip.Parse`: a routing document (`id: predicates -> filters -> backend; ...`)
    or a single route expression. The catch-all `*` and the deprecated `Any()` are dropped from
    the predicates, as Skipper voids them. Raises EskipError."""
    parser = _Parser(text, 0, len(text))
    routes = parser.document()
    parser.finish()
    return tuple(_checked(route) for route in routes)


# --- what eskip.Parse checks after the grammar ---------------------------------------------------

_STRING_ARGS = {"Path": 1, "Host": 1, "PathRegexp": 1, "Method": 1, "HeaderRegexp": 2, "Header": 2}
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _checked(route: EskipRoute) -> EskipRoute:
    _check_endpoints(route)
    path_set = method_set = False
    headers: set[str] = set()
    kept: list[Call] = []
    for call in route.predicates:
        if call.name in ("*", "Any"):
            continue
        kept.append(call)
        if call.name == "Path":
            if path_set:
                raise EskipError("duplicate path tree predicate", call.position)
            path_set = True
        elif call.name == "Method":
            if method_set:
                raise EskipError("duplicate method predicate", call.position)
            method_set = True
        count = _STRING_ARGS.get(call.name)
        if count is None:
            continue
        if len(call.args) != count or not all(isinstance(a, str | Regexp) for a in call.args):
            what = "1 string argument" if count == 1 else f"{count} string arguments"
            raise EskipError(
                f'invalid route "{route.id}": {call.name} predicate expects {what}', call.position
            )
        if call.name == "Header":
            name = _text(call.args[0])
            if name in headers:
                raise EskipError(f"duplicate header predicate: {name}", call.position)
            headers.add(name)
    return EskipRoute(route.id, tuple(kept), route.filters, route.backend, route.position)


def _check_endpoints(route: EskipRoute) -> None:
    # Go's url.ParseRequestURI: an absolute URI or an absolute path; all of one scheme.
    scheme: str | None = None
    for endpoint in route.backend.endpoints:
        m = _URI_SCHEME.match(endpoint)
        if m is None and not endpoint.startswith("/"):
            raise EskipError(f'parse "{endpoint}": invalid URI for request', route.position)
        this = m.group(0)[:-1].lower() if m else ""
        if scheme is not None and scheme != this:
            raise EskipError("loadbalancer endpoints cannot have mixed protocols", route.position)
        scheme = this


def _text(arg: Arg) -> str:
    return arg.pattern if isinstance(arg, Regexp) else str(arg)


# --- printing ------------------------------------------------------------------------------------


def format_arg(arg: Arg) -> str:
    """An argument as eskip text (numbers as Skipper prints float64: `200`, `0.1`)."""
    if isinstance(arg, Regexp):
        return "/" + arg.pattern.replace("/", "\\/") + "/"
    if isinstance(arg, str):
        escaped = arg.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    number = float(arg)
    return str(int(number)) if number.is_integer() and abs(number) < 1e21 else repr(number)


def format_call(call: Call) -> str:
    if call.name == "*":
        return "*"
    return f"{call.name}({', '.join(format_arg(a) for a in call.args)})"

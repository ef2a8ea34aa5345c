"""The eskip parser against Skipper's grammar and lexer (eskip/parser.y, eskip/lexer.go): what it
accepts, what it yields (numbers are float64, regexps strings with Skipper's escapes), and where
and how it reports errors (Skipper's wording and byte position, plus line and column)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.dialects.routegroup.eskip import (
    Arg,
    Backend,
    BackendKind,
    Call,
    EskipError,
    Position,
    Regexp,
    format_call,
    parse,
    parse_filters,
    parse_predicates,
)
from turnout.dialects.routegroup.filters import SUPPORTED_FILTERS, translate_filters
from turnout.dialects.routegroup.predicates import SUPPORTED_PREDICATES, translate_predicates


def shape(calls: tuple[Call, ...]) -> list[tuple[str, tuple[Arg, ...]]]:
    return [(c.name, c.args) for c in calls]


# --- predicates that parse -----------------------------------------------------------------------

VALID_PREDICATES: list[tuple[str, list[tuple[str, tuple[Arg, ...]]]]] = [
    ('Path("/")', [("Path", ("/",))]),
    ('Method("GET") && Header("a", "b")', [("Method", ("GET",)), ("Header", ("a", "b"))]),
    ("*", []),  # the catch-all is dropped, as ParsePredicates drops it
    ("* && Traffic(.1)", [("Traffic", (0.1,))]),
    ("", []),
    ("   // only a comment", []),
    ("PathRegexp(/^\\/api\\/v[0-9]+/)", [("PathRegexp", (Regexp("^/api/v[0-9]+"),))]),
    ("PathRegexp(/[/]x/)", [("PathRegexp", (Regexp("[/]x"),))]),  # "/" inside a class
    ('HeaderRegexp("X", /\\d+/)', [("HeaderRegexp", ("X", Regexp("\\d+")))]),
    ("Foo(/a\\\\b/)", [("Foo", (Regexp("a\\b"),))]),  # \\ is one backslash in a regexp
    ("Weight(10)", [("Weight", (10.0,))]),
    ("Traffic(1.5)", [("Traffic", (1.5,))]),
    ("Foo(007)", [("Foo", (7.0,))]),
    ('Cookie("canary", "team-foo")', [("Cookie", ("canary", "team-foo"))]),  # seed 003
    (
        'JWTPayloadAllKV("iss", "https://accounts.google.com", "email", '
        '"skipper-router@googlegroups.com")',  # seed 003
        [
            (
                "JWTPayloadAllKV",
                (
                    "iss",
                    "https://accounts.google.com",
                    "email",
                    "skipper-router@googlegroups.com",
                ),
            )
        ],
    ),
    ('Foo(`raw "quoted"`)', [("Foo", ('raw "quoted"',))]),
    (
        'Foo("tab\\there", "q\\"", "other\\d", `bt\\`x`)',
        [("Foo", ("tab\there", 'q"', "other\\d", "bt`x"))],
    ),
    (
        'Path("/a") // first\n  && Method("GET") // second',
        [("Path", ("/a",)), ("Method", ("GET",))],
    ),
    ("Foo()", [("Foo", ())]),
    ('Foo("a",1,/b/)', [("Foo", ("a", 1.0, Regexp("b")))]),
    ('Traffic(.1, "canary", "A")', [("Traffic", (0.1, "canary", "A"))]),
]


@pytest.mark.parametrize(("text", "expected"), VALID_PREDICATES)
def test_predicates_parse(text: str, expected: list[tuple[str, tuple[Arg, ...]]]) -> None:
    assert shape(parse_predicates(text)) == expected


def test_numbers_are_floats_as_skipper_yields_float64() -> None:
    (call,) = parse_predicates("Weight(10)")
    assert type(call.args[0]) is float


def test_positions_of_calls_count_lines_and_columns() -> None:
    calls = parse_predicates('Path("/a")\n  && Method("GET")')
    assert [(c.position.offset, c.position.line, c.position.column) for c in calls] == [
        (0, 1, 1),
        (16, 2, 6),
    ]


# --- filters that parse --------------------------------------------------------------------------

VALID_FILTERS: list[tuple[str, list[tuple[str, tuple[Arg, ...]]]]] = [
    ('setPath("/") -> status(200)', [("setPath", ("/",)), ("status", (200.0,))]),
    ('modPath("/api", "/")', [("modPath", ("/api", "/"))]),  # seed 003
    (
        'redirectTo(308, "https://login.example.org")',
        [("redirectTo", (308.0, "https://login.example.org"))],
    ),
    (
        'ratelimit(20, "1m") -> oauthTokeninfoAllKV("iss", "https://accounts.google.com", '
        '"email", "important@example.org")',  # seed 003
        [
            ("ratelimit", (20.0, "1m")),
            (
                "oauthTokeninfoAllKV",
                ("iss", "https://accounts.google.com", "email", "important@example.org"),
            ),
        ],
    ),
    (
        'clientRatelimit(100, "1m", "Authorization")',
        [("clientRatelimit", (100.0, "1m", "Authorization"))],
    ),
    ('responseCookie("canary", "A")', [("responseCookie", ("canary", "A"))]),
    (
        'oauthTokeninfoAllScope("read.resource", "list.resource")',
        [("oauthTokeninfoAllScope", ("read.resource", "list.resource"))],
    ),
    ("// nothing but a comment", []),
    ("  \n ", []),
    # Skipper's `args: | arg | args comma arg`: the empty list may go on with `, arg`.
    ('setRequestHeader(, "a", "b")', [("setRequestHeader", ("a", "b"))]),
]


@pytest.mark.parametrize(("text", "expected"), VALID_FILTERS)
def test_filters_parse(text: str, expected: list[tuple[str, tuple[Arg, ...]]]) -> None:
    assert shape(parse_filters(text)) == expected


# --- errors: Skipper's message, and where ------------------------------------------------------

# (parser, text, Skipper's message, line, column of the offending token)
ERRORS = [
    # Skipper's own fixture (testdata/routegroups/convert/failing-filter).
    ("filters", "foo#", "parse failed after token foo, position 3: syntax error", 1, 4),
    # Valid up to a character the lexer cannot read: the lexer's reason is reported.
    ("predicates", "Foo() #", "parse failed after token ), position 6: unexpected token", 1, 7),
    ("filters", "#", "parse failed after token , position 0: unexpected token", 1, 1),
    ("predicates", "Foo(1) /", "parse failed after token ), position 7: invalid character", 1, 8),
    # "1." is an incomplete number; the parser then sees the end and refuses.
    ("predicates", "Foo(1.)", "parse failed after token (, position 6: syntax error", 1, 5),
    # No sign in eskip numbers.
    ("predicates", "Foo(-1)", "parse failed after token (, position 4: syntax error", 1, 5),
    ("predicates", 'Foo("abc', "parse failed after token (, position 8: syntax error", 1, 5),
    ("predicates", "Foo(/abc", "parse failed after token (, position 8: syntax error", 1, 5),
    ("predicates", "Foo() Bar()", "parse failed after token Bar, position 9: syntax error", 1, 7),
    (
        "filters",
        'Path("/a") && Traffic(.1)',
        "parse failed after token &&, position 13: syntax error",
        1,
        12,
    ),
    (
        "filters",
        'setPath("/") -> ',
        "parse failed after token ->, position 15: syntax error",
        1,
        16,
    ),
    ("filters", "*", "parse failed after token *, position 1: syntax error", 1, 1),
    # After the empty argument list's comma an argument must follow.
    ("predicates", "True(,)", "parse failed after token ), position 7: syntax error", 1, 7),
    ("predicates", 'Foo("a",,"b")', "parse failed after token ,, position 9: syntax error", 1, 9),
    ("predicates", "Foo(a)", "parse failed after token a, position 5: syntax error", 1, 5),
    # Leading and trailing space is trimmed first, as Go's strings.TrimSpace does.
    (
        "predicates",
        '  Path("/")  &&  ',
        "parse failed after token &&, position 13: syntax error",
        1,
        16,
    ),
    # Positions count bytes, as Go does; columns count characters.
    (
        "predicates",
        'Foo("ü") Bär()',
        "parse failed after token B, position 11: syntax error",
        1,
        10,
    ),
    (
        "predicates",
        'Path("/")\n&& \n&&',
        "parse failed after token &&, position 16: syntax error",
        3,
        1,
    ),
    # seed 003: the closing quote is missing.
    (
        "filters",
        'redirectTo(308, "https://login.example.org/)',
        "parse failed after token ,, position 44: syntax error",
        1,
        17,
    ),
]


@pytest.mark.parametrize(("which", "text", "message", "line", "column"), ERRORS)
def test_errors_are_worded_and_placed_as_skipper_does(
    which: str, text: str, message: str, line: int, column: int
) -> None:
    parse_one = parse_predicates if which == "predicates" else parse_filters
    with pytest.raises(EskipError) as caught:
        parse_one(text)
    assert caught.value.message == message
    assert (caught.value.position.line, caught.value.position.column) == (line, column)
    assert str(caught.value) == f"{message} (line {line}, column {column})"


def test_error_offset_points_into_the_original_text() -> None:
    with pytest.raises(EskipError) as caught:
        parse_predicates('  Foo("x") Bar()')
    assert caught.value.position.offset == 11  # "B", in the untrimmed text
    assert "position 12:" in caught.value.message  # bytes consumed of the trimmed text


# --- documents -----------------------------------------------------------------------------------

DOCUMENT = """\
// routes of one host
r1: Path("/") && Method("GET")
  -> setRequestHeader("X-Id", "1")
  -> <roundRobin, "http://10.0.0.1:80", "http://10.0.0.2:80">;

r2: * -> status(404) -> <shunt>;
r3: PathSubtree("/api") -> "https://api.example.org";
r4: Any() && Path("/x") -> <loopback>;
r5: * -> <dynamic>;
r6: * -> <forward>;
r7: * -> <"http://a:1", "http://b:2">;
"""


def test_a_document_with_every_backend() -> None:
    routes = parse(DOCUMENT)
    assert [r.id for r in routes] == ["r1", "r2", "r3", "r4", "r5", "r6", "r7"]
    r1 = routes[0]
    assert shape(r1.predicates) == [("Path", ("/",)), ("Method", ("GET",))]
    assert shape(r1.filters) == [("setRequestHeader", ("X-Id", "1"))]
    assert r1.backend == Backend(
        BackendKind.LB,
        algorithm="roundRobin",
        endpoints=("http://10.0.0.1:80", "http://10.0.0.2:80"),
    )
    assert r1.position.line == 2
    assert routes[1].predicates == ()  # "*" is void
    assert routes[1].backend.kind is BackendKind.SHUNT
    assert routes[2].backend == Backend(BackendKind.NETWORK, address="https://api.example.org")
    assert shape(routes[3].predicates) == [("Path", ("/x",))]  # Any() is void too
    assert [r.backend.kind for r in routes[3:6]] == [
        BackendKind.LOOPBACK,
        BackendKind.DYNAMIC,
        BackendKind.FORWARD,
    ]
    assert routes[6].backend == Backend(BackendKind.LB, endpoints=("http://a:1", "http://b:2"))


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", []),
        (";;", []),
        ("// nothing", []),
        ('Path("/") -> "http://x"', [""]),  # a single route expression has no id
        ("r1: * -> <shunt>;;r2: * -> <shunt>;", ["r1", "r2"]),
    ],
)
def test_documents_parse(text: str, ids: list[str]) -> None:
    assert [r.id for r in parse(text)] == ids


def test_an_lb_algorithm_named_like_a_backend_keyword_is_an_algorithm() -> None:
    # "<shunt," is not the token "<shunt>": Skipper reads "<", the symbol "shunt", ",", ...
    (route,) = parse('r: * -> <shunt, "http://a">')
    assert route.backend == Backend(BackendKind.LB, algorithm="shunt", endpoints=("http://a",))


DOCUMENT_ERRORS = [
    (
        'r1: Path("/") -> <shunt>; r2: Foo() ->',
        "parse failed after token ->, last route id: r2, position 38: syntax error",
        (1, 39),
    ),
    (
        'r1: Path("/") -> <shunt> r2: *',
        "parse failed after token r2, last route id: r1, position 27: syntax error",
        (1, 26),
    ),
    ('Path("/") -> <shunt>;', "parse failed after token ;, position 21: syntax error", (1, 21)),
    (
        "r: * -> <roundRobin>",
        "parse failed after token >, last route id: r, position 20: syntax error",
        (1, 20),
    ),
    # Seed 003's Ingress annotation: the quote after /login is missing.
    (
        'redirect_app_default: PathRegexp("/login) -> redirectTo(308, "https://login.example.org/")'
        " -> <shunt>;",
        "parse failed after token https, last route id: redirect_app_default, position 67: "
        "syntax error",
        (1, 63),
    ),
    ('r: Path("/a") && Path("/b") -> <shunt>', "duplicate path tree predicate", (1, 18)),
    ('r: Method("GET") && Method("PUT") -> <shunt>', "duplicate method predicate", (1, 21)),
    (
        'r: Header("a", 1) -> <shunt>',
        'invalid route "r": Header predicate expects 2 string arguments',
        (1, 4),
    ),
    ("r: Path() -> <shunt>", 'invalid route "r": Path predicate expects 1 string argument', (1, 4)),
    (
        'r: Header("a", "1") && Header("a", "2") -> <shunt>',
        "duplicate header predicate: a",
        (1, 24),
    ),
    (
        'r: * -> <"http://a", "https://b">',
        "loadbalancer endpoints cannot have mixed protocols",
        (1, 1),
    ),
    ('r: * -> <"a:b", "no-scheme">', 'parse "no-scheme": invalid URI for request', (1, 1)),
]


@pytest.mark.parametrize(("text", "message", "where"), DOCUMENT_ERRORS)
def test_document_errors(text: str, message: str, where: tuple[int, int]) -> None:
    with pytest.raises(EskipError) as caught:
        parse(text)
    assert caught.value.message == message
    assert (caught.value.position.line, caught.value.position.column) == where


def test_printed_calls_parse_back_to_the_same_calls() -> None:
    text = 'Foo("a\\"b", 1, 0.25, /x\\/y/) && Bar()'
    calls = parse_predicates(text)
    printed = " && ".join(format_call(c) for c in calls)
    assert printed == 'Foo("a\\"b", 1, 0.25, /x\\/y/) && Bar()'
    assert shape(parse_predicates(printed)) == shape(calls)


def test_inputs_of_seed_003_route_groups() -> None:
    # Every predicate and filter string the seed's RouteGroups use, one at a time (Skipper
    # parses each list item on its own and wants exactly one element).
    predicates = [
        'JWTPayloadAllKV("iss", "https://accounts.google.com", "email", '
        '"skipper-router@googlegroups.com")',
        "Traffic(.1)",
        'Cookie("canary", "team-foo")',
        'Cookie("canary", "A")',
        'Cookie("canary", "B")',
    ]
    filters = [
        'modPath("/api", "/")',
        'oauthTokeninfoAllScope("myapp.write")',
        'oauthTokeninfoAllScope("myapp.read")',
        'ratelimit(20, "1m")',
        'oauthTokeninfoAllKV("iss", "https://accounts.google.com", "email", '
        '"important@example.org")',
        'ratelimit(2, "1m")',
        'oauthTokeninfoAnyKV("iss", "https://accounts.google.com", "iss", '
        '"https://accounts.github.com")',
        'clientRatelimit(100, "1m", "Authorization")',
        'oauthTokeninfoAllScope("read.resource", "list.resource")',
        'responseCookie("canary", "A")',
        'responseCookie("canary", "B")',
        'redirectTo(308, "https://login.example.org")',
    ]
    for text in predicates:
        assert len(parse_predicates(text)) == 1, text
    for text in filters:
        assert len(parse_filters(text)) == 1, text


# --- no input makes the parser or the translations raise anything else ---------------------------

_ESKIP_ALPHABET = 'PathHeaderTraffic()"`/\\,.&-><*;:0123456789 \n\tü#_ab[]$'


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_ESKIP_ALPHABET, max_size=60))
def test_any_text_parses_or_raises_an_eskip_error(text: str) -> None:
    for parse_one in (parse_predicates, parse_filters, parse):
        try:
            parse_one(text)
        except EskipError as err:
            assert err.message.startswith(
                ("parse failed after token", "duplicate", "invalid", "parse ", "loadbalancer")
            )
            assert 0 <= err.position.offset <= len(text)


_ARGS = st.one_of(
    st.text(max_size=12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.builds(Regexp, st.text(max_size=12)),
)
_NAMES = st.sampled_from(
    [*SUPPORTED_PREDICATES, *SUPPORTED_FILTERS, "clusterRatelimit", "jwtValidation", "Nope"]
)
_CALLS = st.lists(
    st.builds(Call, _NAMES, st.lists(_ARGS, max_size=4).map(tuple), st.just(Position(0, 1, 1))),
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(_CALLS)
def test_translations_never_raise(calls: list[Call]) -> None:
    match = translate_predicates(calls)
    assert all(0 <= p.index < len(calls) for p in match.problems)
    match.route_matches()
    filters = translate_filters(calls, mirror_cluster=lambda url: None, shunt=False)
    assert all(0 <= p.index < len(calls) for p in filters.problems)

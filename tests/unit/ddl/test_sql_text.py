"""sql_text: statement splitting, positions, comments, clause spans, the start of an MV's SELECT, tokens."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from chmv_assets.ddl.sql_text import (
    clauses,
    line_col,
    nesting,
    select_start,
    split_statements,
    thread_parser,
    tokenize,
)


def texts(sql: str) -> list[str]:
    return [s.text for s in split_statements(sql)]


SPLIT_CASES = [
    ("one-with-semicolon", "SELECT 1;", ["SELECT 1"]),
    ("last-without-semicolon", "SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
    ("empty-statements-skipped", ";; SELECT 1 ;;\n;", ["SELECT 1"]),
    ("only-comments", "-- nothing here\n/* nor ; here */", []),
    ("semicolon-in-single-quoted-string", "SELECT 'a;b'; SELECT 2", ["SELECT 'a;b'", "SELECT 2"]),
    ("semicolon-in-escaped-string", r"SELECT 'it\'s;' ; SELECT 2", [r"SELECT 'it\'s;'", "SELECT 2"]),
    ("semicolon-in-doubled-quote-string", "SELECT 'x'';y'; SELECT 2", ["SELECT 'x'';y'", "SELECT 2"]),
    ("semicolon-in-backticks", "SELECT `a;b` FROM t; SELECT 2", ["SELECT `a;b` FROM t", "SELECT 2"]),
    ("semicolon-in-double-quotes", 'SELECT "a;b" FROM t; SELECT 2', ['SELECT "a;b" FROM t', "SELECT 2"]),
    ("semicolon-in-line-comment", "SELECT 1 -- not; the end\n; SELECT 2", ["SELECT 1", "SELECT 2"]),
    ("semicolon-in-block-comment", "SELECT /* a; b */ 1; SELECT 2", ["SELECT /* a; b */ 1", "SELECT 2"]),
    (
        "multi-line-statement-kept-verbatim",
        "CREATE TABLE t\n(\n  x UInt8\n)\nENGINE = Log;",
        ["CREATE TABLE t\n(\n  x UInt8\n)\nENGINE = Log"],
    ),
]


@pytest.mark.parametrize(("sql", "expected"), [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES])
def test_split_statements(sql, expected):
    assert texts(sql) == expected


def test_statement_offsets_lines_and_columns():
    sql = "-- header\nCREATE TABLE a (x UInt8) ENGINE = Log;\n\n   SELECT\n 1;SELECT 'é' ;\tSELECT 3"
    statements = list(split_statements(sql))
    assert [(s.line, s.column) for s in statements] == [(2, 1), (4, 4), (5, 4), (5, 17)]
    for s in statements:
        assert sql[s.offset : s.offset + len(s.text)] == s.text
    assert [s.offset for s in statements] == [10, 53, 63, 76]


def test_positions_of_many_statements_in_one_file_agree_with_line_col():
    """Positions are counted once through the file, not from its start for every statement."""
    sql = "".join(f"-- t{i}\n{' ' * (i % 3)}CREATE TABLE d.t{i} (x UInt8)\nENGINE = Log;\n" for i in range(300))
    statements = list(split_statements(sql))
    assert len(statements) == 300
    assert [(s.line, s.column) for s in statements] == [line_col(sql, s.offset) for s in statements]
    assert (statements[-1].line, statements[-1].column, statements[-1].comments) == (3 * 299 + 2, 3, ("t299",))


def test_each_thread_tokenizes_and_parses_with_its_own_tools():
    sql = "CREATE TABLE d.t (ts DateTime, x UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts"

    def parse(_: int) -> tuple[str, ...]:
        node = thread_parser().parse(tokenize(sql), sql)[0]
        return tuple(c.name for c in node.this.expressions), thread_parser()

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(parse, range(40)))
    assert {columns for columns, _ in results} == {("ts", "x")}
    assert thread_parser() is thread_parser()  # reused within a thread
    assert thread_parser() not in {p for _, p in results}  # never shared with another thread


def test_comments_before_a_statement_are_its_comments():
    sql = (
        "/* A block comment\n   spanning lines; with a ; inside */\n"
        "CREATE DATABASE d;\n"
        "-- The fact table.\n-- Second line.\n"
        "CREATE TABLE d.a (x UInt8) ENGINE = Log;\n"
        "\n"
        "CREATE TABLE d.b (x UInt8) ENGINE = Log; /* about c */ CREATE TABLE d.c (x UInt8) ENGINE = Log;"
    )
    assert [s.comments for s in split_statements(sql)] == [
        ("A block comment\n   spanning lines; with a ; inside",),
        ("The fact table.", "Second line."),
        (),
        ("about c",),
    ]


def test_a_trailing_comment_stays_with_its_own_line():
    """``…; -- note`` describes the statement it follows, not the next one (examples/ddl/40_all_events.sql)."""
    sql = (
        "CREATE TABLE d.audit (x UInt8) ENGINE = Log; -- no TTL, keep forever\n"
        "\n"
        "CREATE TABLE d.next (x UInt8) ENGINE = Log;\n"
        "CREATE TABLE d.after (x UInt8) ENGINE = Log; /* trailing\n   block */\n"
        "-- About last.\n"
        "CREATE TABLE d.last (x UInt8) ENGINE = Log;"
    )
    assert [s.comments for s in split_statements(sql)] == [(), (), (), ("About last.",)]


def test_unterminated_string_raises_token_error():
    with pytest.raises(TokenError):
        list(split_statements("SELECT 'never closed; SELECT 2"))


@pytest.mark.parametrize(
    ("text", "offset", "expected"),
    [
        ("abc", 0, (1, 1)),
        ("abc", 2, (1, 3)),
        ("ab\ncd", 2, (1, 3)),
        ("ab\ncd", 3, (2, 1)),
        ("ab\ncd\n\nx", 7, (4, 1)),
    ],
    ids=["start", "same-line", "newline-itself", "after-newline", "blank-lines"],
)
def test_line_col(text, offset, expected):
    assert line_col(text, offset) == expected


def spans(sql: str) -> dict[str, str]:
    return {name: sql[start:end] for name, (start, end) in clauses(tokenize(sql)).items()}


CLAUSE_CASES = [
    (
        "all-table-clauses",
        "CREATE TABLE t (d Date, x UInt8) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY (x, d) "
        "PRIMARY KEY x SAMPLE BY x TTL d + INTERVAL 1 YEAR SETTINGS index_granularity = 8192",
        {
            "PARTITION BY": "toYYYYMM(d)",
            "ORDER BY": "(x, d)",
            "PRIMARY KEY": "x",
            "SAMPLE BY": "x",
            "TTL": "d + INTERVAL 1 YEAR",
            "SETTINGS": "index_granularity = 8192",
        },
    ),
    (
        "order-before-partition",
        "CREATE TABLE t (d Date) ENGINE = MergeTree ORDER BY d PARTITION BY d",
        {"ORDER BY": "d", "PARTITION BY": "d"},
    ),
    (
        "clause-words-inside-parentheses-ignored",
        "CREATE TABLE t (d Date, s String COMMENT 'order by') ENGINE = MergeTree ORDER BY (d, tuple(s))",
        {"ORDER BY": "(d, tuple(s))"},
    ),
    (
        "multi-line-and-lowercase",
        "create table t (d Date)\nengine = MergeTree\npartition   by\n  toDate(d)\norder by d",
        {"PARTITION BY": "toDate(d)", "ORDER BY": "d"},
    ),
    ("ends-at-comment-keyword", "CREATE TABLE t (d Date) ENGINE = MergeTree ORDER BY d COMMENT 'x'", {"ORDER BY": "d"}),
    ("none", "CREATE TABLE t (d Date) ENGINE = Log", {}),
    (
        "mv-inner-table-stops-at-as-select",
        "CREATE MATERIALIZED VIEW v ENGINE = MergeTree ORDER BY x AS SELECT x FROM t ORDER BY x SETTINGS max_threads = 1",
        {"ORDER BY": "x"},
    ),
    ("mv-to-has-no-clauses-of-its-select", "CREATE MATERIALIZED VIEW v TO t AS SELECT x FROM t ORDER BY x", {}),
]


@pytest.mark.parametrize(("sql", "expected"), [c[1:] for c in CLAUSE_CASES], ids=[c[0] for c in CLAUSE_CASES])
def test_clauses(sql, expected):
    assert spans(sql) == expected


SELECT_CASES = [
    ("select", "CREATE MATERIALIZED VIEW v TO t AS SELECT x FROM s", "SELECT x FROM s"),
    ("with", "CREATE MATERIALIZED VIEW v TO t AS WITH 1 AS a SELECT a FROM s", "WITH 1 AS a SELECT a FROM s"),
    ("parenthesized", "CREATE VIEW v AS (SELECT 1)", "(SELECT 1)"),
    (
        "aliases-inside-columns-skipped",
        "CREATE MATERIALIZED VIEW v (x UInt8 DEFAULT CAST(1 AS UInt8)) ENGINE = Log AS SELECT x FROM s",
        "SELECT x FROM s",
    ),
    ("multi-line", "CREATE MATERIALIZED VIEW v TO t AS\nSELECT\n  x\nFROM s", "SELECT\n  x\nFROM s"),
]


@pytest.mark.parametrize(("sql", "expected"), [c[1:] for c in SELECT_CASES], ids=[c[0] for c in SELECT_CASES])
def test_select_start(sql, expected):
    assert sql[select_start(tokenize(sql)) :] == expected


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t (x UInt8) ENGINE = Log",
        "CREATE TABLE t (x UInt8 DEFAULT CAST(1 AS UInt8)) ENGINE = Log",
    ],
    ids=["table", "cast-as-inside-parentheses"],
)
def test_select_start_none_without_as_select(sql):
    assert select_start(tokenize(sql)) is None


def test_nesting_puts_a_bracket_inside_what_it_opens_and_outside_what_it_closes():
    tokens = tokenize("f(a[1], (b)) c")
    assert [(i, t.text, depth) for i, t, depth in nesting(tokens)] == [
        (0, "f", 0),
        (1, "(", 1),
        (2, "a", 1),
        (3, "[", 2),
        (4, "1", 2),
        (5, "]", 1),
        (6, ",", 1),
        (7, "(", 2),
        (8, "b", 2),
        (9, ")", 1),
        (10, ")", 0),
        (11, "c", 0),
    ]


def test_tokenize_keeps_quoted_names_and_string_values():
    tokens = tokenize("SELECT `a b`, \"c;d\", 'it''s' FROM db.t -- done")
    assert [(t.token_type, t.text) for t in tokens] == [
        (TokenType.SELECT, "SELECT"),
        (TokenType.IDENTIFIER, "a b"),
        (TokenType.COMMA, ","),
        (TokenType.IDENTIFIER, "c;d"),
        (TokenType.COMMA, ","),
        (TokenType.STRING, "it's"),
        (TokenType.FROM, "FROM"),
        (TokenType.VAR, "db"),
        (TokenType.DOT, "."),
        (TokenType.VAR, "t"),
    ]
    assert tokens[-1].comments == [" done"]
    assert [(t.start, t.end) for t in tokens[:2]] == [(0, 5), (7, 11)]

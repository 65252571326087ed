"""quoting: the only places where a name or a value becomes SQL text."""

from __future__ import annotations

import pytest
from sqlglot.tokens import TokenType

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.sql_text import tokenize
from chmv_assets.sql.quoting import interval, qualified, quote

QUOTE_CASES = [
    ("plain", "events", "`events`"),
    ("keyword", "select", "`select`"),
    ("space", "raw events", "`raw events`"),
    ("dash", "a-b", "`a-b`"),
    ("dot", "x.y", "`x.y`"),
    ("backtick", "a`b", r"`a\`b`"),
    ("single-quote", "it's", r"`it\'s`"),
    ("double-quote", 'say "q"', '`say "q"`'),
    ("backslash", "a\\b", r"`a\\b`"),
    ("semicolon-and-comment", "x; DROP TABLE y --", "`x; DROP TABLE y --`"),
    ("unicode", "ünïcødé_表", "`ünïcødé_表`"),
]


@pytest.mark.parametrize(("name", "expected"), [c[1:] for c in QUOTE_CASES], ids=[c[0] for c in QUOTE_CASES])
def test_quote(name, expected):
    assert quote(name) == expected


@pytest.mark.parametrize(
    "name",
    ["raw events", "a-b", "x.y", "a`b", 'say "q"', "x; DROP TABLE y --", "ünïcødé_表"],
    ids=["space", "dash", "dot", "backtick", "double-quote", "injection", "unicode"],
)
def test_a_quoted_name_is_one_identifier_token_of_the_exact_name(name):
    tokens = tokenize(f"SELECT 1 FROM {quote(name)}")
    assert [(t.token_type, t.text) for t in tokens[3:]] == [(TokenType.IDENTIFIER, name)]


@pytest.mark.parametrize(
    ("database", "name", "expected"),
    [
        ("analytics", "events", "`analytics`.`events`"),
        ("my-db", 'it\'s "q"', '`my-db`.`it\\\'s "q"`'),
        ("db.with.dots", "t", "`db.with.dots`.`t`"),
    ],
    ids=["plain", "quotes-and-dash", "dots-stay-inside"],
)
def test_qualified(database, name, expected):
    assert qualified(ObjectRef(database=database, name=name)) == expected


@pytest.mark.parametrize(
    ("grain", "expected"),
    [
        (None, None),
        ("minute", "INTERVAL 1 MINUTE"),
        ("5 minute", "INTERVAL 5 MINUTE"),
        ("15 minute", "INTERVAL 15 MINUTE"),
        ("hour", "INTERVAL 1 HOUR"),
        ("day", "INTERVAL 1 DAY"),
        ("week", "INTERVAL 1 WEEK"),
        ("month", "INTERVAL 1 MONTH"),
        ("quarter", "INTERVAL 1 QUARTER"),
        ("year", "INTERVAL 1 YEAR"),
    ],
    ids=["bare-column", "minute", "5-minute", "15-minute", "hour", "day", "week", "month", "quarter", "year"],
)
def test_interval(grain, expected):
    assert interval(grain) == expected


def test_interval_of_an_unknown_grain_raises():
    with pytest.raises(ValueError, match="not a valid Grain"):
        interval("fortnight")

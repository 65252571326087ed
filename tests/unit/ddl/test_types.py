"""The one ClickHouse type model: base names, wrappers, families, aggregate states, canonical spelling."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.types import canonical_type, parse_type


@pytest.mark.parametrize(
    ("type_sql", "base", "nullable", "low_cardinality"),
    [
        ("UInt64", "UInt64", False, False),
        ("INT", "Int32", False, False),
        ("Nullable(Int64)", "Int64", True, False),
        ("LowCardinality(Nullable(String))", "String", True, True),
        ("LowCardinality(String)", "String", False, True),
        ("DateTime64(3, 'UTC')", "DateTime64", False, False),
        ("Nullable(DateTime64(6, 'UTC'))", "DateTime64", True, False),
        ("DateTime('UTC')", "DateTime", False, False),
        ("Date", "Date", False, False),
        ("Nullable(Date)", "Date", True, False),
        ("Date32", "Date32", False, False),
        ("Decimal(18, 4)", "Decimal", False, False),
        ("Decimal64(4)", "Decimal64", False, False),
        ("FixedString(16)", "FixedString", False, False),
        ("Enum8('a' = 1, 'b' = 2)", "Enum8", False, False),
        ("Array(LowCardinality(String))", "Array", False, False),
        ("AggregateFunction(sum, UInt64)", "AggregateFunction", False, False),
        # Types sqlglot does not know keep their text; the base name still comes out.
        ("Time64(3)", "Time64", False, False),
        ("Nullable(BFloat16)", "BFloat16", True, False),
        ("Object('json')", "Object", False, False),
    ],
)
def test_base_name_and_wrappers(type_sql: str, base: str, nullable: bool, low_cardinality: bool) -> None:
    parsed = parse_type(type_sql)
    assert (parsed.base, parsed.nullable, parsed.low_cardinality) == (base, nullable, low_cardinality)
    assert parsed.sql == type_sql and str(parsed) == type_sql


FAMILIES = {
    # type: (date, datetime, integer, unsigned 64, float, decimal, numeric, string)
    "Date": (1, 0, 0, 0, 0, 0, 0, 0),
    "Date32": (1, 0, 0, 0, 0, 0, 0, 0),
    "LowCardinality(Nullable(Date))": (1, 0, 0, 0, 0, 0, 0, 0),
    "DateTime": (0, 1, 0, 0, 0, 0, 0, 0),
    "DateTime64(3, 'UTC')": (0, 1, 0, 0, 0, 0, 0, 0),
    "UInt64": (0, 0, 1, 1, 0, 0, 1, 0),
    "Nullable(UInt64)": (0, 0, 1, 1, 0, 0, 1, 0),
    "UInt8": (0, 0, 1, 0, 0, 0, 1, 0),
    "Int256": (0, 0, 1, 0, 0, 0, 1, 0),
    "bigint": (0, 0, 1, 0, 0, 0, 1, 0),
    "Float32": (0, 0, 0, 0, 1, 0, 1, 0),
    "DOUBLE": (0, 0, 0, 0, 1, 0, 1, 0),
    "Decimal(18, 4)": (0, 0, 0, 0, 0, 1, 1, 0),
    "Decimal32(2)": (0, 0, 0, 0, 0, 1, 1, 0),
    "String": (0, 0, 0, 0, 0, 0, 0, 1),
    "varchar(255)": (0, 0, 0, 0, 0, 0, 0, 1),
    "FixedString(3)": (0, 0, 0, 0, 0, 0, 0, 1),
    "LowCardinality(String)": (0, 0, 0, 0, 0, 0, 0, 1),
    "Bool": (0, 0, 0, 0, 0, 0, 0, 0),
    "UUID": (0, 0, 0, 0, 0, 0, 0, 0),
    "Enum8('a' = 1)": (0, 0, 0, 0, 0, 0, 0, 0),
    "IntervalDay": (0, 0, 0, 0, 0, 0, 0, 0),
    "AggregateFunction(sum, UInt64)": (0, 0, 0, 0, 0, 0, 0, 0),
}


@pytest.mark.parametrize(("type_sql", "flags"), list(FAMILIES.items()))
def test_families(type_sql: str, flags: tuple[int, ...]) -> None:
    t = parse_type(type_sql)
    got = (
        t.is_date,
        t.is_datetime,
        t.is_integer,
        t.is_unsigned_64,
        t.is_float,
        t.is_decimal,
        t.is_numeric,
        t.is_string,
    )
    assert tuple(int(f) for f in got) == flags
    assert t.is_time == bool(flags[0] or flags[1])


def test_aggregate_function_types() -> None:
    quantile = parse_type("AggregateFunction(quantile(0.99), UInt32)").aggregate
    assert quantile is not None and (quantile.function, quantile.parameters, quantile.simple) == (
        "quantile",
        ("0.99",),
        False,
    )
    assert [a.base for a in quantile.arguments] == ["UInt32"]
    arg_max = parse_type("AggregateFunction(argMax, String, DateTime)").aggregate
    assert arg_max.function == "argMax" and [a.base for a in arg_max.arguments] == ["String", "DateTime"]
    count = parse_type("AggregateFunction(count)").aggregate
    assert count.function == "count" and count.arguments == ()
    simple = parse_type("SimpleAggregateFunction(sum, UInt64)").aggregate
    assert simple.simple and simple.function == "sum" and simple.arguments[0].is_unsigned_64
    assert parse_type("UInt64").aggregate is None


@pytest.mark.parametrize(
    ("repo", "live"),
    [
        ("INT", "Int32"),
        ("int", "Int32"),
        ("bigint", "Int64"),
        ("text", "String"),
        ("LowCardinality( String )", "LowCardinality(String)"),
        ("AggregateFunction(quantile(0.99),  UInt32)", "AggregateFunction(quantile(0.99), UInt32)"),
        ("DateTime64(3,'UTC')", "DateTime64(3, 'UTC')"),
        ("Nullable(DATE)", "Nullable(Date)"),
        ("Decimal(18,4)", "Decimal(18, 4)"),
        ("Time64( 3 )", "Time64(3)"),  # unknown to sqlglot: compared without whitespace
        # the server writes the state's version
        (
            "AggregateFunction(sumMap, Array(String), Array(UInt64))",
            "AggregateFunction(1, sumMap, Array(String), Array(UInt64))",
        ),
    ],
)
def test_canonical_spelling_equates_aliases_and_whitespace(repo: str, live: str) -> None:
    assert canonical_type(repo) == canonical_type(live)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("UInt32", "UInt64"),
        ("DateTime64(3, 'UTC')", "DateTime64(6, 'UTC')"),
        ("DateTime('UTC')", "DateTime('Europe/Berlin')"),
        ("Nullable(String)", "String"),
        ("LowCardinality(String)", "String"),
        ("AggregateFunction(sum, UInt64)", "SimpleAggregateFunction(sum, UInt64)"),
        ("Enum8('a' = 1)", "Enum8('a' = 2)"),
    ],
)
def test_canonical_spelling_keeps_different_types_apart(a: str, b: str) -> None:
    assert canonical_type(a) != canonical_type(b)


def test_canonical_is_clickhouse_spelling() -> None:
    assert canonical_type("INT") == "Int32"
    assert canonical_type("Date") == "Date"
    assert canonical_type("LowCardinality( String )") == "LowCardinality(String)"
    assert canonical_type("AggregateFunction(quantile(0.99),  UInt32)") == "AggregateFunction(quantile(0.99), UInt32)"


@pytest.mark.parametrize(
    ("old", "new", "in_place"),
    [
        ("UInt32", "UInt64", True),
        ("UInt64", "UInt32", False),
        ("UInt32", "Int64", True),
        ("UInt32", "Int32", False),
        ("Int32", "UInt64", False),
        ("INT", "Int32", True),
        ("String", "LowCardinality(String)", True),
        ("LowCardinality(String)", "String", True),
        ("String", "Nullable(String)", True),
        ("Nullable(String)", "String", False),
        ("Float32", "Float64", True),
        ("Float64", "Float32", False),
        ("FixedString(3)", "String", True),
        ("String", "UInt64", False),
        ("Date", "Date32", True),
        ("Date", "DateTime", False),
        ("DateTime", "DateTime64(3)", True),
        ("DateTime64(3)", "DateTime64(6)", True),
        ("DateTime64(6)", "DateTime64(3)", False),
        ("AggregateFunction(sum, UInt64)", "AggregateFunction(sum, UInt32)", False),
    ],
)
def test_converts_in_place(old: str, new: str, in_place: bool) -> None:
    from chmv_assets.ddl.types import converts_in_place

    assert converts_in_place(old, new) is in_place


def test_nested_fields() -> None:
    from chmv_assets.ddl.types import nested_fields

    assert nested_fields("Nested(At DateTime64(9), Name LowCardinality(String), `m` Map(String, UInt8))") == (
        ("At", "DateTime64(9)"),
        ("Name", "LowCardinality(String)"),
        ("m", "Map(String, UInt8)"),
    )
    assert nested_fields("Array(Tuple(a UInt8, b String))") is None

"""The one ClickHouse type model: every question chmv asks about a column type is answered here.

Types are parsed with sqlglot's ``DataType`` for the ClickHouse dialect, so ``INT``, ``Int32`` and ``int``
are one type and whitespace never matters. The few types sqlglot does not know yet (``Time64(3)``,
``BFloat16``, ``Object('json')``) keep their text as their canonical spelling, and their base name is the
leading word after the ``LowCardinality``/``Nullable`` wrappers: enough for every question below, since
none of them is a date, number or string type chmv treats specially.

The original spelling stays on :attr:`chmv_assets.ddl.models.Column.type` (it is what DDL output uses);
this model is derived from it, once per distinct spelling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cache, lru_cache

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from chmv_assets.ddl.sql_text import to_sql

_T = exp.DataType.Type
#: sqlglot renders a few ClickHouse type names in upper case; ClickHouse spells them so.
SPELLING = {
    "DATE": "Date",
    "DATE32": "Date32",
    "DATETIME": "DateTime",
    "UUID": "UUID",
    "BOOLEAN": "Bool",
    "TIME": "Time",
    "VARIANT": "Variant",
}
_DATES = ("Date", "Date32")
_DATETIMES = ("DateTime", "DateTime64")
_STRINGS = ("String", "FixedString")
_WRAPPERS = ("lowcardinality(", "nullable(")


@dataclass(frozen=True)
class AggregateFunctionType:
    """The state type of an ``AggregateFunction(f, …)`` or ``SimpleAggregateFunction(f, …)`` column.

    Attributes:
        function: The aggregate function as written (``sum``, ``quantile``, ``anyIf``).
        parameters: Its parameters (``("0.99",)`` for ``quantile(0.99)``).
        arguments: The argument types.
        simple: A ``SimpleAggregateFunction`` (the column holds the value itself, not a state).
    """

    function: str
    parameters: tuple[str, ...] = ()
    arguments: tuple[ClickHouseType, ...] = ()
    simple: bool = False


@dataclass(frozen=True)
class ClickHouseType:
    """A parsed ClickHouse column type.

    Attributes:
        sql: The text it was parsed from.
        canonical: One spelling per type, for comparing the repo with the server (``INT`` → ``Int32``).
        base: The type name without ``LowCardinality``/``Nullable`` and without parameters (``DateTime64``).
        nullable: Wrapped in ``Nullable``.
        low_cardinality: Wrapped in ``LowCardinality``.
        aggregate: The aggregate function of an ``AggregateFunction``/``SimpleAggregateFunction`` type.
        known: sqlglot parsed it (False: a type sqlglot does not know, kept as text).
    """

    sql: str
    canonical: str
    base: str
    nullable: bool = False
    low_cardinality: bool = False
    aggregate: AggregateFunctionType | None = None
    known: bool = True

    @property
    def is_date(self) -> bool:
        """``Date`` or ``Date32``."""
        return self.base in _DATES

    @property
    def is_datetime(self) -> bool:
        """``DateTime`` or ``DateTime64``."""
        return self.base in _DATETIMES

    @property
    def is_time(self) -> bool:
        """A date or a date-time: what an event-time or partition column holds."""
        return self.is_date or self.is_datetime

    @property
    def is_integer(self) -> bool:
        """``Int8`` … ``Int256``, ``UInt8`` … ``UInt256``."""
        rest = self.base.removeprefix("U")
        return rest.startswith("Int") and rest[3:].isascii() and rest[3:].isdigit()

    @property
    def is_unsigned_64(self) -> bool:
        """``UInt64`` (Parquet UINT64, which Spark reads as ``Decimal(20,0)``)."""
        return self.base == "UInt64"

    @property
    def is_float(self) -> bool:
        """``Float32``, ``Float64`` (``BFloat16`` too)."""
        return self.base in ("Float32", "Float64", "BFloat16")

    @property
    def is_decimal(self) -> bool:
        """``Decimal``, ``Decimal32(S)`` … ``Decimal256(S)``."""
        return self.base.startswith("Decimal")

    @property
    def is_numeric(self) -> bool:
        """An integer, float or decimal type (not ``Bool``, not an ``Enum``)."""
        return self.is_integer or self.is_float or self.is_decimal

    @property
    def is_string(self) -> bool:
        """``String`` or ``FixedString(N)``."""
        return self.base in _STRINGS

    def __str__(self) -> str:
        return self.sql


_STATE_VERSION = re.compile(r"\bAggregateFunction\(\s*\d+\s*,\s*")


@lru_cache(maxsize=8192)
def parse_type(type_sql: str) -> ClickHouseType:
    """Parse a ClickHouse type as the DDL or ``system.columns`` spells it; never raises.

    Args:
        type_sql: ``LowCardinality(Nullable(String))``, ``DateTime64(3, 'UTC')``, ``INT`` …
    """
    # The server writes the version of a versioned state (``AggregateFunction(1, sumMap, …)``): the same type.
    text = _STATE_VERSION.sub("AggregateFunction(", type_sql.strip())
    try:
        node = exp.DataType.build(text, dialect="clickhouse") if text else None
    except (ParseError, TokenError, ValueError):
        node = None
    if node is None or node.this == _T.USERDEFINED:
        return _opaque(type_sql)
    return _from_node(node, type_sql)


def canonical_type(type_sql: str) -> str:
    """One spelling per type, so ``INT`` equals ``Int32`` and ``LowCardinality( String )`` equals ``LowCardinality(String)``."""
    return parse_type(type_sql).canonical


def _from_node(node: exp.DataType, text: str) -> ClickHouseType:
    low_cardinality = node.this == _T.LOWCARDINALITY and bool(node.expressions)
    inner = node.expressions[0] if low_cardinality else node
    if not isinstance(inner, exp.DataType):
        return _opaque(text)
    aggregate = None
    if inner.this in (_T.AGGREGATEFUNCTION, _T.SIMPLEAGGREGATEFUNCTION) and inner.expressions:
        aggregate = _aggregate(inner)
    return ClickHouseType(
        sql=text,
        canonical=_spell(to_sql(node)),
        base=_base_name(inner.this),
        nullable=bool(inner.args.get("nullable")),
        low_cardinality=low_cardinality,
        aggregate=aggregate,
    )


def _aggregate(node: exp.DataType) -> AggregateFunctionType:
    function, *arguments = node.expressions
    parameters: tuple[str, ...] = ()
    if isinstance(function, exp.Func):
        parameters = tuple(to_sql(p) for p in function.expressions)
    return AggregateFunctionType(
        function=function.name,
        parameters=parameters,
        arguments=tuple(_from_node(a, to_sql(a)) for a in arguments if isinstance(a, exp.DataType)),
        simple=node.this == _T.SIMPLEAGGREGATEFUNCTION,
    )


@cache
def _base_name(kind: Enum) -> str:
    name = to_sql(exp.DataType(this=kind, nullable=False))
    return SPELLING.get(name, name)


def _spell(rendered: str) -> str:
    return SPELLING.get(rendered, rendered)


def _opaque(text: str) -> ClickHouseType:
    """A type sqlglot cannot parse: unwrap the wrappers by hand, keep the rest as written."""
    inner, nullable, low_cardinality = text.strip(), False, False
    while inner.lower().startswith(_WRAPPERS) and inner.endswith(")"):
        wrapper = inner[: inner.index("(")].lower()
        nullable |= wrapper == "nullable"
        low_cardinality |= wrapper == "lowcardinality"
        inner = inner[len(wrapper) + 1 : -1].strip()
    base = ""
    for char in inner:
        if not (char.isalnum() or char == "_"):
            break
        base += char
    return ClickHouseType(
        sql=text,
        canonical="".join(text.split()),
        base=base,
        nullable=nullable,
        low_cardinality=low_cardinality,
        known=False,
    )


def _int_bits(t: ClickHouseType) -> tuple[bool, int] | None:
    """``(unsigned, bits)`` of an integer type, None otherwise."""
    if not t.is_integer:
        return None
    unsigned = t.base.startswith("U")
    return unsigned, int(t.base.removeprefix("U")[3:])


def converts_in_place(old_sql: str, new_sql: str) -> bool:
    """Whether ``ALTER TABLE … MODIFY COLUMN`` from ``old_sql`` to ``new_sql`` keeps every value exactly.

    True for the same type, a wider integer that holds every old value (``UInt32`` → ``UInt64``/``Int64``),
    ``Float32`` → ``Float64``, ``FixedString(N)`` → ``String``, ``Date`` → ``Date32``, ``DateTime`` →
    ``DateTime64``, adding ``Nullable``, and adding or removing ``LowCardinality``. Anything else (a narrower
    or a different type, a changed aggregate state) is rebuilt as a new version of the table instead.
    """
    old, new = parse_type(old_sql), parse_type(new_sql)
    if old.canonical == new.canonical:
        return True
    if old.aggregate is not None or new.aggregate is not None:
        return False
    if old.nullable and not new.nullable:
        return False
    if old.base == new.base:
        # Only wrappers changed (Nullable added, LowCardinality added or removed), or parameters of one base.
        same_params = _unwrapped(old.canonical) == _unwrapped(new.canonical)
        return same_params or (old.base == "DateTime64" and _precision_grows(old.canonical, new.canonical))
    old_int, new_int = _int_bits(old), _int_bits(new)
    if old_int and new_int:
        (old_unsigned, old_bits), (new_unsigned, new_bits) = old_int, new_int
        if old_unsigned == new_unsigned:
            return new_bits > old_bits
        return old_unsigned and new_bits > old_bits  # UInt32 fits in Int64, Int32 never fits in a UInt
    pairs = {("Float32", "Float64"), ("FixedString", "String"), ("Date", "Date32"), ("DateTime", "DateTime64")}
    return (old.base, new.base) in pairs


def _unwrapped(canonical: str) -> str:
    text = canonical
    for wrapper in ("LowCardinality(", "Nullable("):
        while text.startswith(wrapper) and text.endswith(")"):
            text = text[len(wrapper) : -1]
    return text


def _precision_grows(old: str, new: str) -> bool:
    def precision(text: str) -> tuple[int, str]:
        inner = _unwrapped(text).removeprefix("DateTime64(").rstrip(")")
        digits, _, zone = inner.partition(",")
        return int(digits.strip() or 3), zone.strip()

    try:
        (old_p, old_zone), (new_p, new_zone) = precision(old), precision(new)
    except ValueError:
        return False
    return new_p >= old_p and old_zone == new_zone


_NESTED = re.compile(r"^\s*Nested\s*\((?P<fields>.*)\)\s*$", re.S | re.I)


def nested_fields(type_sql: str) -> tuple[tuple[str, str], ...] | None:
    """``Nested(a T, b U)`` → ``(("a", "T"), ("b", "U"))``: the fields of a Nested column, as the server stores them
    (one ``name.a Array(T)`` column each, ``flatten_nested``); None for any other type."""
    match = _NESTED.match(type_sql)
    if match is None:
        return None
    fields, depth, start, text = [], 0, 0, match["fields"]
    for i, char in enumerate(text + ","):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            name, _, field_type = text[start:i].strip().partition(" ")
            fields.append((name.strip('`"'), field_type.strip()))
            start = i + 1
    return tuple(fields)

"""A table's TTL clause, parsed once at load time into :class:`~chmv_assets.ddl.models.TtlRule` objects.

Only what retention questions need is derived: which column a rule's time expression reads (bare, or
through a monotone truncation such as ``toDate``), the constant interval added to it, the action and
whether a ``WHERE`` restricts it. Anything else (``ts + INTERVAL 1 DAY + INTERVAL 2 HOUR``, a function of
two columns) keeps ``column``/``interval`` None, so consumers say "unknown" instead of guessing.
"""

from __future__ import annotations

from sqlglot import exp

from chmv_assets.ddl.grains import TRUNCATION_FUNCTIONS, Grain
from chmv_assets.ddl.models import Column, TtlAction, TtlRule
from chmv_assets.ddl.sql_text import to_sql

#: Interval units ClickHouse accepts after ``INTERVAL n`` and in ``toInterval<Unit>(n)``.
UNITS = ("SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")
#: Functions that convert a time column without changing its order (a TTL on ``toDateTime(d)``).
_CONVERSIONS = {"toDateTime": None, "toDateTime64": None}


def parse_ttl(prop: exp.MergeTreeTTL | None, columns: tuple[Column, ...]) -> tuple[TtlRule, ...]:
    """The rules of a table-level TTL clause (None: the table has none).

    Args:
        prop: sqlglot's node of the CREATE's own TTL property (not a column TTL).
        columns: The table's columns (a bare number added to a Date counts days, to a DateTime seconds).
    """
    if prop is None:
        return ()
    items = list(prop.expressions)
    condition = prop.args.get("where")
    group = prop.args.get("group")
    rules = []
    for index, item in enumerate(items):
        last = index == len(items) - 1
        action, expression = _action(item)
        if last and group is not None and action == TtlAction.DELETE:
            action = TtlAction.GROUP_BY
        column, grain, interval = _time_expression(expression, {c.name: c for c in columns})
        rules.append(
            TtlRule(
                expression=to_sql(expression),
                column=column,
                truncation=grain,
                interval=interval,
                action=action,
                condition=to_sql(condition.this) if last and condition is not None else None,
            )
        )
    return tuple(rules)


def _action(item: exp.Expression) -> tuple[TtlAction, exp.Expression]:
    if not isinstance(item, exp.MergeTreeTTLAction):
        return TtlAction.DELETE, item
    if item.args.get("recompress") is not None:
        return TtlAction.RECOMPRESS, item.this
    if item.args.get("to_disk") is not None or item.args.get("to_volume") is not None:
        return TtlAction.MOVE, item.this
    return TtlAction.DELETE, item.this


def _function_name(node: exp.Expression) -> str | None:
    name = node.meta.get("clickhouse_name")
    if name:
        return name
    return node.name if isinstance(node, exp.Anonymous) else None


def _column_of(node: exp.Expression) -> tuple[str | None, Grain | None]:
    """``col`` → (col, None); ``toDate(col)`` → (col, day); anything else → (None, None)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and not node.table:
        return node.name, None
    name = _function_name(node) if isinstance(node, exp.Func) else None
    if name is None or (name not in TRUNCATION_FUNCTIONS and name not in _CONVERSIONS):
        return None, None
    arguments = [a for a in node.args.values() if isinstance(a, exp.Expression) and not isinstance(a, exp.Var)]
    arguments += [a for v in node.args.values() if isinstance(v, list) for a in v if isinstance(a, exp.Expression)]
    columns = [a for a in arguments if isinstance(a, exp.Column)]
    if len(columns) != 1 or columns[0].table or any(not isinstance(a, exp.Column | exp.Literal) for a in arguments):
        return None, None
    return columns[0].name, TRUNCATION_FUNCTIONS.get(name)


def _interval(node: exp.Expression, column: Column | None) -> tuple[int, str] | None:
    while isinstance(node, exp.Paren):
        node = node.this
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    result = None
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal) and node.unit is not None:
        unit = node.unit.name.upper().removesuffix("S")
        result = (_int(node.this.name), unit)
    elif isinstance(node, exp.Anonymous) and node.name.startswith("toInterval") and len(node.expressions) == 1:
        literal = node.expressions[0]
        if isinstance(literal, exp.Literal):
            result = (_int(literal.name), node.name.removeprefix("toInterval").upper())
    elif isinstance(node, exp.Literal) and not node.is_string and column is not None:
        result = (_int(node.name), "DAY" if column.data_type.is_date else "SECOND")
    if result is None or result[0] is None or result[1] not in UNITS:
        return None
    return (-result[0] if negative else result[0]), result[1]


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _time_expression(
    node: exp.Expression, columns: dict[str, Column]
) -> tuple[str | None, Grain | None, tuple[int, str] | None]:
    """``(column, truncation, interval)`` of ``f(col) [+|- interval]``; Nones where not of that form."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Add | exp.Sub):
        column, grain = _column_of(node.this)
        interval = _interval(node.expression, columns.get(column or ""))
        if column is None or interval is None:
            return None, None, None
        return column, grain, (interval if isinstance(node, exp.Add) else (-interval[0], interval[1]))
    column, grain = _column_of(node)
    return (column, grain, (0, "SECOND")) if column is not None else (None, None, None)

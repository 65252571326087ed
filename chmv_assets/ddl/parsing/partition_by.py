"""A table's PARTITION BY as functions of one column each (:class:`~chmv_assets.ddl.models.PartitionCall`), the
shapes of :mod:`chmv_assets.ddl.shapes` read from them."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token

from chmv_assets.ddl.models import PartitionCall, PartitionElement, Span
from chmv_assets.ddl.parsing.trees import function_name
from chmv_assets.ddl.sql_text import tuple_items


def partition_call(prop: exp.Expr | None) -> PartitionCall | None:
    """``f(col)`` or a bare ``col`` (parentheses ignored); None for anything else (several arguments, a tuple…)."""
    call = element_call(prop.this) if prop is not None else None
    return call if call is not None and not call.arguments and call.inner is None else None


def element_call(node: exp.Expr | None) -> PartitionCall | None:
    """One PARTITION BY element as a function of one column (:class:`PartitionCall`): ``f(col)``, ``f(col, constants…)``,
    ``f(g(col), constants…)`` or a bare ``col`` (parentheses ignored); None for anything else."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and not node.table:
        return PartitionCall(function=None, column=node.name)
    if not isinstance(node, exp.Func) or isinstance(node, exp.Tuple | exp.Struct):
        return None
    flat = _call_arguments(node)
    if not flat:
        return None
    first, rest = flat[0], flat[1:]
    constants = [c for c in (_constant(a) for a in rest) if c is not None]
    if len(constants) != len(rest):
        return None
    inner = None
    if isinstance(first, exp.Func) and not isinstance(first, exp.Column):
        inner_args = _call_arguments(first)
        if len(inner_args) != 1 or not rest:  # f(g(col)) alone is not a shape chmv reads
            return None
        inner, first = function_name(first), inner_args[0]
    if not isinstance(first, exp.Column) or first.table:
        return None
    return PartitionCall(function=function_name(node), column=first.name, arguments=tuple(constants), inner=inner)


def _call_arguments(node: exp.Func) -> list[exp.Expr]:
    """A call's arguments in written order; sqlglot adds the unit of a truncation it recognises (toStartOfHour →
    TimestampTrunc(unit=HOUR)), which is not an argument."""
    arguments = [v for k, v in node.args.items() if v is not None and not (k == "unit" and isinstance(v, exp.Var))]
    return [a for arg in arguments for a in (arg if isinstance(arg, list) else [arg]) if isinstance(a, exp.Expression)]


def _constant(node: exp.Expr) -> str | None:
    """A constant argument as written: a number, a string's value, ``6 HOUR`` of ``INTERVAL 6 HOUR``; None otherwise."""
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal) and node.unit is not None:
        return f"{node.this.this} {node.unit.name.upper()}"
    return None


def partition_elements(
    span: tuple[int, int], prop: exp.Expr | None, tokens: list[Token]
) -> tuple[PartitionElement, ...]:
    """The PARTITION BY's elements (the items of a tuple, or the whole), spans relative to the clause's text."""
    items = tuple_items(tokens, *span)
    node = prop.this if prop is not None else None
    while isinstance(node, exp.Paren):
        node = node.this
    tupled = isinstance(node, exp.Tuple | exp.Struct) and (len(items) != 1 or items[0] != span)
    nodes = list(node.expressions) if tupled and node is not None else [node]
    calls = [element_call(n) for n in nodes] if len(nodes) == len(items) else [None] * len(items)
    return tuple(
        PartitionElement(span=Span(start=a - span[0], end=b - span[0]), call=call)
        for (a, b), call in zip(items, calls, strict=True)
    )

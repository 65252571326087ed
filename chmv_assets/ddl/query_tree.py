"""A SELECT's facts from ClickHouse's own query tree, where sqlglot cannot read the SELECT.

The tree is ``EXPLAIN QUERY TREE run_passes = 0`` (:mod:`chmv_assets.ddl.server_grammar`): the server's parse of the
SELECT before analysis, in labelled sections (``PROJECTION``, ``JOIN TREE``, ``WHERE``, ``GROUP BY``…), no table
needed. It has no positions, so what chmv splices or shows verbatim comes from the SELECT's tokens: where each table
is named (:func:`~chmv_assets.ddl.sql_text.table_mentions`, matched to the tree's tables in written order) and the
text of each SELECT-list and GROUP BY item (:func:`~chmv_assets.ddl.sql_text.select_layout`). The facts are those
:func:`chmv_assets.ddl.parsing.select.analyze_select` derives from sqlglot's tree
(:class:`~chmv_assets.ddl.select_facts.SelectFacts`).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from chmv_assets.ddl.grains import TRUNCATION_FUNCTIONS, Grain
from chmv_assets.ddl.models import AggregateCall, ObjectRef, OutputColumn, Span
from chmv_assets.ddl.select_facts import (
    AGGREGATES,
    SelectFacts,
    SourceUses,
    is_dictionary_function,
    source_role,
    split_combinators,
)
from chmv_assets.ddl.sql_text import TableMention, select_layout, table_mentions, tokenize

#: ``IN`` and its kin: a bare name as their second argument is a table (``k IN db.allowed``).
IN_FUNCTIONS = frozenset(
    {"in", "notIn", "globalIn", "globalNotIn", "nullIn", "notNullIn", "globalNullIn", "globalNotNullIn"}
)
_ATTRIBUTE = re.compile(r"([a-z_]+): ")
#: Sections of the tree whose direct IDENTIFIER children are tables.
_TABLE_SECTIONS = frozenset({"JOIN TREE", "TABLE EXPRESSION", "LEFT TABLE EXPRESSION", "RIGHT TABLE EXPRESSION"})


@dataclass(eq=False)
class Node:
    """One line of the dump: a node (``FUNCTION id: 3, alias: h, function_name: f``) or a section (``WHERE``)."""

    kind: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)

    @property
    def is_section(self) -> bool:
        return "id" not in self.attrs

    def section(self, name: str) -> Node | None:
        return next((c for c in self.children if c.is_section and c.kind == name), None)

    def items(self) -> list[Node]:
        """A section's or a LIST's element nodes (a section holds one node, or one LIST of them)."""
        out = []
        for child in self.children:
            out.extend(child.items() if child.kind == "LIST" or child.is_section else [child])
        return out

    def arguments(self) -> list[Node]:
        args = self.section("ARGUMENTS")
        return args.items() if args is not None else []

    def walk(self) -> Iterator[Node]:
        """Preorder: written order."""
        yield self
        for child in self.children:
            yield from child.walk()

    def bfs(self, *, into_queries: bool = False) -> Iterator[Node]:
        queue = deque(self.children)
        while queue:
            node = queue.popleft()
            yield node
            if into_queries or node.kind not in ("QUERY", "UNION"):
                queue.extend(node.children)


def parse_dump(text: str) -> Node:
    """The tree of an ``EXPLAIN QUERY TREE`` dump (two spaces of indentation per level)."""
    root: Node | None = None
    stack: list[tuple[int, Node]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        node = _node(line.strip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            stack[-1][1].children.append(node)
        elif root is None:
            root = node
        stack.append((indent, node))
    if root is None:
        raise ValueError("empty query tree")
    return root


def _node(text: str) -> Node:
    head, sep, rest = text.partition(" id: ")
    if not sep:
        return Node(text.split(" ")[0] if text.startswith("EXPRESSION") else text)
    attrs = {"id": ""}
    rest = "id: " + rest
    i = 0
    while i < len(rest):
        match = _ATTRIBUTE.match(rest, i)
        if match is None:
            break
        key, i = match.group(1), match.end()
        if rest.startswith("'", i):  # a quoted value may hold ", "
            j = i + 1
            while j < len(rest) and rest[j] != "'":
                j += 2 if rest[j] == "\\" else 1
            value, i = rest[i : j + 1], j + 1
        else:
            j = rest.find(", ", i)
            j = len(rest) if j < 0 else j
            value, i = rest[i:j], j
        attrs[key] = value
        if rest.startswith(", ", i):
            i += 2
    return Node(head, attrs)


def _string(value: str | None) -> str | None:
    """The text of a quoted constant (``'db.d'`` → ``db.d``), None for another constant."""
    if not value or len(value) < 2 or value[0] != "'" or value[-1] != "'":
        return None
    return re.sub(r"\\(.)", r"\1", value[1:-1])


@dataclass(eq=False)
class _TableRef:
    """A table position of the tree: a name after FROM or JOIN, or the right side of IN."""

    node: Node
    after_in: bool
    mention: TableMention | None = None

    @property
    def name(self) -> str:
        return self.node.attrs.get("identifier", "")


class _Tree:
    """The query tree of one SELECT and what its analysis needs, gathered in one preorder walk."""

    def __init__(self, root: Node):
        self.root = root
        self.branches = list(_branches(root))
        self.ctes: dict[str, Node] = {}
        self.aliases: set[str] = set()
        self.tables: list[_TableRef] = []
        self.functions: list[Node] = []
        self._seen_with: set[str] = set()
        # A table's alias stands on its IDENTIFIER in a FROM or JOIN: it names the table, not an expression.
        in_from = {
            id(c) for n in root.walk() if n.kind in _TABLE_SECTIONS for c in n.children if c.kind == "IDENTIFIER"
        }
        for node in root.walk():
            if node.kind == "QUERY" and node.attrs.get("is_cte") == "1":
                self.ctes.setdefault(node.attrs.get("cte_name", ""), node)
            elif "alias" in node.attrs and id(node) not in in_from:
                self.aliases.add(node.attrs["alias"])
            if node.kind == "FUNCTION":
                self.functions.append(node)
        self._visit(root)

    # -- the walk in written order ----------------------------------------------------------------

    def _visit(self, node: Node) -> None:
        if node.kind == "QUERY":
            for section in node.children:
                if section.kind == "JOIN TREE":
                    for child in section.children:
                        self._join_tree(child)
                elif section.kind == "WITH":
                    self._with(section)
                else:
                    self._visit(section)
            return
        if node.kind == "FUNCTION" and node.attrs.get("function_name") in IN_FUNCTIONS:
            args = node.arguments()
            for i, arg in enumerate(args):
                if i == 1 and arg.kind == "IDENTIFIER" and not self._named_expression(arg):
                    self._table(arg, after_in=True)
                else:
                    self._visit(arg)
            for section in node.children:
                if section.kind != "ARGUMENTS":
                    self._visit(section)
            return
        for child in node.children:
            self._visit(child)

    def _with(self, section: Node) -> None:
        """A WITH list; the copies ClickHouse makes of it in each branch of a UNION are read once."""
        for item in section.items():
            name = item.attrs.get("cte_name") or item.attrs.get("alias") or f"#{item.attrs.get('id')}"
            if name in self._seen_with:
                continue
            self._seen_with.add(name)
            self._visit(item)

    def _join_tree(self, node: Node) -> None:
        if node.kind == "IDENTIFIER":
            self._table(node, after_in=False)
        elif node.kind in ("QUERY", "UNION", "TABLE_FUNCTION"):
            self._visit(node)
        else:  # JOIN, CROSS JOIN, ARRAY_JOIN and their sections
            for child in node.children:
                if child.kind in _TABLE_SECTIONS:
                    for inner in child.children:
                        self._join_tree(inner)
                else:
                    self._visit(child)

    def _table(self, node: Node, *, after_in: bool) -> None:
        self.tables.append(_TableRef(node, after_in))

    def _named_expression(self, node: Node) -> bool:
        """A name that is a CTE or an alias of the query, not a table (``k IN allowed_ids`` of a WITH)."""
        name = node.attrs.get("identifier", "")
        return name in self.ctes or name in self.aliases

    # -- structure ----------------------------------------------------------------------------------

    def leftmost(self, node: Node | None, depth: int = 0) -> Node | None:
        """The table whose inserts trigger the query: the left-most FROM, through subqueries and CTEs."""
        if node is None or depth > 64:
            return None
        if node.kind == "UNION":
            return self.leftmost(next(iter(_branches(node)), None), depth + 1)
        if node.kind == "QUERY":
            tree = node.section("JOIN TREE")
            return self.leftmost(tree.children[0] if tree is not None and tree.children else None, depth + 1)
        if node.kind == "IDENTIFIER":
            name = node.attrs.get("identifier", "")
            if "." not in name and name in self.ctes:
                return self.leftmost(self.ctes[name], depth + 1)
            return node
        for section in ("TABLE EXPRESSION", "LEFT TABLE EXPRESSION"):
            child = node.section(section)
            if child is not None and child.children:
                return self.leftmost(child.children[0], depth + 1)
        return None

    def joins(self) -> Iterator[Node]:
        for node in self.root.walk():
            if node.kind in ("JOIN", "CROSS JOIN"):
                yield node


def _branches(node: Node) -> Iterator[Node]:
    if node.kind == "UNION":
        queries = node.section("QUERIES")
        for child in queries.items() if queries is not None else ():
            yield from _branches(child)
    else:
        yield node


def analyze_query_tree(dump: str, select_sql: str, default_database: str) -> SelectFacts:
    """The facts of an MV's SELECT (:class:`SelectFacts`) from ClickHouse's query tree of it.

    Args:
        dump: ``EXPLAIN QUERY TREE run_passes = 0`` of ``select_sql``.
        select_sql: The SELECT as written: spans and verbatim items are offsets into it.
        default_database: For unqualified table names.
    """
    tree = _Tree(parse_dump(dump))
    tokens = tokenize(select_sql)
    _match_mentions(tree.tables, table_mentions(tokens))

    def ref_of(table: _TableRef) -> ObjectRef:
        parts = table.mention.parts if table.mention is not None else tuple(table.name.split(".", 1))
        database = ".".join(parts[:-1]) if len(parts) > 1 else default_database
        return ObjectRef(database=database, name=parts[-1])

    # A SELECT without FROM reads system.one for ClickHouse: nothing the text names, so not a source.
    real = [
        t
        for t in tree.tables
        if not ("." not in t.name and t.name in tree.ctes) and not (t.mention is None and t.name == "system.one")
    ]
    trigger_node = tree.leftmost(tree.root)
    trigger = next((ref_of(t) for t in real if t.node is trigger_node), None)
    heads = {id(tree.leftmost(b)) for b in tree.branches[1:]} if len(tree.branches) > 1 else set()
    blocks = {*heads, id(trigger_node)}

    uses = SourceUses()
    for table in real:
        ref = ref_of(table)
        mention = table.mention
        uses.add(
            ref,
            source_role(ref, trigger, id(table.node) in heads),
            Span(start=mention.start, end=mention.end) if mention is not None else None,
            aliased=table.after_in or "alias" in table.node.attrs,
            block=id(table.node) in blocks,
        )

    joined: list[ObjectRef] = []
    for join in tree.joins():
        sides = (
            [join.section("RIGHT TABLE EXPRESSION")]
            if join.kind == "JOIN"
            else [s for s in join.children if s.kind == "TABLE EXPRESSION"][1:]
        )
        for side in sides:
            for node in _through_ctes(side, tree) if side is not None else ():
                joined += [ref_of(t) for t in real if t.node is node]

    dictionaries = []
    for call in tree.functions:
        if is_dictionary_function(call.attrs.get("function_name", "")):
            args = call.arguments()
            name = _string(args[0].attrs.get("constant_value")) if args and args[0].kind == "CONSTANT" else None
            if name:
                database, _, dictionary = name.rpartition(".")
                dictionaries.append(ObjectRef(database=database or default_database, name=dictionary))

    first = tree.branches[0]
    layout = select_layout(tokens)
    projection = first.section("PROJECTION")
    items = projection.items() if projection is not None else []
    texts = [select_sql[a:b] for a, b in layout.items] if len(layout.items) == len(items) else [None] * len(items)
    aliases: dict[str, ObjectRef] = {}
    for table in real:
        if any(table.node is n for n in first.walk()):
            aliases.setdefault(table.node.attrs.get("alias") or table.name.rsplit(".", 1)[-1], ref_of(table))
    outputs, aggregates = [], []
    for item, text in zip(items, texts, strict=True):
        name = _output_name(item, text)
        function = _first_aggregate(item)
        if function is not None:
            split = split_combinators(function.attrs["function_name"])
            assert split is not None
            aggregates.append(
                AggregateCall(
                    output=name, function=function.attrs["function_name"], base=split[0], combinators=split[1]
                )
            )
        outputs.append(
            OutputColumn(
                name=name,
                expression=_expression_text(item, text, name),
                source_columns=tuple(_column_sources(item, tree, aliases, trigger)),
                truncation=_truncation(item),
                is_aggregate=_is_aggregate(item),
            )
        )
    return SelectFacts(
        sources=uses.sources(),
        trigger=trigger,
        dictionaries=tuple(dict.fromkeys(dictionaries)),
        group_by=tuple(select_sql[a:b] for a, b in layout.group_by),
        aggregates=tuple(aggregates),
        outputs=tuple(outputs),
        has_join=any(True for _ in tree.joins()),
        joined=tuple(dict.fromkeys(joined)),
        self_join=trigger is not None and trigger in joined,
        has_order_by=any(b.section("ORDER BY") is not None for b in tree.branches),
        functions=tuple(dict.fromkeys(f.attrs.get("function_name", "") for f in tree.functions)),
    )


def _through_ctes(node: Node, tree: _Tree) -> Iterator[Node]:
    """The nodes under ``node``, and those of the CTEs it names (``JOIN u`` of ``WITH u AS (…)`` reads u's tables)."""
    for inner in node.walk():
        yield inner
        name = inner.attrs.get("identifier", "") if inner.kind == "IDENTIFIER" else ""
        if name and "." not in name and name in tree.ctes:
            yield from tree.ctes[name].walk()


def _match_mentions(tables: list[_TableRef], mentions: list[TableMention]) -> None:
    """Give each table position of the tree (written order) the next mention of its name in the text."""
    cursor = 0
    for table in tables:
        for k in range(cursor, len(mentions)):
            mention = mentions[k]
            if mention.name == table.name and mention.after_in == table.after_in:
                table.mention, cursor = mention, k + 1
                break


def _aggregate_function(node: Node) -> bool:
    name = node.attrs.get("function_name", "")
    split = split_combinators(name) if node.kind == "FUNCTION" else None
    return split is not None and (bool(split[1]) or name in AGGREGATES)


def _functions(item: Node) -> list[Node]:
    """The functions of a SELECT item in breadth-first order, the item first, not inside subqueries."""
    nodes = [item] if item.kind == "FUNCTION" else []
    if item.kind not in ("QUERY", "UNION"):
        nodes += [n for n in item.bfs() if n.kind == "FUNCTION"]
    return nodes


def _is_aggregate(item: Node) -> bool:
    return any(_aggregate_function(f) for f in _functions(item))


def _first_aggregate(item: Node) -> Node | None:
    """The item's aggregate call when it is the item itself or its first function (as the sqlglot path counts)."""
    functions = _functions(item)
    found = next((f for f in functions if _aggregate_function(f)), None)
    return found if found is not None and (found is item or found is functions[0]) else None


def _output_name(item: Node, text: str | None) -> str:
    if "alias" in item.attrs:
        return item.attrs["alias"]
    if item.kind == "IDENTIFIER":
        return item.attrs.get("identifier", "").rsplit(".", 1)[-1]
    if item.kind == "MATCHER":
        return "*"
    return " ".join((text or "").split())


def _expression_text(item: Node, text: str | None, name: str) -> str:
    """The item as written without its alias (for display, as the sqlglot path renders it)."""
    if text is None:
        return name
    words = " ".join(text.split())
    alias = item.attrs.get("alias")
    if alias:
        for suffix in (f" AS {alias}", f" as {alias}", f" AS `{alias}`", f" as `{alias}`", f" {alias}"):
            if words.endswith(suffix):
                return words[: -len(suffix)]
    return words


def _column_sources(
    item: Node, tree: _Tree, aliases: dict[str, ObjectRef], trigger: ObjectRef | None
) -> Iterator[tuple[str, str]]:
    """``(table, column)`` for each column the item reads (lambda parameters and the query's aliases are not)."""
    parameters = {
        a.attrs.get("name", "") for n in item.walk() if n.kind == "LAMBDA" for a in n.walk() if a.kind == "ARGUMENT"
    }
    nodes = [item, *item.bfs()] if item.kind not in ("QUERY", "UNION") else []
    others = tree.aliases - {item.attrs.get("alias")}  # `sumMergeState(events) AS events` reads the column
    for node in nodes:
        if node.kind != "IDENTIFIER":
            continue
        name = node.attrs.get("identifier", "")
        qualifier, _, column = name.rpartition(".")
        if not qualifier and (name in parameters or name in others):
            continue
        ref = aliases.get(qualifier) if qualifier else trigger
        if ref is not None:
            yield (ref.fqn, column)


def _truncation(item: Node) -> tuple[str, Grain | None] | None:
    if item.kind == "IDENTIFIER":
        return (item.attrs.get("identifier", "").rsplit(".", 1)[-1], None)
    if item.kind == "FUNCTION":
        grain = TRUNCATION_FUNCTIONS.get(item.attrs.get("function_name", ""))
        args = [a for a in item.arguments() if a.kind != "CONSTANT"]
        if grain and len(args) == 1 and args[0].kind == "IDENTIFIER":
            return (args[0].attrs.get("identifier", "").rsplit(".", 1)[-1], grain)
    return None

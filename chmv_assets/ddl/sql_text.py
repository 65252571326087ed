"""Statement splitting and verbatim clause extraction on top of sqlglot's ClickHouse tokenizer."""

from __future__ import annotations

import re
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.parser import Parser
from sqlglot.tokens import Token, TokenType

_DIALECT = ClickHouse()
_GENERATOR = _DIALECT.generator()
#: A tokenizer and a parser per thread, reused (building them costs as much as tokenizing a short statement);
#: both keep the state of the text they work on, so threads do not share them.
_PER_THREAD = threading.local()


def to_sql(node) -> str:
    """Render a parsed node in ClickHouse SQL, for display and comparison only (never executed verbatim).

    One generator is reused and the node is not copied: a sqlglot ``.sql()`` call builds both anew.
    """
    return _GENERATOR.generate(node, copy=False)


#: Keywords that end a clause of CREATE TABLE / CREATE MATERIALIZED VIEW at parenthesis depth 0.
CLAUSE_STOPS = {
    "ORDER",
    "PRIMARY",
    "SAMPLE",
    "TTL",
    "SETTINGS",
    "COMMENT",
    "PARTITION",
    "AS",
    "POPULATE",
    "TO",
    "EMPTY",
    "REFRESH",
    "ENGINE",
    "DEFINER",
    "SQL",
    "SOURCE",
    "LAYOUT",
    "LIFETIME",
}
# ``TTL … TO DISK 'd'`` / ``TO VOLUME 'v'``: a TO that belongs to the TTL clause, not an MV's ``TO target``.
_TTL_TARGETS = {"DISK", "VOLUME"}


@dataclass(frozen=True)
class Statement:
    """One statement of a DDL file.

    Attributes:
        text: The statement text, from its first token to its last (no trailing semicolon).
        offset: Character offset of ``text`` in the file.
        line: 1-based line of the first token in the file.
        column: 1-based column of the first token in the file.
        comments: Comments written directly before the statement.
    """

    text: str
    offset: int
    line: int
    column: int
    comments: tuple[str, ...]


def tokenize(sql: str) -> list[Token]:
    """Tokenize ClickHouse SQL; raises ``sqlglot.errors.TokenError`` on unterminated strings etc."""
    tokenizer = getattr(_PER_THREAD, "tokenizer", None)
    if tokenizer is None:
        tokenizer = _PER_THREAD.tokenizer = _DIALECT.tokenizer()
    return tokenizer.tokenize(sql)


def thread_parser() -> Parser:
    """This thread's ClickHouse parser: ``parse`` resets it, so one serves every statement of a load."""
    instance = getattr(_PER_THREAD, "parser", None)
    if instance is None:
        instance = _PER_THREAD.parser = _DIALECT.parser()
    return instance


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _Lines:
    """:func:`line_col` for increasing offsets into one text, counting each newline once (a file of
    thousands of statements would otherwise be scanned from its start for every statement)."""

    def __init__(self, text: str):
        self.text, self.offset, self.line = text, 0, 1

    def line_col(self, offset: int) -> tuple[int, int]:
        if offset < self.offset:
            self.offset, self.line = 0, 1
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line, offset - (self.text.rfind("\n", 0, offset) + 1) + 1


def split_statements(sql: str) -> Iterator[Statement]:
    """Split a file into statements at top-level semicolons; a last statement may lack one.

    A comment after a semicolon on the same line (``…; -- keep forever``) is a trailing comment of the
    statement it follows (the tokenizer attaches it to the semicolon); it is the next statement's
    comment only when that statement starts on the line where the comment ends (``…; /* b */ CREATE …``).
    """
    current: list[Token] = []
    pending_comments: list[str] = []
    pending_line = 0
    lines = _Lines(sql)
    for token in [*tokenize(sql), None]:
        if token is None or token.token_type == TokenType.SEMICOLON:
            if current:
                start, end = current[0].start, current[-1].end + 1
                line, column = lines.line_col(start)
                before = pending_comments if line == pending_line else []
                comments = (*before, *current[0].comments)
                yield Statement(sql[start:end], start, line, column, tuple(c.strip() for c in comments))
            pending_comments = list(token.comments) if token is not None else []
            if token is not None:
                pending_line = lines.line_col(token.start)[0] + sum(c.count("\n") for c in pending_comments)
            current = []
        else:
            current.append(token)


#: Clauses of CREATE TABLE / CREATE MATERIALIZED VIEW that chmv keeps verbatim.
TABLE_CLAUSES = ("PARTITION BY", "ORDER BY", "PRIMARY KEY", "SAMPLE BY", "TTL", "SETTINGS")
#: The clauses by their first word: only those can start at a token spelling that word.
_CLAUSES_BY_WORD = {phrase.split(" ")[0]: (phrase,) for phrase in TABLE_CLAUSES}
_OPEN = (TokenType.L_PAREN, TokenType.L_BRACKET)
_CLOSE = (TokenType.R_PAREN, TokenType.R_BRACKET)
_STARTERS = (TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN)


def nesting(tokens: Iterable[Token]) -> Iterator[tuple[int, Token, int]]:
    """Each token with its index and the depth of parentheses and brackets after it: ``(`` and ``[`` stand inside
    what they open, ``)`` and ``]`` outside what they close, a word at depth 0 is at the statement's own level."""
    depth = 0
    for i, token in enumerate(tokens):
        if token.token_type in _OPEN:
            depth += 1
        elif token.token_type in _CLOSE:
            depth -= 1
        yield i, token, depth


def clauses(tokens: list[Token]) -> dict[str, tuple[int, int]]:
    """Spans ``[start, end)`` of the depth-0 clauses named in :data:`TABLE_CLAUSES`, in one pass.

    A clause runs to the next depth-0 clause keyword; scanning stops at the ``AS SELECT`` of an MV,
    so an ORDER BY inside the MV's SELECT is never taken for the inner table's.
    """
    found: dict[str, tuple[int, int]] = {}
    depth, open_phrase, body_start, last_end = 0, None, 0, 0
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            depth -= 1
        elif depth == 0:
            word = _word(token).split(" ")[0]
            ttl_move = open_phrase == "TTL" and word == "TO" and i + 1 < n and _word(tokens[i + 1]) in _TTL_TARGETS
            if word in CLAUSE_STOPS and not ttl_move:
                as_select = kind == TokenType.ALIAS and i + 1 < n and tokens[i + 1].token_type in _STARTERS
                if open_phrase is not None and i > body_start:
                    found.setdefault(open_phrase, (tokens[body_start].start, last_end))
                    open_phrase = None
                if as_select:
                    return found
                for phrase in _CLAUSES_BY_WORD.get(word, ()):
                    length = _phrase_length(tokens, i, phrase)
                    if length:
                        open_phrase, body_start = phrase, i + length
                        i += length
                        break
                else:
                    i += 1
                continue
        last_end = token.end + 1
        i += 1
    if open_phrase is not None and body_start < n:
        found.setdefault(open_phrase, (tokens[body_start].start, last_end))
    return found


def _word(token: Token) -> str:
    return " ".join(token.text.upper().split())


def _phrase_length(tokens: list[Token], i: int, phrase: str) -> int:
    """How many tokens from ``i`` spell ``phrase`` (the tokenizer may join ``ORDER BY`` into one token)."""
    words = ""
    for n, token in enumerate(tokens[i:], start=1):
        words = f"{words} {_word(token)}".strip()
        if words == phrase:
            return n
        if not phrase.startswith(words + " "):
            return 0
    return 0


def select_start(tokens: list[Token]) -> int | None:
    """Offset of the SELECT (or WITH, or parenthesis) after the depth-0 ``AS`` of a CREATE … AS SELECT."""
    for i, token, depth in nesting(tokens):
        if depth == 0 and token.token_type == TokenType.ALIAS and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt.token_type in (TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN):
                return nxt.start
    return None


def _start(token: Token) -> int:
    return token.start


def item_end(tokens: list[Token], start: int) -> int:
    """End offset ``[start, end)`` of the list item starting at character ``start``: up to its depth-0 comma or ``)``.

    For the items of a parenthesized list (a column definition inside ``CREATE TABLE t (…)``), verbatim.
    Scans from the item's first token only (a binary search), so the columns of a wide table cost linear time.
    """
    depth, end = 0, start
    for token in islice(tokens, bisect_left(tokens, start, key=_start), None):
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            if depth == 0:
                break
            depth -= 1
        elif kind == TokenType.COMMA and depth == 0:
            break
        end = token.end + 1
    return end


def tuple_items(tokens: list[Token], start: int, end: int) -> list[tuple[int, int]]:
    """The spans of the items of the tuple written in ``[start, end)`` (``(a, b)``, ``tuple(a, b)``), or the whole span
    when it is not a tuple (``toYYYYMM(d)``, ``(toYYYYMM(d))``); none for ``tuple()``.

    A PARTITION BY's elements: ``(toYYYYMM(day), region)`` is partitioned by two values, ``(toYYYYMM(day))`` by one.
    """
    inside = tokens[bisect_left(tokens, start, key=_start) : bisect_left(tokens, end, key=_start)]
    if len(inside) < 2 or inside[-1].token_type != TokenType.R_PAREN:
        return [(start, end)]
    named = inside[0].text.lower() == "tuple" and inside[1].token_type == TokenType.L_PAREN
    opening = 1 if named else 0
    if inside[opening].token_type != TokenType.L_PAREN:
        return [(start, end)]
    depth, items, begin = 0, [], opening + 1
    for i, token in enumerate(inside[opening:-1], start=opening):
        if token.token_type in _OPEN:
            depth += 1
        elif token.token_type in _CLOSE:
            depth -= 1
            if depth == 0:
                return [(start, end)]  # the parenthesis closes before the end: not one tuple
        elif token.token_type == TokenType.COMMA and depth == 1:
            items.append((inside[begin].start, inside[i - 1].end + 1))
            begin = i + 1
    if begin < len(inside) - 1:
        items.append((inside[begin].start, inside[-2].end + 1))
    return items if named or len(items) > 1 else [(start, end)]


def on_cluster_span(tokens: list[Token]) -> tuple[int, int] | None:
    """Span ``[start, end)`` of a CREATE's `` ON CLUSTER name`` (from the end of the token before it), or None.

    Only the statement's own clause counts: the scan stops at the ``AS SELECT`` of an MV (a ``JOIN … ON cluster
    = …`` there is not a cluster clause).
    """
    stop = select_start(tokens)
    for i, token, depth in nesting(tokens):
        if stop is not None and token.start >= stop:
            return None
        if (
            depth == 0
            and token.token_type == TokenType.ON
            and i > 0
            and i + 2 < len(tokens)
            and _word(tokens[i + 1]) == "CLUSTER"
        ):
            return tokens[i - 1].end + 1, tokens[i + 2].end + 1
    return None


def security_spans(tokens: list[Token]) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of a CREATE's own ``DEFINER = name`` and ``SQL SECURITY DEFINER|INVOKER|NONE`` (what
    ``SHOW CREATE`` prints for every refreshable MV and every view with a security clause), before its ``AS SELECT``.
    """
    stop = select_start(tokens)
    spans, depth, i, n = [], 0, 0, len(tokens)
    while i < n:
        token = tokens[i]
        if stop is not None and token.start >= stop:
            break
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            depth -= 1
        elif depth == 0 and _word(token) == "DEFINER" and i + 2 < n and tokens[i + 1].token_type == TokenType.EQ:
            spans.append((token.start, tokens[i + 2].end + 1))
            i += 3
            continue
        elif depth == 0 and _word(token) == "SQL SECURITY" and i + 1 < n:  # one token for the tokenizer
            spans.append((token.start, tokens[i + 1].end + 1))
            i += 2
            continue
        elif depth == 0 and _word(token) == "SQL" and i + 2 < n and _word(tokens[i + 1]) == "SECURITY":
            spans.append((token.start, tokens[i + 2].end + 1))
            i += 3
            continue
        i += 1
    return spans


def engine_string_arguments(tokens: list[Token]) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of the leading string-literal arguments of the depth-0 ``ENGINE = name(…)``, quotes
    included (the Keeper path and replica name of ``ReplicatedMergeTree('/p', '{replica}')``)."""
    stop = select_start(tokens)
    for i, token, depth in nesting(tokens):
        if stop is not None and token.start >= stop:
            break
        if depth == 0 and _word(token) == "ENGINE":
            j = i + 1
            if j < len(tokens) and tokens[j].token_type == TokenType.EQ:
                j += 1
            j += 1  # the engine's name
            if j >= len(tokens) or tokens[j].token_type != TokenType.L_PAREN:
                return []
            spans, k = [], j + 1
            while k + 1 < len(tokens) and tokens[k].token_type == TokenType.STRING:
                if tokens[k + 1].token_type not in (TokenType.COMMA, TokenType.R_PAREN):
                    break
                spans.append((tokens[k].start, tokens[k].end + 1))
                if tokens[k + 1].token_type == TokenType.R_PAREN:
                    break
                k += 2
            return spans
    return []


# -- reading a SELECT by its tokens (for ClickHouse's query tree, which has no positions) -------------------------

#: Tokens that end a SELECT's list, FROM list or GROUP BY at the depth where they stand.
_SELECT_CLAUSES = frozenset(
    {
        TokenType.FROM,
        TokenType.WHERE,
        TokenType.PREWHERE,
        TokenType.GROUP_BY,
        TokenType.HAVING,
        TokenType.ORDER_BY,
        TokenType.LIMIT,
        TokenType.OFFSET,
        TokenType.SETTINGS,
        TokenType.FORMAT,
        TokenType.UNION,
        TokenType.INTERSECT,
        TokenType.EXCEPT,
        TokenType.WINDOW,
        TokenType.QUALIFY,
        TokenType.FETCH,
        TokenType.ARRAY,
        TokenType.WITH,
    }
)
#: Words that never name a table right after FROM, JOIN or IN.
_NOT_NAMES = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN, TokenType.STRING, TokenType.NUMBER})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


@dataclass(frozen=True)
class TableMention:
    """A table name where a SELECT names a table: after FROM, JOIN, a comma of a FROM list, or IN.

    Attributes:
        parts: The name's parts, unquoted (``("db", "t")`` or ``("t",)``).
        start: Offset of its first character (quotes included).
        end: Offset after its last character.
        after_in: Named as the right side of IN (``k IN db.t``): an alias is not allowed there.
    """

    parts: tuple[str, ...]
    start: int
    end: int
    after_in: bool = False

    @property
    def name(self) -> str:
        return ".".join(self.parts)


def _is_name(token: Token) -> bool:
    return token.token_type == TokenType.IDENTIFIER or (
        token.token_type not in _NOT_NAMES and _WORD.fullmatch(token.text) is not None
    )


def _name_chain(tokens: list[Token], i: int, *, call: bool = False) -> tuple[tuple[str, ...], int] | None:
    """The dotted name starting at token ``i`` and the index after it, or None (a subquery, a table function…).

    Args:
        call: A parenthesis may follow the name (``CREATE TABLE t (…)``); else the name is a function's.
    """
    if i >= len(tokens) or not _is_name(tokens[i]):
        return None
    parts, j = [tokens[i].text], i + 1
    while j + 1 < len(tokens) and tokens[j].token_type == TokenType.DOT and _is_name(tokens[j + 1]):
        parts.append(tokens[j + 1].text)
        j += 2
    if j < len(tokens) and tokens[j].token_type == TokenType.DOT:
        return None
    if not call and j < len(tokens) and tokens[j].token_type == TokenType.L_PAREN:
        return None  # a table function
    return tuple(parts), j


def table_mentions(tokens: list[Token]) -> list[TableMention]:
    """Every place a SELECT's text names a table, in text order (a CTE's name too: the query tree tells which)."""
    found: list[TableMention] = []
    listing: set[int] = set()  # depths whose FROM list is open (a comma there names another table)
    depth = 0
    for i, token in enumerate(tokens):
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
            continue
        if kind in _CLOSE:
            listing.discard(depth)
            depth -= 1
            continue
        after_in = kind == TokenType.IN
        named = (
            kind == TokenType.FROM
            or after_in
            or (kind == TokenType.JOIN and tokens[i - 1].token_type != TokenType.ARRAY)
        )
        if kind == TokenType.COMMA and depth in listing:
            named = True
        elif kind == TokenType.FROM:
            listing.add(depth)
        elif kind == TokenType.JOIN or kind in _SELECT_CLAUSES:
            listing.discard(depth)
        if not named:
            continue
        chain = _name_chain(tokens, i + 1)
        if chain is not None:
            parts, after = chain
            found.append(TableMention(parts, tokens[i + 1].start, tokens[after - 1].end + 1, after_in))
    return found


@dataclass(frozen=True)
class SelectLayout:
    """Where the parts of a SELECT's first (outermost) query block are, as ``[start, end)`` offsets.

    Attributes:
        items: Each item of its SELECT list, as written (its alias included).
        group_by: Each item of its GROUP BY.
    """

    items: tuple[tuple[int, int], ...]
    group_by: tuple[tuple[int, int], ...] = ()


def select_layout(tokens: list[Token]) -> SelectLayout:
    """The items of the SELECT list and of the GROUP BY of the first query block at the outermost depth."""
    depths, depth = [], 0
    for token in tokens:
        if token.token_type in _CLOSE:
            depth -= 1
        depths.append(depth)
        if token.token_type in _OPEN:
            depth += 1
    selects = [i for i, t in enumerate(tokens) if t.token_type == TokenType.SELECT]
    if not selects:
        return SelectLayout(())
    top = min(depths[i] for i in selects)
    first = next(i for i in selects if depths[i] == top)
    i = first + 1
    while i < len(tokens) and tokens[i].token_type in (TokenType.DISTINCT, TokenType.ALL):
        i += 1
        if tokens[i - 1].token_type == TokenType.DISTINCT and i < len(tokens) and tokens[i].token_type == TokenType.ON:
            i = _after_group(tokens, i + 1)
    items, i = _list_items(tokens, depths, i, top)
    group_by: tuple[tuple[int, int], ...] = ()
    while i < len(tokens) and depths[i] >= top:
        if depths[i] == top and tokens[i].token_type in (TokenType.UNION, TokenType.INTERSECT, TokenType.EXCEPT):
            break
        if depths[i] == top and tokens[i].token_type == TokenType.GROUP_BY:
            group_by, i = _list_items(tokens, depths, i + 1, top)
            break
        i += 1
    return SelectLayout(items, group_by)


def _after_group(tokens: list[Token], i: int) -> int:
    """The index after the parenthesized group starting at token ``i``."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].token_type in _OPEN:
            depth += 1
        elif tokens[j].token_type in _CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(tokens)


def _list_items(tokens: list[Token], depths: list[int], i: int, top: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """Comma-separated items from token ``i`` up to a clause keyword at depth ``top`` (or the end of the block)."""
    items, begin = [], i
    while i < len(tokens) and depths[i] >= top:
        token = tokens[i]
        if depths[i] == top and (token.token_type in _SELECT_CLAUSES or token.token_type == TokenType.COMMA):
            if i > begin:
                items.append((tokens[begin].start, tokens[i - 1].end + 1))
            if token.token_type != TokenType.COMMA:
                return tuple(items), i
            begin = i + 1
        i += 1
    if i > begin:
        items.append((tokens[begin].start, tokens[i - 1].end + 1))
    return tuple(items), i


def trailing_comment(tokens: list[Token]) -> tuple[int, str] | None:
    """A CREATE … AS SELECT's own ``COMMENT 'text'`` after its SELECT: the offset where it starts, and the text."""
    if len(tokens) >= 2 and tokens[-1].token_type == TokenType.STRING and tokens[-2].token_type == TokenType.COMMENT:
        depth = sum(1 if t.token_type in _OPEN else -1 if t.token_type in _CLOSE else 0 for t in tokens[:-2])
        if depth == 0:
            return tokens[-2].start, tokens[-1].text
    return None


# -- what a statement is, by its first words -------------------------------------------------------------------

#: The words after CREATE [OR REPLACE] [TEMPORARY] and the kind of statement they start, longest first.
_CREATE_KINDS = (
    ("MATERIALIZED VIEW", "materialized view"),
    ("LIVE VIEW", "live view"),
    ("WINDOW VIEW", "window view"),
    ("VIEW", "view"),
    ("TABLE", "table"),
    ("DATABASE", "database"),
    ("SCHEMA", "database"),
    ("DICTIONARY", "dictionary"),
    ("FUNCTION", "function"),
    ("ROW POLICY", "row policy"),
    ("POLICY", "row policy"),
    ("MASKING POLICY", "masking policy"),
    ("SETTINGS PROFILE", "settings profile"),
    ("PROFILE", "settings profile"),
    ("NAMED COLLECTION", "named collection"),
    ("USER", "user"),
    ("ROLE", "role"),
    ("QUOTA", "quota"),
    ("WORKLOAD", "workload"),
    ("RESOURCE", "resource"),
)


@dataclass(frozen=True)
class StatementKind:
    """What a statement creates, read from its first words.

    Attributes:
        kind: ``table``, ``materialized view``, ``function``, ``grant``… (None: not a CREATE or GRANT).
        name_at: Index of the token after the kind's words and ``IF NOT EXISTS``: where the name starts.
        or_replace: ``CREATE OR REPLACE``.
    """

    kind: str | None
    name_at: int = 0
    or_replace: bool = False


def statement_kind(tokens: list[Token]) -> StatementKind:
    """The kind of a CREATE (or GRANT) statement by its first words, without parsing it."""
    first = tokens[0].text.upper() if tokens else ""
    if first == "GRANT":
        return StatementKind("grant", 1)
    if first not in ("CREATE", "ATTACH"):
        return StatementKind(None)
    words = [t.text.upper() for t in tokens[:8]]
    i, or_replace = 1, False
    if words[i : i + 2] == ["OR", "REPLACE"] or words[i : i + 1] == ["OR REPLACE"]:
        i, or_replace = i + (2 if words[i] == "OR" else 1), True
    if words[i : i + 1] == ["TEMPORARY"]:
        i += 1
    text = " ".join(words[i:])
    for phrase, kind in _CREATE_KINDS:
        if text == phrase or text.startswith(phrase + " "):
            i += len(phrase.split(" "))
            if " ".join(words[i : i + 3]) == "IF NOT EXISTS":
                i += 3
            return StatementKind(kind, i, or_replace)
    return StatementKind(None)


def names_after(tokens: list[Token], i: int) -> list[tuple[tuple[str, ...], int, int]]:
    """The comma-separated dotted names from token ``i`` (``CREATE ROLE a, b``): parts, start and end offsets."""
    found = []
    while i < len(tokens):
        chain = _name_chain(tokens, i, call=True)
        if chain is None:
            break
        parts, after = chain
        found.append((parts, tokens[i].start, tokens[after - 1].end + 1))
        if after < len(tokens) and tokens[after].token_type == TokenType.COMMA:
            i = after + 1
            continue
        break
    return found

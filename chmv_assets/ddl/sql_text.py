"""Statement splitting and verbatim clause extraction on top of sqlglot's ClickHouse tokenizer."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
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

# Keywords that end a clause of CREATE TABLE / CREATE MATERIALIZED VIEW at parenthesis depth 0.
_CLAUSE_STOPS = {
    "ORDER", "PRIMARY", "SAMPLE", "TTL", "SETTINGS", "COMMENT", "PARTITION", "AS", "POPULATE",
    "TO", "EMPTY", "REFRESH", "ENGINE", "DEFINER", "SQL", "SOURCE", "LAYOUT", "LIFETIME",
}  # fmt: skip
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
            if word in _CLAUSE_STOPS and not ttl_move:
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


def clause(tokens: list[Token], text: str, *keywords: str) -> tuple[int, int] | None:
    """Span ``[start, end)`` of the clause introduced by ``keywords`` at depth 0, up to the next clause.

    Args:
        tokens: Tokens of ``text``.
        text: The statement text.
        keywords: The words that open the clause, one of :data:`TABLE_CLAUSES` (e.g. ``("PARTITION", "BY")``).
    """
    return clauses(tokens).get(" ".join(k.upper() for k in keywords))


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


def _last_before(tokens: list[Token], stop: Token) -> Token:
    previous = tokens[0]
    for t in tokens:
        if t is stop:
            return previous
        previous = t
    return previous


def select_start(tokens: list[Token]) -> int | None:
    """Offset of the SELECT (or WITH, or parenthesis) after the depth-0 ``AS`` of a CREATE … AS SELECT."""
    depth = 0
    for i, token in enumerate(tokens):
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.ALIAS and i + 1 < len(tokens):
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


def on_cluster_span(tokens: list[Token]) -> tuple[int, int] | None:
    """Span ``[start, end)`` of a CREATE's `` ON CLUSTER name`` (from the end of the token before it), or None.

    Only the statement's own clause counts: the scan stops at the ``AS SELECT`` of an MV (a ``JOIN … ON cluster
    = …`` there is not a cluster clause).
    """
    stop = select_start(tokens)
    depth = 0
    for i, token in enumerate(tokens):
        if stop is not None and token.start >= stop:
            return None
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            depth -= 1
        elif (depth == 0 and kind == TokenType.ON and i > 0 and i + 2 < len(tokens)
              and _word(tokens[i + 1]) == "CLUSTER"):  # fmt: skip
            return tokens[i - 1].end + 1, tokens[i + 2].end + 1
    return None


def engine_string_arguments(tokens: list[Token]) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of the leading string-literal arguments of the depth-0 ``ENGINE = name(…)``, quotes
    included (the Keeper path and replica name of ``ReplicatedMergeTree('/p', '{replica}')``)."""
    stop = select_start(tokens)
    depth = 0
    for i, token in enumerate(tokens):
        if stop is not None and token.start >= stop:
            break
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            depth -= 1
        elif depth == 0 and _word(token) == "ENGINE":
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

"""Statement splitting and verbatim clause extraction on top of sqlglot's ClickHouse tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.tokens import Token, TokenType

_DIALECT = ClickHouse()

# Keywords that end a clause of CREATE TABLE / CREATE MATERIALIZED VIEW at parenthesis depth 0.
_CLAUSE_STOPS = {
    "ORDER", "PRIMARY", "SAMPLE", "TTL", "SETTINGS", "COMMENT", "PARTITION", "AS", "POPULATE",
    "TO", "EMPTY", "REFRESH", "ENGINE", "DEFINER", "SQL", "SOURCE", "LAYOUT", "LIFETIME",
}  # fmt: skip


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
    return _DIALECT.tokenize(sql)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def split_statements(sql: str) -> Iterator[Statement]:
    """Split a file into statements at top-level semicolons; a last statement may lack one."""
    current: list[Token] = []
    pending_comments: list[str] = []
    for token in [*tokenize(sql), None]:
        if token is None or token.token_type == TokenType.SEMICOLON:
            if current:
                start, end = current[0].start, current[-1].end + 1
                line, column = line_col(sql, start)
                comments = (*pending_comments, *current[0].comments)
                yield Statement(sql[start:end], start, line, column, tuple(c.strip() for c in comments))
            pending_comments = list(token.comments) if token is not None else []
            current = []
        else:
            current.append(token)


def clause(tokens: list[Token], text: str, *keywords: str) -> tuple[int, int] | None:
    """Span ``[start, end)`` of the clause introduced by ``keywords`` at depth 0, up to the next clause.

    Args:
        tokens: Tokens of ``text``.
        text: The statement text.
        keywords: The words that open the clause, e.g. ``("PARTITION", "BY")``.
    """
    depth, phrase, head = 0, " ".join(keywords), keywords[0].upper()
    for i, token in enumerate(tokens):
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and token.text[: len(head)].upper() == head and (n := _phrase_length(tokens, i, phrase)):
            body = tokens[i + n :]
            if not body:
                return None
            end, inner = body[-1].end + 1, 0
            for t in body:
                if t.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
                    inner += 1
                elif t.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
                    inner -= 1
                elif inner == 0 and t is not body[0] and _word(t).split(" ")[0] in _CLAUSE_STOPS:
                    end = _last_before(body, t).end + 1
                    break
            return body[0].start, end
    return None


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

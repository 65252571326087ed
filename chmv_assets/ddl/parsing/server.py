"""Questions to ClickHouse's own parser about one statement (:mod:`chmv_assets.ddl.server_grammar`), where sqlglot
cannot read it: the answers, or the server's refusal recorded as a problem at its place in the file."""

from __future__ import annotations

from sqlglot.errors import ParseError

from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.trees import describe
from chmv_assets.ddl.server_grammar import Refusal, server_grammar
from chmv_assets.errors import ParserUnavailable


def ask(located: Located, ctx: Context, question: str, sql: str, error: ParseError | None) -> str | None:
    """ClickHouse's answer (``ast`` or ``tree``) about ``sql`` (the statement itself, or a part of it at its start);
    None, with the problem recorded, when the server refuses it or cannot be asked."""
    answers = ask_all(located, ctx, [(question, sql, 0)], error)
    return answers[0] if answers is not None else None


def ask_all(
    located: Located, ctx: Context, questions: list[tuple[str, str, int]], error: ParseError | None
) -> list[str] | None:
    """ClickHouse's answers to ``(question, sql, offset in the statement)`` in one round trip; None, with the first
    refusal recorded as a problem, when the server refuses one or cannot be asked."""
    stmt = located.statement
    try:
        answers = server_grammar().ask(*((question, sql) for question, sql, _offset in questions))
    except ParserUnavailable as err:
        why = f"sqlglot: {describe(error)}; " if error is not None else ""
        ctx.at(
            located.location(),
            f"cannot read this statement ({why}ClickHouse's parser could not be asked: {err})",
            "check that chdb is installed in chmv's environment (it is a dependency of chmv)",
        )
        return None
    for (_question, _sql, offset), answer in zip(questions, answers, strict=True):
        if not isinstance(answer, Refusal):
            continue
        line, column = (
            located.position(offset + answer.offset) if answer.offset is not None else (stmt.line, stmt.column)
        )
        message = _shorter(answer.message)
        if message.startswith("Syntax error"):
            message = "syntax error" + message.removeprefix("Syntax error")
        ctx.problem(
            located.file,
            line,
            column,
            f"the server refused it: {message}",
            "fix the statement (the message is ClickHouse's own parser's: the server would refuse it too)",
        )
        return None
    return [a for a in answers if isinstance(a, str)]


def _shorter(message: str) -> str:
    """The server's message with its list of expected tokens cut after a few."""
    head, sep, expected = message.partition("Expected one of: ")
    if not sep:
        return message
    names = expected.split(", ")
    return head + sep + (", ".join(names[:6]) + ", …" if len(names) > 6 else expected)

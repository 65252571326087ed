"""What chmv refuses to run: POPULATE, ``CREATE OR REPLACE MATERIALIZED VIEW``, and drops nobody asked for.

Checked on the parsed model before anything runs (a refusal is a :class:`~chmv_assets.errors.DDLProblem`
at the statement, with the reason and the alternative), and once more on every statement chmv is about
to send (:func:`check_statement`), so no code path can emit them by accident.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from chmv_assets.ddl.models import MaterializedView
from chmv_assets.ddl.sql_text import select_start, tokenize
from chmv_assets.errors import ChmvError, DDLProblem

POPULATE_REASON = (
    "POPULATE is refused: it fills the target from a snapshot of the source while new inserts already fire "
    "the MV, so rows inserted during it are lost or counted twice (and ClickHouse allows no POPULATE with TO)"
)
POPULATE_FIX = (
    "remove POPULATE (and give the MV a TO table): chmv fills the target's history itself, partition by "
    "partition, with the MV's own SELECT and no gap: `chmv apply` re-derives it, `chmv rebuild` on demand"
)
REPLACE_REASON = (
    "CREATE OR REPLACE MATERIALIZED VIEW is refused: it drops the MV and creates it again, and the inserts "
    "that arrive in between never reach the target (ClickHouse #108726)"
)
REPLACE_FIX = (
    "write CREATE MATERIALIZED VIEW: chmv applies a changed SELECT with ALTER TABLE … MODIFY QUERY, and a "
    "changed target as a new version built beside the old one and swapped in (`chmv plan` shows how)"
)


def refused_views(views: Iterable[MaterializedView]) -> list[DDLProblem]:
    """A problem for every MV among ``views`` whose statement chmv must not run (POPULATE, OR REPLACE)."""
    problems = []
    for view in views:
        loc = view.location
        if view.populate:
            problems.append(
                DDLProblem(loc.file, loc.line, loc.column, f"{view.ref.fqn}: {POPULATE_REASON}", POPULATE_FIX)
            )
        if view.or_replace:
            problems.append(
                DDLProblem(loc.file, loc.line, loc.column, f"{view.ref.fqn}: {REPLACE_REASON}", REPLACE_FIX)
            )
    return problems


def check_statement(sql: str) -> str:
    """Return ``sql`` unchanged, or raise if it is a statement chmv never sends.

    Raises:
        ChmvError: ``CREATE OR REPLACE … VIEW`` or ``REPLACE … VIEW``, or a ``POPULATE`` CREATE.
    """
    try:
        tokens = tokenize(sql)
    except TokenError:
        return sql  # the server will say what is wrong with it
    words = [t.text.upper() for t in tokens[:8] if t.token_type != TokenType.STRING]
    head = " ".join(words)
    creates_view = ("VIEW" in words) and (head.startswith("CREATE") or head.startswith("REPLACE"))
    if creates_view and (head.startswith("CREATE OR REPLACE") or head.startswith("REPLACE")):
        raise ChmvError(f"{REPLACE_REASON}; refusing to run: {' '.join(sql.split())[:200]}")
    start = select_start(tokens)
    if creates_view and start is not None and any(t.text.upper() == "POPULATE" and t.start < start for t in tokens):
        raise ChmvError(f"{POPULATE_REASON}; refusing to run: {' '.join(sql.split())[:200]}")
    return sql

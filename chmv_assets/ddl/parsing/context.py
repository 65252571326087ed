"""What one read of DDL carries: the problems found so far, and where a statement stands in its file."""

from __future__ import annotations

from dataclasses import dataclass, field

from chmv_assets.ddl.models import SourceLocation
from chmv_assets.ddl.sql_text import Statement, line_col
from chmv_assets.errors import DDLProblem


@dataclass
class Context:
    """Mutable state of one load: the database of unqualified names and the problems found so far."""

    default_database: str
    problems: list[DDLProblem] = field(default_factory=list)

    def problem(self, file: str, line: int, column: int, message: str, hint: str = "") -> None:
        self.problems.append(DDLProblem(file, line, column, message, hint))

    def at(self, location: SourceLocation, message: str, hint: str = "") -> None:
        """A problem at ``location`` (an object's, or a statement's: :meth:`Located.location`)."""
        self.problem(location.file, location.line, location.column, message, hint)


@dataclass(frozen=True)
class Located:
    """A statement with its file, for turning statement offsets into file positions."""

    file: str
    file_text: str
    statement: Statement

    def position(self, offset: int) -> tuple[int, int]:
        return line_col(self.file_text, self.statement.offset + offset)

    def location(self) -> SourceLocation:
        return SourceLocation(file=self.file, line=self.statement.line, column=self.statement.column)

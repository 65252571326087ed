"""Who writes each source table: chmv alone, a stream consumer chmv can pause, or writers chmv does not control.

A rebuild swaps a partition in with ``REPLACE PARTITION``: whatever the live MVs wrote into that partition since the
rebuild's read began is replaced. chmv's own writers hold the source's write gate, so none of their rows can arrive
meanwhile; a stream consumer (an MV reading a Kafka, RabbitMQ, NATS, S3Queue… table) can be paused, its messages
waiting in the broker; applications, other hosts and tools ("others") can neither be held nor seen in advance. The
rebuild planner reads this one answer to decide how each partition is rebuilt (docs/writers.md).

Writes reach a table that an MV writes (a chain's target, a stream consumer's target) through that MV: its writers are
those of the MV's trigger, up the chain, plus ``others`` where ``chmv.toml`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chmv_assets.ddl.config import WritersConfig
from chmv_assets.ddl.models import ObjectRef, Project


class Writer(StrEnum):
    """A kind of writer into a source table."""

    CHMV = "chmv"
    """chmv's ingestion, under the source's write gate (and chmv's own swaps)."""
    STREAM = "stream"
    """A consumer MV reading a stream-engine table: pausable, its messages wait in the broker."""
    OTHERS = "others"
    """Applications, other hosts, tools: chmv can neither hold them nor see them before they write."""


@dataclass(frozen=True)
class SourceWriters:
    """Who writes one source table.

    Attributes:
        source: The table.
        writers: The kinds of writer whose inserts reach it.
        consumers: The stream consumer MVs whose inserts reach it (paused around a swap of an open partition).
        roots: The tables whose inserts reach it (itself, or the roots of a chain), for what a rebuild watches.
    """

    source: ObjectRef
    writers: frozenset[Writer]
    consumers: tuple[ObjectRef, ...] = ()
    roots: tuple[ObjectRef, ...] = ()

    @property
    def uncontrolled(self) -> bool:
        """Writers chmv cannot hold or pause insert into it."""
        return Writer.OTHERS in self.writers

    @property
    def pausable(self) -> bool:
        """Every writer chmv does not hold is a stream consumer it can pause."""
        return Writer.STREAM in self.writers and not self.uncontrolled

    def describe(self) -> str:
        """``analytics.events: others (applications, other hosts) and chmv``."""
        words = {Writer.CHMV: "chmv (under its gate)", Writer.STREAM: "stream consumers", Writer.OTHERS: "others"}
        kinds = [words[w] for w in Writer if w in self.writers]
        text = f"{self.source.fqn}: {' and '.join(kinds) or 'nobody'}"
        if self.consumers:
            text += f" (consumers: {', '.join(c.fqn for c in self.consumers)})"
        return text


def source_writers(project: Project, config: WritersConfig, source: ObjectRef) -> SourceWriters:
    """Who writes ``source``: from the DDL (the MVs writing it, stream consumers) and ``[writers]`` of chmv.toml."""
    writers: set[Writer] = set()
    consumers: list[ObjectRef] = []
    roots: list[ObjectRef] = []
    seen: set[ObjectRef] = set()
    chmv_only, others = _named(project, config.chmv), _named(project, config.others)

    def visit(table: ObjectRef) -> None:
        if table in seen:
            return
        seen.add(table)
        views = project.views_into(table)
        if table.fqn in others:
            writers.add(Writer.OTHERS)
        if not views:  # a root: written directly
            roots.append(table)
            if table.fqn in chmv_only:
                writers.add(Writer.CHMV)
            elif table.fqn not in others:
                writers.add(Writer(config.default))
            return
        for view in views:
            if view.trigger is None:  # a refreshable MV: the server writes it on its schedule
                writers.add(Writer.OTHERS)
            elif project.is_stream(view.trigger) and project.twin:
                # The twin's stand-in is a Null table: what is inserted into it flows through at once, and a paused
                # consumer would lose it. Inserting into it is what an application does.
                writers.add(Writer.OTHERS)
            elif project.is_stream(view.trigger):
                writers.add(Writer.STREAM)
                consumers.append(view.ref)
            else:
                visit(view.trigger)

    visit(source)
    return SourceWriters(source, frozenset(writers), tuple(dict.fromkeys(consumers)), tuple(dict.fromkeys(roots)))


def _named(project: Project, names: tuple[str, ...]) -> set[str]:
    """``db.table`` of each name (an unqualified one in the default database)."""
    return {name if "." in name else f"{project.default_database}.{name}" for name in names}


def undefined_writer_names(project: Project, config: WritersConfig) -> list[tuple[str, str]]:
    """``(key, name)`` of every ``[writers]`` name that is not a table of the project (a typo would go unnoticed)."""
    known = {ref.fqn for ref in project.tables} | {ref.fqn for ref in project.external}
    return [
        (key, name)
        for key in ("chmv", "others")
        for name in getattr(config, key)
        if next(iter(_named(project, (name,)))) not in known
    ]

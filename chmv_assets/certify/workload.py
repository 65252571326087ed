"""Rows for every source, derived from its column types, and the writer threads that insert them.

Every row is traceable: its ``seq`` (unique in the run) goes into an id column where the schema has one (a String
column, else an integer column named like an id), and every time column of a row holds one instant, unique per row
within its time slot (``(seq * 7919) % span`` past the slot's start), so a ``ReplacingMergeTree`` version never ties.
Values are SQL expressions of ``seq`` and the seed (``cityHash64``): the same seed gives the same rows. Numbers are
small integers (floats in quarters: sums are exact in any order); strings are taken from the literals the MVs'
SELECTs compare with, so filters and ``multiIf`` branches see rows of every kind.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from chmv_assets.certify.history import FAILED, OK, UNCERTAIN, History, first_line
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import Column, ObjectRef
from chmv_assets.ddl.types import parse_type
from chmv_assets.sql.quoting import qualified, quote, string_literal

#: A prime coprime with every span used: seq → a distinct second of the slot while seq < span.
STRIDE = 7919
_LITERAL = re.compile(r"'((?:[^'\\]|\\.)*)'")
_ENUM_VALUE = re.compile(r"'((?:[^'\\]|\\.)*)'\s*=")
_ID_WORDS = ("id", "uuid", "key")
#: Days at the start of the closed history no writer inserts into after the seed rows.
FROZEN_DAYS = 3


@dataclass(frozen=True)
class TimeSlot:
    """Where a batch's instants fall: ``[start, start + span)`` seconds since the epoch (UTC)."""

    name: str
    start: int
    span: int


@dataclass(frozen=True)
class SourceSpec:
    """How rows of one source are generated and checked.

    Attributes:
        ref: The source table.
        columns: ``(column, SQL expression of seq, h and t)`` for every column given a value.
        id_column: The column holding ``seq`` (None: rows of this source are not traceable; property (b) skips it).
        id_is_string: The id is ``'r<seq>'`` (else the number itself).
        gated: Only chmv writes it (``[writers]``): certify's writers take its write gate, as chmv's ingestion does.
        checkable: It stores rows (a MergeTree): property (b) reads it.
    """

    ref: ObjectRef
    columns: tuple[tuple[str, str], ...]
    id_column: str | None
    id_is_string: bool
    gated: bool
    checkable: bool

    def select_sql(self, first_seq: int, rows: int, slot: TimeSlot, seed: int) -> str:
        """``SELECT <values> FROM numbers(rows)``: the rows ``first_seq … first_seq + rows - 1`` of ``slot``."""
        exprs = ", ".join(f"{expr} AS {quote(name)}" for name, expr in self.columns)
        return (
            f"SELECT {exprs} FROM (SELECT toUInt64({first_seq}) + number AS seq, "
            f"cityHash64({seed}, seq) AS h, toUInt32({slot.start} + (seq * {STRIDE}) % {slot.span}) AS t "
            f"FROM numbers({rows}))"
        )

    def insert_sql(self, first_seq: int, rows: int, slot: TimeSlot, seed: int, into: ObjectRef | None = None) -> str:
        names = ", ".join(quote(n) for n, _ in self.columns)
        return f"INSERT INTO {qualified(into or self.ref)} ({names}) {self.select_sql(first_seq, rows, slot, seed)}"


def string_literals(loaded: LoadedProject) -> list[str]:
    """The short string literals of the MVs' SELECTs (what their filters and branches compare with)."""
    found: dict[str, None] = {}
    for view in loaded.project.views.values():
        for match in _LITERAL.finditer(view.select_sql):
            text = match.group(1)
            if 0 < len(text) <= 24 and "\\" not in text and not any(ch in text for ch in "^$()[]*+?{}|%"):
                found[text] = None
    return [*found, "a", "b"][:40]


def value_expr(column: Column, index: int, literals: list[str]) -> str | None:
    """A SQL expression of ``h`` (the row's hash) and ``t`` (its instant) for ``column``; None: leave it to its
    default."""
    t = parse_type(column.type)
    h = f"cityHash64(h, {index})"
    base = t.base
    inner: str | None
    if t.aggregate is not None:
        return None
    if t.is_datetime or t.is_date:
        inner = "toDateTime(t)"
    elif t.is_integer:
        inner = f"{h} % 97"
    elif t.is_float:
        inner = f"({h} % 4000) / 4"
    elif t.is_decimal:
        inner = f"({h} % 10000) / 100"
    elif base == "FixedString":
        size = re.search(r"FixedString\((\d+)\)", column.type)
        n = int(size.group(1)) if size else 1
        fitting = [s for s in literals if len(s) <= n] or ["x" * n]
        inner = f"[{', '.join(string_literal(s) for s in fitting)}][{h} % {len(fitting)} + 1]"
    elif t.is_string:
        inner = f"[{', '.join(string_literal(s) for s in literals)}][{h} % {len(literals)} + 1]"
    elif base in ("Bool", "Boolean"):
        inner = f"{h} % 2 = 1"
    elif base.startswith("Enum"):
        values = _ENUM_VALUE.findall(column.type)
        if not values:
            return None
        inner = f"[{', '.join(string_literal(v) for v in values)}][{h} % {len(values)} + 1]"
    elif base == "UUID":
        inner = f"toUUID(concat('00000000-0000-4000-8000-', leftPad(hex({h} % 281474976710655), 12, '0')))"
    else:
        return None
    if base == "Array" or column.type.startswith("Array("):
        return None
    return f"CAST({inner} AS {column.type})"


def _id_column(columns: list[Column]) -> tuple[Column | None, bool]:
    """The column a row's seq goes into: a String column named like an id (``request_id``), a payload-like one, any
    String; else an integer column named like an id."""
    strings = [c for c in columns if parse_type(c.type).base == "String" and not parse_type(c.type).low_cardinality]

    def rank(c: Column) -> int:
        name = c.name.lower()
        if any(name == w or name.endswith("_" + w) for w in _ID_WORDS):
            return 0
        return 1 if name in ("payload", "message", "body", "data", "raw", "text") else 2

    if strings:
        best = min(strings, key=rank)
        if rank(best) < 2:
            return best, True
    for c in columns:
        t = parse_type(c.type)
        name = c.name.lower()
        if t.is_integer and t.base in ("UInt64", "Int64", "UInt32") and any(name.endswith(w) for w in _ID_WORDS):
            return c, False
    return (strings[0], True) if strings else (None, False)


def source_specs(loaded: LoadedProject) -> list[SourceSpec]:
    """Every table the MVs are triggered by that no MV writes (the roots of the graph), with its generator."""
    project = loaded.project
    targets = set(project.targets)
    roots = [ref for ref in project.tables if project.views_from(ref) and ref not in targets]
    literals = string_literals(loaded)
    specs = []
    for ref in sorted(roots, key=lambda r: r.fqn):
        table = project.tables[ref]
        columns = [c for c in table.columns if c.default_kind not in ("MATERIALIZED", "ALIAS", "EPHEMERAL")]
        id_col, is_string = _id_column(columns)
        exprs = []
        for index, column in enumerate(columns):
            if id_col is not None and column.name == id_col.name:
                exprs.append(
                    (column.name, "concat('r', toString(seq))" if is_string else f"CAST(seq AS {column.type})")
                )
                continue
            expr = value_expr(column, index, literals)
            if expr is not None:
                exprs.append((column.name, expr))
        engine = table.engine.name if table.engine is not None else ""
        stream = project.is_stream(ref)
        specs.append(
            SourceSpec(
                ref=ref,
                columns=tuple(exprs),
                id_column=id_col.name if id_col is not None else None,
                id_is_string=is_string,
                gated=not loaded.writers(ref).uncontrolled,
                checkable=not stream and "MergeTree" in engine,
            )
        )
    return specs


def time_slots(loaded: LoadedProject, now: datetime, *, dst: bool) -> dict[str, TimeSlot]:
    """The slots rows fall in: closed history (from ``partition_start``, 20 days back or into the previous month, to
    two days ago) whose first :data:`FROZEN_DAYS` days ("frozen") only the seed rows reach (no writer: the reader of
    property (f) samples a partition there), the last hour ("now"), and, with the DST fault, the two 01:00 hours of
    2026-11-01 and the skipped hour of 2026-03-08 in America/New_York."""
    end = int(now.timestamp()) - 2 * 86400
    # back 20 days, or into the month before the last one if that is further: a monthly target then has a closed
    # partition to rebuild (a partition still open to writers chmv does not control is deferred, never rebuilt)
    last = datetime.fromtimestamp(end, UTC)
    month_before = int(last.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()) - 12 * 86400
    start = max(
        int(datetime.fromisoformat(loaded.config.partition_start).replace(tzinfo=UTC).timestamp()),
        min(end - 20 * 86400, month_before),
    )
    start = min(start, end - 7 * 86400)
    slots = {
        "frozen": TimeSlot("frozen", start, FROZEN_DAYS * 86400),
        "closed": TimeSlot("closed", start + FROZEN_DAYS * 86400, end - start - FROZEN_DAYS * 86400),
        "now": TimeSlot("now", int(now.timestamp()) - 3600, 3600),
    }
    if dst:
        fall = int(datetime(2026, 11, 1, 4, 30, tzinfo=UTC).timestamp())  # 00:30 EDT … 02:30 EST
        spring = int(datetime(2026, 3, 8, 6, 0, tzinfo=UTC).timestamp())  # 01:00 EST … 04:00 EDT
        slots["dst_fall"] = TimeSlot("dst_fall", fall, 4 * 3600)
        slots["dst_spring"] = TimeSlot("dst_spring", spring, 3 * 3600)
    return slots


#: A large block of generated rows (the seed's, a batch) spans the whole of its slot: weeks of an hourly target's
#: partitions, more than the server's default limit of 100 partitions a block. Small blocks keep the server's
#: settings (a fixture's slow MV, such as grid_hours' ``daily_alarms_mv``, is slow unless this limit is lifted).
SPREAD = {"max_partitions_per_insert_block": 0}


class Sequence:
    """The run's row numbers, handed out in ranges (thread-safe)."""

    def __init__(self, start: int = 1) -> None:
        self._next = start
        self._lock = threading.Lock()

    def take(self, n: int) -> int:
        with self._lock:
            first, self._next = self._next, self._next + n
            return first


@dataclass
class InsertRecord:
    """What an insert op wrote: ``rows`` rows from ``first_seq`` into ``source`` (or through ``via``)."""

    source: ObjectRef
    first_seq: int
    rows: int
    slot: str


#: Writer modes: how a batch reaches the source.
DIRECT, BATCH, ASYNC_WAIT, ASYNC_NOWAIT, BUFFER, FOREIGN = (
    "direct",
    "batch",
    "async",
    "async_nowait",
    "buffer",
    "foreign",
)


@dataclass
class WriterPool:
    """Writer threads, each with clients of its own (chmv's resource: its time limits apply), inserting until
    stopped; paused as a whole (every writer between two batches) while certify deletes rows or hands the engine
    to a child process."""

    resource: object
    history: History
    seed: int
    seq: Sequence
    records: dict[str, InsertRecord] = field(default_factory=dict)
    rows_written: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._threads: list[threading.Thread] = []
        self._busy: list[threading.Lock] = []
        self._count_lock = threading.Lock()

    def start(
        self, name: str, choose: Callable[[random.Random], tuple[SourceSpec, TimeSlot, int, str, ObjectRef | None]]
    ) -> None:
        """Start a writer: ``choose(rng)`` gives each batch (source, slot, rows, mode, where to insert instead)."""
        busy = threading.Lock()
        rng = random.Random(f"{self.seed}:{name}")
        thread = threading.Thread(target=self._run, args=(name, rng, choose, busy), daemon=True, name=name)
        self._busy.append(busy)
        self._threads.append(thread)
        thread.start()

    def _run(self, name: str, rng: random.Random, choose, busy: threading.Lock) -> None:
        while not self._stop.is_set():
            if self._paused.is_set():
                time.sleep(0.01)
                continue
            with busy:
                if self._paused.is_set() or self._stop.is_set():
                    continue
                spec, slot, rows, mode, via = choose(rng)
                try:
                    self.insert(name, spec, slot, rows, mode, via)
                except Exception as err:  # noqa: BLE001 - recorded; the writer goes on
                    self.errors.append(first_line(err))
            time.sleep(rng.uniform(0.0, 0.03))

    def insert(
        self, actor: str, spec: SourceSpec, slot: TimeSlot, rows: int, mode: str, via: ObjectRef | None = None
    ) -> None:
        """One batch: recorded ok when its insert was acknowledged as committed, uncertain when the acknowledgement
        does not say so (an async insert not waited for, a Buffer), failed when it raised."""
        from chmv_assets.engine.ingest.cutoff import source_gate

        first = self.seq.take(rows)
        where = via or spec.ref
        op = self.history.begin(
            "insert",
            actor,
            [where.fqn] + ([spec.ref.fqn] if via else []),
            mode=mode,
            slot=slot.name,
            source=spec.ref.fqn,
            first_seq=first,
            rows=rows,
        )
        # a foreign writer's rows are in its own table, not the source: (b) does not count them there
        self.records[op.id] = InsertRecord(where if mode == FOREIGN else spec.ref, first, rows, slot.name)
        gate = source_gate([spec.ref]) if spec.gated and mode != FOREIGN else _nothing()
        spread = SPREAD if rows > 100 else {}  # a block of 100 rows spans 100 partitions at most
        try:
            with gate, self.resource.get_client() as client:  # type: ignore[attr-defined]
                if mode in (DIRECT, BATCH, FOREIGN):
                    client.command(
                        spec.insert_sql(first, rows, slot, self.seed, into=where),
                        settings={"async_insert": 0, **spread},
                    )
                else:
                    result = client.query(spec.select_sql(first, rows, slot, self.seed))
                    settings = {"async_insert": 1, "wait_for_async_insert": 0 if mode == ASYNC_NOWAIT else 1, **spread}
                    if mode == BUFFER:
                        settings = {"async_insert": 0, **spread}
                    client.insert(
                        where.name,
                        result.result_rows,
                        column_names=list(result.column_names),
                        database=where.database,
                        settings=settings,
                    )
        except Exception as err:
            self.history.end(op, FAILED, error=first_line(err))
            raise
        self.history.end(op, UNCERTAIN if mode in (ASYNC_NOWAIT, BUFFER) else OK)
        with self._count_lock:
            self.rows_written += rows

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Every writer stopped between two batches (its clients closed) for the block."""
        self._paused.set()
        for busy in self._busy:
            busy.acquire()
        try:
            yield
        finally:
            for busy in self._busy:
                busy.release()
            self._paused.clear()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


@contextmanager
def _nothing() -> Iterator[None]:
    yield

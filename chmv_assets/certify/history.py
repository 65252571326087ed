"""The history of a certify run: every operation with its outcome, times, seed-derived id and what it touched.

An operation is ``ok`` (it reported success), ``failed`` (it reported failure: nothing it claims was done) or
``uncertain`` (no answer within its limit, or an acknowledgement that does not mean committed: an async insert not
waited for, a row in a Buffer). The history is kept in memory and written as JSON lines.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK, FAILED, UNCERTAIN = "ok", "failed", "uncertain"


@dataclass
class Op:
    """One operation of the history.

    Attributes:
        id: ``<kind>-<n>``, numbered in start order (the seed makes the sequence replayable).
        kind: ``insert``, ``materialize``, ``rebuild_killed``, ``delete``, ``drop_partition``, ``foreign_insert``, …
        actor: Who ran it (a writer's name, ``chmv``, ``fault``).
        touches: The tables (and partitions: ``db.table|partition``) it touched.
        status: ok / failed / uncertain (None while running).
        detail: What it did or said (an error's first line, a row range, a run's outcome).
    """

    id: str
    kind: str
    actor: str
    touches: list[str]
    start: float
    end: float | None = None
    status: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class History:
    """A thread-safe list of operations, numbered in start order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: list[Op] = []
        self._counts: dict[str, int] = {}
        self.t0 = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def begin(self, kind: str, actor: str, touches: list[str], **detail: Any) -> Op:
        with self._lock:
            n = self._counts[kind] = self._counts.get(kind, 0) + 1
            op = Op(id=f"{kind}-{n}", kind=kind, actor=actor, touches=list(touches), start=self.now(), detail=detail)
            self.ops.append(op)
            return op

    def end(self, op: Op, status: str, **detail: Any) -> Op:
        op.end, op.status = self.now(), status
        op.detail.update(detail)
        return op

    @contextmanager
    def op(self, kind: str, actor: str, touches: list[str], **detail: Any) -> Iterator[Op]:
        """Record an operation around a block: ok when it returns, failed when it raises (re-raised)."""
        record = self.begin(kind, actor, touches, **detail)
        try:
            yield record
        except BaseException as err:
            if record.status is None:
                self.end(record, FAILED, error=first_line(err))
            raise
        if record.status is None:
            self.end(record, OK)

    def touching(self, name: str) -> list[Op]:
        """The operations that touched ``name`` (a table, or ``table|partition``), in start order."""
        table = name.split("|")[0]
        return [o for o in self.ops if any(t in (name, table) or t.split("|")[0] == table for t in o.touches)]

    def write(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as fh:
            for op in self.ops:
                fh.write(json.dumps(asdict(op), default=str) + "\n")


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return f"{type(err).__name__}: {line[:400]}"

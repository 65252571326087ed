"""The properties a certify run proves, each a pure function of what was read and recorded (unit-tested on planted
anomalies: a checker that cannot fail proves nothing).

(a) every target partition equals its MVs' own SELECT over every row its sources were given (expected.py);
(b) every acknowledged row is in its source (or its graveyard) exactly once, an uncertain or failed one at most once;
(c) no partition lost content its source no longer holds: the graveyard is part of (a)'s expected rows, so a
    partition rebuilt from a source that lost rows shows as a partition of (a) with fewer rows; it is named (c) when a
    source-deleting fault touched it;
(d) a run that reported success left its partitions exact (checked right after it, writers into closed windows
    paused), and a failure that says "untouched"/"as it was" left the partition as it was;
(e) at most one rebuild of a partition committed at a time (intervals of the history's successful runs);
(f) a reader of a closed partition during its rebuilds sees the old or the new fingerprint, never a mix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from chmv_assets.certify.expected import Fingerprint, same
from chmv_assets.certify.history import FAILED, OK, History, Op


@dataclass
class Anomaly:
    """One violation: the property, where, what was seen, and the operations that touched it (in order)."""

    prop: str
    target: str
    partition: str
    message: str
    suspect: str = ""
    ops: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("prop", "target", "partition", "message", "suspect", "ops")}


def compare_partitions(
    actual: Mapping[str, Fingerprint], expected: Mapping[str, Fingerprint]
) -> list[tuple[str, Fingerprint | None, Fingerprint | None]]:
    """The partitions whose fingerprints differ: ``(partition id, actual, expected)``."""
    return [
        (p, actual.get(p), expected.get(p))
        for p in sorted(set(actual) | set(expected))
        if not same(actual.get(p), expected.get(p))
    ]


def describe_difference(a: Fingerprint | None, e: Fingerprint | None) -> str:
    rows_a, rows_e = (a or (0,))[0], (e or (0,))[0]
    if rows_a > rows_e:
        return f"{rows_a} rows where its SELECT gives {rows_e}: {rows_a - rows_e} extra (doubled or foreign)"
    if rows_a < rows_e:
        return f"{rows_a} rows where its SELECT gives {rows_e}: {rows_e - rows_a} lost"
    return f"{rows_a} rows as expected but different content (fingerprint {a} vs {e})"


def row_anomalies(
    counts: Mapping[int, int], inserts: Iterable[tuple[str, int, int, str]], source: str
) -> list[Anomaly]:
    """(b): ``counts`` (seq → copies in the source and its graveyard) against the inserts ``(op id, first seq, rows,
    status)``: an acknowledged row exactly once, an uncertain or failed one at most once, no row nobody inserted."""
    out: list[Anomaly] = []
    known: set[int] = set()
    for op_id, first, rows, status in inserts:
        lost, doubled = [], []
        for seq in range(first, first + rows):
            known.add(seq)
            n = counts.get(seq, 0)
            if status == OK and n == 0:
                lost.append(seq)
            elif n > 1:
                doubled.append(seq)
        if lost:
            out.append(
                Anomaly(
                    "b",
                    source,
                    "",
                    f"{len(lost)} acknowledged row(s) of {op_id} missing (seq {lost[:5]}…)",
                    "lost acknowledged insert",
                    [op_id],
                )
            )
        if doubled:
            out.append(
                Anomaly(
                    "b",
                    source,
                    "",
                    f"{len(doubled)} row(s) of {op_id} ({status}) present more than once (seq {doubled[:5]}…)",
                    "doubled insert",
                    [op_id],
                )
            )
    strangers = sorted(s for s in counts if s not in known)
    if strangers:
        out.append(Anomaly("b", source, "", f"{len(strangers)} row(s) nobody inserted (seq {strangers[:5]}…)"))
    return out


def overlapping_commits(history: History, kinds: Sequence[str] = ("materialize", "rebuild")) -> list[Anomaly]:
    """(e): two successful rebuilds of one partition whose commit intervals overlap. A run records the interval in
    which it held the partition (``detail['held']``: [start, end] of its swap, or of the whole run when unknown)."""
    out: list[Anomaly] = []
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for op in history.ops:
        if op.kind not in kinds or op.status != OK or op.end is None:
            continue
        start, end = op.detail.get("held", (op.start, op.end))
        for touched in op.touches:
            if "|" in touched:
                spans.setdefault(touched, []).append((start, end, op.id))
    for where, items in spans.items():
        items.sort()
        for (_s1, e1, a), (s2, _e2, b) in zip(items, items[1:], strict=False):
            if s2 < e1:
                target, _, partition = where.partition("|")
                out.append(
                    Anomaly(
                        "e",
                        target,
                        partition,
                        f"{a} and {b} both committed within [{s2:.3f}, {e1:.3f}]",
                        "two runs of one partition",
                        [a, b],
                    )
                )
    return out


def mixed_reads(
    samples: Sequence[tuple[float, Fingerprint]], allowed: Sequence[Fingerprint], target: str, partition: str
) -> list[Anomaly]:
    """(f): every sampled fingerprint of a closed partition is one of the states it legitimately had (``allowed``:
    before each rebuild and after it); a sample matching none saw a partially swapped partition."""
    out = []
    for at, fp in samples:
        if not any(same(fp, ok) for ok in allowed):
            out.append(
                Anomaly(
                    "f",
                    target,
                    partition,
                    f"a reader at {at:.3f}s saw {fp}, neither the old nor the new partition",
                    "mixed read during a swap",
                )
            )
    return out


def suspect(history: History, target: str, partition: str, a: Fingerprint | None, e: Fingerprint | None) -> str:
    """Which anomaly class of issue 25 the history points at for a partition that differs."""
    ops = history.touching(target)
    kinds = {o.kind for o in ops}
    rows_a, rows_e = (a or (0,))[0], (e or (0,))[0]
    if ("foreign_insert" in kinds or "foreign_mv" in kinds) and rows_a < rows_e:
        return "class 4: rows of a writer outside the DDL deleted by a rebuild"
    if kinds & {"delete", "drop_partition"} and rows_a < rows_e:
        return "class 5/6 (c): a rebuild from a source that lost rows shrank the partition"
    if kinds & {"delete", "drop_partition"} and rows_a == rows_e:
        return "class 5 (c): a rebuild from a source that lost rows kept the keys and lost totals"
    if rows_a > rows_e:
        return "class 3: rows counted twice (a slow MV pipeline's output landed after a swap)"
    if any(o.status == FAILED and "RacedWrites" in str(o.detail.get("error", "")) for o in ops):
        return "class 2: a raced rebuild lost rows"
    if any(o.detail.get("dst") for o in ops):
        return "class 1: a DST hour"
    if rows_a < rows_e:
        return "rows lost (a rebuild's read missed rows that reached the source)"
    return ""


def op_chain(history: History, target: str, upstream: Sequence[str] = ()) -> list[Op]:
    """The shortest history showing a partition's anomaly: the non-insert operations that touched the target or its
    upstream tables, with the inserts summarised by the report."""
    names = {target, *upstream}
    return [o for o in history.ops if o.kind != "insert" and any(t.split("|")[0] in names for t in o.touches)]

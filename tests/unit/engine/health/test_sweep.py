"""The parity sweep's change detection, on parts described by hand (no engine)."""

from __future__ import annotations

from datetime import UTC, datetime

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.sweep import (
    WHOLE,
    Part,
    PartitionSeen,
    SweepState,
    _Marker,
    dirty_ranges,
    estimate_rows,
    seen_partitions,
)

from support.paths import EXAMPLE_DDL


def _ts(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def _part(pid: str, blocks: tuple[int, int], first: str, last: str, rows: int = 10, version: int | None = None) -> Part:
    return Part(pid, rows, blocks[0], blocks[1], blocks[0] if version is None else version, _ts(first), _ts(last))


AUG = [
    _part("202608", (1, 5), "2026-08-01 00:00:00", "2026-08-31 23:00:00"),
    _part("202608", (6, 6), "2026-08-31 23:10:00", "2026-08-31 23:50:00"),
]
SEP = [_part("202609", (7, 7), "2026-09-01 00:00:00", "2026-09-30 23:00:00")]


def test_a_table_never_seen_is_dirty_everywhere() -> None:
    assert dirty_ranges(AUG + SEP, None) == [
        (_ts("2026-08-01 00:00:00"), _ts("2026-08-31 23:50:00")),
        (_ts("2026-09-01 00:00:00"), _ts("2026-09-30 23:00:00")),
    ]


def test_nothing_changed_and_merges_mark_nothing() -> None:
    before = seen_partitions(AUG + SEP)
    assert dirty_ranges(AUG + SEP, before) == []
    merged = [_part("202608", (1, 6), "2026-08-01 00:00:00", "2026-08-31 23:50:00", rows=20)] + SEP
    assert dirty_ranges(merged, before) == []  # a merge keeps the block range


def test_an_insert_marks_only_the_time_range_of_its_new_part() -> None:
    before = seen_partitions(AUG + SEP)
    late = _part("202608", (8, 8), "2026-08-12 10:00:00", "2026-08-12 14:59:00")
    assert dirty_ranges([*AUG, late, *SEP], before) == [(_ts("2026-08-12 10:00:00"), _ts("2026-08-12 14:59:00"))]


def test_a_mutation_or_a_dropped_partition_marks_the_whole_partition() -> None:
    before = seen_partitions(AUG + SEP)
    deleted = [_part("202608", (1, 5), "2026-08-01 00:00:00", "2026-08-31 23:00:00", version=9), AUG[1], *SEP]
    assert dirty_ranges(deleted, before) == [(_ts("2026-08-01 00:00:00"), _ts("2026-08-31 23:50:00"))]
    assert dirty_ranges(SEP, before) == [(_ts("2026-08-01 00:00:00"), _ts("2026-08-31 23:50:00"))]


def test_parts_without_a_time_index_make_the_table_dirty_as_a_whole() -> None:
    flat = [Part("all", 5, 1, 1, 1, 0, 0)]
    assert dirty_ranges(flat, None) == [WHOLE]
    assert seen_partitions(flat)["all"].span is WHOLE


def test_the_cursor_round_trips_and_rejects_what_it_cannot_read() -> None:
    state = SweepState(
        {"a.b": {"202608": PartitionSeen(6, 0, (1, 2), 20), "all": PartitionSeen(1, 0, WHOLE, 5)}},
        {"a.c": {"2026-08-01": (0.0, 5.0)}},
    )
    assert SweepState.loads(state.dumps()) == state
    assert SweepState.loads("not a cursor") == SweepState()
    assert SweepState.loads('{"v": 0}') == SweepState()


def test_source_changes_map_onto_the_target_windows_of_the_mv() -> None:
    loaded = load(EXAMPLE_DDL)
    marker = _Marker(loaded)
    agg, raw = ObjectRef(database="analytics", name="events_agg"), ObjectRef(database="analytics", name="raw_events")
    daily, weekly = (
        ObjectRef(database="analytics", name="events_daily"),
        ObjectRef(database="analytics", name="events_weekly"),
    )
    late = [(_ts("2026-08-12 10:00:00"), _ts("2026-08-12 14:59:00"))]
    assert {w.key for w in marker.source_windows(agg, raw, late, [])} == {"2026-08-01"}
    assert {w.key for w in marker.source_windows(daily, agg, late, [])} == {"2026-08-12"}
    # a weekly rollup: 1 September lands in the week of Monday 31 August, i.e. in the August partition
    first = [(_ts("2026-09-01 00:00:00"), _ts("2026-09-01 10:00:00"))]
    assert {w.key for w in marker.source_windows(weekly, daily, first, [])} == {"2026-08-01", "2026-09-01"}
    # a whole-table change of a source the mapping cannot place: every window the target holds
    held = [_part("202608", (1, 1), "2026-08-03 00:00:00", "2026-08-30 00:00:00")]
    assert {w.key for w in marker.source_windows(agg, raw, [WHOLE], held)} == {"2026-08-01"}


def test_the_row_estimate_reads_the_target_partition_and_the_mapped_source_range() -> None:
    loaded = load(EXAMPLE_DDL)
    agg, raw = ObjectRef(database="analytics", name="events_agg"), ObjectRef(database="analytics", name="raw_events")
    from chmv_assets.ddl.partitioning import window_for_partition_key

    window = window_for_partition_key("month", "2026-08-01")
    target = [_part("202608", (1, 1), "2026-08-01 00:00:00", "2026-08-31 00:00:00", rows=100)]
    parts = {agg: target, raw: AUG + SEP}
    assert estimate_rows(loaded, agg, window, parts) == 100 + 20  # September's source rows are not read

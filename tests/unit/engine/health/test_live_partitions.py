"""Live partition state's decisions on partitions described by hand (no engine): what changed, what to count again,
the fingerprints, and the cursor that cannot be read."""

from __future__ import annotations

from datetime import UTC, datetime

from chmv_assets.engine.health.cursors import encode_cursor
from chmv_assets.engine.health.live_partitions import (
    CURSOR_VERSION,
    LiveMemory,
    Tally,
    covering,
    day_range,
    days_to_recount,
    partition_start,
    source_blocks,
)
from chmv_assets.engine.parts import Partition


def _ts(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def _partition(pid: str, block: int, first: str = "", last: str = "", rows: int = 10, value: str = "") -> Partition:
    span = (_ts(first), _ts(last)) if first else (0, 0)
    return Partition(pid, value or pid, rows, 2, 100, 1_800_000_000, block, *span)


AUG = _partition("202608", 5, "2026-08-01 00:00:00", "2026-08-31 23:00:00")
SEP = _partition("202609", 7, "2026-09-02 00:00:00", "2026-09-03 10:00:00")


def test_nothing_moved_counts_nothing_again() -> None:
    assert days_to_recount([AUG, SEP], source_blocks([AUG, SEP])) == (False, None)


def test_a_new_block_counts_again_the_span_of_the_partitions_it_moved() -> None:
    before = source_blocks([AUG, SEP])
    moved = _partition("202609", 8, "2026-09-01 00:00:00", "2026-09-03 10:00:00")
    assert days_to_recount([AUG, moved], before) == (True, (_ts("2026-09-01 00:00:00"), _ts("2026-09-03 10:00:00")))
    assert day_range((_ts("2026-09-01 00:00:00"), _ts("2026-09-03 10:00:00"))) == ("2026-09-01", "2026-09-03")


def test_a_dropped_partition_or_one_without_a_time_index_counts_every_day_again() -> None:
    before = source_blocks([AUG, SEP])
    assert days_to_recount([AUG], before) == (True, None)
    assert days_to_recount([AUG, SEP, _partition("all", 9)], before) == (True, None)
    assert day_range(None) == ("0000-00-00", "9999-99-99")


def test_the_fingerprint_moves_with_a_new_block_or_a_partition_folded_in_or_out() -> None:
    one, two = Tally(), Tally()
    one.add(AUG)
    two.add(AUG)
    two.add(SEP)
    assert (one.fingerprint, two.fingerprint) == ("5.1", "7.2")
    assert (two.rows, two.parts, two.bytes, two.ch_partitions) == (20, 4, 200, ["202608", "202609"])


def test_covering_a_day_takes_the_partitions_whose_rows_touch_it() -> None:
    assert covering([AUG, SEP], "2026-09-02") == [SEP]
    assert covering([AUG, SEP], "2026-08-31") == [AUG]
    assert covering([AUG, SEP], "2026-12-01") == [AUG, SEP]  # none does: all of them
    flat = _partition("all", 3)
    assert covering([AUG, flat], "2026-09-02") == [flat]  # not indexed: it may


def test_partition_start_reads_the_value_else_the_oldest_row() -> None:
    assert partition_start(AUG) == datetime(2026, 8, 1)
    assert partition_start(_partition("x", 1, "2026-09-15 10:00:00", "2026-09-15 11:00:00", value="(1, 'x')")) == (
        datetime(2026, 9, 15, 10)
    )
    assert partition_start(_partition("x", 1, value="7")) is None


def test_the_memory_round_trips_and_an_unreadable_or_old_cursor_starts_afresh() -> None:
    memory = LiveMemory({"analytics/t": {"2026-08-01": "5.1"}}, {"analytics.s": {"202608": "5"}})
    assert LiveMemory.loads(memory.dumps()) == memory
    assert memory.dumps().startswith("z:")
    assert LiveMemory.loads("not a cursor") == LiveMemory()
    assert LiveMemory.loads(encode_cursor({"a": {"x": {}}}, CURSOR_VERSION + 1)) == LiveMemory()
    assert LiveMemory.loads(encode_cursor({"a": ["not", "a", "dict"]}, CURSOR_VERSION)) == LiveMemory()

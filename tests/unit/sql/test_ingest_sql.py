"""ingest_sql: a load's statements over the staged rows, names quoted, values bound (the lower bound written as a UTC
instant)."""

from __future__ import annotations

from datetime import datetime

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.ingest_sql import (
    anti_join_insert_sql,
    count_sql,
    in_run,
    newest_sql,
    past_lower_bound,
    staged_stats_sql,
    staged_units_sql,
    time_unit,
)

SOURCE = ObjectRef(database="raw db", name="api`requests")
STAGED = "file({path:String}, Parquet, {structure:String})"


def test_the_anti_join_inserts_only_keys_the_source_does_not_hold_in_the_window() -> None:
    window = past_lower_bound("event time", datetime(2026, 8, 1, 12, 30, 5, 250000))  # a watermark: naive UTC
    where = in_run(window, time_unit("event time", "Day"), 1754006400, 1754092800)
    assert window == "`event time` > toDateTime64('2026-08-01 12:30:05.250000', 6, 'UTC')"
    assert where == (
        "`event time` > toDateTime64('2026-08-01 12:30:05.250000', 6, 'UTC') AND "
        "toUnixTimestamp(toStartOfDay(`event time`)) BETWEEN 1754006400 AND 1754092800"
    )
    assert anti_join_insert_sql(SOURCE, ["event time", "user"], ["user"], where, window) == (
        rf"INSERT INTO `raw db`.`api\`requests` (`event time`, `user`) SELECT `event time`, `user` FROM {STAGED} "
        rf"WHERE {where} AND (`user`) NOT IN (SELECT `user` FROM `raw db`.`api\`requests` WHERE {window})"
    )


def test_an_unbounded_load_reads_every_staged_row() -> None:
    window = past_lower_bound("ts", None)
    assert window == "1"
    assert staged_stats_sql("ts") == f"SELECT count(), max(`ts`), min(`ts`) FROM {STAGED}"
    unit = time_unit("ts", "Hour")
    assert staged_units_sql(unit, window) == (
        f"SELECT DISTINCT toUnixTimestamp(toStartOfHour(`ts`)) AS u FROM {STAGED} WHERE 1 ORDER BY u"
    )
    assert count_sql(SOURCE, window) == r"SELECT count() FROM `raw db`.`api\`requests` WHERE 1"
    assert newest_sql("ts", window) == f"SELECT max(`ts`) FROM {STAGED} WHERE 1"

"""Coverage decisions from facts (no engine): TTL horizons, truncated and dropped sources, the landing zone, unknowns."""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import TtlRule
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.rebuild.coverage import Facts, Holding, Stats, assess
from chmv_assets.engine.rebuild.timeline import add_months, floor, ttl_horizon

from support.coverage import DAYS, DDL, HOURLY, LATEST, NOW, SRC, facts, one, project, whole, write_files
from support.ddl import load_ddl

D = datetime

# -- timeline ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (TtlRule(expression="ts + 10 DAY", column="ts", interval=(10, "DAY")), D(2026, 11, 12, 5, 0)),
        (
            TtlRule(expression="toDate(ts) + 10 DAY", column="ts", truncation=Grain.DAY, interval=(10, "DAY")),
            D(2026, 11, 13),
        ),
        (TtlRule(expression="ts + 1 MONTH", column="ts", interval=(1, "MONTH")), D(2026, 10, 22, 5, 0)),
        (TtlRule(expression="ts - 1 WEEK", column="ts", interval=(-1, "WEEK")), D(2026, 11, 29, 5, 0)),
        (TtlRule(expression="f(ts, x)"), None),
    ],
    ids=["bare", "truncated-to-day", "month", "negative", "unknown"],
)
def test_ttl_horizon(rule, expected):
    assert ttl_horizon(rule, NOW) == expected


def test_calendar_helpers():
    assert add_months(D(2026, 3, 31), -1) == D(2026, 2, 28) and add_months(D(2026, 1, 15), 12) == D(2027, 1, 15)
    assert floor(D(2026, 9, 3, 10), Grain.WEEK) == D(2026, 8, 31)  # a Thursday → its Monday
    assert floor(D(2026, 8, 20), Grain.QUARTER) == D(2026, 7, 1)
    assert floor(D(2026, 9, 3, 10, 17), Grain.FIFTEEN_MINUTES) == D(2026, 9, 3, 10, 15)


# -- the source table -------------------------------------------------------------------------------------------


def test_the_source_holds_the_window(tmp_path):
    covered, src = one(
        project(tmp_path),
        DAYS[1],
        facts(
            whole(),
            {DAYS[1].start: Stats(40, D(2026, 9, 2, 0, 3), D(2026, 9, 2, 23, 50))},
            {DAYS[1].start: Stats(24, D(2026, 9, 2), D(2026, 9, 2, 23))},
        ),
    )
    assert src.table.holding == Holding.ENTIRELY and covered.source_holds_entirely
    assert src.table.reason == "d.src holds 40 rows from 2026-09-02 00:03:00 to 2026-09-02 23:50:00 of the window"
    assert src.held_from == D(2026, 8, 1) and covered.target_rows == 24 and not covered.loss_observed


def test_a_dropped_window_is_none(tmp_path):
    covered, src = one(project(tmp_path), DAYS[0], facts(whole(D(2026, 9, 2)), {}, {DAYS[0].start: Stats(24)}))
    assert src.table.holding == Holding.NONE and covered.loss_observed
    assert (
        "d.src holds no rows of the window while the target partition holds 24 (dropped or deleted" in src.table.reason
    )
    assert "d.src holds 1,000 rows from 2026-09-02 00:00:00" in src.table.reason  # how far back it holds data


def test_rows_deleted_from_the_start_of_the_window_is_partly(tmp_path):
    f = facts(
        whole(D(2026, 9, 1, 12, 30)),
        {DAYS[0].start: Stats(10, D(2026, 9, 1, 12, 30), D(2026, 9, 1, 23))},
        {DAYS[0].start: Stats(24, D(2026, 9, 1, 0), D(2026, 9, 1, 23))},
    )
    _covered, src = one(project(tmp_path), DAYS[0], f)
    assert src.table.holding == Holding.PARTLY
    assert (
        "holds the window from 2026-09-01 12:30:00 only, the target partition has rows from 2026-09-01 00:00:00"
        in src.table.reason
    )


def test_a_source_that_starts_inside_the_window_with_nothing_older_in_the_target_holds_it(tmp_path):
    """The data began at 12:30; the target's oldest hour is 12:00: nothing was lost."""
    f = facts(
        whole(D(2026, 9, 1, 12, 30)),
        {DAYS[0].start: Stats(10, D(2026, 9, 1, 12, 30), D(2026, 9, 1, 23))},
        {DAYS[0].start: Stats(12, D(2026, 9, 1, 12), D(2026, 9, 1, 23))},
    )
    assert one(project(tmp_path), DAYS[0], f)[1].table.holding == Holding.ENTIRELY


def test_an_empty_window_on_both_sides(tmp_path):
    loaded = project(tmp_path)
    assert one(loaded, DAYS[1], facts(whole(), {}, {DAYS[1].start: Stats()}))[1].table.holding == Holding.ENTIRELY
    before = one(loaded, DAYS[0], facts(whole(D(2026, 10, 1)), {}, {DAYS[0].start: Stats()}))[1]
    assert before.table.holding == Holding.NONE and "nothing before 2026-10-01" in before.table.reason


def test_an_empty_source(tmp_path):
    loaded = project(tmp_path)
    lost = one(loaded, DAYS[0], facts(Stats(), {}, {DAYS[0].start: Stats(5)}))[1]
    assert lost.table.holding == Holding.NONE and lost.table.reason == (
        "d.src is empty while the target partition holds 5 rows"
    )
    unknown = one(loaded, DAYS[0], facts(Stats(), {}, {DAYS[0].start: Stats()}))[1]
    assert unknown.table.holding == Holding.UNKNOWN and "d.src is empty: nothing tells" in unknown.table.reason


def test_not_observed_is_unknown(tmp_path):
    covered, src = one(project(tmp_path), DAYS[0], Facts(now=NOW))
    assert src.table.holding == Holding.UNKNOWN and src.table.reason == "d.src was not observed"
    assert covered.target_rows is None


@pytest.mark.parametrize(
    ("window", "expected", "text"),
    [
        (
            window_at(D(2026, 10, 20), "day"),
            Holding.PARTLY,
            "its TTL ts + INTERVAL '33' DAY deletes rows before 2026-10-20 05:00:00",
        ),
        (window_at(D(2026, 10, 20), "day"), Holding.PARTLY, "(7 rows of the window await deletion)"),
        (window_at(D(2026, 10, 19), "day"), Holding.NONE, "deletes rows before"),
        (window_at(D(2026, 10, 20, 4), "hour"), Holding.NONE, "deletes rows before 2026-10-20 05:00:00"),
        (window_at(D(2026, 10, 20, 5), "hour"), Holding.ENTIRELY, "of the window"),
        (window_at(D(2026, 10, 21), "day"), Holding.ENTIRELY, "of the window"),
    ],
    ids=[
        "straddles-the-horizon",
        "rows-awaiting-deletion",
        "before-the-horizon",
        "hour-before-the-horizon",
        "hour-from-the-horizon",
        "after-the-horizon",
    ],
)
def test_ttl_horizon_of_the_source(tmp_path, window, expected, text):
    loaded = project(tmp_path, "TTL ts + INTERVAL 33 DAY")  # horizon: 2026-10-20 05:00 at NOW
    rows = Stats(7, window.wall_start, window.wall_end)
    f = facts(whole(), {window.start: rows}, {window.start: Stats(3, window.wall_start, window.wall_start)})
    src = one(loaded, window, f)[1]
    assert src.table.holding == expected and text in src.table.reason


def test_a_conditional_or_unreadable_ttl(tmp_path):
    window = window_at(D(2026, 9, 1), "day")
    f = facts(
        whole(),
        {window.start: Stats(7, window.wall_start, window.wall_end)},
        {window.start: Stats(3, window.wall_start, window.wall_start)},
    )
    conditional = one(project(tmp_path / "a", "TTL ts + INTERVAL 1 DAY WHERE k = 'x'"), window, f)[1]
    assert (
        conditional.table.holding == Holding.PARTLY
        and "deletes rows matching k = 'x' before" in conditional.table.reason
    )
    unreadable = one(project(tmp_path / "b", "TTL ts + INTERVAL 1 DAY + INTERVAL 1 HOUR"), window, f)[1]
    assert (
        unreadable.table.holding == Holding.UNKNOWN
        and "which chmv cannot read as a time horizon" in unreadable.table.reason
    )
    moved = one(project(tmp_path / "c", "TTL ts + INTERVAL 1 DAY TO VOLUME 'cold'"), window, f)[1]
    assert moved.table.holding == Holding.ENTIRELY  # moving rows keeps them


def test_an_unpartitioned_target_is_unknown_without_ttl_and_partly_with_one(tmp_path):
    f = facts(whole(), target={None: Stats(50)})
    plain = one(project(tmp_path / "a"), None, f, target=LATEST)[1]
    assert plain.table.holding == Holding.UNKNOWN and "an unpartitioned target" in plain.table.reason
    ttl = one(project(tmp_path / "b", "TTL ts + INTERVAL 30 DAY"), None, f, target=LATEST)[1]
    assert ttl.table.holding == Holding.PARTLY and "deletes rows before 2026-10-23 05:00:00" in ttl.table.reason


def test_rows_that_cannot_be_placed_in_windows(tmp_path):
    window = DAYS[0]
    f = facts(whole(), {}, {window.start: Stats(5, window.start, window.start)}, mapped=False)
    src = one(project(tmp_path), window, f)[1]
    assert src.table.holding == Holding.UNKNOWN and "cannot be placed in partition windows" in src.table.reason


# -- the landing zone -------------------------------------------------------------------------------------------


def test_lake_unknown_without_a_landing_zone(tmp_path):
    src = one(project(tmp_path), DAYS[0], facts(whole(), {}, {DAYS[0].start: Stats(5)}))[1]
    assert src.lake.holding == Holding.UNKNOWN and src.lake.reason == "no landing zone is configured"


def test_lake_holds_a_window_its_files_cover(tmp_path):
    root = tmp_path / "landing"
    write_files(root, [D(2026, 8, 30, 0), D(2026, 9, 1, 0), D(2026, 9, 1, 13), D(2026, 9, 2, 5)])
    loaded = project(tmp_path, landing=root)
    f = facts(
        whole(D(2026, 9, 3)),
        {DAYS[2].start: Stats(9, D(2026, 9, 3), D(2026, 9, 3, 22))},
        {w.start: Stats(5, w.start, w.start) for w in DAYS},
    )
    coverage = assess(loaded, HOURLY, DAYS, f, root)
    holdings = [(w.key, w.sources[0].table.holding, w.sources[0].lake.holding) for w in coverage.windows]
    assert holdings == [
        ("2026-09-01", Holding.NONE, Holding.ENTIRELY),
        ("2026-09-02", Holding.NONE, Holding.ENTIRELY),
        ("2026-09-03", Holding.ENTIRELY, Holding.NONE),
    ]
    assert coverage.windows[0].lake_holds_entirely
    assert (
        coverage.windows[0].sources[0].lake.reason
        == "3 landing files arrived in the window's range (the landing zone starts at 2026-08-30 00:00:00)"
    )
    assert coverage.windows[2].sources[0].lake.reason.startswith("no landing file of d.src arrived in [2026-09-03")


def test_lake_that_starts_after_the_targets_oldest_row_is_partly(tmp_path):
    root = tmp_path / "landing"
    write_files(root, [D(2026, 9, 1, 13), D(2026, 9, 1, 20)])
    loaded = project(tmp_path, landing=root)
    lost = facts(whole(D(2026, 9, 3)), {}, {DAYS[0].start: Stats(5, D(2026, 9, 1, 2), D(2026, 9, 1, 22))})
    src = one(loaded, DAYS[0], lost, root)[1]
    assert src.lake.holding == Holding.PARTLY
    assert (
        src.lake.reason
        == "the landing zone starts at 2026-09-01 13:00:00, the target partition has rows from 2026-09-01 02:00:00"
    )
    began = facts(whole(D(2026, 9, 3)), {}, {DAYS[0].start: Stats(5, D(2026, 9, 1, 13), D(2026, 9, 1, 22))})
    assert one(loaded, DAYS[0], began, root)[1].lake.holding == Holding.ENTIRELY


def test_lake_not_used_for_a_source_without_a_time_column(tmp_path):
    root = tmp_path / "landing"
    loaded = load_ddl(
        tmp_path / "ddl", DDL.format(ttl=""), toml=f'default_database = "d"\n[ingestion]\nlanding_dir = "{root}"'
    )
    src = one(loaded, DAYS[0], facts(whole(), {}, {DAYS[0].start: Stats(5)}), root)[1]
    assert src.lake.holding == Holding.UNKNOWN and "no [ingestion.time_columns] entry" in src.lake.reason


def test_describe_and_lookup(tmp_path):
    loaded = project(tmp_path)
    coverage = assess(loaded, HOURLY, DAYS[:2], facts(whole(), {}, {DAYS[0].start: Stats(3)}), None)
    assert coverage.at(DAYS[1]).key == "2026-09-02" and coverage.at(window_at(D(2026, 1, 1), "day")) is None
    text = coverage.describe()
    assert text.splitlines()[0] == "| partition | source | source table | landing zone | target rows |"
    assert "| 2026-09-01 | d.src | none: d.src holds no rows of the window" in text
    assert text.splitlines()[-1].endswith("| unknown: no landing zone is configured | ? |")  # 09-02 not observed


def test_rows_after_the_ingestion_cutoff_must_be_in_the_source(tmp_path):
    """A Spark rebuild reads the source after watermark - tolerance: a source that lost those rows fails the lake."""
    root = tmp_path / "landing"
    write_files(root, [D(2026, 9, 1, h) for h in range(24)] + [D(2026, 9, 2, h) for h in range(24)])
    loaded = project(tmp_path, landing=root)  # late tolerance: 15 minutes
    target = {w.start: Stats(24, w.start, w.start) for w in DAYS[:2]}

    def lake(table: Stats, mark: datetime | None) -> list[Holding]:
        f = Facts(
            now=NOW,
            tables=((SRC, table),),
            target_windows=tuple(target.items()),
            mapped=(SRC,),
            watermarks=((SRC, mark),),
        )
        return [w.sources[0].lake.holding for w in assess(loaded, HOURLY, DAYS[:2], f, root).windows]

    mark = D(2026, 9, 2, 23, 59)  # cutoff 23:44 inside 09-02
    assert lake(Stats(), mark) == [Holding.ENTIRELY, Holding.PARTLY]  # the source is empty
    assert lake(whole(D(2026, 9, 2, 23, 50)), mark) == [Holding.ENTIRELY, Holding.PARTLY]
    assert lake(whole(D(2026, 9, 2, 12)), mark) == [Holding.ENTIRELY, Holding.ENTIRELY]  # holds it from before
    assert lake(Stats(), None) == [Holding.ENTIRELY, Holding.ENTIRELY]  # no watermark: the lake alone
    f = Facts(
        now=NOW,
        tables=((SRC, Stats()),),
        target_windows=tuple(target.items()),
        mapped=(SRC,),
        watermarks=((SRC, mark),),
    )
    reason = assess(loaded, HOURLY, DAYS[:2], f, root).windows[1].sources[0].lake.reason
    assert reason == (
        "the window's rows after the cutoff 2026-09-02 23:44:00 (ingestion watermark - late tolerance) "
        "are read from d.src, which is empty"
    )

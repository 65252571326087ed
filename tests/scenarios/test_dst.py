"""Daylight saving time: a partition window is an instant span from Dagster's key to the SQL predicate.

A source row every minute across New York's two DST nights of 2026 (2026-11-01 00:00-03:00, when 01:00-02:00 happens
twice; 2026-03-08 00:00-04:00, when 02:00-03:00 does not happen); hourly and daily targets, emptied, then materialized
through the real Dagster assets with their parity checks, one range run per night (each key decoded as in any run).
Every window must then hold exactly what the MV's own SELECT yields over the source, hour by hour (by instant, so the
two 01:00 hours are two) and in total, and parity must compare the right rows: failing before the rebuild, with the
window's real row count, passing after. Asia/Kolkata (no DST, an offset of 5 h 30) runs the same.

Before, the key ``2026-11-01-01:00`` became the naive window [01:00, 01:00): nothing rebuilt, parity 0 = 0; the key
``2026-11-01-01:00-0500`` became [01:00, 02:00) read as the first 01:00: the target held 180 of the night's 240 rows;
``chmv rebuild --partition 2026-11-01-01:00-0500`` failed with the text of a ValueError.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetSelection, DagsterInstance, materialize

from asset_checks.definitions import PARITY, build_asset_checks
from chmv_assets.cli import main
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.orchestration.assets import build_chmv_assets
from resources.clickhouse import ClickHouseResource

from support.checks import TRANSLATOR, evaluations, run_parity
from support.ddl import load_ddl
from support.dst import HOURLY_DAILY

pytestmark = pytest.mark.worker_seconds(40)

HOURLY, DAILY = ObjectRef(database="dst", name="hourly"), ObjectRef(database="dst", name="daily")
#: A row a minute, by instant: 2026-11-01 04:00-08:00 UTC (New York 00:00 EDT to 03:00 EST: both 01:00 hours) and
#: 2026-03-08 05:00-08:00 UTC (New York 00:00 EST to 04:00 EDT, across the hour that does not exist).
NIGHTS = (("2026-11-01 04:00:00", 240), ("2026-03-08 05:00:00", 180))
#: Per zone: the hourly keys of each night holding rows (a range run each), the daily keys.
KEYS = {
    "America/New_York": (
        [("2026-11-01-00:00", "2026-11-01-02:00"), ("2026-03-08-00:00", "2026-03-08-03:00")],
        ["2026-11-01", "2026-03-08"],
    ),
    "Asia/Kolkata": (
        [("2026-11-01-09:00", "2026-11-01-13:00"), ("2026-03-08-10:00", "2026-03-08-13:00")],
        ["2026-11-01", "2026-03-08"],
    ),
}
#: Source rows per hour by instant, as ClickHouse truncates them: the MV's own SELECT, independently of chmv.
SOURCE_HOURS = "SELECT toUnixTimestamp(toStartOfHour(ts)) AS h, count(), sum(n) FROM dst.events GROUP BY h ORDER BY h"
TARGET_HOURS = (
    "SELECT toUnixTimestamp(toStartOfHour(minute)) AS h, sum(rows), sum(n) FROM dst.hourly GROUP BY h ORDER BY h"
)
SOURCE_DAYS = "SELECT toDate(ts) AS d, count(), sum(n) FROM dst.events GROUP BY d ORDER BY d"
TARGET_DAYS = "SELECT day, sum(rows), sum(n) FROM dst.daily GROUP BY day ORDER BY day"


def project(root: Path, zone: str):
    toml = f'default_database = "dst"\npartition_start = "2026-03-01"\ntimezone = "{zone}"\n'
    return load_ddl(root / "ddl", HOURLY_DAILY, toml=toml)


def engine(path: Path, zone: str) -> ClickHouseResource:
    """The embedded engine with sessions in ``zone``: ClickHouse computes the partitions of a bare DateTime there."""
    return ClickHouseResource(dsn=f"chdb://{path}", settings={"session_timezone": zone})


def run(loaded, resource, instance, target: ObjectRef, first: str, last: str):
    """Materialize ``target``'s partitions ``first..last`` with its parity check: one run, as a backfill runs it."""
    key = TRANSLATOR.get_asset_key(target)
    assets = [a for a in build_chmv_assets(loaded, TRANSLATOR) if getattr(a, "keys", None) and key in a.keys]
    checks = [c for c in build_asset_checks(loaded, TRANSLATOR) if AssetCheckKey(key, PARITY) in c.check_keys]
    tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = materialize(
            [*assets, *checks],
            selection=AssetSelection.assets(key) | AssetSelection.checks(AssetCheckKey(key, PARITY)),
            resources={"clickhouse": resource},
            instance=instance,
            tags=tags,
            raise_on_error=False,
        )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_each_window_of_the_dst_nights_is_rebuilt_and_checked_exactly(tmp_path: Path, zone: str) -> None:
    loaded = project(tmp_path, zone)
    resource = engine(tmp_path / "chdb", zone)
    with resource.get_client() as client:
        apply(client, loaded.project)
        for start, minutes in NIGHTS:
            client.command(
                f"INSERT INTO dst.events SELECT toDateTime('{start}', 'UTC') + number * 60, 1 + number % 7 "
                f"FROM numbers({minutes})"
            )
        source_hours, source_days = client.query(SOURCE_HOURS).result_rows, client.query(SOURCE_DAYS).result_rows
        client.command("TRUNCATE TABLE dst.hourly")
        client.command("TRUNCATE TABLE dst.daily")
    # hours by instant: New York 4 (both 01:00) + 3; Kolkata's hours start at :30 UTC: 5 + 4
    assert len(source_hours) == (7 if zone == "America/New_York" else 9)
    instance = DagsterInstance.ephemeral()
    ranges, days = KEYS[zone]

    # parity of an emptied hour compares the right rows: the source's 60, not 0 = 0
    second = "2026-11-01-01:00-0500" if zone == "America/New_York" else "2026-11-01-10:00"
    (before,) = evaluations(run_parity(loaded, resource, HOURLY, instance, second, second), PARITY)
    assert not before.passed and before.metadata["expected"].value == 60 and before.metadata["actual"].value == 0

    checked = {}
    for first, last in ranges:
        result = run(loaded, resource, instance, HOURLY, first, last)
        checked.update({e.partition: e for e in evaluations(result, PARITY)})
    for day in days:
        result = run(loaded, resource, instance, DAILY, day, day)
        checked.update({e.partition: e for e in evaluations(result, PARITY)})

    with resource.get_client() as client:
        assert client.query(TARGET_HOURS).result_rows == source_hours  # each hour by instant, and so in total
        assert client.query(TARGET_DAYS).result_rows == source_days  # days of 23 and 25 hours
    assert sum(r[1] for r in source_hours) == 420
    # every key checked, passing, on its own rows: each hourly window holds 60 rows, a key per hour of rows
    hourly = {k: e for k, e in checked.items() if k not in days}
    assert len(hourly) == len(source_hours) and all(e.passed for e in checked.values())
    assert sorted(e.metadata["expected"].value for e in hourly.values()) == sorted(r[1] for r in source_hours)
    if zone == "America/New_York":
        assert {"2026-11-01-01:00", "2026-11-01-01:00-0500"} <= set(hourly)
        assert hourly["2026-11-01-01:00"].metadata["expected"].value == 60
        assert not any(k.startswith("2026-03-08-02:") for k in hourly)  # the hour that does not exist
    assert {checked[d].metadata["expected"].value for d in days} == {240, 180}


def chmv(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def test_chmv_rebuild_takes_the_key_of_the_second_hour_and_explains_a_bad_key(tmp_path: Path) -> None:
    loaded = project(tmp_path, "America/New_York")
    common = ["--ddl-dir", str(tmp_path / "ddl"), "--dsn", f"chdb://{tmp_path / 'chdb'}", "--target", "dst.hourly"]
    with engine(tmp_path / "chdb", "America/New_York").get_client() as client:
        apply(client, loaded.project)
    code, out = chmv("rebuild", *common, "--partition", "2026-11-01-01:00-0500", "--dry-run")
    assert code == 0 and "| 2026-11-01-01:00-0500 |" in out, out
    code, out = chmv("rebuild", *common, "--partition", "2026-11-01-01:30")
    assert code == 1
    assert "'2026-11-01-01:30' is not a partition of dst.hourly (no hour window starts there in America/New_York" in out
    assert "the one holding it: 2026-11-01-01:00)" in out
    assert "YYYY-MM-DD-HH:MM (2026-09-01-13:00)" in out and "carries its UTC offset (2026-11-01-01:00-0500)" in out

"""The landing zone: finding files by arrival hour, checking them against the source table, keys, columns, root."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chmv_assets import settings
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.ingest.landing import (
    LandingFile,
    check_files,
    dedup_keys,
    ingested_sources,
    ingestible_sources,
    is_ingested,
    landing_dir,
    list_files,
    time_column,
)
from chmv_assets.errors import LandingZoneError

from support.ddl import ref
from support.spark import with_landing

D = datetime
SOURCE = ref("analytics.api_requests")


def api_rows(n: int = 2, **overrides) -> pa.Table:
    columns = {
        "timestamp": pa.array([D(2026, 9, 1, 0, i) for i in range(n)], pa.timestamp("s")),
        "endpoint": pa.array([f"/e{i}" for i in range(n)]),
        "user_id": pa.array(range(n), pa.uint64()),
        "response_time_ms": pa.array(range(n), pa.uint32()),
        "status_code": pa.array([200] * n, pa.uint16()),
    }
    columns.update(overrides)
    return pa.table({k: v for k, v in columns.items() if v is not None})


def put(root: Path, relative: str, table: pa.Table | None = None) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table if table is not None else api_rows(), path)
    return path


@pytest.fixture
def zone(tmp_path) -> Path:
    """api_requests files that arrived over three days, plus things that are not landing files."""
    root = tmp_path / "landing"
    for day, hours in (("2026-09-01", (0, 13, 23)), ("2026-09-02", (5,)), ("2026-09-03", (0,))):
        for hour in hours:
            put(root, f"analytics.api_requests/date={day}/hour={hour:02d}.parquet")
    put(root, "analytics.api_requests/date=2026-09-04/part-0.parquet")  # no hour: arrived some time that day
    (root / "analytics.api_requests/notes").mkdir()
    (root / "analytics.api_requests/date=2026-09-02/README.txt").write_text("not parquet")
    (root / "analytics.api_requests/date=2026-09-05").write_text("a file, not a folder")
    put(root, "analytics.raw_requests/date=2026-09-01/hour=00.parquet")
    return root


def names(files: list[LandingFile], root: Path) -> list[str]:
    return [str(Path(f.path).relative_to(root / SOURCE.fqn)) for f in files]


def test_list_files_finds_every_file_in_path_order(zone):
    files = list_files(zone, SOURCE)
    assert names(files, zone) == [
        "date=2026-09-01/hour=00.parquet",
        "date=2026-09-01/hour=13.parquet",
        "date=2026-09-01/hour=23.parquet",
        "date=2026-09-02/hour=05.parquet",
        "date=2026-09-03/hour=00.parquet",
        "date=2026-09-04/part-0.parquet",
    ]
    assert files[1] == LandingFile(
        str(zone / SOURCE.fqn / "date=2026-09-01/hour=13.parquet"), D(2026, 9, 1), D(2026, 9, 1, 13)
    )
    assert (files[1].first_arrival, files[1].last_arrival) == (D(2026, 9, 1, 13), D(2026, 9, 1, 14))
    assert files[-1].hour is None
    assert (files[-1].first_arrival, files[-1].last_arrival) == (D(2026, 9, 4), D(2026, 9, 5))


@pytest.mark.parametrize(
    ("after", "before", "expected"),
    [
        (
            D(2026, 9, 1, 13),
            None,
            [
                "date=2026-09-01/hour=13.parquet",
                "date=2026-09-01/hour=23.parquet",
                "date=2026-09-02/hour=05.parquet",
                "date=2026-09-03/hour=00.parquet",
                "date=2026-09-04/part-0.parquet",
            ],
        ),
        (
            D(2026, 9, 1, 13, 59),
            None,
            [
                "date=2026-09-01/hour=13.parquet",
                "date=2026-09-01/hour=23.parquet",
                "date=2026-09-02/hour=05.parquet",
                "date=2026-09-03/hour=00.parquet",
                "date=2026-09-04/part-0.parquet",
            ],
        ),
        (D(2026, 9, 1, 14), D(2026, 9, 2, 5), ["date=2026-09-01/hour=23.parquet"]),
        (
            D(2026, 9, 1, 14),
            D(2026, 9, 2, 5, 1),
            ["date=2026-09-01/hour=23.parquet", "date=2026-09-02/hour=05.parquet"],
        ),
        (None, D(2026, 9, 1, 0), []),
        (D(2026, 9, 4, 23), None, ["date=2026-09-04/part-0.parquet"]),
        (D(2026, 9, 5), None, []),
    ],
    ids=[
        "from-an-hour",
        "inside-an-hour-keeps-it",
        "range-end-exclusive",
        "range-end-inside-an-hour",
        "before-everything",
        "a-file-without-hour-covers-its-day",
        "after-everything",
    ],
)
def test_list_files_prunes_by_arrival_hour(zone, after, before, expected):
    assert names(list_files(zone, SOURCE, arrived_after=after, arrived_before=before), zone) == expected


def test_list_files_of_given_days(zone):
    files = list_files(zone, SOURCE, days={"2026-09-02", "2026-09-04", "2026-10-01"})
    assert names(files, zone) == ["date=2026-09-02/hour=05.parquet", "date=2026-09-04/part-0.parquet"]
    assert list_files(zone, SOURCE, days=set()) == []


def test_list_files_of_a_source_without_folder(zone, tmp_path):
    assert list_files(zone, ref("analytics.counter")) == []
    assert list_files(tmp_path / "nowhere", SOURCE) == []


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("date=2026-02-30/hour=00.parquet", r"date=2026-02-30: not a calendar date .*\(date=YYYY-MM-DD\)"),
        ("date=2026-09-06/hour=24.parquet", r"date=2026-09-06/hour=24\.parquet: hour=24 is not an hour of the day"),
    ],
    ids=["february-30", "hour-24"],
)
def test_list_files_rejects_a_misnamed_folder_or_file_naming_it(zone, relative, message):
    """Not a ValueError from strptime, nor hour=24 silently read as the next day's 00:00."""
    put(zone, f"analytics.api_requests/{relative}")
    with pytest.raises(LandingZoneError, match=message):
        list_files(zone, SOURCE)


# --- checking files against the source table --------------------------------------------------------------------


def test_check_files_returns_the_columns_to_load_and_the_row_count(tmp_path, example):
    table = example.project.table(SOURCE)
    files = [
        LandingFile(str(put(tmp_path, f"f{i}.parquet", api_rows(n))), D(2026, 9, 1), None) for i, n in enumerate((3, 4))
    ]
    assert check_files(files, table) == (["timestamp", "endpoint", "user_id", "response_time_ms", "status_code"], 7)


def test_check_files_accepts_convertible_types(tmp_path, example):
    """Dates for DateTime, signed for unsigned, dictionary strings, extra columns the table lacks."""
    table = example.project.table(SOURCE)
    rows = api_rows(
        2,
        timestamp=pa.array([D(2026, 9, 1).date()] * 2, pa.date32()),
        endpoint=pa.array(["/a", "/b"]).dictionary_encode(),
        user_id=pa.array([1, 2], pa.int64()),
    ).append_column("extra", pa.array([1.5, 2.5]))
    assert check_files([LandingFile(str(put(tmp_path, "f.parquet", rows)), D(2026, 9, 1), None)], table)[1] == 2


def test_check_files_skips_missing_columns_that_have_a_default(tmp_path, example):
    table = example.project.table(ref("analytics.counter"))  # `when` DateTime DEFAULT now()
    rows = pa.table({"device": pa.array([1], pa.uint32()), "value": pa.array([0.5], pa.float32())})
    path = put(tmp_path, "c.parquet", rows)
    assert check_files([LandingFile(str(path), D(2026, 9, 1), None)], table) == (["device", "value"], 1)


def test_check_files_of_no_files(example):
    assert check_files([], example.project.table(ref("analytics.counter"))) == (["when", "device", "value"], 0)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            api_rows(user_id=None),
            r"column 'user_id' \(UInt64\) of analytics\.api_requests is missing \(file has timestamp, endpoint, "
            r"response_time_ms, status_code\)",
        ),
        (
            api_rows(endpoint=pa.array([1, 2], pa.int64())),
            r"column 'endpoint' is int64, which does not convert to String of analytics\.api_requests",
        ),
        (
            api_rows(timestamp=pa.array(["2026-09-01", "2026-09-02"])),
            r"column 'timestamp' is string, which does not convert to DateTime of analytics\.api_requests",
        ),
        (
            api_rows(status_code=pa.array([0.5, 1.5])),
            r"column 'status_code' is double, which does not convert to UInt16",
        ),
    ],
    ids=["missing-column", "int-for-string", "string-for-datetime", "float-for-int"],
)
def test_check_files_rejects_a_bad_schema_naming_the_file(tmp_path, example, rows, message):
    good = LandingFile(str(put(tmp_path, "good.parquet")), D(2026, 9, 1), None)
    bad = LandingFile(str(put(tmp_path, "date=2026-09-01/hour=07.parquet", rows)), D(2026, 9, 1), None)
    with pytest.raises(LandingZoneError, match=rf"^{re.escape(bad.path)}: {message}"):
        check_files([good, bad], example.project.table(SOURCE))


@pytest.mark.parametrize(
    "content", [b"not parquet at all", b"PAR1" + b"\0" * 64, b""], ids=["garbage", "truncated", "empty"]
)
def test_check_files_rejects_an_unreadable_file_naming_it(tmp_path, example, content):
    path = tmp_path / "date=2026-09-01" / "hour=03.parquet"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(
        LandingZoneError, match=rf"^{re.escape(str(path))}: not a readable Parquet file .*re-deliver it"
    ):
        check_files([LandingFile(str(path), D(2026, 9, 1), D(2026, 9, 1, 3))], example.project.table(SOURCE))


def test_check_files_rejects_files_with_different_column_sets(tmp_path, example):
    table = example.project.table(ref("analytics.counter"))
    with_when = pa.table(
        {
            "when": pa.array([D(2026, 9, 1)], pa.timestamp("s")),
            "device": pa.array([1], pa.uint32()),
            "value": pa.array([0.5], pa.float32()),
        }
    )
    without = with_when.drop_columns(["when"])
    files = [
        LandingFile(str(put(tmp_path, name, t)), D(2026, 9, 1), None)
        for name, t in (("a.parquet", with_when), ("b.parquet", without))
    ]
    with pytest.raises(
        LandingZoneError,
        match=rf"^{re.escape(files[1].path)}: has columns \['device', 'value'\], other files "
        r"of the load have \['when', 'device', 'value'\]",
    ):
        check_files(files, table)


# --- configuration ------------------------------------------------------------------------------------------------


def with_ingestion(loaded: LoadedProject, **update) -> LoadedProject:
    ingestion = loaded.config.ingestion.model_copy(update=update)
    return LoadedProject(config=loaded.config.model_copy(update={"ingestion": ingestion}), project=loaded.project)


@pytest.mark.parametrize(
    ("source", "columns", "expected"),
    [
        (
            "analytics.api_requests",
            ["timestamp", "endpoint", "user_id", "status_code"],
            ["timestamp", "endpoint", "user_id"],
        ),
        ("analytics.raw_webhooks", ["received_at", "event_id", "payload"], ["event_id"]),
        ("analytics.events_agg", ["event_date", "user_id"], ["event_date", "user_id"]),
    ],
    ids=["configured", "configured-one-column", "unconfigured-every-column"],
)
def test_dedup_keys(example, source, columns, expected):
    assert dedup_keys(example, ref(source), columns) == expected


def test_dedup_key_not_among_the_loaded_columns(example):
    with pytest.raises(
        LandingZoneError,
        match=r"dedup key \['endpoint', 'user_id'\] of analytics\.api_requests is "
        r"not among the loaded columns \['timestamp'\]; fix "
        r"\[ingestion\.dedup_keys\]",
    ):
        dedup_keys(example, SOURCE, ["timestamp"])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("analytics.api_requests", "timestamp"),
        ("analytics.raw_webhooks", "received_at"),
        ("analytics.counter", "when"),
    ],
    ids=["api_requests", "raw_webhooks", "counter"],
)
def test_time_column(example, source, expected):
    assert time_column(example, ref(source)) == expected


def test_time_column_not_configured(example):
    with pytest.raises(
        LandingZoneError,
        match=r"analytics\.events_agg has no event-time column: add it under "
        r"\[ingestion\.time_columns\]",
    ):
        time_column(example, ref("analytics.events_agg"))


def test_ingestible_sources_are_the_configured_ones_the_ddl_defines(example):
    loaded = with_ingestion(example, time_columns={**example.config.ingestion.time_columns, "ext.missing": "ts"})
    assert [r.fqn for r in ingestible_sources(loaded)] == [
        "analytics.api_requests",
        "analytics.raw_requests",
        "analytics.raw_webhooks",
        "analytics.all_events",
        "analytics.counter",
        "analytics.raw_events",
    ]


def test_time_columns_of_the_ingestible_sources_are_derived_once_per_load(example):
    loaded = with_ingestion(example, time_columns={"ext.missing": "ts", "analytics.counter": "ts"})
    assert dict(loaded.time_columns) == {ref("analytics.counter"): "ts"}
    assert loaded.time_columns is loaded.time_columns
    assert ingestible_sources(loaded) == [ref("analytics.counter")]


def test_is_ingested_needs_an_ingestible_source_and_a_landing_zone(example, tmp_path, no_landing_env):
    assert not is_ingested(example, ref("analytics.counter"))  # no landing zone
    landed = with_landing(example, tmp_path)
    assert is_ingested(landed, ref("analytics.counter"))
    assert not is_ingested(landed, ref("analytics.events_agg"))  # a target, no event-time column
    assert {r for r in landed.project.tables if is_ingested(landed, r)} == set(ingested_sources(landed))


@pytest.fixture
def no_landing_env(monkeypatch, tmp_path):
    """No $CHMV_LANDING_DIR, and a state directory of this test's own."""
    monkeypatch.delenv(settings.LANDING_DIR.name, raising=False)
    monkeypatch.setenv("CHMV_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_landing_dir_from_the_configuration(example, tmp_path, monkeypatch, no_landing_env):
    monkeypatch.setenv(settings.LANDING_DIR.name, str(tmp_path / "from-env"))
    assert landing_dir(with_ingestion(example, landing_dir=str(tmp_path / "lake"))) == (tmp_path / "lake").resolve()


def test_landing_dir_relative_to_the_ddl_directory(example, no_landing_env):
    loaded = with_ingestion(example, landing_dir="../lake/./zone")
    assert landing_dir(loaded) == (Path(example.config.ddl_dir).parent / "lake" / "zone").resolve()


def test_landing_dir_from_the_environment(example, tmp_path, monkeypatch, no_landing_env):
    monkeypatch.setenv(settings.LANDING_DIR.name, str(tmp_path / "from-env"))
    assert landing_dir(example) == (tmp_path / "from-env").resolve()


def test_landing_dir_falls_back_to_the_state_directory_when_it_exists(example, no_landing_env):
    assert landing_dir(example) is None
    assert ingested_sources(example) == []
    (no_landing_env / "landing").mkdir(parents=True)
    assert landing_dir(example) == (no_landing_env / "landing").resolve()
    assert len(ingested_sources(example)) == 6


def test_ingested_sources_with_a_configured_landing_zone(example, tmp_path, no_landing_env):
    assert [r.name for r in ingested_sources(with_landing(example, tmp_path))] == [
        "api_requests",
        "raw_requests",
        "raw_webhooks",
        "all_events",
        "counter",
        "raw_events",
    ]

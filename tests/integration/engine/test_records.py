"""chmv's own records in typed tables, and the legacy ``chmv_meta.watermarks`` of an older chmv: its rows read as they
are until ``chmv apply`` migrates them (copied, the old table renamed aside), then read the same from the typed tables.

The legacy rows (legacy_records/legacy_watermarks.sql) were written by chmv's code before typed records
(legacy_records/record_legacy_rows.py at commit 7aa9252): every kind that table held.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import records
from chmv_assets.engine.health.staleness import measure_staleness
from chmv_assets.engine.lifecycle import journal
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.rebuild import backfills, consumers, deferrals
from chmv_assets.engine.watermarks import read_watermark, read_watermarks
from chmv_assets.sql.meta import DEFERRALS, LEGACY_RENAMED_PREFIX, RECORD_TABLES, meta_ddl
from resources.clickhouse import ClickHouseResource

LEGACY = Path(__file__).parent / "legacy_records" / "legacy_watermarks.sql"
API = ObjectRef(database="analytics", name="api_requests")
DAILY = ObjectRef(database="analytics", name="events_daily")
ERRORS = ObjectRef(database="analytics", name="error_events")
CONSUMER = ObjectRef(database="analytics", name="kafka_mv")
PENDING_VERSION = 1795875120355897410  # the version of the pending re-derivation's journal record


def _legacy_engine(path: Path) -> ClickHouseResource:
    """An engine whose chmv_meta is the legacy table alone, holding the rows the older chmv wrote."""
    resource = ClickHouseResource(dsn=f"chdb://{path}")
    text = "\n".join(line for line in LEGACY.read_text().splitlines() if not line.startswith("--"))
    with resource.get_client() as client:
        client.command("CREATE DATABASE chmv_meta")
        for statement in filter(str.strip, text.split(";")):
            client.command(statement)
    return resource


def _everything(client) -> dict:
    """What every kind's reader says."""
    mark = read_watermark(client, API)
    return {
        "watermark": (mark.last_processed_ts, mark.batch_id, mark.status, mark.interrupted) if mark else None,
        "watermarks": read_watermarks(client),
        "backfills": [(b.partition, b.cutoff, b.batch_id, b.rows) for b in backfills.latest(client, DAILY)],
        "deferrals": [(d.target.fqn, d.partition, d.closes_at, d.reason) for d in deferrals.pending(client)],
        "journal": [(e.kind, e.target.fqn, e.phase, e.plan_id, e.version) for e in journal.unfinished(client)],
        "rederived": journal.rederived(client, DAILY, PENDING_VERSION),
        "paused": consumers.left_paused(client, [CONSUMER], live_runs=set()),
    }


EXPECTED = {
    "watermark": (datetime(2026, 8, 2, 10, 30, 0, 250000), "b2", "loading", True),
    "watermarks": {API.fqn: datetime(2026, 8, 2, 10, 30, 0, 250000)},
    "backfills": [("2026-08-01", datetime(2026, 8, 1, 23, 0), "spark-1", 31)],
    "deferrals": [
        (DAILY.fqn, "2026-08-03", datetime(2026, 8, 4, 0, 15), "open to writers"),
        (ERRORS.fqn, "all", datetime(2099, 1, 1), "open to writers"),
    ],
    "journal": [("rederive", DAILY.fqn, "pending", "plan-a", PENDING_VERSION)],
    "rederived": {"2026-08-01", "2026-08-02|eu/west"},
    "paused": [(CONSUMER, "rebuild:dead-run")],
}


def renamed_table(client) -> str:
    (name,) = [t for t in _tables(client) if t.startswith(LEGACY_RENAMED_PREFIX)]
    return f"chmv_meta.{name}"


def _tables(client) -> set[str]:
    return {r[0] for r in client.query("SELECT name FROM system.tables WHERE database = 'chmv_meta'").result_rows}


def test_legacy_rows_read_the_same_before_and_after_chmv_apply_migrates_them(tmp_path: Path, example) -> None:
    engine = _legacy_engine(tmp_path / "chdb")
    with engine.get_client() as client:
        assert _everything(client) == EXPECTED  # before the migration: the legacy rows, read as typed records
        assert _tables(client) == {"watermarks"}  # reading created nothing
        legacy_rows = client.command("SELECT count() FROM chmv_meta.watermarks")
        apply(client, example.project)  # chmv apply: chmv_meta's DDL, then the migration
        tables = _tables(client)
        (renamed,) = [t for t in tables if t.startswith(LEGACY_RENAMED_PREFIX)]
        assert "watermarks" not in tables and {t.ref.name for t in RECORD_TABLES} <= tables
        assert client.command(f"SELECT count() FROM chmv_meta.{renamed}") == legacy_rows  # kept whole, never dropped
        copied = sum(int(client.command(f"SELECT count() FROM {t.ref.fqn}")) for t in RECORD_TABLES)
        assert copied == legacy_rows
        assert _everything(client) == EXPECTED
        apply(client, example.project)  # a second apply migrates nothing more
        assert _tables(client) == tables and records.migrate_legacy(client) == 0
        # and the records go on from there: the re-derivation finishes, the deferral is settled
        journal.record(client, "rederive", DAILY, journal.DONE, "plan-a")
        assert deferrals.settle(client, DAILY, ["2026-08-03"]) == ["2026-08-03"]
        assert journal.unfinished(client) == [] and [d.partition for d in deferrals.pending(client)] == ["all"]


def test_a_write_before_the_migration_migrates_first(tmp_path: Path) -> None:
    """A rebuild writing a record before anyone ran ``chmv apply``: its table is created, the legacy rows copied."""
    engine = _legacy_engine(tmp_path / "chdb")
    with engine.get_client() as client:
        deferrals.record(client, [deferrals.Deferral(ERRORS, "2026-08-09", datetime(2026, 8, 10), "open to writers")])
        assert "watermarks" not in _tables(client)
        assert [d.partition for d in deferrals.pending(client)] == ["2026-08-03", "2026-08-09", "all"]
        assert _everything(client)["journal"] == EXPECTED["journal"]


def test_a_copy_twice_reads_once(tmp_path: Path) -> None:
    """A migration killed after its copies and before its rename copies again: the readers see each record once."""
    engine = _legacy_engine(tmp_path / "chdb")
    with engine.get_client() as client:
        for sql in meta_ddl():
            client.command(sql)
        client.command(
            f"INSERT INTO {DEFERRALS.ref.fqn} (target, partition_key, closes_at, reason, status, version, "
            f"updated_at) {DEFERRALS.legacy}"
        )  # the first, interrupted copy of one kind
        assert records.migrate_legacy(client) == client.command(f"SELECT count() FROM {renamed_table(client)}")
        assert _everything(client) == EXPECTED


def test_a_record_of_the_apply_journal_is_no_watermark_of_its_target(tmp_path: Path, example) -> None:
    """The legacy table's journal rows (target_table: the target, time: 1970) were read by staleness as the target's
    ingestion watermark: any target an apply had re-derived was stale for good. Typed tables cannot mix them up."""
    from support.engines import make_engine

    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    target = ObjectRef(database="analytics", name="audit_log")
    with engine.get_client() as client:
        journal.record(client, "rederive", target, journal.DONE, "plan")
        (lag,) = measure_staleness(client, example, targets=[target])
    assert not lag.stale and lag.watermark is None, lag.reasons


@pytest.mark.parametrize("table", RECORD_TABLES, ids=lambda t: t.ref.name)
def test_the_legacy_select_of_each_kind_reads_only_its_own_rows(tmp_path: Path, table) -> None:
    engine = _legacy_engine(tmp_path / "chdb")
    with engine.get_client() as client:
        rows = client.query(f"SELECT count() FROM ({table.legacy})").result_rows[0][0]
        prefixes = {
            "ingestion_watermarks": "landing:",
            "backfills": "backfill:",
            "deferrals": "deferred:",
            "apply_journal": "lifecycle:",
            "rederived_partitions": "lifecycle-rederived:",
            "consumer_pauses": "paused:",
        }
        prefix = prefixes[table.ref.name]
        assert rows == client.command(
            f"SELECT count() FROM chmv_meta.watermarks WHERE startsWith(source_id, '{prefix}')"
        )
        assert rows > 0

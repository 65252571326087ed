"""Writes chmv_meta.watermarks with the code of chmv before typed records, and prints it as legacy_watermarks.sql.

Run with that code first on the path (it is not importable beside the current code), e.g. for commit 7aa9252:

    git worktree add /tmp/chmv-legacy 7aa9252
    PYTHONPATH=/tmp/chmv-legacy python tests/integration/engine/legacy_records/record_legacy_rows.py /tmp/engine \
        > tests/integration/engine/legacy_records/legacy_watermarks.sql

Every kind of record that table held is written by the function that wrote it then: an ingestion load and its
intent, a Spark backfill's record, deferrals (one settled), the apply journal (a re-derivation left pending with two
partitions done, a finished new version) and stream consumer pauses (one left paused by a dead run).
"""

import sys
from datetime import datetime

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.cutoff import ingestion_source_id
from chmv_assets.engine.lifecycle import journal
from chmv_assets.engine.rebuild import consumers, deferrals
from chmv_assets.engine.watermarks import COMMITTED, begin_load, commit_load, write_watermark
from chmv_assets.sql.meta import META_DDL
from resources.clickhouse import ClickHouseResource

API = ObjectRef(database="analytics", name="api_requests")
DAILY = ObjectRef(database="analytics", name="events_daily")
ERRORS = ObjectRef(database="analytics", name="error_events")
CONSUMER = ObjectRef(database="analytics", name="kafka_mv")

with ClickHouseResource(dsn=f"chdb://{sys.argv[1]}").get_client() as client:
    for sql in META_DDL:
        client.command(sql)
    sid = ingestion_source_id(API)
    first = commit_load(
        client, sid, API.fqn, "b1", newest=datetime(2026, 8, 2, 10, 30, 0, 250000), rows=10, previous=None
    )
    begin_load(client, sid, API.fqn, "b2", first)  # left `loading`: a load died during its insert
    write_watermark(
        client,
        f"backfill:{DAILY.fqn}",
        "2026-08-01",
        last_processed_ts=datetime(2026, 8, 1, 23, 0),
        batch_id="spark-1",
        status=COMMITTED,
        rows=31,
    )
    deferrals.record(
        client,
        [
            deferrals.Deferral(DAILY, "2026-08-03", datetime(2026, 8, 4, 0, 15), "open to writers"),
            deferrals.Deferral(ERRORS, "2026-08-07", datetime(2026, 8, 8, 0, 15), "raced writes"),
            deferrals.Deferral(ERRORS, "all", datetime(2099, 1, 1), "open to writers"),
        ],
    )
    deferrals.settle(client, ERRORS, ["2026-08-07"])
    pending = journal.record(client, "rederive", DAILY, journal.PENDING, "plan-a")
    journal.record_rederived(client, DAILY, pending, ["2026-08-01", "2026-08-02|eu/west"], "plan-a")
    for phase in (journal.BUILDING, journal.SWAPPED, journal.DONE):
        journal.record(client, "new_version", ERRORS, phase, "plan-b")
    consumers._mark(client, CONSUMER, consumers.PAUSED, "rebuild:dead-run")
    consumers._mark(client, CONSUMER, consumers.PAUSED, "rebuild:done-run")
    consumers._mark(client, CONSUMER, consumers.RESUMED, "rebuild:done-run")
    rows = client.query(
        "SELECT source_id, target_table, toString(last_processed_ts), batch_id, status, rows, toString(updated_at), "
        "version FROM chmv_meta.watermarks ORDER BY version"
    ).result_rows

print("-- chmv_meta.watermarks as chmv before typed records wrote it (record_legacy_rows.py)")
print(next(s for s in META_DDL if "chmv_meta.watermarks" in s) + ";")
print(
    "INSERT INTO chmv_meta.watermarks (source_id, target_table, last_processed_ts, batch_id, status, rows, updated_at, version) VALUES"
)
values = []
for source_id, target_table, ts, batch, status, count, updated, version in rows:
    quoted = ", ".join(f"'{v}'" for v in (source_id, target_table, ts, batch, status))
    values.append(f"({quoted}, {count}, '{updated}', {version})")
print(",\n".join(values) + ";")

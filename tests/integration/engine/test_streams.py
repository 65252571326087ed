"""No statement chmv sends reads a stream-engine table (it would consume the messages its consumer needs).

The Kafka-fed fixture runs as its local twin on the embedded engine (a Kafka table cannot be created there: its
stand-in is a Null table of the same name). Every statement of every rebuild, parity check, staleness measure and
lifecycle plan of every target is recorded from a real client; none names a stream table, and the consumers' own
targets are refused with the reason.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from chmv_assets.cli import main
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.health.parity import parity_for_partitions
from chmv_assets.engine.health.staleness import measure_staleness
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.rebuild.executor import rebuild_partitions
from chmv_assets.engine.rebuild.planner import streamed_triggers
from chmv_assets.errors import RebuildRefused
from resources.clickhouse import ClickHouseResource

KAFKA_CHAIN = Path(__file__).resolve().parents[2] / "fixtures" / "schemas" / "kafka_chain"
STREAMS = ("order_events_queue", "invoice_files")  # Kafka, S3Queue


class _Recorder:
    """A real client whose queries and commands are also written down."""

    def __init__(self, client, statements: list[str]):
        self._client, self._statements = client, statements

    def query(self, sql, *args, **kwargs):
        self._statements.append(str(sql))
        return self._client.query(sql, *args, **kwargs)

    def command(self, sql, *args, **kwargs):
        self._statements.append(str(sql))
        return self._client.command(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


class Recording:
    """A client factory over a resource that records every statement of every client it opens."""

    def __init__(self, resource: ClickHouseResource):
        self.resource = resource
        self.statements: list[str] = []

    @contextmanager
    def get_client(self, **kwargs) -> Iterator[_Recorder]:
        with self.resource.get_client(**kwargs) as client:
            yield _Recorder(client, self.statements)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    dsn = f"chdb://{tmp_path_factory.mktemp('streams') / 'chdb'}"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["apply", "--ddl-dir", str(KAFKA_CHAIN), "--dsn", dsn]) == 0
    resource = ClickHouseResource(dsn=dsn)
    with resource.get_client() as client:  # messages through the Kafka stand-in, files through the S3Queue one
        client.command(
            "INSERT INTO shop.order_events_queue (order_id, customer_id, status, amount_cents, currency, occurred_at, "
            "_partition, _offset) SETTINGS insert_allow_materialized_columns = 1 SELECT number, number % 50, ['paid', 'created'][number % 2 + 1], number * 10, 'EUR', "
            "toDateTime64('2026-06-01 00:00:00', 3, 'UTC') + number * 600, 0, number FROM numbers(3000)"
        )
        client.command(
            "INSERT INTO shop.invoice_files (invoice_id, order_id, issued_at, _file) "
            "SETTINGS insert_allow_materialized_columns = 1 VALUES ('inv-1', 1, '2026-06-02 12:00:00', 'a.jsonl')"
        )
    return load(KAFKA_CHAIN, twin=True), resource


def test_no_statement_of_rebuilds_checks_staleness_or_plans_reads_a_stream(deployed):
    loaded, resource = deployed
    recording = Recording(resource)
    june = window_at(datetime(2026, 6, 1), "month")
    refused = {}
    for target in loaded.project.targets:
        table = loaded.project.table(target)
        windows = [None] if table is None or table.partition_by is None else [june]
        if not streamed_triggers(loaded, target):
            for w in windows:
                rebuild_partitions(recording, loaded, target, [w], force=True)
        else:
            with pytest.raises(RebuildRefused) as refusal:
                rebuild_partitions(recording, loaded, target, windows)
            refused[target.fqn] = str(refusal.value)
        with recording.get_client() as client:
            (result,) = parity_for_partitions(client, loaded, target, windows[:1])
            assert result.passed, result.describe()
    with recording.get_client() as client:
        measure_staleness(client, loaded)
        plan_lifecycle(client, loaded)
    assert set(refused) == {"shop.order_events", "shop.order_events_dead_letters", "shop.invoices"}
    assert all("is a stream: chmv never reads one" in r for r in refused.values())
    assert (
        sum(s.startswith("ALTER TABLE `shop`.`revenue_") and "REPLACE PARTITION" in s for s in recording.statements)
        == 2
    )  # the two targets read from consumers' targets were rebuilt
    reading = [s for s in recording.statements if any(stream in s for stream in STREAMS)]
    assert reading == []

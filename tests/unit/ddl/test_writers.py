"""Who writes each source: from the DDL (chains, stream consumers, refreshable MVs) and [writers] of chmv.toml."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.writers import Writer
from chmv_assets.errors import DDLError

from support.ddl import load_ddl, ref

DDL = """
CREATE DATABASE d;
CREATE TABLE d.app (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.queue (ts DateTime, v UInt64) ENGINE = Kafka SETTINGS kafka_broker_list = 'k:9092',
    kafka_topic_list = 't', kafka_group_name = 'g', kafka_format = 'JSONEachRow';
CREATE TABLE d.landed (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.consumer TO d.landed AS SELECT ts, v FROM d.queue;
CREATE TABLE d.hourly (h DateTime, n UInt64) ENGINE = SummingMergeTree ORDER BY h;
CREATE MATERIALIZED VIEW d.hourly_mv TO d.hourly AS SELECT toStartOfHour(ts) AS h, count() AS n FROM d.landed GROUP BY h;
CREATE MATERIALIZED VIEW d.app_mv TO d.hourly AS SELECT toStartOfHour(ts) AS h, count() AS n FROM d.app GROUP BY h;
CREATE TABLE d.daily (d Date, n UInt64) ENGINE = SummingMergeTree ORDER BY d;
CREATE MATERIALIZED VIEW d.daily_mv TO d.daily AS SELECT toDate(h) AS d, sum(n) AS n FROM d.hourly GROUP BY d;
"""


def test_a_root_table_is_written_by_others_unless_chmv_toml_says_only_chmv(tmp_path):
    loaded = load_ddl(tmp_path, DDL)
    assert loaded.writers(ref("d.app")).writers == {Writer.OTHERS}
    assert loaded.writers(ref("d.app")).uncontrolled
    loaded = load_ddl(tmp_path / "b", DDL, toml='[writers]\nchmv = ["d.app"]\n')
    assert loaded.writers(ref("d.app")).writers == {Writer.CHMV} and not loaded.writers(ref("d.app")).uncontrolled
    loaded = load_ddl(
        tmp_path / "c", DDL, toml='default_database = "d"\n[writers]\ndefault = "chmv"\nothers = ["app"]\n'
    )
    assert loaded.writers(ref("d.app")).writers == {Writer.OTHERS}


def test_a_stream_consumers_target_is_written_by_the_consumer_which_can_be_paused(tmp_path):
    writers = load_ddl(tmp_path, DDL).writers(ref("d.landed"))
    assert writers.writers == {Writer.STREAM} and writers.consumers == (ref("d.consumer"),)
    assert writers.pausable and not writers.uncontrolled
    assert writers.describe() == "d.landed: stream consumers (consumers: d.consumer)"


def test_a_chain_inherits_the_writers_of_every_trigger_up_it(tmp_path):
    writers = load_ddl(tmp_path, DDL).writers(ref("d.daily"))
    assert writers.writers == {Writer.STREAM, Writer.OTHERS}  # d.landed's consumer and d.app's applications
    assert writers.consumers == (ref("d.consumer"),)
    assert set(writers.roots) == {ref("d.app")}  # a stream table is not a root: nothing inserts into it
    assert not writers.pausable  # others write it too: an open partition is deferred, not paused


def test_a_table_an_mv_writes_gets_others_only_where_chmv_toml_says(tmp_path):
    loaded = load_ddl(tmp_path, DDL, toml='[writers]\ndefault = "chmv"\nothers = ["d.hourly"]\n')
    assert loaded.writers(ref("d.hourly")).writers == {Writer.STREAM, Writer.CHMV, Writer.OTHERS}


def test_a_name_the_ddl_does_not_define_is_an_error_at_its_line(tmp_path):
    with pytest.raises(
        DDLError,
        match=r"chmv\.toml:3:1: \[writers\] chmv names d\.ap, which the DDL directory does "
        r"not define",
    ):
        load_ddl(tmp_path, DDL, toml='[writers]\ndefault = "others"\nchmv = ["d.ap"]\n')


def test_on_the_local_twin_a_stream_stand_in_is_written_like_an_application(tmp_path):
    """The twin's stand-in for a Kafka table is a Null table: a paused consumer would lose what is inserted into it,
    so its target is written by others (open partitions deferred), never paused."""
    from chmv_assets.ddl.loader import load

    load_ddl(tmp_path, DDL)
    writers = load(tmp_path, twin=True).writers(ref("d.landed"))
    assert writers.writers == {Writer.OTHERS} and writers.consumers == ()

"""Pacing without an engine: which errors are retried, how inserts are cut, what makes an insert wait."""

from __future__ import annotations

from pathlib import Path

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from chmv_assets.ddl.config import PacingConfig
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.loads.load import hourly
from chmv_assets.engine.pacing.pacer import Pacer, chunks, retry_reason, written_by_insert
from chmv_assets.engine.pacing.pressure import Load, ServerLimits, settings_of


def _ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "Code: 252. DB::Exception: Too many parts (300 with average size of 1.00 KiB) in table 'a.b'. Merges are "
            "processing significantly slower than inserts. (TOO_MANY_PARTS)",
            "TOO_MANY_PARTS",
        ),
        (
            'Code: 473. DB::Exception: WRITE locking attempt on "a.b" has timed out! (120000ms) Possible deadlock '
            "avoided. (DEADLOCK_AVOIDED)",
            "DEADLOCK_AVOIDED",
        ),
        (
            "Code: 202. DB::Exception: Too many simultaneous queries. Maximum: 100. (TOO_MANY_SIMULTANEOUS_QUERIES)",
            "TOO_MANY_SIMULTANEOUS_QUERIES",
        ),
        # the same code, but no pause fixes it: the insert spans more partitions than a block may
        (
            "Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). (TOO_MANY_PARTS)",
            None,
        ),
        ("Code: 60. DB::Exception: Unknown table expression identifier 'a.b'. (UNKNOWN_TABLE)", None),
        ("Code: 159. DB::Exception: Timeout exceeded: elapsed 3600 seconds. (TIMEOUT_EXCEEDED)", None),
    ],
)
def test_only_refusals_that_wrote_nothing_are_retried(message: str, reason: str | None) -> None:
    assert retry_reason(DatabaseError(message)) == reason


def test_a_lost_connection_is_never_retried() -> None:
    """The statement may have run: a retry could write twice (the caller's repair handles it)."""
    assert retry_reason(OperationalError("Error HTTPConnectionPool: Read timed out. (TOO_MANY_PARTS)")) is None


def test_chunks_keep_order_and_their_limit() -> None:
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert chunks(list(range(7)), 0) == [list(range(7))]  # no limit
    assert chunks([1, 2], 5) == [[1, 2]] and chunks([], 3) == []


def test_table_settings_override_the_server_limits() -> None:
    engine_full = (
        "MergeTree PARTITION BY d ORDER BY x SETTINGS parts_to_delay_insert = 3, "
        "parts_to_throw_insert = 4, index_granularity = 8192"
    )
    assert settings_of(engine_full) == {"parts_to_delay_insert": 3, "parts_to_throw_insert": 4}
    assert settings_of("MergeTree ORDER BY x SETTINGS index_granularity = 8192") == {}


def test_an_insert_into_a_source_writes_the_chain_below_it(example) -> None:
    written = written_by_insert(example.project, _ref("analytics.raw_events"))
    assert [r.fqn for r in written] == [
        "analytics.raw_events",
        "analytics.events_agg",
        "analytics.events_daily",
        "analytics.events_weekly",
    ]
    assert [r.fqn for r in written_by_insert(example.project, _ref("analytics.all_events"))] == [
        "analytics.all_events",
        "analytics.error_events",
        "analytics.metric_events",
        "analytics.audit_log",
    ]


def test_ingestion_cuts_by_hour_where_a_table_it_writes_is_partitioned_by_hour(example, tmp_path: Path) -> None:
    project = example.project
    assert not hourly(example, written_by_insert(project, _ref("analytics.api_requests")))  # daily and monthly
    (tmp_path / "a.sql").write_text(
        "CREATE TABLE a.src (ts DateTime, n UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;\n"
        "CREATE TABLE a.hourly (hour DateTime, n UInt64) ENGINE = SummingMergeTree PARTITION BY toStartOfHour(hour) "
        "ORDER BY hour;\nCREATE MATERIALIZED VIEW a.mv TO a.hourly AS SELECT toStartOfHour(ts) AS hour, sum(n) AS n "
        "FROM a.src GROUP BY hour;\n"
    )
    loaded = load(tmp_path)
    assert hourly(loaded, written_by_insert(loaded.project, _ref("a.src")))


def _pacer(**rules) -> Pacer:
    """A pacer that already knows the server (no client needed for its decisions)."""
    pacer = Pacer(None, PacingConfig(**rules))  # type: ignore[arg-type]
    pacer._server = ServerLimits(
        {"parts_to_delay_insert": 10, "parts_to_throw_insert": 20, "max_parts_in_total": 1000},
        max_partitions_per_insert_block=100,
        background_pool_size=16,
    )
    pacer._tables = {
        _ref("a.t"): {"parts_to_delay_insert": 10, "parts_to_throw_insert": 20, "max_parts_in_total": 1000},
        _ref("a.low"): {"parts_to_delay_insert": 10, "parts_to_throw_insert": 3, "max_parts_in_total": 1000},
        _ref("a.gone"): None,
    }
    return pacer


def test_what_makes_an_insert_wait() -> None:
    pacer = _pacer()
    t, low = _ref("a.t"), _ref("a.low")
    assert pacer.wait_at(t) == 8  # 0.8 x parts_to_delay_insert
    assert pacer.wait_at(low) == 3  # a throw limit below that wins
    assert pacer.wait_at(_ref("a.gone")) is None  # not on the server: nothing to hold it
    assert pacer.concurrency() == 8 and pacer.partitions_per_insert() == 100  # background_pool_size / 2; the server's
    thresholds = {t: 8, low: 3}
    idle = Load({t: ("202608", 7), low: ("all", 2)}, pool_busy=3, pool_size=32, running=2)
    assert pacer._reasons(idle, thresholds, waited=0) == ([], 1)
    reasons, _ = pacer._reasons(Load({t: ("202608", 8)}, running=0), thresholds, waited=0)
    assert reasons == [
        "partition 202608 of a.t holds 8 active parts (chmv waits from 8: 0.8 x parts_to_delay_insert=10;"
        " the server refuses inserts at parts_to_throw_insert=20) while merges catch up (0 merge/mutation "
        "tasks running)"
    ]
    busy_pool = Load({}, pool_busy=32, pool_size=32)
    assert "the merge pool is busy (32 of 32" in pacer._reasons(busy_pool, {}, waited=0)[0][0]
    assert pacer._reasons(busy_pool, {}, waited=200)[0] == []  # a busy pool alone holds an insert 120 s at most
    crowded = Load({}, running=8)
    assert "8 chmv inserts already run on the server (at most 8 at once" in pacer._reasons(crowded, {}, waited=0)[0][0]
    assert _pacer(max_concurrency=9)._reasons(crowded, {}, waited=0)[0] == []
    assert _pacer(max_partitions_per_insert=7).partitions_per_insert() == 7


def test_pauses_double_with_jitter_up_to_the_max() -> None:
    pacer = _pacer()  # seed 003: base 2 s, max 30 s
    pauses = [[pacer._pause(n) for _ in range(50)] for n in range(1, 7)]
    assert all(1.5 <= p <= 2.5 for p in pauses[0]) and all(3.0 <= p <= 5.0 for p in pauses[1])
    assert all(p <= 30.0 for row in pauses for p in row) and max(pauses[5]) > 25
    assert len({round(p, 6) for p in pauses[2]}) > 1  # jittered

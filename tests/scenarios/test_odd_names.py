"""Names that sanitize alike, quotes, spaces, dots and unicode: one asset per target, exact rebuilds, no drift."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance, materialize

from asset_checks.definitions import DRIFT
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.errors import DDLError
from chmv_assets.orchestration.assets import build_chmv_assets
from chmv_assets.orchestration.definitions import build_definitions
from chmv_assets.orchestration.translator import ChmvTranslator
from chmv_assets.sql.quoting import qualified
from resources.clickhouse import ClickHouseResource

from support.checks import TRANSLATOR, evaluations, run_checks
from support.engines import make_engine

ODD_DDL = """
CREATE DATABASE `my-db` ENGINE = Atomic;
CREATE DATABASE my_db ENGINE = Atomic;
CREATE DATABASE `données` ENGINE = Atomic;

CREATE TABLE `my-db`.`my src` (ts DateTime, `user id` UInt64, kind LowCardinality(String), v Float64)
ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;

-- Two targets whose names sanitize alike, in a database whose name sanitizes like another one's.
CREATE TABLE `my-db`.`a-b` (day Date, kind String, n UInt64)
ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (day, kind);
CREATE MATERIALIZED VIEW `my-db`.`a-b mv` TO `my-db`.`a-b` AS
SELECT toDate(ts) AS day, kind, count() AS n FROM `my-db`.`my src` GROUP BY day, kind;

CREATE TABLE `my-db`.`a_b` (day Date, kind String, n UInt64)
ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (day, kind);
CREATE MATERIALIZED VIEW `my-db`.a_b_mv TO `my-db`.`a_b` AS
SELECT toDate(ts) AS day, kind, sum(`user id`) AS n FROM `my-db`.`my src` WHERE v > 0 GROUP BY day, kind;

CREATE TABLE my_db.`a-b` (ts DateTime, kind String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW my_db.`a-b mv` TO my_db.`a-b` AS SELECT ts, kind FROM `my-db`.`my src` WHERE kind = 'x';

-- A TO target named with a quote and a space, partitioned by day.
CREATE TABLE `my-db`.`it's "q"` (hour DateTime, `user id` UInt64, total Float64)
ENGINE = MergeTree PARTITION BY toYYYYMMDD(hour) ORDER BY (hour, `user id`);
CREATE MATERIALIZED VIEW `my-db`.`q-mv` TO `my-db`.`it's "q"` AS
SELECT toStartOfHour(ts) AS hour, `user id`, v AS total FROM `my-db`.`my src`;

-- Unicode and a dot in a name, one chain hop down from `a-b`.
CREATE TABLE `données`.`événements.jour` (day Date, n UInt64)
ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW `données`.`ü mv` TO `données`.`événements.jour` AS
SELECT day, n FROM `my-db`.`a-b`;
"""


def ref(database: str, name: str) -> ObjectRef:
    return ObjectRef(database=database, name=name)


SOURCE = ref("my-db", "my src")
# target: (partition key rebuilt, filter of that partition on the target, recompute from the source)
TARGETS = {
    ref("my-db", "a-b"): (
        "2026-03-01",
        "toYYYYMM(day) = 202603",
        "SELECT toDate(ts), kind, count() FROM `my-db`.`my src` WHERE toYYYYMM(ts) = 202603 GROUP BY ALL",
    ),
    ref("my-db", "a_b"): (
        "2026-03-01",
        "toYYYYMM(day) = 202603",
        "SELECT toDate(ts), kind, sum(`user id`) FROM `my-db`.`my src` WHERE v > 0 AND toYYYYMM(ts) = 202603 "
        "GROUP BY ALL",
    ),
    ref("my_db", "a-b"): (
        "2026-03-01",
        "toYYYYMM(ts) = 202603",
        "SELECT ts, kind FROM `my-db`.`my src` WHERE kind = 'x' AND toYYYYMM(ts) = 202603",
    ),
    ref("my-db", 'it\'s "q"'): (
        "2026-03-02",
        "toDate(hour) = '2026-03-02'",
        "SELECT toStartOfHour(ts), `user id`, v FROM `my-db`.`my src` WHERE toDate(ts) = '2026-03-02'",
    ),
    ref("données", "événements.jour"): (
        "2026-03-01",
        "toYYYYMM(day) = 202603",
        "SELECT toDate(ts), count() FROM `my-db`.`my src` WHERE toYYYYMM(ts) = 202603 GROUP BY ALL",
    ),
}
SUMMED = {ref("my-db", "a-b"), ref("my-db", "a_b"), ref("données", "événements.jour")}


def finalized(target: ObjectRef, where: str) -> str:
    """The target's partition as its engine means it (SummingMergeTree rows summed by key)."""
    if target in SUMMED:
        keys = "day, kind" if target.database == "my-db" else "day"
        return f"SELECT {keys}, sum(n) FROM {qualified(target)} WHERE {where} GROUP BY ALL"
    return f"SELECT * FROM {qualified(target)} WHERE {where}"


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    ddl = tmp_path_factory.mktemp("odd_ddl")
    (ddl / "odd.sql").write_text(ODD_DDL, encoding="utf-8")
    return load(ddl, default_database="my-db", partition_start="2026-01-01")


def test_one_asset_per_target_with_the_exact_name_in_metadata(odd) -> None:
    assert set(odd.project.targets) == set(TARGETS)
    graph = (
        build_definitions(odd, clickhouse=ClickHouseResource(dsn="chdb:///nonexistent"))
        .get_repository_def()
        .asset_graph
    )
    keys = {target: TRANSLATOR.get_asset_key(target) for target in TARGETS}
    assert len(set(keys.values())) == len(TARGETS)
    materializable = {k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable}
    assert materializable == set(keys.values())
    for target, key in keys.items():
        node = graph.get(key)
        assert node.metadata["chmv/object"] == target.fqn
        assert (node.metadata["chmv/database"], node.metadata["chmv/table"]) == (target.database, target.name)
        assert all(part.isascii() and part.replace("_", "").isalnum() for part in key.path)
    assert graph.get(keys[ref("my-db", "a-b")]).group_name != graph.get(keys[ref("my_db", "a-b")]).group_name
    assert graph.get(keys[ref("données", "événements.jour")]).parent_keys == {keys[ref("my-db", "a-b")]}
    assert graph.get(keys[ref("my-db", 'it\'s "q"')]).parent_keys == {TRANSLATOR.get_asset_key(SOURCE)}
    # Plain names keep the keys they always had.
    assert TRANSLATOR.get_asset_key(ref("my_db", "a_b")) == AssetKey(["my_db", "a_b"])


def test_every_target_rebuilds_its_partition_exactly_and_passes_drift(tmp_path: Path, odd) -> None:
    engine = make_engine(tmp_path / "chdb", odd)
    with engine.get_client() as client:
        client.command(
            "INSERT INTO `my-db`.`my src` SELECT toDateTime('2026-02-20 00:00:00') + number * 1800, "
            "number % 97, ['x', 'y', 'z'][number % 3 + 1], (number % 11) - 3 FROM numbers(48 * 40)"
        )
        expected = {t: sorted(client.query(sql).result_rows) for t, (_key, _where, sql) in TARGETS.items()}
        for target, (_key, where, _sql) in TARGETS.items():  # the live MVs agree with the recompute
            assert expected[target], target
            assert sorted(client.query(finalized(target, where)).result_rows) == expected[target], target
        for target, (_key, where, _sql) in TARGETS.items():  # then every partition is doubled
            client.command(f"INSERT INTO {qualified(target)} SELECT * FROM {qualified(target)} WHERE {where}")
            assert sorted(client.query(finalized(target, where)).result_rows) != expected[target], target

    assets = [a for a in build_chmv_assets(odd) if hasattr(a, "op")]
    by_key = {TRANSLATOR.get_asset_key(t): t for t in TARGETS}
    for partition in sorted({key for key, _where, _sql in TARGETS.values()}):
        selection = [k for k, t in by_key.items() if TARGETS[t][0] == partition]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = materialize(assets, selection=selection, partition_key=partition, resources={"clickhouse": engine})
        assert result.success
        done = {event.asset_key for event in result.get_asset_materialization_events()}
        assert done == set(selection)

    with engine.get_client() as client:
        for target, (_key, where, _sql) in TARGETS.items():
            assert sorted(client.query(finalized(target, where)).result_rows) == expected[target], target
        assert int(client.command("SELECT count() FROM system.tables WHERE name LIKE '\\\\_chmv\\\\_shadow%'")) == 0

    drift_keys = [AssetCheckKey(TRANSLATOR.get_asset_key(t), DRIFT) for t in TARGETS]
    result = run_checks(odd, engine, drift_keys, DagsterInstance.ephemeral())
    checked = evaluations(result, DRIFT)
    assert len(checked) == len(TARGETS)
    assert all(e.passed for e in checked), [e.metadata["chmv/diff"].value for e in checked if not e.passed]

    # The check still sees a real change of the quoted TO target.
    quoted = ref("my-db", 'it\'s "q"')
    with engine.get_client() as client:
        client.command('CREATE TABLE `my-db`.`it\'s "q" 2` AS `my-db`.`it\'s "q"`')
        client.command("DROP VIEW `my-db`.`q-mv` SYNC")
        client.command(
            'CREATE MATERIALIZED VIEW `my-db`.`q-mv` TO `my-db`.`it\'s "q" 2` AS '
            "SELECT toStartOfHour(ts) AS hour, `user id`, v AS total FROM `my-db`.`my src`"
        )
    result = run_checks(
        odd, engine, [AssetCheckKey(TRANSLATOR.get_asset_key(quoted), DRIFT)], DagsterInstance.ephemeral()
    )
    (evaluation,) = evaluations(result, DRIFT)
    diff = evaluation.metadata["chmv/diff"].value
    assert not evaluation.passed and '| my-db.q-mv | target_changed | my-db.it\'s "q" | my-db.it\'s "q" 2 |' in diff


def test_a_translator_that_merges_two_objects_is_a_ddl_error_naming_both(odd) -> None:
    class NameOnly(ChmvTranslator):
        def get_asset_key(self, ref: ObjectRef) -> AssetKey:
            return AssetKey([ref.name.replace("-", "_").replace(" ", "_")])

    with pytest.raises(DDLError) as caught:
        build_definitions(odd, translator=NameOnly(), clickhouse=ClickHouseResource(dsn="chdb:///nonexistent"))
    message = str(caught.value)
    assert "`my-db`.`a-b` and `my-db`.`a_b` map to the same asset key 'a_b'" in message
    assert "`my-db`.`a-b` and `my_db`.`a-b`" in message and "NameOnly.get_asset_key" in message
    assert "odd.sql:" in message

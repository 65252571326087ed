"""The shrink guard's measures: the figures of a table that only fall when rows (or magnitude) go (issue 25, 5)."""

from __future__ import annotations

import pytest

from chmv_assets.engine.rebuild.shrink_guard import _fell, totals

from support.ddl import load_ddl, ref

DDL = """
CREATE TABLE d.plain (ts DateTime, n UInt32, delta Int64, price Float64, name String, e UInt8 EPHEMERAL)
ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.summing (day Date, k UInt16, hits UInt64, note_id UInt32) ENGINE = SummingMergeTree((hits))
ORDER BY (k, day);
CREATE TABLE d.aggregating (day Date, k UInt16, hits AggregateFunction(count), total AggregateFunction(sum, Int32),
users AggregateFunction(uniq, UInt64), p99 AggregateFunction(quantile(0.99), UInt32),
top SimpleAggregateFunction(max, UInt64), kept SimpleAggregateFunction(sum, UInt64), any_n UInt32)
ENGINE = AggregatingMergeTree ORDER BY (k, day);
CREATE TABLE d.collapsing (k UInt64, amount UInt32, sign Int8) ENGINE = CollapsingMergeTree(sign) ORDER BY k;
CREATE TABLE d.replacing (k UInt64, v UInt64, version UInt32) ENGINE = ReplacingMergeTree(version) ORDER BY k;
"""


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    loaded = load_ddl(tmp_path_factory.mktemp("ddl"), DDL, toml='default_database = "d"')
    return {name: loaded.project.table(ref(f"d.{name}")) for name in DDL_NAMES}


DDL_NAMES = ("plain", "summing", "aggregating", "collapsing", "replacing")


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        (
            "plain",  # every numeric column; a signed one by its positive and its negative part
            [
                "sum(n)",
                "sum(delta) of its positive values",
                "sum(-delta) of its negative values",
                "sum(price) of its positive values",
                "sum(-price) of its negative values",
            ],
        ),
        ("summing", ["sum(k)", "sum(hits)"]),  # note_id is not summed: an arbitrary row's value after a merge
        (
            "aggregating",  # exact, summable states; not uniq, quantile, max nor a plain column (any value)
            [
                "sum(k)",
                "sum(finalizeAggregation(hits))",
                "sum(finalizeAggregation(total)) of its positive values",
                "sum(-finalizeAggregation(total)) of its negative values",
                "sum(kept)",
            ],
        ),
        ("collapsing", ["sum(k)"]),  # the sign and the surviving row's values are bookkeeping
        ("replacing", ["sum(k)"]),
    ],
    ids=DDL_NAMES,
)
def test_the_measures_of_each_engine(tables, name, labels):
    assert [t.label for t in totals(tables[name])] == labels


def test_integers_are_exact_and_floats_have_slack(tables):
    exact = {t.label: t.exact for t in totals(tables["plain"])}
    assert exact["sum(n)"] and not exact["sum(price) of its positive values"]
    assert _fell(99, 100, exact=True) and not _fell(100, 100, exact=True)
    assert not _fell(1e12 - 1e3, 1e12, exact=False) and _fell(1e12 - 1e6, 1e12, exact=False)
    assert not _fell(float("nan"), 5.0, exact=False)

"""The checker fails on planted anomalies: a doubled row, a lost row, a mixed read, overlapping commits (a checker
that cannot fail proves nothing)."""

from __future__ import annotations

from chmv_assets.certify import checker
from chmv_assets.certify.expected import _merge_call, same
from chmv_assets.certify.faults import choose_faults
from chmv_assets.certify.history import FAILED, OK, UNCERTAIN, History

OLD, NEW = (10, 111, (2.5,)), (11, 222, (3.0,))


def test_partitions_that_differ_are_found_and_equal_ones_pass() -> None:
    assert checker.compare_partitions({"202611": OLD}, {"202611": OLD}) == []
    doubled = (11, 111 + 7, (2.5,))
    assert checker.compare_partitions({"202611": doubled}, {"202611": OLD}) == [("202611", doubled, OLD)]
    assert "1 extra" in checker.describe_difference(doubled, OLD)
    assert checker.compare_partitions({}, {"202610": OLD})[0][0] == "202610"  # a partition lost whole
    assert "10 lost" in checker.describe_difference(None, OLD)
    same_count = (10, 999, (2.5,))  # same rows count, other content
    assert checker.compare_partitions({"p": same_count}, {"p": OLD})


def test_float_sums_compare_within_rounding_only() -> None:
    assert same((3, 5, (0.1 + 0.2,)), (3, 5, (0.3,)))
    assert not same((3, 5, (0.31,)), (3, 5, (0.3,)))


def test_rows_acknowledged_once_uncertain_at_most_once() -> None:
    inserts = [("insert-1", 1, 3, OK), ("insert-2", 4, 2, UNCERTAIN), ("insert-3", 6, 1, FAILED)]
    assert checker.row_anomalies({1: 1, 2: 1, 3: 1, 4: 1}, inserts, "db.src") == []
    lost = checker.row_anomalies({1: 1, 3: 1}, inserts, "db.src")
    assert [a.suspect for a in lost] == ["lost acknowledged insert"] and lost[0].ops == ["insert-1"]
    doubled = checker.row_anomalies({1: 1, 2: 2, 3: 1, 5: 2}, inserts, "db.src")
    assert [a.ops for a in doubled] == [["insert-1"], ["insert-2"]]
    stranger = checker.row_anomalies({1: 1, 2: 1, 3: 1, 99: 1}, inserts, "db.src")
    assert "nobody inserted" in stranger[0].message


def test_a_mixed_read_is_found() -> None:
    samples = [(0.1, OLD), (0.2, NEW), (0.3, (10, 222, (3.0,)))]
    found = checker.mixed_reads(samples, [OLD, NEW], "db.t", "202611")
    assert len(found) == 1 and found[0].prop == "f"


def test_overlapping_commits_of_one_partition_are_found() -> None:
    history = History()
    a = history.begin("materialize", "chmv", ["db.t|2026-11-01"])
    b = history.begin("materialize", "chmv", ["db.t|2026-11-01"])
    history.end(a, OK, held=(1.0, 2.0))
    history.end(b, OK, held=(1.5, 2.5))
    assert [x.ops for x in checker.overlapping_commits(history)] == [[a.id, b.id]]
    history.ops[1].detail["held"] = (2.0, 3.0)
    assert checker.overlapping_commits(history) == []


def test_merge_calls_and_fault_names() -> None:
    assert _merge_call("AggregateFunction(quantile(0.99), UInt32)", "`p`") == "quantileMerge(0.99)(`p`)"
    assert _merge_call("AggregateFunction(sum, UInt64)", "`s`") == "sumMerge(`s`)"
    assert _merge_call("AggregateFunction(count)", "`c`") == "countMerge(`c`)"
    assert choose_faults("none", 1) == () and "kill" in choose_faults("all", 1)
    assert choose_faults(None, 7) == choose_faults(None, 7)  # drawn by the seed: replayable

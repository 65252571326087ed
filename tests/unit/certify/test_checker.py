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


def test_d_a_success_must_leave_its_partitions_exact_and_a_failure_must_name_its_damage() -> None:
    from chmv_assets.certify.probes import Snapshot, judge

    history = History()
    exact = Snapshot({"202611": OLD}, {"202611": OLD})
    short = Snapshot({"202611": OLD}, {"202611": NEW})  # the live partition lacks rows its SELECT gives
    ok = history.end(history.begin("materialize", "chmv", ["db.t|2026-11"]), OK)
    assert judge(ok, "db.t", exact, exact, history) == []
    (found,) = judge(ok, "db.t", exact, short, history)
    assert found.prop == "d" and "reported success" in found.message
    quiet = history.end(
        history.begin("materialize", "chmv", ["db.t|2026-11"]),
        FAILED,
        error="RacedWrites: the live partition is as it was",
    )
    (hidden,) = judge(quiet, "db.t", exact, short, history)
    assert "as it was" in hidden.message
    silent = history.end(history.begin("materialize", "chmv", ["db.t|2026-11"]), FAILED, error="LeaseHeld: busy")
    assert "names no damage" in judge(silent, "db.t", exact, short, history)[0].message
    named = history.end(
        history.begin("materialize", "chmv", ["db.t|2026-11"]), FAILED, error="RacedWrites: 2026-11 may have lost rows"
    )
    assert judge(named, "db.t", exact, short, history) == []
    assert judge(quiet, "db.t", short, short, history) == []  # inexact before it: not this failure's damage


def test_e_from_the_leases_two_holders_or_a_claim_before_the_release() -> None:
    from chmv_assets.certify.verify import lease_findings

    lease = "rebuild:db.t:202611"
    clean = [
        (lease, 1, "a", 0, 0, 1.0),
        (lease, 1, "a", 0, 5, 1.2),
        (lease, 1, "a", 1, 6, 1.5),
        (lease, 2, "b", 0, 0, 1.6),
        (lease, 2, "b", 1, 7, 2.0),
    ]
    assert lease_findings(clean) == []
    early = [*clean[:3], (lease, 2, "b", 0, 0, 1.3), (lease, 2, "b", 1, 7, 2.0)]
    (found,) = lease_findings(early)
    assert found.prop == "e" and found.target == "db.t" and found.partition == "202611"
    twice = [*clean, (lease, 2, "c", 0, 9, 1.9)]
    assert "2 runs" in lease_findings(twice)[0].message


def test_a_derived_select_keeps_its_rows_and_changes_its_text() -> None:
    from chmv_assets.certify.operations import derived_select

    assert derived_select("SELECT a, b FROM db.t") == "SELECT a, b FROM db.t WHERE 1 = 1"
    assert (
        derived_select("SELECT a, count() AS n FROM db.t WHERE a > 1 OR b = 'x where' GROUP BY a")
        == "SELECT a, count() AS n FROM db.t WHERE (a > 1 OR b = 'x where') AND 1 = 1 GROUP BY a"
    )
    assert derived_select("SELECT a FROM db.t AS s JOIN (SELECT a FROM db.u WHERE 1) AS u USING a\nGROUP BY a") == (
        "SELECT a FROM db.t AS s JOIN (SELECT a FROM db.u WHERE 1) AS u USING a WHERE 1 = 1 GROUP BY a"
    )
    assert derived_select("SELECT a FROM db.t UNION ALL SELECT a FROM db.u") is None


def test_a_target_read_back_by_its_own_mvs_is_walked_once_and_not_recomputed() -> None:
    """any_mv's ``first_seen`` MV reads its own target (``NOT IN (SELECT user_id FROM first_seen)``) and ``user_days``'s
    reads a table below it: the targets are ordered once each (the walk took the self-read round 50 times: 51 copies
    of one anomaly), and neither is compared with a SELECT over the sources, which cannot recompute what each insert
    saw of the target then."""
    from pathlib import Path

    from chmv_assets.certify.expected import ordered_targets, verifiable
    from chmv_assets.ddl.loader import load

    loaded = load(Path(__file__).resolve().parents[2] / "fixtures" / "schemas" / "any_mv", twin=True)
    order = [t.fqn for t in ordered_targets(loaded)]
    assert len(order) == len(set(order)) == len(loaded.project.targets)
    judged = {t.fqn: verifiable(loaded, t) for t in ordered_targets(loaded)}
    assert judged["feed.first_seen"] is False and judged["feed.user_days"] is False
    assert judged["feed.returning_daily"] is True


def test_d_judges_the_error_chmv_raised_not_dagsters_wrapper_of_it() -> None:
    """A failed materialization is recorded with the error chmv raised: Dagster's step failure wraps it ("Error
    occurred while executing op …"), which names no damage and says nothing of "as it was" (d) could judge."""
    from dagster._utils.error import SerializableErrorInfo

    from chmv_assets.certify.operations import step_error
    from chmv_assets.certify.probes import Snapshot, judge

    said = (
        "chmv_assets.errors.RacedWrites: t 2026-11-14: writes raced the read (not swapped), through 3 attempts; "
        "the last read was not swapped: the live partition is as it was."
    )
    raised = SerializableErrorInfo(said + "\n", [], "RacedWrites")
    wrapper = SerializableErrorInfo(
        'dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op "rebuild":\n',
        [],
        "DagsterExecutionStepExecutionError",
        cause=raised,
    )
    assert step_error(wrapper) == said
    history = History()
    op = history.end(history.begin("materialize", "chmv", ["t|2026-11-14"]), FAILED, error=step_error(wrapper))
    before = Snapshot({"20261114": OLD}, {"20261114": OLD})
    after = Snapshot({"20261114": OLD}, {"20261114": NEW})  # a steady writer's row lost by an earlier swap
    (hidden,) = judge(op, "t", before, after, history)
    assert "as it was" in hidden.message and hidden.suspect.endswith("(class 2)")
    assert "steady_writer" in choose_faults("all", 1) and choose_faults("steady_writer,dst", 1) == (
        "steady_writer",
        "dst",
    )

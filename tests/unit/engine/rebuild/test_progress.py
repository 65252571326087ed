"""A run's progress: k/n partitions, the time since the fills began, and the estimate of the time left (the run's own
pace times the partitions left), told to the caller's report at each swap."""

from __future__ import annotations

import logging

import pytest

from chmv_assets.engine.rebuild.engines.base import StepResult
from chmv_assets.engine.rebuild.progress import Progress, Tally, duration


def result(key: str) -> StepResult:
    return StepResult("db.t", key, "clickhouse", "replace", 0, 10, None, "", 0.1)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.04, "0.0s"), (3.25, "3.2s"), (12.4, "12s"), (65, "1m05s"), (3599.6, "1h00m"), (7620, "2h07m")],
)
def test_a_duration_reads_as_a_person_reads_it(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_the_estimate_is_the_pace_so_far_times_the_partitions_left() -> None:
    progress = Progress(done=4, total=10, elapsed=20.0)
    assert progress.left == 6 and progress.seconds_left == 30.0
    assert progress.describe() == "4/10 partitions, 20s elapsed, ~30s left"
    last = Progress(done=10, total=10, elapsed=50.0)
    assert last.seconds_left == 0.0 and last.describe() == "10/10 partitions, 50s elapsed, done"


class Report:
    def __init__(self) -> None:
        self.told: list[tuple[str | None, Progress]] = []

    def planned(self, plan) -> None:  # not called by a tally
        raise AssertionError

    def swapped(self, result: StepResult, progress: Progress) -> None:
        self.told.append((result.partition, progress))


def test_a_tally_tells_each_swap_with_the_progress_and_logs_it(caplog) -> None:
    now = [100.0]
    report = Report()
    tally = Tally("db.t", 3, report, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="chmv_assets.engine.rebuild.progress")
    for key, at in (("2026-01-01", 102.0), ("2026-01-02", 104.0), ("2026-01-03", 109.0)):
        now[0] = at
        tally.swapped(result(key))
    assert [(k, p.done, p.total, p.elapsed) for k, p in report.told] == [
        ("2026-01-01", 1, 3, 2.0),
        ("2026-01-02", 2, 3, 4.0),
        ("2026-01-03", 3, 3, 9.0),
    ]
    assert [p.seconds_left for _, p in report.told] == [4.0, 2.0, 0.0]
    assert caplog.messages == [
        "db.t 2026-01-01: swapped in; 1/3 partitions, 2.0s elapsed, ~4.0s left",
        "db.t 2026-01-02: swapped in; 2/3 partitions, 4.0s elapsed, ~2.0s left",
        "db.t 2026-01-03: swapped in; 3/3 partitions, 9.0s elapsed, done",
    ]


def test_a_tally_without_a_report_only_counts() -> None:
    tally = Tally("db.t", 2, None, clock=lambda: 0.0)
    tally.swapped(result("a"))
    assert tally.done == 1

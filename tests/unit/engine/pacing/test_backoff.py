"""The one backoff: doubling from the base, jittered within ±25 %, never above the cap."""

from __future__ import annotations

from chmv_assets.engine.pacing.backoff import JITTER, backoff
from chmv_assets.engine.rebuild.planner import MAX_BACKOFF_SECONDS, RaceRules


def test_a_pause_doubles_from_the_base_jittered_and_capped() -> None:
    pauses = [[backoff(n, 2.0, 30.0) for _ in range(200)] for n in range(1, 7)]
    for n, row in enumerate(pauses[:4], start=1):
        doubled = 2.0 * 2 ** (n - 1)
        assert all(doubled * (1 - JITTER) <= p <= doubled * (1 + JITTER) for p in row)
        assert len({round(p, 6) for p in row}) > 1  # jittered: retrying processes spread out
    assert all(p <= 30.0 for row in pauses for p in row) and max(pauses[5]) > 25  # capped after the jitter too
    assert backoff(0, 2.0, 30.0) <= 2.5 and backoff(1, 0.0, 30.0) == 0.0


def test_a_raced_reads_pause_is_the_same_backoff_from_its_second_read() -> None:
    rules = RaceRules(backoff_seconds=1.0)
    assert all(0.75 <= rules.pause(2) <= 1.25 for _ in range(50))  # before the second read: the base
    assert all(1.5 <= rules.pause(3) <= 2.5 for _ in range(50))
    assert all(rules.pause(20) <= MAX_BACKOFF_SECONDS for _ in range(50))

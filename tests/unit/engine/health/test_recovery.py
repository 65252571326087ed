"""Recovery decided once: one retry policy and one typed ledger for every kind of repair, the planner's verdict as a
run tag."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.recovery import (
    VERDICT_TAG,
    Action,
    Ledger,
    RebuildVerdict,
    RepairKind,
    RetryPolicy,
)

T = ObjectRef(database="a", name="b")


def _tick(ledger: Ledger, kind: RepairKind, failing: dict, now: float, resolved=(), held=None) -> list[tuple[str, int]]:
    """One tick of the policy: track, decide, and spend the attempt of every due repair (requested)."""
    ledger.track(kind, failing, resolved, now)
    decisions = ledger.decide(kind, POLICY, now, held)
    for d in decisions:
        if d.action == Action.DUE:
            ledger.spend(d, now)
    return [(d.action.value, d.attempt) for d in decisions]


POLICY = RetryPolicy(max_attempts=2, cooldown_seconds=60)


@pytest.mark.parametrize("kind", list(RepairKind))
def test_one_retry_policy_for_every_repair(kind: RepairKind) -> None:
    ledger = Ledger()
    assert _tick(ledger, kind, {"k1": "why"}, 1000.0) == [("due", 1)]
    assert _tick(ledger, kind, {"k1": "why"}, 1030.0) == [("cooldown", 2)]
    assert _tick(ledger, kind, {}, 1100.0) == [("due", 2)]
    assert _tick(ledger, kind, {}, 1200.0) == [("exhausted", 2)]
    assert _tick(ledger, kind, {}, 1300.0) == [("gave_up", 2)]
    _tick(ledger, kind, {}, 1400.0, resolved={"k1"})
    assert ledger.of(kind) == {}
    waiting = {"k2": "a run in progress already materializes it"}
    assert _tick(ledger, kind, {"k2": "stale"}, 1500.0, held=waiting) == [("held", 1)]
    assert ledger.of(kind)["k2"].attempts == 0
    # deciding uses no attempt: a repair not requested (refused, no time left) is still due at the next tick
    ledger.track(kind, {"k3": "why"}, (), 1600.0)
    assert [d.action for d in ledger.decide(kind, POLICY, 1600.0)] == [Action.DUE, Action.DUE]
    assert [(d.action.value, d.attempt) for d in ledger.decide(kind, POLICY, 1601.0)] == [("due", 1), ("due", 1)]
    assert Ledger.from_data(ledger.to_data()) == ledger  # serialized in one place, read back whole


def test_a_format_2_ledger_reads_into_the_typed_one() -> None:
    ledger = Ledger.from_cursor_v2(
        {"a.b|1": {"attempts": 1, "last": 5.0, "reason": "stale", "exhausted": False, "since": 2.0, "refused": "x"}},
        {"a.mv": {"attempts": 2, "last": 6.0, "since": 3.0, "exhausted": True}},
    )
    rebuild, apply = ledger.of(RepairKind.REBUILD)["a.b|1"], ledger.of(RepairKind.APPLY)["a.mv"]
    assert (rebuild.attempts, rebuild.last, rebuild.reason, rebuild.since, rebuild.refused) == (
        1,
        5.0,
        "stale",
        2.0,
        "x",
    )
    assert (apply.attempts, apply.exhausted, apply.reason) == (2, True, "restore")
    with pytest.raises(ValueError, match="format"):
        Ledger.from_data({"format": 2})


def test_a_verdict_travels_as_a_tag_for_its_target_only() -> None:
    verdict = RebuildVerdict(T, (("2026-08-01", "clickhouse"),)).merged(RebuildVerdict(T, (("2026-08-02", "spark"),)))
    tags = {VERDICT_TAG: verdict.to_tag()}
    assert RebuildVerdict.from_tags(tags, T) == verdict
    assert verdict.engine_of() == {"2026-08-01": "clickhouse", "2026-08-02": "spark"}
    assert RebuildVerdict.from_tags(tags, ObjectRef(database="a", name="c")) is None  # another target's run
    whole = RebuildVerdict(T, ((None, "clickhouse"),))
    assert RebuildVerdict.from_tags({VERDICT_TAG: whole.to_tag()}, T) == whole  # the whole table: key None
    assert RebuildVerdict.from_tags({VERDICT_TAG: "{not json"}, T) is None
    assert RebuildVerdict.from_tags({}, T) is None

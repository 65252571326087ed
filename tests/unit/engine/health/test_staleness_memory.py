"""One staleness memory for the sensors that measure staleness: episodes, persistence, alerts once, missing objects."""

from __future__ import annotations

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.staleness import TargetLag
from chmv_assets.engine.health.staleness_memory import StalenessMemory

A = ObjectRef(database="a", name="t")


def lag(stale: bool, missing: tuple[str, ...] = ()) -> TargetLag:
    return TargetLag(target=A, stale=stale, missing=missing, lag_seconds=600.0 if stale else 1.0)


def test_an_episode_persists_over_two_measurements_whoever_made_them_and_alerts_once() -> None:
    memory = StalenessMemory()
    first = memory.observe([lag(True)], 100.0)  # the staleness sensor
    assert first.started == ("a.t",) and memory.persistent() == set() and memory.to_alert() == ["a.t"]
    memory.alerted("a.t")
    shared = StalenessMemory.from_data(memory.to_data())  # what the recovery sensor reads
    assert shared.observe([lag(True)], 130.0).started == ()  # the same episode
    assert shared.persistent() == {"a.t"} and shared.to_alert() == []  # persistent; alerted already
    assert shared.episodes["a.t"].since == 100.0
    assert shared.observe([lag(False)], 160.0).caught_up == (("a.t", 1.0),)
    assert shared.episodes == {} and shared.observe([lag(True)], 190.0).started == ("a.t",)  # a new episode


def test_a_target_that_cannot_be_measured_keeps_its_episode_and_restarts_its_count() -> None:
    memory = StalenessMemory()
    memory.observe([lag(True)], 1.0)
    memory.observe([lag(True)], 2.0)
    memory.alerted("a.t")
    memory.observe([lag(False, ("a.t",))], 3.0)
    assert memory.episodes["a.t"].alerted and memory.persistent() == set()
    assert memory.missing_changed("a.t", ["a.t"]) and not memory.missing_changed("a.t", ["a.t"])  # alerted once
    memory.observe([lag(True)], 4.0)
    assert memory.missing == {} and memory.persistent() == set() and memory.to_alert() == []


def test_the_sensors_former_cursors_are_adopted_for_targets_it_does_not_know() -> None:
    memory = StalenessMemory()
    assert memory.adopt(stale={"a.t": {"since": 7.0}}, missing={"a.m": ["a.m"]}, stale_ticks={"a.t": 3, "a.u": 0})
    assert memory.episodes["a.t"].alerted and memory.episodes["a.t"].seen == 3 and "a.u" not in memory.episodes
    assert not memory.missing_changed("a.m", ["a.m"])
    assert not memory.adopt(stale={"a.t": {"since": 7.0}})  # nothing new
    assert StalenessMemory.from_data({"format": 0, "episodes": {"x": {}}}).episodes == {}  # another format: empty

"""What chmv remembers of staleness between measurements: one memory, shared by every sensor that measures it.

The staleness sensor alerts once per episode of a target lagging past the SLA (and once per set of objects missing
on the server); the recovery sensor rebuilds the lagging partitions of a target whose staleness persisted over
:data:`PERSISTENT_MEASUREMENTS` measurements in a row. Both measure (:func:`chmv_assets.engine.health.staleness.
measure_staleness`) and both keep what they saw in this one memory (:class:`StalenessMemory`, serialized by
:meth:`StalenessMemory.to_data` alone; the Dagster layer stores it once per server in the Dagster instance), so an
episode one of them saw first is the same episode for the other: alerted once, persisting across either's
measurements.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from chmv_assets.engine.health.staleness import TargetLag

#: Measurements in a row a staleness must be seen at before recovery acts on it.
PERSISTENT_MEASUREMENTS = 2
#: The memory's serialized format (:meth:`StalenessMemory.to_data`).
MEMORY_FORMAT = 1


@dataclass
class Episode:
    """A target lagging its sources past the SLA, from its first stale measurement until one finds it caught up.

    Attributes:
        since: When it was first measured stale (epoch seconds).
        seen: Stale measurements in a row (reset while the target cannot be measured).
        alerted: The staleness alert of this episode was sent.
    """

    since: float
    seen: int = 0
    alerted: bool = False


@dataclass(frozen=True)
class Observed:
    """What one measurement changed.

    Attributes:
        started: Targets whose episode started with it.
        caught_up: Targets whose episode it ended, with their lag now.
    """

    started: tuple[str, ...] = ()
    caught_up: tuple[tuple[str, float], ...] = ()


@dataclass
class StalenessMemory:
    """Staleness episodes and missing objects, by target (``database.name``).

    Attributes:
        episodes: The targets lagging past the SLA.
        missing: Per target, the objects missing on the server last alerted (so the alert is sent once per set).
    """

    episodes: dict[str, Episode] = field(default_factory=dict)
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def observe(self, lags: Iterable[TargetLag], now: float) -> Observed:
        """Record a measurement: an episode starts or goes on for each stale target, ends for each one caught up;
        a target that cannot be measured (objects missing) keeps its episode, its count of measurements reset."""
        started, caught_up = [], []
        for lag in lags:
            fqn = lag.target.fqn
            episode = self.episodes.get(fqn)
            if lag.missing:
                if episode is not None:
                    episode.seen = 0
                continue
            self.missing.pop(fqn, None)
            if not lag.stale:
                if self.episodes.pop(fqn, None) is not None:
                    caught_up.append((fqn, lag.lag_seconds))
                continue
            if episode is None:
                episode = self.episodes[fqn] = Episode(since=now)
                started.append(fqn)
            episode.seen += 1
        return Observed(tuple(started), tuple(caught_up))

    def persistent(self) -> set[str]:
        """Targets stale at :data:`PERSISTENT_MEASUREMENTS` measurements in a row or more."""
        return {fqn for fqn, e in self.episodes.items() if e.seen >= PERSISTENT_MEASUREMENTS}

    def to_alert(self) -> list[str]:
        """Targets whose episode was not alerted yet."""
        return sorted(fqn for fqn, e in self.episodes.items() if not e.alerted)

    def alerted(self, fqn: str) -> None:
        self.episodes[fqn].alerted = True

    def missing_changed(self, fqn: str, objects: Iterable[str]) -> bool:
        """Keep the objects of ``fqn`` missing now; whether they differ from those last alerted."""
        objects = tuple(objects)
        changed = self.missing.get(fqn) != objects
        self.missing[fqn] = objects
        return changed

    def to_data(self) -> dict[str, Any]:
        """The memory as JSON-able data (the one place it is serialized)."""
        return {
            "format": MEMORY_FORMAT,
            "episodes": {fqn: asdict(e) for fqn, e in sorted(self.episodes.items())},
            "missing": {fqn: list(objects) for fqn, objects in sorted(self.missing.items())},
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> StalenessMemory:
        """The memory :meth:`to_data` wrote; empty for none or another format."""
        if not data or data.get("format") != MEMORY_FORMAT:
            return cls()
        episodes = {
            fqn: Episode(float(e.get("since", 0.0)), int(e.get("seen", 0)), bool(e.get("alerted", False)))
            for fqn, e in dict(data.get("episodes", {})).items()
        }
        missing = {fqn: tuple(objects) for fqn, objects in dict(data.get("missing", {})).items()}
        return cls(episodes, missing)

    def adopt(
        self,
        stale: Mapping[str, Any] = {},  # noqa: B006 - read only
        missing: Mapping[str, Iterable[str]] = {},  # noqa: B006 - read only
        stale_ticks: Mapping[str, int] = {},  # noqa: B006 - read only
    ) -> bool:
        """Take over what the sensors' own cursors remembered before this memory (the staleness sensor's alerted
        episodes ``stale`` and missing objects, the recovery sensor's ``stale_ticks``) for the targets this memory
        knows nothing of; whether anything was taken."""
        taken = False
        for fqn, seen in stale_ticks.items():
            if int(seen) > 0 and fqn not in self.episodes:
                self.episodes[fqn] = Episode(since=0.0, seen=int(seen))
                taken = True
        for fqn, state in stale.items():
            episode = self.episodes.setdefault(fqn, Episode(since=float(dict(state).get("since", 0.0))))
            taken = taken or not episode.alerted
            episode.alerted = True
        for fqn, objects in missing.items():
            if fqn not in self.missing:
                self.missing[fqn] = tuple(objects)
                taken = True
        return taken

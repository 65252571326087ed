"""The one backoff of chmv: a pause that doubles from a base up to a cap, jittered so that retrying processes spread
out (the pacer's waits and retries, :meth:`chmv_assets.engine.pacing.pacer.Pacer.run`; a raced partition's next
read, :meth:`chmv_assets.engine.rebuild.planner.RaceRules.pause`)."""

from __future__ import annotations

import random

#: The pause is drawn within ± this share of its doubled value.
JITTER = 0.25


def backoff(pause: int, base: float, cap: float) -> float:
    """Seconds of pause number ``pause`` (1 for the first): ``base`` doubled ``pause - 1`` times, at most ``cap``,
    times a uniform draw in ``[1 - JITTER, 1 + JITTER]``, and never above ``cap``."""
    doubled = min(cap, base * 2 ** max(0, pause - 1))
    return min(cap, doubled * random.uniform(1 - JITTER, 1 + JITTER))


__all__ = ["JITTER", "backoff"]

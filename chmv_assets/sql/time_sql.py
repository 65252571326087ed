"""Time values on the server's side: wall seconds of a part's min/max index (see :mod:`chmv_assets.engine.clock`)."""

from __future__ import annotations


def wall_seconds_sql(expression: str) -> str:
    """``Int64`` wall seconds of a ``DateTime`` expression: its wall clock in its own zone, read as UTC; 0 for the
    epoch (``system.parts`` says ``min_time`` is 0 when the partition key has no time)."""
    unix = f"toUnixTimestamp({expression})"
    return f"toInt64(if({unix} = 0, 0, {unix} + timeZoneOffset({expression})))"

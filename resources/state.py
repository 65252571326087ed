"""Where chmv keeps local state (embedded engine, gates, staging, demo landing zone)."""

from __future__ import annotations

import os
from pathlib import Path

_PROJECT_ROOT = Path(__file__).resolve().parents[1]


def default_state_dir() -> Path:
    """Where chmv keeps local state: ``$CHMV_STATE_DIR``, else ``.chmv/`` at the project root."""
    return Path(os.environ.get("CHMV_STATE_DIR") or _PROJECT_ROOT / ".chmv").resolve()

"""Embedded engines for the tests: a fresh one with the example DDL and demo rows, and a held client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def make_engine(path: Path, loaded, rows: int = 0, seed: int = 42):
    """A ClickHouseResource on a fresh embedded engine at ``path``, DDL applied, ``rows`` demo rows loaded."""
    from chmv_assets import demo_data
    from chmv_assets.engine.lifecycle.deploy import apply
    from resources.clickhouse import ClickHouseResource

    resource = ClickHouseResource(dsn=f"chdb://{path}")
    with resource.get_client() as client:
        apply(client, loaded.project)
        if rows:
            demo_data.load_into_clickhouse(client, demo_data.generate_all(rows, seed=seed))
    return resource


class HeldClient:
    """A client factory over one open client: whatever the test set on it (merges stopped, settings) stays."""

    def __init__(self, client):
        self.client = client

    @contextmanager
    def get_client(self, **_ignored) -> Iterator:
        yield self.client

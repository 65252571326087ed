"""The demo data generator is deterministic, has the promised duplicates and late rows, and loads."""

from pathlib import Path

import pyarrow.parquet as pq

from chmv_assets import demo_data


def test_same_seed_same_rows_other_seed_other_rows():
    first = demo_data.generate("analytics.api_requests", 5_000, seed=7)
    again = demo_data.generate("analytics.api_requests", 5_000, seed=7)
    other = demo_data.generate("analytics.api_requests", 5_000, seed=8)
    assert first.equals(again)
    assert not first.equals(other)


def test_duplicates_are_exact_repeats_and_rows_are_time_ordered():
    table = demo_data.generate("analytics.raw_webhooks", 10_000, duplicates=0.01)
    assert table.num_rows == 10_100
    distinct = len(set(zip(*(table[c].to_pylist() for c in table.column_names), strict=True)))
    assert distinct == 10_000
    times = table["received_at"].to_numpy()
    assert (times[1:] >= times[:-1]).all()


def test_every_source_of_the_example_gets_its_share(example):
    tables = demo_data.generate_all(100_000)
    project = example.project
    sources = {ref.fqn for ref in project.tables if project.views_from(ref) and not project.views_into(ref)}
    assert set(tables) == sources
    assert sum(t.num_rows for t in tables.values()) == 101_000


def test_landing_zone_holds_every_row_with_some_late(tmp_path: Path):
    tables = {"analytics.counter": demo_data.generate("analytics.counter", 20_000, days=3)}
    files = demo_data.write_landing_zone(tmp_path, tables, late_share=0.05)
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    assert rows == tables["analytics.counter"].num_rows
    late = 0
    for f in files:
        hour = f.stem.removeprefix("hour=")
        times = pq.read_table(f)["when"].to_pylist()
        late += sum(1 for t in times if f"{t:%H}" != hour)
    assert 0 < late < rows * 0.1


def test_load_fires_the_live_mvs(loaded_engine):
    with loaded_engine.get_client() as client:
        sources = int(client.command("SELECT count() FROM analytics.all_events WHERE level = 'error'"))
        routed = int(client.command("SELECT count() FROM analytics.error_events"))
    assert sources > 0
    assert routed == sources

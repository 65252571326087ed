"""Every partition shape's SQL (tests/support/shapes.py, one row each) holds on a real engine: the predicate of a partition
selects its rows exactly (not the row a second before the window, the window's end, another key value), and the
partition a swap names is the one ClickHouse put them in."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.types import parse_type
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.sql.quoting import string_literal
from chmv_assets.sql.rebuild_sql import partition_filter, partition_tuple
from chmv_assets.sql.time_sql import time_sql
from resources.clickhouse import ClickHouseResource

from support.ddl import load_ddl, ref
from support.shapes import SHAPES, ShapeCase, shapes_ddl, table_name


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> tuple[LoadedProject, ClickHouseResource]:
    root = tmp_path_factory.mktemp("shapes")
    loaded = load_ddl(root / "ddl", f"CREATE DATABASE d;\n{shapes_ddl()}", toml='default_database = "d"')
    engine = ClickHouseResource(dsn=f"chdb://{root / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    return loaded, engine


def _row(case: ShapeCase, time, values: dict[str, str]) -> str:
    """One row of the case's table: the time column at ``time``, the key columns at ``values``."""
    out = []
    for column in case.columns.split(", "):
        name, type_sql = column.split(" ", 1)
        if parse_type(type_sql).is_time:
            out.append(time_sql(time, type_sql, "UTC"))
        else:
            out.append(string_literal(values.get(name, "")))
    return f"({', '.join(out)})"


@pytest.mark.parametrize("case", SHAPES, ids=[c.id for c in SHAPES])
def test_the_predicate_and_the_partition_of_each_shape_hold_on_the_engine(deployed, case: ShapeCase) -> None:
    loaded, engine = deployed
    target = ref(f"d.{table_name(case)}")
    table = loaded.project.table(target)
    p = loaded.partitioning(target)
    if case.key is None:  # unpartitioned: the whole table is the one partition
        assert partition_tuple(table, p, None, zone="UTC") == "tuple()"
        return
    window = p.window(case.key)
    values = dict(zip(p.keys, window.values, strict=True))
    other = {k: f"{v}-other" for k, v in values.items()}
    date = any(parse_type(c.split(" ", 1)[1]).is_date for c in case.columns.split(", "))
    step = timedelta(days=1) if date else timedelta(seconds=1)
    inside = _row(case, window.start, values)
    outside = [_row(case, window.end, values), _row(case, window.start - step, values)] if window.timed else []
    outside += [_row(case, window.start, other)] if values else []  # another key value, same window
    predicate = partition_filter(table, p, window, zone="UTC")
    partition = partition_tuple(table, p, window, zone="UTC")
    with engine.get_client() as client:
        client.command(f"TRUNCATE TABLE d.{table_name(case)}")
        client.command(f"INSERT INTO d.{table_name(case)} VALUES {', '.join([inside, *outside])}")
        held = client.query(
            f"SELECT ({predicate}) AS mine, _partition_value = {partition} FROM d.{table_name(case)} ORDER BY mine DESC"
        ).result_rows
    assert held[0] == (1, 1)  # the window's row: the predicate holds, in the partition a swap names
    assert all(row == (0, 0) for row in held[1:]) and len(held) == 1 + len(outside)

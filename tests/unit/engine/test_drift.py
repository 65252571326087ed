"""The live-vs-repo diff's pieces that need no engine: type names normalized as the server spells them."""

from __future__ import annotations

from chmv_assets.ddl.models import Project
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.engine.drift import LiveObject, _object_drift, normalize_type


def test_type_normalization() -> None:
    assert normalize_type("AggregateFunction(quantile(0.99),  UInt32)") == "AggregateFunction(quantile(0.99), UInt32)"
    assert normalize_type("INT") == "Int32" and normalize_type("LowCardinality( String )") == "LowCardinality(String)"


def test_a_nested_column_is_no_drift() -> None:
    """The server lists a Nested column as its Array columns: neither missing nor extra."""
    table = parse_statement(
        "CREATE TABLE d.n (id UInt64, Events Nested(At DateTime64(9), Name String)) ENGINE = MergeTree ORDER BY id",
        default_database="d",
    )
    project = Project(ddl_dir=".", default_database="d", tables={table.ref: table})
    columns = (("id", "UInt64"), ("Events.At", "Array(DateTime64(9))"), ("Events.Name", "Array(String)"))
    assert _object_drift(project, table.ref, LiveObject(table.ref, "MergeTree", columns=columns), None) == []
    missing = LiveObject(table.ref, "MergeTree", columns=columns[:2])
    assert [i.kind for i in _object_drift(project, table.ref, missing, None)] == ["missing_column"]

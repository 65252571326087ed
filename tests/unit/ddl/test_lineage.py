"""Lineage graph: layers, cycles, chain depth, impact analysis, JSON shape and renderings."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, SourceLocation, SourceRole, SourceUse, Table
from chmv_assets.ddl.parser import load_project

CHAIN = [
    "analytics.raw_events",
    "analytics.mv_events_agg",
    "analytics.events_agg",
    "analytics.mv_events_daily",
    "analytics.events_daily",
    "analytics.mv_events_weekly",
    "analytics.events_weekly",
]


def _ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


def _hand_project(edges: list[tuple[str, str, str]]) -> Project:
    """A project built from ``(view, source, target)`` triples without the parser (which rejects cycles)."""
    loc = SourceLocation(file="x.sql", line=1)
    tables = {}
    views = {}
    for view, source, target in edges:
        for name in (source, target):
            tables[_ref(name)] = Table(ref=_ref(name), columns=(), engine=None, statement="", location=loc)
        views[_ref(view)] = MaterializedView(
            ref=_ref(view),
            target=_ref(target),
            trigger=_ref(source),
            select_sql="",
            statement="",
            location=loc,
            sources=(SourceUse(ref=_ref(source), role=SourceRole.TRIGGER),),
        )
    return Project(ddl_dir=".", default_database="d", tables=tables, views=views)


def test_layers_respect_every_edge(example):
    graph = example.graph
    layer_of = {node: i for i, layer in enumerate(graph.layers) for node in layer}
    assert set(layer_of) == set(graph.kinds)  # every node exactly once
    assert sum(len(layer) for layer in graph.layers) == len(graph.kinds)
    for node, ups in graph.upstream.items():
        for up in ups:
            assert layer_of[up] < layer_of[node], (up, node)
    sources = {
        "analytics.api_requests",
        "analytics.raw_requests",
        "analytics.raw_webhooks",
        "analytics.all_events",
        "analytics.counter",
        "analytics.raw_events",
    }
    assert set(graph.layers[0]) == sources
    assert [layer_of[n] for n in CHAIN] == list(range(7))


def test_chain_depth_per_target(example):
    depth = example.graph.depth
    assert depth["analytics.raw_events"] == 0
    assert (depth["analytics.events_agg"], depth["analytics.events_daily"], depth["analytics.events_weekly"]) == (
        1,
        2,
        3,
    )
    assert (depth["analytics.mv_events_agg"], depth["analytics.mv_events_weekly"]) == (1, 3)
    for target in ("hourly_endpoint_stats", "requests_enriched", "entity_latest", "error_events", "counter_daily"):
        assert depth[f"analytics.{target}"] == 1


def test_depth_ignores_dictionaries_and_counts_fan_in_by_longest_path(tmp_path):
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "a.sql").write_text(
        textwrap.dedent("""
        CREATE TABLE s (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE TABLE mid (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE TABLE t (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE TABLE dim (x UInt64, n String) ENGINE = MergeTree ORDER BY x;
        CREATE DICTIONARY dct (x UInt64, n String) PRIMARY KEY x SOURCE(CLICKHOUSE(TABLE 'dim')) LAYOUT(FLAT()) LIFETIME(60);
        CREATE MATERIALIZED VIEW s_mid TO mid AS SELECT x FROM s;
        CREATE MATERIALIZED VIEW mid_t TO t AS SELECT x FROM mid WHERE dictHas('dct', x);
        CREATE MATERIALIZED VIEW s_t TO t AS SELECT x FROM s;
    """)
    )
    graph = LineageGraph(load_project(ddl, default_database="d"))
    assert graph.depth["d.mid"] == 1 and graph.depth["d.t"] == 2 and graph.depth["d.dct"] == 0
    assert graph.upstream["d.mid_t"] == {"d.mid", "d.dct"} and graph.upstream["d.dct"] == {"d.dim"}
    assert graph.upstream["d.t"] == {"d.mid_t", "d.s_t"}  # fan-in
    assert graph.impact("d.dim") == ["d.dct", "d.mid_t", "d.t"]


def test_impact_analysis(example):
    graph = example.graph
    assert graph.impact("analytics.raw_events") == CHAIN[1:]
    assert graph.impact("analytics.events_daily") == CHAIN[5:]
    assert graph.impact("analytics.events_weekly") == []
    assert set(graph.impact("analytics.all_events")) == {
        "analytics.errors_mv",
        "analytics.error_events",
        "analytics.metrics_mv",
        "analytics.metric_events",
        "analytics.audit_mv",
        "analytics.audit_log",
    }
    assert graph.impact("analytics.nope") == []


@pytest.mark.parametrize(
    ("edges", "cycle_nodes"),
    [
        ([("d.ab", "d.a", "d.b"), ("d.ba", "d.b", "d.a")], {"d.a", "d.ab", "d.b", "d.ba"}),
        ([("d.self", "d.a", "d.a")], {"d.a", "d.self"}),
        (
            [("d.ab", "d.a", "d.b"), ("d.bc", "d.b", "d.c"), ("d.cb", "d.c", "d.b"), ("d.xa", "d.x", "d.a")],
            {"d.b", "d.bc", "d.c", "d.cb"},
        ),
    ],
    ids=["two-views", "self-loop", "cycle-below-a-dag-part"],
)
def test_find_cycle_names_the_whole_cycle_in_flow_order(edges, cycle_nodes):
    graph = LineageGraph(_hand_project(edges))
    cycle = graph.find_cycle()
    assert cycle[0] == cycle[-1]
    assert set(cycle) == cycle_nodes and len(cycle) == len(cycle_nodes) + 1
    for before, after in zip(cycle, cycle[1:], strict=False):
        assert before in graph.upstream[after], f"{before} -> {after} is not an edge"


def test_no_cycle_in_example(example):
    assert example.graph.find_cycle() is None


def test_json_shape_exactly_as_specified(example):
    data = json.loads(example.graph.to_json())
    assert set(data) == {"views", "tables", "functions", "kept", "layers"}
    assert len(data["views"]) == 10
    for view in data["views"]:
        keys = {
            "name",
            "target",
            "sources",
            "trigger",
            "dictionaries",
            "refreshable",
            "depth",
            "functions",
            "feedback_reads",
        }
        assert set(view) == keys
        assert re.fullmatch(r"[^.`\"]+\.[^.`\"]+", view["name"])  # database.name unquoted
        assert isinstance(view["sources"], list) and isinstance(view["dictionaries"], list)
        assert isinstance(view["refreshable"], bool) and isinstance(view["depth"], int)
    weekly = next(v for v in data["views"] if v["name"] == "analytics.mv_events_weekly")
    assert weekly == {
        "name": "analytics.mv_events_weekly",
        "target": "analytics.events_weekly",
        "sources": ["analytics.events_daily"],
        "trigger": "analytics.events_daily",
        "dictionaries": [],
        "refreshable": False,
        "depth": 3,
        "functions": [],
        "feedback_reads": [],
    }
    assert {t["name"] for t in data["tables"]} == {n for n, k in example.graph.kinds.items() if k != "view"}
    assert all(isinstance(layer, list) and all(isinstance(n, str) for n in layer) for layer in data["layers"])
    assert data["layers"] == example.graph.layers


def test_json_inner_table_view_has_null_target_and_dictionaries(tmp_path):
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "a.sql").write_text(
        "CREATE TABLE s (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE DICTIONARY dct (x UInt64, n String) PRIMARY KEY x SOURCE(CLICKHOUSE(TABLE 's')) LAYOUT(FLAT()) LIFETIME(60);\n"
        "CREATE MATERIALIZED VIEW v ENGINE = MergeTree ORDER BY x AS SELECT x, dictGet('dct', 'n', x) AS n FROM s;\n"
        "CREATE MATERIALIZED VIEW r REFRESH EVERY 1 DAY ENGINE = MergeTree ORDER BY x AS SELECT x FROM s"
    )
    data = LineageGraph(load_project(ddl, default_database="d")).to_dict()
    views = {v["name"]: v for v in data["views"]}
    assert views["d.v"] == {
        "name": "d.v",
        "target": None,
        "sources": ["d.s"],
        "trigger": "d.s",
        "dictionaries": ["d.dct"],
        "refreshable": False,
        "depth": 1,
        "functions": [],
        "feedback_reads": [],
    }
    assert views["d.r"]["refreshable"] is True


def test_mermaid_render(example):
    text = example.graph.to_mermaid()
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    ids = dict(re.findall(r'^\s+(n\d+)\W+"([^"]+)"', text, re.M))
    assert set(ids.values()) == set(example.graph.kinds)
    edges = {(ids[a], ids[b]) for a, b in re.findall(r"^\s+(n\d+) --> (n\d+)$", text, re.M)}
    expected = {(up, node) for node, ups in example.graph.upstream.items() for up in ups}
    assert edges == expected
    assert '{{"analytics.mv_events_daily"}}' in text  # MVs drawn as hexagons


def test_dot_render(example):
    text = example.graph.to_dot()
    assert text.startswith("digraph chmv {") and text.rstrip().endswith("}")
    edges = set(re.findall(r'^\s+"([^"]+)" -> "([^"]+)";$', text, re.M))
    assert edges == {(up, node) for node, ups in example.graph.upstream.items() for up in ups}
    assert '"analytics.mv_events_agg" [shape=diamond];' in text
    assert text.count("{") == text.count("}")


def test_targets_and_views_are_indexed_once_per_project():
    project = _hand_project([("d.mv1", "d.src", "d.a"), ("d.mv2", "d.src", "d.a"), ("d.mv3", "d.a", "d.b")])
    assert project.targets == (_ref("d.a"), _ref("d.b"))  # definition order, a fan-in once
    assert project.targets is project.targets
    assert project.target_named("d.b") == _ref("d.b")
    assert project.target_named("d.src") is None  # a source, not a target
    assert [v.ref.fqn for v in project.views_into(_ref("d.a"))] == ["d.mv1", "d.mv2"]
    assert [v.ref.fqn for v in project.views_from(_ref("d.src"))] == ["d.mv1", "d.mv2"]

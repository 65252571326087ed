"""Lineage graph: layers, cycles, chain depth, impact analysis, JSON shape and renderings."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, SourceLocation, SourceRole, SourceUse, Table
from chmv_assets.ddl.parsing.project import load_project

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
    assert set(data) == {"views", "tables", "functions", "kept", "layers", "loops"}
    assert data["loops"] == []
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
            "depends_on",
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
        "depends_on": [],
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
        "depends_on": [],
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


LOOP = """
CREATE TABLE d.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.ok (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.ok_mv TO d.ok AS SELECT ts, k FROM d.src WHERE k IN (SELECT k FROM d.x);
CREATE TABLE d.x (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.y (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.x_to_y TO d.y AS SELECT ts, k FROM d.x;
CREATE MATERIALIZED VIEW d.y_to_x TO d.x AS SELECT ts, k + 1 AS k FROM d.y;
CREATE TABLE d.z (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.y_to_z TO d.z AS SELECT ts, k FROM d.y;
"""


def _graph(tmp_path, ddl: str) -> LineageGraph:
    root = tmp_path / "ddl"
    root.mkdir()
    (root / "a.sql").write_text(textwrap.dedent(ddl))
    return LineageGraph(load_project(root, default_database="d"))


def test_a_trigger_loop_is_drawn_marked_beside_the_rest(tmp_path):
    graph = _graph(tmp_path, LOOP)
    assert graph.find_cycle() is None and "d.x_to_y" not in graph.kinds  # the rest is a DAG, in layers
    assert ("d.x", "d.ok_mv") in {(u, n) for n, ups in graph.upstream.items() for u in ups}  # an ordered read now
    assert graph.impact("d.y") == ["d.y_to_z", "d.z"]  # what is loaded downstream
    data = graph.to_dict()
    assert sorted(v["name"] for v in data["views"]) == ["d.ok_mv", "d.y_to_z"]
    (loop,) = data["loops"]
    assert loop["cycle"] == ["d.x", "d.x_to_y", "d.y", "d.y_to_x", "d.x"]
    assert [(v["name"], v["trigger"], v["target"]) for v in loop["views"]] == [
        ("d.x_to_y", "d.x", "d.y"),
        ("d.y_to_x", "d.y", "d.x"),
    ]
    assert "a trigger loop: d.x_to_y at a.sql:7, d.y_to_x at a.sql:8" in loop["problem"]
    mermaid = graph.to_mermaid()
    ids = dict(re.findall(r'^\s+(n\d+)\W+"([^"]+?)(?: \(trigger loop: not loaded\))?"', mermaid, re.M))
    loop_edges = {(ids[a], ids[b]) for a, b in re.findall(r"^\s+(n\d+) ==>\|loop\| (n\d+)$", mermaid, re.M)}
    assert loop_edges == {("d.x", "d.x_to_y"), ("d.x_to_y", "d.y"), ("d.y", "d.y_to_x"), ("d.y_to_x", "d.x")}
    assert '{{"d.x_to_y (trigger loop: not loaded)"}}:::loop' in mermaid and "classDef loop" in mermaid
    dot = graph.to_dot()
    assert '"d.y_to_x" -> "d.x" [color=red, label="loop"];' in dot
    assert '"d.x_to_y" [shape=diamond, color=red, xlabel="trigger loop: not loaded"];' in dot


DEPENDS = """
CREATE DATABASE d ENGINE = Atomic;
CREATE TABLE d.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.snap (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.report (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.audit (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.snap_mv REFRESH EVERY 1 HOUR TO d.snap AS SELECT now() AS ts, count() AS n FROM d.src;
CREATE MATERIALIZED VIEW d.report_mv REFRESH EVERY 1 HOUR DEPENDS ON snap_mv APPEND TO d.report AS
    SELECT now() AS ts, count() AS n FROM d.src;
CREATE MATERIALIZED VIEW d.audit_mv REFRESH EVERY 1 DAY DEPENDS ON d.report_mv TO d.audit AS
    SELECT now() AS ts, count() AS n FROM d.snap;
"""


def test_depends_on_is_a_dependency_not_a_trigger(tmp_path):
    graph = _graph(tmp_path, DEPENDS)
    assert graph.depends == {("d.snap_mv", "d.report_mv"), ("d.report_mv", "d.audit_mv")}
    assert graph.ordered_depends == graph.depends and "d.snap_mv" in graph.upstream["d.report_mv"]
    assert graph.depth["d.report"] == 2 and graph.depth["d.audit"] == 3  # after what it depends on
    views = {v["name"]: v for v in graph.to_dict()["views"]}
    assert views["d.report_mv"]["depends_on"] == ["d.snap_mv"] and views["d.snap_mv"]["depends_on"] == []
    assert views["d.report_mv"]["trigger"] is None or views["d.report_mv"]["refreshable"]
    mermaid = graph.to_mermaid()
    ids = dict(re.findall(r'^\s+(n\d+)\W+"([^"]+)"', mermaid, re.M))
    depends = {(ids[a], ids[b]) for a, b in re.findall(r"^\s+(n\d+) -\.->\|depends on\| (n\d+)$", mermaid, re.M)}
    assert depends == graph.depends
    assert ids_edge(mermaid, ids, "d.snap_mv", "d.report_mv") == "-.->|depends on|"
    assert '"d.snap_mv" -> "d.report_mv" [style=dotted, label="depends on"];' in graph.to_dot()


def ids_edge(mermaid: str, ids: dict[str, str], up: str, node: str) -> str:
    back = {v: k for k, v in ids.items()}
    (arrow,) = re.findall(rf"^\s+{back[up]} (.+) {back[node]}$", mermaid, re.M)
    return arrow


def test_a_depends_on_against_the_flow_is_drawn_and_orders_nothing(tmp_path):
    """snap_mv depends on audit_mv, which reads snap_mv's target: ordering it would be a loop; it is drawn only."""
    graph = _graph(
        tmp_path,
        DEPENDS.replace("REFRESH EVERY 1 HOUR TO d.snap", "REFRESH EVERY 1 HOUR DEPENDS ON d.audit_mv TO d.snap"),
    )
    assert ("d.audit_mv", "d.snap_mv") in graph.depends
    assert ("d.audit_mv", "d.snap_mv") not in graph.ordered_depends and graph.find_cycle() is None
    assert "-.->|depends on|" in graph.to_mermaid()


def test_a_dictionary_table_reads_its_dictionary(tmp_path):
    graph = _graph(
        tmp_path,
        """
        CREATE TABLE d.codes (code String, name String) ENGINE = MergeTree ORDER BY code;
        CREATE DICTIONARY d.code_names (code String, name String) PRIMARY KEY code
            SOURCE(CLICKHOUSE(TABLE 'codes' DB 'd')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED());
        CREATE TABLE d.code_table (code String, name String) ENGINE = Dictionary(d.code_names);
        """,
    )
    assert graph.upstream["d.code_table"] == {"d.code_names"} and graph.impact("d.codes") == [
        "d.code_names",
        "d.code_table",
    ]

"""The peer corpus (tests/fixtures/corpus): hand-written schemas modelled on ClickHouse's own MV tests and on real public
schemas (each case names what it is modelled on). Every case runs as written on the embedded engine (the engine must
accept each statement), and chmv's lineage of it is what the engine itself records (tests/support/lineage.py:
``system.tables`` targets and trigger dependencies, the analyzer's resolved reads of each SELECT, DEPENDS ON, a
dictionary's loading dependency; a real trigger loop is exactly the loop chmv leaves out). Then the whole corpus is
deployed through ``chmv apply`` on the embedded engine (the local twin, cases a single host cannot run as written
through their stand-ins): everything but the loops deploys, the engine records what chmv's twin lineage says, and the
plan right after holds nothing but the loops, refused (docs/any-schema.md)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil

import pytest

from chmv_assets.cli import main
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.sql_text import split_statements
from chmv_assets.engine.lifecycle.plan import Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from resources.clickhouse import ClickHouseResource

from support.lineage import chmv_records, differences, engine_loops, engine_records
from support.paths import CORPUS

pytestmark = pytest.mark.worker_seconds(25)

CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "schema.sql").is_file())
#: Cases a single host cannot run as written (a cluster, a broker): only their local twin is deployed.
TWIN_ONLY = {c for c in CASES if "-- corpus: twin only" in (CORPUS / c / "schema.sql").read_text()}
AS_WRITTEN = [c for c in CASES if c not in TWIN_ONLY]
#: The shapes the corpus must hold (the issue's list): a regular expression over the cases' text, case-insensitive.
SHAPES = {
    "TO target": r"MATERIALIZED VIEW \S+ TO ",
    "inner engine": r"MATERIALIZED VIEW \S+(?: \([^)]*\))?\s+ENGINE\s*=",
    "chain": r"chain",
    "JOIN feedback read": r"LEFT JOIN\s*\(\s*SELECT[\s\S]*?FROM c_feedback\.user_state",
    "IN feedback read": r"NOT IN \(SELECT user_id FROM c_dedup\.first_signup\)",
    "refreshable DEPENDS ON": r"REFRESH EVERY [^\n]* DEPENDS ON ",
    "refreshable APPEND": r"REFRESH [^\n]*\bAPPEND\b",
    "EMPTY": r"^EMPTY\b|\bEMPTY AS\b",
    "refresh OFFSET / RANDOMIZE / SETTINGS": r"OFFSET 3 DAY 4 HOUR RANDOMIZE FOR[\s\S]*SETTINGS refresh_retries",
    "DEFINER / SQL SECURITY": r"DEFINER = \S+ SQL SECURITY DEFINER",
    "Buffer engine": r"ENGINE = Buffer\(",
    "Merge engine": r"ENGINE = Merge\(",
    "Distributed engine": r"ENGINE = Distributed\(",
    "Null engine": r"ENGINE = Null",
    "Join and Set engines": r"ENGINE = Join\([\s\S]*ENGINE = Set",
    "dictionary": r"CREATE DICTIONARY[\s\S]*dictGet",
    "Dictionary engine": r"ENGINE = Dictionary\(",
    "-State / -MergeState": r"uniqMergeState\(",
    "SimpleAggregateFunction": r"SimpleAggregateFunction\(",
    "SELECT without FROM": r"AS\s+SELECT now\(\) AS at, version\(\)",
    "system tables": r"FROM system\.tables",
    "table functions": r"FROM numbers\(",
    "UNION ALL": r"UNION ALL",
    "WITH / CTE": r"WITH recent AS \(",
    "lambdas": r"arrayMap\(\w+ ->",
    "ARRAY JOIN": r"ARRAY JOIN",
    "SETTINGS in the SELECT": r"FROM \S+\s+SETTINGS max_threads",
    "COMMENT": r"\nCOMMENT '",
    "scalar subquery": r"\(SELECT count\(\) FROM",
    "a plain view as trigger": r"FROM c_merge\.recent_2026",
    "Kafka source": r"ENGINE = Kafka\(",
    "trigger loop": r"ping_to_pong",
}


def chmv(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def text_of(case: str) -> str:
    return (CORPUS / case / "schema.sql").read_text(encoding="utf-8")


def databases_of(case: str) -> set[str]:
    return set(re.findall(r"CREATE DATABASE (?:IF NOT EXISTS )?(\w+)", text_of(case)))


def only(records: dict, case: str) -> dict:
    """The records of one case's objects (each case has databases of its own)."""
    mine = databases_of(case)
    return {name: record for name, record in records.items() if name.split(".", 1)[0] in mine}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> ClickHouseResource:
    """One embedded engine for the module: the cases as written first, then the whole corpus through chmv apply."""
    return ClickHouseResource(dsn=f"chdb://{tmp_path_factory.mktemp('corpus') / 'chdb'}")


@pytest.fixture(scope="module")
def as_written(engine: ClickHouseResource) -> tuple[dict, dict]:
    """Every case the engine can run as written, each statement in turn, and what the engine records of them; the
    databases are dropped after."""
    with engine.get_client() as client:
        for case in AS_WRITTEN:
            for statement in split_statements(text_of(case)):
                try:
                    client.command(statement.text)
                except Exception as err:  # noqa: BLE001 (the case is wrong, not chmv: say which statement)
                    pytest.fail(f"{case}: the engine refuses {statement.text[:120]!r}: {err}")
        databases = {d for case in AS_WRITTEN for d in databases_of(case)}
        records = engine_records(client, databases)
        for database in sorted(databases):
            client.command(f"DROP DATABASE {database} SYNC")
    return records


@pytest.fixture(scope="module")
def deployed(as_written, engine: ClickHouseResource, tmp_path_factory: pytest.TempPathFactory):
    """The whole corpus in one directory, deployed by ``chmv apply`` on the embedded engine (its local twin): what
    apply printed, the plan right after, and what the engine records then."""
    combined = tmp_path_factory.mktemp("corpus_ddl")
    for case in CASES:
        shutil.copy(CORPUS / case / "schema.sql", combined / f"{case}.sql")
    applied = chmv("apply", "--ddl-dir", str(combined), "--dsn", engine.resolved_dsn)
    loaded = load(combined, twin=True)
    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        records = engine_records(client, {d for case in CASES for d in databases_of(case)})
    return applied, plan, loaded, records


@pytest.mark.parametrize("case", AS_WRITTEN)
def test_lineage_is_what_the_engine_records(case: str, as_written) -> None:
    views, dictionaries = (only(r, case) for r in as_written)
    assert views, f"{case}: the engine holds no MV of the case"
    assert all(v.reads is not None for v in views.values()), "the engine analyzes every SELECT it accepted"
    project = load(CORPUS / case).project
    mine, my_dictionaries = chmv_records(project)
    loops = engine_loops(views)
    assert {r.fqn for r in project.loop_views} == loops  # a real loop is left out, and only a real one
    assert differences({n: v for n, v in views.items() if n not in loops}, mine) == {}
    assert my_dictionaries == dictionaries


def test_the_whole_corpus_deploys_but_its_loops_and_plans_nothing_else(deployed) -> None:
    (code, out, err), plan, loaded, _ = deployed
    loops = {r.fqn for r in loaded.project.loop_views}
    assert loops == {"c_loop.ping_to_pong", "c_loop.pong_to_ping", "c_loop.self"}
    assert code == 2 and "preflight: the server accepted" in out, out + err
    assert "refused (a trigger loop, not deployed): c_loop.ping_to_pong, c_loop.pong_to_ping, c_loop.self" in out
    assert [(c.action, c.ref.fqn) for c in plan.changes] == [(Action.REFUSED, n) for n in sorted(loops)]
    assert "c_posthog.kafka_events_json: Kafka → Null table" in out  # the twin's stand-ins, named


@pytest.mark.parametrize("case", CASES)
def test_deployed_on_the_twin_as_chmv_reads_it(case: str, deployed) -> None:
    *_, loaded, records = deployed
    views, dictionaries = (only(r, case) for r in records)
    mine, my_dictionaries = (only(r, case) for r in chmv_records(loaded.project))
    assert views and set(views) == set(mine)  # every MV deployed, the loops' none
    assert differences(views, mine) == {}
    assert my_dictionaries == dictionaries


def test_every_case_names_what_it_is_modelled_on_and_the_corpus_holds_every_shape() -> None:
    for case in CASES:
        comment = [line[2:].strip() for line in text_of(case).splitlines() if line.startswith("--")]
        head = " ".join(comment)  # the leading comment, on one line
        # the upstream repository, path and commit it is modelled on, or that it was written for chmv
        assert re.search(r"\b[\w.-]+/[\w.-]+ [\w./-]+ \(commit [0-9a-f]{40}\)|written for chmv", head), case
    corpus = "\n".join(text_of(c) for c in CASES)
    missing = [shape for shape, pattern in SHAPES.items() if not re.search(pattern, corpus, re.I | re.M)]
    assert missing == []

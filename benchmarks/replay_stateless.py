"""Replay ClickHouse's own stateless tests that create MVs on the embedded engine, and compare chmv's lineage of what
the engine accepted with what the engine itself records (the peer corpus at scale; docs/any-schema.md).

Run: ``.venv/bin/python benchmarks/replay_stateless.py DIR [--limit N] [--show N] [--json PATH]``

``DIR`` is a local directory of ClickHouse's stateless tests (``tests/queries/0_stateless`` of a ClickHouse checkout,
or any copy of it): the user supplies it; nothing of it is in this repository, and nothing is fetched.

For every ``.sql`` file that creates a materialized view, in a fresh database (``USE``d, Atomic), each statement that
declares or changes a schema runs in turn (CREATE, ALTER, DROP, RENAME, EXCHANGE, ATTACH/DETACH, SET, USE; queries and
inserts do not: they change no schema); a statement the engine refuses is skipped, as the test expects. Before each
statement that removes or changes objects, and at the end, the schema the engine holds is taken whenever its MVs
changed: every object's ``create_table_query`` (what ``SHOW CREATE`` prints, as users dump it) written as one file per
object. chmv reads that directory (``load_project``), and each MV is:

- **right**: chmv's target, trigger edge, sources and DEPENDS ON are what the engine records (``tests/support/lineage.py``:
  ``system.tables`` targets and dependencies, the analyzer's resolved tables of its SELECT, the DEPENDS ON it prints);
- **loop**: left out as a real trigger loop, and the engine's own record has that loop (its trigger dependencies);
- **wrong**: read, but some part of its lineage differs (printed);
- **refused**: the load raised a DDLError (the reason: the problem of the MV's own statement, or "with the folder");
- **crash**: anything else (a traceback: never the answer).

Prints the figures (files, MVs, right, loops, wrong, refused by reason, crashes) and the first ``--show`` cases of each
kind that is not right.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("CHMV_PARSE_CACHE", "0")

from chmv_assets.ddl.parsing.project import load_project  # noqa: E402
from chmv_assets.ddl.sql_text import split_statements  # noqa: E402
from chmv_assets.errors import DDLError  # noqa: E402
from resources.clickhouse import ClickHouseResource  # noqa: E402

from support.lineage import (  # noqa: E402
    MvRecord,
    chmv_records,
    differences,
    engine_loops,
    engine_records,
    user_databases,
)

DATABASE = "replay"
_NOWHERE = re.compile(r"(?:reads|loads from|writes TO|uses dictionary|DEPENDS ON) (\S+), which is defined nowhere")
_CREATES_MV = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?MATERIALIZED\s+VIEW\b", re.I)
#: Statements that declare or change a schema (the rest: queries, inserts, system commands, are not run).
_SCHEMA = re.compile(r"^\s*(?:CREATE|ALTER|DROP|RENAME|EXCHANGE|ATTACH|DETACH|SET|USE|REPLACE\s+TABLE)\b", re.I)
#: Statements after which an MV or what it reads may be gone or different: the schema is taken before them.
_CHANGES = re.compile(r"^\s*(?:ALTER|DROP|RENAME|EXCHANGE|DETACH|CREATE\s+OR\s+REPLACE|REPLACE\s+TABLE)\b", re.I)
#: Settings the embedded engine does not support and that would break the replay's own queries after them.
_UNSUPPORTED = re.compile(r"^\s*SET\s+(?:implicit_transaction|throw_on_unsupported_query_inside_transaction)\b", re.I)
_PLACEHOLDER = re.compile(r"\$?\{CLICKHOUSE_DATABASE(?:_(\d))?(?::(Identifier|String))?\}|\$CLICKHOUSE_DATABASE\b")
_COMMENT_LINE = re.compile(r"^\s*--.*$", re.M)


def _database_of(match: re.Match) -> str:
    name = DATABASE + (f"_{match[1]}" if match[1] else "")
    return f"'{name}'" if match[2] == "String" else name


def statements(text: str) -> list[str]:
    """The schema statements of a test file, placeholders of its database replaced."""
    text = _PLACEHOLDER.sub(_database_of, text)
    try:
        parts = [s.text for s in split_statements(text)]
    except Exception:  # noqa: BLE001 (the splitter is chmv's: fall back to the semicolons)
        parts = [p for p in text.split(";")]
    found = []
    for part in parts:
        body = _COMMENT_LINE.sub("", part).strip()
        if body and _SCHEMA.match(body) and not _UNSUPPORTED.search(body):
            found.append(body)
    return found


class Replay:
    """One engine, one file at a time."""

    def __init__(self, path: Path):
        self.resource = ClickHouseResource(dsn=f"chdb://{path}")
        self.outcomes: list[dict] = []
        self.files = Counter()

    def file(self, path: Path) -> None:
        text = path.read_text(encoding="utf-8", errors="replace")
        if not _CREATES_MV.search(text):
            return
        self.files["with CREATE MATERIALIZED VIEW"] += 1
        seen: dict[tuple[str, str], dict] = {}
        with self.resource.get_client() as client:
            for database in user_databases(client):
                if database != "default":
                    client.command(f"DROP DATABASE IF EXISTS `{database}` SYNC")
            for suffix in ("", "_1", "_2"):
                client.command(f"CREATE DATABASE {DATABASE}{suffix} ENGINE = Atomic")
            client.command(f"USE {DATABASE}")
            last: frozenset = frozenset()
            for statement in statements(text):
                if _CHANGES.match(statement):
                    last = self._snapshot(client, path, last, seen)
                try:
                    client.command(statement)
                except Exception:  # noqa: BLE001, S112 (the test expects some statements to fail)
                    continue
            self._snapshot(client, path, last, seen)
            client.command("USE default")
        if seen:
            self.files["with an MV the engine accepted"] += 1
        self.outcomes += seen.values()

    def _snapshot(self, client, path: Path, last: frozenset, seen: dict) -> frozenset:
        """The schema the engine holds now, read by chmv, if its MVs changed since ``last``."""
        databases = [d for d in user_databases(client) if d != "default"]
        rows = client.query(
            "SELECT database, name, engine, create_table_query FROM system.tables "
            "WHERE database IN {dbs:Array(String)} AND NOT startsWith(name, '.inner') "
            "AND NOT startsWith(name, '.tmp') ORDER BY database, name",
            parameters={"dbs": databases},
        ).result_rows
        views = frozenset((f"{d}.{n}", q) for d, n, e, q in rows if e == "MaterializedView")
        if not views or views == last:
            return views
        engine, _ = engine_records(client, databases)
        with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
            files = {}
            for i, database in enumerate(databases):
                create = client.query(f"SHOW CREATE DATABASE `{database}`").result_rows[0][0]
                (Path(tmp) / f"0{i:03}_{database}.sql").write_text(create + ";\n")
            for i, (database, name, _, query) in enumerate(rows):
                file = Path(tmp) / f"{i + 1:04}.sql"
                file.write_text(query + ";\n")
                files[str(file)] = f"{database}.{name}"
            outcome = self._read(tmp, files, engine)
        for fqn, query in views:
            if (fqn, query) not in seen and fqn in outcome:
                seen[(fqn, query)] = {"file": path.name, "mv": fqn, "create": query, **outcome[fqn]}
        return views

    @classmethod
    def _read(
        cls, ddl_dir: str, files: dict[str, str], engine: dict[str, MvRecord], external: tuple[str, ...] = ()
    ) -> dict[str, dict]:
        try:
            project = load_project(ddl_dir, default_database=DATABASE, external=external)
        except DDLError as err:
            own = {files.get(p.file): p.message.splitlines()[0] for p in err.problems}
            first = err.problems[0].message.splitlines()[0] if err.problems else str(err)
            refused = {
                mv: {
                    "outcome": "refused",
                    "why": own.get(mv) or f"with the folder: {files.get(err.problems[0].file)}: {first}",
                }
                for mv in engine
            }
            # what the engine kept of a test that dropped or renamed a table: chmv wants it defined or external
            missing = [m[1] for p in err.problems if (m := _NOWHERE.search(p.message))]
            if not external and len(missing) == len(err.problems):
                again = cls._read(ddl_dir, files, engine, tuple(missing))
                for mv, outcome in refused.items():
                    outcome["declared external"] = again[mv]["outcome"]
            return refused
        except Exception as err:  # noqa: BLE001 (what the replay is for: a traceback is never the answer)
            tb = traceback.format_exc(limit=-3)
            return {mv: {"outcome": "crash", "why": f"{type(err).__name__}: {err}", "traceback": tb} for mv in engine}
        mine, _ = chmv_records(project)
        wrong = differences(engine, mine)
        loops = engine_loops(engine)
        found = {}
        for mv in engine:
            if mv in {r.fqn for r in project.loop_views}:
                found[mv] = {"outcome": "loop" if mv in loops else "wrong", "why": "left out as a trigger loop"}
            elif mv in wrong:
                found[mv] = {"outcome": "wrong", "why": "; ".join(wrong[mv])}
            else:
                found[mv] = {"outcome": "right", "why": ""}
        return found


def _category(why: str) -> str:
    """A refusal's reason without its names (for the counts)."""
    why = re.sub(r"`[^`]*`|'[^']*'|\b[\w.]+\.[\w.]+\b", "…", why)
    return why[:140]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="a local directory of ClickHouse's stateless tests (*.sql)")
    parser.add_argument("--limit", type=int, help="only the first N files that create an MV")
    parser.add_argument("--show", type=int, default=10, help="cases printed per kind that is not right")
    parser.add_argument("--json", type=Path, help="write every MV's outcome here")
    args = parser.parse_args()
    files = sorted(p for p in args.dir.glob("*.sql") if _CREATES_MV.search(p.read_text(errors="replace")))
    if args.limit:
        files = files[: args.limit]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replay-engine-") as tmp:
        replay = Replay(Path(tmp) / "chdb")
        for path in files:
            replay.file(path)
    outcomes = replay.outcomes
    counts = Counter(o["outcome"] for o in outcomes)
    print(f"replay of {args.dir}: {len(files)} files with CREATE MATERIALIZED VIEW ({time.monotonic() - started:.0f}s)")
    print(f"  files where the engine accepted an MV: {replay.files['with an MV the engine accepted']}")
    print(
        f"  MVs: {len(outcomes)}; right {counts['right']}, loops left out {counts['loop']}, wrong {counts['wrong']}, "
        f"refused {counts['refused']}, crashes {counts['crash']}"
    )
    for kind in ("refused", "crash"):
        reasons = Counter(_category(o["why"]) for o in outcomes if o["outcome"] == kind)
        for why, n in reasons.most_common():
            print(f"  {kind} ({n}): {why}")
    external = Counter(o["declared external"] for o in outcomes if "declared external" in o)
    if external:
        print(
            "  refused for a table the schema no longer holds, read again with it declared external: "
            + ", ".join(f"{kind} {n}" for kind, n in external.most_common())
        )
    for kind in ("wrong", "refused", "crash"):
        for o in [o for o in outcomes if o["outcome"] == kind][: args.show]:
            print(f"\n{kind}: {o['file']} {o['mv']}: {o['why']}\n  {o['create'][:400]}")
            if "traceback" in o:
                print("  " + o["traceback"].replace("\n", "\n  "))
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

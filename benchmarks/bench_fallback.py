"""What reading with ClickHouse's own parser costs (the fallback where sqlglot cannot read a statement), and that a
directory sqlglot reads entirely costs nothing more (no worker started).

Run: ``.venv/bin/python benchmarks/bench_fallback.py [--views N] [--repeat R]``. One process, the parse cache off,
CPU time of this process plus the worker's (``resource.getrusage`` of the children), best of R:

- plain: the 1,000-MV directory of ``bench_definitions.py`` (sqlglot reads every statement): parse time, and the
  number of worker starts (must be 0);
- 1 %: the same with one MV in a hundred written with an alias inside a function's argument (sqlglot cannot read it);
- all: every MV written so: the fallback's cost per statement = (all − plain) / N, the worker's start apart;
- twin: the plain directory written for a cluster (``ON CLUSTER`` on every statement, ``Replicated*`` engines) and
  read as the embedded engine's local twin (each object with a stand-in read again): the twin's cost per object.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ["CHMV_PARSE_CACHE"] = "0"

from bench_definitions import generate  # noqa: E402

from chmv_assets.ddl.loader import gc_paused, load  # noqa: E402
from chmv_assets.ddl.parsing.project import load_project  # noqa: E402
from chmv_assets.ddl.server_grammar import server_grammar  # noqa: E402

#: The rewrite that makes an MV unreadable for sqlglot and leaves its result alone: an alias inside an argument.
_ALIAS = ("sumState(toUInt64(1)) AS requests", "sumState(toUInt64(1 + 0 * length(lower(r.endpoint AS e)))) AS requests")


def cpu() -> float:
    """CPU seconds of this process and of the parser's worker while it runs (``/proc``: a live child's time is not in
    ``getrusage``)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    worker = 0.0
    process = server_grammar()._process
    if process is not None:
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        worker = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own.ru_utime + own.ru_stime + worker


def unreadable(root: Path, every: int) -> int:
    """Rewrite every ``every``-th single MV of the directory with an alias inside an argument; how many."""
    count = seen = 0
    for path in sorted(root.glob("*.sql")):
        text = path.read_text()
        parts = text.split(_ALIAS[0])
        out = [parts[0]]
        for part in parts[1:]:
            seen += 1
            hit = seen % every == 0
            count += hit
            out += [_ALIAS[1] if hit else _ALIAS[0], part]
        path.write_text("".join(out))
    return count


def clustered(root: Path) -> None:
    """Write every statement of the directory for a cluster: ON CLUSTER, Replicated engines."""
    for path in sorted(root.glob("*.sql")):
        text = path.read_text()
        text = re.sub(
            r"(CREATE (?:TABLE|MATERIALIZED VIEW|DATABASE IF NOT EXISTS) [\w.]+)", r"\1 ON CLUSTER main", text
        )
        text = re.sub(r"ENGINE = (\w*)MergeTree", r"ENGINE = Replicated\1MergeTree", text)
        path.write_text(text)


def parse(root: Path, repeat: int, *, twin: bool = False) -> tuple[float, float]:
    """Best CPU and wall seconds of reading the directory (the worker stays up between rounds, as in one load)."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        with gc_paused():
            c0, w0 = cpu(), time.perf_counter()
            if twin:
                load(root, twin=True)
            else:
                load_project(root, default_database="bench")
            c1, w1 = cpu(), time.perf_counter()
        best_cpu, best_wall = min(best_cpu, c1 - c0), min(best_wall, w1 - w0)
    return best_cpu, best_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    grammar = server_grammar()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {name: Path(tmp) / name for name in ("plain", "one_percent", "all", "twin")}
        for path in dirs.values():
            path.mkdir()
            generate(path, args.views)
        singles = unreadable(dirs["one_percent"], 100)
        every = unreadable(dirs["all"], 1)
        clustered(dirs["twin"])
        (dirs["twin"] / "chmv.toml").write_text('default_database = "bench"\npartition_start = "2026-01-01"\n')

        plain = parse(dirs["plain"], args.repeat)
        assert grammar.starts == 0, "a directory sqlglot reads entirely started ClickHouse's parser"
        c0, w0 = cpu(), time.perf_counter()
        assert isinstance(grammar.ast("SELECT 1"), str)
        start_cpu, start_wall = cpu() - c0, time.perf_counter() - w0
        some = parse(dirs["one_percent"], args.repeat)
        asked = grammar.questions
        everything = parse(dirs["all"], args.repeat)
        asked = (grammar.questions - asked) // args.repeat
        read_plain = parse(dirs["twin"], args.repeat)
        twin = parse(dirs["twin"], args.repeat, twin=True)
        objects = len({s.object for s in load(dirs["twin"], twin=True).project.stand_ins})
        grammar.close()

    print(
        f"{args.views} MVs, CPU seconds (this process and the parser's worker), best of {args.repeat}; wall in brackets"
    )
    print(f"  plain (sqlglot reads all)      {plain[0]:6.2f} s  [{plain[1]:.2f} s]  worker starts: 0")
    print(f"  worker start (once per load)   {start_cpu:6.2f} s  [{start_wall:.2f} s]")
    print(
        f"  {singles:4d} MVs for ClickHouse (1 %) {some[0]:6.2f} s  [{some[1]:.2f} s]  x{some[0] / plain[0]:.2f} of plain"
    )
    ratio = everything[0] / plain[0]
    print(
        f"  {every:4d} MVs for ClickHouse (all) {everything[0]:6.2f} s  [{everything[1]:.2f} s]  x{ratio:.2f} of plain"
    )
    per = (everything[0] - plain[0]) / every * 1000
    per_wall = (everything[1] - plain[1]) / every * 1000
    print(f"  fallback per statement         {per:6.2f} ms [{per_wall:.2f} ms] more than sqlglot's own parse")
    print(f"  (each: {asked // every} questions to ClickHouse in one round trip)")
    print(f"  clustered directory, as written {read_plain[0]:5.2f} s  [{read_plain[1]:.2f} s]")
    extra = (twin[0] - read_plain[0]) / max(objects, 1) * 1000
    print(
        f"  its local twin ({objects} objects) {twin[0]:5.2f} s  [{twin[1]:.2f} s]  {extra:.2f} ms per object read again"
    )


if __name__ == "__main__":
    main()

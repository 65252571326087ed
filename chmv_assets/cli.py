"""The ``chmv`` command: lineage, plan, apply, rebuild, and loading the example data."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from contextlib import ExitStack, nullcontext

from chmv_assets.engine_logs import engine_messages
from chmv_assets.errors import CertifyUsageError, ChmvError, DDLError

PLAN_EXIT_CODES = """exit codes (for CI):
  0  no changes: the server matches the DDL directory
  3  changes pending (printed in order; `chmv apply` makes them)
  2  invalid DDL: a parse error, a refused statement (POPULATE, OR REPLACE MV), or the server's
     preflight refused a statement; nothing was changed. (`chmv apply` and `chmv lineage`: also a
     trigger loop in the DDL: its MVs are left out, everything else was applied or printed)
  1  any other error (the server unreachable, the embedded engine busy)"""
#: The commands whose output is their progress: chmv's log messages are printed as they come. (``plan`` and
#: ``lineage`` print a document, JSON for CI among them: only that.)
PRINTS_PROGRESS = frozenset({"apply", "rebuild", "load-demo"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chmv", description="ClickHouse materialized-view management.")
    sub = parser.add_subparsers(dest="command", required=True)

    def ddl_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--ddl-dir", required=True, help="directory of .sql files (and chmv.toml)")
        p.add_argument("--default-database", help="database for unqualified names (overrides chmv.toml)")

    lineage = sub.add_parser("lineage", help="print the MV graph of a DDL directory")
    ddl_args(lineage)
    lineage.add_argument("--format", choices=("json", "mermaid", "dot"), default="json")
    lineage.add_argument("--impact", metavar="DB.TABLE", help="print only what is downstream of this object")

    plan = sub.add_parser(
        "plan",
        help="diff the DDL directory against the server and print the ordered plan; nothing is changed",
        epilog=PLAN_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ddl_args(plan)
    plan.add_argument("--dsn", help="http(s)://… or chdb:///path (default: the embedded engine)")
    plan.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    plan.add_argument(
        "--allow-drop",
        action="store_true",
        help="plan drops of objects and columns the DDL no longer has (else they are notes)",
    )

    apply = sub.add_parser(
        "apply",
        help="make the plan's changes with zero gap: creations, ALTERs, MODIFY QUERY, "
        "new versions swapped in, history re-derived",
        epilog=PLAN_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ddl_args(apply)
    apply.add_argument("--dsn", help="http(s)://… or chdb:///path (default: the embedded engine)")
    apply.add_argument("--allow-drop", action="store_true", help="drop objects and columns the DDL no longer has")

    rebuild = sub.add_parser("rebuild", help="rebuild partitions of a target through the planner (or --dry-run it)")
    ddl_args(rebuild)
    rebuild.add_argument("--dsn", help="http(s)://… or chdb:///path (default: the embedded engine)")
    rebuild.add_argument("--target", required=True, metavar="DB.TABLE", help="the MV target to rebuild")
    rebuild.add_argument(
        "--partition",
        action="append",
        default=[],
        metavar="KEY",
        help="partition key as in the Dagster UI (2026-09-01, 2026-09-01-13:00, 2026-09-01|eu for a window and a key "
        "value, eu for a key alone); repeatable; none: the whole table",
    )
    rebuild.add_argument("--engine", choices=("auto", "clickhouse", "spark", "file"), default="auto")
    rebuild.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    rebuild.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the parity of the rebuilt partitions (by default each is recomputed from where its rows were read "
        "and compared; exit 1 if one does not match)",
    )
    rebuild.add_argument(
        "--force",
        action="store_true",
        help="rebuild partitions whose rows neither the source table nor the landing zone holds "
        "from what the source holds, and swap even where that shrinks them",
    )

    certify = sub.add_parser(
        "certify",
        help="a seeded, randomized history of writers, chmv's runs and faults on a scratch twin, checked against "
        "the MVs' own SELECT (exit 0: no anomaly, 1: anomalies, 2: bad input)",
    )
    ddl_args(certify)
    certify.add_argument("--seconds", type=float, default=25.0, help="wall time of the run, checking included")
    certify.add_argument("--seed", type=int, default=0, help="the seed: the same seed replays the same choices")
    certify.add_argument("--faults", help="all, none, or a comma list (default: each drawn by the seed)")
    certify.add_argument("--dsn", help="only the embedded scratch engine is supported (a server: not yet)")
    certify.add_argument("--report", help="also write the report as JSON here")

    demo = sub.add_parser("load-demo", help="deploy the example DDL and load generated data")
    ddl_args(demo)
    demo.add_argument("--dsn", help="http(s)://… or chdb:///path (default: the embedded engine)")
    demo.add_argument("--rows", type=int, default=1_000_000, help="about this many rows in all sources")
    demo.add_argument("--landing-dir", help="also write the rows as a Parquet landing zone here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for invalid DDL, 1 for other failures)."""
    from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError

    args = _parser().parse_args(argv)
    try:
        with engine_messages(print) if args.command in PRINTS_PROGRESS else nullcontext():
            return _run(args)
    except DDLError as err:
        print(str(err), file=sys.stderr)
        if getattr(args, "format", None) == "json" and args.command == "plan":
            problems = [
                {"file": p.file, "line": p.line, "column": p.column, "message": p.message, "fix": p.hint}
                for p in err.problems
            ]
            print(json.dumps({"status": "invalid", "exit_code": 2, "problems": problems}, indent=2))
        return 2
    except ChmvError as err:
        print(f"chmv: {err}", file=sys.stderr)
        return 1
    except OperationalError as err:  # no answer within the connect or read timeout, or no connection at all
        limits = "connect_timeout_seconds / read_timeout_seconds, or the DSN's ?connect_timeout=&send_receive_timeout="
        print(f"chmv: ClickHouse did not answer: {_first_line(err)} (time limits: {limits})", file=sys.stderr)
        return 1
    except ClickHouseError as err:
        print(
            f"chmv: the server failed: {str(err).strip().splitlines()[0] if str(err).strip() else err}", file=sys.stderr
        )
        return 1


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _run(args: argparse.Namespace) -> int:
    from chmv_assets.ddl.loader import load
    from resources.clickhouse import clickhouse_from_env, for_project

    if args.command == "certify":
        return _certify(args)
    resource = None if args.command == "lineage" else clickhouse_from_env(args.dsn)
    # On the embedded engine chmv deploys and reads the local twin of the DDL (docs/any-schema.md, "A local twin").
    twin = resource is not None and resource.is_embedded
    loaded = load(args.ddl_dir, default_database=args.default_database, twin=twin)
    if not loaded.project.views and args.command != "load-demo":
        print(f"chmv: warning: no materialized view found in {loaded.config.ddl_dir}", file=sys.stderr)
    if args.command == "lineage":
        graph = loaded.graph
        if args.impact:
            print("\n".join(graph.impact(args.impact)))
        elif args.format == "json":
            print(graph.to_json())
        elif args.format == "mermaid":
            print(graph.to_mermaid())
        else:
            print(graph.to_dot())
        return _loops_left_out(loaded.project)

    from chmv_assets.ddl.twin import describe_stand_ins
    from chmv_assets.engine.clients import command_int
    from chmv_assets.engine.lifecycle.deploy import apply

    assert resource is not None
    # the DSN (else $CHMV_CLICKHOUSE_DSN), credentials from $CLICKHOUSE_USER / $CLICKHOUSE_PASSWORD over the DSN's;
    # every session in the project's default_database
    config = loaded.config
    resource = for_project(
        resource, config.default_database, where=f"{config.ddl_dir}/chmv.toml", server_version=config.server_version
    )
    if args.command in ("apply", "load-demo"):
        for line in describe_stand_ins(loaded.project):
            print(line)
    if args.command == "rebuild":
        return _rebuild(args, loaded, resource)
    if args.command == "plan":
        return _plan(args, loaded, resource)
    if args.command == "apply":
        return _apply(args, loaded, resource)
    with resource.get_client() as client:
        result = apply(client, loaded.project)
        print(f"apply: {len(result.created)} created, {len(result.existing)} already there")
        if args.command == "load-demo":
            from chmv_assets import demo_data

            if not demo_data.fits(loaded.project):
                print(
                    "load-demo: generated rows exist for examples/ddl only; insert rows into the sources (a stream "
                    "table's stand-in feeds its consumer MVs)"
                )
                return 0
            tables = demo_data.generate_all(args.rows)
            existing = command_int(client, "SELECT count() FROM analytics.api_requests")
            if existing:
                print(f"load-demo: source tables already hold data ({existing} api_requests rows); not loading twice")
            else:
                counts = demo_data.load_into_clickhouse(client, tables)
                print("load-demo: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            if args.landing_dir:
                files = demo_data.write_landing_zone(args.landing_dir, tables)
                print(f"load-demo: {len(files)} Parquet files in {args.landing_dir}")
    return 0


def _certify(args: argparse.Namespace) -> int:
    """``chmv certify``: 0 when every property held, 1 with anomalies (the report says which), 2 for bad input."""
    from pathlib import Path

    from chmv_assets.certify.report import render, write_json
    from chmv_assets.certify.runner import certify, not_supported_server

    try:
        not_supported_server(args.dsn)
        result = certify(args.ddl_dir, seconds=args.seconds, seed=args.seed, faults=args.faults)
    except CertifyUsageError as err:
        print(f"chmv: {err}", file=sys.stderr)
        return 2
    print(render(result, args.ddl_dir, args.seconds))
    if args.report:
        write_json(result, Path(args.report), args.ddl_dir, args.seconds)
    return 1 if result.anomalies else 0


def _plan(args: argparse.Namespace, loaded, resource) -> int:
    """``chmv plan``: the lifecycle plan, printed; the exit code says whether changes are pending."""
    from chmv_assets.engine.ingest.landing import landing_dir
    from chmv_assets.engine.lifecycle.planner import plan_lifecycle
    from chmv_assets.engine.lifecycle.preflight import preflight

    with resource.get_client() as client:
        plan = plan_lifecycle(client, loaded, allow_drop=args.allow_drop, root=landing_dir(loaded))
        preflight(client, loaded, plan)
    if args.format == "json":
        print(plan.to_json())
    else:
        print(plan.describe(markdown=args.format == "markdown"))
    return plan.exit_code


def _apply(args: argparse.Namespace, loaded, resource) -> int:
    """``chmv apply``: plan, preflight (nothing is touched if the server refuses a statement), then the changes."""
    from chmv_assets.engine.ingest.landing import landing_dir
    from chmv_assets.engine.lifecycle.apply import apply_plan
    from chmv_assets.engine.lifecycle.plan import Action
    from chmv_assets.engine.lifecycle.planner import plan_lifecycle
    from chmv_assets.engine.lifecycle.preflight import preflight

    def stage(*args, **kwargs) -> None:  # Spark starts only if a partition is read from the landing zone
        from spark.session import get_spark_session
        from spark.staging import SparkStager

        SparkStager(get_spark_session)(*args, **kwargs)

    root = landing_dir(loaded)
    with ExitStack() as opened:
        client = opened.enter_context(resource.get_client())
        plan = plan_lifecycle(client, loaded, allow_drop=args.allow_drop, root=root)
        preflight(client, loaded, plan)
        if plan.has_changes:
            print(plan.describe())
        # the apply takes the client over (one opening of the engine for plan, preflight and apply)
        apply_plan(resource, loaded, plan, stager=stage, root=root, opened=(client, opened.pop_all()))
    project = loaded.project
    objects = len(project.databases) + len(project.tables) + len(project.dictionaries) + len(project.views)
    objects += len(project.kept)
    created = sum(c.action in (Action.CREATE, Action.CREATE_DATABASE) for c in plan.changes)
    print(f"apply: {created} created, {objects - created} already there")
    return _loops_left_out(project)


def _loops_left_out(project) -> int:
    """Print the trigger loops the load left out (each naming its MVs at ``file:line``) on stderr: exit 2 with one,
    the rest having been printed or applied; else 0."""
    from chmv_assets.ddl.loader import loop_report

    report = loop_report(project)
    if not report:
        return 0
    print(report, file=sys.stderr)
    return 2


def _rebuild(args: argparse.Namespace, loaded, resource) -> int:
    """``chmv rebuild``: the same rebuild path as the target assets (plan, execute, then verify what was rebuilt)."""
    from chmv_assets.ddl.models import ObjectRef
    from chmv_assets.engine.health.parity import verify_rebuilt
    from chmv_assets.engine.ingest.landing import landing_dir
    from chmv_assets.engine.rebuild.executor import plan_for, run_rebuild

    database, _, name = args.target.partition(".")
    target = (
        ObjectRef(database=database, name=name)
        if name
        else ObjectRef(database=loaded.config.default_database, name=database)
    )
    if target not in loaded.project.targets:
        raise ChmvError(
            f"{args.target} is not an MV target of {args.ddl_dir}; targets: "
            + ", ".join(t.fqn for t in loaded.project.targets)
        )
    partitioning = loaded.partitioning(target)  # the keys are Dagster's: the partitioning's one codec reads them
    if args.partition and not partitioning.partitioned:
        raise ChmvError(f"{target.fqn} is unpartitioned: drop --partition to rebuild the whole table")
    windows = [partitioning.window(key) for key in args.partition] or [None]
    root = landing_dir(loaded)
    if args.dry_run:
        plan = plan_for(resource, loaded, target, windows, engine=args.engine, root=root, force=args.force)
        print(plan.describe())
        if plan.refused:  # what the run would say; exit 1 as the run would
            print(f"chmv: {plan.refusal()}", file=sys.stderr)
            return 1
        if plan.deferred and len(plan.deferred) == len(plan.steps):
            print(f"chmv: {plan.deferral()}", file=sys.stderr)
            return 1
        return 0
    from spark.session import get_spark_session
    from spark.staging import SparkStager

    run = run_rebuild(
        resource,
        loaded,
        target,
        windows,
        engine=args.engine,
        root=root,
        stager=SparkStager(get_spark_session),  # Spark starts only for a partition read from the landing zone
        force=args.force,
        owner="chmv rebuild",
        verify=None if args.no_verify else lambda client, plan, results: verify_rebuilt(client, loaded, plan, results),
    )
    for r in run.results:
        print(f"rebuild: {r.target} {r.partition or '(all)'}: {r.engine}, {r.method}, {r.rows_written} rows")
    for verdict in run.verified or ():
        print(f"parity: {verdict.describe()}")
    failed = [v for v in run.verified or () if not v.passed]
    if failed:
        print(f"chmv: parity failed for {', '.join(v.partition or '(all)' for v in failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

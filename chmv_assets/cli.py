"""The ``chmv`` command: lineage, apply, and loading the example data."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from chmv_assets.errors import ChmvError, DDLError


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

    apply = sub.add_parser("apply", help="create what is missing, in dependency order")
    ddl_args(apply)
    apply.add_argument("--dsn", help="http(s)://… or chdb:///path (default: the embedded engine)")

    demo = sub.add_parser("load-demo", help="deploy the example DDL and load generated data")
    ddl_args(demo)
    demo.add_argument("--dsn", help="http(s)://… or chdb:///path (default: the embedded engine)")
    demo.add_argument("--rows", type=int, default=1_000_000, help="about this many rows in all sources")
    demo.add_argument("--landing-dir", help="also write the rows as a Parquet landing zone here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for invalid DDL, 1 for other failures)."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except DDLError as err:
        print(str(err), file=sys.stderr)
        return 2
    except ChmvError as err:
        print(f"chmv: {err}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from chmv_assets.ddl.loader import load

    loaded = load(args.ddl_dir, default_database=args.default_database)
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
        return 0

    from chmv_assets.engine.apply import apply
    from resources.clickhouse import ClickHouseResource

    resource = ClickHouseResource(dsn=args.dsn)
    with resource.get_client() as client:
        result = apply(client, loaded.project, log=print)
        print(f"apply: {len(result.created)} created, {len(result.existing)} already there")
        if args.command == "load-demo":
            from chmv_assets.engine import demo_data

            tables = demo_data.generate_all(args.rows)
            existing = int(client.command("SELECT count() FROM analytics.api_requests"))
            if existing:
                print(f"load-demo: source tables already hold data ({existing} api_requests rows); not loading twice")
            else:
                counts = demo_data.load_into_clickhouse(client, tables)
                print("load-demo: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            if args.landing_dir:
                files = demo_data.write_landing_zone(args.landing_dir, tables)
                print(f"load-demo: {len(files)} Parquet files in {args.landing_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

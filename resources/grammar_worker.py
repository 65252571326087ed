"""ClickHouse's own parser in a process of its own: what the DDL layer asks where sqlglot cannot read a statement.

Run as ``python -m resources.grammar_worker`` by :mod:`chmv_assets.ddl.server_grammar`, never imported by chmv's
layers. One JSON request per line on stdin, one JSON answer per line on stdout (a list of requests is answered by a list, in order)::

    {"op": "ast" | "tree" | "format", "sql": "..."}  ->  {"ok": true, "text": "..."} | {"ok": false, "error": "..."}

- ``ast``: ``EXPLAIN AST <sql>``: the server's parse of any statement (nothing is executed);
- ``tree``: ``EXPLAIN QUERY TREE run_passes = 0 <select>``: the query tree of a SELECT before analysis (labelled
  sections, no table needs to exist);
- ``format``: ``formatQuerySingleLine(<sql>)``.

The worker opens an in-memory engine of its own (chdb ``:memory:``). It is a separate process because chdb admits one
engine path per process: the process that asks may hold the embedded engine at its state path (a plan parsing the
server's ``create_table_query``), and a second path there is refused. It never opens a path, takes no lock and never
runs a statement it is given: it only parses.
"""

from __future__ import annotations

import json
import sys

_OPS = {
    "ast": lambda sql: f"EXPLAIN AST {sql}",
    "tree": lambda sql: f"EXPLAIN QUERY TREE run_passes = 0 {sql}",
    "format": lambda sql: f"SELECT formatQuerySingleLine({_literal(sql)})",
}


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def main() -> int:
    import chdb

    connection = chdb.connect(":memory:")
    out = sys.stdout
    out.write(json.dumps({"ok": True, "text": "ready"}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            requests = json.loads(line)
            answers = [_answer(connection, r) for r in (requests if isinstance(requests, list) else [requests])]
        except ValueError as err:
            answers = [{"ok": False, "error": f"bad request: {err}"}]
        out.write(json.dumps(answers if isinstance(requests, list) else answers[0]) + "\n")
        out.flush()
    connection.close()
    return 0


def _answer(connection, request: dict) -> dict:
    try:
        query = _OPS[request["op"]](request["sql"])
    except (KeyError, TypeError) as err:
        return {"ok": False, "error": f"bad request: {err}"}
    try:
        return {"ok": True, "text": connection.query(query, "TabSeparatedRaw").data()}
    except Exception as err:  # the server's refusal, with its message
        # ClickHouse places a syntax error at a byte of the query it ran: where the statement starts in it
        prefix = query.encode().find(request["sql"].encode())
        return {"ok": False, "error": str(err), "prefix": max(prefix, 0)}


if __name__ == "__main__":
    sys.exit(main())

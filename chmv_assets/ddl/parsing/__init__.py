"""Reading a DDL directory into the frozen models of :mod:`chmv_assets.ddl.models`, one job per module.

The layers follow sqlglot's own (tokens, parser, expressions by kind, scope analysis, errors with positions):

- :mod:`chmv_assets.ddl.sql_text` — tokens, statements and their spans, verbatim clauses (no tree);
- :mod:`.context` — the problems of one read and where a statement stands in its file;
- :mod:`.trees` — sqlglot's tree of one statement and what every reader asks of its nodes;
- :mod:`.server` — questions to ClickHouse's own parser, its refusals placed as problems;
- :mod:`.set_aside` — a CREATE sqlglot cannot read, read with the parts it cannot read set aside;
- :mod:`.databases`, :mod:`.tables` (with :mod:`.partition_by`), :mod:`.dictionaries`, :mod:`.views` — one reader
  per kind of object; :mod:`.select` — an MV's or a view's SELECT facts from sqlglot's tree (ClickHouse's query tree:
  :mod:`chmv_assets.ddl.query_tree`); :mod:`.kept` — statements kept as written (functions, plain views, access
  control, named collections);
- :mod:`.statements` — one statement to its model (:func:`~.statements.parse_statement`), sqlglot first and
  ClickHouse's parser where sqlglot fails;
- :mod:`.project` — a directory to a :class:`~chmv_assets.ddl.models.Project` (:func:`~.project.load_project`),
  with :mod:`.references` (every name defined somewhere).
"""

"""The local twin of a production schema: what the embedded engine runs in place of what it cannot.

A production schema names clusters (``ON CLUSTER``), Keeper (``Replicated*``), other hosts (``Distributed``), brokers
and queues (Kafka, RabbitMQ, NATS, S3Queue, FileLog…), remote systems (S3, URL, MySQL…) and access control. The
embedded engine is one process without any of them, so on it each such object gets a documented stand-in
(:func:`local_twin`, docs/any-schema.md, "A local twin of a production schema"):

- ``ON CLUSTER`` is dropped;
- ``Replicated*`` and ``Shared*`` engines become their plain family, with the engine's own arguments;
  a ``Replicated`` database becomes ``Atomic``;
- ``Distributed`` becomes a ``Buffer`` that writes straight through to the local table it reads (inserts land there
  and fire its MVs; reads read it); ``Merge`` and ``Null`` run as they are;
- a stream engine becomes a ``Null`` table of the same columns plus the engine's virtual columns (``_topic``,
  ``_offset``…) as ``MATERIALIZED`` columns: like virtual columns, read by name and never through ``*`` (a consumer's
  ``SELECT *`` yields the declared columns only, as on the server); tests and demos insert into it (the virtual
  columns with ``insert_allow_materialized_columns = 1``), and its consumer MVs fire as they would on messages;
- a remote engine becomes an empty ``MergeTree`` of the same columns; a dictionary loading from a remote system
  gets ``SOURCE(NULL())``, one loading from another ClickHouse host reads the local table;
- a storage policy and TTL moves to volumes or disks are dropped (the embedded engine has one disk);
- users, roles, grants, row policies, quotas and settings profiles are not deployed (no access control there).

The twin is a :class:`~chmv_assets.ddl.models.Project` like any other (``project.twin`` is True, its ``stand_ins``
list every substitution), so plans, applies, rebuilds and checks on the embedded engine read exactly what is
deployed there, and ``chmv plan`` right after ``chmv apply`` finds no change. A stream table keeps its production
engine in the model (only its statement is the stand-in's): chmv still never reads it. On a server nothing is
substituted: the twin is made only for an embedded engine.
"""

from __future__ import annotations

import re

from chmv_assets.ddl.models import (
    Database,
    Dictionary,
    KeptObject,
    MaterializedView,
    Project,
    StandIn,
    Table,
)
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.sql_text import clauses, on_cluster_span, select_start, tokenize

#: Virtual columns of each stream engine, as ``(name, type, value when not inserted)``: a consumer MV may read them.
STREAM_VIRTUAL_COLUMNS: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    "Kafka": (
        ("_topic", "LowCardinality(String)", "''"),
        ("_key", "String", "''"),
        ("_offset", "UInt64", "0"),
        ("_timestamp", "Nullable(DateTime)", "now()"),
        ("_timestamp_ms", "Nullable(DateTime64(3))", "now64(3)"),
        ("_partition", "UInt64", "0"),
        ("`_headers.name`", "Array(String)", None),
        ("`_headers.value`", "Array(String)", None),
        ("_raw_message", "String", "''"),
        ("_error", "String", "''"),
    ),
    "RabbitMQ": (
        ("_exchange_name", "String", "''"),
        ("_channel_id", "String", "''"),
        ("_delivery_tag", "UInt64", "0"),
        ("_redelivered", "UInt8", "0"),
        ("_message_id", "String", "''"),
        ("_timestamp", "UInt64", "toUnixTimestamp(now())"),
        ("_raw_message", "String", "''"),
        ("_error", "String", "''"),
    ),
    "NATS": (("_subject", "String", "''"), ("_raw_message", "String", "''"), ("_error", "String", "''")),
    "FileLog": (
        ("_filename", "LowCardinality(String)", "''"),
        ("_offset", "UInt64", "0"),
        ("_raw_record", "String", "''"),
        ("_error", "String", "''"),
    ),
    "S3Queue": (
        ("_path", "LowCardinality(String)", "''"),
        ("_file", "LowCardinality(String)", "''"),
        ("_size", "Nullable(UInt64)", "NULL"),
        ("_time", "Nullable(DateTime)", "now()"),
        ("_etag", "LowCardinality(String)", "''"),
    ),
    "RedisStreams": (
        ("_stream", "String", "''"),
        ("_key", "String", "''"),
        ("_timestamp", "UInt64", "0"),
        ("_sequence_number", "UInt64", "0"),
    ),
    "MQTT": (("_topic", "String", "''"),),
}
STREAM_VIRTUAL_COLUMNS["AzureQueue"] = STREAM_VIRTUAL_COLUMNS["S3Queue"]
#: Engines reading or writing a system the embedded engine cannot reach (or Keeper): an empty MergeTree stands in.
_REMOTE_NAMES = """
    S3 URL MySQL PostgreSQL MongoDB HDFS JDBC ODBC Redis AzureBlobStorage Iceberg IcebergS3 IcebergAzure IcebergHDFS
    IcebergLocal DeltaLake DeltaLakeS3 DeltaLakeAzure DeltaLakeLocal Hudi Hive SQLite ExternalDistributed
    MaterializedPostgreSQL KeeperMap GCS OSS COSN YTsaurus ArrowFlight Executable ExecutablePool Paimon TimeSeries
    """
REMOTE_ENGINES = frozenset(_REMOTE_NAMES.split())
#: Database engines the embedded engine cannot run: an Atomic database stands in.
REMOTE_DATABASE_ENGINES = frozenset(
    {"Replicated", "MySQL", "PostgreSQL", "MaterializedPostgreSQL", "MaterializedMySQL", "SQLite", "DataLakeCatalog"}
)
#: Table settings naming storage the embedded engine does not have.
STORAGE_SETTINGS = frozenset({"storage_policy", "disk"})
_TTL_MOVE = re.compile(r"\bTO\s+(?:DISK|VOLUME)\b", re.IGNORECASE)
_HOST = re.compile(r"\bHOST\b", re.IGNORECASE)
_NOT_DEPLOYED = "not deployed"


#: Since this version ClickHouse refuses an AggregatingMergeTree whose plain columns are outside its sorting key
#: (``allow_dimensions_outside_sorting_key``, a MergeTree setting the ``compatibility`` setting does not restore).
DIMENSIONS_RULE_SINCE = (26, 9)
DIMENSIONS_SETTING = "allow_dimensions_outside_sorting_key"


def version_tuple(version: str) -> tuple[int, ...]:
    """``"24.8.3"`` → ``(24, 8, 3)``."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:4])


def local_twin(project: Project, *, server_version: str | None = None) -> Project:
    """The project as the embedded engine runs it: every object that needs a cluster, Keeper, a broker, a remote
    system or access control replaced by its stand-in, each listed in ``stand_ins`` (see the module docstring).

    Args:
        server_version: The production server's version (chmv.toml ``server_version``): what it accepts and the
            embedded engine's newer rules refuse is allowed (an AggregatingMergeTree's dimension columns outside
            its sorting key, before 26.9).
    """
    if project.twin:
        return project
    twin = _Twin(project, server_version)
    databases = tuple(twin.database(d) for d in project.databases)
    tables = {ref: twin.table(t) for ref, t in project.tables.items()}
    dictionaries = {ref: twin.dictionary(d) for ref, d in project.dictionaries.items()}
    views = {ref: twin.view(v) for ref, v in project.views.items()}
    kept = tuple(k for k in (twin.kept(k) for k in project.kept) if k is not None)
    return Project(
        ddl_dir=project.ddl_dir,
        default_database=project.default_database,
        databases=databases,
        tables=tables,
        dictionaries=dictionaries,
        views=views,
        kept=kept,
        external=project.external,
        extra=project.extra,
        twin=True,
        stand_ins=tuple(twin.stand_ins),
        loops=project.loops,  # never deployed: as written
    )


def null_stand_in_sql(table: Table, name_sql: str) -> str:
    """``CREATE TABLE <name_sql>`` of a table's ``Null`` stand-in: its columns as written and, for a stream table, the
    engine's virtual columns it does not declare. Inserting into it fires the MVs reading it, as messages would;
    reading it reads nothing: it never consumes, and it connects nowhere (the preflight's copy of a stream or remote
    table is one too)."""
    declared = {c.name for c in table.columns}
    columns = [c.definition or f"{_quoted(c.name)} {c.type}" for c in table.columns]
    engine = table.engine.name if table.engine is not None else ""
    for name, type_, default in STREAM_VIRTUAL_COLUMNS.get(engine, ()):
        if name.strip("`") not in declared:  # MATERIALIZED: by name only, never through `*`, as a virtual column
            columns.append(f"{name} {type_} MATERIALIZED {default if default is not None else '[]'}")
    return f"CREATE TABLE {name_sql} ({', '.join(columns)}) ENGINE = Null"


def _quoted(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class _Twin:
    """One twin being made: the project, and the stand-ins found so far."""

    def __init__(self, project: Project, server_version: str | None = None):
        self.project = project
        self.stand_ins: list[StandIn] = []
        self.server_version = server_version
        self.dimensions = server_version is not None and version_tuple(server_version)[:2] < DIMENSIONS_RULE_SINCE

    def note(self, obj: str, production: str, local: str, why: str = "") -> None:
        self.stand_ins.append(StandIn(object=obj, production=production, local=local, why=why))

    # -- each kind of object -------------------------------------------------------------------------

    def database(self, database: Database) -> Database:
        if "CLUSTER" not in database.statement.upper() and (database.engine or "").split("(")[0].strip() not in (
            REMOTE_DATABASE_ENGINES
        ):
            return database  # nothing to stand in for (most objects): not even tokenized again
        text = database.statement
        tokens = tokenize(text)
        edits = self._cluster(tokens, database.name)
        engine = _engine_span(tokens)
        name = (database.engine or "").split("(")[0].strip()
        update: dict = {}
        if engine is not None and name in REMOTE_DATABASE_ENGINES:
            edits.append((engine[0], engine[1], "ENGINE = Atomic"))
            self.note(database.name, text[engine[0] : engine[1]], "ENGINE = Atomic", "a database of this host only")
            update["engine"] = "Atomic"
        if not edits:
            return database
        return database.model_copy(update={**update, "statement": _splice(text, edits)})

    def table(self, table: Table) -> Table:
        engine = table.engine
        name = engine.name if engine is not None else ""
        fqn = table.ref.fqn
        if not (
            table.on_cluster
            or self._aggregating(engine, table.settings_map)
            or name in REMOTE_ENGINES
            or name == "Distributed"
            or (engine is not None and (engine.is_stream or engine.replicated or name.startswith("Shared")))
            or any(key in STORAGE_SETTINGS for key, _ in table.settings_map)
            or (table.ttl is not None and _TTL_MOVE.search(table.ttl))
        ):
            return table
        if engine is not None and engine.is_stream:
            local = null_stand_in_sql(table, _name_text(table))
            readers = ", ".join(v.ref.fqn for v in self.project.views_from(table.ref)) or "its consumer MVs"
            self.note(
                fqn,
                name,
                "Null table with its columns and the engine's virtual columns",
                f"insert into it to feed {readers}",
            )
            return self._reparsed(table, local, keep_engine=True)
        if name in REMOTE_ENGINES:
            if not table.columns:
                self.note(fqn, name, _NOT_DEPLOYED, "its columns come from the remote system")
                return table
            columns = ", ".join(c.definition or f"{_quoted(c.name)} {c.type}" for c in table.columns)
            local = f"CREATE TABLE {_name_text(table)} ({columns}) ENGINE = MergeTree ORDER BY tuple()"
            self.note(fqn, name, "empty MergeTree of the same columns", "insert rows to stand in for the remote data")
            return self._reparsed(table, local)
        text = table.statement
        tokens = tokenize(text)
        edits = self._cluster(tokens, fqn)
        span = _engine_span(tokens)
        if span is not None and engine is not None and (engine.replicated or engine.name.startswith("Shared")):
            family = engine.family
            arguments = _arguments(text, span)
            own = arguments[2:] if engine.keeper_path is not None else arguments
            replacement = f"ENGINE = {family}" + (f"({', '.join(own)})" if own else "")
            edits.append((span[0], span[1], replacement))
            self.note(
                fqn,
                text[span[0] : span[1]].removeprefix("ENGINE").lstrip(" ="),
                replacement.removeprefix("ENGINE = "),
                "no Keeper: one replica, this host",
            )
        elif span is not None and name == "Distributed":
            return self._distributed(table, tokens, span, edits)
        edits += self._storage(table, tokens)
        edits += self._dimensions(fqn, engine, table.settings_map, text, tokens, edits)
        if not edits:
            return table
        return self._reparsed(table, _splice(text, edits))

    def dictionary(self, dictionary: Dictionary) -> Dictionary:
        upper = dictionary.statement.upper()
        if "CLUSTER" not in upper and "HOST" not in upper and "CLICKHOUSE(" in upper.replace(" ", ""):
            return dictionary
        text = dictionary.statement
        tokens = tokenize(text)
        edits = self._cluster(tokens, dictionary.ref.fqn)
        source = _group_after(tokens, "SOURCE")
        if source is not None:
            inner = text[source[0] : source[1]]
            kind = inner.removeprefix("SOURCE").strip(" (").split("(")[0].strip().upper()
            local = None
            if kind == "CLICKHOUSE" and _HOST.search(inner):
                src = dictionary.source_table
                local = (
                    f"SOURCE(CLICKHOUSE(TABLE '{src.name}' DB '{src.database}'))"
                    if src is not None
                    else "SOURCE(NULL())"
                )
            elif kind not in ("CLICKHOUSE", "NULL"):
                local = "SOURCE(NULL())"
            if local is not None:
                edits.append((source[0], source[1], local))
                self.note(
                    dictionary.ref.fqn,
                    f"SOURCE({kind}(…))",
                    local,
                    "the local table" if "TABLE" in local else "empty: the remote system is not reachable",
                )
        if not edits:
            return dictionary
        return self._reparsed(dictionary, _splice(text, edits))

    def view(self, view: MaterializedView) -> MaterializedView:
        inner = view.inner_table.engine if view.inner_table is not None else None
        settings = view.inner_table.settings_map if view.inner_table is not None else ()
        if (
            not view.on_cluster
            and not (inner is not None and (inner.replicated or inner.name.startswith("Shared")))
            and not self._aggregating(inner, settings)
        ):
            return view
        text = view.statement
        tokens = tokenize(text)
        edits = self._cluster(tokens, view.ref.fqn)
        span = _engine_span(tokens)
        inner = view.inner_table.engine if view.inner_table is not None else None
        if span is not None and inner is not None and (inner.replicated or inner.name.startswith("Shared")):
            arguments = _arguments(text, span)
            own = arguments[2:] if inner.keeper_path is not None else arguments
            replacement = f"ENGINE = {inner.family}" + (f"({', '.join(own)})" if own else "")
            edits.append((span[0], span[1], replacement))
            self.note(view.ref.fqn, inner.name, inner.family, "no Keeper: one replica, this host")
        edits += self._dimensions(view.ref.fqn, inner, settings, text, tokens, edits)
        if not edits:
            return view
        return self._reparsed(view, _splice(text, edits))

    def kept(self, obj: KeptObject) -> KeptObject | None:
        if obj.kind.access_control:
            self.note(obj.label, obj.kind.keyword, _NOT_DEPLOYED, "the embedded engine has no access control")
            return None
        span = obj.cluster_span
        if span is None:
            return obj
        self.note(obj.label, f"ON CLUSTER {obj.on_cluster}", "this host only")
        removed = span.end - span.start
        update: dict = {
            "statement": _splice(obj.statement, [(span.start, span.end, "")]),
            "cluster_span": None,
            "on_cluster": None,
        }
        if obj.select_at is not None and obj.select_at >= span.end:
            update["select_at"] = obj.select_at - removed
        return obj.model_copy(update=update)

    # -- edits ---------------------------------------------------------------------------------------

    def _cluster(self, tokens, obj: str) -> list[tuple[int, int, str]]:
        span = on_cluster_span(tokens)
        if span is None:
            return []
        text = " ".join(t.text for t in tokens if span[0] <= t.start < span[1])
        self.note(obj, text, "this host only")
        return [(span[0], span[1], "")]

    def _aggregating(self, engine, settings) -> bool:
        """An AggregatingMergeTree that the production server's version accepts with dimension columns outside its
        sorting key, and the embedded engine's newer rule would refuse."""
        return (
            self.dimensions
            and engine is not None
            and engine.family == "AggregatingMergeTree"
            and not any(key == DIMENSIONS_SETTING for key, _ in settings)
        )

    def _dimensions(self, obj: str, engine, settings, text: str, tokens, edits: list) -> list[tuple[int, int, str]]:
        """The edit adding ``allow_dimensions_outside_sorting_key = 1`` to an AggregatingMergeTree (its SETTINGS, or a
        SETTINGS clause after its last storage clause), as the production server's version behaves."""
        if not self._aggregating(engine, settings):
            return []
        spans = clauses(tokens)
        setting = f"{DIMENSIONS_SETTING} = 1"
        self.note(
            obj,
            f"server_version {self.server_version}",
            f"SETTINGS {setting}",
            f"ClickHouse before {'.'.join(map(str, DIMENSIONS_RULE_SINCE))} accepts columns outside the sorting key",
        )
        if "SETTINGS" in spans:
            for i, (a, b, replacement) in enumerate(edits):  # the storage policy dropped from that SETTINGS
                if a <= spans["SETTINGS"][0] < b:
                    edits[i] = (a, b, f"{replacement}, {setting}" if replacement else f"SETTINGS {setting}")
                    return []
            end = spans["SETTINGS"][1]
            return [(end, end, f", {setting}")]
        ends = [b for phrase, (_a, b) in spans.items() if phrase != "SETTINGS"]
        engine_span = _engine_span(tokens)
        if engine_span is not None:
            ends.append(engine_span[1])
        end = max(ends) if ends else len(text)
        return [(end, end, f" SETTINGS {setting}")]

    def _storage(self, table: Table, tokens) -> list[tuple[int, int, str]]:
        """Edits dropping the storage policy and the TTL moves to volumes or disks."""
        edits = []
        text = table.statement
        spans = clauses(tokens)
        for phrase, keep in (("SETTINGS", _keeps_setting), ("TTL", _keeps_ttl_rule)):
            if phrase not in spans:
                continue
            start, end = spans[phrase]
            items = _split(text[start:end])
            kept = [i for i in items if keep(i)]
            if len(kept) == len(items):
                continue
            dropped = "; ".join(" ".join(i.split()) for i in items if not keep(i))
            self.note(table.ref.fqn, f"{phrase} {dropped}", "dropped", "the embedded engine has one disk")
            keyword = _keyword_start(tokens, start)
            edits.append((keyword, end, f"{phrase} {', '.join(kept)}" if kept else ""))
        return edits

    def _distributed(self, table: Table, tokens, span: tuple[int, int], edits: list) -> Table:
        text = table.statement
        arguments = _arguments(text, span)
        database = _unquoted(arguments[1]) if len(arguments) > 1 else table.ref.database
        if database.lower().replace(" ", "") in ("currentdatabase()", "current_database()"):
            database = table.ref.database
        local_name = _unquoted(arguments[2]) if len(arguments) > 2 else ""
        local = next((r for r in self.project.tables if r.database == database and r.name == local_name), None)
        production = text[span[0] : span[1]].removeprefix("ENGINE").lstrip(" =")
        if local is None:
            columns = ", ".join(c.definition or f"{_quoted(c.name)} {c.type}" for c in table.columns)
            if not columns:
                self.note(table.ref.fqn, production, _NOT_DEPLOYED, f"{database}.{local_name} is not in the DDL")
                return table
            self.note(
                table.ref.fqn,
                production,
                "empty MergeTree of the same columns",
                f"{database}.{local_name} is not in the DDL",
            )
            statement = f"CREATE TABLE {_name_text(table)} ({columns}) ENGINE = MergeTree ORDER BY tuple()"
            return self._reparsed(table, statement)
        buffer = f"ENGINE = Buffer('{_escaped(database)}', '{_escaped(local_name)}', 1, 0, 0, 0, 0, 0, 0)"
        edits = [*edits, (span[0], span[1], buffer)]
        settings = clauses(tokens).get("SETTINGS")
        if settings is not None:  # the Distributed engine's own settings
            edits.append((_keyword_start(tokens, settings[0]), settings[1], ""))
        self.note(
            table.ref.fqn,
            production,
            f"Buffer over {local.fqn}",
            "inserts land in the local table and fire its MVs; reads read it",
        )
        return self._reparsed(table, _splice(text, edits))

    def _reparsed(self, obj, statement: str, *, keep_engine: bool = False):
        """``obj`` read again from its stand-in statement, keeping where it is written and its description."""
        model = parse_statement(
            statement, default_database=self.project.default_database, origin=f"{obj.location} (local twin)"
        )
        update: dict = {"location": obj.location}
        if getattr(obj, "description", None) is not None:
            update["description"] = obj.description
        if keep_engine:  # a stream table stays a stream in the model: chmv never reads it
            update["engine"] = obj.engine
        assert model is not None and type(model) is type(obj), (statement, model)
        return model.model_copy(update=update)


def _keeps_setting(item: str) -> bool:
    return item.split("=", 1)[0].strip().lower() not in STORAGE_SETTINGS


def _keeps_ttl_rule(item: str) -> bool:
    return _TTL_MOVE.search(item) is None


def _name_text(table: Table) -> str:
    """The table's name as written in its statement."""
    span = table.name_span
    return (
        table.statement[span.start : span.end]
        if span is not None
        else f"{_quoted(table.ref.database)}.{_quoted(table.ref.name)}"
    )


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _unquoted(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'`\"":
        return text[1:-1]
    return text


def _splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, cursor = [], 0
    for start, end, replacement in sorted(edits):
        out.append(text[cursor:start])
        out.append(replacement)
        cursor = max(cursor, end)
    out.append(text[cursor:])
    return "".join(out)


def _depth_walk(tokens) -> list[int]:
    depths, depth = [], 0
    for token in tokens:
        if token.text in (")", "]"):
            depth -= 1
        depths.append(depth)
        if token.text in ("(", "["):
            depth += 1
    return depths


def _engine_span(tokens) -> tuple[int, int] | None:
    """``[start, end)`` of the depth-0 ``ENGINE = name(…)`` of a CREATE (before an MV's AS SELECT)."""
    stop = select_start(tokens)
    depths = _depth_walk(tokens)
    for i, token in enumerate(tokens):
        if stop is not None and token.start >= stop:
            return None
        if depths[i] == 0 and token.text.upper() == "ENGINE":
            j = i + 1
            if j < len(tokens) and tokens[j].text == "=":
                j += 1
            if j >= len(tokens):
                return None
            end = tokens[j].end + 1
            if j + 1 < len(tokens) and tokens[j + 1].text == "(":
                k = j + 1
                while k < len(tokens) and not (depths[k] == 0 and tokens[k].text == ")"):
                    k += 1
                end = tokens[min(k, len(tokens) - 1)].end + 1
            return token.start, end
    return None


def _group_after(tokens, word: str) -> tuple[int, int] | None:
    """``[start, end)`` of the depth-0 ``word(…)`` (a dictionary's ``SOURCE(…)``), the word included."""
    depths = _depth_walk(tokens)
    for i, token in enumerate(tokens):
        if depths[i] == 0 and token.text.upper() == word and i + 1 < len(tokens) and tokens[i + 1].text == "(":
            k = i + 1
            while k < len(tokens) and not (depths[k] == 0 and tokens[k].text == ")"):
                k += 1
            return token.start, tokens[min(k, len(tokens) - 1)].end + 1
    return None


def _arguments(text: str, span: tuple[int, int]) -> list[str]:
    """The arguments of ``ENGINE = name(a, b, …)`` as written."""
    inner = text[span[0] : span[1]]
    opening = inner.find("(")
    if opening < 0 or not inner.endswith(")"):
        return []
    return _split(inner[opening + 1 : -1])


def _split(text: str) -> list[str]:
    """``text`` split at its depth-0 commas, each part stripped (strings and parentheses respected)."""
    parts, current, depth, quote = [], [], 0, ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            current.append(char)
            if char == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'`\"":
            quote = char
            current.append(char)
        elif char in "([":
            depth += 1
            current.append(char)
        elif char in ")]":
            depth -= 1
            current.append(char)
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _keyword_start(tokens, body_start: int) -> int:
    """Where the keyword of a clause whose body starts at ``body_start`` starts (``SETTINGS``, ``TTL``)."""
    previous = None
    for token in tokens:
        if token.start >= body_start:
            break
        previous = token
    return previous.start if previous is not None else body_start


#: Per engine, the argument naming a database (``Merge('db', '^re')``, ``Distributed(cluster, db, t)``, ``Buffer(db, t,
#: …)``, ``Dictionary(db.d)``: its database part).
_DATABASE_ARGUMENT = {"Merge": 0, "Buffer": 0, "Distributed": 1, "Dictionary": 0}
_SOURCE_DB = re.compile(r"(\bDB\s+)('(?:[^'\\]|\\.)*'|`[^`]*`|\w+)", re.IGNORECASE)


def databases_renamed(statement: str, databases: dict[str, str]) -> str:
    """``statement`` with the databases its engine's arguments and its dictionary ``SOURCE(CLICKHOUSE(… DB …))`` name
    replaced through ``databases`` (old → new): a copy of a ``Merge``, ``Buffer``, ``Distributed`` or ``Dictionary``
    table, or of a dictionary, made in another database (the preflight's scratch one) reads the copies there, not
    the live database (which may not exist yet)."""
    tokens = tokenize(statement)
    edits: list[tuple[int, int, str]] = []
    span = _engine_span(tokens)
    if span is not None:
        name = statement[span[0] : span[1]].removeprefix("ENGINE").lstrip(" =").split("(")[0].strip()
        index = _DATABASE_ARGUMENT.get(name)
        arguments = _arguments(statement, span)
        if index is not None and index < len(arguments):
            argument = arguments[index]
            value = _unquoted(argument)
            if name == "Dictionary":
                database, dot, rest = value.partition(".")
                if dot and database in databases:
                    replacement = f"'{_escaped(databases[database])}.{_escaped(rest)}'"
                    edits.append(_argument_edit(statement, span, index, replacement))
            elif value in databases:
                edits.append(_argument_edit(statement, span, index, f"'{_escaped(databases[value])}'"))
    source = _group_after(tokens, "SOURCE")
    if source is not None:
        inner = statement[source[0] : source[1]]
        for match in _SOURCE_DB.finditer(inner):
            value = _unquoted(match.group(2))
            if value in databases:
                start = source[0] + match.start(2)
                edits.append((start, start + len(match.group(2)), f"'{_escaped(databases[value])}'"))
    return _splice(statement, edits) if edits else statement


def _argument_edit(statement: str, span: tuple[int, int], index: int, replacement: str) -> tuple[int, int, str]:
    """The edit replacing the ``index``-th argument of the engine clause at ``span``."""
    inner = statement[span[0] : span[1]]
    opening = span[0] + inner.find("(") + 1
    depth, quote, start, current = 0, "", opening, 0
    for i in range(opening, span[1] - 1):
        char = statement[i]
        if quote:
            if char == "\\":
                continue
            if char == quote and statement[i - 1] != "\\":
                quote = ""
        elif char in "'`\"":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            if current == index:
                return _trimmed(statement, start, i, replacement)
            current, start = current + 1, i + 1
    return _trimmed(statement, start, span[1] - 1, replacement)


def _trimmed(statement: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
    while start < end and statement[start].isspace():
        start += 1
    while end > start and statement[end - 1].isspace():
        end -= 1
    return start, end, replacement


def describe_stand_ins(project: Project) -> list[str]:
    """The twin's stand-ins as lines for the apply output: one per object, the ``ON CLUSTER`` ones counted together."""
    if not project.twin:
        return []
    clusters: dict[str, int] = {}
    lines = []
    for stand_in in project.stand_ins:
        if stand_in.production.startswith("ON CLUSTER"):
            clusters[stand_in.production] = clusters.get(stand_in.production, 0) + 1
        else:
            lines.append(f"  {stand_in}")
    lines += [f"  {cluster} dropped from {n} statement{'s' if n != 1 else ''}" for cluster, n in clusters.items()]
    if not lines:
        return []
    count = len(project.stand_ins)
    head = (
        f"local twin: the embedded engine runs {count} stand-in{'s' if count != 1 else ''} "
        '(docs/any-schema.md, "A local twin of a production schema"); on a server nothing is substituted'
    )
    return [head, *lines]


def engine_of(statement: str) -> str | None:
    """The engine a CREATE statement names (``Kafka`` of ``CREATE TABLE … ENGINE = Kafka(…)``), None without one."""
    tokens = tokenize(statement)
    span = _engine_span(tokens)
    if span is None:
        return None
    words = statement[span[0] : span[1]].removeprefix("ENGINE").lstrip(" =").split("(")[0].split()
    return words[0] if words else None

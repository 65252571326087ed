"""chmv's own metadata tables on the server (``chmv_meta``): one typed table per kind of record, and partition leases.

Every kind of record chmv keeps is a :class:`RecordTable`: its columns named for what they hold, its key, and the
one DDL statement creating it. Each is a ``ReplacingMergeTree(version)``: every change is a new row with a higher
version, and readers take the row with the highest version per key (chmv_assets/engine/records.py), so a half-merged
table never shows an older state.

chmv before these tables kept every kind in one ``chmv_meta.watermarks`` table, told apart by a prefix of its
``source_id`` (``landing:``, ``backfill:``, ``deferred:``, ``lifecycle:``, ``lifecycle-rederived:``, ``paused:``) and
with a ``target_table`` that held a partition key, a run or a target. :attr:`RecordTable.legacy` is the SELECT of one
kind's rows of that table in the typed table's columns: ``chmv apply`` copies them with it (:func:`migration_sql`)
and renames the old table aside (never dropped); until then readers read the old rows through it.
"""

from __future__ import annotations

from dataclasses import dataclass

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.sql.cluster import deployment_cluster, on_cluster, replicated_deployment
from chmv_assets.sql.quoting import qualified, string_literal

#: chmv's own metadata database (its records, leases).
META_DATABASE = "chmv_meta"
LEASES = ObjectRef(database=META_DATABASE, name="leases")
#: The one table of every kind of record before typed records (renamed aside by the migration).
LEGACY_WATERMARKS = ObjectRef(database=META_DATABASE, name="watermarks")
#: What a migrated legacy table is renamed to (``watermarks_migrated_<UTC time>``).
LEGACY_RENAMED_PREFIX = "watermarks_migrated_"
_INSTANT = "DateTime64(3, 'UTC')"


@dataclass(frozen=True)
class RecordTable:
    """One kind of chmv's own records.

    Attributes:
        ref: Its table in ``chmv_meta``.
        columns: ``(name, ClickHouse type)`` of what a record holds (``version`` and ``updated_at`` are added).
        key: The columns naming one record (its versions replace each other).
        legacy: The SELECT of this kind's rows of ``chmv_meta.watermarks`` (chmv before typed records), in
            ``columns`` plus ``version`` and ``updated_at``.
        about: What a record is (the table's comment).
    """

    ref: ObjectRef
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    legacy: str
    about: str

    def type_of(self, column: str) -> str:
        return dict(self.columns)[column] if column != "version" else "UInt64"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _type in self.columns)

    def create_sql(self, cluster: str | None, engine: str) -> str:
        columns = ",\n".join(f"    {name} {type_}" for name, type_ in self.columns)
        return (
            f"CREATE TABLE IF NOT EXISTS {qualified(self.ref)}{on_cluster(cluster)}\n(\n{columns},\n"
            "    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),\n    version UInt64\n)\n"
            f"ENGINE = {engine}(version)\nORDER BY ({', '.join(self.key)})\nCOMMENT {string_literal(self.about)}"
        )


def _legacy(prefix: str, *columns: str, where: str = "") -> str:
    return (
        f"SELECT {', '.join(columns)}, version, updated_at FROM {qualified(LEGACY_WATERMARKS)} "
        f"WHERE startsWith(source_id, '{prefix}'){where}"
    )


def _after(prefix: str) -> str:
    return f"substring(source_id, {len(prefix) + 1})"


def _instant_or_null(column: str) -> str:
    """The legacy time column, NULL where it held its "nothing yet" (the epoch: the column was not Nullable)."""
    return f"if(toUnixTimestamp64Milli({column}) <= 0, NULL, {column})"


INGESTION_WATERMARKS = RecordTable(
    ObjectRef(database=META_DATABASE, name="ingestion_watermarks"),
    (
        ("source", "String"),
        ("watermark", f"Nullable({_INSTANT})"),
        ("batch_id", "String"),
        ("status", "LowCardinality(String)"),
        ("rows", "UInt64"),
    ),
    ("source",),
    _legacy(
        "landing:",
        "target_table AS source",
        f"{_instant_or_null('last_processed_ts')} AS watermark",
        "batch_id",
        "status",
        "rows",
        where=" AND source_id = concat('landing:', target_table)",
    ),
    "A source table's ingestion watermark: the newest event time loaded from the landing zone (UTC); status "
    "loading (a load's intent) or committed",
)
BACKFILLS = RecordTable(
    ObjectRef(database=META_DATABASE, name="backfills"),
    (
        ("target", "String"),
        ("partition_key", "String"),
        ("cutoff", f"Nullable({_INSTANT})"),
        ("batch_id", "String"),
        ("rows", "UInt64"),
    ),
    ("target", "partition_key"),
    _legacy(
        "backfill:",
        f"{_after('backfill:')} AS target",
        "target_table AS partition_key",
        f"{_instant_or_null('last_processed_ts')} AS cutoff",
        "batch_id",
        "rows",
    ),
    "A partition a Spark rebuild swapped in: its cutoff (UTC; landing rows at or before it, source rows after it)",
)
DEFERRALS = RecordTable(
    ObjectRef(database=META_DATABASE, name="deferrals"),
    (
        ("target", "String"),
        ("partition_key", "String"),
        ("closes_at", _INSTANT),
        ("reason", "String"),
        ("status", "LowCardinality(String)"),
    ),
    ("target", "partition_key"),
    _legacy(
        "deferred:",
        f"{_after('deferred:')} AS target",
        "target_table AS partition_key",
        "last_processed_ts AS closes_at",
        "batch_id AS reason",
        "status",
    ),
    "A partition a rebuild left until it closes to writers (closes_at: the server's wall clock), or a raced swap "
    "may have damaged: pending until a rebuild of it settles it (done)",
)
APPLY_JOURNAL = RecordTable(
    ObjectRef(database=META_DATABASE, name="apply_journal"),
    (
        ("kind", "LowCardinality(String)"),
        ("target", "String"),
        ("phase", "LowCardinality(String)"),
        ("plan_id", "String"),
    ),
    ("kind", "target"),
    _legacy(
        "lifecycle:",
        f"{_after('lifecycle:')} AS kind",
        "target_table AS target",
        "status AS phase",
        "batch_id AS plan_id",
    ),
    "What an apply started and did not finish (kind rederive or new_version, its phase), so a killed apply resumes",
)
REDERIVED_PARTITIONS = RecordTable(
    ObjectRef(database=META_DATABASE, name="rederived_partitions"),
    (
        ("target", "String"),
        ("journal_version", "UInt64"),
        ("partition_key", "String"),
        ("plan_id", "String"),
    ),
    ("target", "journal_version", "partition_key"),
    _legacy(
        "lifecycle-rederived:",
        "splitByChar('/', target_table)[1] AS target",
        f"toUInt64OrZero({_after('lifecycle-rederived:')}) AS journal_version",
        "substring(target_table, length(splitByChar('/', target_table)[1]) + 2) AS partition_key",
        "batch_id AS plan_id",
    ),
    "A partition re-derived with the SELECT whose cut-in wrote the pending apply_journal record of journal_version",
)
CONSUMER_PAUSES = RecordTable(
    ObjectRef(database=META_DATABASE, name="consumer_pauses"),
    (
        ("consumer", "String"),
        ("run", "String"),
        ("status", "LowCardinality(String)"),
    ),
    ("consumer", "run"),
    _legacy("paused:", f"{_after('paused:')} AS consumer", "target_table AS run", "status"),
    "A stream consumer MV a rebuild run detached around its swap (paused) and attached again (resumed)",
)
#: Every kind of record, in the order the migration copies them.
RECORD_TABLES = (INGESTION_WATERMARKS, BACKFILLS, DEFERRALS, APPLY_JOURNAL, REDERIVED_PARTITIONS, CONSUMER_PAUSES)

# One row per claim, renewal and release of a lease generation; the claim of a generation is an insert with a
# deduplication token naming it, so of two runs claiming it at once the server keeps one row (chmv_assets/engine/
# leases.py). Deduplication needs the window: non-replicated tables keep none by default.
_LEASES_DDL = """CREATE TABLE IF NOT EXISTS chmv_meta.leases{cluster}
(
    lease String,
    generation UInt64,
    holder String,
    run String,
    host String,
    pid UInt32,
    expires_at DateTime64(3, 'UTC'),
    released UInt8 DEFAULT 0,
    version UInt64
)
ENGINE = {engine}(version)
ORDER BY (lease, generation){settings}"""


def meta_ddl(cluster: str | None = None, *, replicated: bool = False) -> tuple[str, ...]:
    """The CREATE statements of ``chmv_meta`` (idempotent).

    Args:
        cluster: Create it ``ON CLUSTER`` (on every host of the deployment's cluster).
        replicated: With ``cluster``: ``ReplicatedReplacingMergeTree`` without arguments, so the replicas of a shard
            share one journal and one set of records (the server's default Keeper path, ``{uuid}`` the same on
            every host of an ``ON CLUSTER`` CREATE): an apply killed through one replica resumes through another.
            Without a cluster it is ignored (the server refuses empty ``Replicated*`` arguments outside
            ``ON CLUSTER``).
    """
    shared = bool(cluster and replicated)
    engine = "ReplicatedReplacingMergeTree" if shared else "ReplacingMergeTree"
    dedup = "" if shared else "\nSETTINGS non_replicated_deduplication_window = 10000"
    return (
        f"CREATE DATABASE IF NOT EXISTS chmv_meta{on_cluster(cluster)} ENGINE = Atomic",
        *(table.create_sql(cluster, engine) for table in RECORD_TABLES),
        _LEASES_DDL.format(cluster=on_cluster(cluster), engine=engine, settings=dedup),
    )


def meta_placement(project: Project) -> tuple[str | None, bool]:
    """Where ``chmv_meta`` goes for ``project``: its cluster, and whether its tables are replicated."""
    return deployment_cluster(project), replicated_deployment(project)


def meta_ddl_for(project: Project) -> tuple[str, ...]:
    """``chmv_meta`` placed like the project: ``ON CLUSTER`` its cluster, replicated when its tables are."""
    cluster, replicated = meta_placement(project)
    return meta_ddl(cluster, replicated=replicated)


def migration_sql(cluster: str | None = None, *, replicated: bool = False, renamed: str) -> tuple[str, ...]:
    """Copy every kind of record of the legacy ``chmv_meta.watermarks`` into its typed table (versions kept), then
    rename the legacy table to ``renamed`` (kept, never dropped).

    Run once, after :func:`meta_ddl`, where the legacy table exists (chmv_assets/engine/records.py). Copying twice
    (a migration killed before its rename) is harmless: a copied row has the version it had, and readers take one
    row per version. The copy runs on the server the client talks to (replicated tables share it); the rename is
    ``ON CLUSTER`` where the tables are replicated, else on that server alone (each host kept its own records).
    """
    copies = tuple(
        f"INSERT INTO {qualified(table.ref)} ({', '.join(table.names)}, version, updated_at) {table.legacy}"
        for table in RECORD_TABLES
    )
    where = on_cluster(cluster) if cluster and replicated else ""
    rename = (
        f"RENAME TABLE {qualified(LEGACY_WATERMARKS)} TO "
        f"{qualified(ObjectRef(database=META_DATABASE, name=renamed))}{where}"
    )
    return (*copies, rename)


#: ``chmv_meta`` on one server.
META_DDL = meta_ddl()

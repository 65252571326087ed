"""chmv's own metadata tables on the server: watermarks (and the apply journal in them), and partition leases."""

from __future__ import annotations

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.sql.cluster import deployment_cluster, on_cluster, replicated_deployment

#: chmv's own metadata database (watermarks, recovery state).
META_DATABASE = "chmv_meta"
WATERMARKS = ObjectRef(database=META_DATABASE, name="watermarks")
LEASES = ObjectRef(database=META_DATABASE, name="leases")

_WATERMARKS_DDL = """CREATE TABLE IF NOT EXISTS chmv_meta.watermarks{cluster}
(
    source_id String,
    target_table String,
    last_processed_ts DateTime64(3, 'UTC'),
    batch_id String,
    status LowCardinality(String),
    rows UInt64 DEFAULT 0,
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = {engine}(version)
ORDER BY (source_id, target_table)"""

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
            share one journal and one set of watermarks (the server's default Keeper path, ``{uuid}`` the same on
            every host of an ``ON CLUSTER`` CREATE): an apply killed through one replica resumes through another.
            Without a cluster it is ignored (the server refuses empty ``Replicated*`` arguments outside
            ``ON CLUSTER``).
    """
    shared = cluster and replicated
    engine = "ReplicatedReplacingMergeTree" if shared else "ReplacingMergeTree"
    dedup = "" if shared else "\nSETTINGS non_replicated_deduplication_window = 10000"
    return (
        f"CREATE DATABASE IF NOT EXISTS chmv_meta{on_cluster(cluster)} ENGINE = Atomic",
        _WATERMARKS_DDL.format(cluster=on_cluster(cluster), engine=engine),
        _LEASES_DDL.format(cluster=on_cluster(cluster), engine=engine, settings=dedup),
    )


def meta_ddl_for(project: Project) -> tuple[str, ...]:
    """``chmv_meta`` placed like the project: ``ON CLUSTER`` its cluster, replicated when its tables are."""
    return meta_ddl(deployment_cluster(project), replicated=replicated_deployment(project))


#: ``chmv_meta`` on one server.
META_DDL = meta_ddl()

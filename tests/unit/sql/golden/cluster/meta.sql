-- chmv_meta of a cluster deployment
CREATE DATABASE IF NOT EXISTS chmv_meta ON CLUSTER `main` ENGINE = Atomic;
CREATE TABLE IF NOT EXISTS chmv_meta.watermarks ON CLUSTER `main`
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
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (source_id, target_table);
CREATE TABLE IF NOT EXISTS chmv_meta.leases ON CLUSTER `main`
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
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (lease, generation);

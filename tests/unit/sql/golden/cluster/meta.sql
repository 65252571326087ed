-- chmv_meta of a cluster deployment
CREATE DATABASE IF NOT EXISTS chmv_meta ON CLUSTER `main` ENGINE = Atomic;
CREATE TABLE IF NOT EXISTS `chmv_meta`.`ingestion_watermarks` ON CLUSTER `main`
(
    source String,
    watermark Nullable(DateTime64(3, 'UTC')),
    batch_id String,
    status LowCardinality(String),
    rows UInt64,
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (source)
COMMENT 'A source table\'s ingestion watermark: the newest event time loaded from the landing zone (UTC); status loading (a load\'s intent) or committed';
CREATE TABLE IF NOT EXISTS `chmv_meta`.`backfills` ON CLUSTER `main`
(
    target String,
    partition_key String,
    cutoff Nullable(DateTime64(3, 'UTC')),
    batch_id String,
    rows UInt64,
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (target, partition_key)
COMMENT 'A partition a Spark rebuild swapped in: its cutoff (UTC; landing rows at or before it, source rows after it)';
CREATE TABLE IF NOT EXISTS `chmv_meta`.`deferrals` ON CLUSTER `main`
(
    target String,
    partition_key String,
    closes_at DateTime64(3, 'UTC'),
    reason String,
    status LowCardinality(String),
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (target, partition_key)
COMMENT 'A partition a rebuild left until it closes to writers (closes_at: the server\'s wall clock), or a raced swap may have damaged: pending until a rebuild of it settles it (done)';
CREATE TABLE IF NOT EXISTS `chmv_meta`.`apply_journal` ON CLUSTER `main`
(
    kind LowCardinality(String),
    target String,
    phase LowCardinality(String),
    plan_id String,
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (kind, target)
COMMENT 'What an apply started and did not finish (kind rederive or new_version, its phase), so a killed apply resumes';
CREATE TABLE IF NOT EXISTS `chmv_meta`.`rederived_partitions` ON CLUSTER `main`
(
    target String,
    journal_version UInt64,
    partition_key String,
    plan_id String,
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (target, journal_version, partition_key)
COMMENT 'A partition re-derived with the SELECT whose cut-in wrote the pending apply_journal record of journal_version';
CREATE TABLE IF NOT EXISTS `chmv_meta`.`consumer_pauses` ON CLUSTER `main`
(
    consumer String,
    run String,
    status LowCardinality(String),
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplicatedReplacingMergeTree(version)
ORDER BY (consumer, run)
COMMENT 'A stream consumer MV a rebuild run detached around its swap (paused) and attached again (resumed)';
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
-- the legacy chmv_meta.watermarks copied into the typed tables, then renamed aside
INSERT INTO `chmv_meta`.`ingestion_watermarks` (source, watermark, batch_id, status, rows, version, updated_at) SELECT target_table AS source, if(toUnixTimestamp64Milli(last_processed_ts) <= 0, NULL, last_processed_ts) AS watermark, batch_id, status, rows, version, updated_at FROM `chmv_meta`.`watermarks` WHERE startsWith(source_id, 'landing:') AND source_id = concat('landing:', target_table);
INSERT INTO `chmv_meta`.`backfills` (target, partition_key, cutoff, batch_id, rows, version, updated_at) SELECT substring(source_id, 10) AS target, target_table AS partition_key, if(toUnixTimestamp64Milli(last_processed_ts) <= 0, NULL, last_processed_ts) AS cutoff, batch_id, rows, version, updated_at FROM `chmv_meta`.`watermarks` WHERE startsWith(source_id, 'backfill:');
INSERT INTO `chmv_meta`.`deferrals` (target, partition_key, closes_at, reason, status, version, updated_at) SELECT substring(source_id, 10) AS target, target_table AS partition_key, last_processed_ts AS closes_at, batch_id AS reason, status, version, updated_at FROM `chmv_meta`.`watermarks` WHERE startsWith(source_id, 'deferred:');
INSERT INTO `chmv_meta`.`apply_journal` (kind, target, phase, plan_id, version, updated_at) SELECT substring(source_id, 11) AS kind, target_table AS target, status AS phase, batch_id AS plan_id, version, updated_at FROM `chmv_meta`.`watermarks` WHERE startsWith(source_id, 'lifecycle:');
INSERT INTO `chmv_meta`.`rederived_partitions` (target, journal_version, partition_key, plan_id, version, updated_at) SELECT splitByChar('/', target_table)[1] AS target, toUInt64OrZero(substring(source_id, 21)) AS journal_version, substring(target_table, length(splitByChar('/', target_table)[1]) + 2) AS partition_key, batch_id AS plan_id, version, updated_at FROM `chmv_meta`.`watermarks` WHERE startsWith(source_id, 'lifecycle-rederived:');
INSERT INTO `chmv_meta`.`consumer_pauses` (consumer, run, status, version, updated_at) SELECT substring(source_id, 8) AS consumer, target_table AS run, status, version, updated_at FROM `chmv_meta`.`watermarks` WHERE startsWith(source_id, 'paused:');
RENAME TABLE `chmv_meta`.`watermarks` TO `chmv_meta`.`watermarks_migrated_20260901000000` ON CLUSTER `main`;

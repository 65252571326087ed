-- chmv_meta.watermarks as chmv before typed records wrote it (record_legacy_rows.py)
CREATE TABLE IF NOT EXISTS chmv_meta.watermarks
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
ENGINE = ReplacingMergeTree(version)
ORDER BY (source_id, target_table);
INSERT INTO chmv_meta.watermarks (source_id, target_table, last_processed_ts, batch_id, status, rows, updated_at, version) VALUES
('landing:analytics.api_requests', 'analytics.api_requests', '2026-08-02 10:30:00.250', 'b2', 'loading', 0, '2026-11-28 14:12:00.197536', 1795875120190867430),
('backfill:analytics.events_daily', '2026-08-01', '2026-08-01 23:00:00.000', 'spark-1', 'committed', 31, '2026-11-28 14:12:00.208077', 1795875120202428936),
('deferred:analytics.events_daily', '2026-08-03', '2026-08-04 00:15:00.000', 'open to writers', 'pending', 0, '2026-11-28 14:12:00.237522', 1795875120217544134),
('deferred:analytics.error_events', 'all', '2099-01-01 00:00:00.000', 'open to writers', 'pending', 0, '2026-11-28 14:12:00.291447', 1795875120279150162),
('deferred:analytics.error_events', '2026-08-07', '1970-01-01 00:00:00.000', 'rebuilt', 'done', 0, '2026-11-28 14:12:00.335898', 1795875120318497809),
('lifecycle:rederive', 'analytics.events_daily', '1970-01-01 00:00:00.000', 'plan-a', 'pending', 0, '2026-11-28 14:12:00.365427', 1795875120355897410),
('lifecycle-rederived:1795875120355897410', 'analytics.events_daily/2026-08-01', '1970-01-01 00:00:00.000', 'plan-a', 'done', 0, '2026-11-28 14:12:00.562541', 1795875120384600955),
('lifecycle-rederived:1795875120355897410', 'analytics.events_daily/2026-08-02|eu/west', '1970-01-01 00:00:00.000', 'plan-a', 'done', 0, '2026-11-28 14:12:00.573490', 1795875120567911820),
('lifecycle:new_version', 'analytics.error_events', '1970-01-01 00:00:00.000', 'plan-b', 'building', 0, '2026-11-28 14:12:00.587465', 1795875120582343543),
('lifecycle:new_version', 'analytics.error_events', '1970-01-01 00:00:00.000', 'plan-b', 'swapped', 0, '2026-11-28 14:12:00.606974', 1795875120601635212),
('lifecycle:new_version', 'analytics.error_events', '1970-01-01 00:00:00.000', 'plan-b', 'done', 0, '2026-11-28 14:12:00.629061', 1795875120618880119),
('paused:analytics.kafka_mv', 'rebuild:dead-run', '1970-01-01 00:00:00.000', 'rebuild:dead-run', 'paused', 0, '2026-11-28 14:12:00.649782', 1795875120644611387),
('paused:analytics.kafka_mv', 'rebuild:done-run', '1970-01-01 00:00:00.000', 'rebuild:done-run', 'paused', 0, '2026-11-28 14:12:00.663518', 1795875120658325617),
('paused:analytics.kafka_mv', 'rebuild:done-run', '1970-01-01 00:00:00.000', 'rebuild:done-run', 'resumed', 0, '2026-11-28 14:12:00.683049', 1795875120676671054);

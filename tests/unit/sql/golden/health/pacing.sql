-- the server's limits and each table's own SETTINGS (once per session)
SELECT '' AS database, name, '' AS text, toFloat64OrZero(value) AS value FROM system.merge_tree_settings WHERE name IN ('parts_to_delay_insert', 'parts_to_throw_insert', 'max_parts_in_total')
UNION ALL
SELECT '', 'max_partitions_per_insert_block', '', toFloat64(getSetting('max_partitions_per_insert_block'))
UNION ALL
SELECT '', name, '', toFloat64OrZero(value) FROM system.server_settings WHERE name = 'background_pool_size'
UNION ALL
SELECT database, name, engine_full, 0 FROM system.tables WHERE database IN ['metrics', 'metrics_dist'] AND name IN ['errors_daily_local', 'hosts', 'minute_local', 'samples_local'];

-- each table's own SETTINGS (the part-count check)
SELECT database, name, engine_full FROM system.tables WHERE database IN ['metrics', 'metrics_dist'] AND name IN ['errors_daily_local', 'hosts', 'minute_local', 'samples_local'];

-- a look before an insert, on a server (chmv's running writes counted)
SELECT 'parts' AS kind, database, table, argMax(partition_id, c) AS partition, toFloat64(max(c)) AS value FROM (SELECT database, table, partition_id, count() AS c FROM system.parts WHERE active AND database IN ['metrics', 'metrics_dist'] AND table IN ['errors_daily_local', 'hosts', 'minute_local', 'samples_local'] GROUP BY database, table, partition_id) GROUP BY database, table
UNION ALL
SELECT 'metric', '', metric, '', toFloat64(value) FROM system.metrics WHERE metric IN ('BackgroundMergesAndMutationsPoolTask', 'BackgroundMergesAndMutationsPoolSize')
UNION ALL
SELECT 'running', '', '', '', toFloat64(count()) FROM system.processes WHERE match(query_id, '^chmv-(rebuild|ingest|optimize)-') AND (query_kind = 'Insert' OR startsWith(query_id, 'chmv-optimize-'));

-- merges and mutations running (the part-count check)
SELECT database, table, countIf(NOT is_mutation), countIf(is_mutation) FROM system.merges WHERE database IN ['metrics', 'metrics_dist'] AND table IN ['errors_daily_local', 'hosts', 'minute_local', 'samples_local'] GROUP BY database, table;

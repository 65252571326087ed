-- closed partitions of collapsing targets holding several parts
SELECT database, table, partition_id, count() AS parts, sum(rows), greatest(max(max_date), toDate(max(max_time))) AS newest FROM system.parts WHERE active AND database IN ['metrics', 'metrics_dist'] AND table IN ['errors_daily_local', 'hosts', 'minute_local', 'samples_local'] AND partition_id != 'all' GROUP BY database, table, partition_id HAVING parts >= 2 AND newest > toDate(0) AND newest < toDate(now() - toIntervalHour(24)) ORDER BY parts DESC, database, table, partition_id LIMIT 200;

-- merging one of them
OPTIMIZE TABLE `metrics`.`errors_daily_local` PARTITION ID '202608' FINAL;

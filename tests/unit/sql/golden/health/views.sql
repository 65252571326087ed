-- the MVs of the DDL directory: live or detached (neither: missing)
SELECT database, name, 'live' FROM system.tables WHERE database IN ['metrics'] AND name IN ['errors_daily_mv', 'minute_mv', 'samples_route_mv']
UNION ALL
SELECT database, table, 'detached' FROM system.detached_tables WHERE database IN ['metrics'] AND table IN ['errors_daily_mv', 'minute_mv', 'samples_route_mv'];

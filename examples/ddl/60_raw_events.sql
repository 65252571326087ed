-- A chain of three (seeds 000, 003): raw_events -> events_agg -> events_daily -> events_weekly.
CREATE TABLE IF NOT EXISTS analytics.raw_events
(
    timestamp DateTime,
    user_id UInt64,
    event_type LowCardinality(String),
    duration_ms UInt32
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(timestamp)
ORDER BY (event_type, timestamp);

-- Hourly event counts and durations per user.
CREATE TABLE IF NOT EXISTS analytics.events_agg
(
    event_date Date,
    event_hour DateTime,
    user_id UInt64,
    event_type LowCardinality(String),
    count UInt64,
    sum_duration_ms UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(event_date)
ORDER BY (event_date, event_hour, event_type, user_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.mv_events_agg TO analytics.events_agg AS
SELECT
    toDate(timestamp) AS event_date,
    toStartOfHour(timestamp) AS event_hour,
    user_id,
    event_type,
    count() AS count,
    sum(duration_ms) AS sum_duration_ms
FROM analytics.raw_events
GROUP BY event_date, event_hour, event_type, user_id;

-- Daily events and unique users per event type.
CREATE TABLE IF NOT EXISTS analytics.events_daily
(
    event_date Date,
    event_type LowCardinality(String),
    events AggregateFunction(sum, UInt64),
    users AggregateFunction(uniq, UInt64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMMDD(event_date)
ORDER BY (event_type, event_date);

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.mv_events_daily TO analytics.events_daily AS
SELECT event_date, event_type, sumState(count) AS events, uniqState(user_id) AS users
FROM analytics.events_agg
GROUP BY event_date, event_type;

-- Weekly rollup of the daily states.
CREATE TABLE IF NOT EXISTS analytics.events_weekly
(
    week Date,
    event_type LowCardinality(String),
    events AggregateFunction(sum, UInt64),
    users AggregateFunction(uniq, UInt64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(week)
ORDER BY (event_type, week);

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.mv_events_weekly TO analytics.events_weekly AS
SELECT toMonday(event_date) AS week, event_type, sumMergeState(events) AS events, uniqMergeState(users) AS users
FROM analytics.events_daily
GROUP BY week, event_type;

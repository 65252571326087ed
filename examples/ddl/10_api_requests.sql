-- Pre-aggregation (seed 001): hourly endpoint statistics as AggregatingMergeTree states.
CREATE TABLE IF NOT EXISTS analytics.api_requests
(
    timestamp DateTime,
    endpoint String,
    user_id UInt64,
    response_time_ms UInt32,
    status_code UInt16
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(timestamp)
ORDER BY (endpoint, timestamp);

-- Hourly request count, unique users and p99 latency per endpoint.
CREATE TABLE IF NOT EXISTS analytics.hourly_endpoint_stats
(
    hour DateTime,
    endpoint String,
    request_count AggregateFunction(sum, UInt64),
    unique_users AggregateFunction(uniq, UInt64),
    p99_response AggregateFunction(quantile(0.99), UInt32)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toDate(hour)
ORDER BY (endpoint, hour);

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.hourly_endpoint_stats_mv TO analytics.hourly_endpoint_stats AS
SELECT
    toStartOfHour(timestamp) AS hour,
    endpoint,
    sumState(toUInt64(1)) AS request_count,
    uniqState(user_id) AS unique_users,
    quantileState(0.99)(response_time_ms) AS p99_response
FROM analytics.api_requests
GROUP BY endpoint, hour;

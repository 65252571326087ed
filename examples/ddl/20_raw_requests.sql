-- Reshaping at ingest (seed 001): bucket, classify and extract once instead of on every query.
CREATE TABLE IF NOT EXISTS analytics.raw_requests
(
    timestamp DateTime,
    request_id String,
    user_id UInt64,
    response_time_ms UInt32,
    status_code UInt16,
    path String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(timestamp)
ORDER BY (user_id, timestamp);

-- Requests with speed, status and API version classified at ingest.
CREATE TABLE IF NOT EXISTS analytics.requests_enriched
(
    timestamp DateTime,
    hour_bucket DateTime,
    request_id String,
    user_id UInt64,
    response_time_ms UInt32,
    speed_category LowCardinality(String),
    status_category LowCardinality(String),
    api_version LowCardinality(String)
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(timestamp)
ORDER BY (user_id, hour_bucket);

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.enriched_requests_mv TO analytics.requests_enriched AS
SELECT
    timestamp,
    toStartOfHour(timestamp) AS hour_bucket,
    request_id,
    user_id,
    response_time_ms,
    multiIf(response_time_ms > 1000, 'slow', response_time_ms > 200, 'normal', 'fast') AS speed_category,
    multiIf(status_code >= 500, 'server_error', status_code >= 400, 'client_error', 'success') AS status_category,
    extract(path, '^/api/(v[0-9]+)/') AS api_version
FROM analytics.raw_requests;

-- Routing (seed 001): one source, three destinations with their own retention and sort order.
CREATE TABLE IF NOT EXISTS analytics.all_events
(
    timestamp DateTime,
    event_type String,
    level String,
    is_audit UInt8,
    payload String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(timestamp)
ORDER BY (event_type, timestamp);

-- Error events, kept five years.
CREATE TABLE IF NOT EXISTS analytics.error_events (timestamp DateTime, level String, payload String)
ENGINE = MergeTree() PARTITION BY toYYYYMMDD(timestamp) ORDER BY timestamp TTL timestamp + INTERVAL 5 YEAR;

-- Metric events, kept ten years.
CREATE TABLE IF NOT EXISTS analytics.metric_events (timestamp DateTime, payload String)
ENGINE = MergeTree() PARTITION BY toStartOfMonth(timestamp) ORDER BY timestamp TTL timestamp + INTERVAL 10 YEAR;

-- Audit trail, kept forever.
CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String)
ENGINE = MergeTree() PARTITION BY toYYYYMM(timestamp) ORDER BY timestamp; -- no TTL, keep forever

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.errors_mv TO analytics.error_events AS
SELECT timestamp, level, payload FROM analytics.all_events WHERE level = 'error';

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.metrics_mv TO analytics.metric_events AS
SELECT timestamp, payload FROM analytics.all_events WHERE event_type = 'metric';

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.audit_mv TO analytics.audit_log AS
SELECT timestamp, payload FROM analytics.all_events WHERE is_audit = 1;

-- Deduplication (seed 001): keep the latest payload per entity.
CREATE TABLE IF NOT EXISTS analytics.raw_webhooks
(
    received_at DateTime,
    event_id String,
    entity_id UInt64,
    payload String,
    updated_at DateTime
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(received_at)
ORDER BY (entity_id, received_at);

-- Latest state of every entity; query with FINAL or argMax.
CREATE TABLE IF NOT EXISTS analytics.entity_latest
(
    entity_id UInt64,
    payload String,
    updated_at DateTime
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY entity_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.entity_latest_mv TO analytics.entity_latest AS
SELECT entity_id, payload, updated_at
FROM analytics.raw_webhooks;

-- Device readings with daily min/max/avg states (seed 002).
CREATE TABLE IF NOT EXISTS analytics.counter
(
    `when` DateTime DEFAULT now(),
    device UInt32,
    value Float32
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(`when`)
ORDER BY (device, `when`);

-- Daily reading count and min/max/avg states per device.
CREATE TABLE IF NOT EXISTS analytics.counter_daily
(
    day DateTime,
    device UInt32,
    count UInt64,
    max_value_state AggregateFunction(max, Float32),
    min_value_state AggregateFunction(min, Float32),
    avg_value_state AggregateFunction(avg, Float32)
)
ENGINE = SummingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (device, day);

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.counter_daily_mv TO analytics.counter_daily AS
SELECT
    device,
    toStartOfDay(`when`) AS day,
    count(*) AS count,
    maxState(value) AS max_value_state,
    minState(value) AS min_value_state,
    avgState(value) AS avg_value_state
FROM analytics.counter
GROUP BY device, day;

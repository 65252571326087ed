CREATE DATABASE IF NOT EXISTS shop ON CLUSTER main ENGINE = Atomic;

-- Orders, replicated under an explicit Keeper path.
CREATE TABLE IF NOT EXISTS shop.orders ON CLUSTER main
(
    ts DateTime,
    customer UInt64,
    amount UInt64
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/shop/orders', '{replica}')
PARTITION BY toYYYYMM(ts)
ORDER BY (customer, ts);

-- Daily orders and revenue per customer, as aggregate states: the server's default Keeper path (no arguments).
CREATE TABLE IF NOT EXISTS shop.customer_daily ON CLUSTER main
(
    day Date,
    customer UInt64,
    orders AggregateFunction(count),
    revenue AggregateFunction(sum, UInt64)
)
ENGINE = ReplicatedAggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (customer, day)
TTL day + INTERVAL 5 YEAR;

CREATE MATERIALIZED VIEW IF NOT EXISTS shop.customer_daily_mv ON CLUSTER main TO shop.customer_daily AS
SELECT toDate(ts) AS day, customer, countState() AS orders, sumState(amount) AS revenue
FROM shop.orders
GROUP BY day, customer;

-- The latest order of each customer: an explicit Keeper path and the engine's own version column after it.
CREATE TABLE IF NOT EXISTS shop.latest_order ON CLUSTER main
(
    customer UInt64,
    ts DateTime,
    amount UInt64
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order', '{replica}', ts)
PARTITION BY toYYYYMM(ts)
ORDER BY customer;

CREATE MATERIALIZED VIEW IF NOT EXISTS shop.latest_order_mv ON CLUSTER main TO shop.latest_order AS
SELECT customer, ts, amount
FROM shop.orders;

-- Lifetime revenue per customer: unpartitioned.
CREATE TABLE IF NOT EXISTS shop.customer_totals ON CLUSTER main
(
    customer UInt64,
    revenue UInt64
)
ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/shop/customer_totals', '{replica}')
ORDER BY customer;

CREATE MATERIALIZED VIEW IF NOT EXISTS shop.customer_totals_mv ON CLUSTER main TO shop.customer_totals AS
SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer;

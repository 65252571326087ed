-- What system.tables.create_table_query shows on a replica after `chmv apply` of ddl/: no ON CLUSTER (the server
-- does not keep it), the default Keeper path of customer_daily written out with its {uuid} macro
-- (ClickHouse's test_replicated_without_arguments), the MVs' SELECTs as deployed. Expressions are spelled as in
-- ddl/ (column names unquoted too): the planner compares the server's formatting of both sides, which spells
-- them alike.
CREATE TABLE shop.orders (ts DateTime, customer UInt64, amount UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/shop/orders', '{replica}') PARTITION BY toYYYYMM(ts) ORDER BY (customer, ts) SETTINGS index_granularity = 8192;
CREATE TABLE shop.customer_daily (day Date, customer UInt64, orders AggregateFunction(count), revenue AggregateFunction(sum, UInt64)) ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}') PARTITION BY toYYYYMM(day) ORDER BY (customer, day) TTL day + INTERVAL 5 YEAR SETTINGS index_granularity = 8192;
CREATE MATERIALIZED VIEW shop.customer_daily_mv TO shop.customer_daily AS
SELECT toDate(ts) AS day, customer, countState() AS orders, sumState(amount) AS revenue
FROM shop.orders
GROUP BY day, customer;
CREATE TABLE shop.latest_order (customer UInt64, ts DateTime, amount UInt64) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order', '{replica}', ts) PARTITION BY toYYYYMM(ts) ORDER BY customer SETTINGS index_granularity = 8192;
CREATE MATERIALIZED VIEW shop.latest_order_mv TO shop.latest_order AS
SELECT customer, ts, amount
FROM shop.orders;
CREATE TABLE shop.customer_totals (customer UInt64, revenue UInt64) ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/shop/customer_totals', '{replica}') ORDER BY customer SETTINGS index_granularity = 8192;
CREATE MATERIALIZED VIEW shop.customer_totals_mv TO shop.customer_totals AS
SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer;

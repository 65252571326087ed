-- re-attached detached MV shop.customer_daily_mv (detached)
ATTACH TABLE IF NOT EXISTS `shop`.`customer_daily_mv` ON CLUSTER `main`;
-- recreated missing MV shop.customer_daily_mv from ddl/shop.sql:27:1
CREATE MATERIALIZED VIEW IF NOT EXISTS shop.customer_daily_mv ON CLUSTER main TO shop.customer_daily AS
SELECT toDate(ts) AS day, customer, countState() AS orders, sumState(amount) AS revenue
FROM shop.orders
GROUP BY day, customer;
-- MODIFY QUERY on shop.customer_daily_mv: restored the SELECT of ddl/shop.sql:27:1
ALTER TABLE `shop`.`customer_daily_mv` ON CLUSTER `main` MODIFY QUERY SELECT toDate(ts) AS day, customer, countState() AS orders, sumState(amount) AS revenue
FROM shop.orders
GROUP BY day, customer;
-- recreated shop.customer_daily_mv from ddl/shop.sql:27:1 (target_changed)
DROP VIEW IF EXISTS `shop`.`customer_daily_mv` ON CLUSTER `main` SYNC;
CREATE MATERIALIZED VIEW IF NOT EXISTS shop.customer_daily_mv ON CLUSTER main TO shop.customer_daily AS
SELECT toDate(ts) AS day, customer, countState() AS orders, sumState(amount) AS revenue
FROM shop.orders
GROUP BY day, customer;
-- re-attached detached MV shop.latest_order_mv (detached)
ATTACH TABLE IF NOT EXISTS `shop`.`latest_order_mv` ON CLUSTER `main`;
-- recreated missing MV shop.latest_order_mv from ddl/shop.sql:43:1
CREATE MATERIALIZED VIEW IF NOT EXISTS shop.latest_order_mv ON CLUSTER main TO shop.latest_order AS
SELECT customer, ts, amount
FROM shop.orders;
-- MODIFY QUERY on shop.latest_order_mv: restored the SELECT of ddl/shop.sql:43:1
ALTER TABLE `shop`.`latest_order_mv` ON CLUSTER `main` MODIFY QUERY SELECT customer, ts, amount
FROM shop.orders;
-- recreated shop.latest_order_mv from ddl/shop.sql:43:1 (target_changed)
DROP VIEW IF EXISTS `shop`.`latest_order_mv` ON CLUSTER `main` SYNC;
CREATE MATERIALIZED VIEW IF NOT EXISTS shop.latest_order_mv ON CLUSTER main TO shop.latest_order AS
SELECT customer, ts, amount
FROM shop.orders;
-- re-attached detached MV shop.customer_totals_mv (detached)
ATTACH TABLE IF NOT EXISTS `shop`.`customer_totals_mv` ON CLUSTER `main`;
-- recreated missing MV shop.customer_totals_mv from ddl/shop.sql:56:1
CREATE MATERIALIZED VIEW IF NOT EXISTS shop.customer_totals_mv ON CLUSTER main TO shop.customer_totals AS
SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer;
-- MODIFY QUERY on shop.customer_totals_mv: restored the SELECT of ddl/shop.sql:56:1
ALTER TABLE `shop`.`customer_totals_mv` ON CLUSTER `main` MODIFY QUERY SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer;
-- recreated shop.customer_totals_mv from ddl/shop.sql:56:1 (target_changed)
DROP VIEW IF EXISTS `shop`.`customer_totals_mv` ON CLUSTER `main` SYNC;
CREATE MATERIALIZED VIEW IF NOT EXISTS shop.customer_totals_mv ON CLUSTER main TO shop.customer_totals AS
SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer;

-- rebuild shop.latest_order 2026-08-01
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_latest_order_20260801_r5eed` SYNC;
CREATE TABLE `shop`.`_chmv_shadow_latest_order_20260801_r5eed` AS `shop`.`latest_order` ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order__chmv_shadow_latest_order_20260801_r5eed', '{replica}', ts) PARTITION BY toYYYYMM(ts) ORDER BY customer;
INSERT INTO `shop`.`_chmv_shadow_latest_order_20260801_r5eed` (`customer`, `ts`, `amount`) SELECT `customer`, `ts`, `amount` FROM (SELECT customer, ts, amount
FROM (SELECT * FROM `shop`.`orders` WHERE (`ts` >= toDateTime('2026-08-01 00:00:00', 'UTC') AND `ts` < toDateTime('2026-09-01 00:00:00', 'UTC'))) AS `orders`) WHERE (toYYYYMM(ts)) = (toYYYYMM((toDateTime('2026-08-01 00:00:00', 'UTC'))));
ALTER TABLE `shop`.`latest_order` REPLACE PARTITION tuple(toYYYYMM((toDateTime('2026-08-01 00:00:00', 'UTC')))) FROM `shop`.`_chmv_shadow_latest_order_20260801_r5eed`;
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_latest_order_20260801_r5eed` SYNC;

-- rebuild shop.latest_order 2026-08-01, the shadow empty
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_latest_order_20260801_r5eed` SYNC;
CREATE TABLE `shop`.`_chmv_shadow_latest_order_20260801_r5eed` AS `shop`.`latest_order` ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order__chmv_shadow_latest_order_20260801_r5eed', '{replica}', ts) PARTITION BY toYYYYMM(ts) ORDER BY customer;
INSERT INTO `shop`.`_chmv_shadow_latest_order_20260801_r5eed` (`customer`, `ts`, `amount`) SELECT `customer`, `ts`, `amount` FROM (SELECT customer, ts, amount
FROM (SELECT * FROM `shop`.`orders` WHERE (`ts` >= toDateTime('2026-08-01 00:00:00', 'UTC') AND `ts` < toDateTime('2026-09-01 00:00:00', 'UTC'))) AS `orders`) WHERE (toYYYYMM(ts)) = (toYYYYMM((toDateTime('2026-08-01 00:00:00', 'UTC'))));
ALTER TABLE `shop`.`latest_order` DROP PARTITION tuple(toYYYYMM((toDateTime('2026-08-01 00:00:00', 'UTC'))));
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_latest_order_20260801_r5eed` SYNC;

-- rebuild shop.customer_daily 2026-08-01
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_customer_daily_20260801_r5eed` SYNC;
CREATE TABLE `shop`.`_chmv_shadow_customer_daily_20260801_r5eed` AS `shop`.`customer_daily` ENGINE = AggregatingMergeTree() PARTITION BY toYYYYMM(day) ORDER BY (customer, day) TTL day + INTERVAL 5 YEAR;
INSERT INTO `shop`.`_chmv_shadow_customer_daily_20260801_r5eed` (`day`, `customer`, `orders`, `revenue`) SELECT `day`, `customer`, `orders`, `revenue` FROM (SELECT toDate(ts) AS day, customer, countState() AS orders, sumState(amount) AS revenue
FROM (SELECT * FROM `shop`.`orders` WHERE (`ts` >= toDateTime('2026-08-01 00:00:00', 'UTC') AND `ts` < toDateTime('2026-09-01 00:00:00', 'UTC') + INTERVAL 1 DAY)) AS `orders`
GROUP BY day, customer) WHERE (toYYYYMM(day)) = (toYYYYMM((CAST('2026-08-01' AS Date))));
ALTER TABLE `shop`.`customer_daily` REPLACE PARTITION tuple(toYYYYMM((CAST('2026-08-01' AS Date)))) FROM `shop`.`_chmv_shadow_customer_daily_20260801_r5eed`;
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_customer_daily_20260801_r5eed` SYNC;

-- rebuild shop.customer_totals (whole table)
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_customer_totals_all_r5eed` SYNC;
CREATE TABLE `shop`.`_chmv_shadow_customer_totals_all_r5eed` AS `shop`.`customer_totals` ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/shop/customer_totals__chmv_shadow_customer_totals_all_r5eed', '{replica}') ORDER BY customer;
INSERT INTO `shop`.`_chmv_shadow_customer_totals_all_r5eed` (`customer`, `revenue`) SELECT `customer`, `revenue` FROM (SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer);
ALTER TABLE `shop`.`customer_totals` REPLACE PARTITION tuple() FROM `shop`.`_chmv_shadow_customer_totals_all_r5eed`;
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_customer_totals_all_r5eed` SYNC;

-- rebuild shop.customer_totals (whole table), the shadow empty
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_customer_totals_all_r5eed` SYNC;
CREATE TABLE `shop`.`_chmv_shadow_customer_totals_all_r5eed` AS `shop`.`customer_totals` ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/shop/customer_totals__chmv_shadow_customer_totals_all_r5eed', '{replica}') ORDER BY customer;
INSERT INTO `shop`.`_chmv_shadow_customer_totals_all_r5eed` (`customer`, `revenue`) SELECT `customer`, `revenue` FROM (SELECT customer, sum(amount) AS revenue
FROM shop.orders
GROUP BY customer);
ALTER TABLE `shop`.`customer_totals` DROP PARTITION tuple();
DROP TABLE IF EXISTS `shop`.`_chmv_shadow_customer_totals_all_r5eed` SYNC;

-- rebuild shop.latest_order 2026-08-01 into shop._chmv_next_latest_order
DROP TABLE IF EXISTS `shop`.`_chmv_shadow__chmv_next_latest_order_20260801_r5eed` SYNC;
CREATE TABLE `shop`.`_chmv_shadow__chmv_next_latest_order_20260801_r5eed` AS `shop`.`_chmv_next_latest_order` ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order__chmv_shadow__chmv_next_latest_order_20260801_r5eed', '{replica}', ts) PARTITION BY toYYYYMM(ts) ORDER BY customer;
INSERT INTO `shop`.`_chmv_shadow__chmv_next_latest_order_20260801_r5eed` (`customer`, `ts`, `amount`) SELECT `customer`, `ts`, `amount` FROM (SELECT customer, ts, amount
FROM (SELECT * FROM `shop`.`orders` WHERE (`ts` >= toDateTime('2026-08-01 00:00:00', 'UTC') AND `ts` < toDateTime('2026-09-01 00:00:00', 'UTC'))) AS `orders`) WHERE (toYYYYMM(ts)) = (toYYYYMM((toDateTime('2026-08-01 00:00:00', 'UTC'))));
ALTER TABLE `shop`.`_chmv_next_latest_order` REPLACE PARTITION tuple(toYYYYMM((toDateTime('2026-08-01 00:00:00', 'UTC')))) FROM `shop`.`_chmv_shadow__chmv_next_latest_order_20260801_r5eed`;
DROP TABLE IF EXISTS `shop`.`_chmv_shadow__chmv_next_latest_order_20260801_r5eed` SYNC;


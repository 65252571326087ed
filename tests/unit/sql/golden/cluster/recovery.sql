-- re-attach the detached MV shop.customer_daily_mv
ATTACH TABLE IF NOT EXISTS `shop`.`customer_daily_mv` ON CLUSTER `main`;
-- re-attach the detached MV shop.latest_order_mv
ATTACH TABLE IF NOT EXISTS `shop`.`latest_order_mv` ON CLUSTER `main`;
-- re-attach the detached MV shop.customer_totals_mv
ATTACH TABLE IF NOT EXISTS `shop`.`customer_totals_mv` ON CLUSTER `main`;

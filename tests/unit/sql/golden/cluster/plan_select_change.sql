-- 1 change (1 modify_query)

-- ~ shop.latest_order_mv: MODIFY QUERY
--   the SELECT changed
ALTER TABLE `shop`.`latest_order_mv` ON CLUSTER `main` MODIFY QUERY SELECT customer, ts, amount
FROM shop.orders
WHERE amount > 0;

-- 1 change (1 alter)

-- ~ shop.customer_daily: alter in place
--   TTL day + INTERVAL 5 YEAR → day + INTERVAL 6 YEAR
ALTER TABLE `shop`.`customer_daily` ON CLUSTER `main` MODIFY TTL day + INTERVAL 6 YEAR;

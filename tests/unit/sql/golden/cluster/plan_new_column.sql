-- 1 change (1 alter)

-- ~ shop.latest_order: alter in place
--   column channel added: LowCardinality(String)
ALTER TABLE `shop`.`latest_order` ON CLUSTER `main` ADD COLUMN channel LowCardinality(String) DEFAULT 'web' AFTER `amount`;

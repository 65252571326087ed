-- 2 changes (2 drop)

-- - shop.latest_order: drop column
--   column note String is not in the DDL
ALTER TABLE `shop`.`latest_order` ON CLUSTER `main` DROP COLUMN `note`;

-- - shop._chmv_old_latest_order_20260901120000: drop table
--   the version a new version replaced
DROP TABLE IF EXISTS `shop`.`_chmv_old_latest_order_20260901120000` ON CLUSTER `main` SYNC;

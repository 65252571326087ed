-- Databases of the example project. Atomic is required for refreshable MVs and EXCHANGE TABLES.
CREATE DATABASE IF NOT EXISTS analytics ENGINE = Atomic;

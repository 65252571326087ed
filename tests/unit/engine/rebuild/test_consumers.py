"""Pausing a stream consumer: the statements, on one server and on a cluster (never run on the embedded engine,
where a stream-engine table cannot be created)."""

from __future__ import annotations

from chmv_assets.engine.rebuild.consumers import attach_sql, detach_sql

from support.ddl import load_ddl, ref

DDL = """
CREATE DATABASE d;
CREATE TABLE d.queue (ts DateTime, v UInt64) ENGINE = Kafka SETTINGS kafka_broker_list = 'k:9092',
    kafka_topic_list = 't', kafka_group_name = 'g', kafka_format = 'JSONEachRow';
CREATE TABLE d.landed (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.consumer TO d.landed AS SELECT ts, v FROM d.queue;
CREATE TABLE d.queue2 ON CLUSTER main (ts DateTime) ENGINE = RabbitMQ SETTINGS rabbitmq_host_port = 'r:5672',
    rabbitmq_exchange_name = 'x', rabbitmq_format = 'JSONEachRow';
CREATE TABLE d.landed2 ON CLUSTER main (ts DateTime) ENGINE = ReplicatedMergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.consumer2 ON CLUSTER main TO d.landed2 AS SELECT ts FROM d.queue2;
"""


def test_a_consumer_is_detached_for_the_swap_and_attached_again(tmp_path):
    project = load_ddl(tmp_path, DDL).project
    assert detach_sql(project, ref("d.consumer")) == "DETACH TABLE `d`.`consumer`"
    assert attach_sql(project, ref("d.consumer")) == "ATTACH TABLE IF NOT EXISTS `d`.`consumer`"


def test_on_a_cluster_every_host_pauses_its_consumer(tmp_path):
    """Every host consumes its share of the topic, and a replicated target receives every host's rows."""
    project = load_ddl(tmp_path, DDL).project
    assert detach_sql(project, ref("d.consumer2")) == "DETACH TABLE `d`.`consumer2` ON CLUSTER `main`"
    assert attach_sql(project, ref("d.consumer2")) == "ATTACH TABLE IF NOT EXISTS `d`.`consumer2` ON CLUSTER `main`"

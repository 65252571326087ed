"""Stream consumers paused around a swap: their messages wait in the broker, none is written meanwhile.

An MV reading a stream-engine table (Kafka, RabbitMQ, NATS, S3Queue…) consumes only while it is attached: detaching
it stops the consumption (the engine commits offsets after its MVs wrote a block, so nothing is lost), attaching it
resumes where it stopped. A partition open to such a consumer is rebuilt with the consumer detached from before the
read until after the swap (``ON CLUSTER`` where the consumer's DDL says so: every host consumes its share of the
topic, and a replicated source receives every host's rows).

A pause is journaled in ``chmv_meta.consumer_pauses`` (the consumer, the run, ``paused``) before the detach and closed after
the attach, so a run killed in between leaves a record: the next rebuild, whatever it rebuilds, attaches every
consumer a dead run left paused (:func:`resume_leftovers`) before anything else.

Never run on the embedded engine with a real stream table (creating one bricks chdb 26.9's engine path); the
statements are golden-tested (tests/unit/engine/rebuild/test_consumers.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine import records
from chmv_assets.sql.cluster import cluster_of, on_cluster
from chmv_assets.sql.meta import CONSUMER_PAUSES
from chmv_assets.sql.quoting import qualified

_LOG = logging.getLogger(__name__)

PAUSED = "paused"
RESUMED = "resumed"


def detach_sql(project: Project, consumer: ObjectRef) -> str:
    """``DETACH TABLE mv [ON CLUSTER c]``: the consumer stops reading its stream (not ``PERMANENTLY``: a restart of
    the server attaches it again, as :func:`resume_leftovers` does)."""
    return f"DETACH TABLE {qualified(consumer)}{on_cluster(cluster_of(project, consumer))}"


def attach_sql(project: Project, consumer: ObjectRef) -> str:
    """``ATTACH TABLE IF NOT EXISTS mv [ON CLUSTER c]``: where it is attached already (a run killed before its
    detach, a host that never saw it) nothing happens."""
    return f"ATTACH TABLE IF NOT EXISTS {qualified(consumer)}{on_cluster(cluster_of(project, consumer))}"


def _mark(client: Client, consumer: ObjectRef, status: str, run: str) -> None:
    key = {"consumer": consumer.fqn, "run": run}
    previous = records.latest(client, CONSUMER_PAUSES, key)
    records.append(client, CONSUMER_PAUSES, {**key, "status": status}, after=previous.version if previous else 0)


@contextmanager
def paused(client: Client, project: Project, consumers: Sequence[ObjectRef], run: str) -> Iterator[None]:
    """Detach ``consumers`` for the block and attach them after, whatever happens (journaled, see the module)."""
    for consumer in consumers:
        _mark(client, consumer, PAUSED, run)
        client.command(detach_sql(project, consumer))
        _LOG.info(f"paused the stream consumer {consumer.fqn} (its messages wait in the broker)")
    try:
        yield
    finally:
        for consumer in consumers:
            client.command(attach_sql(project, consumer))
            _mark(client, consumer, RESUMED, run)
            _LOG.info(f"resumed the stream consumer {consumer.fqn}")


def left_paused(client: Client, consumers: Sequence[ObjectRef], live_runs: set[str]) -> list[tuple[ObjectRef, str]]:
    """The ``consumers`` a run no longer alive (not in ``live_runs``) left paused, with that run (one query)."""
    if not consumers:
        return []
    by_name = {c.fqn: c for c in consumers}
    found = records.current(client, CONSUMER_PAUSES, {"consumer": list(by_name)})
    return [
        (by_name[r["consumer"]], str(r["run"])) for r in found if r["status"] == PAUSED and r["run"] not in live_runs
    ]


def resume_leftovers(
    client: Client,
    project: Project,
    consumers: Sequence[ObjectRef],
    live_runs: set[str],
) -> list[ObjectRef]:
    """Attach the ``consumers`` that a run no longer alive (not in ``live_runs``) left paused; those attached."""
    resumed = []
    for consumer, run in left_paused(client, consumers, live_runs):
        client.command(attach_sql(project, consumer))
        _mark(client, consumer, RESUMED, run)
        resumed.append(consumer)
        _LOG.info(f"resumed the stream consumer {consumer.fqn}, left paused by an interrupted run ({run})")
    return resumed

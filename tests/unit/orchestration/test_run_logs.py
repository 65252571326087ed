"""forward_engine_logs: what the engine logs during an op is in the run's event log, as the UI shows it."""

from __future__ import annotations

import logging
import threading

from dagster import DagsterInstance, asset, materialize

from chmv_assets.orchestration.run_logs import forward_engine_logs

ENGINE = logging.getLogger("chmv_assets.engine.rebuild.somewhere")


@asset
def rebuilt(context) -> None:
    ENGINE.info("before the block")
    with forward_engine_logs(context):
        ENGINE.info("swapped 2026-08-01")
        ENGINE.warning("a partition was deferred")
        neighbour = threading.Thread(target=lambda: ENGINE.info("another run's message"))
        neighbour.start()
        neighbour.join()
    ENGINE.info("after the block")


def test_the_engines_records_of_the_op_reach_the_run_log_at_their_level() -> None:
    instance = DagsterInstance.ephemeral()
    result = materialize([rebuilt], instance=instance)
    assert result.success
    logged = {
        (entry.user_message, entry.level)
        for entry in instance.all_logs(result.run_id)
        if entry.dagster_event is None  # the op's own messages, not Dagster's events
    }
    assert logged == {("swapped 2026-08-01", logging.INFO), ("a partition was deferred", logging.WARNING)}

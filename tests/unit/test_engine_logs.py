"""chmv_assets.engine_logs: chmv's log records reach the sink of the block that runs, and nothing else changes."""

from __future__ import annotations

import logging
import threading

from chmv_assets.engine_logs import LOGGERS, engine_messages, quiet

ENGINE = logging.getLogger("chmv_assets.engine.somewhere")


def test_a_block_hands_every_message_of_chmvs_loggers_to_its_sink_then_lets_go() -> None:
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    lines: list[str] = []
    ENGINE.info("before")
    with engine_messages(lines.append):
        ENGINE.info("%s rows", 3)
        logging.getLogger("spark.ingest").warning("from spark")
        ENGINE.debug("too fine")
        logging.getLogger("elsewhere").warning("not chmv's")
    ENGINE.info("after")
    assert lines == ["3 rows", "from spark"]
    assert {name: logging.getLogger(name).level for name in LOGGERS} == levels
    assert not any(logging.getLogger(name).handlers for name in LOGGERS)


def test_a_level_the_process_configured_is_kept() -> None:
    logger = logging.getLogger("chmv_assets")
    logger.setLevel(logging.WARNING)
    try:
        lines: list[str] = []
        with engine_messages(lines.append):
            ENGINE.info("quiet")
            ENGINE.warning("loud")
        assert lines == ["loud"] and logger.level == logging.WARNING
    finally:
        logger.setLevel(logging.NOTSET)


def test_nested_and_threaded_blocks_each_get_theirs() -> None:
    outer: list[str] = []
    inner: list[str] = []
    mine: list[str] = []
    with engine_messages(outer.append), engine_messages(mine.append, this_thread_only=True):
        thread = threading.Thread(target=lambda: ENGINE.info("from a neighbour"))
        thread.start()
        thread.join()
        with engine_messages(inner.append):
            ENGINE.info("inner")
        ENGINE.info("outer")
    assert outer == ["from a neighbour", "inner", "outer"] and inner == ["inner"]
    assert mine == ["inner", "outer"]
    assert logging.getLogger("chmv_assets").level == logging.NOTSET


def test_a_sink_that_raises_stops_the_caller_as_a_callback_did() -> None:
    def stop(_line: str) -> None:
        raise RuntimeError("stop here")

    with engine_messages(stop):
        try:
            ENGINE.info("go")
        except RuntimeError as err:
            assert str(err) == "stop here"
        else:
            raise AssertionError("the sink's error did not reach the caller")


def test_a_quiet_block_keeps_its_details_out_of_chmvs_sinks_but_not_its_warnings(caplog) -> None:
    lines: list[str] = []
    with engine_messages(lines.append), caplog.at_level(logging.INFO, "chmv_assets"):
        with quiet():
            ENGINE.info("a batch's detail")
            ENGINE.warning("a batch's warning")
            neighbour = threading.Thread(target=lambda: ENGINE.info("another thread, not quieted"))
            neighbour.start()
            neighbour.join()
        ENGINE.info("the report")
    assert lines == ["a batch's warning", "another thread, not quieted", "the report"]
    assert "a batch's detail" in caplog.messages  # the process's own logging still sees it

"""ClickHouse's own parser in a child process: answers, refusals placed in the statement, a worker that cannot run."""

from __future__ import annotations

import os
import sys
import time

import pytest

from chmv_assets.ddl.server_grammar import Refusal, ServerGrammar, grammar_version, server_grammar
from chmv_assets.errors import ParserUnavailable


def test_answers_and_refusals():
    grammar = server_grammar()
    assert grammar.ast("SELECT cityHash64(arraySort(x) AS y)").startswith("SelectWithUnionQuery")
    assert "JOIN TREE" in grammar.query_tree("SELECT a FROM db.t")
    assert grammar.format("select   1 as x") == "SELECT 1 AS x"
    statement = "CREATE TABLE t\n(a UInt8, b Strin g)\nENGINE = Memory"
    refused = grammar.ast(statement)
    assert isinstance(refused, Refusal)
    assert refused.message.startswith("Syntax error") and "(SYNTAX_ERROR)" in refused.message
    assert refused.offset == statement.index("g)")  # where the server failed, in the statement (not in EXPLAIN …)


def test_a_refusal_is_placed_by_characters_not_bytes():
    statement = "SELECT 'ünïcödé' AS s FROM t WHERE ) AND 1"
    refused = server_grammar().ast(statement)
    assert isinstance(refused, Refusal) and refused.offset is not None
    assert statement[refused.offset :] == ") AND 1"


def test_a_worker_that_cannot_start_is_reported_and_the_next_question_starts_another(tmp_path):
    broken = ServerGrammar(timeout=5, command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(ParserUnavailable, match="exited"):
        broken.ast("SELECT 1")
    silent = ServerGrammar(timeout=1, command=[sys.executable, "-c", "import time; time.sleep(30)"])
    started = time.monotonic()
    with pytest.raises(ParserUnavailable, match="no answer within 1s"):
        silent.ast("SELECT 1")
    assert time.monotonic() - started < 10
    silent.close()


def test_the_worker_stops_when_idle_and_comes_back():
    grammar = ServerGrammar(idle=0.2)
    assert isinstance(grammar.ast("SELECT 1"), str)
    pid = grammar._process.pid
    deadline = time.monotonic() + 10
    while grammar._process is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert grammar._process is None
    while time.monotonic() < deadline:  # the worker exits once its input is closed
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the idle worker {pid} is still running")
    assert isinstance(grammar.ast("SELECT 2"), str) and grammar.starts == 2
    grammar.close()


def test_the_version_keys_the_parse_cache():
    assert grammar_version().startswith("chdb-core ")

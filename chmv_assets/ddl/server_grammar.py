"""ClickHouse's own parser, asked where sqlglot cannot read a statement: the DDL layer's fallback.

chmv ships ClickHouse itself (the embedded engine), so a statement sqlglot's dialect does not read (an alias inside a
function's arguments, a ternary inside a lambda, a clause newer than sqlglot) is read by the server's grammar instead
of being refused. The questions are asked of a child process (:mod:`resources.grammar_worker`, one per process,
started on first need and closed after :data:`IDLE_SECONDS` without a question): chdb admits one engine path per
process, and the process asking may hold the embedded engine at its state path. The child opens an in-memory engine
of its own and only parses: nothing of the DDL layer imports chdb (the import contract "The DDL model and SQL
generation open no engine"), and the embedded engine's path and lock are never touched.

A statement that sqlglot reads never gets here: the parse of a directory sqlglot reads entirely starts no process.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from chmv_assets.errors import ParserUnavailable

#: Seconds a question may take (the worker's start included) before the worker is stopped and the parse fails.
TIMEOUT_SECONDS = 60.0
#: Seconds without a question after which the worker is stopped (a long-lived process does not keep ~300 MB idle).
IDLE_SECONDS = 30.0
_MESSAGE = re.compile(r"^(?:Code: \d+\.\s*)?(?:DB::Exception:\s*)?")
_VERSION = re.compile(r"\s*\(version [^)]*\)\.?\s*$")
_POSITION = re.compile(r"failed at position (\d+)")


@dataclass(frozen=True)
class Refusal:
    """The server's refusal of a statement.

    Attributes:
        message: The server's message (without its code prefix and version suffix).
        offset: Character offset in the statement the server points at (a syntax error), None if it names none.
    """

    message: str
    offset: int | None = None


class ServerGrammar:
    """One worker process and the questions asked of it, one at a time."""

    def __init__(self, timeout: float = TIMEOUT_SECONDS, idle: float = IDLE_SECONDS, command: list[str] | None = None):
        """
        Args:
            timeout: Seconds a question may take, the worker's start included.
            idle: Seconds without a question after which the worker stops.
            command: The worker's command line (default: ``python -m resources.grammar_worker``).
        """
        self.timeout = timeout
        self.idle = idle
        self.command = command or [sys.executable, "-m", "resources.grammar_worker"]
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._pid = 0
        self._buffer = b""
        self._last = 0.0
        self._watcher: threading.Thread | None = None
        self.questions = 0
        self.starts = 0

    def ast(self, sql: str) -> str | Refusal:
        """``EXPLAIN AST`` of any statement: the server's parse tree, or its refusal."""
        return self._ask("ast", sql)

    def query_tree(self, select: str) -> str | Refusal:
        """``EXPLAIN QUERY TREE run_passes = 0`` of a SELECT: its query tree before analysis (no table needed)."""
        return self._ask("tree", select)

    def format(self, sql: str) -> str | Refusal:
        """The server's single-line formatting of a statement."""
        return self._ask("format", sql)

    def close(self) -> None:
        """Stop the worker (the next question starts another)."""
        with self._lock:
            self._stop()

    # -- the worker ---------------------------------------------------------------------------------

    def ask(self, *questions: tuple[str, str]) -> list[str | Refusal]:
        """Several questions ``(op, sql)`` in one round trip (``ast``, ``tree``, ``format``), answered in order."""
        with self._lock:
            try:
                answers = self._exchange(questions)
            except ParserUnavailable:
                self._stop()
                raise
            finally:
                self._last = time.monotonic()
                self._watch()
        self.questions += len(questions)
        return [_answer(op, sql, answer) for (op, sql), answer in zip(questions, answers, strict=True)]

    def _ask(self, op: str, sql: str) -> str | Refusal:
        return self.ask((op, sql))[0]

    def _exchange(self, questions: tuple[tuple[str, str], ...]) -> list[dict]:
        deadline = time.monotonic() + self.timeout
        process = self._running(deadline)
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps([{"op": op, "sql": sql} for op, sql in questions]).encode() + b"\n")
            process.stdin.flush()
        except OSError as err:
            raise ParserUnavailable(f"ClickHouse's parser (a child process) stopped: {err}") from err
        answers = json.loads(self._line(process, deadline))
        if not isinstance(answers, list) or len(answers) != len(questions):
            raise ParserUnavailable(f"ClickHouse's parser answered {str(answers)[:200]}")
        return answers

    def _running(self, deadline: float) -> subprocess.Popen:
        if self._process is not None and (self._pid != os.getpid() or self._process.poll() is not None):
            self._process, self._buffer = None, b""  # a fork's copy of the parent's worker, or a dead one
        if self._process is None:
            try:
                self._process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                )
            except OSError as err:
                raise ParserUnavailable(f"cannot start ClickHouse's parser (a child process): {err}") from err
            self._pid, self._buffer = os.getpid(), b""
            self.starts += 1
            ready = json.loads(self._line(self._process, deadline))
            if not ready.get("ok"):
                raise ParserUnavailable(f"ClickHouse's parser did not start: {ready}")
        return self._process

    def _line(self, process: subprocess.Popen, deadline: float) -> str:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise ParserUnavailable(f"ClickHouse's parser gave no answer within {self.timeout:.0f}s")
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise ParserUnavailable(f"ClickHouse's parser (a child process) exited ({process.poll()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def _watch(self) -> None:
        """Start the watcher that stops the worker after ``idle`` seconds without a question (one thread, not one per
        question: starting a thread costs about a millisecond)."""
        if self._process is None or (self._watcher is not None and self._watcher.is_alive()):
            return
        self._watcher = threading.Thread(target=self._stop_when_idle, name="chmv-grammar-idle", daemon=True)
        self._watcher.start()

    def _stop_when_idle(self) -> None:
        while True:
            wait = self._last + self.idle - time.monotonic()
            if wait > 0:
                time.sleep(wait)
                continue
            with self._lock:
                if time.monotonic() - self._last >= self.idle:
                    self._stop()
                    return

    def _stop(self) -> None:
        process, self._process, self._buffer = self._process, None, b""
        if process is None or self._pid != os.getpid():
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answer(op: str, sql: str, answer: dict) -> str | Refusal:
    if answer.get("ok"):
        return answer["text"].rstrip("\n") if op == "format" else answer["text"]
    return _refusal(str(answer.get("error", "")), sql, int(answer.get("prefix") or 0))


def _refusal(error: str, sql: str, prefix: int) -> Refusal:
    text = " ".join(error.split())
    message = _VERSION.sub("", _MESSAGE.sub("", text))
    position = _POSITION.search(text)
    if position is None:
        return Refusal(message)
    # ClickHouse counts bytes from 1 in the query it ran, which has the statement after `prefix` bytes.
    at = int(position.group(1)) - 1 - prefix
    encoded = sql.encode()
    offset = len(encoded[: max(0, min(at, len(encoded)))].decode(errors="ignore"))
    return Refusal(message, offset)


@cache
def grammar_version() -> str:
    """The version of ClickHouse's parser and of its worker's code (what the parse cache is keyed by)."""
    try:
        version = metadata.version("chdb-core")
    except metadata.PackageNotFoundError:
        version = "none"
    worker = Path(__file__).resolve().parents[2] / "resources" / "grammar_worker.py"
    code = worker.read_bytes() if worker.is_file() else b""
    return f"chdb-core {version} {hashlib.sha256(code).hexdigest()[:12]}"


_SHARED: ServerGrammar | None = None
_SHARED_LOCK = threading.Lock()


def server_grammar() -> ServerGrammar:
    """The process's :class:`ServerGrammar` (its worker starts on the first question)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ServerGrammar()
        return _SHARED


@atexit.register
def _close_shared() -> None:
    if _SHARED is not None:
        _SHARED.close()

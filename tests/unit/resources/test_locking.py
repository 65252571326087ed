"""The engine lock without an engine: shared by the threads of a process, exclusive between processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from chmv_assets.errors import EngineBusyError
from resources.locking import engine_lock

ROOT = Path(__file__).resolve().parents[3]

HOLDER = textwrap.dedent("""
    import sys
    from resources.locking import engine_lock
    with engine_lock(sys.argv[1], timeout=10):
        print("holding", flush=True)
        sys.stdin.readline()
""")


def test_threads_of_one_process_share_the_engine(tmp_path) -> None:
    path = str(tmp_path / "chdb")
    held, joined, release = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with engine_lock(path, timeout=5):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert held.wait(5)
        with engine_lock(path, timeout=0):  # no wait: the process already holds the engine
            joined.set()
    finally:
        release.set()
        thread.join(5)
    assert joined.is_set()


def test_another_process_waits_and_gets_the_holders_pid(tmp_path) -> None:
    path = str(tmp_path / "chdb")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with (
            pytest.raises(EngineBusyError, match=rf"in use by process {holder.pid} .*lock_timeout_seconds"),
            engine_lock(path, timeout=0.2),
        ):
            pass
        holder.stdin.write("\n")
        holder.stdin.flush()
        with engine_lock(path, timeout=10):  # taken as soon as the holder lets go
            assert holder.wait(10) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_last_use_releases_the_engine_for_other_processes(tmp_path) -> None:
    path = str(tmp_path / "chdb")
    with engine_lock(path, timeout=1), engine_lock(path, timeout=1):
        pass
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from resources.locking import engine_lock\n"
            "with engine_lock(sys.argv[1], timeout=0): print('taken')",
            path,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert probe.stdout.strip() == "taken", probe.stderr

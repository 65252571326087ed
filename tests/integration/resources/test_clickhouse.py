"""ClickHouseResource on the embedded engine: several OS processes take turns instead of failing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chmv_assets.errors import EngineBusyError
from resources.clickhouse import ClickHouseResource

ROOT = Path(__file__).resolve().parents[3]

WORKER = textwrap.dedent("""
    import sys, time
    from resources.clickhouse import ClickHouseResource
    dsn, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resource = ClickHouseResource(dsn=dsn, lock_timeout_seconds=60)
    print("ready", flush=True)
    sys.stdin.readline()  # both start together, whatever each took to import
    for i in range(rounds):
        with resource.get_client() as client:
            client.command("CREATE TABLE IF NOT EXISTS default.hits (who String, i UInt32, at DateTime64(6) DEFAULT now64(6)) ENGINE = MergeTree ORDER BY who")
            client.command("INSERT INTO default.hits (who, i) VALUES ({who:String}, {i:UInt32})", parameters={"who": name, "i": i})
            time.sleep(0.05)
    print("done", name)
""")

HOLDER = textwrap.dedent("""
    import sys, time
    from resources.clickhouse import ClickHouseResource
    with ClickHouseResource(dsn=sys.argv[1]).get_client() as client:
        client.command("SELECT 1")
        print("holding", flush=True)
        time.sleep(float(sys.argv[2]))
    print("released", flush=True)
""")


def _spawn(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_use_the_same_engine_at_once(tmp_path):
    dsn = f"chdb://{tmp_path / 'chdb'}"
    workers = [_spawn(WORKER, dsn, name, "15") for name in ("a", "b")]
    for worker in workers:  # both imported and ready before either starts: their uses can only interleave by turns
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()
    outputs = [w.communicate(timeout=120) for w in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
        assert "Cannot lock file" not in err and "EngineBusy" not in err
    assert [o.strip() for o, _ in outputs] == ["done a", "done b"]
    with ClickHouseResource(dsn=dsn).get_client() as client:
        rows = client.query(
            "SELECT who, count(), min(at), max(at) FROM default.hits GROUP BY who ORDER BY who"
        ).result_rows
    assert [r[:2] for r in rows] == [("a", 15), ("b", 15)]
    (_, _, a_first, a_last), (_, _, b_first, b_last) = rows
    assert a_first < b_last and b_first < a_last, "the two processes took turns (their uses interleaved)"


def test_short_lock_timeout_gives_engine_busy_with_a_clear_message(tmp_path):
    path = tmp_path / "chdb"
    holder = _spawn(HOLDER, f"chdb://{path}", "3")
    try:
        assert holder.stdout.readline().strip() == "holding"
        resource = ClickHouseResource(dsn=f"chdb://{path}", lock_timeout_seconds=0.3)
        busy = rf"engine at {path} is in use by process {holder.pid} .*lock_timeout_seconds"
        with pytest.raises(EngineBusyError, match=busy), resource.get_client():
            pass
        # A longer wait outlasts the holder and succeeds.
        with resource.get_client(lock_timeout_seconds=60) as client:
            assert int(client.command("SELECT 1")) == 1
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_uses_nest_within_a_process(tmp_path):
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}", lock_timeout_seconds=1)
    with resource.get_client() as outer, resource.get_client() as inner:
        assert int(outer.command("SELECT 1")) == int(inner.command("SELECT 2")) - 1


def test_dsn_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("CHMV_STATE_DIR", str(tmp_path))
    default = ClickHouseResource()
    assert default.is_embedded and default.embedded_path == str(tmp_path / "chdb")
    server = ClickHouseResource(dsn="https://ch.example.com:8443")
    assert not server.is_embedded and server.embedded_path is None

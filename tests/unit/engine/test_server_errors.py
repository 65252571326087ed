"""Server errors without an engine: the code clickhouse-connect carries wins, text is read for ``Code: NNN`` only
where it carries none, and a transport error or any other exception has no code."""

from __future__ import annotations

from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError, StreamFailureError

from chmv_assets.engine.server_errors import Code, is_code, named_code, server_code
from chmv_assets.errors import ChmvError

DEADLOCK = 'Code: 473. DB::Exception: WRITE locking attempt on "a.b" has timed out! (DEADLOCK_AVOIDED)'
QUERIES = "Code: 202. DB::Exception: Too many simultaneous queries. Maximum: 100. (TOO_MANY_SIMULTANEOUS_QUERIES)"


def test_the_carried_code_wins_over_the_text():
    assert server_code(DatabaseError("The ClickHouse server returned an error", code=60)) == 60
    assert named_code(DatabaseError(DEADLOCK, code=202)) is Code.TOO_MANY_SIMULTANEOUS_QUERIES


def test_text_is_read_where_no_code_is_carried():
    assert named_code(DatabaseError(DEADLOCK)) is Code.DEADLOCK_AVOIDED
    assert named_code(DatabaseError(QUERIES)) is Code.TOO_MANY_SIMULTANEOUS_QUERIES
    assert (
        server_code(DatabaseError("Code: 9999. DB::Exception: new")) == 9999
        and named_code(DatabaseError("Code: 9999.")) is None
    )


def test_a_stream_the_server_broke_off_has_its_code_a_lost_connection_none():
    assert is_code(StreamFailureError("Code: 159. Timeout exceeded", code=159), Code.TIMEOUT_EXCEEDED)
    assert server_code(OperationalError("Read timed out. Code: 252. (TOO_MANY_PARTS)")) is None
    assert server_code(ChmvError("Code: 60. (UNKNOWN_TABLE)")) is None
    assert server_code(DatabaseError("no code here")) is None

"""Server errors told apart by the server's error code, in one place.

clickhouse-connect carries the code and the symbolic name of an error the server raised (``DatabaseError.code`` and
``.name``: from the HTTP exception header, or parsed from ``Code: NNN.`` by its chdb backend). :func:`server_code`
reads it from there, else (an error built from text: a test's, a driver path that passed on only the message) from
the text's ``Code: NNN``, once. Every place chmv tells one server error from another asks this module, by the named
codes of :class:`Code`; nowhere else reads a server error's text for its meaning.

Two codes mean more than one thing, and what tells them apart is only in the message: ``TOO_MANY_PARTS`` is also
what an insert block spanning too many partitions raises (:func:`too_many_partitions_per_insert`), and
``BAD_ARGUMENTS`` is what a flush of the asynchronous insert queue raises where the server runs none
(:func:`no_async_insert_queue`). Those two fragments live here too.
"""

from __future__ import annotations

import re
from enum import IntEnum

from clickhouse_connect.driver.exceptions import DatabaseError, Error, OperationalError

_CODE = re.compile(r"\bCode:\s*(\d+)")


class Code(IntEnum):
    """The server's error codes chmv acts on (ClickHouse's ``src/Common/ErrorCodes.cpp``; ``system.errors``)."""

    THERE_IS_NO_COLUMN = 8
    NO_SUCH_COLUMN_IN_TABLE = 16
    BAD_ARGUMENTS = 36
    ILLEGAL_TYPE_OF_ARGUMENT = 43
    UNKNOWN_FUNCTION = 46
    UNKNOWN_IDENTIFIER = 47
    TYPE_MISMATCH = 53
    UNKNOWN_TABLE = 60
    SYNTAX_ERROR = 62
    CANNOT_CONVERT_TYPE = 70
    UNKNOWN_DATABASE = 81
    TIMEOUT_EXCEEDED = 159
    ABORTED = 236
    TOO_MANY_SIMULTANEOUS_QUERIES = 202
    TOO_MANY_PARTS = 252
    NO_COMMON_TYPE = 386
    DEADLOCK_AVOIDED = 473
    ALTER_OF_COLUMN_IS_FORBIDDEN = 524


def server_code(error: BaseException) -> int | None:
    """The server's error code of ``error``; None for an error that is not the server's (a lost connection, a
    refusal of the driver's own, any other exception).

    A stream the server broke off (``StreamFailureError``, an ``OperationalError``) has the code it sent; the text
    of a transport error is never read for one.
    """
    if not isinstance(error, Error):
        return None
    if error.code is not None:
        return error.code
    if not isinstance(error, DatabaseError) or isinstance(error, OperationalError):
        return None
    match = _CODE.search(str(error))
    return int(match.group(1)) if match else None


def named_code(error: BaseException) -> Code | None:
    """:func:`server_code` as one of the named :class:`Code` s, or None (not the server's, or a code chmv does not
    act on)."""
    code = server_code(error)
    return Code(code) if code is not None and code in Code._value2member_map_ else None


def is_code(error: BaseException, *codes: Code) -> bool:
    """Whether the server raised ``error`` with one of ``codes``."""
    return server_code(error) in codes


def too_many_partitions_per_insert(error: BaseException) -> bool:
    """``TOO_MANY_PARTS`` raised because one insert block spans more partitions than
    ``max_partitions_per_insert_block`` (no pause fixes it), not because a partition holds too many parts."""
    return is_code(error, Code.TOO_MANY_PARTS) and "Too many partitions for single INSERT block" in str(error)


def no_async_insert_queue(error: BaseException) -> bool:
    """``SYSTEM FLUSH ASYNC INSERT QUEUE`` refused because the server runs no queue (the embedded engine)."""
    return is_code(error, Code.BAD_ARGUMENTS) and "not initialized" in str(error)


__all__ = ["Code", "is_code", "named_code", "no_async_insert_queue", "server_code", "too_many_partitions_per_insert"]

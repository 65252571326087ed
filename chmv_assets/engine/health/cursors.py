"""Sensor cursors: the one codec every chmv sensor writes its memory between ticks with.

A cursor is a JSON object carrying its format's version under ``"v"`` (a key no format uses for itself), written as
is, or deflated and base64-encoded behind ``z:`` where it holds thousands of partitions whose fingerprints repeat a
lot. Reading never fails: no cursor, one that cannot be read (garbled, cut, not an object) or one of another version
reads as an empty memory, and the sensor starts afresh (it reports, sweeps or looks at everything once more) rather
than crash. A cursor written before cursors carried a version reads as version 1.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The key holding a cursor's format version.
VERSION_KEY = "v"
#: What a deflated cursor starts with.
COMPRESSED = "z:"


@dataclass(frozen=True)
class DecodedCursor:
    """What a cursor holds.

    Attributes:
        version: Its format's version (1 for a cursor written before versions); 0 for no cursor or an unreadable one.
        data: Its JSON object, the version key left out (empty for no cursor or an unreadable one).
        unreadable: There was a cursor and it could not be read.
    """

    version: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    unreadable: bool = False

    def of(self, version: int) -> dict[str, Any]:
        """The data if the cursor is of format ``version``, else empty (start afresh)."""
        return self.data if self.version == version else {}


def encode_cursor(data: Mapping[str, Any], version: int, *, compress: bool = False) -> str:
    """``data`` as a cursor of format ``version`` (deflated with ``compress``)."""
    text = json.dumps({**data, VERSION_KEY: version}, separators=(",", ":"), sort_keys=True)
    if not compress:
        return text
    return COMPRESSED + base64.b64encode(zlib.compress(text.encode(), 6)).decode()


def decode_cursor(cursor: str | None) -> DecodedCursor:
    """The version and data of ``cursor``; never raises."""
    if not cursor:
        return DecodedCursor()
    try:
        text = zlib.decompress(base64.b64decode(cursor[2:])).decode() if cursor.startswith(COMPRESSED) else cursor
        data = json.loads(text)
    except (ValueError, binascii.Error, zlib.error):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return DecodedCursor(unreadable=True)
    if not isinstance(data, dict):
        return DecodedCursor(unreadable=True)
    version = data.pop(VERSION_KEY, 1)
    if not isinstance(version, int) or isinstance(version, bool):
        return DecodedCursor(unreadable=True)
    return DecodedCursor(version, data)


def read_cursor(cursor: str | None, version: int) -> dict[str, Any]:
    """The data of ``cursor`` if it is of format ``version``, else empty (start afresh)."""
    return decode_cursor(cursor).of(version)


__all__ = ["DecodedCursor", "decode_cursor", "encode_cursor", "read_cursor"]

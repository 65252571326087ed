"""The sensors' cursor codec: versioned JSON, deflated on request; what cannot be read starts afresh."""

from __future__ import annotations

import base64
import json
import zlib

import pytest

from chmv_assets.engine.health.cursors import DecodedCursor, decode_cursor, encode_cursor, read_cursor

DATA = {"a": {"analytics.t": {"2026-08-01": "12.1"}}, "s": {}, "list": [1, None, "x"]}


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "deflated"])
def test_a_cursor_round_trips_with_its_version(compress: bool) -> None:
    cursor = encode_cursor(DATA, 3, compress=compress)
    assert cursor.startswith("z:") is compress
    assert decode_cursor(cursor) == DecodedCursor(3, DATA)
    assert read_cursor(cursor, 3) == DATA


def test_a_plain_cursor_is_json_with_the_version_under_v() -> None:
    assert json.loads(encode_cursor({"hash": "ab"}, 1)) == {"hash": "ab", "v": 1}


def test_a_deflated_cursor_is_smaller_where_it_repeats() -> None:
    many = {"a": {f"p{i}": "123456.1" for i in range(2000)}}
    assert len(encode_cursor(many, 1, compress=True)) < len(encode_cursor(many, 1)) / 4


def test_another_version_starts_afresh_and_says_which_it_was() -> None:
    cursor = encode_cursor(DATA, 1)
    assert read_cursor(cursor, 2) == {}
    decoded = decode_cursor(cursor)
    assert decoded.version == 1 and decoded.of(2) == {} and not decoded.unreadable


def test_a_cursor_written_before_versions_reads_as_version_1() -> None:
    assert read_cursor('{"stale": {}, "missing": {"a.b": ["a.c"]}}', 1) == {"stale": {}, "missing": {"a.b": ["a.c"]}}


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor",
        '{"v": 1, "a": ',  # cut
        "[1, 2]",  # not an object
        '"text"',
        '{"v": "1"}',  # a version that is not a number
        '{"v": true}',
        "z:!!!not base64",
        "z:" + base64.b64encode(b"not deflated").decode(),
        "z:" + base64.b64encode(zlib.compress(b"\xff\xfe not utf-8")).decode(),
        "z:" + base64.b64encode(zlib.compress(b"{no json")).decode(),
        "\x00\x01",
    ],
    ids=[
        "text",
        "cut",
        "array",
        "string",
        "version-text",
        "version-bool",
        "bad-base64",
        "not-deflated",
        "not-utf8",
        "deflated-garbage",
        "binary",
    ],
)
def test_a_garbled_cursor_starts_afresh_rather_than_crash(cursor: str) -> None:
    decoded = decode_cursor(cursor)
    assert decoded == DecodedCursor(0, {}, unreadable=True)
    assert read_cursor(cursor, 1) == {} and read_cursor(cursor, 0) == {}


@pytest.mark.parametrize("cursor", [None, ""])
def test_no_cursor_is_an_empty_memory_not_an_unreadable_one(cursor: str | None) -> None:
    assert decode_cursor(cursor) == DecodedCursor(0, {}, unreadable=False)

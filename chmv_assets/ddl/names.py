"""Names derived from object names that cannot collide: asset key parts, shadow tables, gate files, staging folders.

ClickHouse allows almost any text as a database or table name (dashes, quotes, spaces, dots, unicode);
Dagster keys and group names allow ``[A-Za-z0-9_]`` only, and chmv's own tables and files should stay
plain too. :func:`safe_name` keeps a name that is already plain as it is (so existing asset keys do not
move) and otherwise replaces every other character with ``_`` and appends a short hash of the exact name,
so ``a-b`` and ``a_b`` stay apart. The exact name goes into the asset metadata (``chmv/object``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import lru_cache
from string import hexdigits

from chmv_assets.ddl.models import ObjectRef

#: Length of the hash appended to a name that had to change.
HASH_LENGTH = 8
#: Longest name :func:`safe_name` returns (file names and ClickHouse table names stay far below their limits).
MAX_LENGTH = 120
_LOWER_HEX = set(hexdigits.lower())


@lru_cache(maxsize=1 << 16)  # asset keys, groups and check keys ask for the same names thousands of times per load
def safe_name(text: str, max_length: int = MAX_LENGTH) -> str:
    """A name of ``[A-Za-z0-9_]`` characters, distinct for distinct ``text`` and the same on every call.

    ``text`` is returned unchanged when it is already such a name (not empty, at most ``max_length`` long,
    not ending like a hash this function appends); otherwise every other character becomes ``_`` and
    ``_`` plus the first :data:`HASH_LENGTH` hex digits of the SHA-256 of ``text`` are appended. An
    unchanged name never ends like a hashed one, so the two kinds cannot meet.

    Args:
        text: The exact name (a database, a table, a partition key).
        max_length: Cut longer names (before the hash) to stay within this length.
    """
    plain = "".join(c if c == "_" or (c.isascii() and c.isalnum()) else "_" for c in text)
    if plain == text and text and len(text) <= max_length and not _looks_hashed(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LENGTH]
    return f"{plain[: max_length - HASH_LENGTH - 1]}_{digest}"


def _looks_hashed(text: str) -> bool:
    tail = text[-HASH_LENGTH:]
    return len(text) > HASH_LENGTH and text[-HASH_LENGTH - 1] == "_" and set(tail) <= _LOWER_HEX


def ref_slug(ref: ObjectRef) -> str:
    """``safe(database).safe(name)``: a file or folder name per object (``.`` never occurs inside a part)."""
    return f"{safe_name(ref.database)}.{safe_name(ref.name)}"


def refs_slug(refs: Iterable[ObjectRef]) -> str:
    """One folder name for a sequence of objects (``a.t+a.src``); ``+`` never occurs inside a slug."""
    return "+".join(ref_slug(r) for r in refs)

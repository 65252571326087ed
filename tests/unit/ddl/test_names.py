"""Names that cannot collide: plain names stay, others get a hash of the exact name."""

from __future__ import annotations

import itertools

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.names import HASH_LENGTH, MAX_LENGTH, ref_slug, refs_slug, safe_name

TRICKY = [
    "a-b",
    "a_b",
    "a b",
    "a.b",
    "a__b",
    'it\'s "q"',
    "it_s__q_",
    "my src",
    "my_src",
    "événements",
    "_v_nements",
    "данные",
    "数据",
    "a",
    "A",
    "",
    "_",
    "a_b_" + "0" * HASH_LENGTH,
    "x" * 300,
    "x" * 301,
    ".inner_id.5f3a",
    "_inner_id_5f3a",
    "a\tb",
    "a\nb",
    "a`b",
    "😀",
    "1abc",
]


def test_plain_names_do_not_change() -> None:
    for name in ("events", "hourly_endpoint_stats", "A1_b2", "_private", "1abc"):
        assert safe_name(name) == name


def test_distinct_names_stay_distinct_and_are_stable() -> None:
    out = {name: safe_name(name) for name in TRICKY}
    assert len(set(out.values())) == len(TRICKY)
    for name, safe in out.items():
        assert safe == safe_name(name)
        assert safe and all(c == "_" or (c.isascii() and c.isalnum()) for c in safe)
        assert len(safe) <= MAX_LENGTH


def test_changed_names_end_with_a_hash() -> None:
    assert safe_name("a-b").startswith("a_b_") and len(safe_name("a-b")) == len("a_b_") + HASH_LENGTH
    # A plain name that looks like a hashed one is hashed too, so it cannot meet one.
    looks_hashed = "a_b_" + "0" * HASH_LENGTH
    assert safe_name(looks_hashed) != looks_hashed


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (ObjectRef(database="a.b", name="c"), ObjectRef(database="a", name="b.c")),
        (ObjectRef(database="my-db", name="a-b"), ObjectRef(database="my-db", name="a_b")),
        (ObjectRef(database="x", name="y+z"), ObjectRef(database="x", name="y_z")),
    ],
)
def test_ref_slugs_separate_what_fqn_strings_do_not(a: ObjectRef, b: ObjectRef) -> None:
    assert ref_slug(a) != ref_slug(b)


def test_refs_slug_is_injective_over_pairs() -> None:
    refs = [
        ObjectRef(database=d, name=n) for d, n in itertools.product(["a", "a.b", "my-db"], ["b", "b.c", "a-b", "a_b"])
    ]
    slugs = {refs_slug(pair) for pair in itertools.permutations(refs, 2)}
    assert len(slugs) == len(refs) * (len(refs) - 1)
    assert ref_slug(ObjectRef(database="analytics", name="events")) == "analytics.events"

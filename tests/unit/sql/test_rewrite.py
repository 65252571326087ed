"""Renaming objects in a CREATE statement through the parsed model's spans, never by searching the text."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.errors import ChmvError
from chmv_assets.sql.rewrite import renamed_statement


def ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


def test_an_mv_gets_its_name_target_and_every_source_renamed_and_nothing_else() -> None:
    view = parse_statement(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS a.mv TO a.t AS\n"
        "SELECT s.x, 'a.s' AS label, y /* a.s */ FROM a.s JOIN b AS bb ON bb.id = s.x\n"
        "WHERE y IN (SELECT y FROM s)",
        default_database="a",
    )
    names = {ref("a.mv"): ref("p.mv"), ref("a.t"): ref("p.t"), ref("a.s"): ref("p.s"), ref("a.b"): ref("p.b")}
    assert renamed_statement(view, names) == (
        "CREATE MATERIALIZED VIEW IF NOT EXISTS `p`.`mv` TO `p`.`t` AS\n"
        "SELECT s.x, 'a.s' AS label, y /* a.s */ FROM `p`.`s` AS `s` JOIN `p`.`b` AS bb ON bb.id = s.x\n"
        "WHERE y IN (SELECT y FROM `p`.`s` AS `s`)"
    )


def test_a_table_keeps_everything_but_its_name() -> None:
    table = parse_statement(
        "CREATE TABLE `my db`.`odd-name` (x UInt8 COMMENT 'my db.odd-name') ENGINE = MergeTree ORDER BY x",
        default_database="d",
    )
    assert renamed_statement(table, {ref("my db.odd-name"): ref("s._chmv_next_odd")}) == (
        "CREATE TABLE `s`.`_chmv_next_odd` (x UInt8 COMMENT 'my db.odd-name') ENGINE = MergeTree ORDER BY x"
    )
    assert renamed_statement(table, {}) == table.statement


def test_a_name_without_a_recorded_position_is_an_error_not_a_guess() -> None:
    table = parse_statement("CREATE TABLE d.t (x UInt8) ENGINE = Memory", default_database="d")
    with pytest.raises(ChmvError, match="no position recorded"):
        renamed_statement(table.model_copy(update={"name_span": None}), {ref("d.t"): ref("d.u")})

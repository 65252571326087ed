"""chmv.toml is read, overridden and validated with errors that name the file."""

from pathlib import Path

import pytest

from chmv_assets.ddl.config import load_config
from chmv_assets.errors import DDLError


def test_example_config(example):
    config = example.config
    assert config.default_database == "analytics"
    assert config.partition_start == "2026-08-01"
    assert config.ingestion.time_columns["analytics.counter"] == "when"


def test_defaults_without_a_file(tmp_path: Path):
    config = load_config(tmp_path)
    assert config.default_database == "default"
    assert config.lint.max_views_per_source == 3
    assert config.sla_minutes == 5


def test_overrides_win_and_none_is_ignored(tmp_path: Path):
    (tmp_path / "chmv.toml").write_text('default_database = "a"\n')
    assert load_config(tmp_path, default_database="b").default_database == "b"
    assert load_config(tmp_path, default_database=None).default_database == "a"


def test_unknown_key_names_the_file(tmp_path: Path):
    (tmp_path / "chmv.toml").write_text("sla_minute = 5\n")
    with pytest.raises(DDLError, match=r"chmv\.toml.*sla_minute"):
        load_config(tmp_path)


def test_broken_toml_names_file_and_line(tmp_path: Path):
    (tmp_path / "chmv.toml").write_text('default_database = "a"\nlint = [\n')
    with pytest.raises(DDLError, match=r"chmv\.toml:\d+:\d+: invalid TOML"):
        load_config(tmp_path)


def test_every_problem_is_reported_at_its_own_line_and_key(tmp_path: Path) -> None:
    (tmp_path / "chmv.toml").write_text(
        '# the project\ndefault_database = "a"\npartition_start = "yesterday"\n\n[sweep]\n'
        "interval_seconds = 1\n\n[lint]\nmax_chain_dept = 4\n"
    )
    with pytest.raises(DDLError) as raised:
        load_config(tmp_path)
    where = [(p.line, p.column, p.message.split(":")[0]) for p in raised.value.problems]
    assert where == [(3, 1, "partition_start"), (6, 1, "sweep.interval_seconds"), (9, 1, "lint.max_chain_dept")]
    text = str(raised.value)
    assert f"{tmp_path / 'chmv.toml'}:3:1: partition_start: 'yesterday' is not a date" in text
    assert "remove or rename the key" in text


def test_a_time_zone_is_validated_and_kept(tmp_path: Path) -> None:
    (tmp_path / "chmv.toml").write_text('timezone = "Asia/Kolkata"\n')
    assert load_config(tmp_path).timezone == "Asia/Kolkata"
    (tmp_path / "chmv.toml").write_text('\n\ntimezone = "Asia/Mumbay"\n')
    with pytest.raises(DDLError, match=r"chmv\.toml:3:1: timezone: 'Asia/Mumbay' is not a time zone"):
        load_config(tmp_path)


def test_an_override_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(DDLError, match=r"partition_start \(given on the command line or by the caller\)"):
        load_config(tmp_path, partition_start="2026-02-30")

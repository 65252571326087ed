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

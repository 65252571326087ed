"""The loader's parse cache: a second load of unchanged DDL unpickles the model; any change parses again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chmv_assets import settings
from chmv_assets.ddl import loader
from chmv_assets.ddl.models import ObjectRef

EXAMPLE_DDL = Path(__file__).resolve().parents[3] / "examples" / "ddl"


@pytest.fixture
def ddl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CHMV_STATE_DIR", str(tmp_path / "state"))
    return Path(shutil.copytree(EXAMPLE_DDL, tmp_path / "ddl"))


def _cache_files(ddl: Path) -> list[Path]:
    return sorted((ddl.parent / "state" / "cache").glob("ddl-*.pickle"))


def test_second_load_comes_from_the_cache_and_equals_a_parse(ddl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = loader.load(ddl)
    (cached,) = _cache_files(ddl)
    calls = []
    monkeypatch.setattr(loader, "load_project", lambda *a, **k: calls.append(a))  # would return None if called
    second = loader.load(ddl)
    assert calls == [] and second.project == first.project
    ref = ObjectRef(database="analytics", name="events_weekly")
    assert second.project.views_into(ref) == first.project.views_into(ref)
    assert cached.exists()


def test_a_changed_file_is_parsed_again(ddl: Path) -> None:
    loader.load(ddl)
    path = ddl / "50_counter.sql"
    path.write_text(path.read_text() + "\nCREATE TABLE analytics.extra (x UInt8) ENGINE = MergeTree ORDER BY x;\n")
    again = loader.load(ddl)
    assert ObjectRef(database="analytics", name="extra") in again.project.tables
    assert len(_cache_files(ddl)) == 2


def test_a_corrupt_cache_file_is_ignored(ddl: Path) -> None:
    loader.load(ddl)
    (cached,) = _cache_files(ddl)
    cached.write_bytes(b"not a pickle")
    assert ObjectRef(database="analytics", name="counter") in loader.load(ddl).project.tables


def test_the_cache_can_be_turned_off(ddl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.PARSE_CACHE.name, "0")
    loader.load(ddl)
    assert _cache_files(ddl) == []


def test_the_same_files_in_another_directory_name_their_own_paths(ddl: Path) -> None:
    """Errors and metadata name each statement's file: a copy elsewhere is not served the first one's model."""
    first = loader.load(ddl)
    copy = Path(shutil.copytree(ddl, ddl.parent / "copy"))
    second = loader.load(copy)
    ref = ObjectRef(database="analytics", name="counter")
    assert first.project.tables[ref].location.file.startswith(str(ddl))
    assert second.project.tables[ref].location.file.startswith(str(copy))


def test_derived_data_is_computed_once_per_load_and_lives_with_it(ddl: Path) -> None:
    first, second = loader.load(ddl), loader.load(ddl)
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert [first.derived("n", compute), first.derived("n", compute), second.derived("n", compute)] == [1, 1, 2]
    assert first.derived("other", compute) == 3  # another key is another value
    assert loader.LoadedProject(config=first.config, project=first.project).derived("n", compute) == 4


def test_a_directory_without_an_mv_is_named_with_what_it_holds(tmp_path: Path) -> None:
    from chmv_assets.ddl.loader import require_views
    from chmv_assets.errors import DDLError

    (tmp_path / "t.sql").write_text("CREATE TABLE db.t (a UInt8) ENGINE = MergeTree ORDER BY a;\n")
    with pytest.raises(DDLError, match=r"no materialized view found in .* \(1 \.sql file, 1 table\(s\)\)"):
        require_views(loader.load(tmp_path))

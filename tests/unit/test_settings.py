"""chmv_assets.settings: every variable read when asked, defaults that work from an installed chmv, one table in the
docs, no other module naming a variable."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import chmv_assets
from chmv_assets import settings
from chmv_assets.ddl.loader import load
from chmv_assets.engine.ingest.staging_area import staging_root
from resources.clickhouse import ClickHouseResource, clickhouse_from_env

ROOT = Path(__file__).resolve().parents[2]
#: Where chmv's packages are: site-packages when installed, the checkout when installed editable.
INSTALLED_AT = Path(chmv_assets.__file__).resolve().parents[1]
PACKAGES = ("chmv_assets", "resources", "spark", "asset_checks")


@pytest.fixture
def bare(tmp_path: Path, monkeypatch) -> Path:
    """A project directory of its own as the working directory, and none of chmv's variables set."""
    for variable in settings.VARIABLES:
        monkeypatch.delenv(variable.name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


def test_defaults_come_from_the_working_directory_never_from_where_chmv_is_installed(bare: Path) -> None:
    (bare / "ddl").mkdir()
    (bare / "ddl" / "t.sql").write_text(
        "CREATE TABLE d.s (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE d.t (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE MATERIALIZED VIEW d.m TO d.t AS SELECT x FROM d.s;\n"
    )
    found = {
        "state": settings.state_dir(),
        "ddl": settings.ddl_dir(),
        "staging": staging_root(),
        "engine": Path(ClickHouseResource().embedded_path or ""),
        "code location engine": Path(clickhouse_from_env().embedded_path or ""),
    }
    assert found == {
        "state": bare / ".chmv",
        "ddl": bare / "ddl",
        "staging": bare / ".chmv" / "staging",
        "engine": bare / ".chmv" / "chdb",
        "code location engine": bare / ".chmv" / "chdb",
    }
    load(settings.ddl_dir())  # the parse cache goes under the state directory
    assert [p.parent for p in (bare / ".chmv" / "cache").iterdir()] == [bare / ".chmv" / "cache"]
    inside = {name: path for name, path in found.items() if path.is_relative_to(INSTALLED_AT)}
    assert not inside, f"defaults inside {INSTALLED_AT}: {inside}"


def test_the_ddl_directory_is_the_projects_then_a_checkouts_example(bare: Path) -> None:
    assert settings.ddl_dir() == bare / "ddl"  # missing: loading it says so, and how to point chmv elsewhere
    (bare / "examples" / "ddl").mkdir(parents=True)
    assert settings.ddl_dir() == bare / "examples" / "ddl"
    (bare / "ddl").mkdir()
    assert settings.ddl_dir() == bare / "ddl"


def test_every_variable_is_read_when_asked(bare: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CHMV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CHMV_DDL_DIR", "elsewhere")
    monkeypatch.setenv("CHMV_CLICKHOUSE_DSN", "https://ch.example.com:8443")
    monkeypatch.setenv("CHMV_LANDING_DIR", "landing")
    monkeypatch.setenv("CHMV_ALERT_WEBHOOK", "https://hooks.example.com/x")
    monkeypatch.setenv("CHMV_PARSE_CACHE", "0")
    monkeypatch.setenv("CHMV_SPARK_MASTER", "spark://h:7077")
    monkeypatch.setenv("CHMV_CRASH_AT", "a,b")
    assert settings.state_dir() == tmp_path / "state"
    assert settings.staging_dir() == tmp_path / "state" / "staging"
    assert settings.ddl_dir() == bare / "elsewhere"
    assert settings.clickhouse_dsn() == "https://ch.example.com:8443"
    assert settings.landing_dir() == Path("landing")  # relative: the DDL directory's to resolve
    assert settings.alert_webhook() == "https://hooks.example.com/x"
    assert settings.parse_cache() is False
    assert settings.spark_master() == "spark://h:7077"
    assert settings.crash_points() == {"a", "b"}
    monkeypatch.setenv("CHMV_STAGING_DIR", str(tmp_path / "staged"))
    monkeypatch.setenv("CHMV_PARSE_CACHE", "")  # empty: unset
    assert settings.staging_dir() == tmp_path / "staged" and settings.parse_cache() is True


def test_unset_variables_have_their_defaults(bare: Path) -> None:
    assert settings.clickhouse_dsn() is None and settings.landing_dir() is None and settings.alert_webhook() is None
    assert settings.parse_cache() is True and settings.spark_master() == "local[*]"
    assert settings.crash_points() == frozenset()


def test_the_docs_list_every_variable_with_its_default() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \| (.+?) \| .+ \|$", section, flags=re.MULTILINE)
    documented = {name: default.replace("`", "") for name, default in rows}
    assert documented == {v.name: v.default for v in settings.VARIABLES}


def test_no_other_module_names_a_chmv_variable() -> None:
    """A ``"CHMV_…"`` string anywhere else in the product is a variable read around the settings module."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "chmv_assets" / "settings.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("CHMV_")
    ]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("https://ch.example.com:8443/sales", "https://ch.example.com:8443/sales"),
        ("https://u:p%40ss@ch.example.com:8443/sales", "https://ch.example.com:8443/sales"),
        (
            "https://ch.example.com:8443/?access_token=eyJhbGci.x.y&connect_timeout=3",
            "https://ch.example.com:8443/?access_token=…&connect_timeout=3",
        ),
        (
            "http://bot:pw@ch:8123?password=p&api_key=k&X-Amz-Signature=s&compress=1",
            "http://ch:8123?password=…&api_key=…&X-Amz-Signature=…&compress=1",
        ),
        ("chdb:///var/chmv/chdb?access_token=t0k", "chdb:///var/chmv/chdb?access_token=…"),
        ("chdb://relative/chdb", "chdb://relative/chdb"),
        ("https://ch:8443/?access_token=", "https://ch:8443/?access_token="),  # nothing to hide
    ],
    ids=["plain", "password", "access-token", "query-secrets", "chdb-query", "chdb-relative", "empty-token"],
)
def test_a_dsn_is_shown_without_credentials_or_secret_query_values(dsn: str, shown: str) -> None:
    assert settings.redact_dsn(dsn) == shown

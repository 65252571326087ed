"""chmv as a Dagster Component in a ``dg`` project: scaffold it, load it, materialize one partition with ``dg launch``.

The project is the minimal layout ``create-dagster project`` makes (pyproject with ``[tool.dg]``, ``src/<module>``
with ``definitions.py`` and ``defs/``), run by the current venv's ``dg`` with the module on ``PYTHONPATH``
instead of installed: no new venv, no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from dagster import AssetCheckKey, AssetKey, load_from_defs_folder
from dagster.components import ScaffoldRequest

from chmv_assets.component import ChmvComponent, ChmvComponentScaffolder, ChmvScaffoldParams
from chmv_assets.errors import ChmvError
from resources.clickhouse import ClickHouseResource

pytestmark = pytest.mark.worker_seconds(30)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_DDL = ROOT / "examples" / "ddl"
BIN = Path(sys.executable).parent
MODULE = "chmv_dg_project"  # unique: the test process imports it too
TARGET = AssetKey(["warehouse", "analytics", "hourly_endpoint_stats"])
PARTITION = "2026-08-02"
STATS = """
    SELECT hour, endpoint, sumMerge(request_count), uniqMerge(unique_users)
    FROM analytics.hourly_endpoint_stats WHERE toDate(hour) = '2026-08-02'
    GROUP BY hour, endpoint ORDER BY hour, endpoint
"""


def _dg_project(root: Path, module: str = MODULE) -> Path:
    """What ``create-dagster project`` lays out, minus the venv."""
    package = root / "src" / module
    (package / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [project]
        name = "{module}"
        version = "0.1.0"
        requires-python = ">=3.11"
        dependencies = ["chmv"]

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "{module}"
    """)
    )
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(
        textwrap.dedent("""
        from pathlib import Path

        import dagster as dg


        @dg.definitions
        def defs() -> dg.Definitions:
            return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
    """)
    )
    return package


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_dg_project_scaffolds_loads_and_materializes_one_partition(tmp_path, monkeypatch):
    project = tmp_path / "project"
    package = _dg_project(project)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("")
    dsn = f"chdb://{tmp_path / 'chdb'}"
    env = {
        **os.environ,
        "PYTHONPATH": str(project / "src"),
        "DAGSTER_HOME": str(dagster_home),
        "CHMV_STATE_DIR": str(tmp_path / "state"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }

    # The short name resolves only through the registry entry point, so this also checks the registration.
    _run(
        [str(BIN / "dg"), "scaffold", "defs", "ChmvComponent", "chmv", "--ddl-dir", str(EXAMPLE_DDL), "--dsn", dsn],
        cwd=project,
        env=env,
    )
    defs_yaml = package / "defs" / "chmv" / "defs.yaml"
    scaffolded = yaml.safe_load(defs_yaml.read_text())
    assert scaffolded == {
        "type": "chmv_assets.component.ChmvComponent",
        "attributes": {"ddl_dir": str(EXAMPLE_DDL), "dsn": dsn},
    }
    scaffolded["attributes"].update(key_prefix="warehouse", group_name="clickhouse")
    defs_yaml.write_text(yaml.safe_dump(scaffolded))

    # Loaded in process the way dg loads it: the translator options reach every asset, check and job.
    monkeypatch.syspath_prepend(str(project / "src"))
    repo = load_from_defs_folder(project_root=project).get_repository_def()
    graph = repo.asset_graph
    assert TARGET in graph.get_all_asset_keys()
    assert AssetKey(["analytics", "hourly_endpoint_stats"]) not in graph.get_all_asset_keys()
    assert {graph.get(k).group_name for k in graph.get_all_asset_keys()} == {"clickhouse"}
    assert AssetCheckKey(TARGET, "chmv_parity") in graph.asset_check_keys
    assert {"chmv_apply", "chmv_rebuild_day"} <= {job.name for job in repo.get_all_jobs()}

    # Deploy the DDL and some rows, then lose one partition of the target.
    chmv = str(BIN / "chmv")
    _run([chmv, "apply", "--ddl-dir", str(EXAMPLE_DDL), "--dsn", dsn], cwd=project, env=env)
    _run([chmv, "load-demo", "--ddl-dir", str(EXAMPLE_DDL), "--rows", "20000", "--dsn", dsn], cwd=project, env=env)
    engine = ClickHouseResource(dsn=dsn)
    with engine.get_client() as client:
        expected = client.query(STATS).result_rows
        client.command(f"ALTER TABLE analytics.hourly_endpoint_stats DROP PARTITION '{PARTITION}'")
        assert client.query(STATS).result_rows == []
    assert expected, "the demo rows cover the partition"

    # One run; on the embedded engine the code location runs its steps in process (one engine user at a time).
    launched = _run(
        [str(BIN / "dg"), "launch", "--assets", TARGET.to_user_string(), "--partition", PARTITION], cwd=project, env=env
    )
    log = launched.stdout + launched.stderr
    assert "RUN_SUCCESS" in log
    assert f"Asset check 'chmv_parity' on '{TARGET.to_user_string()}' passed" in log
    with engine.get_client() as client:
        assert client.query(STATS).result_rows == expected


def test_paths_are_relative_to_defs_yaml_and_translator_class_is_the_hook(tmp_path, monkeypatch):
    module = "chmv_dg_project_paths"
    project = tmp_path / "project"
    package = _dg_project(project, module)
    (project / "ddl").symlink_to(EXAMPLE_DDL)
    (package / "translators.py").write_text(
        textwrap.dedent("""
        from chmv_assets.orchestration.translator import ChmvTranslator


        class Described(ChmvTranslator):
            def get_description(self, loaded, ref):
                return "from the project's translator"
    """)
    )
    # `dg scaffold defs … --ddl-dir ddl --dsn chdb://.chmv/chdb` run at the project root.
    monkeypatch.chdir(project)
    folder = package / "defs" / "chmv"
    folder.mkdir()
    params = ChmvScaffoldParams(ddl_dir="ddl", dsn="chdb://.chmv/chdb")
    ChmvComponentScaffolder().scaffold(
        ScaffoldRequest(
            type_name="chmv_assets.component.ChmvComponent",
            target_path=folder,
            scaffold_format="yaml",
            project_root=project,
            params=params,
        )
    )
    attributes = yaml.safe_load((folder / "defs.yaml").read_text())["attributes"]
    assert attributes == {"ddl_dir": "../../../../ddl", "dsn": "chdb://../../../../.chmv/chdb"}
    attributes["translator_class"] = f"{module}.translators.Described"
    (folder / "defs.yaml").write_text(
        yaml.safe_dump({"type": "chmv_assets.component.ChmvComponent", "attributes": attributes})
    )

    monkeypatch.chdir(tmp_path)  # paths must not depend on where the code location is loaded from
    monkeypatch.syspath_prepend(str(project / "src"))
    defs = load_from_defs_folder(project_root=project)
    spec = defs.resolve_assets_def(AssetKey(["analytics", "hourly_endpoint_stats"])).specs_by_key
    assert spec[AssetKey(["analytics", "hourly_endpoint_stats"])].description == "from the project's translator"
    resource = defs.resources["clickhouse"]
    assert resource.embedded_path == str(project / ".chmv" / "chdb")


def test_translator_class_must_be_a_chmv_translator():
    component = ChmvComponent(ddl_dir=EXAMPLE_DDL, translator_class="pathlib.Path")
    with pytest.raises(ChmvError, match="not a subclass of ChmvTranslator"):
        component.get_translator()
    with pytest.raises(ChmvError, match="cannot be imported"):
        ChmvComponent(ddl_dir=EXAMPLE_DDL, translator_class="nowhere.Translator").get_translator()


def test_a_dsn_with_a_secret_is_refused_saying_how_to_pass_it():
    """The UI shows a component's resource configuration as written: a token in the DSN's query would be shown."""
    with pytest.raises(ChmvError, match=r"carries a secret in its query \(https://ch:8443/\?access_token=…\)"):
        ChmvComponent(ddl_dir=EXAMPLE_DDL, dsn="https://ch:8443/?access_token=t0k3n").get_clickhouse()
    with pytest.raises(ChmvError, match=r"carries credentials \(https://ch:8443 with a user@\)"):
        ChmvComponent(ddl_dir=EXAMPLE_DDL, dsn="https://u:pw@ch:8443").get_clickhouse()

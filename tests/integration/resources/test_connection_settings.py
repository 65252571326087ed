"""Connection settings of ClickHouseResource: time limits against a silent server, credentials and their precedence,
the session database, and what the Dagster UI shows of the resource."""

from __future__ import annotations

import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, EnvVar
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql, infer_resource_selector

from chmv_assets.cli import main
from chmv_assets.ddl.loader import load
from chmv_assets.errors import ChmvError
from resources.clickhouse import ClickHouseResource, clickhouse_from_env, for_project

from support.checks import tick
from support.paths import EXAMPLE_DDL

pytestmark = pytest.mark.worker_seconds(20)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung server, a proxy without its backend)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for connection in accepted:
        connection.close()
    server.close()


def test_chmv_plan_gives_up_on_a_silent_server_within_its_read_timeout(silent_server: int, capsys) -> None:
    dsn = f"http://127.0.0.1:{silent_server}?send_receive_timeout=2"
    started = time.monotonic()
    code = main(["plan", "--ddl-dir", str(EXAMPLE_DDL), "--dsn", dsn])
    elapsed = time.monotonic() - started
    assert code == 1
    assert "ClickHouse did not answer" in capsys.readouterr().err
    assert elapsed < 6, f"gave up after {elapsed:.1f}s with a 2 s read timeout"  # clickhouse-connect's own: 300 s


def test_a_sensor_tick_skips_with_the_reason_before_dagsters_deadline(
    silent_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS", "20")  # the tick's budget: 20 - 15 = 5 s
    loaded = load(EXAMPLE_DDL)
    resource = ClickHouseResource(dsn=f"http://127.0.0.1:{silent_server}")  # the default read timeout: 30 s
    instance = DagsterInstance.ephemeral()
    started = time.monotonic()
    data = tick(loaded, "chmv_staleness", resource, instance, None)
    elapsed = time.monotonic() - started
    assert not data.run_requests
    assert "ClickHouse unreachable or silent for the tick's 5s" in (data.skip_message or "")
    assert elapsed < 12, f"the tick took {elapsed:.1f}s; Dagster's deadline was 20 s"


def test_credentials_fields_win_over_the_dsns_and_the_dsn_keeps_its_database_and_timeouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CH_PW", "from-env")
    resource = ClickHouseResource(
        dsn="https://dsn-user:dsn-pw@ch.example.com:8443/sales?connect_timeout=3", password=EnvVar("CH_PW")
    )
    args = resource.server_client_args()
    assert args["password"] == "from-env" and args["username"] == "dsn-user"
    assert args["dsn"] == "https://ch.example.com:8443" and args["connect_timeout"] == 3
    assert args["send_receive_timeout"] == 30
    assert resource.session_database == "sales"
    assert resource.shown_dsn == "https://ch.example.com:8443/sales?connect_timeout=3"
    plain = ClickHouseResource(dsn="https://u:p%40ss@ch.example.com:8443")
    assert plain.server_client_args()["password"] == "p@ss" and plain.session_database is None
    assert plain.server_client_args(read_timeout_seconds=4.6)["send_receive_timeout"] == 5


def test_an_unset_password_variable_means_no_password_not_a_failing_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHMV_CLICKHOUSE_DSN", "https://u:dsn-pw@ch.example.com:8443")
    monkeypatch.delenv("CLICKHOUSE_PASSWORD", raising=False)
    monkeypatch.delenv("CLICKHOUSE_USER", raising=False)
    resource = clickhouse_from_env()
    assert isinstance(resource.dsn, EnvVar) and resource.password is None
    assert resource.server_client_args()["password"] == "dsn-pw"


def test_sessions_open_in_the_projects_default_database(tmp_path: Path) -> None:
    resource = for_project(ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}"), "app")
    with resource.get_client() as client:
        client.command("CREATE DATABASE app")
    with resource.get_client() as client:
        client.command("CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a")  # unqualified, as DDL files are
        where = client.query("SELECT database FROM system.tables WHERE name = 't'").result_rows
    assert where == [("app",)]
    with pytest.raises(ChmvError, match="session database is 'sales'.*default_database = 'app'"):
        for_project(ClickHouseResource(dsn="https://ch.example.com:8443/sales"), "app")


def test_embedded_sessions_run_at_the_production_servers_compatibility(tmp_path: Path) -> None:
    """chmv.toml's server_version: the embedded engine's sessions behave like that server; a server's are its own."""
    resource = for_project(ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}"), "default", server_version="24.8")
    with resource.get_client() as client:
        assert client.query("SELECT getSetting('compatibility')").result_rows == [("24.8",)]
    server = for_project(ClickHouseResource(dsn="https://ch.example.com:8443"), "default", server_version="24.8")
    assert "compatibility" not in server.settings
    mine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}", settings={"compatibility": "25.3"})
    assert for_project(mine, "default", server_version="24.8").settings == {"compatibility": "25.3"}


SERVER_LOCATION = textwrap.dedent("""
    from chmv_assets.ddl.loader import load
    from chmv_assets.orchestration.definitions import build_definitions

    defs = build_definitions(load({ddl!r}))
""")
RESOURCE = """
query Resource($selector: ResourceSelector!) {
  topLevelResourceDetailsOrError(resourceSelector: $selector) {
    __typename
    ... on ResourceDetails { configuredValues { key value type } }
  }
}
"""


def test_the_ui_resource_page_shows_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHMV_CLICKHOUSE_DSN", "https://admin:dsn-secret@ch.example.com:8443/analytics")
    monkeypatch.setenv("CLICKHOUSE_USER", "admin")
    monkeypatch.setenv("CLICKHOUSE_PASSWORD", "pw-secret")
    location = tmp_path / "location.py"
    location.write_text(SERVER_LOCATION.format(ddl=str(EXAMPLE_DDL)))
    instance = DagsterInstance.local_temp(str(tmp_path))
    with instance, define_out_of_process_context(str(location), "defs", instance) as ctx:
        selector = infer_resource_selector(ctx, "clickhouse")
        result = execute_dagster_graphql(ctx, RESOURCE, {"selector": selector})
    details = result.data["topLevelResourceDetailsOrError"]
    assert details["__typename"] == "ResourceDetails", details
    shown = {v["key"]: (v["type"], v["value"]) for v in details["configuredValues"]}
    assert shown["dsn"] == ("ENV_VAR", "CHMV_CLICKHOUSE_DSN")
    assert shown["password"] == ("ENV_VAR", "CLICKHOUSE_PASSWORD")
    text = str(details)
    assert "secret" not in text and "admin:" not in text

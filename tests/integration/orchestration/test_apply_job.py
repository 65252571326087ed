"""The chmv_apply job: the plan as markdown metadata first, then the preflight, then the apply."""

from __future__ import annotations

from pathlib import Path

from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource

from support.lifecycle import SHOP


def _plan_metadata(result) -> dict:
    (event,) = [e for e in result.all_events if e.step_key == "plan_ddl" and e.event_type_value == "STEP_OUTPUT"]
    return event.event_specific_data.metadata


def test_the_job_shows_the_plan_then_applies_it(tmp_path: Path, example) -> None:
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    job = build_definitions(example, clickhouse=resource).get_job_def("chmv_apply")
    first = job.execute_in_process()
    assert first.success
    metadata = _plan_metadata(first)
    assert metadata["chmv/plan"].value.startswith("**chmv plan** of ")
    assert "+ analytics.mv_events_weekly: create view" in metadata["chmv/plan"].value
    assert metadata["chmv/changes"].value == 27
    second = job.execute_in_process()
    assert second.success and _plan_metadata(second)["chmv/summary"].value.startswith("no changes")


def test_the_job_stops_at_the_preflight_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "ddl").mkdir()
    (tmp_path / "ddl" / "shop.sql").write_text(SHOP)
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    job = build_definitions(load(tmp_path / "ddl"), clickhouse=resource).get_job_def("chmv_apply")
    result = job.execute_in_process(raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    description = failure.event_specific_data.user_failure_data.description
    assert failure.step_key == "apply_ddl" and "Unknown expression identifier `customer_id`" in description
    assert description.startswith("1 problem found by the server's preflight")
    with resource.get_client() as client:
        assert not client.query("SELECT name FROM system.databases WHERE name = 'shop'").result_rows


def test_the_job_deploys_a_kafka_fed_schema_as_its_twin_and_names_the_stand_ins(tmp_path: Path) -> None:
    schema = Path(__file__).resolve().parents[2] / "fixtures" / "schemas" / "kafka_chain"
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    job = build_definitions(load(schema), clickhouse=resource).get_job_def("chmv_apply")  # made its twin there
    first = job.execute_in_process()
    assert first.success
    stand_ins = _plan_metadata(first)["chmv/stand_ins"].value
    assert "shop.order_events_queue: Kafka → Null table" in stand_ins and "shop.fx_rates_remote: MySQL" in stand_ins
    assert _plan_metadata(job.execute_in_process())["chmv/summary"].value.startswith("no changes")

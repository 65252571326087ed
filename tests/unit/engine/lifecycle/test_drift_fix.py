"""The drift check's link to the plan, as text: the part of the plan for a target, or why there is none."""

from __future__ import annotations

from chmv_assets.engine.lifecycle.drift_fix import DriftPlan, drift_fix_markdown
from chmv_assets.engine.lifecycle.plan import Action, Change, LifecyclePlan

from support.ddl import ref

ERRORS, ERRORS_MV = ref("analytics.error_events"), ref("analytics.errors_mv")


def test_only_the_changes_touching_the_target_are_shown_in_full_with_the_commands(example) -> None:
    plan = LifecyclePlan(
        example.project.ddl_dir,
        (
            Change(
                Action.MODIFY_QUERY,
                ERRORS_MV,
                "view",
                1,
                reasons=("the SELECT changed",),
                statements=("ALTER TABLE `analytics`.`errors_mv` MODIFY QUERY SELECT 1",),
            ),
            Change(
                Action.ALTER,
                ref("analytics.audit_log"),
                "table",
                1,
                statements=("ALTER TABLE `analytics`.`audit_log` …",),
            ),
        ),
    )
    dsn = "https://chmv:s3cret@ch.example:8443/?access_token=t0k3n"
    text = drift_fix_markdown(DriftPlan(plan, None, 0.5), example, ERRORS, dsn=dsn)
    assert "- **~ analytics.errors_mv: MODIFY QUERY**" in text and "1 of the plan's 2" in text
    assert "```sql\nALTER TABLE `analytics`.`errors_mv` MODIFY QUERY SELECT 1;\n```" in text
    assert "audit_log" not in text
    ddl = example.project.ddl_dir
    assert f"chmv apply --ddl-dir {ddl} --dsn https://ch.example:8443/?access_token=…\n" in text
    assert "s3cret" not in text and "t0k3n" not in text
    assert "`chmv_apply` job" in text


def test_a_difference_the_plan_does_not_change_and_a_plan_that_could_not_be_made_say_so(example) -> None:
    other = LifecyclePlan(example.project.ddl_dir, (Change(Action.ALTER, ref("analytics.audit_log"), "table", 1),))
    text = drift_fix_markdown(DriftPlan(other, None, 0.1), example, ERRORS, dsn=None)
    assert text.startswith("The lifecycle plan has no change for analytics.error_events")
    assert f"chmv apply --ddl-dir {example.project.ddl_dir}\n" in text  # no --dsn: the default engine
    failed = drift_fix_markdown(DriftPlan(None, "analytics.x_mv: POPULATE …", 0.1), example, ERRORS, dsn=None)
    assert failed.startswith("The lifecycle plan could not be made: analytics.x_mv: POPULATE …")

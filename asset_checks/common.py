"""Helpers shared by the checks: check names, the objects a target needs, engines that deduplicate."""

from __future__ import annotations

from collections.abc import Iterable

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef

PARITY = "chmv_parity"
PARTS = "chmv_part_count"
DRIFT = "chmv_schema_drift"
LINT = "chmv_lint"
HEALTH = "chmv_health"


#: Engines that collapse rows with the same key at merge time (a duplicate insert is counted once, eventually).
SELF_DEDUP_ENGINES = ("ReplacingMergeTree", "CollapsingMergeTree", "VersionedCollapsingMergeTree")


def involved_objects(loaded: LoadedProject, target: ObjectRef) -> list[ObjectRef]:
    """The target, the MVs writing it and every table they read: what must exist for the target to be fed."""
    objects = [target]
    for view in loaded.project.views_into(target):
        objects.append(view.ref)
        objects.extend(view.source_refs)
        objects.extend(view.dictionaries)
    return list(dict.fromkeys(objects))


def missing_message(missing: Iterable[ObjectRef]) -> str:
    names = ", ".join(sorted(r.fqn for r in missing))
    return (
        f"{names} does not exist on the server: deploy the DDL with `chmv apply` "
        "(or the chmv_apply job), or fix the DDL directory"
    )

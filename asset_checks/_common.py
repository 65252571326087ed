"""Helpers shared by the checks: check names, partition windows, existence of objects on the server."""

from __future__ import annotations

from collections.abc import Iterable

from clickhouse_connect.driver.client import Client
from dagster import AssetCheckKey, AssetKey

from chmv_assets.loader import LoadedProject
from chmv_assets.models import ObjectRef
from chmv_assets.translator import ChmvTranslator

PARITY = "chmv_parity"
PARTS = "chmv_part_count"
DRIFT = "chmv_schema_drift"
LINT = "chmv_lint"


#: Engines that collapse rows with the same key at merge time (a duplicate insert is counted once, eventually).
SELF_DEDUP_ENGINES = ("ReplacingMergeTree", "CollapsingMergeTree", "VersionedCollapsingMergeTree")


def targets_by_key(loaded: LoadedProject, translator: ChmvTranslator) -> dict[AssetKey, ObjectRef]:
    """Every MV target of the project by its asset key."""
    return {translator.get_asset_key(t): t for t in loaded.project.targets}


def check_key(translator: ChmvTranslator, ref: ObjectRef, name: str) -> AssetCheckKey:
    """The key of check ``name`` on the asset of ``ref``."""
    return AssetCheckKey(translator.get_asset_key(ref), name)


def existing_objects(client: Client, refs: Iterable[ObjectRef]) -> set[ObjectRef]:
    """Which of ``refs`` exist on the server (tables, views, dictionaries), in one query."""
    refs = set(refs)
    if not refs:
        return set()
    rows = client.query(
        "SELECT database, name FROM system.tables WHERE database IN {dbs:Array(String)} AND name IN {names:Array(String)}",
        parameters={"dbs": sorted({r.database for r in refs}), "names": sorted({r.name for r in refs})},
    ).result_rows
    found = {ObjectRef(database=d, name=n) for d, n in rows}
    return refs & found


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
    return (f"{names} does not exist on the server: deploy the DDL with `chmv apply` "
            "(or the chmv_apply job), or fix the DDL directory")  # fmt: skip

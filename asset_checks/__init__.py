"""Asset checks of chmv: parity, part-count growth, drift, lint.

- ``chmv_parity`` (per target, partitioned like it, blocking if ``parity.blocking``): asset_checks.parity
- ``chmv_part_count`` (WARN / ERROR near the throw limit): asset_checks.parts
- ``chmv_schema_drift`` (blocking if ``parity.blocking``): asset_checks.drift
- ``chmv_lint`` (WARN, model only): asset_checks.lint

Parity and drift gate downstream assets, so they are declared on the target ops themselves and
evaluated right after each target's materialization (asset_checks.inline); the others have one op each.
"""

from __future__ import annotations

from dagster import AssetChecksDefinition

from asset_checks._common import DRIFT, LINT, PARITY, PARTS, check_key
from asset_checks.lint import build_lint_checks
from asset_checks.parts import build_part_checks
from chmv_assets.loader import LoadedProject
from chmv_assets.translator import ChmvTranslator

__all__ = ["DRIFT", "LINT", "PARITY", "PARTS", "build_asset_checks", "check_key"]


def build_asset_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """The checks with an op of their own: part counts and lint (parity and drift live on the target ops)."""
    checks: list[AssetChecksDefinition] = build_part_checks(loaded, translator)
    checks += build_lint_checks(loaded, translator)
    return checks

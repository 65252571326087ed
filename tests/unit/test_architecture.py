"""No private Dagster imports anywhere (`make test` runs `lint-imports` for the layers, Dagster-free lower layers and cycles)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chmv_assets", "resources", "spark", "asset_checks")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_no_private_dagster_imports():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0].startswith("dagster") and any(part.startswith("_") for part in module.split(".")[1:])
    ]
    assert not offenders, "private Dagster imports:\n" + "\n".join(offenders)


def test_tests_share_helpers_through_support_never_through_a_conftest():
    """A conftest holds fixtures; pytest imports it under a name of its own, so a test importing it by name would load
    a second copy. What tests share is in tests/support/ (docs/architecture.md, "Layout")."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for folder in ("tests", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] == "conftest"
    ]
    assert not offenders, "imports of a conftest:\n" + "\n".join(offenders)
    loose = sorted(p.name for p in (ROOT / "tests").glob("*.py") if p.name != "conftest.py")
    assert not loose, f"modules at the root of tests/ (helpers go to tests/support/): {loose}"

"""Where the repository, the example project and the tests' own files are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DDL = ROOT / "examples" / "ddl"
TESTS = ROOT / "tests"
#: Schemas written for chmv's tests (tests/fixtures/schemas/<name>), the peer corpus (tests/fixtures/corpus).
SCHEMAS = TESTS / "fixtures" / "schemas"
CORPUS = TESTS / "fixtures" / "corpus"
#: The golden files of the generated SQL (tests/unit/sql/golden/<kind>).
GOLDEN = TESTS / "unit" / "sql" / "golden"

"""The live-vs-repo diff's pieces that need no engine: type names normalized as the server spells them."""

from __future__ import annotations

from chmv_assets.engine.drift import normalize_type


def test_type_normalization() -> None:
    assert normalize_type("AggregateFunction(quantile(0.99),  UInt32)") == "AggregateFunction(quantile(0.99), UInt32)"
    assert normalize_type("INT") == "Int32" and normalize_type("LowCardinality( String )") == "LowCardinality(String)"

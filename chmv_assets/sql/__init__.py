"""SQL generation: pure functions from the parsed model to SQL text (quoting, literals, rebuild SQL)."""

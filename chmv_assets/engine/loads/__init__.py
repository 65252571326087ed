"""Loading the landing zone into the source tables: one watermarked, gated, paced, idempotent load per source (Spark,
handed in as the provider of staged rows, only reads and stages the files). A room of its own, over rebuild: a load
that died during its insert is repaired by rebuilding the target partitions it touched."""

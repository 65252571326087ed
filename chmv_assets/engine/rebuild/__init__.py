"""Rebuilding partitions: where each partition's truth lives, the planner, the steps, the one executor."""

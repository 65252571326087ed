"""Changing what is deployed (``chmv plan`` / ``chmv apply``): the plan, its planner, preflight, the run."""

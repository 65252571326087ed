"""Changing what is deployed (``chmv plan`` / ``chmv apply``): the plan, its planner, preflight, the run, and the part
of the plan that fixes a drifting target (``drift_fix``)."""

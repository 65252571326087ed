"""``chmv certify``: a seeded, replayable, randomized history of writers, chmv's own paths and injected faults on the
schema's local twin, checked against the MVs' own SELECT (docs/certify.md)."""

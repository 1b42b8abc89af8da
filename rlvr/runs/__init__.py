"""A run directory on disk: its layout, atomic writes, the typed records of metrics.jsonl and
summary.json, checkpoints, locks, damage reports and results tables."""

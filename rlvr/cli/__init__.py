"""The command line: `rlvr` (main) and its help text (help)."""

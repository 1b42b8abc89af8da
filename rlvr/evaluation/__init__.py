"""Evaluation statistics: paired gains with the sign-flip test, and pass@k."""

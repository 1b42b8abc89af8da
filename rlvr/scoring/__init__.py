"""Rewards: scorers and their composition (`scorers`; `rlvr.task_api.plugins` parses
`scorer=a*0.3+b`, `a>b`) and the verifier library (`verifiers`: `compute_reward(completion,
ground_truth)` in [0, 1])."""

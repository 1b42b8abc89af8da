"""Tasks and how a name becomes one: the task API (`api`: Task, environment, ART's idiom), `plugins`
(entry points and file/module references for tasks, scorers and the judge), one-turn rollouts,
the model a rollout receives (`rollout_model`) and the `rlvr new` scaffold."""

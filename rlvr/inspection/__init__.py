"""Rollout inspection: read a run directory and look at what the policy actually did.

"Watch your rollouts; don't blindly trust the reward function." The notebooks and `rlvr inspect`
are thin shells over this package:

    from rlvr import inspection as ri
    run = ri.load_run("runs/math-20261122-101500")
    ri.step_table(run)                    # metrics.jsonl, one row per step (polars)
    ri.curves(run); ri.plot_curves(run)   # reward / validation with alarms and the stop
    frame = ri.trajectories(run, step=3)  # a step's trajectories (train, val or test)
    ri.groups(frame); ri.no_signal_groups(frame)
    ri.render_conversation(ri.conversation(frame.row(0, named=True)))
    ri.suspicious(run)                    # the hacking candidates, each with a reason
    ri.story(run)                         # the run in words, as report.png tells it

Modules: `reader` (the run and its tables), `curves`, `conversations` (one trajectory as turns,
and its rendering), `suspects` (hacking candidates), `views` (the terminal views).
"""

from rlvr.inspection.conversations import (
    Conversation,
    JudgeNotes,
    ToolCall,
    Turn,
    Verdict,
    conversation,
    conversations,
    frame_table,
    judge_notes,
    render_conversation,
)
from rlvr.inspection.curves import AlarmMark, Curves, Point, curves, plot_curves
from rlvr.inspection.reader import (
    SPLITS,
    InspectError,
    Run,
    all_trajectories,
    available,
    groups,
    last_text,
    latest_run,
    load_run,
    no_signal_groups,
    step_table,
    trajectories,
)
from rlvr.inspection.suspects import (
    JUMP,
    THRESHOLD,
    Reason,
    Suspect,
    high_reward_failing_truth,
    identical_completions,
    reward_jumps,
    suspect_conversations,
    suspects_frame,
    suspicious,
)
from rlvr.inspection.views import overview_view, step_view, story, suspicious_view

__all__ = [
    "JUMP",
    "SPLITS",
    "THRESHOLD",
    "AlarmMark",
    "Conversation",
    "Curves",
    "InspectError",
    "JudgeNotes",
    "Point",
    "Reason",
    "Run",
    "Suspect",
    "ToolCall",
    "Turn",
    "Verdict",
    "all_trajectories",
    "available",
    "conversation",
    "conversations",
    "curves",
    "frame_table",
    "groups",
    "high_reward_failing_truth",
    "identical_completions",
    "judge_notes",
    "last_text",
    "latest_run",
    "load_run",
    "no_signal_groups",
    "overview_view",
    "plot_curves",
    "render_conversation",
    "reward_jumps",
    "step_table",
    "step_view",
    "story",
    "suspect_conversations",
    "suspects_frame",
    "suspicious",
    "suspicious_view",
    "trajectories",
]

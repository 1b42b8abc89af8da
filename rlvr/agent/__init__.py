"""The episode layer for multi-turn tool agents: plain functions as tools, one episode loop.

    trajectory = await rlvr.tool_episode(model, item, messages, [search, read], sampling)

- `tools`: a Python function becomes a tool (schema from its signature, arguments validated);
- `episode`: `tool_episode` plays the turns under the `tools`, `text` or `auto` protocol, with a
  model or with a scripted policy (demonstrations for the warm start);
- `search`: model-written keywords as a safe SQLite FTS5 query, for search tools;
- `levels`: difficulty levels (evidence in the prompt or found with the tools, turn cap);
- `budget`: observations within a token budget (`tool_episode(..., observation_tokens=N)`);
- `tokens`: what an episode costs in the model's real tokens, part by part and turn by turn.
"""

from rlvr.agent import budget, levels, search, tokens
from rlvr.agent.budget import Asked, Fitted, approx_tokens, fit
from rlvr.agent.episode import (
    PROTOCOLS,
    EpisodeEnd,
    EpisodeMetric,
    Protocol,
    Script,
    chat,
    final_reply,
    tool_episode,
)
from rlvr.agent.tools import (
    TOOL_TIMEOUT_S,
    Call,
    Tool,
    ToolError,
    ToolTimeout,
    as_tool,
    as_tools,
    running_tool_threads,
    text_call,
    text_instructions,
)

__all__ = [
    "PROTOCOLS",
    "TOOL_TIMEOUT_S",
    "Asked",
    "Call",
    "EpisodeEnd",
    "EpisodeMetric",
    "Fitted",
    "Protocol",
    "Script",
    "Tool",
    "ToolError",
    "ToolTimeout",
    "approx_tokens",
    "as_tool",
    "as_tools",
    "budget",
    "chat",
    "final_reply",
    "fit",
    "levels",
    "running_tool_threads",
    "search",
    "text_call",
    "text_instructions",
    "tokens",
    "tool_episode",
]

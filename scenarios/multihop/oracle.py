"""The oracle: a scripted agent that answers each question through the policy's own actions, for
supervised warm-start demonstrations (`MultihopScenario.demonstrate`, `sft_steps=`).

It knows one thing the policy does not: which passage states each hop's fact (the question's
chain). Everything else it does as the policy must: it searches with the hop's sub-question about
the entity it has reached, reads the passage, and takes the next entity, and in the end the
answer, out of the passage text (`corpus.read_fact`), never from the question's label. The check
then compares that answer with the label, so the oracle's solve rate also tests the corpus.

    easy:          ANSWER at once, walking the chain through the passages shown in the prompt
    medium, hard:  per hop SEARCH the sub-question, READ the passage; then ANSWER

Plans are pure functions of (question, corpus, level): same question, same plan. A 2-hop plan
takes five turns and a 3-hop plan seven, the turn limits of medium and hard.
"""

from __future__ import annotations

import json
from typing import Any

from scenarios.multihop.actions import Answer, Protocol, Read, Search, ToolName
from scenarios.multihop.corpus import SUB_QUESTIONS, Corpus, Question, read_fact

OracleAction = Search | Read | Answer


def plan(question: Question, corpus: Corpus, evidence_in_prompt: bool) -> list[OracleAction]:
    """The oracle's actions for `question`."""
    entity = question.hops[0].subject  # the one entity the question names
    actions: list[OracleAction] = []
    for hop in question.hops:
        passage = corpus.passage(hop.passage_id)
        if not evidence_in_prompt:
            actions += [
                Search(query=SUB_QUESTIONS[hop.relation].format(entity)),
                Read(ref=passage.id),
            ]
        entity = read_fact(hop.relation, passage.text) or "unknown"
    return [*actions, Answer(text=entity)]


def _call(action: OracleAction) -> tuple[ToolName, dict[str, str]]:
    if isinstance(action, Search):
        return ToolName.SEARCH, {"query": action.query}
    if isinstance(action, Read):
        return ToolName.READ, {"passage_id": action.ref}
    return ToolName.ANSWER, {"answer": action.text}


def message(action: OracleAction, protocol: Protocol, turn: int) -> dict[str, Any]:
    """The assistant message for `action`: a text action line ("SEARCH: ..."), or (tools
    protocol) a tool call with empty text, as `art.Trajectory.messages()` renders a sampled one."""
    name, arguments = _call(action)
    if protocol == "tools":
        call = {"name": name.value, "arguments": json.dumps(arguments)}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"call{turn}", "type": "function", "function": call}],
        }
    return {"role": "assistant", "content": f"{name.name}: {next(iter(arguments.values()))}"}

"""The oracle: a scripted agent that answers each question through the policy's own actions, for
supervised warm-start demonstrations (`MultihopEnvironment.demonstrate`, `sft_steps=`).

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

from rlvr.agent import Call
from scenarios.multihop.corpus import SUB_QUESTIONS, Corpus, Question, read_fact
from scenarios.multihop.tools import answer_line

OracleTurn = Call | str  # a tool call, or the final reply


def plan(question: Question, corpus: Corpus, evidence_in_prompt: bool) -> list[OracleTurn]:
    """The oracle's turns for `question`: tool calls, then the answer."""
    entity = question.hops[0].subject  # the one entity the question names
    turns: list[OracleTurn] = []
    for hop in question.hops:
        passage = corpus.passage(hop.passage_id)
        if not evidence_in_prompt:
            turns += [
                Call(
                    name="search", arguments={"query": SUB_QUESTIONS[hop.relation].format(entity)}
                ),
                Call(name="read", arguments={"passage_id": passage.id}),
            ]
        entity = read_fact(hop.relation, passage.text) or "unknown"
    return [*turns, answer_line(entity)]

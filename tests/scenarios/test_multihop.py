"""The multihop task: the generated corpus, BM25 retrieval, retrieval and answer scores, the
tools and the final answer, scripted episodes (fault injection) and one real rollout.

The scripted tests drive the rollout with `ScriptedPolicy` (the email tests' stand-in for
`art.Model`); the slow test runs the real SmolLM2-135M through rlvr's LocalTorchBackend.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import art
import pytest
from openai.types.chat.chat_completion import Choice

from rlvr.agent import Call, EpisodeEnd, as_tools
from rlvr.agent.episode import run_call
from rlvr.config import ConfigError
from rlvr.task_api.plugins import resolve_task, task_config
from rlvr.training.warmstart import demonstrations
from rlvr.types import Item, Sampling
from scenarios.multihop import OBSERVATION_TOKENS, Options, oracle
from scenarios.multihop.corpus import Corpus, Question, generate_corpus, read_fact
from scenarios.multihop.environment import Metric, MultihopEnvironment, make_environment
from scenarios.multihop.index import Hit, PassageIndex
from scenarios.multihop.scoring import Retrieval, RewardKind, retrieval_scores, reward_score
from scenarios.multihop.tools import (
    Answer,
    answer_line,
    corpus_tools,
    parse_answer,
    show_hit,
    shown_ids,
)
from tests.helpers.real_policy import real_rollout
from tests.helpers.scripted import BAD_TURNS, ScriptedPolicy, Turn, choices

SEEDS = (0, 1, 7)
SAMPLING = Sampling(temperature=0.7, max_tokens=40, step=1)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return generate_corpus(0, 80)


@pytest.fixture(scope="module")
def index(corpus: Corpus) -> PassageIndex:
    return PassageIndex(corpus.passages)


# --- The corpus -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_generator_is_deterministic_by_seed(seed: int) -> None:
    assert generate_corpus(seed, 40) == generate_corpus(seed, 40)
    assert generate_corpus(seed, 40).passages != generate_corpus(seed + 100, 40).passages


def derive(question: Question, corpus: Corpus) -> str:
    """Answer `question` from its supporting passages' text alone, hop by hop (`read_fact`
    reads the passage text, not the generator's fact table)."""
    entity = question.hops[0].subject
    assert entity in question.text
    by_title = {p.title: p for p in corpus.passages}
    for hop in question.hops:
        passage = by_title[entity]
        assert passage.id == hop.passage_id
        found = read_fact(hop.relation, passage.text)
        assert found, f"{hop.relation} not stated in {passage.text!r}"
        entity = found
    return entity


@pytest.mark.parametrize("seed", SEEDS)
def test_every_answer_is_derivable_from_its_supporting_passages(seed: int) -> None:
    corpus = generate_corpus(seed, 60)
    titles = [p.title for p in corpus.passages]
    assert len(set(titles)) == len(titles)  # one page per entity: no ambiguous subject
    assert {len(q.hops) for q in corpus.questions} == {2, 3}
    for question in corpus.questions:
        assert derive(question, corpus) == question.answer
        assert len(set(question.supporting_ids)) == len(question.hops)
        assert not set(question.distractor_ids) & set(question.supporting_ids)
        for bridge in question.hops[1:]:  # bridge entities never appear in the question
            assert bridge.subject not in question.text


def test_distractors_are_hard_negatives(corpus: Corpus) -> None:
    for question in corpus.questions:
        answers = [h.answer for h in question.hops]
        for pid in question.distractor_ids:
            assert any(a in corpus.passage(pid).text for a in answers)


def test_too_small_a_world_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="expected people >= 12"):
        generate_corpus(0, 3)


# --- Retrieval ------------------------------------------------------------------------------------


def recall_at(index: PassageIndex, queries: list[tuple[str, str]], k: int) -> float:
    return sum(pid in {h.id for h in index.search(q, k)} for q, pid in queries) / len(queries)


@pytest.mark.parametrize(("k", "floor"), [(1, 0.95), (3, 0.98)])
def test_sub_questions_retrieve_their_supporting_passage(
    corpus: Corpus, index: PassageIndex, k: int, floor: float
) -> None:
    queries = [(h.question, h.passage_id) for q in corpus.questions for h in q.hops]
    assert recall_at(index, queries, k) >= floor


def test_last_hop_is_not_retrievable_from_the_question_alone(
    corpus: Corpus, index: PassageIndex
) -> None:
    """The questions are really multi-hop: the first hop's passage is found from the question,
    the last hop's passage almost never (it needs the bridge entity)."""
    first = [(q.text, q.hops[0].passage_id) for q in corpus.questions]
    last = [(q.text, q.hops[-1].passage_id) for q in corpus.questions]
    assert recall_at(index, first, 3) >= 0.95
    assert recall_at(index, last, 3) <= 0.2


@pytest.mark.parametrize(
    "attack",
    [
        "'; DROP TABLE passages; --",
        'x" OR 1=1 --',
        "NEAR(a b) OR * title:x",
        "^founded",
        "\x00\x01 city",
        "a" * 100_000,
        "' UNION SELECT sql FROM sqlite_master --",
    ],
)
def test_injection_in_search_and_read_is_harmless(index: PassageIndex, attack: str) -> None:
    before = index.count()
    for k in (1, 5):
        assert len(index.search(attack + " city", k)) <= k
    assert index.read(attack) is None
    assert index.count() == before and index.integrity()


def test_read_by_id_or_title(corpus: Corpus, index: PassageIndex) -> None:
    passage = corpus.passages[5]
    assert index.read(passage.id) == passage
    assert index.read(passage.id.upper()) == passage
    assert index.read(f" {passage.title.lower()} ") == passage
    assert index.read("p999") is None


# --- Scores ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retrieved", "supporting", "recall", "precision"),
    [
        (set(), {"p1", "p2"}, 0.0, 0.0),
        ({"p1"}, {"p1", "p2"}, 0.5, 1.0),
        ({"p1", "p2"}, {"p1", "p2"}, 1.0, 1.0),
        ({"p1", "p2", "p3", "p4"}, {"p1", "p2"}, 1.0, 0.5),
        ({"p3", "p4", "p5"}, {"p1", "p2", "p6"}, 0.0, 0.0),
        ({"p1", "p3", "p4"}, {"p1", "p2", "p6"}, 1 / 3, 1 / 3),
    ],
)
def test_retrieval_recall_and_precision(
    retrieved: set[str], supporting: set[str], recall: float, precision: float
) -> None:
    scores = retrieval_scores(retrieved, supporting)
    assert (scores.recall, scores.precision) == pytest.approx((recall, precision))


FOUND, MISSED = Retrieval(recall=0.5, precision=0.5), Retrieval(recall=0.0, precision=0.0)


@pytest.mark.parametrize(
    ("kind", "answer", "retrieval", "expected"),
    [
        (RewardKind.F1, "Port Kelly", MISSED, 1.0),
        (RewardKind.F1, "the port kelly.", MISSED, 1.0),  # SQuAD normalisation
        (RewardKind.F1, "Kelly", MISSED, 2 / 3),
        (RewardKind.F1, "Port Kelly in Norway", MISSED, 2 / 3),
        (RewardKind.F1, "Oslo", FOUND, 0.0),
        (RewardKind.F1, None, FOUND, 0.0),
        (RewardKind.EM, "Port Kelly", MISSED, 1.0),
        (RewardKind.EM, "Kelly", FOUND, 0.0),
        (RewardKind.GATED, "Port Kelly", FOUND, 1.0),
        (RewardKind.GATED, "Kelly", FOUND, 2 / 3),
        (RewardKind.GATED, "Port Kelly", MISSED, 0.0),  # right, but nothing supporting retrieved
        (RewardKind.GATED, None, FOUND, 0.0),
    ],
)
def test_answer_rewards(
    kind: RewardKind, answer: str | None, retrieval: Retrieval, expected: float
) -> None:
    assert reward_score(kind, answer, "Port Kelly", retrieval) == pytest.approx(expected)


# --- Tools and answers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "rest", "shows"),
    [
        ("search", None, "Acme Inc headquarters", "passages found"),
        ("SEARCH", '{"query": ["Jane", "Doe"]}', None, "passages"),
        ("read", None, "[P001]", "[p001]"),
        ("read", '{"passage_id": "p001"}', None, "[p001]"),
        ("read", None, "TITLE", "[p005]"),
    ],
)
async def test_tools_in_both_protocols(
    corpus: Corpus,
    index: PassageIndex,
    name: str,
    arguments: str | None,
    rest: str | None,
    shows: str,
) -> None:
    rest = corpus.passages[4].title if rest == "TITLE" else rest
    observation, ran = await run_call(as_tools(corpus_tools(index, 3)), name, arguments, rest)
    assert ran == name.lower() and shows in observation


@pytest.mark.parametrize(
    ("name", "arguments", "rest", "message"),
    [
        ("search", None, "?!", "Error: search: give a few keywords"),
        ("search", None, "the of and", "Error: search: give a few keywords"),
        ("read", None, "p9999", "Error: read: no passage 'p9999'"),
        ("read", None, "nobody at all", "Error: read: no passage 'nobody at all'"),
        ("read", "{}", None, "Error: read: passage_id: Field required"),
        ("read", "{not json", None, "Error: read: arguments are not valid JSON"),
        (
            "answer",
            '{"answer": "x"}',
            None,
            "Error: unknown tool 'answer'; the tools are search, read",
        ),
    ],
)
async def test_failed_calls_are_one_line_errors(
    index: PassageIndex, name: str, arguments: str | None, rest: str | None, message: str
) -> None:
    observation, ran = await run_call(as_tools(corpus_tools(index, 3)), name, arguments, rest)
    assert ran is None and observation.startswith(message) and "\n" not in observation


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("ANSWER: Norway", Answer(text="Norway")),
        ("- answer： 'Port Kelly' | p012", Answer(text="Port Kelly")),
        ("ANSWER:\n\nNorway", Answer(text="Norway")),
        ("The answer is Norway.", Answer(text="Norway.", implicit=True)),
        ("I think\nPort Kelly", Answer(text="I think\nPort Kelly", implicit=True)),
        ("My answer:\nPort Kelly", Answer(text="Port Kelly", implicit=True)),
        ("  \n ", None),
        (None, None),
    ],
)
def test_final_replies_parse_into_answers(reply: str | None, expected: Answer | None) -> None:
    assert parse_answer(reply) == expected


def test_shown_ids_reads_tags_only() -> None:
    assert shown_ids(["[p001] A: x", "READ: p002", "[p003] B\ny [P4]"]) == {"p001", "p003"}


# --- Scripted episodes ----------------------------------------------------------------------------


def environment_for(
    difficulty: str = "medium", protocol: str = "text", reward: str = "f1"
) -> MultihopEnvironment:
    return make_environment(
        Options(difficulty=difficulty, tool_protocol=protocol, reward=reward, num_items=40)
    )


def first_item(environment: MultihopEnvironment, hops: int = 2) -> Item:
    return next(item for item in environment.load() if item.data["hops"] == hops)


def _searches_and_reads(environment: MultihopEnvironment, item: Item) -> list[Turn]:
    question = environment.questions[item.data["question_id"]]
    return [
        turn
        for hop in question.hops
        for turn in (f"SEARCH: {hop.question}", f"READ: {hop.passage_id}")
    ]


@pytest.mark.parametrize("hops", [2, 3])
async def test_text_episode_searches_reads_and_answers(hops: int) -> None:
    environment = environment_for("hard")
    item = first_item(environment, hops)
    policy = ScriptedPolicy([*_searches_and_reads(environment, item), f"ANSWER: {item.answer}"])
    trajectory = await environment.rollout(policy, item, SAMPLING)

    request = policy.requests[0]
    assert request["model"] == "policy@1" and request["logprobs"] is True
    assert "tools" not in request and trajectory.tools is None
    assert "SEARCH:" in request["messages"][0]["content"]
    assert "[p" not in request["messages"][1]["content"]  # nothing shown at this level
    assert len(choices(trajectory)) == 2 * hops + 1
    metrics = trajectory.metrics
    assert metrics["calls/search"] == metrics["calls/read"] == hops
    assert metrics["tool_errors"] == 0 and metrics["tool_calls"] == 2 * hops
    assert metrics[Metric.RECALL] == 1.0 and 0.0 < metrics[Metric.PRECISION] <= 1.0
    assert metrics[Metric.EXACT_MATCH] == metrics[Metric.F1] == 1.0
    assert trajectory.metadata["end"] == EpisodeEnd.REPLIED
    assert await environment.check(item, trajectory) == environment.reward(item, trajectory) == 1.0
    art.TrajectoryGroup([trajectory])  # a valid ART trajectory


async def test_tools_episode() -> None:
    environment = environment_for("medium", protocol="tools")
    item = first_item(environment)
    hop = environment.questions[item.data["question_id"]].hops[0]
    policy = ScriptedPolicy(
        [
            [("search", json.dumps({"query": hop.question}))],
            [("read", json.dumps({"passage_id": hop.passage_id}))],
            item.answer,
        ]
    )
    trajectory = await environment.rollout(policy, item, SAMPLING)
    schemas = [
        t.schema() for t in as_tools(corpus_tools(environment.index, environment.top_k)).values()
    ]
    assert trajectory.tools == schemas == policy.requests[0]["tools"]
    tool_messages = [m for m in trajectory.messages_and_choices if isinstance(m, dict)][2:]
    assert [m["role"] for m in tool_messages] == ["tool", "tool"]
    assert tool_messages[0]["tool_call_id"] == "call1-0"
    assert f"[{hop.passage_id}]" in tool_messages[1]["content"]
    expected = retrieval_scores(
        shown_ids(m["content"] for m in tool_messages), item.data["supporting_ids"]
    )
    assert expected.recall >= 0.5  # the first hop's passage, maybe more among the hits
    assert trajectory.metrics[Metric.RECALL] == expected.recall
    assert trajectory.metrics[Metric.PRECISION] == expected.precision
    assert await environment.check(item, trajectory) == 1.0


@pytest.mark.parametrize("turn", BAD_TURNS, ids=range(len(BAD_TURNS)))
async def test_garbled_calls_are_error_observations(turn: Turn) -> None:
    """The email tests' malformed turns (bad JSON, unknown tools, injections)."""
    environment = environment_for("medium", protocol="auto")
    item = first_item(environment)
    before = environment.index.count()
    trajectory = await environment.rollout(
        ScriptedPolicy([turn, "ANSWER: no idea"]), item, SAMPLING
    )
    observation = trajectory.messages_and_choices[3]
    assert isinstance(observation, dict) and observation["content"]
    assert len(choices(trajectory)) == 2  # the episode went on to the answer
    assert trajectory.metrics["tool_errors"] == observation["content"].startswith("Error:")
    assert trajectory.metrics[Metric.ANSWERED] == 1.0
    assert environment.index.count() == before and environment.index.integrity()


@pytest.mark.parametrize(
    "turn", ["SEARCH: ?!", "SEARCH: the of and", "READ: p9999", "READ: nobody at all"]
)
async def test_garbled_text_calls_are_errors(turn: str) -> None:
    environment = environment_for("medium")
    item = first_item(environment)
    trajectory = await environment.rollout(ScriptedPolicy([turn] * 9), item, SAMPLING)
    assert trajectory.metrics["tool_errors"] == environment.spec.max_turns
    assert trajectory.metrics["calls/search"] == trajectory.metrics["calls/read"] == 0
    assert trajectory.metadata["end"] == EpisodeEnd.TURN_LIMIT
    assert all(m["content"].startswith("Error:") for m in observations(trajectory))
    assert await environment.check(item, trajectory) == environment.reward(item, trajectory) == 0.0


def observations(trajectory: art.Trajectory) -> list[dict]:
    return [m for m in trajectory.messages()[2:] if m["role"] in ("user", "tool")]


async def test_turn_limit_nudges_then_ends() -> None:
    environment = environment_for("medium")
    item = first_item(environment)
    policy = ScriptedPolicy(["SEARCH: company"] * 20)
    trajectory = await environment.rollout(policy, item, SAMPLING)
    assert len(policy.requests) == environment.spec.max_turns == trajectory.metrics["turns"]
    assert "One turn left" in policy.requests[-1]["messages"][-1]["content"]
    assert trajectory.metrics["turn_limit"] == 1.0
    assert trajectory.metrics[Metric.ANSWERED] == 0.0


@pytest.mark.parametrize(("reward", "expected"), [("f1", 1.0), ("em", 1.0), ("gated", 0.0)])
async def test_gated_reward_needs_retrieval(reward: str, expected: float) -> None:
    """A right answer with no passage retrieved: f1 and em pay, gated does not; the check is EM."""
    environment = environment_for("medium", reward=reward)
    item = first_item(environment)
    trajectory = await environment.rollout(
        ScriptedPolicy([f"ANSWER: {item.answer}"]), item, SAMPLING
    )
    assert trajectory.metrics[Metric.RECALL] == trajectory.metrics[Metric.PRECISION] == 0.0
    assert environment.reward(item, trajectory) == expected
    assert await environment.check(item, trajectory) == 1.0


async def test_easy_level_shows_evidence_and_distractors() -> None:
    environment = environment_for("easy")
    item = first_item(environment)
    question = environment.questions[item.data["question_id"]]
    policy = ScriptedPolicy([f"The answer is {item.answer}."])
    trajectory = await environment.rollout(policy, item, SAMPLING)
    prompt = policy.requests[0]["messages"][1]["content"]
    shown = shown_ids([prompt])
    assert set(question.supporting_ids) <= shown
    assert shown - set(question.supporting_ids) == set(
        question.distractor_ids[: environment.distractors]
    )
    assert prompt.rstrip().endswith("ANSWER: your answer")
    assert environment.spec.max_turns == 2 and len(policy.requests) == 1
    metrics = trajectory.metrics
    assert metrics[Metric.IMPLICIT_ANSWER] == 1.0 and metrics[Metric.RECALL] == 1.0
    assert metrics[Metric.PRECISION] == pytest.approx(2 / len(shown))
    assert await environment.check(item, trajectory) == 1.0


async def test_stored_trajectories_rescore_the_same() -> None:
    """Reward and check read the trajectory's messages, so a stored (dict-only) copy scores the
    same as the live one."""
    environment = environment_for("medium", protocol="auto", reward="gated")
    item = first_item(environment)
    hop = environment.questions[item.data["question_id"]].hops[0]
    policy = ScriptedPolicy([f"SEARCH: {hop.question}", f"ANSWER: {item.answer}"])
    live = await environment.rollout(policy, item, SAMPLING)
    stored = art.Trajectory(messages_and_choices=live.messages(), metadata=live.metadata)
    assert environment.reward(item, stored) == environment.reward(item, live) == 1.0
    assert await environment.check(item, stored) == await environment.check(item, live) == 1.0


# --- The oracle (warm-start demonstrations) ------------------------------------------------------


@pytest.mark.parametrize(
    ("difficulty", "protocol"),
    [("easy", "text"), ("medium", "text"), ("medium", "tools"), ("hard", "auto"), ("hard", "text")],
)
async def test_oracle_solves_every_item_through_the_episode_loop(
    difficulty: str, protocol: str
) -> None:
    environment = environment_for(difficulty, protocol)
    items = environment.load()
    demos, rejected = await demonstrations(environment, items)
    assert rejected == 0 and len(demos) == len(items)
    for item, demo in zip(items, demos, strict=True):
        assert demo.metadata["policy"] == "scripted" and demo.reward == 1.0
        assert not choices(demo)  # plain messages: supervised targets, not samples
        metrics = demo.metrics
        assert demo.metadata["end"] == EpisodeEnd.REPLIED
        assert metrics["tool_errors"] == 0
        assert metrics[Metric.RECALL] == 1.0
        if difficulty != "easy":
            assert metrics["calls/search"] == metrics["calls/read"] == item.data["hops"]
            assert metrics["turns"] == 2 * item.data["hops"] + 1 <= environment.spec.max_turns


@pytest.mark.parametrize("difficulty", ["medium", "hard"])
async def test_demonstrations_within_the_default_budget_pass_and_read_what_they_were_shown(
    difficulty: str,
) -> None:
    """At the default observation budget every oracle demonstration passes the check, reads
    only passages a search showed it, and no passage as read was cut."""
    environment = environment_for(difficulty)
    assert environment.observation_tokens == OBSERVATION_TOKENS
    for item in environment.load():
        demo = await environment.demonstrate(item)
        assert await environment.check(item, demo) == 1.0
        messages = demo.messages()
        for n in range(2, len(messages) - 1, 2):
            call, shown = messages[n]["content"], messages[n + 1]["content"]
            if call.startswith("READ: "):
                before = " ".join(m["content"] for m in messages[3:n:2])
                assert f"[{call.removeprefix('READ: ')}]" in before
                assert "tokens cut]" not in shown
        assert demo.metrics["trimmed_observations"] >= 1  # the budget is on


async def test_every_item_shares_the_system_prompt_and_asks_in_the_user_message() -> None:
    environment = environment_for("medium")
    items = environment.load()[:10]
    openings = [(await environment.demonstrate(item)).messages()[:2] for item in items]
    assert len({system["content"] for system, _ in openings}) == 1
    for item, (system, user) in zip(items, openings, strict=True):
        assert item.prompt in user["content"] and item.prompt not in system["content"]


@pytest.mark.parametrize(
    ("title", "snippet", "shown"),
    [
        ("Davis Group", "Davis Group is a shipping company", "[p012] Davis Group is a shipping company"),
        ("Lisa Walters", "... born in Oslo", "[p012] Lisa Walters: ... born in Oslo"),
    ],
)  # fmt: skip
def test_a_hit_names_its_title_once(title: str, snippet: str, shown: str) -> None:
    assert show_hit(Hit(id="p012", title=title, snippet=snippet)) == shown


def test_oracle_answers_from_passage_text_not_the_label(corpus: Corpus) -> None:
    question = corpus.questions[0]
    altered = corpus.model_copy(
        update={
            "passages": tuple(
                p.model_copy(update={"text": p.text.replace(question.answer, "Atlantis")})
                if p.id == question.hops[-1].passage_id
                else p
                for p in corpus.passages
            )
        }
    )
    assert oracle.plan(question, altered, evidence_in_prompt=True) == [answer_line("Atlantis")]
    planned = oracle.plan(question, altered, evidence_in_prompt=False)
    assert all(isinstance(turn, Call) for turn in planned[:-1])


# --- The task -------------------------------------------------------------------------------------


def test_task_is_registered_with_defaults_and_options() -> None:
    default = resolve_task("multihop").build(task_config("multihop"))
    items = default.load()  # the hard level: 2- and 3-hop questions
    assert len(items) == 600 and {i.data["hops"] for i in items} == {2, 3}
    assert len({i.id for i in items}) == len(items)
    cfg = task_config("multihop", difficulty="medium", top_k="5", reward="gated", num_items="40")
    assert cfg.task_options["difficulty"] == "medium" and cfg.task_options["top_k"] == 5
    assert cfg.groups_per_batch == resolve_task("multihop").defaults["groups_per_batch"]
    environment = resolve_task("multihop").build(cfg)
    assert environment.default_scorer == "verifier" and environment.reward_kind is RewardKind.GATED
    assert len(environment.load()) == 40 and {i.data["hops"] for i in environment.load()} == {2}


@pytest.mark.parametrize(
    ("key", "value"), [("difficulty", "insane"), ("reward", "bleu"), ("top_k", "0")]
)
def test_bad_options_are_one_line_errors(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"option {key}") as raised:
        task_config("multihop", **{key: value})
    assert "\n" not in str(raised.value)


# --- The real model -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_rollout_on_real_model(tmp_path: Path) -> None:
    """SmolLM2-135M served by rlvr's LocalTorchBackend plays one real medium episode: the trajectory
    holds trainable Choices with logprobs, its observations and the retrieval metrics."""

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    environment = environment_for("medium")
    item = first_item(environment)
    trajectory = await real_rollout(
        environment, item, Sampling(temperature=1.0, max_tokens=24), tmp_path, "multihop-test"
    )
    sampled = choices(trajectory)
    assert sampled and all(isinstance(c, Choice) and c.logprobs is not None for c in sampled)
    assert trajectory.messages()[0]["role"] == "system"
    metrics = trajectory.metrics
    assert metrics["turns"] == len(sampled) <= environment.spec.max_turns
    assert 0.0 <= metrics[Metric.RECALL] <= 1.0 and 0.0 <= metrics[Metric.PRECISION] <= 1.0
    assert trajectory.metadata["end"] in set(EpisodeEnd)
    assert 0.0 <= await environment.check(item, trajectory) <= 1.0
    assert 0.0 <= environment.reward(item, trajectory) <= 1.0
    art.TrajectoryGroup([trajectory])

"""IFEval: every checker on a passing and a failing reply, strict vs loose, errors that never
raise, the levels, reward (partial credit) vs check (all followed), the rollout's metrics, and
one real-model rollout (slow)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import art
import pytest
from openai.types.chat.chat_completion import Choice

from rlvr.config import RunConfig
from rlvr.types import Item, Sampling
from scenarios.ifeval import Options, task
from scenarios.ifeval.checkers import (
    OWN,
    Instruction,
    evaluate,
    follows,
    reference_registry,
    sentences,
)
from scenarios.ifeval.environment import (
    LEVELS,
    NEVER_FOLLOWED,
    SHORT,
    IFEvalEnvironment,
    Level,
    Metric,
    in_level,
    load_items,
    rows,
)
from tests.helpers.scripted import ScriptedPolicy

ENGLISH = "the quick brown fox jumps over the lazy dog and then runs far away into the green forest"
GERMAN = "Das ist ein schöner Tag und ich gehe heute mit meinem Hund im Park spazieren."

# (instruction id, kwargs, a reply that follows it, a reply that does not)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("punctuation:no_comma", {}, "hello world", "hello, world"),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and *two*", "*one* only"),
    ("length_constraints:number_words", {"relation": "less than", "num_words": 5}, "one two three", "one two three four five six"),
    ("length_constraints:number_sentences", {"relation": "at least", "num_sentences": 2}, "Dr. Smith came. He sat down.", "Dr. Smith came to the U.S. office."),
    ("keywords:forbidden_words", {"forbidden_words": ["apple"]}, "I like pears and pineapples.", "I like Apple pie."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "A cat and a Cat.", "One cat."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "Say hi. Hi there!", "Hi there!"),
    ("startend:quotation", {}, '"All quoted."', "Not quoted."),
    ("change_case:english_lowercase", {}, ENGLISH, ENGLISH.capitalize()),
    ("keywords:existence", {"keywords": ["ocean", "blue"]}, "The blue ocean.", "The blue sky."),
    ("detectable_format:title", {}, "<<My Title>>\nSome text.", "My Title\nSome text."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "Zig zag.", "A zebra."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two", "* one\n* two\n* three"),
    ("language:response_language", {"language": "de"}, GERMAN, ENGLISH),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], see [address].", "Dear [name]."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "First part.\n***\nSecond part.", "First part.\n\nSecond part."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Done. Any other questions?", "Any other questions? Done."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\nP.S. See you.", "Hello. See you."),
    ("change_case:english_capital", {}, ENGLISH.upper(), ENGLISH),
    ("change_case:capital_word_frequency", {"capital_relation": "at least", "capital_frequency": 2}, "THIS is GREAT news.", "This is Great news."),
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", "Only one answer."),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', "{a: 1"),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2}, "Section 1\nfoo\nSection 2\nbar", "Section 1\nfoo"),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"}, "First part.\n\nThen more.", "First part.\n\nAfter that."),
    ("detectable_format:constrained_response", {}, "My answer is yes.", "Yes, definitely."),
]  # fmt: skip


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "passing", "failing"), CASES, ids=[c[0] for c in CASES]
)
def test_checker(instruction_id: str, kwargs: dict[str, Any], passing: str, failing: str) -> None:
    instruction = Instruction(id=instruction_id, kwargs=kwargs)
    assert follows(instruction, passing) is True
    assert follows(instruction, failing) is False
    assert follows(instruction, "   \n") is False  # strict IFEval: an empty reply follows nothing


def test_every_instruction_in_the_data_has_a_checker_and_a_case() -> None:
    used = {i for row in rows() for i in row["instruction_id_list"]}
    assert used <= set(OWN) | set(reference_registry())  # the two places `follows` looks
    assert used == {c[0] for c in CASES}
    assert set(SHORT) <= used and NEVER_FOLLOWED.issubset(SHORT)


@pytest.mark.parametrize(
    ("relation", "threshold", "text", "expected"),
    [
        ("less than", 2, "One sentence with Mr. Smith and Dr. Jones.", True),
        ("less than", 2, "One. Two.", False),
        ("at least", 3, "One! Two? Three.", True),
        ("at least", 3, "e.g. this is one sentence, i.e. only one.", False),
    ],
)
def test_number_sentences_without_punkt(
    relation: str, threshold: int, text: str, expected: bool
) -> None:
    instruction = Instruction(
        id="length_constraints:number_sentences",
        kwargs={"relation": relation, "num_sentences": threshold},
    )
    assert follows(instruction, text) is expected


def test_language_verdicts_are_deterministic() -> None:
    mixed = "Hallo mein friend, wie geht es you today"  # langdetect samples unless seeded
    for instruction in (
        Instruction(id="language:response_language", kwargs={"language": "de"}),
        Instruction(id="change_case:english_lowercase"),
    ):
        assert len({follows(instruction, mixed.lower()) for _ in range(20)}) == 1


def test_sentences_split_like_punkt() -> None:
    assert len(sentences("Dr. Smith arrived at 3 p.m. on Monday. He left.")) == 2


def test_loose_forgives_a_preamble_and_asterisks() -> None:
    quoted = [Instruction(id="startend:quotation")]
    result = evaluate('Sure, here it is:\n"All quoted."', quoted)
    assert result.strict == (False,) and result.loose == (True,)
    titled = [Instruction(id="startend:end_checker", kwargs={"end_phrase": "Bye."})]
    assert evaluate("Hello. **Bye.**", titled).loose == (True,)
    strict_only = evaluate("Hello. **Bye.**", titled, loose=False)
    assert strict_only.loose is None and strict_only.loose_fraction is None


def test_partial_credit_and_all_followed() -> None:
    instructions = [
        Instruction(id="punctuation:no_comma"),
        Instruction(id="change_case:english_lowercase"),
        Instruction(id="keywords:existence", kwargs={"keywords": ["forest"]}),
    ]
    partly = evaluate(ENGLISH.capitalize(), instructions)
    assert partly.strict == (True, False, True)
    assert partly.fraction == pytest.approx(2 / 3) and not partly.all_followed
    fully = evaluate(ENGLISH, instructions)
    assert fully.fraction == 1.0 and fully.all_followed and fully.all_followed_loose
    assert evaluate(ENGLISH, []).fraction == 0.0 and not evaluate(ENGLISH, []).all_followed


@pytest.mark.parametrize(
    "instruction",
    [
        Instruction(id="no:such_instruction"),
        Instruction(id="keywords:existence", kwargs={"nonsense": 1}),
        Instruction(
            id="length_constraints:number_sentences",
            kwargs={"relation": "about", "num_sentences": 2},
        ),
        Instruction(
            id="keywords:frequency", kwargs={"keyword": "(", "frequency": 1, "relation": "at least"}
        ),
    ],
)
def test_checker_errors_are_counted_never_raised(instruction: Instruction) -> None:
    result = evaluate(
        "Some reply. (With a bracket.)", [instruction, Instruction(id="punctuation:no_comma")]
    )
    assert result.strict == (False, True) and result.errors == 1


@pytest.mark.parametrize(
    "reply",
    [
        "",
        " ",
        "\x00\x01",
        "🤖" * 500,
        "<|im_end|>",
        "```json\n{",
        "*" * 1000,
        "\n" * 50,
        "P.S." * 300,
    ],
)
def test_garbage_replies_never_raise(reply: str) -> None:
    instructions = [Instruction(id=i, kwargs=kw) for i, kw, _, _ in CASES]
    result = evaluate(reply, instructions)
    assert len(result.strict) == len(CASES) and 0.0 <= result.fraction <= 1.0


# --- Items and levels -----------------------------------------------------------------------------


def test_levels() -> None:
    assert len(rows()) == 541
    sizes = {level: len(load_items(level, None)) for level in Level}
    assert sizes == {Level.EASY: 148, Level.MEDIUM: 216, Level.ALL: 541}
    every = load_items(Level.ALL, None)
    assert len({i.id for i in every}) == 541
    assert all(i.data["instructions"] and i.prompt for i in every)
    easy = load_items(Level.EASY, None)
    assert all(ins["id"] in LEVELS[Level.EASY] for i in easy for ins in i.data["instructions"])
    assert not any(ins["id"] in NEVER_FOLLOWED for i in easy for ins in i.data["instructions"])
    assert len(load_items(Level.EASY, 20)) == 20


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "levels"),
    [
        ("length_constraints:number_sentences", {"relation": "less than", "num_sentences": 3}, "em"),
        ("length_constraints:number_sentences", {"relation": "less than", "num_sentences": 10}, ""),
        ("length_constraints:number_sentences", {"relation": "at least", "num_sentences": 2}, "em"),
        ("length_constraints:number_sentences", {"relation": "at least", "num_sentences": 20}, ""),
        ("length_constraints:number_words", {"relation": "at least", "num_words": 300}, ""),
        ("keywords:letter_frequency", {"letter": "z", "let_frequency": 5, "let_relation": "less than"}, "em"),
        ("change_case:english_lowercase", {}, "m"),  # never followed by the 135M model
        ("language:response_language", {"language": "de"}, ""),
        ("detectable_format:json_format", {}, ""),
    ],
)  # fmt: skip
def test_levels_keep_what_a_short_reply_can_follow_or_fail(
    instruction_id: str, kwargs: dict[str, Any], levels: str
) -> None:
    instructions = [Instruction(id=instruction_id, kwargs=kwargs)]
    assert in_level(instructions, Level.EASY) is ("e" in levels)
    assert in_level(instructions, Level.MEDIUM) is ("m" in levels)
    assert in_level(instructions, Level.ALL)


def test_options_and_defaults() -> None:
    assert Options().difficulty == "easy" and Options().num_items is None
    cfg = RunConfig(task="ifeval", task_options={"difficulty": "all", "num_items": 30})
    environment = task.build(cfg)
    assert isinstance(environment, IFEvalEnvironment) and len(environment.load()) == 30
    assert 64 <= task.defaults["max_tokens"] <= 128


# --- The rollout ----------------------------------------------------------------------------------


def replying(reply: str | None) -> ScriptedPolicy:
    """The same reply to every request, cut at max_tokens (as a 96-token reply usually is)."""
    return ScriptedPolicy([], then=reply, finish_reason="length")


def _item_with(*ids: str) -> Item:
    return Item(
        id="ifeval-test",
        prompt="Describe a fox. Use only lowercase letters and no commas.",
        data={"instructions": [{"id": i, "kwargs": {}} for i in ids]},
    )


async def test_rollout_records_strict_and_loose_metrics() -> None:
    environment = IFEvalEnvironment(Level.MEDIUM, None)
    item = _item_with("punctuation:no_comma", "change_case:english_lowercase")
    sampling = Sampling(max_tokens=96, temperature=1.0)
    trajectory = await environment.rollout(replying("Hello there, friend"), item, sampling)
    metrics = trajectory.metrics
    assert metrics[Metric.INSTRUCTION_FRACTION] == 0.0 == environment.reward(item, trajectory)
    assert metrics[Metric.ALL_FOLLOWED] == 0.0 == await environment.check(item, trajectory)
    assert metrics[Metric.INSTRUCTIONS] == 2 and metrics[Metric.CHECKER_ERRORS] == 0.0
    assert metrics["truncated"] is True

    trajectory = await environment.rollout(replying(f"{ENGLISH}, yes"), item, sampling)
    assert (
        environment.reward(item, trajectory)
        == 0.5
        == trajectory.metrics[Metric.INSTRUCTION_FRACTION]
    )
    assert await environment.check(item, trajectory) == 0.0
    assert trajectory.metadata["followed"] == "change_case:english_lowercase"

    quoted = _item_with("punctuation:no_comma", "startend:quotation")
    reply = f'Sure here it is:\n"{ENGLISH}"'
    trajectory = await environment.rollout(replying(reply), quoted, sampling)
    assert trajectory.metrics[Metric.INSTRUCTION_FRACTION] == 0.5  # the preamble breaks the quote
    assert trajectory.metrics[Metric.INSTRUCTION_FRACTION_LOOSE] == 1.0  # loose drops line 1
    assert trajectory.metrics[Metric.ALL_FOLLOWED_LOOSE] == 1.0

    policy = replying(ENGLISH)
    trajectory = await environment.rollout(policy, item, sampling)
    assert environment.reward(item, trajectory) == 1.0 == await environment.check(item, trajectory)
    assert policy.requests[0]["messages"][1]["content"] == item.prompt
    assert policy.requests[0]["logprobs"] is True
    art.TrajectoryGroup([trajectory])


@pytest.mark.parametrize("reply", [None, "", "\n\n"])
async def test_empty_reply_scores_zero(reply: str | None) -> None:
    environment = IFEvalEnvironment(Level.EASY, None)
    item = _item_with("punctuation:no_comma")
    trajectory = await environment.rollout(replying(reply), item, Sampling())
    assert environment.reward(item, trajectory) == 0.0
    assert trajectory.metrics[Metric.EMPTY_REPLY] == 1.0


# --- The real model -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_rollout_on_real_model(tmp_path: Path) -> None:
    """SmolLM2-135M served by rlvr's LocalTorchBackend answers two IFEval prompts: each trajectory is
    one trainable Choice with logprobs, its metrics agree with the reward and the check."""
    from rlvr.engine.backend import LocalTorchBackend
    from rlvr.engine.models import resolve_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    environment = IFEvalEnvironment(Level.EASY, None)
    items = environment.load()[:2]
    model = art.TrainableModel(
        name="ifeval-test",
        project="rlvr-tests",
        base_model=str(resolve_model("smollm2-135m")),
        base_path=str(tmp_path),
    )
    backend = LocalTorchBackend(path=str(tmp_path))
    try:
        await model.register(backend)
        sampling = Sampling(temperature=1.0, max_tokens=48)
        trajectories = [await environment.rollout(model, item, sampling) for item in items]
    finally:
        await backend.close()
    for item, trajectory in zip(items, trajectories, strict=True):
        sampled = [m for m in trajectory.messages_and_choices if isinstance(m, Choice)]
        assert len(sampled) == 1 and sampled[0].logprobs is not None
        assert [m["role"] for m in trajectory.messages()] == ["system", "user", "assistant"]
        reward = environment.reward(item, trajectory)
        assert reward == trajectory.metrics[Metric.INSTRUCTION_FRACTION]
        assert await environment.check(item, trajectory) == trajectory.metrics[Metric.ALL_FOLLOWED]
        assert trajectory.metrics[Metric.CHECKER_ERRORS] == 0.0
        art.TrajectoryGroup([trajectory])

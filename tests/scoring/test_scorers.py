import art
import pytest
from openai.types.chat import ChatCompletionMessage, ChatCompletionTokenLogprob
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs

from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import M, agreement, group_stats, has_signal, is_looping, repeat_share
from rlvr.scoring.scorers import GatedScorer, LengthScorer, VerifierScorer, WeightedScorer
from rlvr.scoring.verifiers import contains_answer
from rlvr.task_api.plugins import make_scorer
from rlvr.types import Item, completion_text
from scenarios.math import MathEnvironment

ITEM = Item(id="q1", prompt="Calculate 7 + 5.", answer="12")


def group(*replies: str) -> art.TrajectoryGroup:
    return art.TrajectoryGroup(
        art.Trajectory(
            messages_and_choices=[
                {"role": "user", "content": ITEM.prompt},
                {"role": "assistant", "content": r},
            ],
            reward=0.0,
        )
        for r in replies
    )


def verifier() -> VerifierScorer:
    return VerifierScorer(lambda item, t: contains_answer(completion_text(t), item.answer))


async def test_verifier_scorer_rewards_and_does_not_mutate():
    g = group("12", "It is 12? no, 13", "no idea")
    scored = await verifier().score(g, ITEM)
    assert [t.reward for t in scored.trajectories] == [1.0, 0.5, 0.0]
    assert [t.reward for t in g.trajectories] == [0.0, 0.0, 0.0]


async def test_verifier_errors_are_zero_and_counted():
    def broken(item, t):
        if "boom" in completion_text(t):
            raise RuntimeError("bad reward")
        return float("nan") if "nan" in completion_text(t) else 1.0

    scorer = VerifierScorer(broken)
    scored = await scorer.score(group("boom", "nan", "fine"), ITEM)
    assert [t.reward for t in scored.trajectories] == [0.0, 0.0, 1.0]
    assert [t.metrics["reward_error"] for t in scored.trajectories] == [1, 1, 0]
    assert scorer.pop_metrics()[M.REWARD_ERRORS] == 2
    assert scorer.pop_metrics()[M.REWARD_ERRORS] == 0  # popped counters reset


async def test_length_scorer_rewards_length():
    scored = await LengthScorer(full_length=10).score(group("12", "12345678901234"), ITEM)
    assert [t.reward for t in scored.trajectories] == [0.2, 1.0]


async def test_weighted_sum_keeps_parts():
    scorer = WeightedScorer([(verifier(), 3.0), (LengthScorer(full_length=2), 1.0)])
    scored = await scorer.score(group("12", "no"), ITEM)
    assert [t.reward for t in scored.trajectories] == [pytest.approx(1.0), pytest.approx(0.25)]
    assert scored.trajectories[1].metrics["reward/verifier"] == 0.0
    assert scored.trajectories[1].metrics["reward/length"] == 1.0


async def test_gated_counts_b_only_where_a_passes():
    scorer = GatedScorer(verifier(), LengthScorer(full_length=100))
    scored = await scorer.score(group("12" + " " * 48, "x" * 100), ITEM)
    assert [t.reward for t in scored.trajectories] == [0.5, 0.0]


class _Failing:
    name = "failing"

    async def score(self, group, item):
        return None

    def pop_metrics(self):
        return {}


async def test_composites_skip_when_a_part_cannot_score():
    assert (
        await WeightedScorer([(verifier(), 1.0), (_Failing(), 1.0)]).score(group("12", "1"), ITEM)
        is None
    )
    assert await GatedScorer(verifier(), _Failing()).score(group("12", "1"), ITEM) is None


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("verifier", "verifier"),
        ("length", "length"),
        ("verifier+length", "verifier+length"),
        ("verifier*0.3+length*0.7", "verifier+length"),
        ("verifier>length", "verifier>length"),
        ("default", "verifier"),
    ],
)
def test_scorer_specs(spec, name):
    assert make_scorer(RunConfig(scorer=spec), MathEnvironment("easy", 10, 0)).name == name


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vibes", "unknown scorer 'vibes'"),
        ("ruler", "needs a judge"),
        ("verifier*x", "not a number"),
    ],
)
def test_bad_scorer_specs(spec, message):
    with pytest.raises(ConfigError, match=message):
        make_scorer(RunConfig(scorer=spec), MathEnvironment("easy", 10, 0), judge=None)


def test_group_stats_no_signal_breakdown():
    def g(*rewards):
        return art.TrajectoryGroup(
            art.Trajectory(messages_and_choices=[], reward=r) for r in rewards
        )

    stats = group_stats([g(0, 0, 0), g(1, 1), g(0, 1), g(0.5, 0.5)])
    assert (stats.groups, stats.no_signal, stats.all_zero, stats.all_one) == (4, 3, 1, 1)
    assert stats.no_signal_rate == 0.75
    assert not has_signal(g(1)) and has_signal(g(0, 0.1))


PROSE = "The roadmap meeting with Rebecca Wall takes place at the main office on Monday at ten"


@pytest.mark.parametrize(
    ("tokens", "share"),
    [
        ([], 0.0),
        (["a", "b", "c"], 0.0),  # shorter than one 4-gram
        (PROSE.split(), 0.0),
        (["e.g."] * 11, 7 / 8),  # 8 4-grams, one distinct
        (["READ:", "ecommerce", "|", "ecommerce", "|", "ecommerce", "|", "ecommerce"], 2 / 5),
    ],
)
def test_repeat_share(tokens, share):
    assert repeat_share(tokens) == pytest.approx(share)


def sampled(text: str, finish_reason: str, tokens: list[str] | None = None) -> Choice:
    logprobs = (
        ChoiceLogprobs(
            content=[
                ChatCompletionTokenLogprob(token=t, logprob=-1.0, top_logprobs=[]) for t in tokens
            ]
        )
        if tokens is not None
        else None
    )
    message = ChatCompletionMessage(role="assistant", content=text)
    return Choice(index=0, finish_reason=finish_reason, message=message, logprobs=logprobs)  # type: ignore[arg-type]


LOOP = "SEARCH: invoice | email id | email id | email id | email id | email id | email id"


@pytest.mark.parametrize(
    ("turns", "looping"),
    [
        ([sampled(LOOP, "length")], True),  # words, where the turn came without logprobs
        ([sampled("x", "length", tokens=["e", "-"] * 20)], True),  # the sampled tokens count
        ([sampled(LOOP, "stop")], False),  # a turn that ended on its own is not cut
        ([sampled(PROSE, "length")], False),  # cut short, not a loop
        ([sampled(PROSE, "stop"), sampled(LOOP, "length")], True),
    ],
)
def test_a_loop_is_a_cut_turn_repeating_itself(turns, looping):
    trajectory = art.Trajectory(
        messages_and_choices=[{"role": "user", "content": "q"}, *turns], reward=0.0
    )
    assert is_looping(trajectory) is looping
    stats = group_stats(
        [art.TrajectoryGroup([trajectory, art.Trajectory(messages_and_choices=[], reward=1.0)])]
    )
    assert stats.looping_rate == (0.5 if looping else 0.0)
    assert stats.truncated_rate == 0.5 * any(t.finish_reason == "length" for t in turns)


@pytest.mark.parametrize(
    ("judge", "truth", "expected"),
    [
        ([0.1, 0.5, 0.9], [0, 0.5, 1], 1.0),
        ([0.9, 0.5, 0.1], [0, 0.5, 1], -1.0),
        ([1, 1, 1], [0, 1, 0], None),
        ([0.1, 0.2], [0, 1], None),
    ],
)
def test_agreement(judge, truth, expected):
    assert agreement(judge, truth) == (pytest.approx(expected) if expected is not None else None)

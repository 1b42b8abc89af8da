"""Warm-start packing closes every demonstrated reply with the end-of-turn token: ART's assistant
mask covers a reply's content only, and a model fine-tuned without the end token never stops."""

import art
import pytest

from rlvr.engine.models import DEFAULT_MODEL, resolve_model


@pytest.mark.parametrize(
    ("mask", "ids", "expected"),
    [
        ([0, 1, 1, 0, 0], [5, 6, 7, 2, 9], [0, 1, 1, 1, 0]),  # the end token after a span
        ([0, 1, 1, 0], [5, 6, 7, 8], [0, 1, 1, 0]),  # no end token: unchanged
        ([0, 1, 0, 0, 1, 0], [5, 6, 2, 2, 7, 2], [0, 1, 1, 0, 1, 1]),  # each span, once
    ],
)
def test_demonstrations_train_the_end_of_turn_token(mask, ids, expected) -> None:
    from rlvr.engine.backend import with_end_of_turn

    assert with_end_of_turn(mask, ids, [2]) == expected


@pytest.mark.slow  # the real tokenizer (converted from the GGUF once per machine)
def test_a_demonstration_ending_on_its_reply_gets_the_end_token() -> None:
    """ART leaves the last message open (continue_final_message); packing closes and trains it."""
    from transformers import AutoTokenizer

    from rlvr.engine.backend import end_of_turn_ids, pack_demonstrations

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    demo = art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "first"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "last"},
        ],
        reward=1.0,
    )
    packed = pack_demonstrations(tokenizer, [demo])
    ids, mask = packed["tokens"][0].tolist(), packed["assistant_mask"][0].tolist()
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    end = tokenizer.decode(end_of_turn_ids(tokenizer)[:1])
    assert trained == f"first{end}last{end}"

"""`rlvr export` and `rlvr serve`: a run's trained agent out of its run directory.

Fast: which checkpoint a name resolves to (rlvr.runs.checkpoints), the model card, the serve key,
and every refusal before a model is loaded (one line, exit 2, nothing written). Slow, on the shared
`tiny_run` (read-only: what writes goes to a copy): the export loads in plain transformers, its
weights are the base plus the adapter's LoRA, its greedy answers are `rlvr eval`'s and `rlvr
serve`'s on the same checkpoint, the GGUF loads in transformers' GGUF reader, and `rlvr serve`
answers the official openai client with the bearer key and refuses without it. The export checks
itself: weights corrupted between the merge and the check (the `tamper` seam), or the base
model's weights shipped unchanged, stop it in one line with nothing written.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import RunConfig
from rlvr.export import CardFacts, ExportError, SplitSizes, export_run, model_card
from rlvr.export_check import Verification, held_out_prompts
from rlvr.runs import store
from rlvr.runs.checkpoints import NoCheckpoint, checkpoint_for
from rlvr.runs.report import story_lines
from rlvr.runs.store import read_metrics, read_summary
from rlvr.serve import KEY_ENV, Endpoint, serve_key
from tests.helpers import warm
from tests.helpers.tiny_runs import TINY_RUN, TinyRun

runner = CliRunner()
FP32 = {"RLVR_PRECISION": "fp32"}  # the engine's answers computed as plain transformers computes


def fake_adapter(folder: Path) -> Path:
    """A directory with an adapter's two file names (for the resolution rules only)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


@pytest.fixture
def layout_run(tmp_path: Path) -> Path:
    """A run directory's checkpoint layout: best, steps 1 and 3, and an incomplete step 4."""
    run = tmp_path / "math-run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(RunConfig(task="math").public_dict()))
    for name in ("best", "step-0001", "step-0003"):
        fake_adapter(run / "checkpoints" / name)
    (run / "checkpoints" / "step-0004").mkdir()
    return run


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        ("best", "best"),
        ("last", "step-0003"),
        ("1", "step-0001"),
        ("step-0003", "step-0003"),
        (" LAST ", "step-0003"),
    ],
)
def test_checkpoint_for_names(layout_run: Path, which: str, expected: str) -> None:
    assert checkpoint_for(layout_run, which) == layout_run / "checkpoints" / expected


@pytest.mark.parametrize(
    ("which", "said"),
    [
        ("7", "no checkpoint '7' (available: best, last, 1, 3)"),
        ("4", "step-0004: incomplete checkpoint, no adapter_config.json"),
        ("newest", "checkpoint 'newest': expected best, last or a step number"),
    ],
)
def test_checkpoint_for_refuses(layout_run: Path, which: str, said: str) -> None:
    with pytest.raises(NoCheckpoint) as raised:
        checkpoint_for(layout_run, which)
    assert said in str(raised.value)
    assert "\n" not in str(raised.value)


def test_checkpoint_for_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(NoCheckpoint, match="not a run directory"):
        checkpoint_for(tmp_path, "best")


def test_last_without_step_checkpoints(layout_run: Path) -> None:
    for name in ("step-0001", "step-0003", "step-0004"):
        shutil.rmtree(layout_run / "checkpoints" / name)
    with pytest.raises(NoCheckpoint, match="no saved step checkpoint"):
        checkpoint_for(layout_run, "last")


def card_facts(**changes: Any) -> CardFacts:
    facts = CardFacts(
        run="math-run",
        task="math",
        base_model="smollm2-135m",
        checkpoint="best (step 2)",
        splits=SplitSizes(train=32, val=4, test=4),
        story=("gain, best - start: +0.250 [+0.000, +0.500] on 4 test items (p=0.5)",),
        finished=True,
        config_json='{"task": "math"}',
        commit="unknown",
        rlvr_version="0.1.0",
        gguf_file=None,
    )
    return facts.model_copy(update=changes)


def test_model_card_says_the_run() -> None:
    card = model_card(card_facts())
    assert card.startswith("---\nlibrary_name: transformers\n")
    for expected in (
        "task **math**",
        "checkpoint **best (step 2)**",
        "32 training items, 4 validation items,\n4 test items",
        "- gain, best - start: +0.250 [+0.000, +0.500] on 4 test items (p=0.5)",
        "- code commit: unknown",
        '{"task": "math"}',
        "convert_hf_to_gguf.py",  # no GGUF: how to make one
    ):
        assert expected in card, expected


def test_model_card_of_an_unfinished_run_with_gguf() -> None:
    card = model_card(
        card_facts(
            story=(),
            finished=False,
            gguf_file="m-f16.gguf",
            splits=SplitSizes(train=None, val=None, test=None),
        )
    )
    assert "the run has not finished: it has no test result yet" in card
    assert "unknown training items" in card
    assert "`m-f16.gguf` (f16)" in card and "convert_hf_to_gguf.py" not in card


def test_model_card_says_how_the_export_was_checked() -> None:
    checked = Verification(
        skipped=False,
        table="trajectories/test.parquet",
        items=("a", "b"),
        agreed=2,
        max_tokens=16,
    )
    card = model_card(card_facts(verification=checked))
    assert "## Verification" in card
    for expected in ("`trajectories/test.parquet`: items `a`, `b`", "2 of 2 answers", "fp32"):
        assert expected in " ".join(card.split()), expected
    skipped = model_card(card_facts(verification=Verification(skipped=True)))
    assert "`--no-verify`: nothing checked" in " ".join(skipped.split())


def rollout_row(item_id: str, messages: list[dict[str, Any]]) -> store.TableRow:
    return {
        "step": 0,
        "split": "test",
        "item_id": item_id,
        "group": 0,
        "index": 0,
        "reward": 1.0,
        "independent_reward": None,
        "messages": json.dumps(messages),
        "tools": None,
        "metrics": "{}",
        "metadata": "{}",
        "logs": "[]",
    }


def test_held_out_prompts_are_the_messages_before_the_first_answer(layout_run: Path) -> None:
    turns = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
    ]
    rows = [rollout_row(f"item-{i}", turns) for i in (3, 1, 2, 1)]
    store.write_trajectories(layout_run, "val-0002", rows[:1])
    store.write_trajectories(layout_run, "test", rows)
    table, prompts = held_out_prompts(layout_run, 2)
    assert table == "trajectories/test.parquet"  # the final test table before validations
    assert [p.item_id for p in prompts] == ["item-1", "item-2"]
    assert prompts[0].chat() == turns[:2]


def test_no_held_out_rollouts_is_one_line(layout_run: Path) -> None:
    with pytest.raises(ExportError) as raised:
        held_out_prompts(layout_run, 5)
    said = str(raised.value)
    assert "no held-out rollouts" in said and "--no-verify" in said and "\n" not in said


@pytest.mark.parametrize(("env", "from_env"), [({KEY_ENV: "my-own-key-123"}, True), ({}, False)])
def test_serve_key(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], from_env: bool) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    key, said = serve_key()
    assert said is from_env
    assert key == env.get(KEY_ENV, key) and len(key) >= 14
    lines = "\n".join(Endpoint(base_url="http://h/v1", model="m", key_from_env=said).lines(key))
    assert (key in lines) is not from_env  # a key the user set is never printed


def refusal(tmp_path: Path, layout_run: Path, case: str) -> tuple[list[str], str]:
    """(the command's arguments, what its one line must say) for each bad input."""
    out = tmp_path / "export"
    if case == "not-a-run":
        return ["export", str(tmp_path / "nothing"), "--out", str(out)], "not a run directory"
    if case == "no-such-checkpoint":
        args = ["export", str(layout_run), "--checkpoint", "9", "--out", str(out)]
        return args, "no checkpoint '9'"
    if case == "out-not-empty":
        out.mkdir()
        (out / "mine.txt").write_text("keep me")
        return ["export", str(layout_run), "--out", str(out)], "exists and is not empty"
    if case == "out-is-a-file":
        out.write_text("keep me")
        return ["export", str(layout_run), "--out", str(out)], "exists and is not a directory"
    if case == "damaged-config":
        (layout_run / "config.json").write_text('{"task": ')
        return ["export", str(layout_run), "--out", str(out)], "config.json: "
    if case == "serve-not-a-run":
        return ["serve", str(tmp_path / "nothing"), "--port", "0"], "not a run directory"
    if case == "serve-no-such-checkpoint":
        return ["serve", str(layout_run), "--checkpoint", "last2"], "checkpoint 'last2'"
    raise AssertionError(case)


CASES = [
    "not-a-run",
    "no-such-checkpoint",
    "out-not-empty",
    "out-is-a-file",
    "damaged-config",
    "serve-not-a-run",
    "serve-no-such-checkpoint",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, layout_run: Path, case: str
) -> None:
    args, said = refusal(tmp_path, layout_run, case)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and said in lines[0], result.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # untouched


# ------------------------------------------------------------------ the real run (slow)


def greedy_completions(
    model_dir: Path, prompts: list[list[dict[str, Any]]], max_tokens: int
) -> list[str]:
    """Plain transformers: each prompt through the exported chat template, greedy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    answers = []
    with torch.no_grad():
        for messages in prompts:
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False)
            answers.append(
                tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
            )
    return answers


def rollouts(table: Path) -> list[tuple[list[dict[str, Any]], str]]:
    """(prompt messages, the completion) of each rollout of a trajectory table."""
    import polars as pl

    pairs = []
    for row in pl.read_parquet(table).sort("item_id").iter_rows(named=True):
        messages = json.loads(row["messages"])
        prompt = [{"role": m["role"], "content": m["content"]} for m in messages[:-1]]
        pairs.append((prompt, messages[-1]["content"] or ""))
    return pairs


@pytest.fixture(scope="module")
def run_copy(tiny_run: TinyRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared run that commands may write into (`rlvr eval` writes its table)."""
    copy = tmp_path_factory.mktemp("export-run") / tiny_run.run_dir.name
    shutil.copytree(tiny_run.run_dir, copy)
    return copy


@pytest.fixture(scope="module")
def exported_best(run_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "best"
    done = warm.rlvr("export", str(run_copy), "--out", str(out), timeout_s=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {out}" in done.stdout
    return out


@pytest.fixture(scope="module")
def exported_last(run_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "last"
    args = ("export", str(run_copy), "--checkpoint", "last", "--no-verify", "--out", str(out))
    done = warm.rlvr(*args, timeout_s=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


# The smallest run of the real model: --gguf writes the GGUF its base was converted from, so the
# shared tiny run (a model directory, not a converted GGUF) cannot take it.
SMOLLM_STEP = {
    "difficulty": "easy",
    "num_items": 20,
    "group_size": 2,
    "groups_per_batch": 1,
    "max_steps": 1,
    "max_tokens": 8,
    "judge": "none",
    "scorer": "length",
    "preflight": "false",
    "draw.max_refill": 0,
}


@pytest.fixture(scope="module")
def exported_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.tiny_runs import cli, only_run

    runs = tmp_path_factory.mktemp("smollm-runs")
    cli("train", "math", *(f"{k}={v}" for k, v in SMOLLM_STEP.items()), f"runs_root={runs}")
    out = tmp_path_factory.mktemp("exports") / "gguf"
    args = ("export", str(only_run(runs)), "--checkpoint", "last", "--gguf", "--no-verify")
    done = warm.rlvr(*args, "--out", str(out), timeout_s=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_export_is_a_plain_transformers_model(exported_best: Path, run_copy: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(exported_best)
    tokenizer = AutoTokenizer.from_pretrained(exported_best)
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json"):
        assert (exported_best / name).is_file(), name
    adapter = json.loads((exported_best / "adapter" / "adapter_config.json").read_text())
    # the run's model as its config names it (an alias stays an alias, not a path of this machine)
    assert (
        adapter["base_model_name_or_path"]
        == json.loads((run_copy / "config.json").read_text())["model"]
    )
    assert (exported_best / "adapter" / "adapter_model.safetensors").is_file()
    card = (exported_best / "README.md").read_text()
    summary = json.loads((run_copy / "summary.json").read_text())
    assert f"checkpoint **best (step {summary['best_step']})**" in card
    for line in story_lines(
        read_metrics(run_copy), read_summary(run_copy)
    ):  # the paired test result and more
        assert f"- {line}" in card, line
    assert "gain, best - start:" in card
    tested = read_summary(run_copy).test
    assert tested is not None
    checked = f"{tested.items} of {tested.items} answers were identical"
    assert checked in " ".join(card.split())  # verified by default, on the run's test items
    assert [p.name for p in exported_best.parent.iterdir()] == ["best"]  # no temporaries


@pytest.mark.slow
def test_merged_weights_are_the_base_plus_the_lora(exported_last: Path, run_copy: Path) -> None:
    """Every targeted projection is W + (alpha / r) B A of the checkpoint; the rest is the base."""
    import torch
    from safetensors.torch import load_file

    from rlvr.engine.models import resolve_model

    checkpoint = checkpoint_for(run_copy, "last")
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    lora = load_file(str(checkpoint / "adapter_model.safetensors"))
    base = load_file(str(resolve_model(TINY_RUN["model"]) / "model.safetensors"))
    merged = load_file(str(exported_last / "model.safetensors"))
    scale = config["lora_alpha"] / config["r"]
    targeted = 0
    for name, weight in base.items():
        stem = name.removesuffix(".weight")
        a = lora.get(f"base_model.model.{stem}.lora_A.weight")
        if a is None:
            assert torch.equal(merged[name], weight), name
            continue
        b = lora[f"base_model.model.{stem}.lora_B.weight"]
        torch.testing.assert_close(merged[name], weight + scale * b @ a, rtol=0, atol=1e-6)
        targeted += 1
    layers = json.loads((exported_last / "config.json").read_text())["num_hidden_layers"]
    assert targeted == layers * len(config["target_modules"])


@pytest.mark.slow
def test_greedy_answers_match_rlvr_eval(exported_best: Path, run_copy: Path) -> None:
    """The same test prompts, greedy, the same max_tokens: plain transformers on the export says
    what `rlvr eval` (rlvr's engine on the same checkpoint) said."""
    done = warm.rlvr("eval", str(run_copy), env=FP32, timeout_s=900)
    assert done.returncode == 0, done.stderr[-3000:]
    pairs = rollouts(run_copy / "trajectories" / "eval-test.parquet")[:5]
    assert pairs
    max_tokens = json.loads((run_copy / "config.json").read_text())["max_tokens"]
    answers = greedy_completions(exported_best, [p for p, _ in pairs], max_tokens)
    assert answers == [completion for _, completion in pairs]


def add_noise(folder: Path) -> None:
    """Corrupt the merged weights as a faulty merge would: seeded noise on every layer's query
    projection (one layer's alone left a few short greedy answers unchanged, on some seeds)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    weights = load_file(str(path))
    noise = torch.Generator().manual_seed(0)
    for name in [n for n in weights if n.endswith("self_attn.q_proj.weight")]:
        weight = weights[name]
        weights[name] = weight + torch.randn(weight.shape, generator=noise).to(weight.dtype)
    save_file(weights, str(path), metadata={"format": "pt"})


def ship_the_base(folder: Path) -> None:
    """The base model's weights where the merged ones should be."""
    from rlvr.engine.models import resolve_model

    shutil.copyfile(
        resolve_model(TINY_RUN["model"]) / "model.safetensors", folder / "model.safetensors"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (add_noise, "the merged weights are wrong"),
        (ship_the_base, "the merged weights are identical to the base model"),
    ],
)
def test_an_export_that_fails_its_check_writes_nothing(
    run_copy: Path, tmp_path: Path, tamper: Any, said: str
) -> None:
    out = tmp_path / "export"
    with pytest.raises(ExportError) as raised:
        export_run(run_copy, out, "last", verify_items=2, tamper=tamper)
    line = str(raised.value)
    assert said in line and "\n" not in line, line
    if tamper is add_noise:  # the first item that differs, both answers
        assert "item " in line and "the export answers" in line and "engine on" in line
    assert list(tmp_path.iterdir()) == []  # nothing under OUT, no temporary beside it


@pytest.mark.slow
@pytest.mark.full
def test_gguf_loads_in_transformers(exported_gguf: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    [gguf] = exported_gguf.glob("*.gguf")
    card = (exported_gguf / "README.md").read_text()
    assert "`" + gguf.name + "` (f16)" in card
    assert "`--no-verify`: nothing checked" in " ".join(card.split())
    tokenizer = AutoTokenizer.from_pretrained(exported_gguf)
    merged = AutoModelForCausalLM.from_pretrained(exported_gguf)
    from_gguf = AutoModelForCausalLM.from_pretrained(
        exported_gguf, gguf_file=gguf.name, dtype=torch.float32
    )
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 17+25? Answer with only the number."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        expected, got = merged(**ids).logits, from_gguf(**ids).logits
    # f16 matrices: logits of ~40 within a few hundredths, the same next token everywhere.
    assert (expected - got).abs().max().item() < 0.25
    assert torch.equal(expected.argmax(-1), got.argmax(-1))


@pytest.mark.slow
def test_serve_answers_the_openai_client(exported_last: Path, run_copy: Path) -> None:
    """`rlvr serve` on the last checkpoint: the official client with the printed key gets the
    export's greedy answers; without the key, or naming another model, it is refused."""
    import openai

    pairs = rollouts(run_copy / "trajectories" / "test.parquet")[:5]  # the test prompts
    prompts: list[Any] = [p for p, _ in pairs]  # the client's message types, as JSON
    max_tokens = json.loads((run_copy / "config.json").read_text())["max_tokens"]
    served = warm.start(
        "rlvr.cli.main",
        "serve",
        str(run_copy),
        "--checkpoint",
        "last",
        "--port",
        "0",
        env=FP32,
        unset=[KEY_ENV],
    )
    try:
        said = dict(
            line.split(":", 1) for line in (served.readline(600).strip() for _ in range(4)) if line
        )
        url, model, key = said["url"].strip(), said["model"].strip(), said["key"].split()[0]
        assert url.startswith("http://127.0.0.1:") and model == run_copy.name
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        answers = [
            client.chat.completions.create(
                model=model,
                messages=messages,
                temperature=0,
                max_tokens=max_tokens,
            )
            .choices[0]
            .message.content
            for messages in prompts
        ]
        assert answers == greedy_completions(exported_last, prompts, max_tokens)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=url, api_key="not-the-key", max_retries=0
            ).chat.completions.create(
                model=model,
                messages=prompts[0],
            )
        with pytest.raises(openai.NotFoundError, match="this server serves"):
            client.chat.completions.create(model="other", messages=prompts[0])
        served.send_signal(signal.SIGINT)
        assert served.wait(60) == 0
    finally:
        served.close()


@pytest.mark.slow
def test_a_damaged_adapter_is_one_line(run_copy: Path, tmp_path: Path) -> None:
    """A truncated adapter (in a copy of the run: the shared one stays whole) is named, exit 2,
    and no export is left behind."""
    damaged = tmp_path / run_copy.name
    shutil.copytree(run_copy, damaged, ignore=shutil.ignore_patterns(".art", "trajectories"))
    weights = damaged / "checkpoints" / "best" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    out = tmp_path / "export"
    result = runner.invoke(app, ["export", str(damaged), "--out", str(out)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert f"{weights}: cannot load the adapter" in line and "damaged" in line
    assert not out.exists() and not list(tmp_path.glob(".export*"))


@pytest.mark.slow
def test_serve_on_a_taken_port_is_one_line(layout_run: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = runner.invoke(
            app, ["serve", str(layout_run), "--port", port], env={"COLUMNS": "300"}
        )
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert f"--port {port}: cannot bind" in line and "--port 0 picks a free one" in line

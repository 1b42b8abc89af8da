"""The checks `rlvr export` makes of what it wrote, before the export takes its name:

- the merged weights differ from the base model's, unless the checkpoint's adapter changes
  nothing (every LoRA B zero: the starting model), since a merge that shipped the base weights
  unchanged is a failure nothing else would notice;
- plain transformers, on the written directory, decodes a few of the run's held-out prompts
  greedily to the same answers as rlvr's engine on the run's checkpoint (the adapter merged the
  way the engine samples with it), both in fp32 on the CPU so that greedy decoding agrees exactly.

Each failure is an ExportError of one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict

from rlvr.export_gguf import ExportError
from rlvr.runs import layout
from rlvr.runs.checkpoints import ADAPTER_WEIGHTS

VERIFY_ITEMS = 5  # held-out items decoded by default (`rlvr export --verify N`)
# New tokens decoded per item at most: enough for two decoders to part where weights differ, few
# enough that the check costs seconds, not minutes, on a CPU.
VERIFY_TOKENS = 64
PRECISION: Final = "fp32"  # the engine's Precision for both sides
DEVICE = "cpu"
WEIGHTS_SUFFIX = ".safetensors"


class Prompt(BaseModel):
    """One held-out item's prompt: the chat messages before its first answer."""

    model_config = ConfigDict(frozen=True)

    item_id: str
    messages: tuple[tuple[str, str], ...]  # (role, content)

    def chat(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


class Verification(BaseModel):
    """What the card says of the check: which items, how many answers agreed, in which precision
    (skipped: `--no-verify`)."""

    model_config = ConfigDict(frozen=True)

    skipped: bool
    table: str = ""  # the run's table the prompts came from, e.g. trajectories/test.parquet
    items: tuple[str, ...] = ()
    agreed: int = 0
    max_tokens: int = 0
    precision: str = PRECISION


def held_out_tables(run_dir: Path) -> list[Path]:
    """The run's held-out rollouts, most telling first: the final test table, the other test
    tables, then validation tables, newest first."""
    folder = run_dir / layout.TRAJECTORIES
    if not folder.is_dir():
        return []
    final = layout.table(run_dir, layout.test_name())
    others = sorted(folder.glob(f"{layout.TEST_TABLE}-*{layout.TABLE_SUFFIX}"))
    vals = sorted(
        (p for p in folder.iterdir() if layout.VAL_TABLE.fullmatch(p.name)),
        key=lambda p: p.name,
        reverse=True,
    )
    return [p for p in [final, *others, *vals] if p.is_file()]


def prompts_of(table: Path, n: int) -> list[Prompt]:
    """The first `n` items of a trajectory table (by item id), each with the messages before its
    first assistant turn."""
    import polars as pl

    try:
        frame = pl.read_parquet(table, columns=["item_id", "messages"]).sort("item_id")
    except Exception as error:  # polars raises its own error types for every defect
        raise ExportError(
            f"{table}: unreadable ({type(error).__name__}); expected a trajectory table "
            "(--no-verify skips the check that reads it)"
        ) from None
    found: list[Prompt] = []
    for row in frame.unique("item_id", keep="first", maintain_order=True).iter_rows(named=True):
        if len(found) == n:
            break
        before: list[tuple[str, str]] = []
        for message in json.loads(row["messages"]):
            if message.get("role") == "assistant":
                break
            before.append((str(message.get("role")), str(message.get("content") or "")))
        if before:
            found.append(Prompt(item_id=str(row["item_id"]), messages=tuple(before)))
    return found


def held_out_prompts(run_dir: Path, n: int) -> tuple[str, list[Prompt]]:
    """(the table's path in the run, up to `n` prompts) from the run's held-out rollouts."""
    for table in held_out_tables(run_dir):
        prompts = prompts_of(table, n)
        if prompts:
            return str(table.relative_to(run_dir)), prompts
    raise ExportError(
        f"{run_dir}: no held-out rollouts to check the export against (no test or validation "
        f"table under {layout.TRAJECTORIES}/); --no-verify exports without the check"
    )


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{WEIGHTS_SUFFIX}"))


def adapter_changes_nothing(adapter_dir: Path) -> bool:
    """Whether every LoRA B of the adapter is zero (PEFT's initial adapter: the base model)."""
    from safetensors import safe_open

    with safe_open(str(adapter_dir / ADAPTER_WEIGHTS), framework="pt") as weights:
        names = weights.keys()  # a safetensors file is not iterable itself
        return all(not weights.get_tensor(name).any() for name in names if "lora_B" in name)


def same_as_base(export_dir: Path, base_dir: Path) -> bool:
    """Whether every tensor of the export's weights equals the base model's of that name."""
    import torch
    from safetensors import safe_open

    base_files = weight_files(base_dir)
    if not base_files:
        return False  # a base without safetensors: nothing to compare tensor by tensor
    base: dict[str, Path] = {}
    for path in base_files:
        with safe_open(str(path), framework="pt") as opened:
            base.update(dict.fromkeys(opened.keys(), path))
    for path in weight_files(export_dir):
        with safe_open(str(path), framework="pt") as exported:
            names = exported.keys()  # a safetensors file is not iterable itself
            for name in names:
                source = base.get(name)
                if source is None:
                    return False
                with safe_open(str(source), framework="pt") as original:
                    theirs = original.get_tensor(name)
                ours = exported.get_tensor(name)
                if ours.shape != theirs.shape or not torch.equal(ours, theirs.to(ours.dtype)):
                    return False
    return True


def check_not_base(export_dir: Path, base_dir: Path, checkpoint: Path, base_model: str) -> None:
    if adapter_changes_nothing(checkpoint):
        return
    if same_as_base(export_dir, base_dir):
        raise ExportError(
            f"{checkpoint}: the merged weights are identical to the base model {base_model}'s, "
            "though this checkpoint's adapter changes them; the merge failed (nothing was written)"
        )


def transformers_answers(export_dir: Path, prompts: list[Prompt], max_tokens: int) -> list[str]:
    """Plain transformers on the written directory: each prompt through its own chat template,
    greedy, fp32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    answers = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer.apply_chat_template(
                prompt.chat(), add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False)
            answers.append(
                tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
            )
    return answers


def engine_answers(
    base_dir: Path, checkpoint: Path, prompts: list[Prompt], max_tokens: int
) -> list[str]:
    """rlvr's engine on the checkpoint, as it samples a run's checkpoint: the base model with
    the adapter attached and merged by the engine's own code, greedy, fp32 on the CPU."""
    from rlvr.engine.adapters import AdapterStore, attach_adapter
    from rlvr.engine.decoding import Decoder
    from rlvr.engine.loaded_model import load_model
    from rlvr.engine.types import LoraSettings, SampleRow

    base = load_model(base_dir, DEVICE, PRECISION)
    loaded = base.wrapped(attach_adapter(base.model, checkpoint, LoraSettings()))
    adapters = AdapterStore(loaded, checkpoint.parent, 0, on_change=lambda: None)
    decoder = Decoder(loaded, adapters)
    rows = [
        SampleRow(
            prompt_ids=loaded.tokenizer.apply_chat_template(
                prompt.chat(), add_generation_prompt=True, tokenize=True, return_dict=False
            ),
            max_tokens=max_tokens,
            temperature=0.0,
        )
        for prompt in prompts
    ]
    return [sampled.text for sampled in decoder.sample(rows)]


def shown(text: str, width: int = 80) -> str:
    """An answer on one line, cut to `width` characters."""
    one = json.dumps(text)
    return one if len(one) <= width else one[: width - 3] + '..."'


def verify(
    export_dir: Path,
    base_dir: Path,
    checkpoint: Path,
    run_dir: Path,
    n: int,
    max_tokens: int,
) -> Verification:
    """Decode `n` held-out prompts with plain transformers on `export_dir` and with the engine
    on `checkpoint`; ExportError naming the first item whose answers differ."""
    table, prompts = held_out_prompts(run_dir, n)
    tokens = max(1, min(max_tokens, VERIFY_TOKENS))
    theirs = transformers_answers(export_dir, prompts, tokens)
    ours = engine_answers(base_dir, checkpoint, prompts, tokens)
    for prompt, exported, engined in zip(prompts, theirs, ours, strict=True):
        if exported != engined:
            raise ExportError(
                f"{run_dir / table}: item {prompt.item_id}: the export answers {shown(exported)}"
                f" but the run's engine on {checkpoint.name} answers {shown(engined)} "
                f"(greedy, {PRECISION}); the merged weights are wrong (nothing was written)"
            )
    return Verification(
        skipped=False,
        table=table,
        items=tuple(p.item_id for p in prompts),
        agreed=len(prompts),
        max_tokens=tokens,
    )

"""`rlvr export`: a run's trained agent as a model anyone can load, serve or share.

    OUT/
      model.safetensors, config.json, generation_config.json    the merged model (base + LoRA)
      tokenizer.json, tokenizer_config.json, chat_template.jinja the tokenizer and its chat template
      adapter/                                                  the PEFT adapter alone
      README.md                                                 the model card
      <run>-f16.gguf                                            with --gguf (llama.cpp, ollama)

The merged model is the run's base model (rlvr.engine.models.resolve_model) with the checkpoint's
LoRA folded into its weights by PEFT's `merge_and_unload`, saved in fp32 as the engine trained and
sampled it: `AutoModelForCausalLM.from_pretrained(OUT)` loads it and vLLM serves it. Everything is
written into a temporary directory beside OUT and renamed into place once complete, so a failure
never leaves half an export under OUT's name. Before the rename the export is checked
(rlvr.export_check): its weights are not the base model's unchanged, and plain transformers on it
answers a few held-out prompts as the run's engine does on the checkpoint.
"""

from __future__ import annotations

import errno
import importlib.metadata
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rlvr.export_check import VERIFY_ITEMS, Verification, check_not_base, verify
from rlvr.export_gguf import ExportError as ExportError  # raised here too; defined beneath
from rlvr.json_types import JsonObject
from rlvr.runs import atomic, layout, store
from rlvr.runs.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, BEST, checkpoint_for
from rlvr.runs.records import Row, RunResult, StepRow

ADAPTER_DIR = "adapter"
CARD = "README.md"
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE = "chat_template.jinja"
UNKNOWN = "unknown"


class SplitSizes(BaseModel):
    """How many items each part of the run's split held (None: the run does not record it)."""

    model_config = ConfigDict(frozen=True)

    train: int | None
    val: int | None
    test: int | None


class CardFacts(BaseModel):
    """What the model card says about the run an export came from."""

    model_config = ConfigDict(frozen=True)

    run: str
    task: str
    base_model: str
    checkpoint: str  # e.g. "best (step 2)"
    splits: SplitSizes
    story: tuple[str, ...]  # the run's validation and paired test results, in words
    finished: bool
    config_json: str
    commit: str
    rlvr_version: str
    gguf_file: str | None
    verification: Verification = Verification(skipped=True)


class Exported(BaseModel):
    """What `export_run` wrote."""

    model_config = ConfigDict(frozen=True)

    out: Path
    checkpoint: Path
    gguf: Path | None


def _damaged(path: Path, error: Exception, expected: str) -> ExportError:
    """One line for an unreadable run file: rlvr's own message where it is one line already."""
    text = str(error)
    if text and "\n" not in text and str(path.name) in text:
        return ExportError(text)
    return ExportError(f"{path}: unreadable ({type(error).__name__}); expected {expected}")


def read_run(run_dir: Path) -> tuple[JsonObject, RunResult | None]:
    """(config.json, summary.json or None before the run finished), each damaged file one line."""
    try:
        cfg = store.read_config(run_dir).public_dict()
    except (ValidationError, ValueError) as error:
        raise _damaged(run_dir / layout.CONFIG, error, "the config.json a run writes") from None
    try:
        summary = store.read_summary(run_dir)
    except FileNotFoundError:
        return cfg, None
    except ValueError as error:
        raise _damaged(
            run_dir / layout.SUMMARY, error, "the summary.json a finished run writes"
        ) from None
    return cfg, summary


def checkpoint_label(which: str, checkpoint: Path, summary: RunResult | None) -> str:
    """`best (step N)`, `last (step N)` or `step N`, for the card and the command's output."""
    if checkpoint.name == BEST:
        step = summary.best_step if summary else None
        return f"best (step {step})" if step is not None else "best"
    step = int(checkpoint.name.removeprefix("step-"))
    return f"last (step {step})" if which.strip().lower() == "last" else f"step {step}"


def split_sizes(rows: list[Row], summary: RunResult | None) -> SplitSizes:
    """The training pool's size (its last row's pool counts), the validation items and the
    paired test items of summary.json."""
    from rlvr.metrics import M

    pools = [r for r in rows if isinstance(r, StepRow) and r.number(M.POOL_UNTRIED) is not None]
    train = (
        sum(int(pools[-1].number(k) or 0) for k in (M.POOL_MIXED, M.POOL_EQUAL, M.POOL_UNTRIED))
        if pools
        else None
    )
    test = summary.test.items if summary and summary.test else None
    val = summary.val_items if summary else None
    return SplitSizes(
        train=train,
        val=int(val) if val is not None else None,
        test=int(test) if test is not None else None,
    )


def rlvr_version() -> str:
    try:
        return importlib.metadata.version("rlvr")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def card_facts(
    run_dir: Path,
    which: str,
    checkpoint: Path,
    gguf_file: str | None = None,
    verification: Verification | None = None,
) -> CardFacts:
    from rlvr.runs.report import story_lines

    cfg, summary = read_run(run_dir)
    rows = store.read_metrics(run_dir)
    commit = (
        ((summary.model_extra or {}).get("commit") if summary else None)
        or cfg.get("commit")
        or UNKNOWN
    )
    return CardFacts(
        run=run_dir.resolve().name,
        task=str(cfg.get("task")),
        base_model=str(cfg.get("model")),
        checkpoint=checkpoint_label(which, checkpoint, summary),
        splits=split_sizes(rows, summary),
        story=tuple(story_lines(rows, summary)) if summary else (),
        finished=summary is not None,
        config_json=json.dumps(cfg, indent=2),
        commit=str(commit),
        rlvr_version=rlvr_version(),
        gguf_file=gguf_file,
        verification=verification or Verification(skipped=True),
    )


def _count(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


GGUF_HOWTO = """\
This export has no GGUF file (`rlvr export --gguf` writes one for llama-architecture models
whose base is an rlvr alias such as `smollm2-135m`). To make one from this directory with
llama.cpp's converter:

```bash
pip download --no-deps --no-binary :all: llama-cpp-python   # its sdist ships the converter
tar xzf llama_cpp_python-*.tar.gz
python llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py . --outtype f16 --outfile model-f16.gguf
```
"""


def verification_text(checked: Verification) -> str:
    """The card's account of the export's self-check."""
    if checked.skipped:
        return (
            "This export was written with `--no-verify`: nothing checked that its answers are the "
            "run's."
        )
    items = ", ".join(f"`{item}`" for item in checked.items)
    return (
        f"Before it was written, this export answered {len(checked.items)} held-out prompts of the "
        f"run (`{checked.table}`: items {items}) greedily, up to {checked.max_tokens} new tokens, "
        "with plain transformers, and rlvr's engine answered the same prompts on the run's "
        f"checkpoint: {checked.agreed} of {len(checked.items)} answers were identical. Both "
        f"decoded in {checked.precision} on the CPU (in bf16 a near tie between two tokens may "
        "go either way); the weights are saved in fp32."
    )


def model_card(facts: CardFacts) -> str:
    """The README.md of an export: Hugging Face card metadata, then the run in words."""
    splits = facts.splits
    results = (
        "\n".join(f"- {line}" for line in facts.story)
        if facts.story
        else "- the run has not finished: it has no test result yet"
    )
    gguf = (
        f"`{facts.gguf_file}` (f16) loads in llama.cpp and ollama: "
        f"`llama-cli -m {facts.gguf_file} -cnv`.\n"
        if facts.gguf_file
        else GGUF_HOWTO
    )
    return f"""\
---
library_name: transformers
tags:
- rlvr
- reinforcement-learning
- lora
---

# {facts.run}

An agent trained with reinforcement learning by rlvr on the task **{facts.task}**, from the base
model `{facts.base_model}`; this is its checkpoint **{facts.checkpoint}**, with the LoRA adapter
merged into the weights.

## Results

Split: {_count(splits.train)} training items, {_count(splits.val)} validation items,
{_count(splits.test)} test items (held out; scored by the task's ground truth, the same items
before and after training, greedy sampling).

{results}

Gains are paired over the same test items: mean difference, sign-flip p-value, and the 95%
interval of that same test inverted, so the interval excludes 0 exactly when p < 0.05. An interval
that contains 0 is no evidence of a change.

## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("PATH/TO/THIS/DIR")
tokenizer = AutoTokenizer.from_pretrained("PATH/TO/THIS/DIR")
prompt = tokenizer.apply_chat_template(
    [{{"role": "user", "content": "..."}}], add_generation_prompt=True, return_tensors="pt"
)
print(tokenizer.decode(model.generate(prompt, max_new_tokens=256)[0, prompt.shape[1]:]))
```

vLLM serves the directory as it is. From rlvr's checkout, with vLLM's environment made
(`make vllm-env`), `rlvr serve-vllm PATH/TO/THIS/DIR` starts vLLM's OpenAI-compatible server on
it (127.0.0.1:8000, fp32, with a bearer key it prints); it runs `python -m
vllm.entrypoints.openai.api_server --model PATH/TO/THIS/DIR --dtype float32` in that environment,
which any other vLLM installation runs as well.

`{ADAPTER_DIR}/` holds the PEFT adapter alone. It was trained on rlvr's base weights for
`{facts.base_model}` (`rlvr.engine.models.resolve_model("{facts.base_model}")` gives their
directory), so apply it to exactly those:
`PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), "{ADAPTER_DIR}")`.

{gguf}
## Verification

{verification_text(facts.verification)}

## Provenance

- run directory: `{facts.run}` ({"finished" if facts.finished else "not finished"})
- code commit: {facts.commit}
- rlvr {facts.rlvr_version}

The run's resolved configuration (config.json):

```json
{facts.config_json}
```
"""


def check_out(out: Path) -> None:
    """`out` must not exist, or be an empty directory (nothing of the user's is overwritten)."""
    if out.is_dir():
        if any(out.iterdir()):
            raise ExportError(f"--out {out}: exists and is not empty; name a new directory")
    elif out.exists():
        raise ExportError(f"--out {out}: exists and is not a directory; name a new directory")


def attach_adapter(base: Any, adapter_dir: Path) -> Any:
    """`base` wrapped in a PeftModel of the checkpoint; a damaged checkpoint is one line."""
    from peft import PeftModel
    from safetensors import SafetensorError

    try:
        return PeftModel.from_pretrained(base, adapter_dir)
    except (SafetensorError, OSError, ValueError) as error:
        first = str(error).splitlines()[0] if str(error) else "damaged"
        raise ExportError(
            f"{adapter_dir / ADAPTER_WEIGHTS}: cannot load the adapter ({type(error).__name__}: "
            f"{first}); the checkpoint is damaged"
        ) from None


def load_merged(base_dir: Path, adapter_dir: Path) -> Any:
    """The base model with the adapter folded into its weights (fp32, CPU)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    return attach_adapter(base, adapter_dir).merge_and_unload()


def base_of(run_dir: Path) -> Path:
    """The local directory of the run's base model, for a run whose adapters are on this
    machine (the local backends)."""
    from rlvr.engine import ModelError, resolve_model

    cfg, _ = read_run(run_dir)
    if cfg.get("backend") not in ("local", "art-local"):
        raise ExportError(
            f"{run_dir}: trained with backend={cfg.get('backend')}, whose weights live with "
            "that service; only runs of the local backends hold their adapters"
        )
    try:
        return resolve_model(str(cfg.get("model")))
    except ModelError as error:
        raise ExportError(str(error)) from None


def portable_tokenizer_config(folder: Path) -> None:
    """Name the tokenizer class every transformers release knows (5.x writes its own new name,
    which 4.x cannot load), and keep the chat template inside tokenizer_config.json as well as
    beside it, where older readers look for it."""
    path = folder / TOKENIZER_CONFIG
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("is_local", None)
    template = folder / CHAT_TEMPLATE
    if template.is_file() and "chat_template" not in config:
        config["chat_template"] = template.read_text()
    path.write_text(json.dumps(config, indent=2) + "\n")


def write_adapter(adapter_dir: Path, target: Path, base_model: str) -> None:
    """The adapter's config and weights (not its optimizer state); its base named by the rlvr
    model name, not a path of the machine that trained it."""
    target.mkdir()
    config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
    config["base_model_name_or_path"] = base_model
    (target / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    shutil.copyfile(adapter_dir / ADAPTER_WEIGHTS, target / ADAPTER_WEIGHTS)


def _max_tokens(cfg: JsonObject) -> int:
    value = cfg.get("max_tokens")
    return value if isinstance(value, int) else 0


def export_run(
    run_dir: Path,
    out: Path,
    which: str = BEST,
    *,
    gguf: bool = False,
    verify_items: int | None = VERIFY_ITEMS,
    tamper: Callable[[Path], None] | None = None,
) -> Exported:
    """Write the merged model, its adapter, a model card (and with `gguf` a GGUF file) of
    `run_dir`'s checkpoint `which` into `out`, all at once or not at all, once checked
    (rlvr.export_check) on `verify_items` held-out prompts (None: the answers are not compared).
    `tamper` is a fault seam for tests: it gets the written directory between the merge and the
    checks."""
    from transformers import AutoTokenizer

    checkpoint = checkpoint_for(run_dir, which)
    check_out(out)
    base_dir = base_of(run_dir)
    cfg = read_run(run_dir)[0]
    base_model = str(cfg.get("model"))
    if gguf:
        from rlvr.export_gguf import check_gguf

        check_gguf(base_model, base_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = atomic.temp_path(out)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        merged = load_merged(base_dir, checkpoint)
        merged.save_pretrained(staging)
        AutoTokenizer.from_pretrained(base_dir).save_pretrained(staging)
        portable_tokenizer_config(staging)
        write_adapter(checkpoint, staging / ADAPTER_DIR, base_model)
        gguf_file = None
        if gguf:
            from rlvr.export_gguf import write_gguf

            name = run_dir.resolve().name
            gguf_file = f"{name}-f16.gguf"
            write_gguf(merged, base_model, staging, staging / gguf_file, name)
        del merged  # the checks load what was written, each side on its own
        if tamper is not None:
            tamper(staging)
        check_not_base(staging, base_dir, checkpoint, base_model)
        checked = (
            verify(staging, base_dir, checkpoint, run_dir, verify_items, _max_tokens(cfg))
            if verify_items is not None
            else Verification(skipped=True)
        )
        facts = card_facts(run_dir, which, checkpoint, gguf_file, checked)
        (staging / CARD).write_text(model_card(facts))
        atomic.fsync_tree(staging)
        if out.is_dir():
            out.rmdir()  # empty (check_out): the complete export takes its place
        os.replace(staging, out)
        atomic.fsync_dir(out.parent)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise ExportError(
            f"{out}: no space left on device while writing the export (nothing was left under "
            "that name); free some room, or export to another disk"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Exported(
        out=out, checkpoint=checkpoint, gguf=out / gguf_file if gguf_file is not None else None
    )

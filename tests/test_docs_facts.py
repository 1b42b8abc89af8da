"""The documentation agrees with the code: the numbers and names the concept pages, the
configuration guide, the performance notes and the README's "What a run writes" state about the
code, each checked against the constant, default or function it describes.

A case is a phrase (a regex over the pages with their line breaks folded, whose groups capture
what the page states) and a check of those captures against the code. A phrase that no longer
matches fails too: the page was reworded and the case must follow it.
"""

from __future__ import annotations

import inspect
import io
import re
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, get_args

import pytest
from rich.console import Console

from rlvr.config import (
    LOSS_OPTIONS_UNSUPPORTED,
    NESTED,
    RENAMED_GROUPS,
    ItemDraw,
    RunConfig,
    StoppingConfig,
    dotted_name,
    known_key,
)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
HOW = "How it works"
CONFIG = "Configuration"
WRITES = "What a run writes"
PERF = "Performance"
# Where each subject is documented: pages of the documentation site, or a README section.
PAGES = {
    HOW: sorted((DOCS / "concepts").glob("*.md")),
    CONFIG: [DOCS / "guide" / "configuration.md"],
    PERF: [DOCS / "results" / "performance.md"],
}
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5}
WORDS_SHARE = {"half": 0.5, "a third": 1 / 3, "a quarter": 0.25}

Check = Callable[[tuple[str, ...]], None]


def readme_section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def section(title: str) -> str:
    """The pages documenting `title` (or the README section of that title), their whitespace
    folded to single spaces."""
    pages = PAGES.get(title)
    text = "\n".join(p.read_text() for p in pages) if pages else readme_section(title)
    return " ".join(text.split())


def number(text: str) -> float:
    return float(text.replace(",", ""))


def literal(field: Any) -> tuple[str, ...]:
    """The values a Literal-typed pydantic field allows."""
    return tuple(str(a) for a in get_args(field.annotation))


def shape(text: str) -> str:
    """`text` with every number replaced by N: a printed line and a documented example compare."""
    return re.sub(r"[+-]?\d[\d,]*(\.\d+)?", "N", text)


# --- checks of one phrase each -------------------------------------------------------------------


def split_ratios(groups: tuple[str, ...]) -> None:
    fields = RunConfig.model_fields
    ratios = [fields[k].default for k in ("train_ratio", "val_ratio", "test_ratio")]
    assert [number(g) for g in groups] == [round(r * 100) for r in ratios]


def ifeval_test_items(groups: tuple[str, ...]) -> None:
    from rlvr.training.split import split_sizes
    from scenarios.ifeval import Options, task
    from scenarios.ifeval.environment import IFEvalEnvironment, Level

    level = IFEvalEnvironment(Level(Options().difficulty), None).load()
    defaults = task.defaults
    assert defaults["test_ratio"] == 0.5  # "half its level"
    sizes = split_sizes(len(level), defaults["val_ratio"], defaults["test_ratio"])
    assert number(groups[0]) == sizes[2]


def game2048_test_boards(groups: tuple[str, ...]) -> None:
    from rlvr.training.split import split_sizes
    from scenarios.game2048 import Options, task

    sizes = split_sizes(
        Options().num_items, task.defaults["val_ratio"], task.defaults["test_ratio"]
    )
    assert number(groups[0]) == sizes[2]


def sign_patterns(groups: tuple[str, ...]) -> None:
    from rlvr.evaluation.paired_gains import FLIPS

    assert number(groups[0]) == FLIPS


def gain_line(groups: tuple[str, ...]) -> None:
    from rlvr.evaluation.paired_gains import test_block
    from rlvr.runs.report import gains

    start = {str(i): 0.0 for i in range(20)}
    final = {i: float(int(i) < 3) for i in start}  # 3 of 20 gained: a p-value of 0.25
    block = test_block(start, start, final)
    assert shape(groups[0]) in {shape(gain.words(block.items)) for gain in gains(block)}


def pool_weights(groups: tuple[str, ...]) -> None:
    from rlvr.training.pool import History, weight

    prefer, revisit, halved = number(groups[0]), number(groups[1]), groups[2]
    settings = ItemDraw()
    untried = weight(None, settings)
    assert weight(History(tries=1, signal=1), settings) / untried == prefer
    assert weight(History(tries=1, equal_streak=1), settings) == revisit
    assert halved == "halved"
    assert weight(History(tries=2, equal_streak=2), settings) == revisit / 2


def max_refill_default(groups: tuple[str, ...]) -> None:
    field = ItemDraw.model_fields["max_refill"]
    assert field.default is None and f"default: {groups[0]}" in (field.description or "")
    assert groups[0] in RunConfig.model_fields


def no_signal_steps(groups: tuple[str, ...]) -> None:
    from rlvr.training.stop_rules import NO_SIGNAL_STEPS

    assert number(groups[0]) == NO_SIGNAL_STEPS


def checkpoints_tested(groups: tuple[str, ...]) -> None:
    from rlvr.training.state import Tested

    assert WORDS[groups[0]] == len(Tested)


def trend_window(groups: tuple[str, ...]) -> None:
    assert number(groups[0]) == StoppingConfig().trend_window


def trend_z(groups: tuple[str, ...]) -> None:
    assert number(groups[0]) == StoppingConfig().trend_z


def plateau_rule(groups: tuple[str, ...]) -> None:
    assert groups[0] == StoppingConfig().rule


def counted_gain(groups: tuple[str, ...]) -> None:
    from rlvr.training.trends import EvalPoint, gain_threshold

    stated, items, percent = number(groups[0]), int(number(groups[1])), number(groups[2])
    point = EvalPoint(step=0, val=percent / 100, val_items=items)
    assert round(gain_threshold([point], 0.0), 2) == stated


def fall_noise(groups: tuple[str, ...]) -> None:
    from rlvr.training.trends import EvalPoint, val_noise

    stated, items = number(groups[0]), int(number(groups[1]))
    assert round(val_noise([EvalPoint(step=0, val=0.5, val_items=items)]), 2) == stated


def stopping_default(groups: tuple[str, ...]) -> None:
    assert StoppingConfig.model_fields[groups[0]].default == number(groups[1])


def warm_share(groups: tuple[str, ...]) -> None:
    assert number(groups[0]) == RunConfig.model_fields[groups[1]].default * 100


def warm_cut_message(groups: tuple[str, ...]) -> None:
    from rlvr.metrics import WarmMetric
    from rlvr.runs.records import WarmStartRow
    from rlvr.training.warmstart import print_cut

    share, minutes = number(groups[1]) / 100, number(groups[2])
    row = WarmStartRow.model_validate(
        {
            WarmMetric.SECONDS: minutes * 60 * share,
            WarmMetric.BUDGET_S: minutes * 60 * share,
            WarmMetric.STEPS: 8,
            WarmMetric.STEPS_PLANNED: 12,
            WarmMetric.TOKENS: 8000,
            WarmMetric.TOKENS_PLANNED: 12000,
        }
    )
    out = io.StringIO()
    print_cut(row, minutes, share, Console(file=out, width=400))
    assert groups[0] in out.getvalue()


def progress_line(groups: tuple[str, ...]) -> None:
    from rlvr.training.progress import Progress

    out, now = io.StringIO(), [0.0]
    with Progress(
        "warm start: SFT", 12, "step", Console(file=out, width=200), lambda: now[0]
    ) as bar:
        for _ in range(3):
            now[0] += 10  # three 10 s steps: a quarter of the phase, 30 s after its start
            bar.advance(note="loss 1.204")
    assert groups[0] in out.getvalue().splitlines()


def prefill_slices(groups: tuple[str, ...]) -> None:
    from rlvr.engine.types import PREFILL_TOKENS

    assert number(groups[0]) * 1024 == PREFILL_TOKENS


def prefix_cache_budget(groups: tuple[str, ...]) -> None:
    from rlvr.engine.prefix import BUDGET_ENV, DEFAULT_BUDGET_MB

    assert (groups[0], number(groups[1])) == (BUDGET_ENV, DEFAULT_BUDGET_MB)


def tree_tokens(groups: tuple[str, ...]) -> None:
    from rlvr.engine.types import TREE_TOKENS

    assert number(groups[0]) == TREE_TOKENS


def pass_columns(groups: tuple[str, ...]) -> None:
    from rlvr.engine.types import PASS_COLUMNS

    assert number(groups[0]) == PASS_COLUMNS


def hack_bench(groups: tuple[str, ...]) -> None:
    from rlvr.bench.loop import HACK_DEFAULTS

    assert groups == (HACK_DEFAULTS["task"], HACK_DEFAULTS["scorer"])


def judge_timeouts(groups: tuple[str, ...]) -> None:
    from judges.client import LOCAL_TIMEOUT_S, REMOTE_TIMEOUT_S

    assert (number(groups[0]), number(groups[1])) == (REMOTE_TIMEOUT_S, LOCAL_TIMEOUT_S)


def choices_of(model: Any, field: str) -> Check:
    def check(groups: tuple[str, ...]) -> None:
        assert set(groups) <= set(literal(model.model_fields[field])), groups

    return check


def refused_options(groups: tuple[str, ...]) -> None:
    def names(text: str) -> set[str]:
        return set(re.findall(r"`(\w+)`", text))

    assert names(groups[0]) == set(LOSS_OPTIONS_UNSUPPORTED["serverless"])
    assert names(groups[1]) == set(LOSS_OPTIONS_UNSUPPORTED["art-local"])
    assert LOSS_OPTIONS_UNSUPPORTED["art-local"] == LOSS_OPTIONS_UNSUPPORTED["tinker"]


def old_flat_names(groups: tuple[str, ...]) -> None:
    for name in groups:  # refused, with the dotted key named
        assert not known_key(name) and dotted_name(name) is not None, name


def renamed_group(groups: tuple[str, ...]) -> None:
    assert RENAMED_GROUPS[groups[0]] == groups[1] and groups[1] in NESTED


def rollout_concurrency(groups: tuple[str, ...]) -> None:
    assert number(groups[0]) == RunConfig.model_fields["rollout_concurrency"].default


def loop_measure(groups: tuple[str, ...]) -> None:
    from rlvr.metrics import LOOP_NGRAM, LOOP_SHARE

    assert (WORDS_SHARE[groups[0]], number(groups[1])) == (LOOP_SHARE, LOOP_NGRAM)


FACTS = [
    (HOW, r"deterministic (\d+)/(\d+)/(\d+) split", split_ratios),
    (HOW, r"`ifeval` tests on half its level, (\d+) prompts", ifeval_test_items),
    (HOW, r"`2048` on (\d+) boards", game2048_test_boards),
    (HOW, r"both come from the same ([\d,]+) seeded sign patterns", sign_patterns),
    (HOW, r'printed as e\.g\. "(RL gain, [^"]+)"', gain_line),
    (
        HOW,
        r"`draw\.prefer`, ([\d.]+)× an untried item.*?`draw\.revisit` ([\d.]+), "
        r"(\w+) — `draw\.decay`",
        pool_weights,
    ),
    (HOW, r"up to `draw\.max_refill` extra groups \(default `(\w+)`", max_refill_default),
    (HOW, r"when the first (\d+) steps found no group with signal", no_signal_steps),
    (HOW, r"still to\s+come of the (\w+) checkpoints tested", checkpoints_tested),
    (HOW, r"`stopping\.trend_window` \((\d+)\)", trend_window),
    (HOW, r"`stopping\.trend_z` \(([\d.]+)\)", trend_z),
    (HOW, r"the default `stopping\.rule=(\w+)`", plateau_rule),
    (HOW, r"`gain_threshold`: ([\d.]+) on (\d+) items at (\d+) %", counted_gain),
    (HOW, r"accuracy on that many items \(±([\d.]+) on (\d+) items\)", fall_noise),
    (HOW, r"more than `stopping\.(divergence_z)` \((\d+)\) standard errors", stopping_default),
    (HOW, r"takes at most (\d+) % of it \(`(\w+)`", warm_share),
    (
        HOW,
        r"\(`(warm start cut by its budget \((\d+)% of max_minutes=(\d+): \d+s\)): trained",
        warm_cut_message,
    ),
    (HOW, r"30 s have passed\s+since its last line \(`(warm start: SFT: [^`]+)`\)", progress_line),
    (HOW, r"prefilled in slices of ~(\d+)k tokens", prefill_slices),
    (HOW, r"\(`rlvr/engine/prefix\.py`, `(\w+)`, default (\d+), 0 = off\)", prefix_cache_budget),
    (HOW, r"`TREE_TOKENS` \((\d+)\)", tree_tokens),
    (HOW, r"`cheapest_tree`: a pass counts as (\d+) token columns", pass_columns),
    (HOW, r"`rlvr bench hack` trains (\w+) on `scorer=(\w+)`", hack_bench),
    (CONFIG, r"`judge\.timeout_s` \((\d+) s; (\d+) s for the local judge", judge_timeouts),
    (CONFIG, r"`loss_fn` \((\w+)/(\w+)\)", choices_of(RunConfig, "loss_fn")),
    (
        CONFIG,
        r"`importance_sampling_level` \((\w+)/(\w+) = GSPO\)",
        choices_of(RunConfig, "importance_sampling_level"),
    ),
    (CONFIG, r"`stopping\.rule` \((\w+)/(\w+)\)", choices_of(StoppingConfig, "rule")),
    (
        CONFIG,
        r"`draw\.strategy` \(or simply `draw=(\w+)\|(\w+)`\)",
        choices_of(ItemDraw, "strategy"),
    ),
    (
        CONFIG,
        r"`backend=serverless` refuses (.*?), `art-local`/`tinker` refuse (.*?)\)",
        refused_options,
    ),
    (CONFIG, r"A flat name from before the groups \(`(\w+)`, `(\w+)`", old_flat_names),
    (CONFIG, r"`(\w+)=` and `\w+\.KEY=`, this group's name before, .*? `(\w+)`", renamed_group),
    (PERF, r"\(`rollout_concurrency`, (\d+)\)", rollout_concurrency),
    (WRITES, r"at least (half|a third|a quarter) its token (\d+)-grams repeat", loop_measure),
]


@pytest.mark.parametrize(
    ("where", "phrase", "check"),
    [pytest.param(w, p, c, id=f"{w}: {c.__name__}") for w, p, c in FACTS],
)
def test_a_number_or_name_the_docs_state_is_the_codes(
    where: str, phrase: str, check: Check
) -> None:
    found = re.search(phrase, section(where))
    assert found, f"{where}: no phrase matches {phrase!r}"
    check(found.groups())


# --- names the sections list ---------------------------------------------------------------------

METRIC = re.compile(r"`((?:train|val|judge|sampling|pool|time|sys|warm|ruler|rubric|alarm)/\w+)`")


def metric_keys() -> set[str]:
    from rlvr.metrics import ALARM_PREFIX, JudgeMetric, M, RubricMetric, RulerMetric, WarmMetric
    from rlvr.runs.records import AlarmName

    enums = (M, JudgeMetric, RulerMetric, RubricMetric)
    keys = {str(k) for enum in enums for k in enum}
    warm = {v for k, v in vars(WarmMetric).items() if k.isupper()}
    return keys | warm | {f"{ALARM_PREFIX}{a}" for a in AlarmName}


@pytest.mark.parametrize("where", [HOW, CONFIG, WRITES, PERF])
def test_every_metric_key_the_docs_name_is_written_by_the_code(where: str) -> None:
    named = set(METRIC.findall(section(where)))
    assert named or where in (CONFIG, PERF)
    assert named <= metric_keys(), sorted(named - metric_keys())


def test_every_file_a_run_writes_is_named_by_the_layout() -> None:
    from rlvr.runs import layout
    from rlvr.training.state import Tested

    run = Path("run")
    written = {
        layout.CONFIG,
        layout.METRICS,
        layout.SUMMARY,
        layout.REPORT,
        *(
            str(layout.table(run, name).relative_to(run))
            for name in (layout.step_name(7), layout.val_name(7), layout.test_name())
        ),
        *(
            str(layout.table(run, layout.test_name(t)).relative_to(run))
            for t in Tested
            if t != Tested.FINAL
        ),
        f"{layout.CHECKPOINTS}/{layout.step_name(7)}/",
        f"{layout.CHECKPOINTS}/{layout.BEST}/",
    }
    named = re.findall(
        r"`([\w/.-]+\.(?:json|jsonl|parquet|png)|checkpoints/[\w-]+/)`", section(WRITES)
    )
    assert named
    written_shapes = {re.sub(r"\d{4}", "NNNN", w) for w in written}
    for name in named:
        full = name if "/" in name or not name.endswith(".parquet") else f"trajectories/{name}"
        assert full in written_shapes, name


def test_every_summary_key_the_docs_name_is_written() -> None:
    from rlvr.evaluation.paired_gains import test_block
    from rlvr.runs.records import RunResult
    from rlvr.training import loop

    row = re.search(r"\| `summary\.json` \| (.*?) \|", section(WRITES))
    assert row
    named = set(re.findall(r"`(\w+)`", row.group(1)))
    start = {str(i): float(i % 2) for i in range(8)}
    block = test_block(start, start, start, start).model_dump(exclude_unset=True)
    suffixes = {s for k in block for s in ("_ci95", "_p") if k.endswith(s)}
    literals = set(re.findall(r'"(\w+)"', inspect.getsource(loop.finish)))
    assert named <= set(RunResult.model_fields) | set(block) | suffixes | literals, sorted(
        named - set(RunResult.model_fields) - set(block) - suffixes - literals
    )


def test_every_configuration_key_the_docs_list_is_a_key() -> None:
    text = section(CONFIG)
    listed = text[
        text.index("The main RunConfig keys:") : text.index("A flat name from before the groups")
    ]
    listed = re.sub(r"\(forwarded to every backend.*?\)", "", listed)  # backends, not keys
    keys = {k.split("=")[0] for k in re.findall(r"`([a-z_]+(?:\.[a-z_]+)?(?:=[\w|-]+)?)`", listed)}
    assert len(keys) > 40
    assert [k for k in keys if not known_key(k)] == []


def test_every_scorer_the_docs_name_is_installed() -> None:
    installed = {e.name for e in entry_points(group="rlvr.scorers")}
    specs = re.findall(r"`scorer=([\w*.+>]+)`", section(HOW) + section(CONFIG))
    parts = {p.split("*")[0] for spec in specs for p in re.split(r"[+>]", spec)}
    named = {p for p in parts if len(p) > 1}  # `scorer=a*0.3+b` is the syntax, not a scorer
    named |= set(re.findall(r"`(\w+)` \(deliberately hackable", section(HOW)))
    named |= set(re.findall(r"`(\w+)` is reference-guided RULER", section(HOW)))
    assert {"verifier", "rollout", "length", "ruler_ref"} <= named
    assert named <= installed, sorted(named - installed)


def test_every_verifier_the_docs_list_is_in_the_library() -> None:
    from rlvr.scoring import verifiers

    listed = re.search(
        r"\*\*Verifier library\*\* \(`rlvr/scoring/verifiers\.py`\): (.*?) all", section(HOW)
    )
    assert listed
    names = re.findall(r"`(\w+)`", listed.group(1))
    assert len(names) == 5
    assert all(callable(vars(verifiers).get(n)) for n in names), names


@pytest.mark.parametrize("where", [HOW, CONFIG, WRITES, PERF])
def test_every_path_the_docs_name_exists(where: str) -> None:
    paths = re.findall(r"`((?:rlvr|judges|scenarios|tests)/[\w/.]*)`", section(where))
    assert paths or where in (CONFIG, WRITES)
    assert [p for p in paths if not (ROOT / p).exists()] == []


@pytest.mark.parametrize(
    ("bullet", "package"),
    [
        pytest.param(r"- at the top: (.*?)\. - `judges/`", "rlvr", id="rlvr"),
        pytest.param(r"- `rlvr/training/` — (.*?)\. - ", "rlvr/training", id="rlvr/training"),
    ],
)
def test_the_package_map_names_every_module(bullet: str, package: str) -> None:
    text = re.search(bullet, section(HOW))
    assert text
    named = set(re.findall(r"`(\w+)`", text.group(1)))
    modules = {p.stem for p in (ROOT / package).glob("*.py") if p.stem != "__init__"}
    assert modules <= named, sorted(modules - named)

"""ART's loss options as config keys: validated, forwarded in each backend's own names (held
against the real `train()` signatures), refused where a backend cannot honour them, and applied
by the local backend's real GRPO step."""

from __future__ import annotations

import asyncio
import inspect
import math
from pathlib import Path

import art
import pytest
import pytest_asyncio
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import ConfigError, RunConfig, parse_overrides
from rlvr.training.backends import step_learning_rate, train_kwargs
from tests.helpers.tiny_runs import tiny_model_path

# Each loss option trains a step of the tiny random model: the options' wiring is the claim.
TINY_MODEL = str(tiny_model_path())


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["loss_fn=grpo"], "loss_fn"),
        (["epsilon=-0.2"], "epsilon"),
        (["importance_sampling_level=tokens"], "importance_sampling_level"),
        (["truncated_importance_sampling=0"], "truncated_importance_sampling"),
    ],
)
def test_bad_loss_options_are_one_line_errors(pairs: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_overrides(pairs)
    assert "\n" not in str(caught.value)


def _train_signature(backend: str) -> inspect.Signature:
    if backend == "local":
        from rlvr.engine.backend import LocalTorchBackend as cls
    elif backend == "art-local":
        from art.local import LocalBackend as cls
    elif backend == "tinker":
        # art.tinker needs the `tinker` package (an extra); TinkerBackend is a LocalBackend that
        # does not override train(): its source says so, and LocalBackend.train is the signature.
        import art.local

        source = Path(art.local.__file__).parent.parent / "tinker" / "backend.py"
        assert "def train(" not in source.read_text()
        from art.local import LocalBackend as cls
    else:
        from art.serverless import ServerlessBackend as cls
    return inspect.signature(cls.train)


@pytest.mark.parametrize("backend", ["local", "art-local", "tinker", "serverless"])
def test_every_forwarded_option_is_a_parameter_of_that_backends_train(backend: str) -> None:
    cfg = RunConfig(
        backend=backend,
        loss_fn="ppo",
        importance_sampling_level="sequence",
        epsilon=0.1,
        epsilon_high=0.3,
        scale_rewards=False,
    )
    kwargs = train_kwargs(cfg, step=1)
    assert set(kwargs) <= set(_train_signature(backend).parameters)
    assert kwargs["importance_sampling_level"] == "sequence" and kwargs["epsilon_high"] == 0.3
    assert kwargs.get("loss_fn", "ppo" if kwargs.get("ppo") else None) == "ppo"


@pytest.mark.parametrize(
    ("warmup", "rates"),
    [
        (0, [1.0, 1.0, 1.0]),
        (1, [1.0, 1.0, 1.0]),
        (4, [0.25, 0.5, 0.75, 1.0, 1.0]),
    ],
)
def test_the_learning_rate_rises_over_the_warmup(warmup: int, rates: list[float]) -> None:
    cfg = RunConfig(learning_rate=2e-4, lr_warmup_steps=warmup)
    steps = range(1, len(rates) + 1)
    assert [step_learning_rate(cfg, s) for s in steps] == pytest.approx([2e-4 * r for r in rates])
    assert [train_kwargs(cfg, s)["learning_rate"] for s in steps] == pytest.approx(
        [2e-4 * r for r in rates]
    )


@pytest.mark.parametrize(
    ("backend", "pair"),
    [
        ("serverless", "truncated_importance_sampling=2.0"),
        ("serverless", "kl_penalty_coef=0.1"),
        ("tinker", "num_substeps=2"),
    ],
)
def test_a_backend_refuses_what_it_cannot_honour_in_one_line(backend: str, pair: str) -> None:
    result = CliRunner().invoke(app, ["train", "math", f"backend={backend}", pair])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"not supported by backend={backend}" in lines[0]


# --- the local backend's real step -------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def batch(tmp_path_factory):
    """A real backend and one sampled group with signal, shared by the option cases."""
    from rlvr.engine.backend import LocalTorchBackend

    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")), precision="fp32")
    sampler = art.TrainableModel(name="sampler", project="tests", base_model=TINY_MODEL)
    await sampler.register(backend)
    messages = [{"role": "user", "content": "Name a color."}]

    async def one(seed: int) -> art.Trajectory:
        response = await sampler.openai_client().chat.completions.create(
            model=sampler.get_inference_name(),
            messages=messages,
            logprobs=True,
            temperature=1.0,
            max_tokens=12,
            seed=seed,
        )
        return art.Trajectory(
            messages_and_choices=[*messages, response.choices[0]], reward=float(seed % 2)
        )

    group = art.TrajectoryGroup(await asyncio.gather(*(one(s) for s in range(4))))
    yield backend, group
    await backend.close()


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"loss_fn": "ppo"},
        {"importance_sampling_level": "sequence"},
        {"epsilon": 0.1, "epsilon_high": 0.3, "truncated_importance_sampling": 2.0},
        {"scale_rewards": False},
    ],
    ids=["cispo", "ppo", "gspo", "clips", "unscaled"],
)
async def test_the_local_backend_trains_with_each_loss_option(batch, options: dict) -> None:
    backend, group = batch
    name = "m-" + "-".join(f"{k}{v}" for k, v in options.items()).replace(".", "")
    model = art.TrainableModel(name=name or "m", project="tests", base_model=TINY_MODEL)
    await model.register(backend)
    cfg = RunConfig(learning_rate=1e-4, **options)
    result = await backend.train(model, [group], **train_kwargs(cfg, step=1))
    assert result.step == 1 and result.metrics["num_tokens"] > 0
    assert all(math.isfinite(result.metrics[k]) for k in ("loss", "grad_norm"))
    assert result.metrics["grad_norm"] > 0  # the group has signal: the step updated the adapter

"""No credential in any output: config.json, metrics.jsonl, parquet, summary, W&B (config, tables,
run metadata), console, logs and exception text.

Fake keys are planted in the environment (OPENAI_API_KEY, WANDB_API_KEY, TINKER_API_KEY,
HF_TOKEN), in the config (a URL password in judge.base_url, a key-shaped override value) and on
the command line; a real short run, a judge 401 that echoes the key, config errors and a crash
traceback must show none of them.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import polars as pl
import pytest

from rlvr import redact
from rlvr.config import ConfigError, RunConfig, parse_overrides
from rlvr.engine.models import CACHE_ENV, cache_root
from tests.helpers.run_dirs import finished_summary
from tests.helpers.tiny_runs import tiny_model_path

OPENAI_KEY = "sk-test-PLANTED-123456"
WANDB_KEY = "PLANTEDwandb" + "0" * 28  # W&B keys are 40 characters
TINKER_KEY = "tinker-PLANTED-abcdef"
HF_KEY = "hf_PLANTED_abcdefghij"
URL_PASSWORD = "PLANTEDurlpass99"
PLANTED = [OPENAI_KEY, WANDB_KEY, TINKER_KEY, HF_KEY, URL_PASSWORD]
BASE_URL = f"http://judge:{URL_PASSWORD}@127.0.0.1:9/v1"


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in [
        ("OPENAI_API_KEY", OPENAI_KEY),
        ("WANDB_API_KEY", WANDB_KEY),
        ("TINKER_API_KEY", TINKER_KEY),
        ("HF_TOKEN", HF_KEY),
    ]:
        monkeypatch.setenv(name, value)


def assert_clean(text: str, where: str) -> None:
    found = [p for p in PLANTED if p in text]
    assert not found, f"{where} holds {found}"


# --- the helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("WANDB_API_KEY", True),
        ("TINKER_API_KEY", True),
        ("HF_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("SOME_PROVIDER_APIKEY", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("HF_HUB_OFFLINE", False),
        ("KEYBOARD_LAYOUT", False),
        ("RLVR_TORCH_THREADS", False),
    ],
)
def test_which_environment_variables_hold_credentials(name: str, secret: bool) -> None:
    assert redact.is_secret_env(name) is secret


@pytest.mark.parametrize(
    ("field", "secret"),
    [
        ("api_key", True),
        ("openai_api_key", True),
        ("apiKey", True),
        ("auth_token", True),
        ("password", True),
        ("inference_api_key", True),
        ("max_tokens", False),
        ("judge/prompt_tokens", False),
        ("train/completion_tokens_mean", False),
        ("key", False),
        ("judge_base_url", False),
        ("openai_key", True),
        ("my-service.key", True),
        ("client_secret", True),
        ("Authorization", True),
        ("bearer_token", True),
        ("monkey", False),
        ("keys_seen", False),
    ],
)
def test_which_fields_hold_credentials(field: str, secret: bool) -> None:
    assert redact.is_secret_field(field) is secret


def test_short_values_are_not_treated_as_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHORT_TOKEN", "true")
    assert "true" not in redact.secret_values()
    assert redact.redact_text("this is true") == "this is true"


def test_redact_data_walks_nested_values(planted: None) -> None:
    data = {
        "task_options": {"api_key": "anything", "token": None, "n": 3},
        "judge_base_url": BASE_URL,
        "notes": [f"used {OPENAI_KEY}", 1.5],
    }
    clean = redact.redact_data(data)
    assert clean["task_options"] == {"api_key": "[redacted]", "token": None, "n": 3}
    assert clean["judge_base_url"] == "http://judge:[redacted]@127.0.0.1:9/v1"
    assert clean["notes"] == ["used [redacted]", 1.5]


def test_error_text_also_loses_key_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert redact.redact_error(f"401: Incorrect API key provided: {OPENAI_KEY}") == (
        "401: Incorrect API key provided: [redacted]"
    )


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("http://h/v1?api-key=PLANTEDq1", "http://h/v1?api-key=[redacted]"),
        ("http://h/v1?x=1&access_token=PLANTEDq2", "http://h/v1?x=1&access_token=[redacted]"),
        ("https://h/o?sig=PLANTEDq3&se=2026", "https://h/o?sig=[redacted]&se=2026"),
        ("http://h/v1?key=PLANTEDq4#frag", "http://h/v1?key=[redacted]#frag"),
        ("http://h/v1?page=2&limit=10", "http://h/v1?page=2&limit=10"),
    ],
)
def test_url_query_parameters_named_like_credentials_are_redacted(url: str, clean: str) -> None:
    assert redact.redact_text(url) == clean
    assert redact.redact_data({"judge_base_url": url}) == {"judge_base_url": clean}


@pytest.mark.parametrize(
    ("value", "clean"),
    [
        ("sk-proj-PLANTEDabcdefghijklmnop", "[redacted]"),
        ("ghp_PLANTEDabcdefghijklmnop1234", "[redacted]"),
        ("data/key_points_v2.jsonl", "data/key_points_v2.jsonl"),  # a path, not a key
        ("scenarios/sk-learn/items.jsonl", "scenarios/sk-learn/items.jsonl"),
    ],
)
def test_data_loses_provider_shaped_keys_but_not_paths(value: str, clean: str) -> None:
    assert redact.redact_data({"note": value}) == {"note": clean}


def test_child_processes_get_no_credential_variables(planted: None, monkeypatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_SECRET", "PLANTEDsecret1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = redact.child_env()
    assert not [name for name in env if redact.is_secret_env(name)]
    assert_clean(json.dumps(env), "child environment")
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == __import__("os").environ["PATH"]


@pytest.mark.slow
def test_the_local_judge_child_inherits_no_key(planted: None) -> None:
    """The real judge server child: its /proc environment has the local judge's own bearer key and no
    credential of ours."""
    import asyncio

    from judges.local import LocalJudge, LocalJudgeSettings
    from judges.server import SERVER_KEY_ENV

    local_judge = LocalJudge(LocalJudgeSettings.default(model=str(tiny_model_path())))
    try:
        asyncio.run(local_judge.ensure_started())
        environ = Path(f"/proc/{local_judge.pid}/environ").read_bytes().decode(errors="replace")
    finally:
        local_judge.stop()
    assert_clean(environ, "local judge environment")
    assert f"{SERVER_KEY_ENV}={local_judge.key}" in environ.split("\0")


# --- config, errors, logs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"api_key": OPENAI_KEY, "n": 1}, {"api_key": "[redacted]", "n": 1}),
        ({"openai_key": "PLANTEDplain99", "n": 1}, {"openai_key": "[redacted]", "n": 1}),
        ({"authorization": "Bearer PLANTEDb"}, {"authorization": "[redacted]"}),
        (
            {"client_secret": "PLANTEDc", "endpoint": "http://h?token=PLANTEDd"},
            {"client_secret": "[redacted]", "endpoint": "http://h?token=[redacted]"},
        ),
    ],
)
def test_config_json_and_wandb_config_hold_no_credentials(
    planted: None, options: dict, expected: dict
) -> None:
    cfg = RunConfig(judge={"base_url": f"{BASE_URL}?api-key=PLANTEDq"}, task_options=options)
    public = cfg.public_dict()
    assert_clean(json.dumps(public), "public_dict")
    assert "PLANTED" not in json.dumps(public)
    assert public["task_options"] == expected
    assert public["judge"]["base_url"].endswith("?api-key=[redacted]")


@pytest.mark.parametrize(
    "pairs",
    [[f"group_size={OPENAI_KEY}"], [f"group_size={TINKER_KEY}"], [f"judge.timeout_s={HF_KEY}"]],
)
def test_config_errors_do_not_quote_credentials(planted: None, pairs: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_overrides(pairs)
    assert "[redacted]" in str(caught.value)
    assert_clean(str(caught.value), "ConfigError")


def test_cli_config_errors_do_not_quote_credentials(planted: None) -> None:
    from typer.testing import CliRunner

    # litellm's log handler takes sys.stderr when litellm is imported: imported inside CliRunner,
    # it would keep CliRunner's stream, closed after the call, and later tests' logging would fail.
    import judges.client  # noqa: F401
    from rlvr.cli.main import app

    for args in (["math", f"num_items={TINKER_KEY}"], ["math", f"group_size={OPENAI_KEY}"]):
        result = CliRunner().invoke(app, ["train", *args])
        assert result.exit_code == 2, result.output
        assert "[redacted]" in result.output
        assert_clean(result.output, "CLI output")


def test_a_crash_prints_a_redacted_traceback(planted: None, capsys) -> None:
    import typer

    from rlvr.cli.main import crash

    try:
        raise RuntimeError(f"provider refused key {OPENAI_KEY} at {BASE_URL}")
    except RuntimeError as error:
        with pytest.raises(typer.Exit):
            crash(error)
    err = capsys.readouterr().err
    assert "RuntimeError: provider refused key [redacted]" in err and "Traceback" in err
    assert_clean(err, "crash traceback")


def test_log_records_are_redacted(planted: None, caplog: pytest.LogCaptureFixture) -> None:
    redact.install_log_redaction()
    log = logging.getLogger("some.library")
    with caplog.at_level(logging.INFO):
        log.info("calling %s with key %s", BASE_URL, OPENAI_KEY)
        try:
            raise ValueError(f"bad token {HF_KEY}")
        except ValueError:
            log.exception("failed")
    assert "calling http://judge:[redacted]@127.0.0.1:9/v1 with key [redacted]" in caplog.text
    assert "ValueError: bad token [redacted]" in caplog.text
    assert_clean(caplog.text, "log records")


async def test_a_judge_401_echoing_the_key_leaks_it_nowhere(
    planted: None, caplog: pytest.LogCaptureFixture, capfd
) -> None:
    from judges.client import JudgeClient, JudgeFailure, JudgeSettings
    from tests.helpers.fault_server import Fault, FaultServer

    caplog.set_level(logging.DEBUG)
    with FaultServer() as server:
        server.schedule([Fault.UNAUTHORIZED])  # answers "Incorrect API key provided: <key>"
        cfg = RunConfig(judge={"model": "openai/gpt-4o-mini", "base_url": server.base_url})
        client = JudgeClient(JudgeSettings.from_config(cfg))
        with pytest.raises(JudgeFailure) as caught:
            await client.complete(
                [{"role": "user", "content": "ok?"}],
                name="ok",
                schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
                parse=lambda data: (data, 0),
            )
    assert "Incorrect API key provided" in str(caught.value)
    shown = "".join(traceback.format_exception(caught.value))
    out, err = capfd.readouterr()
    for text, where in [
        (str(caught.value), "exception text"),
        (shown, "traceback"),
        (caplog.text, "logs"),
        (out + err, "console"),
    ]:
        assert_clean(text, where)


# --- a real run -----------------------------------------------------------------------------


def load_items() -> list[dict]:
    return [
        {"id": f"s{a}{b}", "prompt": f"What is {a} + {b}?", "answer": str(a + b)}
        for a in range(1, 4)
        for b in range(1, 5)
    ]


async def leaky_rollout(model, item, sampling):
    """A rollout that puts the key where a careless environment would: a prompt, its logs and its
    metadata (a provider's error message, a client's settings)."""
    import os

    import rlvr

    key = os.environ["OPENAI_API_KEY"]
    messages = [
        {"role": "system", "content": f"Reply with only the number. (debug: key {key})"},
        {"role": "user", "content": item.prompt},
    ]
    trajectory = await rlvr.single_turn(model, item, messages, sampling)
    trajectory.logs.append(f"judge said: Incorrect API key provided: {key}")
    trajectory.metadata["client"] = f"base_url={BASE_URL}"
    return trajectory


def check(item, trajectory) -> float:
    import rlvr

    return float((item.answer or "") in rlvr.completion_text(trajectory))


def file_texts(folder: Path) -> dict[Path, str]:
    """Every file under `folder` as text (bytes decoded leniently; parquet decoded by polars,
    since its pages are compressed)."""
    texts = {}
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            frame = pl.read_parquet(path)
            texts[path] = json.dumps(frame.to_dicts(), default=str)
        else:
            texts[path] = path.read_bytes().decode("utf-8", errors="replace")
    return texts


@pytest.mark.slow
async def test_a_real_run_writes_and_prints_no_credential(
    planted: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd,
) -> None:
    pytest.importorskip("wandb")
    import rlvr

    wandb_dir = tmp_path / "wb"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    # the converted model stays where it is (a new HOME would convert it again)
    monkeypatch.setenv(CACHE_ENV, str(cache_root()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc, no W&B settings
    monkeypatch.setattr(sys, "argv", ["rlvr", "train", f"judge.base_url={BASE_URL}"])
    caplog.set_level(logging.INFO)
    cfg = RunConfig(
        model=str(tiny_model_path()),  # what is written and printed is the claim
        group_size=2,
        groups_per_batch=1,
        max_tokens=6,
        max_steps=1,
        max_val_items=1,
        judge={"model": "none", "base_url": BASE_URL},
        wandb_project="rlvr-secrets",
        stopping={"on_divergence": "warn"},
        run_dir=tmp_path / "run",
    )
    environment = rlvr.environment(
        name="leaky", load=load_items, rollout=leaky_rollout, check=check
    )
    result = await rlvr.run_training(cfg, task=environment)
    out, err = capfd.readouterr()

    run_dir = result.run_dir
    texts = {**file_texts(run_dir), **file_texts(wandb_dir)}
    names = {p.name for p in texts}
    assert {"config.json", "metrics.jsonl", "summary.json", "model.json"} <= names
    assert any(p.suffix == ".parquet" for p in texts)
    # W&B offline keeps the run config and metadata (the command line too) in its .wandb file
    [wandb_run] = [p for p in texts if p.suffix == ".wandb"]
    assert texts[wandb_run].count("judge:[redacted]@127.0.0.1") >= 2  # config and argv, redacted
    for path, text in texts.items():
        assert_clean(text, str(path))
    step = pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")
    assert "Incorrect API key provided: [redacted]" in step["logs"][0]  # it was there: removed
    assert "key [redacted]" in step["messages"][0]
    assert_clean(out + err, "console")
    assert_clean(caplog.text, "logs")


LEAKY_TASK = """
import os
import rlvr

def load():
    raise RuntimeError("provider said: Incorrect API key provided: " + os.environ["OPENAI_API_KEY"])

async def rollout(model, item, sampling):
    return await rlvr.single_turn(model, item, [{"role": "user", "content": item.prompt}], sampling)

task = rlvr.Task(
    name="leaky",
    make=lambda: rlvr.environment(name="leaky", load=load, rollout=rollout, check=lambda i, t: 0.0),
)
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["preflight", "eval"])
def test_every_command_prints_a_task_error_without_the_key(
    planted: None, tmp_path: Path, command: str
) -> None:
    """A task whose code raises with the key in its message: `rlvr preflight` and `rlvr eval`
    (not only `train`) print the error redacted and exit non-zero (each command in a process of
    its own with this environment, forked warm: tests/helpers/warm.py)."""
    from tests.helpers import warm

    (tmp_path / "leaky.py").write_text(LEAKY_TASK)
    reference = f"{tmp_path / 'leaky.py'}:task"
    if command == "preflight":
        args = ["preflight", reference]
    else:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        cfg = RunConfig(task=reference, judge="none")
        (run_dir / "config.json").write_text(json.dumps(cfg.public_dict()))
        (run_dir / "summary.json").write_text(finished_summary(run_dir, reference))
        (run_dir / "metrics.jsonl").write_text("")
        args = ["eval", str(run_dir)]
    done = warm.rlvr(*args, timeout_s=300)
    assert done.returncode != 0
    assert "Incorrect API key provided: [redacted]" in done.stderr, done.stderr[-2000:]
    assert_clean(done.stdout + done.stderr, f"rlvr {command} output")

"""`rlvr serve-vllm DIR`: the command an export's model card prints for vLLM.

Fast: without vLLM's environment it fails in one line that says how to make it (`make
vllm-env`); a directory that is not an export is named; the command it runs is vLLM's OpenAI
server module in fp32. `make test-vllm` (marked vllm): a tiny trained run is exported, the card's
command is started as the card prints it, and its greedy chat answers are plain transformers'.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.inference import server
from rlvr.serve import KEY_ENV
from rlvr.serve_vllm import vllm_command
from tests.helpers import warm
from tests.helpers.tiny_runs import TinyRun

runner = CliRunner()


def fake_export(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("case", ["no-vllm-env", "not-an-export"])
def test_serve_vllm_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.delenv(server.PYTHON_ENV, raising=False)
    monkeypatch.setattr(server, "VENV_DIR", tmp_path / ".venv-vllm")  # not made here
    export = fake_export(tmp_path / "export") if case == "no-vllm-env" else tmp_path
    result = runner.invoke(app, ["serve-vllm", str(export)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error:")
    if case == "no-vllm-env":
        assert "rlvr serve-vllm: vLLM's environment" in line and "run `make vllm-env`" in line
    else:
        assert f"{tmp_path}: not an exported model (no config.json)" in line


def test_the_command_is_vllms_server_module_in_fp32(tmp_path: Path) -> None:
    export = fake_export(tmp_path / "my-export")
    command = vllm_command(Path("/v/bin/python"), export, "127.0.0.1", 8123, ["--seed", "1"])
    assert command[:5] == [
        "/v/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(export),
    ]
    for flag, value in [
        ("--dtype", "float32"),
        ("--port", "8123"),
        ("--served-model-name", "my-export"),
    ]:
        assert command[command.index(flag) + 1] == value
    assert command[-2:] == ["--seed", "1"]  # what follows `--` goes to vLLM


# ------------------------------------------------------------------ real vLLM (make test-vllm)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def greedy_completions(
    model_dir: Path, prompts: list[list[dict[str, str]]], max_tokens: int
) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
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


@pytest.mark.slow
@pytest.mark.vllm
def test_the_cards_vllm_command_serves_the_export(tiny_run: TinyRun, tmp_path: Path) -> None:
    server.ensure_environment()  # `make vllm-env` on first use, as the other vLLM tests do
    out = tmp_path / "export"
    done = warm.rlvr("export", str(tiny_run.run_dir), "--out", str(out), timeout_s=900)
    assert done.returncode == 0, done.stderr[-3000:]
    card = " ".join((out / "README.md").read_text().split())
    assert "`rlvr serve-vllm PATH/TO/THIS/DIR`" in card
    port = free_port()
    key = "serve-vllm-test-key-123"
    served = warm.start(
        "rlvr.cli.main", "serve-vllm", str(out), "--port", str(port), env={KEY_ENV: key}
    )
    prompts = [
        [{"role": "user", "content": f"What is {a}+{b}? Answer with only the number."}]
        for a, b in [(17, 25), (3, 4), (120, 7)]
    ]
    max_tokens = json.loads((tiny_run.run_dir / "config.json").read_text())["max_tokens"]
    try:
        url = f"http://127.0.0.1:{port}/v1"
        headers = {"Authorization": f"Bearer {key}"}
        deadline = time.monotonic() + 900
        while True:
            assert served.poll() is None, "vLLM exited before it answered"
            try:
                if httpx.get(f"{url}/models", headers=headers, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "vLLM did not start in time"
            time.sleep(2)
        answers: list[Any] = []
        for messages in prompts:
            reply = httpx.post(
                f"{url}/chat/completions",
                headers=headers,
                json={
                    "model": out.name,
                    "messages": messages,
                    "temperature": 0,
                    "max_tokens": max_tokens,
                },
                timeout=300,
            )
            assert reply.status_code == 200, reply.text
            answers.append(reply.json()["choices"][0]["message"]["content"])
        assert answers == greedy_completions(out, prompts, max_tokens)
        served.send_signal(signal.SIGINT)
        served.wait(120)
    finally:
        served.close()
        shutil.rmtree(out, ignore_errors=True)

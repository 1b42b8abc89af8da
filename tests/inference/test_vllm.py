"""vLLM serves the policy (rlvr.inference): real vLLM servers from `make vllm-env`'s environment.

One owner process starts two servers for the module (their start is the cost: tens of seconds
each on a quiet machine) and the tests share them: as `inference.urls` for a 2-step training run
(each step's adapter reaches both; the adapter served after step 2 is step 2's), for the
fail-over (one killed mid-step), and last for the owner's death (SIGKILL: both groups go). One
`rlvr train math inference=vllm` starts a server of its own and must leave nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

from rlvr.config import ConfigError, parse_overrides
from rlvr.engine.models import resolve_model
from rlvr.engine.server import ServerThread
from rlvr.inference.errors import InferenceError
from rlvr.inference.server import PYTHON_ENV, ServerSpec, VllmServer, group_rss_bytes
from rlvr.inference.servers import Endpoint, VllmServers, create_router, served_base_name
from rlvr.inference.supervise import GROUP_LINE
from rlvr.metrics import VllmMetric
from tests.helpers.repo import ROOT

START_TIMEOUT_S = 1200  # two servers starting side by side on 2 busy cores

# The owner: starts `n` servers side by side, writes their addresses, then waits for its stdin to
# close (or to be killed). Its servers watch it the way they watch a training run.
OWNER = """
import json, secrets, sys, threading
from pathlib import Path
from rlvr.inference.server import ServerSpec, VllmServer
from rlvr.engine.models import resolve_model

out, count = Path(sys.argv[1]), int(sys.argv[2])
spec = ServerSpec(model_dir=resolve_model("smollm2-135m"))
servers = [None] * count
key = secrets.token_urlsafe(32)  # one key for both: inference.urls reads one variable
def start(i):
    servers[i] = VllmServer.start(spec, out.parent / f"server-{i}.log", timeout_s=1200, key=key)
threads = [threading.Thread(target=start, args=(i,)) for i in range(count)]
for t in threads: t.start()
for t in threads: t.join()
info = [{"url": s.url, "key": s.key, "pgid": s.process.pid, "startup_s": s.startup_s} for s in servers]
out.write_text(json.dumps(info))
sys.stdin.read()
"""


class Started(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    key: str
    pgid: int
    startup_s: float


class Owner(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    process: subprocess.Popen[bytes]
    servers: list[Started]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies aside)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def logged_group(log: Path) -> int:
    """The process group a server's supervisor wrote into its log."""
    lines = log.read_text().splitlines()
    return int(next(line for line in lines if line.startswith(GROUP_LINE)).split()[-1])


def wait_gone(pgid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture(scope="module")
def owner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Owner]:
    folder = tmp_path_factory.mktemp("vllm-owner")
    out = folder / "servers.json"
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(out), "2"],
        stdin=subprocess.PIPE,
        stderr=(folder / "owner.log").open("wb"),
        cwd=ROOT,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not out.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            log = (folder / "owner.log").read_text()[-2000:]
            pytest.fail(f"the vLLM servers did not start: {log}")
        time.sleep(1)
    servers = [Started(**s) for s in json.loads(out.read_text())]
    yield Owner(process=process, servers=servers)
    process.kill()  # whatever the tests left (test_servers_die_with_their_owner did it already)
    process.wait()


def chat(url: str, key: str, model: str, content: str, **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": content}], **extra},
        timeout=600,
    )


# ---------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (["inference=foo"], "inference.engine='foo'"),
        (["inference.urls=[ftp://a:1]"], "is not an http:// or https:// URL"),
        (["inference=vllm", "backend=tinker"], "it needs backend=local"),
        (["inference=rlvr", "inference.urls=[http://127.0.0.1:1]"], "needs inference.engine=vllm"),
        (["judge=vllm"], "judge=vllm asks the run's own vLLM servers: it needs inference=vllm"),
    ],
)
def test_bad_inference_config_is_one_line(pairs: list[str], says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_overrides(pairs)
    assert says in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("pairs", "engine", "urls"),
    [
        (["inference=vllm"], "vllm", ()),
        (["inference.urls=[http://127.0.0.1:1,http://127.0.0.1:2/v1]"], "vllm", ("a", "b")),
        (['inference.urls=["http://127.0.0.1:1"]'], "vllm", ("a",)),
        (["inference.urls=[]"], "rlvr", ()),
    ],
)
def test_inference_config(pairs: list[str], engine: str, urls: tuple[str, ...]) -> None:
    cfg = parse_overrides(pairs).inference
    assert cfg.engine == engine and len(cfg.urls) == len(urls)
    assert all(u.startswith("http://127.0.0.1:") for u in cfg.urls)


# ---------------------------------------------------------------------------------- lifetime

# An owner that starts a supervised process tree (a shell with two children) and then waits.
SUPERVISED_OWNER = """
import subprocess, sys
from rlvr.inference.server import SUPERVISOR
child = subprocess.Popen(
    [sys.executable, str(SUPERVISOR), "sh", "-c", "sleep 300 & sleep 300"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
)
print(child.stdout.readline().decode().split()[-1], flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("how", ["owner killed", "owner closes its pipe"])
def test_supervised_group_ends_with_its_owner(how: str) -> None:
    """The supervisor ends its whole group (grandchildren too) when the owner's pipe closes:
    the owner exiting cleanly or SIGKILLed alike."""
    owner = subprocess.Popen(
        [sys.executable, "-c", SUPERVISED_OWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert owner.stdout is not None and owner.stdin is not None
    group = int(owner.stdout.readline())
    assert group_alive(group)
    if how == "owner killed":
        owner.kill()
    else:
        owner.stdin.close()
    owner.wait()
    assert wait_gone(group, timeout_s=20)


# ---------------------------------------------------------------------------------- bad inputs


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("case", ["no interpreter", "exits at start", "not a model dir"])
def test_server_that_cannot_start_is_one_line(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection for the launcher: the named interpreter is missing, or exits at once
    saying why (its last log line is the message), or the model directory is no model."""
    model_dir = resolve_model("smollm2-135m")
    if case == "no interpreter":
        monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "missing" / "python"))
        says = "no such interpreter"
    elif case == "exits at start":
        fake = tmp_path / "python"
        fake.write_text(
            "#!/bin/sh\necho 'loading...'\necho 'ValueError: no such model here' >&2\nexit 3\n"
        )
        fake.chmod(0o755)
        monkeypatch.setenv(PYTHON_ENV, str(fake))
        says = "exited (3) while starting; its log"
    else:
        model_dir = tmp_path
        says = "not a model directory"
    with pytest.raises(InferenceError) as raised:
        VllmServer.start(ServerSpec(model_dir=model_dir), tmp_path / "server.log", timeout_s=60)
    message = str(raised.value)
    assert says in message and "\n" not in message
    if case == "exits at start":
        assert message.endswith("ValueError: no such model here")


@pytest.mark.slow
@pytest.mark.vllm
def test_model_vllm_cannot_load_is_one_line(tmp_path: Path) -> None:
    """A real vLLM given a model directory of an architecture it does not know: the launcher's
    one line names the log and quotes its last line; nothing of the server stays."""
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text(
        json.dumps({"architectures": ["NoSuchForCausalLM"], "model_type": "nosuch"})
    )
    log = tmp_path / "server.log"
    with pytest.raises(InferenceError) as raised:
        VllmServer.start(ServerSpec(model_dir=bad), log, timeout_s=900)
    message = str(raised.value)
    assert "exited" in message and str(log) in message and "\n" not in message
    assert wait_gone(logged_group(log))


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("case", ["unreachable", "no key", "wrong key"])
def test_bad_urls_are_one_line(case: str, owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    url = "http://127.0.0.1:9" if case == "unreachable" else owner.servers[0].url
    key = {"no key": "", "wrong key": "not-the-key"}.get(case, "x")
    says = {
        "unreachable": "does not answer",
        "no key": "set RLVR_INFERENCE_API_KEY",
        "wrong key": "refused the key (401)",
    }[case]
    monkeypatch.setenv("RLVR_INFERENCE_API_KEY", key)
    from rlvr.inference.backend import LocalVllmBackend

    cfg = parse_overrides([f"inference.urls=[{url}]"])
    backend = LocalVllmBackend(path="/nonexistent", inference=cfg.inference)
    with pytest.raises(InferenceError) as raised:
        backend._open_endpoints(None)  # type: ignore[arg-type]  # servers are checked first
    assert says in str(raised.value) and "\n" not in str(raised.value)


# ---------------------------------------------------------------------------------- servers


@pytest.mark.slow
@pytest.mark.vllm
def test_servers_are_local_and_keyed(owner: Owner) -> None:
    for server in owner.servers:
        assert server.url.startswith("http://127.0.0.1:")
        no_key = httpx.get(f"{server.url}/v1/models", timeout=30)
        assert no_key.status_code == 401
        assert served_base_name(server.url, server.key) == "base"
        assert group_rss_bytes(server.pgid) > 100 * 2**20  # the server and its engine core


TRAIN = {
    "task": "math",
    "task_options": {"difficulty": "easy", "num_items": 40},
    "group_size": 4,
    "groups_per_batch": 2,
    "max_steps": 2,
    "eval_every": 1,
    "max_tokens": 16,
    "judge": "none",
    "learning_rate": 3e-3,  # far enough in 2 steps that step 2's logprobs differ from base's
    "stopping.on_divergence": "warn",  # refills (the default) give every step a group to train
    "preflight": False,
}
PROBE = "What is 7+5? Answer with only the number."


def greedy(url: str, key: str, model: str) -> list[float]:
    """The sampled-token logprobs of a greedy answer to PROBE."""
    response = chat(url, key, model, PROBE, max_tokens=12, temperature=0, logprobs=True)
    assert response.status_code == 200, response.text
    return [t["logprob"] for t in response.json()["choices"][0]["logprobs"]["content"]]


@pytest.fixture(scope="module")
def trained(owner: Owner, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step run sampled from both servers (inference.urls)."""
    from rlvr.config import RunConfig
    from rlvr.training import run_training

    os.environ["RLVR_INFERENCE_API_KEY"] = owner.servers[0].key
    run_dir = tmp_path_factory.mktemp("vllm-run") / "math-vllm"
    urls = [s.url for s in owner.servers]
    cfg = RunConfig.model_validate({**TRAIN, "inference": {"urls": urls}, "run_dir": run_dir})
    asyncio.run(run_training(cfg))
    return run_dir


def rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "train/reward_mean" in r]


def checkpoint(run_dir: Path, step: int) -> Path:
    from rlvr.runs import layout

    return layout.policy_dir(run_dir, "rlvr") / "checkpoints" / f"{step:04d}"


def reference_logprobs(prompt: str, completion_ids: list[int], adapter: Path | None) -> list[float]:
    """Logprobs of `completion_ids` after `prompt` under transformers (+ peft's adapter)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter)
    prompt_ids = list(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
    )
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    picked = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion_ids)[:, None])
    return [float(x) for x in picked[:, 0]]


def served(url: str, key: str, model: str) -> tuple[list[int], list[float]]:
    """vLLM's greedy answer to PROBE: its token ids and their logprobs."""
    response = chat(url, key, model, PROBE, max_tokens=12, temperature=0, logprobs=True)
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["logprobs"]["content"]
    ids = [int(t["token"].removeprefix("token_id:")) for t in content]
    return ids, [t["logprob"] for t in content]


@pytest.mark.slow
@pytest.mark.vllm
def test_each_step_adapter_reaches_every_server(owner: Owner, trained: Path) -> None:
    table = rows(trained)
    assert [r["step"] for r in table] == [1, 2]
    for row in table:
        assert row[VllmMetric.SERVERS] == 2 and row[VllmMetric.RETRIED] == 0
        assert row[VllmMetric.ADAPTER_LOAD_S] > 0
        assert VllmMetric.STARTUP_S not in row  # servers it did not start
    for server in owner.servers:
        listed = httpx.get(
            f"{server.url}/v1/models", headers={"Authorization": f"Bearer {server.key}"}
        ).json()["data"]
        assert f"{trained.name}@2" in {m["id"] for m in listed}


@pytest.mark.slow
@pytest.mark.vllm
def test_served_adapter_is_step_twos(owner: Owner, trained: Path) -> None:
    """vLLM's `run@2` gives the logprobs transformers + peft give with step 2's checkpoint, and
    not the base weights' (training moved them)."""
    server = owner.servers[0]
    ids, vllm_step2 = served(server.url, server.key, f"{trained.name}@2")
    step2 = reference_logprobs(PROBE, ids, checkpoint(trained, 2))
    base = reference_logprobs(PROBE, ids, None)
    assert max(abs(a - b) for a, b in zip(vllm_step2, step2, strict=True)) < 0.05
    assert max(abs(a - b) for a, b in zip(vllm_step2, base, strict=True)) > 0.1


@pytest.mark.slow
@pytest.mark.vllm
def test_logprob_mismatch_is_reported(trained: Path) -> None:
    """train/mismatch_kl: vLLM's sampled logprobs against the trainer's for the same weights;
    two engines agree closely, never exactly."""
    for row in rows(trained):
        kl = row[VllmMetric.MISMATCH_KL]
        assert math.isfinite(kl) and 0 <= kl < 0.05
        assert row["train/sampler_kl"] == kl


@pytest.mark.slow
@pytest.mark.vllm
def test_the_judge_asks_the_run_servers_with_guided_decoding(owner: Owner) -> None:
    """judge=vllm: the judge client asks the base weights (`run@0`) through the run's router;
    vLLM decodes each reply by its JSON schema, so even the 135M model answers in shape, first
    time, every time."""
    from judges.client import JudgeClient, JudgeSettings
    from rlvr.types import ServedJudge

    cfg = parse_overrides(["inference=vllm", "judge=vllm", "judge.max_retries=0"])
    endpoints = [Endpoint(s.url, s.key, "base", None) for s in owner.servers]
    vllm_servers = VllmServers("m", endpoints, lambda step: Path("/nonexistent"), lambda: 0)
    router = ServerThread(create_router(vllm_servers, "router-key"))
    router.start()
    judge = JudgeClient(JudgeSettings.from_config(cfg))
    assert isinstance(judge, ServedJudge)
    judge.serve_from(router.base_url, "router-key", "m@0")
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["correct", "wrong"]},
            "score": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["verdict", "score"],
        "additionalProperties": False,
    }

    def parse(value: Any) -> tuple[tuple[str, int], int]:
        assert isinstance(value, dict) and set(value) == {"verdict", "score"}, value
        return (value["verdict"], value["score"]), 0

    async def ask() -> list[Any]:
        question = [{"role": "user", "content": "Is 7+5=12? Judge it."}]
        return await asyncio.gather(
            *(
                judge.complete(question, name="verdict", schema=schema, parse=parse)
                for _ in range(4)
            )
        )

    try:
        replies = asyncio.run(ask())
    finally:
        router.stop()
    for reply in replies:
        verdict, score = reply.value
        assert verdict in ("correct", "wrong") and 0 <= score <= 9
        assert reply.attempts == 1 and reply.cost_usd == 0.0
        # compact JSON (no whitespace between fields): a few tokens, not a context of newlines
        assert reply.completion_tokens < 40, reply.completion_tokens
    counts = judge.pop_metrics()
    assert counts["judge/calls"] == 4 and counts["judge/retries"] == 0


@pytest.mark.slow
@pytest.mark.vllm
def test_a_server_killed_mid_step(owner: Owner) -> None:
    """16 requests over two servers; one server is SIGKILLed while it answers: every request is
    answered by the other, the re-sent ones are counted, the loss is said once."""
    endpoints = [Endpoint(s.url, s.key, "base", None) for s in owner.servers]
    vllm_servers = VllmServers("m", endpoints, lambda step: Path("/nonexistent"), lambda: 0)
    router = ServerThread(create_router(vllm_servers, "router-key"))
    router.start()
    victim = owner.servers[1]

    async def requests() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=600) as client:
            body = {"model": "m@0", "messages": [{"role": "user", "content": PROBE}]}
            sent = [
                asyncio.create_task(
                    client.post(
                        f"{router.base_url}/chat/completions",
                        headers={"Authorization": "Bearer router-key"},
                        json={**body, "max_tokens": 48, "ignore_eos": True, "seed": i},
                    )
                )
                for i in range(16)
            ]
            while endpoints[1].outstanding == 0:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # mid-answer
            os.killpg(victim.pgid, signal.SIGKILL)
            return await asyncio.gather(*sent)

    try:
        answers = asyncio.run(requests())
    finally:
        router.stop()
    assert [a.status_code for a in answers] == [200] * 16
    assert vllm_servers.retried >= 1 and vllm_servers.lost == [victim.url.rstrip("/")]
    assert wait_gone(victim.pgid)
    # With no server left a request fails with one line naming the lost ones.
    alone = VllmServers(
        "m",
        [Endpoint(victim.url, victim.key, "base", None)],
        vllm_servers.checkpoint_dir,
        lambda: 0,
    )
    status, body = asyncio.run(_forward(alone))
    assert (
        status == 503 and body["error"]["message"] == f"no vLLM server is left (lost: {victim.url})"
    )


async def _forward(vllm_servers: VllmServers) -> tuple[int, Any]:
    async with httpx.AsyncClient(timeout=60) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        return await vllm_servers.forward(client, "chat/completions", body)


@pytest.mark.slow
@pytest.mark.vllm
def test_servers_die_with_their_owner(owner: Owner) -> None:
    """SIGKILL the owner (no cleanup of its own runs): every server group it started goes."""
    owner.process.kill()
    owner.process.wait()
    for server in owner.servers:
        assert wait_gone(server.pgid, timeout_s=30), f"group {server.pgid} outlived its owner"


# ---------------------------------------------------------------------------------- the CLI


def rlvr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("rlvr")), *args],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


TINY_ARGS = [
    "difficulty=easy",
    "num_items=40",
    "group_size=4",
    "groups_per_batch=2",
    "max_tokens=16",
    "eval_every=1",
    "judge=none",
    "preflight=false",
    "stopping.on_divergence=warn",
]


@pytest.mark.slow
@pytest.mark.vllm
def test_cli_server_that_exits_is_exit_2(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'RuntimeError: cannot load this model' >&2\nexit 1\n")
    fake.chmod(0o755)
    done = rlvr(
        "train",
        "math",
        "inference=vllm",
        "max_steps=1",
        f"run_dir={tmp_path / 'run'}",
        *TINY_ARGS,
        env={PYTHON_ENV: str(fake)},
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "vLLM server exited (1) while starting" in last
    assert last.endswith("RuntimeError: cannot load this model")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.vllm_run
def test_cli_train_math_inference_vllm(tmp_path: Path) -> None:
    """`rlvr train math inference=vllm max_steps=3`: rlvr starts a server, samples every step
    from it, and stops it with the run."""
    run_dir = tmp_path / "run"
    done = rlvr("train", "math", "inference=vllm", "max_steps=3", f"run_dir={run_dir}", *TINY_ARGS)
    assert done.returncode == 0, done.stderr[-3000:]
    table = rows(run_dir)
    assert [r["step"] for r in table] == [1, 2, 3]
    for row in table:  # every row, whether its step trained or found no group to train on
        assert row[VllmMetric.STARTUP_S] > 0 and row[VllmMetric.RSS_GB] > 0.1
        assert row[VllmMetric.SERVERS] == 1
    trained = [r for r in table if r["train/trained_groups"]]
    assert trained and all(math.isfinite(r[VllmMetric.MISMATCH_KL]) for r in trained)
    group = logged_group(run_dir / "vllm-server.log")
    assert wait_gone(group, timeout_s=10), "the run's vLLM server outlived it"

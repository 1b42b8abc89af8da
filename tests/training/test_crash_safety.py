"""Crash safety: atomic writers, torn metrics lines, incomplete checkpoints, policy rewind; a real
training run SIGKILLed at each fault point (tests/helpers/faults.py) and resumed with --resume;
servers that never outlive a killed owner and bind 127.0.0.1 only.

The fault chain is ONE run directory (math, 3 steps, evaluation at 0, 2 and 3): a fresh run is
killed during step 2's rollouts, each resume is killed at the next point of step 2 (optimizer,
checkpoint write, metrics append), the last resume finishes. Every kill is checked for what it
left on disk, the end for a continuous history. The scorer gives 0 and 1 inside every group, so
every step trains and the policy step equals the loop step: a step lost or done twice shows. The
policy is the tiny random model (`tiny_model`): what is checked is what a kill leaves on disk.
Each process of the chain is a real `rlvr train`, forked from a warm process
(tests/helpers/warm.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import atomic, store
from rlvr.runs.records import StepRow, parse_row
from rlvr.training.backends import ART_DIR, rewind_policy
from tests.helpers import faults, warm
from tests.helpers.repo import ROOT
from tests.helpers.tiny_runs import tiny_model_path

MARK = "RLVR_CRASH_TEST_MARK"  # in the environment of every process a launched run starts

# --- unit: atomic writers -------------------------------------------------------------------


def test_write_text_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    atomic.write_text(path, "old")
    atomic.write_text(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


@pytest.mark.parametrize("make", ["file", "dir"])
def test_a_failed_write_keeps_the_old_content(tmp_path: Path, make: str) -> None:
    target = tmp_path / "target"
    if make == "file":
        atomic.write_text(target, "old")
        writer = atomic.writing(target)
    else:
        target.mkdir()
        (target / "w").write_text("old")
        writer = atomic.writing_dir(target)
    with pytest.raises(RuntimeError, match="boom"), writer as tmp:
        (tmp if make == "file" else tmp / "w").write_text("half")
        raise RuntimeError("boom")
    assert (target if make == "file" else target / "w").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_writing_dir_replaces_a_directory_whole(tmp_path: Path) -> None:
    target = tmp_path / "0003"
    target.mkdir()
    (target / "stale").write_text("x")
    with atomic.writing_dir(target) as tmp:
        assert tmp.name == ".0003.tmp" and not tmp.name.isdigit()  # never a step's name
        (tmp / "adapter").write_text("a")
    assert sorted(p.name for p in target.iterdir()) == ["adapter"]


def test_remove_leftovers_takes_only_temporaries(tmp_path: Path) -> None:
    (tmp_path / ".metrics.jsonl.tmp").write_text("half")
    (tmp_path / ".0002.tmp").mkdir()
    (tmp_path / "0001").mkdir()
    (tmp_path / ".hidden").write_text("kept")
    removed = atomic.remove_leftovers(tmp_path)
    assert sorted(p.name for p in removed) == [".0002.tmp", ".metrics.jsonl.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "0001"]


def test_save_checkpoint_copies_whole(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "adapter_config.json").write_text("{}")
    for _ in range(2):  # the second copy replaces the first
        target = store.save_checkpoint(tmp_path / "run", source, "best")
    assert sorted(p.name for p in target.iterdir()) == ["adapter_config.json"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["best"]


def test_parquet_is_written_atomically(tmp_path: Path) -> None:
    path = store.write_trajectories(tmp_path, "step-0001", [])
    assert path.is_file()
    assert sorted(p.name for p in path.parent.iterdir()) == ["step-0001.parquet"]


# --- unit: metrics.jsonl --------------------------------------------------------------------

ROW1 = '{"step": 1, "train/reward_mean": 0.5}'
ROW2 = '{"step": 2, "train/reward_mean": 0.25}'


@pytest.mark.parametrize(
    ("text", "steps", "torn"),
    [
        (f"{ROW1}\n{ROW2}\n", [1, 2], 0),
        (f"{ROW1}\n", [1], 0),
        ("", [], 0),
        (f"{ROW1}\n\n{ROW2}\n", [1, 2], 0),  # a blank line is nothing
        (f'{ROW1}\n{{"step": 2, "train/rew', [1], 2),  # killed mid-line
        (f"{ROW1}\n{ROW2}", [1], 2),  # complete JSON but no newline: not yet a row
        (f"{ROW1}\n{{garbage}}\n", [1], 2),  # an unparsable last line
    ],
    ids=["whole", "one", "empty", "blank", "torn", "unterminated", "garbage"],
)
def test_parse_metrics_finds_a_torn_last_line(text: str, steps: list[int], torn: int) -> None:
    rows, found = store.parse_metrics(text)
    assert [r.step for r in rows] == steps and found == torn


@pytest.mark.parametrize("bad", ['{"step": 2, "tr', "[1]"], ids=["unparsable", "not-object"])
def test_a_bad_line_before_the_last_is_an_error_naming_file_and_line(
    tmp_path: Path, bad: str
) -> None:
    (tmp_path / store.METRICS).write_text(f"{ROW1}\n{bad}\n{ROW2}\n")
    with pytest.raises(store.MetricsError, match=r"metrics\.jsonl:2: "):
        store.read_metrics(tmp_path)


def test_a_complete_last_line_that_is_not_an_object_is_an_error(tmp_path: Path) -> None:
    """A kill leaves an unterminated line; a terminated non-object is corruption, not a kill."""
    (tmp_path / store.METRICS).write_text(f"{ROW1}\n[1, 2]\n")
    with pytest.raises(
        store.MetricsError, match=r"metrics\.jsonl:2: expected a JSON object, got list"
    ):
        store.read_metrics(tmp_path)


def test_a_torn_line_is_dropped_with_a_warning_and_cut_on_recover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store.append_metrics(tmp_path, parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5}))
    with (tmp_path / store.METRICS).open("a") as f:
        f.write('{"step": 2, "train/rew')
    assert [r.step for r in store.read_metrics(tmp_path)] == [1]
    assert f"{tmp_path / store.METRICS}:2: dropped an incomplete last line" in caplog.text
    assert [r.step for r in store.recover(tmp_path)] == [1]
    store.append_metrics(
        tmp_path, parse_row({M.STEP: 2, M.REWARD_MEAN: 0.25})
    )  # lands on a clean line
    caplog.clear()
    assert [r.step for r in store.read_metrics(tmp_path)] == [1, 2]
    assert "incomplete" not in caplog.text


def test_recover_removes_temporaries_and_trajectories_of_unrecorded_steps(tmp_path: Path) -> None:
    store.append_metrics(tmp_path, parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5}))
    for name in ("step-0001", "step-0002", "val-0000"):
        store.write_trajectories(tmp_path, name, [])
    (tmp_path / ".summary.json.tmp").write_text("{")
    (tmp_path / store.CHECKPOINTS / ".step-0002.tmp").mkdir(parents=True)
    store.recover(tmp_path)
    kept = sorted(p.name for p in (tmp_path / store.TRAJECTORIES).iterdir())
    assert kept == ["step-0001.parquet", "val-0000.parquet"]
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize(
    ("spec", "point", "step", "hit"),
    [
        (None, "metrics", 2, False),
        ("metrics:2", "metrics", 2, True),
        ("metrics:2", "metrics", 3, False),
        ("metrics:2", "checkpoint", 2, False),
    ],
)
def test_fault_spec(monkeypatch, spec, point, step, hit) -> None:
    if spec is None:
        monkeypatch.delenv(faults.FAULT_ENV, raising=False)
    else:
        monkeypatch.setenv(faults.FAULT_ENV, spec)
    assert faults.armed(faults.FaultPoint(point), step) is hit


# --- unit: the policy's checkpoints agree with metrics.jsonl on resume -----------------------


def checkpoint_root(run_dir: Path, cfg: RunConfig) -> Path:
    return run_dir / ART_DIR / cfg.project / "models" / run_dir.name / "checkpoints"


def make_checkpoints(root: Path, steps: list[int]) -> None:
    for step in steps:
        (root / f"{step:04d}").mkdir(parents=True)
        (root / f"{step:04d}" / "adapter_model.safetensors").write_text("w")


@pytest.mark.parametrize(
    ("stored", "recorded", "removed", "left"),
    [
        ([0, 1, 2], 1, [2], [0, 1]),  # killed after step 2's checkpoint, before its row
        ([0, 1], 1, [], [0, 1]),  # killed before the checkpoint: nothing to undo
        ([1, 3, 4, 5], 4, [5], [1, 3, 4]),  # older ones pruned by the run itself
        ([], 0, [], []),  # killed before the first checkpoint
    ],
)
def test_rewind_removes_checkpoints_newer_than_the_last_row(
    tmp_path: Path, stored, recorded, removed, left
) -> None:
    cfg = RunConfig()
    run_dir = tmp_path / "run"
    root = checkpoint_root(run_dir, cfg)
    make_checkpoints(root, stored)
    (root / ".0006.tmp").mkdir(parents=True)  # an interrupted write
    assert rewind_policy(cfg, run_dir, recorded) == removed
    on_disk = sorted(int(p.name) for p in root.iterdir()) if root.exists() else []
    assert on_disk == left


def test_rewind_refuses_a_missing_recorded_checkpoint(tmp_path: Path) -> None:
    cfg = RunConfig()
    make_checkpoints(checkpoint_root(tmp_path, cfg), [0, 1])
    with pytest.raises(FileNotFoundError, match="no checkpoint of policy step 2"):
        rewind_policy(cfg, tmp_path, 2)


def test_rewind_leaves_remote_backends_alone(tmp_path: Path) -> None:
    cfg = RunConfig(backend="tinker")
    make_checkpoints(checkpoint_root(tmp_path, cfg), [0, 1, 2])
    assert rewind_policy(cfg, tmp_path, 0) == []


# --- unit: ports ----------------------------------------------------------------------------


async def test_a_taken_judge_port_is_a_clear_error(tmp_path: Path) -> None:
    from judges.local import LocalJudge, LocalJudgeSettings, ServerProcessError

    with socket.socket() as stale:
        stale.bind(("127.0.0.1", 0))
        stale.listen()
        port = stale.getsockname()[1]
        local_judge = LocalJudge(LocalJudgeSettings(threads=1, port=port))
        with pytest.raises(ServerProcessError, match=f"port {port} on 127.0.0.1 is already taken"):
            await local_judge.ensure_started()
        assert not local_judge.running
    # Nothing of ours listens there now (another xdist worker may be given the number later).
    assert not [pid for pid in listeners({port}) if os.getpid() in (pid, parent_of(pid))]


def test_a_taken_policy_port_is_a_clear_error() -> None:
    from rlvr.engine.server import ServerThread, create_app

    with socket.socket() as stale:
        stale.bind(("127.0.0.1", 0))
        stale.listen()
        port = stale.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"cannot bind 127.0.0.1:{port}"):
            ServerThread(create_app(lambda name: None, lambda: []), port=port)


@pytest.mark.parametrize("port", [None, "free"], ids=["any", "given"])
def test_both_servers_are_configured_for_loopback_only(port: str | None) -> None:
    from judges.local import HOST, listen
    from rlvr.engine.server import HOST as POLICY_HOST
    from rlvr.engine.server import ServerThread, create_app

    if port == "free":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    judge = listen(port)  # the judge child serves on the socket its parent bound
    try:
        assert judge.getsockname()[0] == HOST == POLICY_HOST == "127.0.0.1"
        assert port is None or judge.getsockname()[1] == port
    finally:
        judge.close()
    server = ServerThread(create_app(lambda name: None, lambda: []))
    try:
        assert server._socket.getsockname()[0] == "127.0.0.1"
    finally:
        server._socket.close()


# --- /proc helpers (no psutil) --------------------------------------------------------------


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state, parent, group, session, ...
    (empty when the process is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def live_processes() -> dict[int, list[str]]:
    """pid -> stat_fields for every live process (zombies hold nothing: no socket, no memory)."""
    every = {int(p.name): stat_fields(int(p.name)) for p in Path("/proc").glob("[0-9]*")}
    return {pid: fields for pid, fields in every.items() if fields and fields[0] != "Z"}


def marked_processes(token: str) -> list[int]:
    """Live processes whose environment carries MARK=token (a launched run and its children)."""
    return [pid for pid in live_processes() if is_marked(pid, token)]


def session_members(session: int) -> list[int]:
    """Live processes of a session (a forked run and whatever it forked without exec)."""
    return [pid for pid, fields in live_processes().items() if int(fields[3]) == session]


def wait_gone(find: Callable[[], list[int]], timeout_s: float = 15.0) -> list[int]:
    """What `find` still lists after waiting up to `timeout_s` for it to list nothing."""
    deadline = time.monotonic() + timeout_s
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of the TCP sockets process `pid` listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.append((_address(address), int(port, 16)))
    return found


def listeners(ports: set[int]) -> dict[int, int]:
    """pid -> port for the processes listening on any of `ports` over TCP, from /proc."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            hits = [port for _, port in listening_sockets(int(proc.name)) if port in ports]
        except OSError:  # gone, or not ours to read
            continue
        if hits:
            found[int(proc.name)] = hits[0]
    return found


def parent_of(pid: int) -> int:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else 0


def is_marked(pid: int, token: str) -> bool:
    try:
        return f"{MARK}={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:  # IPv4, little-endian
        return socket.inet_ntoa(bytes.fromhex(hex_address)[::-1])
    words = [bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, 32, 8)]
    return socket.inet_ntop(socket.AF_INET6, b"".join(words))


# --- slow: servers die with a SIGKILLed owner -----------------------------------------------

# The owner's local judge serves the tiny random model (its argument): where the servers bind
# and that they die with their owner is the claim, not what the judge answers.
OWNER = """
import asyncio, json, sys
from judges import open_judge
from rlvr.config import RunConfig
from rlvr.engine.server import ServerThread, create_app

async def main():
    server = ServerThread(create_app(lambda name: None, lambda: []))
    server.start()
    settings = {"model": "local", "local_model": sys.argv[1]}
    async with open_judge(RunConfig(judge=settings)) as judge:
        judge_url = await judge.api_base()
        print(json.dumps({"judge": judge_url, "policy": server.base_url}), flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.slow
def test_servers_bind_loopback_and_die_with_a_sigkilled_owner() -> None:
    token = uuid.uuid4().hex
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tiny_model_path())],
        cwd=ROOT,
        env={**os.environ, MARK: token},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        urls = json.loads(owner.stdout.readline())
        ports = {_port(urls["judge"]), _port(urls["policy"])}
        processes = marked_processes(token)
        assert len(processes) == 2, processes  # the owner and its judge server
        sockets = [s for pid in processes for s in listening_sockets(pid)]
        assert ports <= {port for _, port in sockets}
        assert {address for address, _ in sockets} == {"127.0.0.1"}, sockets
        serving = listeners(ports)  # what the stale-server check below looks for
        assert set(serving.values()) == ports and all(is_marked(p, token) for p in serving)
        os.kill(owner.pid, signal.SIGKILL)  # no cleanup runs: only PR_SET_PDEATHSIG is left
        owner.wait(timeout=30)
        assert wait_gone(lambda: marked_processes(token)) == [], "a server outlived its owner"
        # The next run meets no stale server: no process of the killed run listens on those
        # ports. (Not "nobody listens": under xdist another worker's new server may be given the
        # freed port number a moment later; a bind test fails the same way on client ports.)
        stale = {pid: port for pid, port in listeners(ports).items() if is_marked(pid, token)}
        assert stale == {}, stale
    finally:
        if owner.poll() is None:
            owner.kill()


# --- slow: a real run killed at each point and resumed ---------------------------------------

SCORER = '''
def alternate(group, item):
    """0 and 1 inside every group: every step has a learning signal, so every step trains."""
    return [float(i % 2) for i in range(len(group.trajectories))]
'''
RUN = {
    "difficulty": "easy",
    "num_items": 10,  # 8 train / 1 val / 1 test
    "group_size": 2,
    "groups_per_batch": 1,
    "max_tokens": 6,
    "max_steps": 3,
    "eval_every": 2,  # evaluations at 0, 2 and 3
    "judge": "none",
    "stopping.on_divergence": "warn",
}
FAULTS = [  # (point, step): the chain's kills, in order; each resume dies at the next
    (faults.FaultPoint.ROLLOUTS, 2),
    (faults.FaultPoint.OPTIMIZER, 2),
    (faults.FaultPoint.CHECKPOINT, 2),
    (faults.FaultPoint.METRICS, 2),
]


class Launch(BaseModel):
    """One process of the chain and what it left behind."""

    model_config = ConfigDict(frozen=True)

    returncode: int
    stdout: str
    stderr: str
    metrics_text: str
    checkpoints: list[str]  # entries of the policy's checkpoint folder
    parquets: list[str]
    orphans: list[int]
    seconds: float


class Chain(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_dir: Path
    kills: dict[str, Launch]
    final: Launch


def launch(run_dir: Path, scorer: Path, model: Path, fault: str | None) -> Launch:
    """One `rlvr train` process of the chain (forked warm: tests/helpers/warm.py)."""
    token = uuid.uuid4().hex
    args = (
        ["--resume", str(run_dir)]
        if (run_dir / store.CONFIG).exists()
        else [
            "math",
            *(f"{k}={v}" for k, v in RUN.items()),
            f"scorer={scorer}:alternate",
            f"model={model}",
            f"run_dir={run_dir}",
        ]
    )
    started = time.monotonic()
    done = warm.rlvr(
        "train",
        *args,
        env={MARK: token} | ({faults.FAULT_ENV: fault} if fault else {}),
        unset=[faults.FAULT_ENV],
    )
    root = checkpoint_root(run_dir, RunConfig())
    metrics = run_dir / store.METRICS
    return Launch(
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr[-4000:],
        metrics_text=metrics.read_text() if metrics.exists() else "",
        checkpoints=sorted(p.name for p in root.iterdir()) if root.is_dir() else [],
        parquets=sorted(p.name for p in (run_dir / store.TRAJECTORIES).glob("*.parquet")),
        orphans=sorted(
            {
                *wait_gone(lambda: session_members(done.pid)),
                *wait_gone(lambda: marked_processes(token)),
            }
        ),
        seconds=time.monotonic() - started,
    )


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Chain:
    folder = tmp_path_factory.mktemp("crash")
    scorer = folder / "alternate.py"
    scorer.write_text(SCORER)
    run_dir = folder / "math-crash"
    kills = {
        str(point): launch(run_dir, scorer, tiny_model, f"{point}:{step}") for point, step in FAULTS
    }
    return Chain(run_dir=run_dir, kills=kills, final=launch(run_dir, scorer, tiny_model, None))


def train_steps(text: str) -> list[int]:
    rows, _ = store.parse_metrics(text)
    return [r.step for r in rows if isinstance(r, StepRow)]


# What each kill leaves: (train steps recorded, torn last line?, policy checkpoint entries)
LEFT_BEHIND = {
    "rollouts": ([1], False, ["0000", "0001"]),
    "optimizer": ([1], False, ["0000", "0001"]),
    "checkpoint": ([1], False, [".0002.tmp", "0000", "0001"]),  # half written, not a step
    "metrics": ([1], True, ["0000", "0001", "0002"]),  # newer than the last row: rewound
}


@pytest.mark.slow
@pytest.mark.parametrize("point", [str(p) for p, _ in FAULTS])
def test_a_kill_at_each_point_leaves_a_resumable_run(chain: Chain, point: str) -> None:
    killed = chain.kills[point]
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stderr}"
    steps, torn, checkpoints = LEFT_BEHIND[point]
    assert train_steps(killed.metrics_text) == steps
    assert bool(store.parse_metrics(killed.metrics_text)[1]) is torn
    assert killed.checkpoints == checkpoints
    assert ("step-0002.parquet" in killed.parquets) is (point == "metrics")
    assert killed.orphans == [], "a process of the killed run outlived it"


@pytest.mark.slow
def test_the_resumed_run_has_a_continuous_history(chain: Chain) -> None:
    final = chain.final
    assert final.returncode == 0, final.stderr
    assert "dropped an incomplete last line" in final.stderr  # the metrics kill's torn line
    rows = [row.on_disk() for row in store.read_metrics(chain.run_dir)]
    train = [r for r in rows if M.REWARD_MEAN in r]
    assert [r[M.STEP] for r in train] == [1, 2, 3]  # every step once, none lost
    assert [r[M.POLICY_STEP] for r in train] == [1, 2, 3]  # the policy agrees, step by step
    assert [r[M.STEP] for r in rows if M.VAL_ACCURACY in r] == [0, 2, 3]
    summary = json.loads((chain.run_dir / store.SUMMARY).read_text())
    assert summary["steps"] == 3 and summary["stop_reason"] == "max_steps"
    parquets = {p.name for p in (chain.run_dir / store.TRAJECTORIES).iterdir()}
    assert {"step-0001.parquet", "step-0002.parquet", "step-0003.parquet", "test.parquet"} <= (
        parquets
    )
    # The start was tested by the first process, beside its baseline validation; the resumed
    # ones read that result back (rlvr.training.state.read_early_tests).
    first = chain.kills[str(FAULTS[0][0])]
    assert "test (start)" in first.stdout
    assert not any("test (start)" in k.stdout for k in [*list(chain.kills.values())[1:], final])
    assert summary["test"]["items"] == 1 and summary["test"]["start"] in (0.0, 1.0)
    assert not list(chain.run_dir.rglob("*.tmp")), "a temporary was left behind"
    assert (chain.run_dir / store.CHECKPOINTS / "best" / "adapter_config.json").is_file()
    assert final.orphans == []
    print({point: round(k.seconds) for point, k in chain.kills.items()}, round(final.seconds))

"""The notebooks, executed headless with nbclient (a failing cell fails the test): the inspection
notebook on the shared tiny run, the quickstart and the tool agent with their own tiny training
runs, on the tiny random model (RLVR_MODEL, which the notebooks read): what is checked is that
every cell runs and shows what it should, not what the policy learns.

Each kernel is the one Jupyter starts (`python -m ipykernel_launcher -f FILE`), forked from the
test worker's warm process (tests/warm) so it skips importing torch, transformers and ART again."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from nbclient import NotebookClient

from rlvr import inspection as ri
from tests.helpers import warm
from tests.helpers.tiny_runs import tiny_model_path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT_S = 900  # the quickstart's training cell on 2 busy cores
LAUNCHED: list[warm.Started] = []  # every kernel started, to check that each was shut down


class WarmProvisioner(LocalProvisioner):
    """Launches the kernel's command in a child forked from the warm process, not exec'd."""

    started: warm.Started | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        _, flag, module, *args = cmd
        assert (flag, module) == ("-m", "ipykernel_launcher"), cmd
        self.started = warm.start(module, *args, env=kwargs["env"], cwd=kwargs["cwd"])
        LAUNCHED.append(self.started)
        self.process = self.started
        self.pid = self.pgid = self.started.pid  # the child leads its own session
        self.cwd = kwargs["cwd"]
        return self.connection_info

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart)
        if self.started is not None:
            self.started.close()


class WarmKernelManager(AsyncKernelManager):
    """Jupyter's kernel manager with the warm provisioner: nbclient owns it and shuts the kernel
    down after the last cell as it would any other."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_id = str(uuid.uuid4())
        self.provisioner = WarmProvisioner(
            kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
        )


def execute(name: str) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel, from the notebooks folder (as Jupyter would); raises
    CellExecutionError naming the failing cell."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        kernel_manager_class=WarmKernelManager,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()
    assert all(kernel.poll() is not None for kernel in LAUNCHED), "a kernel outlived its notebook"
    return notebook


def outputs(notebook: nbformat.NotebookNode) -> str:
    """Every text, HTML and error output of the executed notebook, as one string."""
    parts = []
    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            data = out.get("data", {})
            parts += [str(data.get(kind, "")) for kind in ("text/plain", "text/html")]
            assert out.get("output_type") != "error", out
    return "\n".join(parts)


def images(notebook: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in out.get("data", {}) for c in notebook.cells for out in c.get("outputs", [])
    )


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS.glob("*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code"), path


@pytest.mark.slow
def test_inspect_rollouts_notebook_on_the_tiny_run(tiny_run, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_DIR", str(tiny_run.run_dir))
    notebook = execute("inspect_rollouts.ipynb")
    text = outputs(notebook)
    run = ri.load_run(tiny_run.run_dir)
    frame = ri.trajectories(run)  # the latest training step, which the notebook shows
    assert f"run: {tiny_run.run_dir}\n" in text  # says which run it opened (RLVR_RUN_DIR's)
    assert frame["prompt"][0] in text and frame["item_id"][0] in text  # real rollouts rendered
    assert "train/reward_mean" in text and "signal" in text  # step table, groups
    assert images(notebook) == 2  # report.png and the curves
    for line in ri.story(run):  # the whole story, as report.png and `rlvr inspect` tell it
        assert line in text, line
    found = ri.suspicious(run)
    assert f"shape: ({len(found)}, 8)" in text  # the suspects table as polars shows it


@pytest.mark.slow
def test_quickstart_notebook_trains_and_looks(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("RLVR_MODEL", str(tiny_model_path()))  # the notebook's route, quickly
    notebook = execute("quickstart.ipynb")
    [run_dir] = [p.parent for p in (tmp_path / "runs").glob("*/summary.json")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2
    text = outputs(notebook)
    assert f"stop: {summary['stop_reason']}" in text
    assert ri.trajectories(ri.load_run(run_dir))["prompt"][0] in text
    assert images(notebook) == 1


@pytest.mark.slow
def test_custom_task_notebook_trains_an_inline_task(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("RLVR_MODEL", str(tiny_model_path()))  # the notebook's route, quickly
    notebook = execute("custom_task.ipynb")
    [run_dir] = [p.parent for p in (tmp_path / "runs").glob("inline-adder-*/summary.json")]
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    assert summary["steps"] == 2
    assert config["task"] == "inline-adder" and config["scorer"] == "brevity_bonus"
    text = outputs(notebook)
    assert f"stop: {summary['stop_reason']}" in text
    assert "What is" in text  # the inline task's rollouts rendered


@pytest.mark.slow
def test_tool_agent_notebook_trains_an_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("RLVR_MODEL", str(tiny_model_path()))  # the notebook's route, quickly
    notebook = execute("tool_agent.ipynb")
    [run_dir] = [p.parent for p in (tmp_path / "runs").glob("*/summary.json")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2
    text = outputs(notebook)
    assert f"stop: {summary['stop_reason']}" in text
    assert "LOOKUP: france" in text and "Paris" in text  # the scripted episode, shown
    assert "rollout/tool_calls" in text and "rollout/tool_errors" in text

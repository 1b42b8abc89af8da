"""Optional W&B and Weave integrations, off by default.

- `wandb_project=NAME` logs every metrics row (numbers) and a sample of each step's trajectories
  (a W&B table) to a W&B run. With `WANDB_MODE=offline` everything is written locally under
  WANDB_DIR (default: the run directory) for a later `wandb sync`.
- `weave=true` traces the functions the loop wraps with `Tracker.traced` (rollouts, judge calls)
  with `weave.op`; weave also traces the OpenAI/litellm clients it patches itself.

Neither library is imported unless asked for. An integration that is on but cannot work (not
installed, no credentials, no network) costs one warning and is turned off; it never stops a run.
W&B without credentials logs offline instead (nothing is lost).

The loop's wiring:

    tracker = stack.enter_context(open_tracker(cfg, run_dir))
    session.rollout = tracker.traced(environment.rollout, name="rollout")
    tracker.log_step(row)                       # each metrics row, where it is appended
    tracker.log_trajectories(step, rows)        # each store.trajectory_rows(...) written
"""

from __future__ import annotations

import math
import netrc
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlparse

from rlvr.config import RunConfig
from rlvr.metrics import ALARM_PREFIX, M
from rlvr.redact import redact_error, redact_rows, redact_text

P = ParamSpec("P")
R = TypeVar("R")

SAMPLE_TRAJECTORIES = 16  # rows of each step's W&B table (evenly spread over the groups)
WEAVE_INIT_TIMEOUT_S = 20.0  # weave.init retries a dead network for minutes; we do not wait
WANDB_INIT_TIMEOUT_S = 60.0
OFFLINE_MODES = ("offline", "dryrun", "disabled")
DEFAULT_WANDB_HOST = "https://api.wandb.ai"
TABLE_COLUMNS = [
    "step",
    "split",
    "item_id",
    "group",
    "index",
    "reward",
    "independent_reward",
    "prompt",
    "completion",
]


class IntegrationWarning(UserWarning):
    """An integration was asked for but is off for this run; the message says why."""


def _warn(message: str) -> None:
    warnings.warn(message, IntegrationWarning, stacklevel=3)


def wandb_credentials() -> bool:
    """Whether a W&B API key is configured (environment or ~/.netrc), without reading it out."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or DEFAULT_WANDB_HOST).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def call_with_timeout(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run a blocking call in a daemon thread; raise TimeoutError if it has not returned in
    time (the thread is abandoned: it cannot block the run or the interpreter's exit)."""
    values: list[Any] = []  # the call's result, once it returns
    errors: list[BaseException] = []  # or what it raised, handed to the caller below

    def target() -> None:
        try:
            values.append(fn())
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=target, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {timeout_s:.0f}s")
    if errors:
        raise errors[0]
    return values[0] if values else None


def _reason(error: BaseException) -> str:
    first = redact_error((str(error).strip().splitlines() or [""])[0])[:200]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


Row = TypeVar("Row")  # a row of any shape: `sample` only picks rows


def numeric(row: Mapping[str, object]) -> dict[str, float]:
    """The finite numbers of a metrics row (alarms, hints and missing values dropped)."""
    return {
        k: float(v)
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def sample(rows: Sequence[Row], n: int = SAMPLE_TRAJECTORIES) -> list[Row]:
    """Up to n rows spread evenly over the list (so every group of a small step is seen)."""
    if len(rows) <= n:
        return list(rows)
    return [rows[i * len(rows) // n] for i in range(n)]


def table_row(row: Mapping[str, object]) -> list[object]:
    """A store.trajectory_rows row as the W&B table's cells: ids, rewards, prompt, completion."""
    import json

    from rlvr.inspection import last_text

    messages = json.loads(str(row["messages"])) if row.get("messages") else []
    return [
        row.get("step"),
        row.get("split"),
        row.get("item_id"),
        row.get("group"),
        row.get("index"),
        row.get("reward"),
        row.get("independent_reward"),
        last_text(messages, "user"),
        last_text(messages, "assistant"),
    ]


class Tracker:
    """Where a run reports besides its run directory. With nothing configured every method is a
    no-op and `traced` returns the function itself."""

    def __init__(self, wandb_run: Any = None, weave: Any = None) -> None:
        self._run = wandb_run
        self._weave = weave
        self._step = 0  # W&B steps never go back; later rows for an earlier step land here

    @property
    def wandb_on(self) -> bool:
        return self._run is not None

    @property
    def weave_on(self) -> bool:
        return self._weave is not None

    def _wandb_step(self, step: int) -> int:
        self._step = max(self._step, int(step))
        return self._step

    def log_step(self, row: Mapping[str, object]) -> None:
        """One metrics row; its alarms go to the W&B run summary as text."""
        if self._run is None:
            return
        numbers = numeric(row)
        step = self._wandb_step(int(numbers.pop(M.STEP, self._step)))
        alarms = {
            k: redact_text(f"step {step}: {v}")
            for k, v in row.items()
            if k.startswith(ALARM_PREFIX)
        }

        def log(run: Any) -> None:
            run.log(numbers, step=step)
            run.summary.update(alarms)

        self._guard("log", log)

    def log_trajectories(self, step: int, rows: Sequence[Mapping[str, object]]) -> None:
        """A sample of a step's trajectory rows (store.trajectory_rows) as a W&B table."""
        if self._run is None or not rows:
            return
        import wandb

        split = rows[0].get("split") or "train"
        at = self._wandb_step(step)

        def log(run: Any) -> None:
            data = [table_row(r) for r in redact_rows(sample(rows))]
            table = wandb.Table(columns=list(TABLE_COLUMNS), data=data)
            run.log({f"trajectories/{split}": table}, step=at)

        self._guard("log a table", log)

    def traced(self, fn: Callable[P, R], name: str | None = None) -> Callable[P, R]:
        """`fn` as a Weave op (inputs, output, latency and errors traced) when weave is on; an op
        is called as the function it wraps."""
        if self._weave is None:
            return fn
        op: Callable[P, R] = self._weave.op(fn, name=name) if name else self._weave.op(fn)
        return op

    def _guard(self, what: str, call: Callable[[Any], None]) -> None:
        """A W&B failure mid-run turns W&B off with one warning; the run goes on."""
        try:
            call(self._run)
        except Exception as error:
            _warn(f"W&B could not {what} ({_reason(error)}); W&B logging is off for this run")
            self._finish_wandb()

    def _finish_wandb(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            try:
                run.finish()
            except Exception as error:
                _warn(f"W&B could not finish the run ({_reason(error)})")

    def close(self) -> None:
        self._finish_wandb()
        weave, self._weave = self._weave, None
        if weave is not None:
            try:
                weave.finish()
            except Exception as error:
                _warn(f"Weave could not finish ({_reason(error)})")

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _env(**values: str) -> Iterator[None]:
    """Environment variables set for the duration of a block, then restored."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _redacted_argv() -> Iterator[None]:
    """sys.argv with credentials removed while W&B records it (its run metadata keeps the
    command line, where `key=value` overrides may carry a URL password)."""
    saved = sys.argv
    sys.argv = [redact_error(arg) for arg in saved]
    try:
        yield
    finally:
        sys.argv = saved


def _open_wandb(cfg: RunConfig, run_dir: Path | None) -> Any:
    # wandb.init starts Weave by itself whenever weave is imported; Weave is ours to start (or
    # not, with weave=false), with a timeout, so that is switched off for the call.
    try:
        import wandb
    except ImportError:
        _warn(
            f"wandb_project={cfg.wandb_project} but wandb is not installed "
            "(pip install 'rlvr[integrations]'); W&B logging is off"
        )
        return None
    mode = (os.environ.get("WANDB_MODE") or "online").lower()
    folder = os.environ.get("WANDB_DIR") or (str(run_dir) if run_dir is not None else None)
    if mode not in OFFLINE_MODES and not wandb_credentials():
        mode = "offline"
        _warn(
            "wandb_project is set but no W&B API key is configured (WANDB_API_KEY or "
            f"`wandb login`): logging offline under {folder or './wandb'}; upload it later "
            "with `wandb sync`"
        )
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
    try:
        with _env(WANDB_DISABLE_WEAVE="true"), _redacted_argv():
            return wandb.init(
                project=cfg.wandb_project,
                name=run_dir.name if run_dir is not None else None,
                config=cfg.public_dict(),
                dir=folder,
                # wandb.init's annotation omits the older names its settings accept (dryrun, run).
                mode=mode,  # type: ignore[arg-type]
                settings=wandb.Settings(console="off", init_timeout=WANDB_INIT_TIMEOUT_S),
            )
    except Exception as error:
        _warn(f"W&B could not start ({_reason(error)}); the run continues without W&B")
        return None


def _open_weave(cfg: RunConfig) -> Any:
    mode = (os.environ.get("WANDB_MODE") or "online").lower()
    if mode in OFFLINE_MODES:
        _warn(f"weave=true needs W&B online but WANDB_MODE={mode}; Weave tracing is off")
        return None
    if not wandb_credentials():
        _warn(
            "weave=true but no W&B API key is configured (WANDB_API_KEY or `wandb login`); "
            "Weave tracing is off"
        )
        return None
    try:
        import weave
    except ImportError:
        _warn("weave=true but weave is not installed (pip install weave); Weave tracing is off")
        return None
    project = cfg.wandb_project or cfg.project
    try:
        call_with_timeout(lambda: weave.init(project), WEAVE_INIT_TIMEOUT_S, "weave.init")
    except Exception as error:
        _warn(f"Weave could not start ({_reason(error)}); Weave tracing is off for this run")
        return None
    return weave


def open_tracker(cfg: RunConfig, run_dir: Path | None = None) -> Tracker:
    """The integrations `cfg` asks for; a no-op Tracker (nothing imported) when it asks for none.
    `run_dir` names the W&B run and holds its offline files unless WANDB_DIR is set."""
    return Tracker(
        wandb_run=_open_wandb(cfg, run_dir) if cfg.wandb_project else None,
        weave=_open_weave(cfg) if cfg.weave else None,
    )

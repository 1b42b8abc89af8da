"""Resident memory per phase of a run or a benchmark: a thread reads the process's resident set
size every few milliseconds and keeps the highest reading of each named phase.

The process's own high-water mark (`ru_maxrss`, rlvr.metrics.peak_rss_gb) cannot be reset, so it
says how high a run went but not in which phase; a reading a few milliseconds apart catches any
allocation large enough to matter (touching hundreds of megabytes takes longer than that).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STATUS = Path("/proc/self/status")
INTERVAL_S = 0.005
# A run's phases last seconds to minutes: a reading every 20 ms costs ~0.2 % of a core.
RUN_INTERVAL_S = 0.02

# The phases a run's rows report (a benchmark names its own too).
EVALUATION, WARM_START, ROLLOUTS, UPDATE = "evaluation", "warm_start", "rollouts", "update"


def resident_gb(status: str) -> float | None:
    """VmRSS of a /proc/<pid>/status text, in GB (1e9 bytes); None where the line is missing."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1000 / 1e9  # the kernel writes kB (KiB) there
    return None


def read_resident_gb() -> float | None:
    """This process's resident set size now, in GB; None where /proc is not readable."""
    try:
        return resident_gb(STATUS.read_text())
    except OSError:
        return None


class RssWatch:
    """Peak resident memory per phase while open: `with watch.phase("update"): ...`. A phase
    named twice keeps its higher peak (`peaks`); `take` gives a phase's peak since it was last
    taken (a run's row: this step's update, not the run's). Readings outside every phase are
    dropped."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.peaks: dict[str, float] = {}
        self._untaken: dict[str, float] = {}
        self._current: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rss-watch", daemon=True)

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: object | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _record(self) -> None:
        reading = read_resident_gb()
        with self._lock:
            if reading is not None and self._current is not None:
                for peaks in (self.peaks, self._untaken):
                    peaks[self._current] = max(peaks.get(self._current, 0.0), reading)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._record()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Readings inside are `name`'s (one at each end too, so a short phase has two); a phase
        inside another takes its readings while it lasts."""
        with self._lock:
            outer, self._current = self._current, name
        self._record()
        try:
            yield
        finally:
            self._record()
            with self._lock:
                self._current = outer

    def take(self, name: str) -> float | None:
        """`name`'s peak in GB (two decimals) since it was last taken; None where it has no
        reading since."""
        with self._lock:
            peak = self._untaken.pop(name, None)
        return None if peak is None else round(peak, 2)

    def rounded(self) -> dict[str, float]:
        """Each phase's peak in GB, two decimals."""
        with self._lock:
            return {name: round(peak, 2) for name, peak in self.peaks.items()}

"""How a process that runs rlvr's entry points ends (rlvr.lifetime.quick_teardown): its garbage is
still finalised at exit, and what is alive then is frozen before the interpreter's teardown.
Real interpreters (subprocess, not a fork: a forked child leaves through os._exit, which runs no
exit handler)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.warm import ROOT

# Registered first, so run last (atexit is last in, first out): whether the objects alive at exit
# were frozen by then.
PROBE = """
import atexit, gc, runpy, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0, flush=True))
"""

# A garbage cycle whose finaliser prints, left uncollected until exit.
GARBAGE = """
import gc
gc.disable()

class Cycle:
    def __del__(self):
        print("finalised", flush=True)

c = Cycle()
c.me = c
del c
"""

PROGRAMS = {
    "quick": "from rlvr.lifetime import quick_teardown\nquick_teardown()\n" + GARBAGE,
    "plain": GARBAGE,
    # the CLI's callback runs before any command, this one's error (exit 2) included
    "cli": "from rlvr.cli.main import app\napp(['new', '/not/a/name'])",
    "judge-server": "sys.argv = ['judges.server', '--fd', '-1']\n"
    "runpy.run_module('judges.server', run_name='__main__')",
}


@pytest.mark.parametrize(
    ("program", "frozen"),
    [("quick", True), ("plain", False), ("cli", True), ("judge-server", True)],
)
def test_an_entry_point_freezes_the_living_at_exit(program: str, frozen: bool) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE + PROGRAMS[program]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = out.stdout.splitlines()
    assert f"frozen {frozen}" in lines, (out.stdout, out.stderr[-2000:])
    if program in ("quick", "plain"):
        assert out.returncode == 0, out.stderr
        # garbage finalised: by our collection before the freeze, or by the interpreter's teardown
        assert "finalised" in lines
        assert not frozen or lines.index("finalised") < lines.index("frozen True")
    else:
        assert out.returncode != 0  # the bad path or the missing key: the handler ran all the same

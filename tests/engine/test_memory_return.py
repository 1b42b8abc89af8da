"""Freed memory goes back to the system: while sampling, the engine holds glibc's mmap threshold
low, so finished rows' key/value blocks do not stay resident as heap holes; and oneDNN's kernel
caches stop growing at a bounded number of shapes (rlvr.engine.device)."""

import json
import os
import subprocess
import sys

import pytest

# In a fresh process: free one 16 MB block (which raises glibc's own threshold to 16 MB),
# then keep every other one of 200 one-MB blocks. Only the kept 100 MB should stay resident.
PROBE = """
import json, sys, torch
from rlvr.engine.device import hold_mmap_threshold

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

for phase in sys.argv[1:]:
    hold_mmap_threshold(phase)
big = torch.ones(4 * 2**20)
del big
before = rss_mb()
blocks = [torch.ones(2**18) for _ in range(200)]
kept = blocks[::2]
del blocks
print(json.dumps({"grew_mb": rss_mb() - before, "kept": len(kept)}))
"""


@pytest.mark.parametrize(
    ("phases", "setting", "most_mb", "least_mb"),
    [
        pytest.param(("sample",), None, 140, 0, id="held-by-the-engine"),
        pytest.param(("sample", "sample"), None, 140, 0, id="held-again"),
        # The threshold follows the phase: back from training, sampling's holds again; in
        # training's (4 MB) the 1 MB blocks are heap, and the holes between kept ones stay.
        pytest.param(("sample", "train", "sample"), None, 140, 0, id="back-from-training"),
        pytest.param(("sample", "train"), None, None, 180, id="training-keeps-the-heap"),
        # A person's own MALLOC_MMAP_THRESHOLD_ is kept: at 64 MB every block is heap, and the
        # freed holes between kept blocks stay resident.
        pytest.param(("sample",), str(64 * 2**20), None, 180, id="the-persons-setting-kept"),
    ],
)
def test_freed_blocks_leave_the_process(phases, setting, most_mb, least_mb) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    if setting is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = setting
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *phases], env=env, capture_output=True, text=True, check=True
    )
    grew = json.loads(done.stdout.strip().splitlines()[-1])["grew_mb"]
    if most_mb is not None:
        assert grew < most_mb, f"{grew:.0f} MB resident after freeing half of 200 MB"
    assert grew >= least_mb, f"{grew:.0f} MB resident"


# In a fresh process: 600 packed products of distinct row counts (as prefills are), RSS taken
# after the first 300 and after the next 300. Once the caches are full, a bounded one evicts as
# much as it adds. A cached shape holds about as much (0.6 MB) with 64 output features as with
# the model's 1,536, which take 24 times the work.
KERNEL_PROBE = """
import json, os, sys, torch
from rlvr.engine.device import bound_kernel_caches
from rlvr.engine.packed_weights import pack, packed_linear, packs

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

bound_kernel_caches()
if not packs(torch.device("cpu"), torch.float32):
    print(json.dumps(None))
    sys.exit()
weight = pack(torch.randn(64, 576))
x = torch.randn(1600, 576)
marks = [rss_mb()]
for rows in range(1000, 1600):
    packed_linear(x[:rows], weight, None, torch.float32)
    if rows in (1299, 1599):
        marks.append(rss_mb())
print(json.dumps({"second_300_mb": marks[2] - marks[1], "capacity": os.environ["LRU_CACHE_CAPACITY"]}))
"""


@pytest.mark.parametrize(
    ("setting", "capacity", "bounded"),
    [
        pytest.param(None, "32", True, id="bounded-by-the-engine"),
        # A person's own capacity is kept: at oneDNN's default every new shape stays resident.
        pytest.param("1024", "1024", False, id="the-persons-setting-kept"),
    ],
)
def test_kernel_caches_stop_growing(setting, capacity, bounded) -> None:
    names = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    env = {k: v for k, v in os.environ.items() if k not in names}
    if setting is not None:
        env |= dict.fromkeys(names, setting)
    done = subprocess.run(
        [sys.executable, "-c", KERNEL_PROBE], env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if found is None:
        pytest.skip("this torch build has no oneDNN packed products")
    assert found["capacity"] == capacity
    grew = found["second_300_mb"]
    if bounded:
        assert grew < 40, f"{grew:.0f} MB more for 300 new shapes past the cap"
    else:
        assert grew > 60, f"{grew:.0f} MB for 300 new shapes under a 1,024-shape cache"

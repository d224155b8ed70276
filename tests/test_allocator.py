"""lmgrid.neural.allocator: `lmgrid train` keeps big freed blocks for reuse instead of mapping fresh pages.

What is tested is where glibc puts a block (its heap or a fresh mmap) and whether the heap keeps a freed block,
read from glibc's own bookkeeping (mallinfo2), which does not vary from run to run.  The page faults this saves
depend on the kernel and the process's history: they are a benchmark (`python -m lmgrid.bench allocator`)."""
from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys

import pytest

# In a fresh process: apply the settings (or the mutant's), then malloc and free one 16 MB block (PTB's logits are
# 28 MB, its [512 x 10,000] evaluation batches 20 MB) and report glibc's counters around it.
PROBE = """
import ctypes, ctypes.util, json, sys
from lmgrid.neural import allocator
mode = sys.argv[1]
if mode == "mmap_mutant":
    allocator.MMAP_THRESHOLD_BYTES = 128 << 10  # glibc's start value, or KiB mistaken for MiB
if mode == "trim_mutant":
    allocator.TRIM_THRESHOLD_BYTES = 128 << 10  # the heap's freed top given back at once
assert allocator.keep_freed_blocks()
class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = libc.mallinfo2()
block = libc.malloc(16 << 20)
held = libc.mallinfo2()
libc.free(block)
after = libc.mallinfo2()
print(json.dumps({"mmapped_blocks_added": held.hblks - before.hblks, "heap_after_free": after.arena}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallinfo2(),
                    reason="mallopt and mallinfo2 are glibc's (2.33 and later); elsewhere nothing is changed")
def test_big_blocks_come_from_the_heap_and_stay_there_when_freed():
    """With the settings, a 16 MB block comes from the heap (no new mmapped block) and the heap keeps it once freed,
    so the next step reuses its pages.  Negative controls, run here, the mutations they kill: the mmap threshold
    below the block's size (the block is mmapped, and unmapped when freed), and a trim threshold below it (the
    heap gives the freed block back to the system)."""
    tuned = probe("lmgrid")
    assert tuned["mmapped_blocks_added"] == 0 and tuned["heap_after_free"] >= 16 << 20, tuned
    assert probe("mmap_mutant")["mmapped_blocks_added"] == 1
    assert probe("trim_mutant")["heap_after_free"] < 16 << 20


def test_lmgrid_train_applies_it_before_training(monkeypatch, tmp_path):
    """cmd_train calls keep_freed_blocks before `run`. Negative control: the order recorded without the call
    (the mutation: the call removed) would miss it."""
    from lmgrid.neural import allocator, cli, train

    order = []
    monkeypatch.setattr(allocator, "keep_freed_blocks", lambda: order.append("allocator"))
    monkeypatch.setattr(train, "run", lambda spec, threads=0: order.append("run"))
    args = type("A", (), {"hparams": "{}", "arch": "lstm", "set": None, "fast": False, "impl": "torch", "n_step": 2,
                          "layers": 1, "regime": "window", "seed": 1, "train": "t", "valid": "v", "test": "s",
                          "vocab": "x", "run_dir": str(tmp_path), "ckpt_dir": str(tmp_path), "threads": 1,
                          "spec": None})()
    cli.cmd_train(args)
    assert order == ["allocator", "run"]
    assert order != ["run"]


def test_lmgrid_combine_applies_it_before_the_fit(monkeypatch):
    """cmd_combine calls keep_freed_blocks before EM's fit (thousands of steps of components x tokens temporaries).
    Negative control: the order recorded without the call (the mutation: the call removed) would miss it."""
    from lmgrid.neural import allocator
    from lmgrid.testtime.combine import cli, mixture, scorefile

    class Fitted(Exception):
        pass

    order = []
    monkeypatch.setattr(allocator, "keep_freed_blocks", lambda: order.append("allocator"))
    monkeypatch.setattr(scorefile, "read", lambda d, split: (d, split))

    def fit(labels, valid, test):
        order.append("combine")
        raise Fitted

    monkeypatch.setattr(mixture, "combine", fit)
    args = type("A", (), {"component": [("kn", "scores/kn"), ("rnn", "scores/rnn")]})()
    with pytest.raises(Fitted):
        cli.cmd_combine(args)
    assert order == ["allocator", "combine"]
    assert order != ["combine"]

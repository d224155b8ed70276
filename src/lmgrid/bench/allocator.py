"""python -m lmgrid.bench allocator: minor page faults of a training step's allocation pattern, with lmgrid's
malloc settings (lmgrid.neural.allocator), with glibc's untouched default, and with the mutant settings (the mmap
threshold below the blocks' size).

A step allocates three 16 MB float tensors (as PTB's logits, their log-softmax and its gradient), writes them and
frees them.  Each way runs in a fresh process.  Fault counts depend on the kernel, the C library and the process's
history, which is why they are figures here and not a test (tests/test_allocator.py checks where glibc puts the
blocks, which does not vary)."""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

STEPS = """
import resource, sys, torch
from lmgrid.neural import allocator
mode, steps = sys.argv[1], int(sys.argv[2])
if mode == "mutant":
    allocator.MMAP_THRESHOLD_BYTES = 128 << 10
if mode != "default":
    assert allocator.keep_freed_blocks()
def step():
    blocks = [torch.ones(4 << 20) for _ in range(3)]
    return sum(float(b[-1]) for b in blocks)
step()  # warm-up: the first blocks are new memory either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(steps):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
MODES = ("lmgrid", "default", "mutant")
FRESH_PAGES_PER_STEP = 3 * (16 << 20) // 4096  # three 16 MB blocks of 4 KiB pages, touched anew


def faults(mode: str, steps: int) -> int:
    out = subprocess.run([sys.executable, "-c", STEPS, mode, str(steps)], check=True, capture_output=True, text=True)
    return int(out.stdout.split()[-1])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m lmgrid.bench allocator", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="allocation steps measured per process (default 20)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per way (default 3)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        ap.error("--steps and --repeats must be at least 1")
    print(f"minor page faults over {args.steps} steps (every block mapped fresh: "
          f"{args.steps * FRESH_PAGES_PER_STEP:,}); median, min-max of {args.repeats} processes\n")
    print("| malloc settings | faults (median) | min | max |\n|---|---|---|---|")
    for mode in MODES:
        runs = [faults(mode, args.steps) for _ in range(args.repeats)]
        print(f"| {mode} | {statistics.median(runs):,.0f} | {min(runs):,} | {max(runs):,} |")
    return 0

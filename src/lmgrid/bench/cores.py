"""python -m lmgrid.bench cores: on this machine's cores, do two 1-thread training jobs finish sooner than two 2-thread
jobs run one after the other?

The question behind the workflow's default of one thread per training job (`--cores 2` then runs two at once). Each
job is vs-plain's `lmgrid train` job (LSTM 2x200, one epoch over the first `--lines` lines of PTB train, valid and
test scored) as a whole process, as a grid cell runs. Per round and precision:
- sequential: two jobs on `--cores` threads each, one after the other; the grid wall is the sum of their walls;
- concurrent: two jobs on 1 thread each, started together; the grid wall is until the later one ends.
Rounds alternate which way runs first. Printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from lmgrid.bench.vs_plain import at_least_one, exit_if_failed, lmgrid_cmd, parse_job_args, prepare, timed


def concurrent(cmds: list[list[str]], cwd: Path) -> float:
    """Wall s from starting all `cmds` together until the last one ends."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    for proc, cmd in zip(procs, cmds):
        err = proc.communicate()[1]  # read to the end before the exit code: a full pipe would block the child
        exit_if_failed("cores", cmd, proc.returncode, err)
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench cores", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=at_least_one, default=2)
    p.add_argument("--cores", type=at_least_one, default=os.cpu_count() or 2, help="threads of a sequential job")
    a = parse_job_args(p, argv, "each timed both ways")
    print(f"two lmgrid train jobs (LSTM 2x200, first {a.lines} lines of PTB train); {a.rounds} rounds; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    work = Path(tempfile.mkdtemp(prefix="lmgrid-cores-"))
    walls: dict[tuple[str, str], list[float]] = {}
    try:
        files = prepare(Path(a.ptb_dir), work, a.lines)
        for rnd in range(a.rounds):
            for prec in a.precision:
                ways = ["sequential", "concurrent"] if rnd % 2 == 0 else ["concurrent", "sequential"]
                for way in ways:
                    runs = [work / f"{way}-{rnd}-{prec}-{i}" for i in range(2)]
                    if way == "sequential":
                        wall = sum(timed(lmgrid_cmd(files, r, a.cores, prec), work, "cores")[0] for r in runs)
                    else:
                        wall = concurrent([lmgrid_cmd(files, r, 1, prec) for r in runs], work)
                    for r in runs:
                        shutil.rmtree(r, ignore_errors=True)
                    walls.setdefault((prec, way), []).append(wall)
                    print(f"round {rnd + 1}: {prec:10s} {way:10s} two jobs in {wall:6.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nmedians     two {a.cores}-thread jobs in turn   two 1-thread jobs at once   at once / in turn")
    for prec in a.precision:
        seq, conc = (statistics.median(walls[(prec, w)]) for w in ("sequential", "concurrent"))
        print(f"{prec:10s}  {seq:27.1f} s   {conc:23.1f} s   {conc / seq:17.2f}")
    print(f"load average now {os.getloadavg()[0]:.1f}")
    return 0

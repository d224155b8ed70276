#!/usr/bin/env python3
"""The calibration of `make first-run FIRST_RUN_ARGS="--avx2-emulation SHARE"`: the share of each core's time at
which this machine, its kernels capped at AVX2, runs the default pipeline as fast as a real 2-core AVX2-only CPU did.

    python3 tools/avx2_calibration.py --out docs/results/avx2_calibration [--repo .] [--parent DIR] [--keep]
                                                                                    # make avx2-calibration

The reference (REFERENCE) is the one whole default run that was timed on a real AVX2-only CPU: a fresh clone's
`make run` on a 2-core AMD EPYC with AVX2 and no AVX-512, as issue 46 reports it, at a commit whose default grid had
its 69 jobs.  This tool clones that commit (REFERENCE_COMMIT, the last before that issue's first change) beside the
repository, installs it as a new user would (first_run.fresh_env: uv's cache empty, pip's off), and times its
`make run` here with the kernels capped at AVX2 (lmgrid.neural.precision.avx2_emulation_env) and no CPU quota: the
same work, the same kernels' ISA, so what is left between the two times is the cores' speed.  SHARE is this run's
seconds over the reference's, rounded down to two decimals (a smaller share emulates a slower CPU, so the rounding
errs towards slower); at most 1, since a machine slower than the reference needs no quota to bound it.

Only `make run` is compared: the install's time is mostly the network's (and that commit installed with pip).  It
writes OUT/calibration.json (both runs, the share) and OUT/run.json (the run's commit, date and machine, as a docs
snapshot names them), for `lmgrid docs` to render (docs_tables.avx2_calibration).  It prints figures and asserts
nothing; load on this machine makes its run slower and so its share larger (a milder emulation): run it idle.
Standard library only, like tools/first_run.py, whose clone, caches and timing it uses.  Exit status: 0 when both
steps passed (the clone removed unless --keep), 1 when one failed (the clone kept), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import first_run  # noqa: E402
from lmgrid.neural.precision import avx2_emulation_env  # noqa: E402

# The last commit before issue 46's first change (a67462b, train.budget_tokens); its default grid has the 69 jobs the
# issue's timed run had.
REFERENCE_COMMIT = "23986ddc0f3abb9cca4a1494c025db51921dad13"
# Issue 46, item 5: "measured here on a fresh clone: 12 min 45 s, pipeline 9 min 37 s, with 69 jobs", on the
# 2-core AMD EPYC with AVX2 only that the other AVX2 figures come from.
REFERENCE = {"source": "issue 46, item 5", "cpu": "AMD EPYC", "isa": "avx2-only", "avx512_bf16": False,
             "cores": 2, "jobs": 69, "total_s": 12 * 60 + 45, "run_s": 9 * 60 + 37}
CALIBRATION_FILE = "calibration.json"
RUN_FILE = "run.json"  # lmgrid.analysis.docs_snapshot.RUN_FILE (that module needs pandas)
MACHINE_KEYS = ("cpu", "avx512_bf16", "cores")  # run.json's `machine`: lmgrid.common.machine's, read once by cpu()


def share_of(here_s: float, reference_s: float) -> float:
    """Each core's share of its time that makes this machine as slow as the reference: here / reference, rounded
    down to two decimals, at most 1."""
    return min(1.0, math.floor(100 * here_s / reference_s) / 100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/avx2_calibration.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the folder of calibration.json and run.json")
    ap.add_argument("--repo", type=Path, default=Path("."), help="the repository holding the reference commit")
    ap.add_argument("--parent", type=Path, help="where the clone goes (default: beside the repository)")
    ap.add_argument("--keep", action="store_true", help="keep the clone, its venv, cache and logs")
    args = ap.parse_args(argv)
    repo, parent = first_run.repo_and_parent(ap, args)
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out}: not a folder")
    if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{REFERENCE_COMMIT}^{{commit}}"],
                      capture_output=True).returncode:
        ap.error(f"--repo {args.repo}: has no commit {REFERENCE_COMMIT[:10]} (the reference run's)")
    try:
        work = first_run.clone(repo, parent, at=REFERENCE_COMMIT, prefix="lmgrid-avx2-calibration.")[0]
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"avx2-calibration: error: could not clone {repo} under {parent}: {e}", file=sys.stderr)
        return 1
    env = {**first_run.fresh_env(work.parent / "caches"), **avx2_emulation_env()}
    here = {"commit": REFERENCE_COMMIT, **first_run.cpu(), "kernels": "avx2"}
    for step in first_run.STEPS:
        here[f"{step}_s"], rc = first_run.timed(step, work, env)
        if rc:
            print(f"avx2-calibration: error: `make {step}` exited {rc} after {here[f'{step}_s']} s; its log: "
                  f"{work / f'first_run.{step}.log'} (the clone is kept)", file=sys.stderr)
            return 1
    share = share_of(here["run_s"], REFERENCE["run_s"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / CALIBRATION_FILE).write_text(json.dumps(
        {"reference": {**REFERENCE, "commit": REFERENCE_COMMIT}, "here": here, "cpu_share": share}, indent=2) + "\n")
    (args.out / RUN_FILE).write_text(json.dumps(
        {"name": args.out.name, "corpus": "synth", "commit": REFERENCE_COMMIT[:10], "dirty": False,
         "date": datetime.date.today().isoformat(), "machine": {k: here[k] for k in MACHINE_KEYS},
         "kind": "avx2-calibration"}, indent=2)
        + "\n")
    print(f"avx2-calibration: the reference commit's make run took {here['run_s']} s here ({here['cpu']}, kernels "
          f"capped at AVX2) against {REFERENCE['run_s']} s on the AVX2-only CPU: --avx2-emulation {share:g}")
    if not args.keep:
        shutil.rmtree(work.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())

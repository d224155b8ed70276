#!/usr/bin/env python3
"""A new user's first run, timed: the README's quick start on a fresh clone with empty package caches.

    python3 tools/first_run.py [--repo .] [--parent DIR] [--keep] [--json PATH] [--snapshot DIR]   # make first-run

It clones the repository's HEAD into a new folder under --parent (default: the folder beside the repository, whose
disk already holds one virtual environment), links `shared/` beside the clone when the repository has `../shared`,
points uv's cache at a new empty folder and turns pip's off (`PIP_NO_CACHE_DIR=1`), then runs `make setup` and
`make run` there, each timed by its wall clock.  It prints the two times, their sum and the machine (the CPU model,
its vector ISA, whether it has avx512_bf16, its cores), and writes the same as one JSON object to
`results/first_run.json` in the clone (and to --json).  --snapshot DIR then takes the docs snapshot of the clone's
run (`lmgrid docs --from results/<corpus> --snapshot DIR`, the clone's lmgrid), which carries those figures, so the
docs render the install-included time of the very run they show.

This is the measurement the project's target for the quick start is read from (at most 8 minutes, install included, on
a 2-core AVX2-only CPU): one command on the machine in question, so nobody times it by hand. It prints figures and
asserts nothing; the network's speed, the load and the CPU all enter them. Only the committed HEAD is measured:
uncommitted changes are named in a warning and left out.

It runs before any virtual environment exists, so it uses the standard library and lmgrid's own modules that need
nothing else (the machine, the CPU flags, the ISA ranking), from this source tree's src/. Exit status: 0 when both
steps passed (the clone is removed unless --keep), 1 when one failed (the clone and its logs are kept; one line names
the step and its log), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# lmgrid's own standard-library modules, from the source tree this tool sits in (no venv needed).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from lmgrid.bench.peak import fp32_lanes  # noqa: E402
from lmgrid.common.gitinfo import UNKNOWN, commit  # noqa: E402
from lmgrid.common.machine import machine  # noqa: E402
from lmgrid.neural.precision import cpu_flags  # noqa: E402

# fp32_lanes' ISA -> the name this tool records (first_run.json's `isa`; lmgrid.analysis.docs_tables.first_run).
ISA_NAMES = {"avx512f": "avx512", "avx2+fma": "avx2-only", "sse": "older"}
# The README's quick start, in order: the install, then the default pipeline with its report.
STEPS = ("setup", "run")
# The quick start's target (seconds), install included, on a 2-core AVX2-only CPU.
TARGET_S = 8 * 60


def cpu() -> dict:
    """The machine as a docs snapshot names it (lmgrid.common.machine: CPU model, avx512_bf16, cores) and its vector
    ISA (isa) from the flags lmgrid reads (lmgrid.neural.precision.cpu_flags)."""
    return {**machine(), "isa": isa(cpu_flags())}


def isa(flags: set[str]) -> str:
    """The widest fp32 SIMD of the flags, as lmgrid.bench.peak.fp32_lanes ranks them: `avx512` (AVX-512 Foundation),
    `avx2-only` (AVX2 and FMA, no AVX-512), `older`; `unknown` with no flags at all."""
    return ISA_NAMES[fp32_lanes(flags)[0]] if flags else "unknown"


def fresh_env(caches: Path) -> dict:
    """The environment of a new machine's install: uv's cache a new empty folder, pip's cache off."""
    caches.mkdir(parents=True)
    return {**os.environ, "UV_CACHE_DIR": str(caches), "PIP_NO_CACHE_DIR": "1"}


def clone(repo: Path, parent: Path) -> tuple[Path, str, bool]:
    """A fresh clone of `repo`'s HEAD in a new folder under `parent`, with `shared` linked beside it when the repo
    has `../shared`; its path, the commit and whether `repo` had uncommitted changes to tracked files."""
    head = commit(repo, short=None)
    if head["commit"] == UNKNOWN:
        raise OSError(f"git finds no HEAD in {repo}")
    top = Path(tempfile.mkdtemp(prefix="lmgrid-first-run.", dir=parent))
    work = top / repo.resolve().name
    try:
        subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
        subprocess.run(["git", "-C", str(work), "checkout", "-q", head["commit"]], check=True)
    except (OSError, subprocess.CalledProcessError):
        shutil.rmtree(top)  # no half-made clone left behind
        raise
    if (repo.resolve().parent / "shared").is_dir():
        (top / "shared").symlink_to(repo.resolve().parent / "shared")
    return work, head["commit"], head["dirty"]


def timed(step: str, work: Path, env: dict) -> tuple[int, int]:
    """`make <step>` in `work`, its output in `work/first_run.<step>.log`: wall seconds and exit status.  Whole
    seconds: a step takes minutes, and the sum of the shown parts then equals the shown total."""
    with open(work / f"first_run.{step}.log", "w") as log:
        start = time.monotonic()
        rc = subprocess.run(["make", step], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    return round(time.monotonic() - start), rc


def snapshot(work: Path, dest: Path) -> str | None:
    """`lmgrid docs --from results/<corpus> --snapshot dest` with the clone's own lmgrid (the commit measured), so
    the docs snapshot carries results/first_run.json; None when it worked, else why not, in a few words."""
    found = sorted(work.glob("results/*/summary.csv"))
    if len(found) != 1:
        return f"{len(found)} results/<corpus>/summary.csv in {work}, not one"
    cmd = [str(work / ".venv" / "bin" / "lmgrid"), "docs", "--from", str(found[0].parent), "--snapshot", str(dest)]
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    last = (r.stderr.strip().splitlines() or [""])[-1]
    return None if r.returncode == 0 else f"`lmgrid docs --snapshot {dest}` exited {r.returncode}: {last}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/first_run.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Path("."), help="the repository whose HEAD is measured")
    ap.add_argument("--parent", type=Path, help="where the fresh clone goes (default: beside the repository)")
    ap.add_argument("--keep", action="store_true", help="keep the clone, its venv, cache and logs")
    ap.add_argument("--json", type=Path, help="also write the figures here as one JSON object")
    ap.add_argument("--snapshot", type=Path, metavar="DIR",
                    help="then snapshot the clone's run into DIR (docs/results/<name>) with the figures in it")
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    if not (repo / ".git").exists():
        ap.error(f"--repo {args.repo}: not a git repository")
    parent = (args.parent or repo.parent).resolve()
    if not parent.is_dir():
        ap.error(f"--parent {parent}: no such folder")
    if args.json and not args.json.resolve().parent.is_dir():
        ap.error(f"--json {args.json}: its folder {args.json.resolve().parent} does not exist")
    try:
        work, head, dirty = clone(repo, parent)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"first-run: error: could not clone {repo} under {parent}: {e}", file=sys.stderr)
        return 1
    if dirty:
        print(f"first-run: warning: {repo} has uncommitted changes; measuring its HEAD {head[:10]} without them")
    env = fresh_env(work.parent / "caches")
    out = {"commit": head, "clone": str(work), **cpu(), "target_s": TARGET_S}
    for step in STEPS:
        out[f"{step}_s"], rc = timed(step, work, env)
        if rc:
            print(f"first-run: error: `make {step}` exited {rc} after {out[f'{step}_s']} s; its log: "
                  f"{work / f'first_run.{step}.log'} (the clone is kept)", file=sys.stderr)
            return 1
    out["total_s"] = sum(out[f"{s}_s"] for s in STEPS)
    figures = json.dumps(out, indent=2) + "\n"
    # beside the corpora, where a docs snapshot of this run finds it (lmgrid.analysis.docs_snapshot.FIRST_RUN_FILE)
    (work / "results").mkdir(exist_ok=True)
    (work / "results" / "first_run.json").write_text(figures)
    print(f"first-run at {head[:10]} on {out['cpu']} ({out['isa']}, avx512_bf16: "
          f"{'yes' if out['avx512_bf16'] else 'no'}, {out['cores']} cores): make setup {out['setup_s']} s, "
          f"make run {out['run_s']} s, together {out['total_s']} s (the target: {TARGET_S} s on 2 "
          f"AVX2-only cores)")
    if args.json:
        args.json.write_text(figures)
    if args.snapshot:
        failed = snapshot(work, args.snapshot.resolve())
        if failed:
            print(f"first-run: error: {failed} (the clone is kept)", file=sys.stderr)
            return 1
        print(f"first-run: snapshot of the run in {args.snapshot}")
    if not args.keep:
        shutil.rmtree(work.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())

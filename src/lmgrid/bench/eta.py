"""python -m lmgrid.bench eta: how close `lmgrid plan`'s wall estimate comes to the measured wall of the run.

A tiny synthetic n-gram grid is run to the end (the look-alikes), its report built as `make run` would.  Then a new
study with other n_step values is planned (`lmgrid plan`, whose estimate comes from the look-alikes' benchmark
files) and run, pipeline then report, and the measured wall is printed beside the estimate.  The ratio depends on
the machine's load and on how alike the jobs really are, so it is a figure, not a test: the estimate's arithmetic is
tested with planted durations (tests/test_progress.py)."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

SNAKEFILE = Path(__file__).resolve().parents[3] / "Snakefile"
CONFIG = {
    "corpus": {"name": "tiny", "kind": "synth",
               "synth": {"seed": 2, "sentences": {"train": 400, "valid": 60, "test": 60},
                         "grammar": {"nouns": 30, "adjectives": 10, "intransitive_verbs": 10,
                                     "transitive_verbs": 10, "adverbs": 5}}},
    "vocab": {"min_count": 1},
    "studies": {"ctx": {"arch": ["addk", "mkn"], "n_step": [2, 3]}},
}
NEW_STUDY = "studies={ctx: {arch: [addk, mkn], n_step: [2, 3]}, more: {arch: [addk, mkn], n_step: [4, 5]}}"


def _snakemake(workdir: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(workdir), "--cores", "2", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LMGRID_REPORT": "0"})
    if r.returncode != 0:
        raise SystemExit(f"bench eta: snakemake failed: {r.stderr.strip().splitlines()[-1:]}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m lmgrid.bench eta", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    from lmgrid.analysis.report import build

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
        _snakemake(workdir)
        if (err := build(SNAKEFILE, workdir, [], [])) is not None:
            raise SystemExit(f"bench eta: {err}")
        plan = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--set", NEW_STUDY, "--cores", "2"],
                              cwd=workdir, capture_output=True, text=True, check=True).stdout
        m = re.search(r"~(?:(\d+) min )?(\d+) s wall on \d+ cores", plan)
        if not m:
            raise SystemExit("bench eta: lmgrid plan printed no wall estimate")
        estimate_s = 60 * int(m[1] or 0) + int(m[2])
        t0 = time.perf_counter()
        _snakemake(workdir, "--config", f"set={NEW_STUDY}")
        if (err := build(SNAKEFILE, workdir, [], [f"set={NEW_STUDY}"])) is not None:
            raise SystemExit(f"bench eta: {err}")
        wall_s = time.perf_counter() - t0
    print(f"| plan's estimate | measured wall | estimate / wall |\n|---|---|---|\n"
          f"| {estimate_s} s | {wall_s:.1f} s | {estimate_s / wall_s:.2f} |")
    return 0

"""Training start-up: process start to the first training step, and the per-job overhead of a finished run.

    python -m lmgrid.bench startup [--results results/synth] [--repeat 3]

1. `lmgrid train` on the corpus of a finished default run (its corpus/ and vocab.json), timed from just before the
   process is started to its first training step (the job writes the wall clock then, via LMGRID_FIRST_STEP_FILE),
   twice: as its own process (imports torch and Lightning itself) and as a job of a warm server (lmgrid.orchestration.warm).
2. The per-job overhead of that run: each training job's wall time (its Snakemake benchmark file, column `s`)
   minus its training wall time (`wall_s` in metrics.json), so it covers process start, imports and writing.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.run.record import RECORD_FILE, RunRecord


def _first_step_s(results: Path, socket_path: str | None, workdir: Path) -> float:
    stamp = workdir / "first_step.txt"
    stamp.unlink(missing_ok=True)
    env = {**os.environ, "LMGRID_FIRST_STEP_FILE": str(stamp)}
    env.pop("LMGRID_WARM_SOCKET", None)
    if socket_path:
        env["LMGRID_WARM_SOCKET"] = socket_path
    c = results / "corpus"
    cmd = [str(Path(sys.executable).with_name("lmgrid")), "train", "--arch", "lstm", "--n-step", "5",
           "--train", str(c / "train.txt"), "--valid", str(c / "valid.txt"), "--test", str(c / "test.txt"),
           "--vocab", str(results / "vocab.json"), "--run-dir", str(workdir / "run"), "--ckpt-dir",
           str(workdir / "ckpt"), "--threads", "1",
           "--hparams", json.dumps({"epochs": 1, "max_train_tokens": 2000, "log_every": 0})]
    t0 = time.time()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise LmgridError(f"lmgrid train failed: {done.stderr.strip()[-500:]}")
    return float(stamp.read_text()) - t0


def job_overheads(results: Path) -> list[tuple[str, float]]:
    """(run, job wall - training wall) for every neural run with a benchmark file."""
    out = []
    for tsv in sorted((results / "benchmarks" / "runs").rglob("*.tsv")):
        rel = tsv.relative_to(results / "benchmarks" / "runs").with_suffix("")
        metrics = results / "runs" / rel / RECORD_FILE
        if not metrics.is_file():
            continue
        record = RunRecord.read(metrics)
        if record.is_ngram:  # no training process to compare with
            continue
        with tsv.open() as fh:
            job_s = float(next(csv.DictReader(fh, delimiter="\t"))["s"])
        out.append((str(rel), job_s - record.get("wall_s")))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench startup", description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results/synth", help="a finished run's results/<corpus> folder")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    results = Path(a.results)
    if not (results / "vocab.json").is_file():
        print(f"lmgrid bench startup: {results}/vocab.json not found: run `make run` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        own = [_first_step_s(results, None, tmp) for _ in range(a.repeat)]
        sock = str(tmp / "warm.sock")
        server = subprocess.Popen([sys.executable, "-m", "lmgrid", "warm-server", "--socket", sock,
                                   "--parent-pid", str(os.getpid())], stdout=subprocess.DEVNULL)
        try:
            while not os.path.exists(sock):
                time.sleep(0.2)
            warm = [_first_step_s(results, sock, tmp) for _ in range(a.repeat)]
        finally:
            server.terminate()
            server.wait()
    print(f"start-up, process start -> first training step (lstm n5, {a.repeat} runs each):")
    print(f"  own process : median {statistics.median(own):.2f} s ({', '.join(f'{s:.2f}' for s in own)})")
    print(f"  warm server : median {statistics.median(warm):.2f} s ({', '.join(f'{s:.2f}' for s in warm)})")
    over = job_overheads(results)
    if over:
        values = [v for _, v in over]
        print(f"per-job overhead of {results} (job wall - training wall), {len(values)} training jobs: "
              f"median {statistics.median(values):.2f} s, mean {statistics.fmean(values):.2f} s, "
              f"total {sum(values):.1f} s")
    else:
        print(f"per-job overhead: no training benchmark files under {results}/benchmarks")
    return 0

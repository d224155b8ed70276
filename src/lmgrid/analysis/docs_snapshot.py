"""A docs snapshot, `docs/results/<name>/`: the few result files of one finished run that README.md and docs/ render
their numbers from (lmgrid.analysis.docs_render), and `run.json`, where and how long that run ran.

`lmgrid docs --from results/<corpus> --snapshot docs/results/<name>` writes it.  It copies the tables that exist
(SNAPSHOT_GLOBS: the summary, the reference table, the combinations, each study's tables, the embeddings and gate
tables, the equal-compute study's table and figure), writes `runs.csv` (one row per trained run: how it stopped, its
epochs, wall and CPU time, parameters, from its metrics.json) and `run.json`:
* `commit`: the git commit checked out where the results lie, when the snapshot is taken (`dirty` when that
  checkout has uncommitted changes to tracked files);
* `date`: the day the run's last job ended (UTC), from the newest benchmark file;
* `machine`: this machine's CPU model (`lscpu`), whether it has avx512_bf16, its cores: take the snapshot on the
  machine that ran the run;
* `wall_s`: the time while at least one job ran, the length of the union of the jobs' intervals, each read from its
  Snakemake benchmark file (its end is the file's modification time, its start that less the wall time it records),
  so a run stopped at a session's end and resumed in the next does not count the hours between; `span_s`: from the
  first job's start to the last job's end, pauses included; `resumptions`: the gaps longer than RESUME_GAP_S with no
  job running (a stop and a resume, most likely); `job_wall_s`: the jobs' wall times summed;
* `train_cpu_s`: the training runs' own process CPU time (metrics.json `cpu_s`, a resumed run's attempts included)
  summed; `train_cpu_last_attempt_only` (a resumed run only): how many of its models were recorded before
  metrics.json carried earlier attempts over (no `attempts` field), so that each counts its last process only; `jobs_cpu_s`: the other
  jobs' CPU time from their benchmark files (a training job's benchmark measures only the client that handed it to
  the warm server, lmgrid.orchestration.warm, so its CPU is taken from metrics.json instead);
* `report_wall_s`: the HTML report's wall time (results/benchmarks/report.tsv, `make run`'s last step), when it
  ended after the run's last job;
* `first_run.json`, when `make first-run` (tools/first_run.py) made the run: the fresh clone's `make setup` and
  `make run` wall times and its CPU, copied from `results/first_run.json` when that names the same commit (and is
  not an emulated run's);
* `first_run_avx2.json`, the same commit's quick start timed under the AVX2-only emulation (`make first-run
  FIRST_RUN_ARGS="--avx2-emulation SHARE --json docs/results/<name>/first_run_avx2.json"`, after the snapshot):
  not copied from anywhere, but kept when the snapshot is taken again if it names the new run's commit, dropped if
  not, so a re-snapshot never shows a stale emulated figure.
Nothing in it is typed by hand.
"""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pandas as pd

from lmgrid.analysis.collect import read_benchmark
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write, read_json, write_json
from lmgrid.common.gitinfo import commit
from lmgrid.common.machine import machine
from lmgrid.run.key import NGRAM_ARCHS
from lmgrid.run.record import RECORD_FILE, RunRecord

# The result files the docs render from, relative to results/<corpus>/ (those that exist are copied).
SNAPSHOT_GLOBS = ("summary.csv", "reference.csv", "combine/*.csv", "studies/*/table.csv",
                  "studies/*/*gate*.csv", "embeddings/embeddings.csv", "studies/*/embeddings.md",
                  "scales/gates.csv",
                  "budget/compute.csv", "budget/ppl_vs_compute.png")
RUN_FILE = "run.json"
RUNS_FILE = "runs.csv"
# A fresh clone's timed quick start (tools/first_run.py), written beside the corpora: copied when it names the
# commit of the results, so the docs can render the install-included time of the very run they show.
FIRST_RUN_FILE = "first_run.json"
# The same commit's quick start under tools/first_run.py --avx2-emulation, written into the snapshot with --json.
FIRST_RUN_AVX2_FILE = "first_run_avx2.json"
RUNS_COLUMNS = ["name", "arch", "impl", "n_step", "layers", "regime", "seed", "params", "epochs", "best_epoch",
                "stopped_because", "wall_s", "cpu_s", "attempts", "precision", "device"]
# A snapshot is kept in the repository: refuse one that grew past this (a run folder given by mistake).
MAX_BYTES = 2 * 2**20
# A gap this long with no job running counts as a resumption: longer than Snakemake's pause between two jobs of a
# running workflow (seconds), shorter than a stop at a session's end and a start in the next.
RESUME_GAP_S = 600.0


def runs_table(results: Path) -> pd.DataFrame:
    rows = []
    for path in sorted(results.glob(f"runs/**/{RECORD_FILE}")):
        r = RunRecord.read(path)
        rows.append({k: (getattr(r, k) if k in ("name", "arch", "impl", "n_step", "layers", "regime", "seed",
                                                "params") else r.get(k)) for k in RUNS_COLUMNS})
    return pd.DataFrame(rows, columns=RUNS_COLUMNS)


def busy(spans: list[tuple[float, float]], gap_s: float = RESUME_GAP_S) -> tuple[float, float, int]:
    """(seconds while at least one span ran, first start to last end, gaps of more than gap_s with none running)."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    gaps = [b[0] - a[1] for a, b in zip(merged, merged[1:])]
    return (sum(e - s for s, e in merged), merged[-1][1] - merged[0][0], sum(g > gap_s for g in gaps))


def timing(results: Path, runs: pd.DataFrame) -> dict:
    """The run's wall and CPU time from its benchmark files and its runs' metrics.json (module docstring)."""
    spans, job_wall, jobs_cpu = [], 0.0, 0.0
    for path in sorted(results.glob("benchmarks/**/*.tsv")):
        b = read_benchmark(path)
        if "wall_s" not in b:
            continue
        end = path.stat().st_mtime
        spans.append((end - b["wall_s"], end))
        job_wall += b["wall_s"]
        if not path.relative_to(results / "benchmarks").parts[0] == "runs":
            jobs_cpu += b.get("cpu_s", 0.0)
    if not spans:
        raise LmgridError(f"{results}/benchmarks: no benchmark file; is this a finished run's results/<corpus>?")
    end = max(e for _, e in spans)
    wall_s, span_s, resumptions = busy(spans)
    out = {"date": dt.datetime.fromtimestamp(end, dt.timezone.utc).date().isoformat(),
           "wall_s": round(wall_s, 1), "span_s": round(span_s, 1), "resumptions": resumptions,
           "job_wall_s": round(job_wall, 1), "jobs": len(spans),
           "train_cpu_s": round(float(runs["cpu_s"].fillna(0).sum()), 1), "jobs_cpu_s": round(jobs_cpu, 1)}
    # A run recorded before metrics.json carried a resumed run's earlier attempts (no `attempts`) counts only its
    # last process; in a resumed run such models make train_cpu_s a lower bound, which the docs then say.  An n-gram
    # model has no attempts to carry (one process, no checkpoint): never one of them.
    if resumptions:
        neural = ~runs["arch"].isin(NGRAM_ARCHS)
        out["train_cpu_last_attempt_only"] = int((neural & runs["cpu_s"].notna() & runs["attempts"].isna()).sum())
    # `make run`'s last step, the HTML report, records its wall time beside the corpora (one file for every corpus):
    # it is this run's when it ended after the run's last job.
    report = results.parent / "benchmarks" / "report.tsv"
    if report.is_file() and report.stat().st_mtime >= end and "wall_s" in (b := read_benchmark(report)):
        out["report_wall_s"] = round(b["wall_s"], 1)
    return out


def same_commit(figures: dict, run_commit: str) -> bool:
    """Whether a first run's figures (their full `commit`) are of the run of `run_commit` (run.json's, 10 digits)."""
    return bool(run_commit) and str(figures.get("commit", "")).startswith(run_commit)


def snapshot(results: str | Path, out: str | Path) -> list[Path]:
    """Copy the rendered-from files of results/<corpus> into `out` (replacing what was there) and write run.json."""
    results, out = Path(results), Path(out)
    if not (results / "summary.csv").is_file():
        raise LmgridError(f"--from {results}: no summary.csv; give a finished run's results/<corpus> folder")
    files = sorted({p for pattern in SNAPSHOT_GLOBS for p in results.glob(pattern) if p.is_file()})
    size = sum(p.stat().st_size for p in files)
    if size > MAX_BYTES:
        raise LmgridError(f"--from {results}: {size / 2**20:.1f} MiB of tables, over the {MAX_BYTES // 2**20} MiB a "
                          "snapshot may hold")
    runs = runs_table(results)
    run = {"name": out.name, "corpus": results.name, **commit(results), **timing(results, runs),
           "machine": machine(), "runs": len(runs)}
    # the emulated first run written into the snapshot stays only when it is of the new run's commit
    avx2 = out / FIRST_RUN_AVX2_FILE
    kept = avx2.read_bytes() if avx2.is_file() and same_commit(read_json(avx2), run["commit"]) else None
    if out.exists():
        shutil.rmtree(out)
    written = []
    for p in files:
        dest = out / p.relative_to(results)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest)
        written.append(dest)
    with atomic_write(out / RUNS_FILE) as fh:
        runs.to_csv(fh, index=False)
    first = results.parent / FIRST_RUN_FILE
    if first.is_file() and same_commit(figures := read_json(first), run["commit"]) and not figures.get("emulation"):
        shutil.copyfile(first, out / FIRST_RUN_FILE)
        written.append(out / FIRST_RUN_FILE)
    if kept is not None:
        out.mkdir(parents=True, exist_ok=True)
        avx2.write_bytes(kept)
        written.append(avx2)
    write_json(out / RUN_FILE, run)
    return [*written, out / RUNS_FILE, out / RUN_FILE]

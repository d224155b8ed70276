"""`lmgrid status` and `lmgrid plan`: where a grid stands and what the rest costs, from Snakemake's own view.

Which jobs are left comes from a dry run of the workflow as configured (lmgrid.orchestration.dryrun: the same CONFIG/SET as the
run), so a cell is pending whenever Snakemake would run it (missing output, changed params, code or inputs) and
shows Snakemake's reason.  A cell Snakemake would not run is done.  Of the cells it would run, one is running when
its training writes progress.json (in its checkpoint folder) from a live process, or its job log changed in the
last minute; failed when its log holds an error and nothing runs; otherwise pending.  What is left is estimated
for every pending job, the summary, the aggregation, the MLflow sync and the report included (lmgrid.orchestration.eta).
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from lmgrid.orchestration.dryrun import Job, Plan, dry_run
from lmgrid.orchestration.eta import REPORT_RULE, Task, estimate_s, finished_cells, read_wall_s, rule_estimate, wall_s
from lmgrid.common.errors import LmgridError
from lmgrid.common.units import duration_text
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.run.key import RunKey, all_runs, expand_study

RECENT_S = 60.0  # a log written this recently belongs to a running job (n-gram jobs write no progress.json)


@dataclass
class Cell:
    key: RunKey
    state: str  # done | running | failed | pending
    detail: str = ""
    spent_s: float = 0.0  # job wall seconds so far (done: from the benchmark file)
    left_s: float | None = None  # estimate for running and pending cells; None when nothing to go by
    least_left_s: float = 0.0  # running: what the current epoch still takes
    valid_ppl: float | None = None  # done: the run's results (metrics.json)
    test_ppl: float | None = None


def _record(key: RunKey, corpus: str) -> RunRecord | None:
    """A finished run's record (metrics.json); None when it cannot be read: the status of a whole grid shows that
    cell without its PPLs rather than stop at one file (the study tables name the file and field)."""
    try:
        return RunRecord.read(Path(key.run_dir(corpus)) / RECORD_FILE)
    except (OSError, LmgridError):
        return None


def _log_path(key: RunKey, corpus: str) -> Path:
    return Path(key.beside(corpus, "logs/ngram" if key.is_ngram else "logs/train", ".log"))


def benchmark_s(key: RunKey, corpus: str) -> float | None:
    """The job's wall seconds from its Snakemake benchmark file (None when it has none)."""
    return read_wall_s(key.beside(corpus, "benchmarks/runs", ".tsv"))


def _alive(progress: dict) -> bool:
    if progress.get("host") == socket.gethostname():
        try:
            os.kill(int(progress["pid"]), 0)
            return True
        except (OSError, ValueError, KeyError):
            return False
    return time.time() - progress.get("updated_at", 0) < RECENT_S  # another node: trust a fresh file


def _log_error(log: Path) -> str | None:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    errors = [line for line in lines if line.startswith("lmgrid: error:") or line.startswith("Traceback")]
    return (errors[-1] if errors[-1].startswith("lmgrid") else lines[-1]).strip() if errors else None


def _log_running(log: Path, benchmark: Path) -> bool:
    """A job log written in the last minute, after the job's last benchmark file (written when a job ends), and
    without an error."""
    try:
        written = log.stat().st_mtime
    except OSError:
        return False
    ended = benchmark.stat().st_mtime if benchmark.exists() else 0.0
    return time.time() - written < RECENT_S and written > ended and not _log_error(log)


def _running_detail(progress: dict) -> tuple[str, float, float]:
    """'epoch 3/40 (61%), valid PPL 19.20, epoch ends in ~4 s' and the seconds to the epoch cap at most."""
    now = time.time()
    batch, batches = progress.get("batch", 0), max(progress.get("batches") or 1, 1)
    in_epoch = now - progress.get("epoch_started_at", now)
    epoch_s = progress.get("last_epoch_s") or (in_epoch * batches / batch if batch else math.nan)
    epoch_left = max(epoch_s - in_epoch, 0.0) if batch < batches else 0.0
    left_epochs = progress.get("max_epochs", 0) - progress.get("epoch", 0)
    ppl = progress.get("valid_ppl")
    text = (f"epoch {progress.get('epoch')}/{progress.get('max_epochs')} ({100 * batch / batches:.0f}%), "
            f"valid PPL {ppl:.2f}" if ppl else f"epoch {progress.get('epoch')}/{progress.get('max_epochs')} "
            f"({100 * batch / batches:.0f}%), no valid PPL yet")
    if math.isfinite(epoch_s):
        text += f", epoch ends in ~{fmt_s(epoch_left)}, at most ~{fmt_s(epoch_left + left_epochs * epoch_s)} " \
                "to the epoch cap (the schedule usually ends it sooner)"
        return text, epoch_left + left_epochs * epoch_s, epoch_left
    return text, math.nan, 0.0


def cell_state(key: RunKey, corpus: str, job: Job | None) -> Cell:
    """The state of one cell; `job` is its pending job in the dry run (None: Snakemake would not run it)."""
    if job is None:
        spent = benchmark_s(key, corpus)
        record = _record(key, corpus)
        if spent is None:
            spent = record.get("wall_s", 0.0) if record else 0.0
        return Cell(key, "done", spent_s=spent or 0.0, valid_ppl=record.valid.ppl if record else None,
                    test_ppl=record.test.ppl if record else None)
    log = _log_path(key, corpus)
    progress_path = Path(key.beside(corpus, "ckpt/runs")) / "progress.json"
    progress = None
    if progress_path.is_file():
        try:
            progress = json.loads(progress_path.read_text())
        except (OSError, json.JSONDecodeError):
            progress = None
    if progress and _alive(progress):
        detail, left, epoch_left = _running_detail(progress)
        started = progress.get("started_at") or progress.get("epoch_started_at") or time.time()
        return Cell(key, "running", detail, spent_s=max(time.time() - started, 0.0),
                    left_s=left if math.isfinite(left) else None, least_left_s=epoch_left)
    if _log_running(log, Path(key.beside(corpus, "benchmarks/runs", ".tsv"))):
        return Cell(key, "running", "started")
    error = _log_error(log) if log.exists() else None
    if error:
        return Cell(key, "failed", f"{error} (log: {log}); {job.reason}")
    if progress:
        return Cell(key, "pending", f"{job.reason}; interrupted at epoch {progress.get('epoch')}: resumes from its "
                                    "checkpoint")
    return Cell(key, "pending", job.reason)


@dataclass
class Left:
    """What is left: cells and other jobs, their job seconds, and the wall time on the cores."""
    job_s: float
    wall_s: float
    cores: int
    unknown: int  # cells with nothing finished to estimate from
    others: list[tuple[str, str, float, str]]  # (job, reason, seconds, where the seconds come from)


def grid_status(config: dict, plan: Plan) -> list[Cell]:
    corpus = config["corpus"]["name"]
    pending = plan.cells()
    cells = [cell_state(key, corpus, pending.get(key)) for key in all_runs(config["studies"])]
    finished = finished_cells(corpus)
    elsewhere = None
    for c in cells:
        if c.state == "running" and c.left_s is not None:
            # The epoch cap bounds a running cell; finished cells like it usually say it ends sooner.
            like = estimate_s(c.key, finished)
            c.left_s = min(c.left_s, max(like - c.spent_s, c.least_left_s)) if like is not None else c.left_s
        elif c.state == "running":
            like = estimate_s(c.key, finished)
            c.left_s = max(like - c.spent_s, 0.0) if like is not None else None
        if c.state in ("pending", "failed"):
            c.left_s = estimate_s(c.key, finished)
            if c.left_s is None:
                elsewhere = finished_cells(corpus, here=False) if elsewhere is None else elsewhere
                c.left_s = estimate_s(c.key, elsewhere)
    return cells


def left(config: dict, cells: list[Cell], plan: Plan, cores: int, startup: bool = False) -> Left:
    """Every pending job's seconds (cells from `cells`, the others by rule) and their wall time on `cores`; the
    report follows when anything is left; `startup` adds the DAG building a run begins with."""
    corpus = config["corpus"]["name"]
    state = {c.key: c for c in cells}
    tasks, others = [], []
    for job in plan.jobs:
        cell = state.get(job.key) if job.key is not None else None
        if cell is not None:
            tasks.append(Task(cell.key.name, cell.left_s, job.threads, job.deps, cell.state == "running"))
            continue
        seconds, source = rule_estimate(job.rule, corpus, job.last_s, job.wildcards)
        tasks.append(Task(job.rule, seconds, job.threads, job.deps))
        others.append((job.rule, job.reason, seconds, source))
    if not tasks:
        return Left(0.0, 0.0, cores, 0, [])
    seconds, source = rule_estimate(REPORT_RULE, corpus)
    tasks.append(Task(REPORT_RULE, seconds, 1, list(range(len(tasks)))))
    others.append((REPORT_RULE, "rebuilt after every run", seconds, source))
    unknown = sum(t.seconds is None for t in tasks)
    job_s = sum(t.seconds or 0.0 for t in tasks)
    return Left(job_s, wall_s(tasks, cores) + (plan.dag_s if startup else 0.0), cores, unknown, others)


fmt_s = duration_text  # the one spelling of a duration (lmgrid.common.units)


def _left_text(rest: Left) -> str:
    if not rest.others and not rest.job_s:
        return "nothing left"
    text = f"~{fmt_s(rest.job_s)} of job time, ~{fmt_s(rest.wall_s)} wall on {rest.cores} cores"
    if rest.unknown:
        text += f"; {rest.unknown} cell(s) with nothing finished to estimate from"
    return text


def _others_table(rest: Left) -> str:
    import pandas as pd

    return pd.DataFrame([{"job": job, "why": why, "estimate": "~" + fmt_s(s), "from": source}
                         for job, why, s, source in rest.others]).to_markdown(index=False)


def _fmt_ppl(ppl: float | None) -> str:
    return "" if ppl is None else f"{ppl:,.2f}"


def format_status(config: dict, cells: list[Cell], rest: Left) -> str:
    import pandas as pd

    counts = {s: sum(c.state == s for c in cells) for s in ("done", "running", "failed", "pending")}
    table = pd.DataFrame([{"run": c.key.name, "state": c.state, "valid PPL": _fmt_ppl(c.valid_ppl),
                           "test PPL": _fmt_ppl(c.test_ppl), "spent": fmt_s(c.spent_s) if c.spent_s else "",
                           "left": fmt_s(c.left_s) if c.state != "done" else "", "detail": c.detail}
                          for c in cells])
    if not table["detail"].any():  # a finished grid: no empty column
        table = table.drop(columns=["left", "detail"])
    spent = sum(c.spent_s for c in cells)
    lines = [f"# {config['corpus']['name']}: {len(cells)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
             table.to_markdown(index=False, disable_numparse=True), ""]  # PPLs as formatted
    if rest.others:
        lines += ["Other jobs left:", _others_table(rest), ""]
    lines.append(f"time spent: {fmt_s(spent)} of job time; left: {_left_text(rest)}")
    return "\n".join(lines)


def format_plan(config: dict, cells: list[Cell], rest: Left) -> str:
    """Per study, in config order: its cells, the ones no earlier study has, and what those still cost; then each
    cell to run with Snakemake's reason, and the other jobs."""
    import pandas as pd

    state = {c.key: c for c in cells}
    seen: set[RunKey] = set()
    rows = []
    for name, study in config["studies"].items():
        keys = expand_study(study)
        new = [k for k in keys if k not in seen]
        seen.update(keys)
        todo = [state[k] for k in new if state[k].state != "done"]
        known = [c.left_s for c in todo if c.left_s is not None]
        rows.append({"study": name, "cells": len(keys), "adds": len(new), "already done": len(new) - len(todo),
                     "to run": len(todo), "job time": "" if not todo else ("~" + fmt_s(sum(known))) if known else "?",
                     "not estimated": len(todo) - len(known)})
    lines = [f"# {config['corpus']['name']}: {len(cells)} distinct cells", pd.DataFrame(rows).to_markdown(index=False)]
    todo = [c for c in cells if c.state != "done"]
    if todo:
        lines += ["", "Cells to run:", pd.DataFrame([{"run": c.key.name, "state": c.state, "why": c.detail,
                                                      "estimate": fmt_s(c.left_s)} for c in todo]).to_markdown(index=False)]
    if rest.others:
        lines += ["", "Other jobs:", _others_table(rest)]
    lines += ["", f"left: {_left_text(rest)} (with the DAG building a run starts with)",
              "Estimates: mean job time of finished cells like each one (same arch, regime, layers), from this corpus's "
              "benchmark files, else from other corpora's scaled by training tokens; other jobs from their own "
              "benchmark files."]
    return "\n".join(lines)


def main(command: str, configfiles: list[str], assignments: str, cores: int, snakefile: str | None = None) -> None:
    from lmgrid.orchestration.config import load_config
    from lmgrid.orchestration.dryrun import snakefile_path
    from lmgrid.orchestration.scales import scales_of

    snakefile = str(snakefile_path(snakefile))  # first: a folder without a Snakefile is the likeliest slip

    # A config's scales (lmgrid.orchestration.scales) run first under `make run`: each gets its own table, under its own heading.
    scales = scales_of(configfiles, assignments)
    for scale in scales:
        print(f"## scale '{scale.label}' (results/{scale.corpus}/, run first)\n")
        _one(command, list(scale.configfiles), scale.assignments, cores, snakefile)
    if scales:
        print(f"\n## this config (results/{load_config(configfiles, assignments)['corpus']['name']}/)\n")
    _one(command, configfiles, assignments, cores, snakefile)


def _one(command: str, configfiles: list[str], assignments: str, cores: int, snakefile: str | None = None) -> None:
    from lmgrid.orchestration.config import load_config

    config = load_config(configfiles, assignments)
    plan = dry_run(configfiles, assignments, cores, snakefile)
    cells = grid_status(config, plan)
    rest = left(config, cells, plan, cores, startup=command == "plan")
    print(format_status(config, cells, rest) if command == "status" else format_plan(config, cells, rest))

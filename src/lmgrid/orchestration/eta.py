"""What the rest of a run costs: every pending job's seconds, and the wall time of running them on the cores.

A grid cell is estimated by the mean job seconds (Snakemake benchmark files) of the finished cells most like it:
same arch, impl, regime, layers and n_step; else same arch, regime and layers; else same arch; else any cell of
its kind (n-gram or neural).  Cells of this corpus come first; before this corpus has finished one, other corpora's
cells are used, scaled by training tokens.  Every other job (the corpus, vocabulary, n-gram counts, summary,
aggregation, MLflow sync) and the HTML report are estimated from their own benchmark files
(results/<corpus>/benchmarks/<rule>.tsv, results/benchmarks/report.tsv), else from how long Snakemake's metadata
says their outputs took last time, else from other corpora's benchmark files, else from DEFAULT_S.  The rules with
one benchmark file per job (token_scores, adapt_scores, reset_scores, combine) read the job's own file, else the
mean of this corpus's jobs of the same rule and mode (a cache pass is not a dynamic-evaluation one).  The wall
time is a simulation of the pending jobs on the cores in dependency order, each taking its threads, running
jobs first; a `plan` also counts the DAG building a run starts with.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lmgrid.run.key import RunKey

# Seconds of a job nothing has measured yet (2 cores, the default synthetic corpus and grid).
DEFAULT_S = {"synth": 2.0, "corpus": 2.0, "vocab": 2.0, "oracle": 2.0, "ngram_counts": 5.0, "summary": 4.0,
             "aggregate": 15.0, "embeddings": 10.0, "mlflow_cells": 20.0, "mlflow_sync": 8.0,
             "report": 15.0}
REPORT_RULE = "report"  # not a Snakemake job: `make run` builds it after the workflow (lmgrid.analysis.report)
_RUN_TSV = re.compile(r"results/([^/]+)/benchmarks/runs/(\w+)/(\w+)/n(\d+)_l(\d+)_(\w+)_s(\d+)\.tsv$")


def read_wall_s(path: str | Path) -> float | None:
    """Wall seconds from a Snakemake benchmark file (None when it has none)."""
    from lmgrid.analysis.collect import read_benchmark

    return read_benchmark(path).get("wall_s")


def _train_tokens(corpus: str) -> int | None:
    try:
        return json.loads(Path(f"results/{corpus}/corpus/corpus_stats.json").read_text())["splits"]["train"]["tokens"]
    except (OSError, ValueError, KeyError):
        return None


def finished_cells(corpus: str, here: bool = True) -> dict[RunKey, float]:
    """Job seconds of every cell with a benchmark file: this corpus's (here), or the other corpora's scaled to
    this corpus by training tokens when both are known."""
    mine, out = _train_tokens(corpus), {}
    for path in sorted(Path("results").glob("*/benchmarks/runs/*/*/*.tsv")):
        m = _RUN_TSV.search(path.as_posix())
        if not m or (m[1] == corpus) != here:
            continue
        seconds = read_wall_s(path)
        if seconds:
            theirs = None if here else _train_tokens(m[1])
            key = RunKey(m[2], m[3], int(m[4]), int(m[5]), m[6], int(m[7]))
            out.setdefault(key, seconds * (mine / theirs if mine and theirs else 1.0))
    return out


def estimate_s(key: RunKey, finished: dict[RunKey, float]) -> float | None:
    """Mean job seconds of the finished cells most like `key` (see the module docstring)."""
    for like in (lambda k: (k.arch, k.impl, k.regime, k.layers, k.n_step) == (key.arch, key.impl, key.regime,
                                                                               key.layers, key.n_step),
                 lambda k: (k.arch, k.regime, k.layers) == (key.arch, key.regime, key.layers),
                 lambda k: k.arch == key.arch,
                 lambda k: k.is_ngram == key.is_ngram):
        times = [s for k, s in finished.items() if like(k)]
        if times:
            return sum(times) / len(times)
    return None


def _per_job_files(rule: str, wildcards: dict) -> tuple[str, str] | None:
    """(the job's own benchmark file, a regex its like jobs' files match) for the rules with one file per job
    (workflow/rules/combine.smk), None for the others."""
    from lmgrid.run.key import beside_runs

    if rule in ("token_scores", "adapt_scores") and "mode" in wildcards:
        own = beside_runs("benchmarks/token_scores", "_{mode}.tsv").format(**wildcards)
        return own, rf"benchmarks/token_scores/.*_s\d+_{re.escape(wildcards['mode'])}\.tsv$"
    if rule == "reset_scores" and "arch" in wildcards:  # workflow/rules/reset.smk
        return beside_runs("benchmarks/reset_scores", ".tsv").format(**wildcards), r"benchmarks/reset_scores/.*\.tsv$"
    if rule == "combine" and "combo" in wildcards:
        own = f"results/{wildcards['corpus']}/benchmarks/combine_{wildcards['combo']}.tsv"
        return own, r"benchmarks/combine_[^/]+(/s\d+)?\.tsv$"  # a combination run per seed: combine_<name>/s<seed>
    return None


def rule_estimate(rule: str, corpus: str, last_s: float | None = None,
                  wildcards: dict | None = None) -> tuple[float, str]:
    """(seconds, where they come from) for a job that is not a grid cell, or for the report."""
    from lmgrid.analysis.report import REPORT_BENCHMARK

    per_job = _per_job_files(rule, {"corpus": corpus, **(wildcards or {})})
    own = (REPORT_BENCHMARK if rule == REPORT_RULE else per_job[0] if per_job
           else f"results/{corpus}/benchmarks/{rule}.tsv")
    seconds = read_wall_s(own)
    if seconds is not None:
        return seconds, "benchmark"
    if last_s is not None:
        return last_s, "last run"
    if per_job:
        like = [s for p in sorted(Path(f"results/{corpus}/benchmarks").rglob("*.tsv"))
                if re.search(per_job[1], p.as_posix()) and (s := read_wall_s(p))]
        if like:
            return sum(like) / len(like), "like jobs"
    others = [s for p in sorted(Path("results").glob(f"*/benchmarks/{rule}.tsv")) if (s := read_wall_s(p))]
    if others:
        return sum(others) / len(others), "other corpora"
    return DEFAULT_S.get(rule, 5.0), "default"


@dataclass
class Task:
    name: str
    seconds: float | None  # None: nothing to estimate from (counted as 0 s)
    threads: int = 1
    deps: list[int] = field(default_factory=list)
    running: bool = False


def wall_s(tasks: list[Task], cores: int) -> float:
    """Wall seconds of the tasks on `cores`: each starts once the tasks it waits for are done and its threads
    are free (running tasks first, then the longest); a task asking for more threads than there are cores gets
    all of them, as Snakemake scales it down."""
    cores = max(cores, 1)
    need = [min(max(t.threads, 1), cores) for t in tasks]
    seconds = [t.seconds or 0.0 for t in tasks]
    waiting, done, running = set(range(len(tasks))), set(), []  # running: (end, index)
    now, free = 0.0, cores
    while waiting or running:
        ready = sorted((i for i in waiting if set(tasks[i].deps) <= done),
                       key=lambda i: (not tasks[i].running, -seconds[i], i))
        for i in ready:
            if need[i] <= free:
                free -= need[i]
                waiting.discard(i)
                running.append((now + seconds[i], i))
        if not running:  # waiting on something that never runs (cannot happen for a DAG): start the rest
            done = set(range(len(tasks)))
            continue
        running.sort()
        now, i = running.pop(0)
        free += need[i]
        done.add(i)
    return now

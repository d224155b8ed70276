"""`lmgrid status` and `lmgrid plan`: where a grid stands, and what it will cost, from the files runs leave.

A cell is done when its metrics.json exists; running when its training writes progress.json (in its checkpoint
folder) from a live process, or its job log changed in the last minute; failed when its log holds an error and
nothing runs; otherwise pending.  Costs come from the Snakemake benchmark files of finished cells (job wall
seconds): a pending cell is estimated by the mean of the finished cells most like it (same arch, regime and
layers; else same arch; else every finished cell), so the estimate improves as a grid runs.  Kept free of
torch: it answers in a second.
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .runkey import RunKey, all_runs, expand_study

RECENT_S = 60.0  # a log written this recently belongs to a running job (n-gram jobs write no progress.json)


@dataclass
class Cell:
    key: RunKey
    state: str  # done | running | failed | pending
    detail: str = ""
    spent_s: float = 0.0  # job wall seconds so far (done: from the benchmark file)
    left_s: float | None = None  # estimate for running and pending cells; None when nothing to go by
    least_left_s: float = 0.0  # running: what the current epoch still takes


def _log_path(key: RunKey, corpus: str) -> Path:
    return Path(key.beside(corpus, "logs/ngram" if key.is_ngram else "logs/train", ".log"))


def benchmark_s(key: RunKey, corpus: str) -> float | None:
    """The job's wall seconds from its Snakemake benchmark file (None when it has none)."""
    from .aggregate.collect import read_benchmark

    return read_benchmark(key.beside(corpus, "benchmarks/runs", ".tsv")).get("wall_s")


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


def cell_state(key: RunKey, corpus: str) -> Cell:
    run_dir = Path(key.run_dir(corpus))
    if (run_dir / "metrics.json").is_file():
        spent = benchmark_s(key, corpus)
        if spent is None:
            spent = json.loads((run_dir / "metrics.json").read_text()).get("wall_s", 0.0)
        return Cell(key, "done", spent_s=spent or 0.0)
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
    if log.exists() and time.time() - log.stat().st_mtime < RECENT_S and not _log_error(log):
        return Cell(key, "running", "started")
    error = _log_error(log) if log.exists() else None
    if error:
        return Cell(key, "failed", f"{error} (log: {log})")
    if progress:
        return Cell(key, "pending", f"interrupted at epoch {progress.get('epoch')}: resumes from its checkpoint")
    return Cell(key, "pending")


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


def _train_tokens(corpus: str) -> int | None:
    try:
        return json.loads(Path(f"results/{corpus}/corpus/corpus_stats.json").read_text())["splits"]["train"]["tokens"]
    except (OSError, ValueError, KeyError):
        return None


def finished_elsewhere(corpus: str) -> dict[RunKey, float]:
    """Benchmarks of the other corpora under results/, scaled to this corpus by training tokens when both are
    known: a first estimate before this corpus has finished anything."""
    pattern = re.compile(r"results/([^/]+)/benchmarks/runs/(\w+)/(\w+)/n(\d+)_l(\d+)_(\w+)_s(\d+)\.tsv$")
    mine, out = _train_tokens(corpus), {}
    for path in sorted(Path("results").glob("*/benchmarks/runs/*/*/*.tsv")):
        m = pattern.search(path.as_posix())
        if not m or m[1] == corpus:
            continue
        key = RunKey(m[2], m[3], int(m[4]), int(m[5]), m[6], int(m[7]))
        seconds, theirs = benchmark_s(key, m[1]), _train_tokens(m[1])
        if seconds:
            out.setdefault(key, seconds * (mine / theirs if mine and theirs else 1.0))
    return out


def grid_status(config: dict) -> list[Cell]:
    corpus = config["corpus"]["name"]
    cells = [cell_state(key, corpus) for key in all_runs(config["studies"])]
    finished = {c.key: c.spent_s for c in cells if c.state == "done" and c.spent_s}
    elsewhere = None
    for c in cells:
        if c.state == "running" and c.left_s is not None:
            # The epoch cap bounds a running cell; finished cells like it usually say it ends sooner.
            like = estimate_s(c.key, finished)
            c.left_s = min(c.left_s, max(like - c.spent_s, c.least_left_s)) if like is not None else c.left_s
        if c.state in ("pending", "failed"):
            c.left_s = estimate_s(c.key, finished)
            if c.left_s is None:
                elsewhere = finished_elsewhere(corpus) if elsewhere is None else elsewhere
                c.left_s = estimate_s(c.key, elsewhere)
    return cells


def fmt_s(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _left_text(cells: list[Cell], cores: int) -> str:
    todo = [c for c in cells if c.state != "done"]
    known = [c.left_s for c in todo if c.left_s is not None]
    unknown = len(todo) - len(known)
    if not todo:
        return "nothing left"
    text = f"~{fmt_s(sum(known))} of job time (~{fmt_s(sum(known) / max(cores, 1))} on {cores} cores)"
    if unknown:
        text += f"; {unknown} cell(s) with nothing finished to estimate from"
    return text


def format_status(config: dict, cells: list[Cell], cores: int) -> str:
    import pandas as pd

    counts = {s: sum(c.state == s for c in cells) for s in ("done", "running", "failed", "pending")}
    table = pd.DataFrame([{"run": c.key.name, "state": c.state, "spent": fmt_s(c.spent_s) if c.spent_s else "",
                           "left": fmt_s(c.left_s) if c.state != "done" else "", "detail": c.detail}
                          for c in cells])
    spent = sum(c.spent_s for c in cells)
    lines = [f"# {config['corpus']['name']}: {len(cells)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
             table.to_markdown(index=False), "",
             f"time spent: {fmt_s(spent)} of job time; left: {_left_text(cells, cores)}"]
    return "\n".join(lines)


def format_plan(config: dict, cells: list[Cell], cores: int) -> str:
    """Per study, in config order: its cells, the ones no earlier study has, and what those still cost."""
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
    lines = [f"# {config['corpus']['name']}: {len(cells)} distinct cells", pd.DataFrame(rows).to_markdown(index=False),
             "", f"left: {_left_text(cells, cores)}",
             "Estimates: mean job time of finished cells like each one (same arch, regime, layers), from this corpus's "
             "benchmark files, else from other corpora's scaled by training tokens."]
    return "\n".join(lines)


def main(command: str, configfiles: list[str], assignments: str, cores: int) -> None:
    from .config import load_config

    config = load_config(configfiles, assignments)
    cells = grid_status(config)
    print(format_status(config, cells, cores) if command == "status" else format_plan(config, cells, cores))

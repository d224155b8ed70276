"""`lmgrid status` and `lmgrid plan`: pending jobs from Snakemake's dry run; progress.json, logs and benchmark files
for the rest."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmgrid.dryrun import Job, Plan
from lmgrid.eta import Task, wall_s
from lmgrid.progress import format_plan, format_status, grid_status, left
from lmgrid.runkey import RunKey

CONFIG = {"corpus": {"name": "c"},
          "studies": {"a": {"arch": ["lstm"], "n_step": [2, 3, 5], "layers": [1], "impl": ["torch"], "seed": [1],
                            "regime": ["window"]},
                      "b": {"arch": ["lstm", "kn"], "n_step": [5], "layers": [1], "impl": ["torch"], "seed": [1],
                            "regime": ["window"]}}}
LSTM = {n: RunKey("lstm", "torch", n, 1, "window", 1) for n in (2, 3, 5)}
KN = RunKey("kn", "ngram", 5, 1, "window", 0)


def _job(key: RunKey, reason: str = "missing output", deps=()) -> Job:
    rule = "ngram" if key.is_ngram else "train_gated"
    wildcards = {"corpus": "c", "arch": key.arch, "impl": key.impl, "n_step": str(key.n_step),
                 "layers": str(key.layers), "regime": key.regime, "seed": str(key.seed)}
    return Job(rule, wildcards, reason, deps=list(deps))


# What the dry run of the fixture's grid says: every cell but the finished one, then the jobs after the cells.
PLAN = Plan([_job(LSTM[3]), _job(LSTM[5], "params changed: lr"), _job(KN)])


def _done(key: RunKey, seconds: float) -> None:
    run = Path(key.run_dir("c"))
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"wall_s": seconds}))
    bench = Path(key.beside("c", "benchmarks/runs", ".tsv"))
    bench.parent.mkdir(parents=True)
    bench.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:{int(seconds):02d}\t100\n")


@pytest.fixture()
def grid(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _done(LSTM[2], 10.0)
    # Running: progress.json from this (live) process, halfway through epoch 3 of 10, last epoch took 8 s.
    ckpt = Path(LSTM[3].beside("c", "ckpt/runs"))
    ckpt.mkdir(parents=True)
    now = time.time()
    (ckpt / "progress.json").write_text(json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(), "epoch": 3, "max_epochs": 10, "batch": 50,
        "batches": 100, "started_at": now - 20.0, "epoch_started_at": now - 4.0, "updated_at": now, "valid_ppl": 21.5, "last_epoch_s": 8.0}))
    # Failed: the job log ends with the one-line error.
    log = Path(KN.beside("c", "logs/ngram", ".log"))
    log.parent.mkdir(parents=True)
    log.write_text("counting\nlmgrid: error: counts.npz: not a count table\n")
    os.utime(log, (now - 600, now - 600))
    return tmp_path


def test_status_states_eta_and_estimates(grid):
    cells = {c.key: c for c in grid_status(CONFIG, PLAN)}
    assert cells[LSTM[2]].state == "done" and cells[LSTM[2]].spent_s == 10.0
    running = cells[LSTM[3]]
    assert running.state == "running" and "epoch 3/10 (50%)" in running.detail and "valid PPL 21.50" in running.detail
    assert re.search(r"epoch ends in ~[34] s", running.detail)  # 4 s after the fixture, less the time since
    assert running.spent_s == pytest.approx(20.0, abs=1.0)
    # At most this epoch's rest + 7 epochs to the cap (60 s); the finished lstm cell took 10 s, less than this one
    # has run already, so what is left is the rest of the current epoch.
    assert running.left_s == pytest.approx(4.0, abs=1.0)
    assert cells[KN].state == "failed" and "not a count table" in cells[KN].detail
    # Pending lstm n5: estimated from the finished lstm cell; the n-gram has nothing like it finished.
    assert cells[LSTM[5]].state == "pending" and cells[LSTM[5]].left_s == 10.0
    assert cells[LSTM[5]].detail == "params changed: lr"  # Snakemake's reason
    assert cells[KN].left_s is None
    text = format_status(CONFIG, list(cells.values()), left(CONFIG, list(cells.values()), PLAN, cores=2))
    assert "4 cells: 1 done, 1 running, 1 failed, 1 pending" in text
    assert "time spent:" in text and "1 cell(s) with nothing finished to estimate from" in text


def test_plan_counts_each_study_once(grid):
    cells = grid_status(CONFIG, PLAN)
    text = format_plan(CONFIG, cells, left(CONFIG, cells, PLAN, cores=1))
    rows = {line.split("|")[1].strip(): [p.strip() for p in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| a ") or line.startswith("| b ")}
    # a: 3 cells, 1 done; b: lstm n5 shared with a, so it adds only kn.
    assert rows["a"][:4] == ["3", "3", "1", "2"]
    assert rows["b"][:4] == ["2", "1", "0", "1"] and rows["b"][5] == "1"  # kn: nothing to estimate from


def test_progress_callback_writes_what_status_reads(tmp_path):
    from lmgrid.neural.callbacks import Progress

    path = tmp_path / "progress.json"
    cb = Progress(every=0, path=path)
    trainer = SimpleNamespace(current_epoch=1, max_epochs=5, num_training_batches=40, is_global_zero=True,
                              sanity_checking=False, should_stop=False,
                              optimizers=[SimpleNamespace(param_groups=[{"lr": 0.01}])])
    cb.on_train_epoch_start(trainer, None)
    cb._written = 0.0  # due
    cb.on_train_batch_end(trainer, SimpleNamespace(train_loss=3.0, train_count=10), None, None, 9)
    state = json.loads(path.read_text())
    assert (state["epoch"], state["max_epochs"], state["batch"], state["batches"]) == (2, 5, 10, 40)
    assert state["pid"] == os.getpid() and state["valid_ppl"] is None
    cb.on_validation_end(trainer, SimpleNamespace(train_loss=3.0, valid_loss=3.0))
    assert json.loads(path.read_text())["valid_ppl"] == pytest.approx(20.0855, rel=1e-4)


def test_status_command_reads_the_config(tmp_path, repo):
    (tmp_path / "config.yaml").write_text((repo / "config.yaml").read_text())
    r = subprocess.run([sys.executable, "-m", "lmgrid", "status", "--set", "corpus.name=nothing_yet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import yaml

    from lmgrid.runkey import all_runs

    n = len(all_runs(yaml.safe_load((repo / "config.yaml").read_text())["studies"]))
    assert f"# nothing_yet: {n} cells: 0 done, 0 running, 0 failed, {n} pending" in r.stdout
    # A --configfile is applied over config.yaml, as Snakemake does; its bad value is blamed on it.
    (tmp_path / "preset.yaml").write_text("corpus: {name: from_preset}\n")
    r = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--configfile", "preset.yaml"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"# from_preset: {n} distinct cells"), r.stderr
    (tmp_path / "bad.yaml").write_text("train: {heads: 3}\n")
    r = subprocess.run([sys.executable, "-m", "lmgrid", "status", "--configfile", "bad.yaml"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("lmgrid: error: bad.yaml: train.heads: 3 does not fit"), r.stderr
    r = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--set", "train.lrr=1"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == ("lmgrid: error: --config set: train.lrr: unknown key "
                                                      "(did you mean 'lr'?)")
